"""Preparing a training corpus of any size: read in blocks, worked on by every core, written as arrays.

Memory is bounded by a few blocks whatever the corpus size, and the output is the same byte
for byte for any number of workers: blocks are handed out and their results taken back in
corpus order, and every count is merged in that order (so ties in the truecaser and in BPE
break as they would in one pass over the corpus).  The passes over the training pairs:

1. decode (invalid UTF-8 is an error naming file and line), tokenise, apply the cleaning
   filters, and count the truecaser's evidence; each block's words go to a temporary file;
2. truecase the words (where asked) and count them, for BPE (SentencePiece learns from the
   words' files);
3. segment into subwords, drop pairs by length, count the subwords and keep provisional ids;
   where the training pairs are sampled (ctxnmt.data.sampling), also each sampled segmentation
   of the pairs the deterministic one keeps, its subwords counted into the vocabulary too;
4. with the vocabulary known, write the final ids (ctxnmt.data.indexed), and each sample's.
"""
from __future__ import annotations

import hashlib
import multiprocessing
import os
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sacremoses import MosesTruecaser

from ctxnmt.data.documents import DocumentRuns
from ctxnmt.data.indexed import ArrayWriter, id_dtype
from ctxnmt.data.preprocess import (SIDES, SidePipeline, learn_subwords, line_start_only,
                                    make_segmenter, truecase_tokens)
from ctxnmt.data.sampling import Sampler, Sampling, sample_directory, seeded
from ctxnmt.data.settings import DataConfig
from ctxnmt.data.vocab import EOS, SPECIALS, UNK, Vocab
from ctxnmt.errors import DataError

BLOCK_LINES = 20_000
MAX_LINE_BYTES = 1 << 20  # a "line" longer than this is a file that is not one sentence per line


@dataclass(frozen=True)
class Cleaning:
    """The corpus filters people apply at scale; each off by default (the papers used none)."""

    max_ratio: float = 0.0  # Moses clean-corpus-n: drop a pair whose word counts differ by more than this factor
    duplicates: bool = False  # drop a pair seen before, both sides equal
    identical: bool = False  # drop a pair whose two sides are the same text


@dataclass
class Counts:
    """What was dropped, by reason, for the log."""

    ratio: int = 0
    duplicates: int = 0
    identical: int = 0
    too_long: int = 0
    empty: int = 0


@dataclass(frozen=True)
class Job:
    """What every worker needs, set before the workers fork."""

    options: DataConfig
    paths: tuple[str, str, str | None]
    work: Path
    cleaning: Cleaning
    truecasers: dict[str, MosesTruecaser] | None = None
    codes: dict[str, str] = field(default_factory=dict)
    sampling: Sampling | None = None


_JOB: Job | None = None  # the job of the pass under way, inherited by the forked workers


@dataclass
class Block:
    number: int
    first_line: int  # 1-based line number of the block's first line
    src: list[bytes]
    tgt: list[bytes]
    doc: list[bytes] | None
    keep: np.ndarray | None = None  # from the duplicate filter, where it is on


# -- reading ---------------------------------------------------------------------------------------

def check_readable(path: str) -> None:
    """Refuse, as read_lines does, a corpus file that is missing, a directory or empty."""
    if os.path.isdir(path):
        raise DataError(f"{path}: is a directory, expected a text file")
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    if size == 0:
        raise DataError(f"{path}: file is empty")


def count_lines(path: str) -> int:
    """The lines of a file as read_blocks reads them (a last line without its newline counts)."""
    check_readable(path)
    lines, last = 0, b"\n"
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")


def check_aligned(paths: tuple[str, str, str | None]) -> None:
    """Refuse training files of different lengths before any work, as read_parallel does (a
    second of reading per gigabyte, against minutes of preparation found wasted at the end)."""
    counts = [count_lines(p) for p in paths if p]
    for other in range(1, len(counts)):
        if counts[other] != counts[0]:
            raise DataError(f"{paths[0]} has {counts[0]} lines but {paths[other]} has {counts[other]}")


def _lines(path: str) -> Iterator[bytes]:
    check_readable(path)
    with open(path, "rb") as fh:
        number = 0
        while True:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            number += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise DataError(f"{path}:{number}: a line of more than {MAX_LINE_BYTES} bytes; a corpus file holds "
                                "one sentence per line")
            yield raw


def read_blocks(paths: tuple[str, str, str | None], block_lines: int = BLOCK_LINES) -> Iterator[Block]:
    """The training files' lines in blocks, checking that they align (as read_parallel does)."""
    src_path, tgt_path, doc_path = paths
    readers = [_lines(src_path), _lines(tgt_path)] + ([_lines(doc_path)] if doc_path else [])
    number, first = 0, 1
    while True:
        rows = [[] for _ in readers]
        for _ in range(block_lines):
            got = [next(r, None) for r in readers]
            if all(g is None for g in got):
                break
            if any(g is None for g in got):
                _refuse_misaligned(paths, readers, got, first + len(rows[0]))
            for row, g in zip(rows, got):
                row.append(g)
        if not rows[0]:
            return
        yield Block(number, first, rows[0], rows[1], rows[2] if doc_path else None)
        number, first = number + 1, first + len(rows[0])


def _refuse_misaligned(paths, readers, got, line: int) -> None:
    """Count what is left of each file, to name both counts as read_parallel does."""
    counts = [line - 1 if g is None else line + sum(1 for _ in r) for r, g in zip(readers, got)]
    a, b = (0, 1) if counts[0] != counts[1] else (0, 2)
    raise DataError(f"{paths[a]} has {counts[a]} lines but {paths[b]} has {counts[b]}")


def decode(raw: bytes, path: str, number: int) -> str:
    raw = raw[:-1] if raw.endswith(b"\n") else raw
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}:{number}: invalid UTF-8 (byte 0x{raw[err.start]:02x} at column {err.start + 1})") \
            from None
    return text[:-1] if text.endswith("\r") else text


def first_occurrences(blocks: Iterable[Block]) -> np.ndarray:
    """Whether each pair is the first of its kind (8-byte digests of the raw pair: at millions of
    pairs the chance that two different pairs share one is below one in a million)."""
    digests = []
    for block in blocks:
        digests.append(np.frombuffer(b"".join(
            hashlib.blake2b(s.rstrip(b"\r\n") + b"\t" + t.rstrip(b"\r\n"), digest_size=8).digest()
            for s, t in zip(block.src, block.tgt)), dtype=np.uint64))
    digests = np.concatenate(digests) if digests else np.zeros(0, dtype=np.uint64)
    keep = np.zeros(len(digests), dtype=bool)
    keep[np.unique(digests, return_index=True)[1]] = True
    return keep


# -- the workers' passes ---------------------------------------------------------------------------

def _file(block: int, name: str) -> Path:
    return _JOB.work / f"{block:07d}.{name}"


def words_pass(block: Block) -> tuple[int, Counts, dict[str, dict[str, Counter]]]:
    """Pass 1 on one block: the kept pairs' words and document ids to temporary files, what the
    filters dropped, and each side's truecasing evidence."""
    job, counts = _JOB, Counts()
    lines = {side: [decode(raw, job.paths[i], block.first_line + n) for n, raw in enumerate(getattr(block, side))]
             for i, side in enumerate(SIDES)}
    docs = [decode(raw, job.paths[2], block.first_line + n) for n, raw in enumerate(block.doc)] if block.doc else None
    keep = block.keep if block.keep is not None else np.ones(len(lines["src"]), dtype=bool)
    counts.duplicates = int((~keep).sum())
    words = {side: [] for side in SIDES}
    casing = {side: defaultdict(Counter) for side in SIDES}
    pipelines = {side: SidePipeline(job.options.lang(side), job.options.tokenize, None, None) for side in SIDES}
    learner = line_start_only(MosesTruecaser()) if job.options.truecase else None
    kept_docs = []
    for n in np.flatnonzero(keep):
        src, tgt = lines["src"][n], lines["tgt"][n]
        if job.cleaning.identical and src == tgt:
            counts.identical += 1
            continue
        pair = {side: pipelines[side].words(text) for side, text in (("src", src), ("tgt", tgt))}
        if job.cleaning.max_ratio and _ratio_exceeded(len(pair["src"]), len(pair["tgt"]), job.cleaning.max_ratio):
            counts.ratio += 1
            continue
        for side in SIDES:
            words[side].append(" ".join(pair[side]))
            if learner is not None:
                for lower, surface, weight in learner.learn_truecase_weights(pair[side]):
                    casing[side][lower][surface] += weight
        if docs is not None:
            kept_docs.append(docs[n])
    for side in SIDES:
        _write_lines(_file(block.number, side), words[side])
    if docs is not None:
        _write_lines(_file(block.number, "doc"), kept_docs)
    return len(words["src"]), counts, casing


def _ratio_exceeded(n_src: int, n_tgt: int, ratio: float) -> bool:
    return n_src > 0 and n_tgt > 0 and (n_src / n_tgt > ratio or n_tgt / n_src > ratio)


def truecase_pass(block: int) -> dict[str, Counter]:
    """Pass 2 on one block: truecase its words in place (where asked) and count them."""
    job, counts = _JOB, {}
    for side in SIDES:
        lines = _read_lines(_file(block, side))
        if job.truecasers:
            lines = [" ".join(truecase_tokens(job.truecasers[side], line.split())) for line in lines]
            _write_lines(_file(block, side), lines)
        counts[side] = Counter(word for line in lines for word in line.split())
    return counts


Segmented = dict[str, tuple[np.ndarray, np.ndarray]]  # each side's ids and sentence lengths


def subword_pass(block: int) -> tuple[list[str], Segmented, list[Segmented]]:
    """Pass 3 on one block: each side's subwords as ids into the block's own table of subwords,
    and the same of each sampled segmentation (none where the job samples none)."""
    table: dict[str, int] = {}
    words = {side: [line.split() for line in _read_lines(_file(block, side))] for side in SIDES}
    out = {side: _table_ids(table, map(_segmenter(side).subwords, words[side])) for side in SIDES}
    samples = []
    for sample in range(_JOB.sampling.samples if _JOB.sampling else 0):
        with seeded(block, sample):
            samples.append({side: _table_ids(table, map(_sampler(side).segment, words[side])) for side in SIDES})
    return list(table), out, samples


def _table_ids(table: dict[str, int], sentences: Iterable[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """The sentences' subwords as ids into `table` (growing it), and their lengths."""
    ids, lens = [], []
    for pieces in sentences:
        lens.append(len(pieces))
        ids.extend(table.setdefault(p, len(table)) for p in pieces)
    return np.asarray(ids, dtype=np.int32), np.asarray(lens, dtype=np.int64)


_SEGMENTERS: dict[str, SidePipeline] = {}
_SAMPLERS: dict[str, Sampler] = {}


def _segmenter(side: str) -> SidePipeline:
    """The worker's segmenter of a side, made once: its cache of segmented words lives across blocks."""
    if side not in _SEGMENTERS:
        codes = _JOB.codes
        _SEGMENTERS[side] = SidePipeline(_JOB.options.lang(side), False, None,
                                         make_segmenter(_JOB.options, codes.get("joint", codes.get(side))))
    return _SEGMENTERS[side]


def _sampler(side: str) -> Sampler:
    """The worker's sampler of a side, on a subword model of its own (see Sampler)."""
    if side not in _SAMPLERS:
        codes = _JOB.codes
        _SAMPLERS[side] = Sampler(make_segmenter(_JOB.options, codes.get("joint", codes.get(side))), _JOB.sampling)
    return _SAMPLERS[side]


def _write_lines(path: Path, lines: list[str]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.writelines(line + "\n" for line in lines)


def _read_lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8", newline="\n") as fh:
        return fh.read().split("\n")[:-1]


def _block_lines(work: Path, blocks: int, sides: tuple[str, ...]) -> Iterator[str]:
    """The words' lines of `sides`, side by side, each in corpus order, one block in memory at a time."""
    for side in sides:
        for block in range(blocks):
            yield from _read_lines(work / f"{block:07d}.{side}")


def ordered_map(function: Callable, items: Iterable, workers: int, ahead: int = 2) -> Iterator:
    """function(item) for each item, in order, on `workers` forked processes, with at most
    `ahead` items per worker read ahead (so a corpus is never read whole into memory)."""
    if workers <= 1:
        yield from map(function, items)
        return
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    pending: deque = deque()
    try:
        for item in items:
            pending.append(pool.submit(function, item))
            if len(pending) >= workers * ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# -- the whole preparation ------------------------------------------------------------------------

@dataclass
class StreamResult:
    truecasers: dict[str, MosesTruecaser]
    codes: dict[str, str]
    src_vocab: Vocab
    tgt_vocab: Vocab
    counts: Counts
    pairs_read: int
    pairs_kept: int


def prepare_training(options: DataConfig, paths: tuple[str, str, str | None], out: Path, work: Path,
                     max_len: int | None, vocab_size: int, cleaning: Cleaning, workers: int,
                     log: Callable[[str], None], block_lines: int | None = None,
                     sampling: Sampling | None = None) -> StreamResult:
    """Learn the pipeline on the training files and write their ids as arrays into `out`, and
    where `sampling` asks, each sampled segmentation's beside it (sample_directory)."""
    global _JOB
    work.mkdir(parents=True, exist_ok=True)
    _JOB = Job(options, paths, work, cleaning)
    try:
        block_lines = block_lines or BLOCK_LINES
        keep = first_occurrences(read_blocks(paths, block_lines)) if cleaning.duplicates else None
        blocks, counts, casing, read = _run_words_pass(paths, keep, workers, block_lines)
        log(f"prepare: {read} training pairs read in {blocks} blocks on {workers} worker(s)")
        truecasers = _truecasers(casing) if options.truecase else {}
        _JOB = Job(options, paths, work, cleaning, truecasers or None)
        word_counts = {side: Counter() for side in SIDES}
        for block_counts in ordered_map(truecase_pass, range(blocks), workers):
            for side in SIDES:
                word_counts[side].update(block_counts[side])
        codes = learn_subwords(options, word_counts, lambda sides: _block_lines(work, blocks, sides))
        del word_counts
        _JOB = Job(options, paths, work, cleaning, None, codes, sampling)
        _SEGMENTERS.clear()
        _SAMPLERS.clear()
        samples = sampling.samples if sampling else 0
        if samples:
            log(f"prepare: {samples} sampled segmentations of the training pairs "
                f"({'BPE-dropout' if sampling.bpe_dropout else 'SentencePiece alpha'} "
                f"{sampling.bpe_dropout or sampling.alpha:g})")
        provisional = _subword_pass(blocks, work, max_len, counts, workers, samples)
        if not provisional.kept:
            raise DataError(f"{paths[0]}: no training pair left after length filtering")
        src_vocab, tgt_vocab, lookups = _vocabularies(provisional, options.joint_bpe, vocab_size)
        dtype, docs = id_dtype(max(len(src_vocab), len(tgt_vocab))), work / "docs" if paths[2] is not None else None
        kept = _write_arrays(work, out, lookups, dtype, docs, provisional.doc_problem)
        for sample in range(samples):  # the document numbers are the split's: not written again
            _write_arrays(_sample_work(work, sample), sample_directory(out, sample), lookups, dtype, None, "",
                          sample=sample, of=samples)
        return StreamResult(truecasers, codes, src_vocab, tgt_vocab, counts, read, kept)
    finally:
        _JOB = None
        _SEGMENTERS.clear()
        _SAMPLERS.clear()


def _run_words_pass(paths, keep, workers, block_lines):
    def blocks():
        for block in read_blocks(paths, block_lines):
            if keep is not None:
                block.keep = keep[block.first_line - 1:block.first_line - 1 + len(block.src)]
            yield block

    counts, casing, read, n = Counts(), {side: defaultdict(Counter) for side in SIDES}, 0, 0
    for kept, block_counts, block_casing in ordered_map(words_pass, blocks(), workers):
        n += 1
        read += kept + block_counts.duplicates + block_counts.identical + block_counts.ratio
        for name in ("duplicates", "identical", "ratio"):
            setattr(counts, name, getattr(counts, name) + getattr(block_counts, name))
        for side in SIDES:
            for lower, surfaces in block_casing[side].items():
                casing[side][lower].update(surfaces)
    return n, counts, casing, read


def _truecasers(casing: dict[str, defaultdict]) -> dict[str, MosesTruecaser]:
    """Each side's truecaser from the casing evidence merged in corpus order, as
    MosesTruecaser.train would learn it in one pass."""
    truecasers = {}
    for side in SIDES:
        truecaser = line_start_only(MosesTruecaser())
        truecaser.model = truecaser._casing_to_model(casing[side])
        truecasers[side] = truecaser
    return truecasers


@dataclass
class Provisional:
    """Subwords numbered as first met, their counts over the kept pairs, per side."""

    table: dict[str, int] = field(default_factory=dict)
    counts: dict[str, np.ndarray] = field(default_factory=lambda: {s: np.zeros(0, dtype=np.int64) for s in SIDES})
    kept: int = 0
    doc_problem: str = ""

    def ids(self, names: list[str]) -> np.ndarray:
        return np.asarray([self.table.setdefault(name, len(self.table)) for name in names], dtype=np.int64)

    def count(self, side: str, ids: np.ndarray) -> None:
        found = np.bincount(ids, minlength=len(self.table))
        grown = np.zeros(len(self.table), dtype=np.int64)
        grown[:len(self.counts[side])] = self.counts[side]
        self.counts[side] = grown + found


class _KeptIds:
    """The provisional ids and lengths of one segmentation's kept pairs, in a directory of the work
    directory (`src.ids`, `tgt.ids`, `lens`), as pass 4 reads them."""

    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self.files = {name: open(directory / name, "wb") for name in ("src.ids", "tgt.ids", "lens")}

    def add(self, sides: Segmented, keep: np.ndarray, lookup: np.ndarray, provisional: Provisional) -> None:
        """The pairs `keep` marks, their subwords counted into the vocabulary."""
        for side in SIDES:
            ids, lens = sides[side]
            kept_ids = lookup[ids[np.repeat(keep, lens)]]
            provisional.count(side, kept_ids)
            self.files[f"{side}.ids"].write(kept_ids.astype(np.int32).tobytes())
        self.files["lens"].write(np.stack([sides["src"][1][keep], sides["tgt"][1][keep]], 1).astype(np.int32).tobytes())

    def close(self) -> None:
        for handle in self.files.values():
            handle.close()


def _sample_work(work: Path, sample: int) -> Path:
    return work / f"sample-{sample}"


def _subword_pass(blocks: int, work: Path, max_len: int | None, counts: Counts, workers: int,
                  samples: int = 0) -> Provisional:
    """Segment every block, drop pairs by length, count the kept subwords and keep their
    provisional ids, lengths and document numbers in the work directory; the same of each
    sampled segmentation, for the pairs the deterministic one keeps."""
    provisional, runs = Provisional(), DocumentRuns()
    outputs = [_KeptIds(work)] + [_KeptIds(_sample_work(work, sample)) for sample in range(samples)]
    try:
        with open(work / "docs", "wb") as docs_out:
            for block, (names, sides, sampled) in enumerate(ordered_map(subword_pass, range(blocks), workers)):
                keep = _keep(sides, max_len, counts)
                provisional.kept += int(keep.sum())
                lookup = provisional.ids(names)
                for output, segmented in zip(outputs, [sides, *sampled]):
                    output.add(segmented, keep, lookup, provisional)
                _number_documents(work, block, keep, runs, docs_out)
    finally:
        for output in outputs:
            output.close()
    provisional.doc_problem = runs.problem
    return provisional


def _keep(sides: Segmented, max_len: int | None, counts: Counts) -> np.ndarray:
    """The pairs the length filter keeps (the rest counted, as empty or too long)."""
    s_lens, t_lens = sides["src"][1], sides["tgt"][1]
    empty = (s_lens == 0) | (t_lens == 0)
    too_long = ~empty & ((s_lens > max_len) | (t_lens > max_len)) if max_len else np.zeros_like(empty)
    counts.empty += int(empty.sum())
    counts.too_long += int(too_long.sum())
    return ~(empty | too_long)


def _number_documents(work: Path, block: int, keep: np.ndarray, runs: DocumentRuns, docs_out) -> None:
    """The kept pairs' document numbers, and the block's word files gone (their pass is done)."""
    doc_path = work / f"{block:07d}.doc"
    if doc_path.is_file():
        docs = _read_lines(doc_path)
        docs_out.write(runs.number([d for d, k in zip(docs, keep) if k]).tobytes())
    for side in (*SIDES, "doc"):
        (work / f"{block:07d}.{side}").unlink(missing_ok=True)


def _vocabularies(provisional: Provisional, joint: bool, vocab_size: int):
    """The vocabularies Vocab.build would make from the kept pairs' subwords, and for each side
    the lookup from provisional to final ids (a special symbol's spelling is unknown, as in
    Vocab.encode)."""
    names = list(provisional.table)
    counts = provisional.counts
    sides = {"src": counts["src"], "tgt": counts["tgt"]}
    if joint:
        size = max(len(c) for c in sides.values())
        total = sum(np.pad(c, (0, size - len(c))) for c in sides.values())
        sides = {"src": total, "tgt": total}
    vocabs = {}
    for side, side_counts in sides.items():
        if joint and side == "tgt":
            vocabs["tgt"] = vocabs["src"]
            continue
        ranked = sorted((names[i] for i in np.flatnonzero(side_counts) if names[i] not in SPECIALS),
                        key=lambda name: (-side_counts[provisional.table[name]], name))
        vocabs[side] = Vocab(ranked[:vocab_size] if vocab_size else ranked)
    lookups = {side: np.asarray([UNK if name in SPECIALS else vocabs[side].index(name) for name in names] or [UNK],
                                dtype=np.int64) for side in SIDES}
    return vocabs["src"], vocabs["tgt"], lookups


SENTENCES_PER_WRITE = 200_000


def _write_arrays(work: Path, out: Path, lookups: dict[str, np.ndarray], dtype: np.dtype, docs: Path | None,
                  doc_problem: str, **meta) -> int:
    """Pass 4: the final ids (targets ending in EOS) of the provisional ids in `work` as the arrays
    of ctxnmt.data.indexed, with the document numbers of the file `docs` where given; `meta`
    goes into their meta.json."""
    lens = np.fromfile(work / "lens", dtype=np.int32).reshape(-1, 2).astype(np.int64)
    n = len(lens)
    src_ids = np.memmap(work / "src.ids", dtype=np.int32, mode="r") if lens[:, 0].sum() else np.zeros(0, np.int32)
    tgt_ids = np.memmap(work / "tgt.ids", dtype=np.int32, mode="r") if lens[:, 1].sum() else np.zeros(0, np.int32)
    doc_numbers = np.fromfile(docs, dtype=np.int32) if docs else None
    writer = ArrayWriter(out, dtype, docs is not None)
    try:
        at = np.zeros(2, dtype=np.int64)
        for start in range(0, n, SENTENCES_PER_WRITE):
            part = lens[start:start + SENTENCES_PER_WRITE]
            sizes = part.sum(0)
            src = lookups["src"][src_ids[at[0]:at[0] + sizes[0]]]
            tgt = _with_eos(lookups["tgt"][tgt_ids[at[1]:at[1] + sizes[1]]], part[:, 1])
            at += sizes
            writer.add(src, part[:, 0], tgt, part[:, 1] + 1,
                       doc_numbers[start:start + len(part)] if docs else None)
        writer.close(doc_problem=doc_problem, **meta)
    except BaseException:
        writer.abort()
        raise
    return n


def _with_eos(ids: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The sentences of `ids` (lengths `lens`) each followed by EOS."""
    out = np.empty(len(ids) + len(lens), dtype=np.int64)
    ends = np.cumsum(lens + 1) - 1
    real = np.ones(len(out), dtype=bool)
    real[ends] = False
    out[real] = ids
    out[ends] = EOS
    return out
