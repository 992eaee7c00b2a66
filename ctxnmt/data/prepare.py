"""`ctxnmt prepare`: from raw parallel text to subword ids in the model directory.

Everything learned here (tokeniser options, truecaser, BPE codes, vocabularies)
lives under MODEL_DIR/prep so that `translate` applies exactly the same
pipeline.  The step is skipped when MODEL_DIR/prep already matches the data
section of the config and the training and dev files it was made from.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ctxnmt.config import Config, DataConfig, first_difference, lookup
from ctxnmt.data.bible import build_bible
from ctxnmt.data.corpus import filter_by_length, read_parallel
from ctxnmt.data.preprocess import Preprocessor
from ctxnmt.data.vocab import Vocab
from ctxnmt.data.words import count_words, goes_on
from ctxnmt.errors import DataError
from ctxnmt.utils.io import atomic_write, file_sha256, read_json_object
from ctxnmt.utils.messages import Log, to_stderr


@dataclass
class Split:
    """One encoded split: ids per sentence (targets end in EOS) and raw text for scoring."""

    src: list[list[int]]
    tgt: list[list[int]]
    raw_src: list[str]
    raw_tgt: list[str]
    docs: list[str] | None = None


@dataclass
class Prepared:
    preprocessor: Preprocessor
    src_vocab: Vocab
    tgt_vocab: Vocab
    train: Split
    dev: Split


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


def prepare(config: Config, log: Log = to_stderr, force: bool = False, keep: bool = False) -> Prepared:
    """The prepared data of `config`, prepared again where MODEL_DIR/prep is missing, was made
    from another data section or other files, or `force` says so.  `keep` (the directory holds a
    training, which must go on with the data it was trained on): a prepared directory known to
    differ is a DataError naming the key or file, and is left as it is."""
    prep_dir = Path(config.model_dir) / "prep"
    stamp = prep_dir / "fingerprint.json"
    fingerprint = data_fingerprint(config.data)
    stale = None if force else _out_of_date(stamp, config.data)
    if not force and stale is None:
        return load_prepared(prep_dir)
    if keep and stale is not None and stale.known:
        raise DataError(f"{stale.reason}; {config.model_dir} holds a training, which must go on with the data it "
                        "was prepared from: use that data, or another model_dir")
    if stale is not None and stale.reason:
        log(f"prepare: {stale.reason}; preparing again")
    ensure_corpus(config.data, log)
    d = config.data
    corpus = {role: _file_record(path) for role, path in corpus_files(d).items() if path.is_file()}  # as read
    train, dev = read_split(d, "train"), read_split(d, "dev")
    log(f"prepare: learning tokenisation, truecasing and BPE on {len(train.src)} training pairs")
    pre = Preprocessor.fit(train.src, train.tgt, src_lang=d.src_lang, tgt_lang=d.tgt_lang, tokenize=d.tokenize,
                           truecase=d.truecase, bpe_merges=d.bpe_merges, joint_bpe=d.joint_bpe)
    src_tok, tgt_tok = pre.encode_many(train.src, "src"), pre.encode_many(train.tgt, "tgt")
    kept, too_long, empty = filter_by_length(src_tok, tgt_tok, d.max_len)
    log(f"prepare: dropped {too_long} training pairs longer than {d.max_len} subwords and {empty} empty ones")
    if not kept:
        raise DataError(f"{split_paths(d, 'train')[0]}: no training pair left after length filtering")
    src_tok, tgt_tok = [src_tok[i] for i in kept], [tgt_tok[i] for i in kept]
    max_size = d.vocab_size or None
    if d.joint_bpe:
        src_vocab = tgt_vocab = Vocab.build(src_tok + tgt_tok, max_size=max_size)
    else:
        src_vocab, tgt_vocab = Vocab.build(src_tok, max_size=max_size), Vocab.build(tgt_tok, max_size=max_size)
    log(f"prepare: vocabulary {len(src_vocab)} source / {len(tgt_vocab)} target symbols")
    train_split = Split([src_vocab.encode(s, add_eos=False) for s in src_tok],
                        [tgt_vocab.encode(t) for t in tgt_tok],
                        [train.src[i] for i in kept], [train.tgt[i] for i in kept],
                        [train.docs[i] for i in kept] if train.docs else None)
    dev_split = encode_split(pre, src_vocab, tgt_vocab, dev.src, dev.tgt, dev.docs)
    prep_dir.mkdir(parents=True, exist_ok=True)
    pre.save(prep_dir / "preprocess")
    src_vocab.save(prep_dir / "vocab.src")
    tgt_vocab.save(prep_dir / "vocab.tgt")
    with atomic_write(prep_dir / "data.pt", "wb") as fh:
        torch.save({"train": dataclasses.asdict(train_split), "dev": dataclasses.asdict(dev_split)}, fh)
    with atomic_write(prep_dir / LENGTHS, "w") as fh:
        json.dump(length_ratios(train_split, src_vocab, tgt_vocab), fh, indent=1)
    with atomic_write(stamp, "w") as fh:
        json.dump({"data": fingerprint, "section": dataclasses.asdict(d), "corpus": corpus}, fh, indent=1)
    return Prepared(pre, src_vocab, tgt_vocab, train_split, dev_split)


LENGTHS = "lengths.json"
RATIO_QUANTILES = (0.5, 0.9, 0.95, 0.99, 0.999, 1.0)
WORD_RATIO = "words 0.5"  # the median output/source ratio in words (see length_ratios)


def length_ratios(split: Split, src_vocab: Vocab | None = None, tgt_vocab: Vocab | None = None) -> dict[str, float]:
    """Quantiles of |y| / |x| over the pairs of a split, in subwords (the target's </s> not
    counted): the smallest ratio that at least that share of the pairs do not exceed.  Read by
    `decoding.max_len_rule: data` (ctxnmt.decoding.length).  Given the vocabularies, also
    `words 0.5`: the median of W(y) / W(x) in words (subwords joined by the BPE separator),
    which `decoding.length_ratio_rule: data` reads."""
    pairs = [(s, t[:-1]) for s, t in zip(split.src, split.tgt) if s]
    if not pairs:
        raise DataError("no pair with a non-empty source to measure length ratios on")
    out = {f"{q:g}": quantile(sorted(len(t) / len(s) for s, t in pairs), q) for q in RATIO_QUANTILES}
    if src_vocab is not None and tgt_vocab is not None:
        src_words = count_words([s for s, _ in pairs], goes_on(src_vocab))
        tgt_words = count_words([t for _, t in pairs], goes_on(tgt_vocab))
        words = sorted(t / s for s, t in zip(src_words, tgt_words))
        out[WORD_RATIO] = quantile(words, 0.5)
    return out


def quantile(ordered: list[float], q: float) -> float:
    """The smallest value that at least a share q of `ordered` does not exceed."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def load_length_ratios(prep_dir: Path, words: bool = False) -> dict[str, float] | None:
    """The training length ratios of a prepared directory: prep/lengths.json, else (a directory
    prepared before it was written, or, where `words` asks for the word ratio, before it held
    that) measured on prep/data.pt; None where neither is there."""
    path = Path(prep_dir) / LENGTHS
    if path.is_file():
        recorded = read_json_object(path)
        if not words or WORD_RATIO in recorded or not (Path(prep_dir) / "data.pt").is_file():
            return recorded
    if (Path(prep_dir) / "data.pt").is_file():
        prepared = load_prepared(Path(prep_dir))
        return length_ratios(prepared.train, prepared.src_vocab, prepared.tgt_vocab)
    return None


def encode_split(pre: Preprocessor, src_vocab: Vocab, tgt_vocab: Vocab, src: list[str], tgt: list[str],
                 docs: list[str] | None = None) -> Split:
    src_ids = [src_vocab.encode(t, add_eos=False) for t in pre.encode_many(src, "src")]
    tgt_ids = [tgt_vocab.encode(t) for t in pre.encode_many(tgt, "tgt")]
    return Split(src_ids, tgt_ids, list(src), list(tgt), list(docs) if docs else None)


def load_pipeline(prep_dir: Path) -> tuple[Preprocessor, Vocab, Vocab]:
    if not (prep_dir / "vocab.tgt").is_file():
        raise DataError(f"{prep_dir}: no prepared pipeline here; run 'ctxnmt prepare CONFIG' first")
    vocabs = Vocab.load(prep_dir / "vocab.src"), Vocab.load(prep_dir / "vocab.tgt")
    return Preprocessor.load(prep_dir / "preprocess"), *vocabs


def load_prepared(prep_dir: Path) -> Prepared:
    pre, src_vocab, tgt_vocab = load_pipeline(prep_dir)
    data = torch.load(prep_dir / "data.pt", weights_only=True)
    return Prepared(pre, src_vocab, tgt_vocab, Split(**data["train"]), Split(**data["dev"]))
