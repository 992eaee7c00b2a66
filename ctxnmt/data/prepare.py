"""`ctxnmt prepare`: from raw parallel text to subword ids in the model directory.

Everything learned here (tokeniser options, truecaser, BPE codes or SentencePiece
model, vocabularies) lives under MODEL_DIR/prep so that `translate` applies exactly
the same pipeline.  The step is skipped when MODEL_DIR/prep already matches the data
section of the config and the training and dev files it was made from.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ctxnmt.config import Config, first_difference, lookup
from ctxnmt.data.bible import build_bible
from ctxnmt.data.corpus import read_parallel
from ctxnmt.data.indexed import META, TokenArrays, id_dtype, read_meta
from ctxnmt.data.preprocess import BPE_SCHEME, SENTENCEPIECE_SCHEME, Preprocessor
from ctxnmt.data.sampling import Sampling, TrainingSamples
from ctxnmt.data.settings import DataConfig
from ctxnmt.data.stream import Cleaning, check_aligned, prepare_training
from ctxnmt.data.vocab import Vocab
from ctxnmt.data.words import count_words, goes_on, joins_back
from ctxnmt.errors import DataError
from ctxnmt.utils.cores import usable_cores
from ctxnmt.utils.io import atomic_write, file_sha256, read_json_object
from ctxnmt.utils.messages import Log, to_stderr


@dataclass
class Prepared:
    preprocessor: Preprocessor
    src_vocab: Vocab
    tgt_vocab: Vocab
    train: TokenArrays
    dev: TokenArrays  # every dev pair (none filtered), in the training split's form
    references: list[str]  # the dev split's target text, which BLEU scores against
    directory: Path | None = None
    # the training pairs' sampled segmentations (ctxnmt.data.sampling), row for row `train`'s; none
    # where the data section samples none
    samples: Sequence[TokenArrays] = ()

    _ratios: dict[str, float] | None = field(default=None, init=False, repr=False, compare=False)

    def length_ratios(self) -> dict[str, float]:
        """The training pairs' length ratios, words included: prep/lengths.json where it has
        them, else measured on the pairs; read or measured once (validation asks each time)."""
        if self._ratios is None:
            path = self.directory / LENGTHS if self.directory is not None else None
            recorded = read_json_object(path) if path is not None and path.is_file() else {}
            self._ratios = recorded if WORD_RATIO in recorded else length_ratios(
                self.train, self.src_vocab, self.tgt_vocab, self.preprocessor.options.subwords)
        return self._ratios


def split_paths(data: DataConfig, split: str) -> tuple[Path, Path, Path]:
    prefix = Path(data.dir) / getattr(data, split)
    return (prefix.with_name(prefix.name + "." + data.src_lang), prefix.with_name(prefix.name + "." + data.tgt_lang),
            prefix.with_name(prefix.name + ".doc"))


def data_fingerprint(data: DataConfig) -> str:
    return hashlib.sha256(json.dumps(dataclasses.asdict(data), sort_keys=True).encode()).hexdigest()[:16]


def ensure_corpus(data: DataConfig, log: Log = to_stderr) -> None:
    if data.corpus == "bible":
        build_bible(Path(data.dir), log=log)


def read_split(data: DataConfig, split: str):
    src, tgt, doc = split_paths(data, split)
    return read_parallel(src, tgt, doc if doc.is_file() else None)


def corpus_files(data: DataConfig) -> dict[str, Path]:
    """The files a preparation reads, by role (`train.src`, …; a split's `.doc` where there is one)."""
    files = {}
    for split in ("train", "dev"):
        for side, path in zip(("src", "tgt", "doc"), split_paths(data, split)):
            if side != "doc" or path.is_file():
                files[f"{split}.{side}"] = path
    return files


def _file_record(path: Path) -> dict:
    stat = path.stat()
    return {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": file_sha256(path)}


def _file_changed(path: Path, recorded: object) -> bool:
    """Whether `path` no longer holds the recorded content; its digest is read only where its
    size or time differ (a corpus built again, byte for byte, is the same corpus)."""
    if not isinstance(recorded, dict):
        return True
    stat = path.stat()
    if stat.st_size != recorded.get("bytes"):
        return True
    return stat.st_mtime_ns != recorded.get("mtime_ns") and file_sha256(path) != recorded.get("sha256")


@dataclass
class Staleness:
    """Why a prepared directory no longer matches; `known`: the stamp says what it was made from,
    so a training that must keep its data can be refused (a stamp from before the section and
    files were recorded can only say that its fingerprint differs)."""

    reason: str
    known: bool = True


def _section_change(stamp: Path, recorded: dict, data: DataConfig) -> Staleness | None:
    """The first data key whose value differs from the recorded section's; a key added to the
    data section since reads its default there, so that adding one leaves prepared data valid."""
    section = recorded.get("section")
    if not isinstance(section, dict):
        return Staleness(f"{stamp.parent} was prepared from another data section", known=False)
    now, defaults = dataclasses.asdict(data), dataclasses.asdict(DataConfig())
    then = {key: section.get(key, defaults[key]) for key in now}
    key = first_difference(then, now)
    if key is None:
        return None
    return Staleness(f"{stamp.parent} was prepared with data.{key} {lookup(then, key)!r}, not {lookup(now, key)!r}")


def _out_of_date(stamp: Path, data: DataConfig) -> Staleness | None:
    """Why the prepared directory beside `stamp` does not match `data` and its files (an empty
    reason where nothing is there), or None where it matches.  A recorded file that is missing
    is no change: the directory holds what was read from it."""
    if not stamp.is_file():
        return Staleness("", known=False)
    try:
        recorded = read_json_object(stamp)
    except DataError as err:
        return Staleness(f"{err}: cannot tell what it was prepared from")
    if recorded.get("data") != data_fingerprint(data):
        changed = _section_change(stamp, recorded, data)
        if changed is not None:
            return changed
    corpus = recorded.get("corpus")
    if not isinstance(corpus, dict):  # prepared before the files were recorded: nothing to compare
        return None
    for role, path in corpus_files(data).items():
        if not path.is_file():
            continue
        if role not in corpus:
            return Staleness(f"{path} is new since {stamp.parent} was prepared")
        if _file_changed(path, corpus[role]):
            return Staleness(f"{path} changed since {stamp.parent} was prepared from it")
    return None


def prepare(config: Config, log: Log = to_stderr, force: bool = False, keep: bool = False,
            workers: int = 0) -> Prepared:
    """The prepared data of `config`, prepared again where MODEL_DIR/prep is missing, was made
    from another data section or other files, or `force` says so.  `keep` (the directory holds a
    training, which must go on with the data it was trained on): a prepared directory known to
    differ is a DataError naming the key or file, and is left as it is.  `workers`: processes
    that prepare the training pairs (0: one per core).  A new prep/ is built beside the old one
    and takes its place only once complete, so a failed or killed preparation leaves the old (and
    a failed first one no empty model directory)."""
    prep_dir = Path(config.model_dir) / "prep"
    stamp = prep_dir / "fingerprint.json"
    stale = None if force else _out_of_date(stamp, config.data)
    if not force and stale is None:
        return load_prepared(prep_dir, log)
    if keep and stale is not None and stale.known:
        raise DataError(f"{stale.reason}; {config.model_dir} holds a training, which must go on with the data it "
                        "was prepared from: use that data, or another model_dir")
    if stale is not None and stale.reason:
        log(f"prepare: {stale.reason}; preparing again")
    ensure_corpus(config.data, log)
    corpus = {role: _file_record(path) for role, path in corpus_files(config.data).items() if path.is_file()}
    partial = Path(config.model_dir) / "prep.partial"
    shutil.rmtree(partial, ignore_errors=True)
    made = _new_directories(partial.parent)
    partial.mkdir(parents=True)
    try:
        _prepare_into(partial, config.data, log, workers)
        with atomic_write(partial / stamp.name, "w") as fh:  # last: what makes the directory complete
            json.dump({"data": data_fingerprint(config.data), "section": dataclasses.asdict(config.data),
                       "corpus": corpus}, fh, indent=1)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        for directory in made:  # a failed first preparation leaves no empty model directory
            with contextlib.suppress(OSError):  # not empty: something else has written there since
                directory.rmdir()
        raise
    _put_in_place(partial, prep_dir)
    return load_prepared(prep_dir, log)


def _new_directories(path: Path) -> list[Path]:
    """`path` and those of its parents that do not exist yet, innermost first: what
    mkdir(parents=True) will make."""
    new = []
    while not path.exists() and path != path.parent:
        new.append(path)
        path = path.parent
    return new


def _put_in_place(partial: Path, prep_dir: Path) -> None:
    old = prep_dir.with_name("prep.old")
    shutil.rmtree(old, ignore_errors=True)
    if prep_dir.exists():
        prep_dir.rename(old)
    partial.rename(prep_dir)
    shutil.rmtree(old, ignore_errors=True)


def cleaning(data: DataConfig) -> Cleaning:
    return Cleaning(max_ratio=data.filter_ratio, duplicates=data.filter_duplicates, identical=data.filter_identical)


def _workers(requested: int, train_src: Path) -> int:
    """A corpus of one block is prepared in this process: forking would only cost time."""
    if train_src.is_file() and train_src.stat().st_size < SMALL_CORPUS_BYTES:
        return 1
    return requested or usable_cores()


SMALL_CORPUS_BYTES = 1 << 20


def _prepare_into(out: Path, d: DataConfig, log: Log, workers: int) -> None:
    """Everything `prepare` writes, into the directory `out`."""
    src, tgt, doc = split_paths(d, "train")
    check_aligned((str(src), str(tgt), str(doc) if doc.is_file() else None))
    dev = read_split(d, "dev")  # a broken dev split is found before the long work
    workers = _workers(workers, src)
    subwords = "SentencePiece" if d.subwords == SENTENCEPIECE_SCHEME else "BPE"
    log(f"prepare: learning tokenisation, truecasing and {subwords} on {src} and {tgt}")
    result = prepare_training(d, (str(src), str(tgt), str(doc) if doc.is_file() else None), out / "train",
                              out / "work", d.max_len, d.vocab_size, cleaning(d), workers, log,
                              sampling=Sampling.of(d))
    shutil.rmtree(out / "work", ignore_errors=True)
    c = result.counts
    if c.ratio or c.duplicates or c.identical:
        log(f"prepare: cleaning dropped {c.ratio} pairs over the length ratio {d.filter_ratio:g}, {c.duplicates} "
            f"duplicates and {c.identical} pairs whose two sides are identical")
    log(f"prepare: dropped {c.too_long} training pairs longer than {d.max_len} subwords and {c.empty} empty ones")
    src_vocab, tgt_vocab = result.src_vocab, result.tgt_vocab
    log(f"prepare: vocabulary {len(src_vocab)} source / {len(tgt_vocab)} target symbols")
    pre = Preprocessor(d, result.truecasers, result.codes)
    dtype = id_dtype(max(len(src_vocab), len(tgt_vocab)))
    encode_split(pre, src_vocab, tgt_vocab, dev.src, dev.tgt, dev.docs).save(out / DEV, dtype, references=dev.tgt)
    pre.save(out / "preprocess")
    src_vocab.save(out / "vocab.src")
    tgt_vocab.save(out / "vocab.tgt")
    with atomic_write(out / LENGTHS, "w") as fh:
        json.dump(length_ratios(TokenArrays.open(out / "train"), src_vocab, tgt_vocab, d.subwords), fh, indent=1)


DEV = "dev"
LENGTHS = "lengths.json"
RATIO_QUANTILES = (0.5, 0.9, 0.95, 0.99, 0.999, 1.0)
WORD_RATIO = "words 0.5"  # the median output/source ratio in words (see length_ratios)


def length_ratios(split, src_vocab: Vocab | None = None, tgt_vocab: Vocab | None = None,
                  scheme: str = BPE_SCHEME) -> dict[str, float]:
    """Quantiles of |y| / |x| over the pairs of a split (TokenArrays), in subwords (the
    target's </s> not counted): the smallest ratio that at least that share of the pairs do not
    exceed.  Read by `decoding.max_len_rule: data` (ctxnmt.decoding.length).  Given the
    vocabularies, also `words 0.5`: the median of W(y) / W(x) in words (subwords joined as the
    subword `scheme` joins them, ctxnmt.data.words), which `decoding.length_ratio_rule: data` reads."""
    src, tgt = split.src, split.tgt
    rows = np.flatnonzero(src.lens > 0)
    if not len(rows):
        raise DataError("no pair with a non-empty source to measure length ratios on")
    tgt_lens = np.maximum(tgt.lens[rows] - 1, 0)
    ratios = np.sort(tgt_lens / src.lens[rows])
    out = {f"{q:g}": float(quantile(ratios, q)) for q in RATIO_QUANTILES}
    if src_vocab is not None and tgt_vocab is not None:
        src_words = count_words(src, goes_on(src_vocab, scheme), rows, joins_back=joins_back(src_vocab, scheme))
        tgt_words = count_words(tgt, goes_on(tgt_vocab, scheme), rows, tgt_lens, joins_back(tgt_vocab, scheme))
        out[WORD_RATIO] = float(quantile(np.sort(tgt_words / src_words), 0.5))
    return out


def quantile(ordered, q: float) -> float:
    """The smallest value that at least a share q of `ordered` does not exceed."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def load_length_ratios(prep_dir: Path, words: bool = False) -> dict[str, float] | None:
    """The training length ratios of a prepared directory: prep/lengths.json, else (a directory
    prepared before it was written, or, where `words` asks for the word ratio, before it held
    that) measured on the prepared pairs; None where there are none."""
    path = Path(prep_dir) / LENGTHS
    if path.is_file():
        recorded = read_json_object(path)
        if not words or WORD_RATIO in recorded or not _holds_pairs(Path(prep_dir)):
            return recorded
    if _holds_pairs(Path(prep_dir)):
        prepared = load_prepared(Path(prep_dir))
        return length_ratios(prepared.train, prepared.src_vocab, prepared.tgt_vocab,
                             prepared.preprocessor.options.subwords)
    return None


def _holds_pairs(prep_dir: Path) -> bool:
    return (prep_dir / "train" / META).is_file() or (prep_dir / OLD_DATA).is_file()


def encode_split(pre: Preprocessor, src_vocab: Vocab, tgt_vocab: Vocab, src: list[str], tgt: list[str],
                 docs: list[str] | None = None) -> TokenArrays:
    """Every pair of a split as ids (targets end in EOS), none filtered: a dev pair's line is its file's."""
    src_ids = [src_vocab.encode(t, add_eos=False) for t in pre.encode_many(src, "src")]
    tgt_ids = [tgt_vocab.encode(t) for t in pre.encode_many(tgt, "tgt")]
    return TokenArrays.from_lists(src_ids, tgt_ids, docs or None)


def load_pipeline(prep_dir: Path) -> tuple[Preprocessor, Vocab, Vocab]:
    if not (prep_dir / "vocab.tgt").is_file():
        raise DataError(f"{prep_dir}: no prepared pipeline here; run 'ctxnmt prepare CONFIG' first")
    vocabs = Vocab.load(prep_dir / "vocab.src"), Vocab.load(prep_dir / "vocab.tgt")
    return Preprocessor.load(prep_dir / "preprocess"), *vocabs


def load_prepared(prep_dir: Path, log: Log = to_stderr) -> Prepared:
    """The prepared pipeline and splits, memory-mapped, never read whole; a directory prepared by
    an older ctxnmt is read as it is, into memory (see _read_old)."""
    pre, src_vocab, tgt_vocab = load_pipeline(prep_dir)
    if not (prep_dir / "train" / META).is_file():
        return Prepared(pre, src_vocab, tgt_vocab, *_read_old(prep_dir, log), Path(prep_dir))
    train = TokenArrays.open(prep_dir / "train")
    if (prep_dir / OLD_DEV).is_file():
        dev, references = _old_split(torch.load(prep_dir / OLD_DEV, weights_only=True))
    else:
        dev, references = TokenArrays.open(prep_dir / DEV), read_meta(prep_dir / DEV)["references"]
    return Prepared(pre, src_vocab, tgt_vocab, train, dev, references, Path(prep_dir),
                    TrainingSamples(prep_dir / "train", train))


# -- directories prepared by an older ctxnmt: read, never written ----------------------------------

OLD_DATA = "data.pt"  # before the arrays: both splits as pickled lists
OLD_DEV = "dev.pt"  # before the dev split was arrays too: it alone as pickled lists


def _read_old(prep_dir: Path, log: Log) -> tuple[TokenArrays, TokenArrays, list[str]]:
    """The training split, dev split and references of prep/data.pt."""
    if not (prep_dir / OLD_DATA).is_file():
        raise DataError(f"{prep_dir}: no prepared training pairs here; run 'ctxnmt prepare CONFIG' again")
    log(f"prepare: {prep_dir / OLD_DATA} is the older form of prepared data, read into memory as it is "
        "(a directory prepared again holds the memory-mapped form)")
    data = torch.load(prep_dir / OLD_DATA, weights_only=True)
    return _old_split(data["train"])[0], *_old_split(data["dev"])


def _old_split(split: dict) -> tuple[TokenArrays, list[str]]:
    """A pickled split (id lists, text and document ids) as the arrays read, and its target text."""
    return TokenArrays.from_lists(split["src"], split["tgt"], split.get("docs")), split["raw_tgt"]
