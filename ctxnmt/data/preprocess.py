"""The text pipeline: Moses tokenisation, truecasing and BPE, learned once and stored.

A :class:`Preprocessor` is learned on the training corpus (ctxnmt.data.stream) and
saved next to the model, so that ``translate`` segments its input exactly as the
training data was. Everything is stored as plain text or JSON (never pickle), so a model
directory can be inspected and shared safely.

Pipeline per side, in order: tokenise (sacremoses, no XML escaping), truecase
(sacremoses model trained on the tokenised training side, with only the start
of a line counted as a sentence start), subwords: BPE (subword-nmt) or SentencePiece
(run on the words joined by spaces), one model learned on both sides or one per side.
``decode`` undoes it.
"""
from __future__ import annotations

import io
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from unittest import mock

import sentencepiece
from sacremoses import MosesDetokenizer, MosesDetruecaser, MosesTokenizer, MosesTruecaser
from subword_nmt import learn_bpe as _learn_bpe_module
from subword_nmt.apply_bpe import BPE

from ctxnmt.config import build_typed
from ctxnmt.data.settings import PIPELINE_KEYS, DataConfig
from ctxnmt.errors import CheckpointError, ConfigError
from ctxnmt.utils.io import atomic_write
from ctxnmt.utils.options import check_section, choices

SIDES = ("src", "tgt")
BPE_SCHEME, SENTENCEPIECE_SCHEME = choices(DataConfig, "subwords")
BPE_SEPARATOR = "@@"
WORD_START = "\u2581"  # "▁": SentencePiece's mark of a piece that starts a word
OPTIONS_FILE = "preprocess.json"
FORMAT_VERSION = 1
_BPE_JOIN = re.compile(re.escape(BPE_SEPARATOR) + r"(?: |$)")


# Words whose segmentation is remembered: a corpus's vocabulary fits many times over, and a
# server that meets ever new words (names, typos, random strings) does not grow without bound.
BPE_CACHE_WORDS = 200_000


class SentencePieceModel:
    """A learned SentencePiece model (its serialised bytes), applied to a line's words joined by spaces."""

    def __init__(self, model: bytes):
        self.model = model
        self.processor = sentencepiece.SentencePieceProcessor(model_proto=model)

    def segment_tokens(self, words: list[str]) -> list[str]:
        return self.processor.encode(" ".join(words), out_type=str)

    def sample_tokens(self, words: list[str], alpha: float) -> list[str]:
        """One segmentation drawn from all of the model's (nbest_size -1) with smoothing `alpha`, from
        SentencePiece's generator (sentencepiece.set_random_generator_seed)."""
        return self.processor.encode(" ".join(words), out_type=str, enable_sampling=True, alpha=alpha,
                                     nbest_size=-1)


class SidePipeline:
    """The fitted pipeline of one side (source or target); `bpe` segments the words into
    subwords: subword-nmt's BPE or a SentencePieceModel."""

    def __init__(self, lang: str, tokenize: bool, truecaser: MosesTruecaser | None,
                 bpe: BPE | SentencePieceModel | None):
        self.lang = lang
        self.tokenizer = MosesTokenizer(lang=lang)
        self.detokenizer = MosesDetokenizer(lang=lang) if tokenize else None
        self.do_tokenize = tokenize
        self.truecaser = truecaser
        self.detruecaser = line_start_only(MosesDetruecaser()) if truecaser is not None else None
        self.bpe = bpe
        self.bpe_cache: dict[str, tuple[str, ...]] = {}

    def words(self, line: str) -> list[str]:
        """Tokenise, normalise whitespace inside the token list, and truecase."""
        if self.do_tokenize:
            line = " ".join(self.tokenizer.tokenize(line, escape=False))
        # Re-splitting guarantees no token holds whitespace (e.g. a no-break space),
        # which the BPE codes and the vocabulary files could not represent.
        tokens = line.split()
        if self.truecaser is not None:
            tokens = truecase_tokens(self.truecaser, tokens)
        return tokens

    def subwords(self, words: Iterable[str]) -> list[str]:
        if self.bpe is None:
            return list(words)
        if isinstance(self.bpe, SentencePieceModel):  # fast enough on whole lines: no cache to bound
            return self.bpe.segment_tokens(list(words))
        cache = self.bpe_cache
        out: list[str] = []
        for word in words:
            pieces = cache.get(word)
            if pieces is None:
                if len(cache) >= BPE_CACHE_WORDS:
                    cache.clear()  # cheaper than keeping an LRU order on every hit
                pieces = cache[word] = tuple(self.bpe.segment_tokens([word]))
            out.extend(pieces)
        return out

    def decode(self, tokens: Sequence[str]) -> str:
        if isinstance(self.bpe, SentencePieceModel):
            words = "".join(tokens).replace(WORD_START, " ").split()
        else:
            words = _BPE_JOIN.sub("", " ".join(tokens)).split()
        if self.detruecaser is not None:
            words = self.detruecaser.detruecase(" ".join(words))
        if self.detokenizer is not None:
            return _rejoin_apostrophes(self.detokenizer.detokenize(words, unescape=False))
        return " ".join(words)


_SPACE_BEFORE_APOSTROPHE = re.compile(r"(?<=\w) ’")
_SPLIT_CONTRACTION = re.compile(r"(?<=\w)’ (?=(?:s|t|d|m|ll|re|ve)\b)")


def _rejoin_apostrophes(text: str) -> str:
    """Undo the Moses tokeniser's split of the typographic apostrophe.

    It splits "man’s" into "man ’ s" (it only knows the ASCII one), and its
    detokeniser does not rejoin them; ’ never opens a quotation, so a space
    before it is always an artefact, and one after it is when a clitic follows.
    """
    return _SPLIT_CONTRACTION.sub("’", _SPACE_BEFORE_APOSTROPHE.sub("’", text))


# Tokens after which the next word still counts as the start of the line.
_EXTRA_DELAYED_START = frozenset({"¿", "¡", "«", "“", "‘"})


def line_start_only(caser):
    """Make a sacremoses (de)truecaser treat only the start of the line as a sentence start.

    Moses also restarts a sentence after '.', ':', '?' and '!'. In verse text a
    colon (and often '!' or '?') is mostly followed by a lower-case word ("the
    tenth month: in the tenth month"), which the detruecaser would then
    capitalise; and a capital lost after '.' could not be restored either.
    With the line start only, decoding restores exactly the capital that
    encoding removed. Spanish opening marks delay the start like '(' does.
    """
    caser.SENT_END = set()
    caser.DELAYED_SENT_START = set(caser.DELAYED_SENT_START) | _EXTRA_DELAYED_START
    return caser


def truecase_tokens(truecaser: MosesTruecaser, tokens: list[str]) -> list[str]:
    """Apply a sacremoses truecasing model to a token list, as ``truecase(use_known=True)`` would.

    sacremoses re-parses the joined line with several regexes per token, which
    made truecasing the slowest step of the pipeline; this walks the list once.
    ``use_known=True`` is what Moses' truecase.perl does: a word seen in the
    training data keeps its case except at the start of a sentence.
    Lines with XML-like tokens or factors ("<", "|") go to sacremoses itself.
    """
    if any("<" in token or "|" in token for token in tokens):
        return truecaser.truecase(" ".join(tokens), use_known=True)
    best, known = truecaser.model["best"], truecaser.model["known"]
    sentence_end, delayed_start = truecaser.SENT_END, truecaser.DELAYED_SENT_START
    result: list[str] = []
    sentence_start = True
    for token in tokens:
        best_case = best.get(token.lower())
        if best_case and (sentence_start or token not in known):
            token = best_case
        result.append(token)
        if token in sentence_end:
            sentence_start = True
        elif token not in delayed_start:
            sentence_start = False
    return result


class Preprocessor:
    """Tokenise, truecase and segment text into subwords; made from what ctxnmt.data.stream
    learned, or by :meth:`load`."""

    def __init__(self, options: DataConfig, truecase_models: dict[str, MosesTruecaser],
                 bpe_codes: dict[str, str | bytes]):
        """``truecase_models`` maps each side to its model (empty without truecasing);
        ``bpe_codes`` maps "joint", or "src" and "tgt", to the learned subword model:
        subword-nmt codes text, or a SentencePiece model's bytes (``options.subwords``).
        """
        self.options = options
        self._truecase_models = truecase_models
        self._bpe_codes = bpe_codes
        self._sides = {
            side: SidePipeline(
                options.lang(side),
                options.tokenize,
                truecase_models.get(side),
                make_segmenter(options, bpe_codes.get("joint", bpe_codes.get(side))),
            )
            for side in SIDES
        }

    # --- applying ---------------------------------------------------------------

    def encode(self, line: str, side: str) -> list[str]:
        """Tokenise, truecase and segment into subwords one line of ``side`` ("src" or "tgt")."""
        pipeline = self._side(side)
        return pipeline.subwords(pipeline.words(line))

    def encode_many(self, lines: Sequence[str], side: str) -> list[list[str]]:
        """Encode many lines; repeated lines and words are processed once."""
        pipeline = self._side(side)
        done = _unique_map(lambda line: pipeline.subwords(pipeline.words(line)), lines)
        return [list(done[line]) for line in lines]  # copies: callers may modify their lists

    def decode(self, tokens: Sequence[str], side: str) -> str:
        """Join subwords into words, restore sentence-initial capitals and detokenise."""
        return self._side(side).decode(tokens)

    def _side(self, side: str) -> SidePipeline:
        try:
            return self._sides[side]
        except KeyError:
            raise ValueError(f"side must be 'src' or 'tgt', not {side!r}") from None

    # --- storage ----------------------------------------------------------------

    def save(self, directory: str | os.PathLike) -> None:
        """Write ``preprocess.json`` and the model files it names into ``directory``."""
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        files: dict[str, str] = {}
        for side, truecaser in self._truecase_models.items():
            files[f"truecase_{side}"] = name = f"preprocess.truecase.{side}"
            # sacremoses writes its model through a temporary file and a rename too.
            truecaser.save_model(os.path.join(directory, name))
        scheme = self.options.subwords
        for key, codes in self._bpe_codes.items():
            files[f"{scheme}_{key}"] = name = f"preprocess.{scheme}.{key}"
            binary = scheme == SENTENCEPIECE_SCHEME
            with atomic_write(os.path.join(directory, name), "wb" if binary else "w") as handle:
                handle.write(codes)
        # Written last: a directory with preprocess.json is a complete one.
        record = {"format": FORMAT_VERSION, "options": self.options.pipeline(), "files": files}
        with atomic_write(os.path.join(directory, OPTIONS_FILE)) as handle:
            json.dump(record, handle, indent=2)
            handle.write("\n")

    @classmethod
    def load(cls, directory: str | os.PathLike) -> Preprocessor:
        """Read a preprocessor written by :meth:`save`; raises CheckpointError naming the bad file."""
        directory = os.fspath(directory)
        record = _read_record(os.path.join(directory, OPTIONS_FILE))
        options_path = os.path.join(directory, OPTIONS_FILE)
        try:
            opts = make_options(record["options"])
        except ConfigError as err:
            raise CheckpointError(f"{options_path}: {err}") from None
        files = record["files"]
        truecasers = {}
        if opts.truecase:
            for side in SIDES:
                truecasers[side] = _load_truecaser(_model_file(directory, files, f"truecase_{side}", options_path))
        codes = {}
        if opts.subwords == SENTENCEPIECE_SCHEME or opts.bpe_merges:
            read = _read_sentencepiece if opts.subwords == SENTENCEPIECE_SCHEME else _read_codes
            for key in ("joint",) if opts.joint_bpe else SIDES:
                codes[key] = read(_model_file(directory, files, f"{opts.subwords}_{key}", options_path))
        return cls(opts, truecasers, codes)


def moses_words(lines: Sequence[str], lang: str) -> list[list[str]]:
    """Moses-tokenise lines into word lists (no truecasing, no BPE); each distinct line once."""
    side = SidePipeline(lang, True, None, None)
    done = _unique_map(side.words, lines)
    return [list(done[line]) for line in lines]


# --- helpers ---------------------------------------------------------------------------


def make_options(options: dict) -> DataConfig:
    """The data settings a preprocess.json records (DataConfig.pipeline), checked as a config's are."""
    unknown = sorted(set(options) - set(PIPELINE_KEYS))
    if unknown:
        raise ConfigError(f"preprocessing: unknown option(s) {', '.join(unknown)}; known: {', '.join(PIPELINE_KEYS)}")
    missing = sorted({"src_lang", "tgt_lang"} - set(options))
    if missing:
        raise ConfigError(f"preprocessing: missing option(s) {', '.join(missing)}")
    try:
        data = build_typed(DataConfig, options)
        check_section(data, "data", None)
    except ConfigError as err:
        raise ConfigError(f"preprocessing: {err}") from None
    return data


def _unique_map(function, lines: Iterable[str]) -> dict[str, list[str]]:
    """``{line: function(line)}``, computing each distinct line once."""
    result: dict[str, list[str]] = {}
    for line in lines:
        if line not in result:
            result[line] = function(line)
    return result


def learn_subwords(opts: DataConfig, counts: dict[str, Counter],
                   sentences: Callable[[tuple[str, ...]], Iterator[str]]) -> dict[str, str | bytes]:
    """The subword model(s) of `opts`: BPE codes learned from the word `counts`, or SentencePiece
    models from the lines of words that `sentences(sides)` yields, each side's in turn."""
    if opts.subwords == SENTENCEPIECE_SCHEME:
        if opts.joint_bpe:
            return {"joint": _learn_sentencepiece(opts, sentences(SIDES))}
        return {side: _learn_sentencepiece(opts, sentences((side,))) for side in SIDES}
    return learn_codes(opts, counts)


# Sentences SentencePiece learns from, sampled (with its own fixed seed) where the corpus has
# more: it holds them in memory, so a corpus of any size costs at most this many.
SENTENCEPIECE_SENTENCES = 2_000_000
# The unigram trainer sums per-thread partial counts in thread order: the model is the same
# on every run with the same number of threads, another with another number.  Fixed, then,
# never the machine's cores or prepare's workers.
SENTENCEPIECE_THREADS = 8


def _learn_sentencepiece(opts: DataConfig, lines: Iterator[str]) -> bytes:
    """A SentencePiece model of at most sentencepiece_vocab pieces (fewer where the corpus has
    fewer: a tiny corpus cannot fill a large vocabulary), on the text as it is ("identity": NFKC
    would change what decoding gives back, and can split a word in two)."""
    model = io.BytesIO()
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=lines, model_writer=model, model_type=opts.sentencepiece_type,
            vocab_size=opts.sentencepiece_vocab, hard_vocab_limit=False, normalization_rule_name="identity",
            input_sentence_size=SENTENCEPIECE_SENTENCES, shuffle_input_sentence=True,
            num_threads=SENTENCEPIECE_THREADS, bos_id=-1, eos_id=-1, minloglevel=2)
    except RuntimeError as err:  # "INTERNAL: file(line) [condition] reason"
        reason = str(err).split("] ", 1)[-1].strip() or "no sentence to learn from"
        raise ConfigError(f"preprocessing: SentencePiece cannot learn a model of sentencepiece_vocab "
                          f"{opts.sentencepiece_vocab} pieces here: {reason}") from None
    return model.getvalue()


def make_segmenter(opts: DataConfig, model: str | bytes | None) -> BPE | SentencePieceModel | None:
    if model is None:
        return None
    if opts.subwords == SENTENCEPIECE_SCHEME:
        return SentencePieceModel(model)
    return BPE(io.StringIO(model), separator=BPE_SEPARATOR)


def learn_codes(opts: DataConfig, counts: dict[str, Counter]) -> dict[str, str]:
    if opts.bpe_merges == 0:
        return {}
    if opts.joint_bpe:
        return {"joint": _learn_bpe(counts["src"] + counts["tgt"], opts.bpe_merges)}
    return {side: _learn_bpe(counts[side], opts.bpe_merges) for side in SIDES}


def _learn_bpe(counts: Counter, merges: int) -> str:
    """Learn BPE codes from word counts with subword-nmt; returns the codes file text."""
    vocabulary = [f"{word} {count}" for word, count in counts.items()]
    out = io.StringIO()
    # subword-nmt draws a tqdm progress bar on stderr; callers report progress themselves.
    with mock.patch.object(_learn_bpe_module, "tqdm", lambda iterable, *args, **kwargs: iterable):
        _learn_bpe_module.learn_bpe(vocabulary, out, merges, is_dict=True)
    codes = out.getvalue()
    if len(codes.splitlines()) < 2:  # only the "#version" line
        # subword-nmt cannot even load a codes file without merges.
        raise ConfigError("preprocessing: no BPE merge could be learned (no pair of symbols occurs twice); "
                          "set bpe_merges to 0 or use more training data")
    return codes


def _read_record(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file (was the model directory created by ctxnmt train?)") from None
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path}: cannot read preprocessing settings ({err})") from None
    if not (isinstance(record, dict) and isinstance(record.get("options"), dict)
            and isinstance(record.get("files"), dict)):
        raise CheckpointError(f"{path}: not a preprocessing settings file")
    if record.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: format {record.get('format')!r} is not supported (expected {FORMAT_VERSION})")
    return record


def _model_file(directory: str, files: dict, key: str, options_path: str) -> str:
    name = files.get(key)
    if not isinstance(name, str) or os.path.basename(name) != name:
        raise CheckpointError(f"{options_path}: no valid file name for {key!r}")
    return os.path.join(directory, name)


def _load_truecaser(path: str) -> MosesTruecaser:
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: truecasing model missing")
    try:
        return line_start_only(MosesTruecaser(load_from=path))
    except (ValueError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path}: corrupt truecasing model ({err})") from None


def _read_sentencepiece(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            model = handle.read()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: SentencePiece model missing") from None
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read the SentencePiece model ({err})") from None
    try:
        SentencePieceModel(model)
    except RuntimeError:
        raise CheckpointError(f"{path}: corrupt SentencePiece model (not a serialised model)") from None
    return model


def _read_codes(path: str) -> str:
    """Read and check a BPE codes file (subword-nmt would call sys.exit on a bad line)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: BPE codes missing") from None
    except (OSError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path}: cannot read BPE codes ({err})") from None
    lines = text.rstrip("\n").split("\n")
    first = 2 if lines[0].startswith("#version:") else 1
    if first > len(lines):
        raise CheckpointError(f"{path}: no BPE codes in the file")
    for number, line in enumerate(lines[first - 1 :], start=first):
        if len(line.strip("\r\n ").split(" ")) != 2:
            raise CheckpointError(f"{path}:{number}: a BPE code must be two symbols separated by a space")
    return text
