"""Raw text in, detokenised text out: the Python API behind `ctxnmt translate`.

    translator = Translator.load("runs/demo")
    outputs = translator.translate(["Y dijo Dios: Sea la luz."], beam=5, return_attention=True)

Output i is always the translation of input i: empty inputs give empty outputs,
and an input longer than the model's limit is translated in pieces (with a
warning naming the line) rather than crashing or exhausting memory.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ctxnmt.config import TRANSLATION, Config, load_config, read_raw
from ctxnmt.data.batching import pad, pad_context
from ctxnmt.data.documents import check_document_ids, previous_sentences
from ctxnmt.data.prepare import load_length_ratios, load_pipeline
from ctxnmt.data.vocab import EOS, Vocab
from ctxnmt.data.words import WordBoundaries
from ctxnmt.decoding.ahead import EncodedAhead
from ctxnmt.decoding.beam import Hypothesis, search_batches
from ctxnmt.decoding.ensemble import Ensemble, check_members, document_sents
from ctxnmt.decoding.forced import ForcedScore, forced_log_probs
from ctxnmt.decoding.graphs import graphed
from ctxnmt.decoding.length import LengthControl, length_control, needs_word_ratio, uses_ratios
from ctxnmt.decoding.searchable import TranslationModel
from ctxnmt.decoding.settings import DecodingConfig
from ctxnmt.decoding.workers import shares, side_by_side
from ctxnmt.errors import CheckpointError, ConfigError, DataError
from ctxnmt.length_options import OPTIONS, check, decoding_options, with_options
from ctxnmt.models.context import context_sentences, reads_target_context
from ctxnmt.models.int8 import int8_products
from ctxnmt.models.migrations import load_model_checkpoint, saved_task
from ctxnmt.models.nmt import build_model
from ctxnmt.utils.checkpoint import check_compatible, checkpoint_file, default_checkpoint, load_model_state
from ctxnmt.utils.messages import Log, warn
from ctxnmt.utils.options import choices, field_problem


@dataclass
class Translation:
    text: str
    score: float = 0.0
    src_tokens: list[str] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)  # output subwords, without EOS
    attention: torch.Tensor | None = None  # (len(tokens) + 1, len(src_tokens))
    nbest: list[Translation] = field(default_factory=list)  # includes the best one first
    signals: dict = field(default_factory=dict)  # with the attention: the rest the model shows (Searchable.signals)
    context: list[int] = field(default_factory=list)  # the input lines it read as document context


def _sorted_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    return [order[i: i + batch_size] for i in range(0, len(order), batch_size)]


def searches_in_bf16(dec: DecodingConfig, device) -> bool:
    """Whether `decoding.precision` takes effect: bf16 autocast runs on CUDA only, and the
    search stays float32 elsewhere (a GPU-trained model directory translates on a laptop)."""
    return dec.precision == "bf16" and torch.device(device).type == "cuda"


def search_precision(dec: DecodingConfig, device):
    """The context that search and forced scoring run in for `decoding.precision`: bf16
    autocast on CUDA, int8 products on the CPU (refused elsewhere: never float32 in silence)."""
    if dec.precision == "int8":
        if torch.device(device).type != "cpu":
            raise ConfigError(f"decoding.precision int8 runs on the CPU only (got device '{device}')")
        return int8_products(dec.int8_from)
    # bf16: the products in bfloat16, softmax and scores in float32 (autocast's rules; a graph
    # captures under the autocast it is first called in)
    return torch.autocast("cuda", dtype=torch.bfloat16) if searches_in_bf16(dec, device) else nullcontext()


@torch.no_grad()
def search_ids(model, src_ids: list[list[int]], dec: DecodingConfig, beam: int, nbest: int = 1,
               batch_size: int | None = None, device="cpu", return_attention: bool = False,
               context: list[list[list[int]]] | None = None,
               length: LengthControl | None = None,
               target_of: list[list[list[int]]] | None = None) -> list[list[Hypothesis]]:
    """Beam search for a list of id sequences, batched by similar length.  An empty sequence
    gets no hypothesis (an empty translation) and is never searched: its source row would be
    all padding, with no attention distribution to form.

    `context[i]`: sentence i's previous source sentences (id lists, oldest first) for a
    document-context model; it travels with sentence i through the length sorting.
    `target_of[i]`, for a model that reads its own previous translations (2-to-2): for each of
    sentence i's context sentences, the sentences whose best translations, joined, are its
    target side.  Sentence i is then searched after those: all documents advance together,
    sentence t of each after its sentence t − 1, and the waves' sentences are encoded ahead of
    them in full batches (ctxnmt.decoding.ahead), where no attention is returned.  With
    `dec.workers` > 1 (CPU), the documents are dealt among the workers, each searching its own
    wave by wave; without target context, each batch goes to one worker.
    `length`: the length settings (default: `dec`'s, with `max_len_rule: data` unresolved)."""
    model.eval()
    on_cuda = torch.device(device).type == "cuda"
    if dec.cuda_graphs and on_cuda:
        model = graphed(model)
    length = length if length is not None else length_control(dec, None, warn)
    size = batch_size or dec.batch_size
    todo = [i for i, s in enumerate(src_ids) if s]
    # Greedy search: the next batch joins once fewer than half a batch of sentences is left
    # (search_batches); beams run batch by batch, where refill measured slower (docs/speed.md).
    refill = max(1, size // 2) if beam == 1 else 0

    def search(wave_batches) -> dict[int, list[Hypothesis]]:
        with search_precision(dec, device):  # its int8 and autocast states are the thread's own
            return search_batches(model, wave_batches, beam, nbest, length, return_attention=return_attention,
                                  refill_below=refill)

    def in_waves(sentences: list[int], workers: int) -> dict[int, list[Hypothesis]]:
        """The sentences searched wave by wave, each wave's batches dealt among `workers`."""
        found: dict[int, list[Hypothesis]] = {}

        def own_translation(group: list[int]) -> list[int]:
            return [t for j in group for t in (found[j][0].tokens if found.get(j) else [])] + [EOS]

        def batches(wave: list[int]):
            for batch in _sorted_batches([len(src_ids[i]) for i in wave], size):
                index = [wave[j] for j in batch]
                src, mask = pad([src_ids[i] for i in index])
                targets = None if target_of is None else [[own_translation(g) for g in target_of[i]] for i in index]
                ctx = None if context is None else pad_context([context[i] for i in index], targets=targets).to(device)
                formed = () if ahead is None else (ahead.rows(index, src.size(1)),)
                yield index, src.to(device), mask.to(device), ctx, *formed

        waves = _waves(sentences, target_of)
        # a 2-to-2 model's documents (not a model whose encoder reads the previous translations)
        encodes_ahead = len(waves) > 1 and context is not None and not return_attention \
            and not model.encoding_reads_target
        ahead: EncodedAhead | None = None
        for w, wave in enumerate(waves):
            if encodes_ahead and (ahead is None or wave[0] not in ahead.where):
                group = _next_waves(waves, w, AHEAD_SENTENCES)
                with search_precision(dec, device):
                    ahead = EncodedAhead(model, src_ids, context, group, size, beam, device) if group else None
            if workers == 1 or len(wave) <= size:  # one batch: nothing to share
                searched = search(batches(wave))
            else:
                searched = side_by_side(search, shares(list(batches(wave)), workers, lambda b: b[1].numel()))
            found = found | searched if found else searched
        return found

    workers = 1 if on_cuda else dec.workers
    documents = _documents(todo, target_of) if workers > 1 and target_of is not None else []
    if len(documents) > 1:  # each worker its own documents, wave by wave
        dealt = shares(documents, workers, lambda d: sum(len(src_ids[i]) for i in d))
        found = side_by_side(lambda share: in_waves(sorted(i for d in share for i in d), 1), dealt)
    else:
        found = in_waves(todo, workers)
    return [found[i] if src_ids[i] else [] for i in range(len(src_ids))]


# At most this many sentences are held encoded ahead of their waves (ctxnmt.decoding.ahead): about
# 100-200 MB at the protocol's sizes.  A wave of more is encoded batch by batch: its batches are full.
AHEAD_SENTENCES = 256


def _next_waves(waves: list[list[int]], w: int, most: int) -> list[int]:
    """The sentences of waves w, w + 1, … up to `most` in all (none if wave w alone holds more)."""
    group: list[int] = []
    for wave in waves[w:]:
        if len(group) + len(wave) > most:
            break
        group += wave
    return group


def _documents(todo: list[int], target_of: list[list[list[int]]]) -> list[list[int]]:
    """The sentences `todo` grouped by the target context that links them: a document's sentences,
    whose waves must run in one search."""
    root = {i: i for i in todo}

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    for i in todo:
        for j in (j for group in target_of[i] for j in group if j in root):
            root[find(j)] = find(i)
    documents: dict[int, list[int]] = {}
    for i in todo:
        documents.setdefault(find(i), []).append(i)
    return list(documents.values())


def _waves(todo: list[int], target_of: list[list[list[int]]] | None) -> list[list[int]]:
    """The sentences `todo` in the order their target context allows: all at once without one,
    else wave w holds the sentences whose context sentences are all in earlier waves."""
    if target_of is None:
        return [todo]
    level: dict[int, int] = {}
    for i in sorted(todo):
        before = [level.get(j, -1) for group in target_of[i] for j in group if j < i]
        level[i] = 1 + max(before, default=-1)
    waves: dict[int, list[int]] = {}
    for i in todo:
        waves.setdefault(level[i], []).append(i)
    return [waves[w] for w in sorted(waves)]


def translate_ids(model, src_ids, preprocessor, tgt_vocab: Vocab, dec: DecodingConfig, beam: int, device="cpu",
                  nbest: int = 1, context: list[list[list[int]]] | None = None,
                  length: LengthControl | None = None,
                  target_of: list[list[list[int]]] | None = None) -> list[Translation]:
    """Translations of already encoded sources (used by validation); an empty source's is empty."""
    out = []
    for hyps in search_ids(model, src_ids, dec, beam, nbest, device=device, context=context, length=length,
                           target_of=target_of):
        out.append(_to_translation(hyps, preprocessor, tgt_vocab, []))
    return out


def _to_translation(hyps: list[Hypothesis], preprocessor, tgt_vocab: Vocab, src_tokens: list[str]) -> Translation:
    items = []
    for h in hyps:
        tokens = tgt_vocab.decode(h.tokens)
        items.append(Translation(preprocessor.decode(tokens, "tgt"), h.score, src_tokens, tokens, h.attention,
                                 signals=h.signals))
    best = items[0] if items else Translation("")
    best.nbest = items
    return best


class Translator:
    def __init__(self, config: Config, model: TranslationModel, preprocessor, src_vocab: Vocab, tgt_vocab: Vocab,
                 device="cpu", document_sents: int | None = None, prep_dir: Path | None = None,
                 members: list[TranslationModel] | None = None, ensemble_mode: str | None = None,
                 reads_target: bool | None = None):
        self.config, self.model = config, model
        # the models it translates with: the one model, or an ensemble's members and how it combines them
        self.members, self.ensemble_mode = members or [model], ensemble_mode
        self.prep_dir = prep_dir  # where `max_len_rule: data` finds the training length ratios
        self._ratios: dict[bool, Mapping[str, float] | None] = {}  # by whether the word ratio was asked for
        # K previous sentences a document-context model reads (0: the model reads none); an
        # ensemble's is its document-context members' (they must agree).
        self.document_sents = context_sentences(config.model) if document_sents is None else document_sents
        # whether the model (an ensemble: a member) reads its own previous translations (2-to-2):
        # documents then advance together, a sentence after its previous ones
        self.reads_target = reads_target_context(config.model) if reads_target is None else reads_target
        self.preprocessor, self.src_vocab, self.tgt_vocab = preprocessor, src_vocab, tgt_vocab
        self.device = device
        self.warn: Log = warn  # where warnings go (a server sends them to its log)
        self._warned: set[str] = set()

    @classmethod
    def load(cls, model_dir: str | Path | list, checkpoint: str | None = None, device: str = "cpu",
             ensemble_mode: str = "logprob") -> Translator:
        """One model directory, or a list of them: an ensemble (decoded with the first
        member's decoding settings); `checkpoint` as --checkpoint names it (best, last or a file)."""
        if isinstance(model_dir, (list, tuple)):
            return cls.load_ensemble(model_dir, checkpoint, device, ensemble_mode)
        model_dir = Path(model_dir)
        config_path = model_dir / "config.yaml"
        if not config_path.is_file():
            raise CheckpointError(f"{model_dir}: not a model directory (no config.yaml)")
        if saved_task(read_raw(config_path)) != TRANSLATION:
            raise CheckpointError(f"{model_dir}: a language model's directory (ctxnmt lm score reads it), "
                                  "not a translation model's")
        config = load_config(config_path)
        pre, src_vocab, tgt_vocab = load_pipeline(model_dir / "prep")
        path = checkpoint_file(model_dir, checkpoint) if checkpoint else default_checkpoint(model_dir)
        payload = load_model_checkpoint(path)
        check_compatible(payload, path, config.to_dict()["model"], src_vocab.fingerprint(), tgt_vocab.fingerprint())
        model = build_model(config.model, len(src_vocab), len(tgt_vocab))
        load_model_state(model, payload, path)
        model.to(device).eval()
        return cls(config, model, pre, src_vocab, tgt_vocab, device, prep_dir=model_dir / "prep")

    @classmethod
    def load_ensemble(cls, model_dirs: list, checkpoint: str | None = None, device: str = "cpu",
                      mode: str = "logprob") -> Translator:
        if len(model_dirs) > 1 and checkpoint:
            raise CheckpointError("--checkpoint names one model's file; it cannot be used with an ensemble")
        members = [cls.load(d, checkpoint, device) for d in model_dirs]
        check_members([Path(d) for d in model_dirs], members)
        first = members[0]
        model = Ensemble([m.model for m in members], mode).to(device).eval()
        return cls(first.config, model, first.preprocessor, first.src_vocab, first.tgt_vocab, device,
                   document_sents=document_sents([Path(d) for d in model_dirs], members), prep_dir=first.prep_dir,
                   members=[m.model for m in members], ensemble_mode=mode,
                   reads_target=any(m.reads_target for m in members))

    def translate(self, lines: list[str], beam: int | None = None, nbest: int = 1, batch_size: int | None = None,
                  return_attention: bool = False, doc_ids: list[str] | None = None,
                  length: Mapping[str, Any] | None = None) -> list[Translation]:
        """`doc_ids[i]`: line i's document; a document-context model then reads each line's
        previous lines of its document as context (see ctxnmt.data.documents).  `length`:
        length options (`length_penalty`, `max_len_a`, … as in the config's decoding section)
        that replace the config's for this call."""
        dec = self.config.decoding
        beam = beam or dec.beam
        control = self.length_control(length)
        pieces, owners, src_tokens = self._segment(lines)
        ids = [self.src_vocab.encode(p, add_eos=False) for p in pieces]
        context, previous = self._document_context(lines, doc_ids, owners, src_tokens)
        target_of = [[owners.get(j, []) for j in lines_before] for lines_before in previous] \
            if self.reads_target and previous is not None else None
        if dec.precision == "bf16" and not searches_in_bf16(dec, self.device):
            self._warn_once(f"decoding.precision {dec.precision} applies on CUDA only; searching in float32 "
                            f"on {self.device}")
        if dec.workers > 1 and torch.device(self.device).type != "cpu":
            self._warn_once(f"decoding.workers {dec.workers} applies on the CPU only; one search on {self.device}")
        hyps = search_ids(self.model, ids, dec, beam, nbest, batch_size, self.device, return_attention,
                          context, control, target_of)
        per_piece = [_to_translation(h, self.preprocessor, self.tgt_vocab, p) for h, p in zip(hyps, pieces)]
        out = [Translation("") for _ in lines]
        for line_no in range(len(lines)):
            parts = [per_piece[k] for k in owners.get(line_no, [])]
            if len(parts) == 1:
                out[line_no] = parts[0]
            elif parts:
                text = " ".join(p.text for p in parts)
                out[line_no] = Translation(text, sum(p.score for p in parts), src_tokens[line_no],
                                           [t for p in parts for t in p.tokens])
                out[line_no].nbest = [out[line_no]]
            if parts and previous is not None:
                out[line_no].context = previous[owners[line_no][0]]
        return out

    def score(self, lines: list[str], targets: list[str | None], doc_ids: list[str] | None = None,
              batch_size: int | None = None,
              context_targets: list[str | None] | None = None) -> list[ForcedScore | None]:
        """The log-probability of each token of `targets[i]` as the translation of `lines[i]`
        (None: line i is only context for the lines after it), through the model's own
        preprocessing.  `doc_ids`: as for `translate`; a document-context model reads each
        line's previous lines of its document.  A source is scored whole, however long.
        A model that reads previous target sentences (2-to-2) reads `context_targets[j]` as line
        j's, where given, else its own translation of line j."""
        if len(targets) != len(lines):
            raise DataError(f"{len(targets)} targets for {len(lines)} source lines")
        src_tokens = {n: tokens for n, line in enumerate(lines) if line.strip()
                      for tokens in [self.preprocessor.encode(line, "src")] if tokens}
        todo = [n for n, target in enumerate(targets) if target is not None]
        for n in todo:
            if n not in src_tokens:
                raise DataError(f"line {n + 1}: an empty source sentence cannot be scored")
        context, previous = self._document_context(lines, doc_ids, {n: [p] for p, n in enumerate(todo)},
                                                   src_tokens)
        src_ids = [self.src_vocab.encode(src_tokens[n], add_eos=False) for n in todo]
        tgt_tokens = [self.preprocessor.encode(targets[n], "tgt") for n in todo]
        target_context = None
        if self.reads_target and previous is not None:
            given = context_targets or [None] * len(lines)
            own = self._own_translations(lines, doc_ids, sorted({j for b in previous for j in b if given[j] is None}))
            text = {j: given[j] if given[j] is not None else own[j] for b in previous for j in b}
            ids = {j: self.tgt_vocab.encode(self.preprocessor.encode(t, "tgt")) for j, t in text.items()}
            target_context = [[ids[j] for j in b] for b in previous]
        with search_precision(self.config.decoding, self.device):
            scores = forced_log_probs(self.model, src_ids, [self.tgt_vocab.encode(t) for t in tgt_tokens],
                                      context, batch_size or self.config.decoding.batch_size, self.device,
                                      target_context)
        out: list[ForcedScore | None] = [None] * len(lines)
        for n, tokens, logp in zip(todo, tgt_tokens, scores):
            out[n] = ForcedScore([*tokens, "</s>"], logp)
        return out

    def _own_translations(self, lines: list[str], doc_ids: list[str], needed: list[int]) -> dict[int, str]:
        """The model's own translations of the lines `needed`, each document's in order after its
        earlier needed lines; a run of lines repeated in several documents (a contrastive set's
        context, once per candidate) is translated once."""
        runs: dict[str, list[int]] = {}
        for j in needed:
            runs.setdefault(doc_ids[j], []).append(j)
        unique: dict[tuple[str, ...], list[list[int]]] = {}
        for run in runs.values():
            unique.setdefault(tuple(lines[j] for j in run), []).append(run)
        batch_lines = [line for key in unique for line in key]
        batch_docs = [f"run{r}" for r, key in enumerate(unique) for _ in key]
        translated = iter(t.text for t in self.translate(batch_lines, doc_ids=batch_docs))
        out: dict[int, str] = {}
        for key, copies in unique.items():
            texts = [next(translated) for _ in key]
            for run in copies:
                out.update(zip(run, texts))
        return out

    def use_cuda_graphs(self) -> None:
        """Search with `decoding.cuda_graphs` on, whatever the model directory's config says."""
        self._needs_cuda("--cuda-graphs")
        self.config.decoding = dataclasses.replace(self.config.decoding, cuda_graphs=True)

    def use_precision(self, precision: str, flag: str | None = None) -> None:
        """Search and score in `precision` (`decoding.precision`), whatever the model directory's
        config says: bf16 only on CUDA (on one H200, beam 5 of the papers'-size model ran 1.19× as
        fast as float32; the scores differ in their last digits), int8 only on the CPU."""
        problem = field_problem(precision, choices(DecodingConfig, "precision"))
        if problem:
            raise ConfigError(f"decoding.precision {problem}")
        if precision == "bf16":
            self._needs_cuda(flag or f"--precision {precision}")
        if precision == "int8" and torch.device(self.device).type != "cpu":
            raise ConfigError(f"{flag or '--precision int8'} runs on the CPU only (got --device {self.device})")
        self.config.decoding = dataclasses.replace(self.config.decoding, precision=precision)

    def use_workers(self, workers: int, flag: str = "--workers") -> None:
        """Search with `workers` searches side by side (`decoding.workers`), on the CPU only."""
        problem = field_problem(workers, ">=1")
        if problem:
            raise ConfigError(f"{flag} {problem}")
        if workers > 1 and torch.device(self.device).type != "cpu":
            raise ConfigError(f"{flag} {workers} runs on the CPU only (got --device {self.device})")
        self.config.decoding = dataclasses.replace(self.config.decoding, workers=workers)

    def _needs_cuda(self, flag: str) -> None:
        if torch.device(self.device).type != "cuda":
            raise ConfigError(f"{flag} needs --device cuda (got '{self.device}')")

    def length_control(self, overrides: Mapping[str, Any] | None = None) -> LengthControl:
        """The config's length settings with `overrides`, checked; `max_len_rule: data` reads
        the training length ratios of the (first) model directory."""
        unknown = sorted(set(overrides or {}) - set(OPTIONS))
        if unknown:
            raise ConfigError(f"{unknown[0]}: not a length option (they are {', '.join(OPTIONS)})")
        dec = with_options(self.config.decoding, overrides or {})
        check(decoding_options(dec), str, ConfigError)
        return length_control(dec, self._length_ratios(needs_word_ratio(dec)) if uses_ratios(dec) else None,
                              self._warn_once,
                              WordBoundaries.of(self.src_vocab, self.tgt_vocab, self.preprocessor.options.subwords)
                              if dec.length_ratio_penalty else None)

    def _length_ratios(self, words: bool) -> Mapping[str, float] | None:
        if words not in self._ratios:  # read once: measured on an older directory's pairs, it takes a moment
            self._ratios[words] = load_length_ratios(self.prep_dir, words) if self.prep_dir is not None else None
        return self._ratios[words]

    def _document_context(self, lines, doc_ids, owners, src_tokens):
        """Each piece's previous source sentences: its line's previous non-empty lines in the same
        document (every piece of an over-long line gets its line's context), and those lines'
        numbers; (None, None) for a model without document context or lines without ids."""
        if not self.document_sents:
            if doc_ids is not None:
                self._warn_once("this model uses no document context; the document ids are ignored")
            return None, None
        if doc_ids is None:
            self._warn_once("this model uses document context but no document ids were given (--doc-ids): "
                            "every sentence is translated with empty context")
            return None, None
        check_document_ids(doc_ids, "doc_ids", len(lines))
        limit = self.config.decoding.max_src_len
        line_ids = {n: self.src_vocab.encode(t[:limit], add_eos=False) for n, t in src_tokens.items()}
        previous = previous_sentences(doc_ids, self.document_sents, [n in line_ids for n in range(len(lines))])
        context: list[list[list[int]]] = [[] for _ in range(sum(len(o) for o in owners.values()))]
        before: list[list[int]] = [[] for _ in context]
        for line_no, piece_nos in owners.items():
            for p in piece_nos:
                context[p] = [line_ids[j] for j in previous[line_no]]
                before[p] = previous[line_no]
        return context, before

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            self.warn(message)

    def _segment(self, lines: list[str]):
        """Subword pieces to translate, and which line each piece belongs to."""
        limit = self.config.decoding.max_src_len
        pieces: list[list[str]] = []
        owners: dict[int, list[int]] = {}
        src_tokens: dict[int, list[str]] = {}
        for line_no, line in enumerate(lines):
            if not line.strip():
                continue
            tokens = self.preprocessor.encode(line, "src")
            if not tokens:
                continue
            src_tokens[line_no] = tokens
            chunks = [tokens[i: i + limit] for i in range(0, len(tokens), limit)]
            if len(chunks) > 1:
                self.warn(f"input line {line_no + 1} has {len(tokens)} subwords, more than the limit of {limit}; "
                          f"translating it in {len(chunks)} pieces")
            for chunk in chunks:
                owners.setdefault(line_no, []).append(len(pieces))
                pieces.append(chunk)
        return pieces, owners, src_tokens

