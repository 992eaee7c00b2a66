"""Batched beam search over many sentences at once.

Each row of the decoder state is one hypothesis (sentence-major, K rows per
sentence); the encoder side is kept once per sentence and shared by its rows.
After every step one index vector both reorders the beams and drops the
sentences that are finished, and that one gather (`State.select`) is applied to
the decoder state; both states declare their entries (ctxnmt.models.state), so
search needs to know nothing of any model's, nor of the model beyond `Searchable`
(ctxnmt.decoding.searchable).  Finished sentences are dropped once they hold an eighth
of the rows (DROP_SHARE); until then their rows stay and search nothing.  Greedy search
is beam search with K = 1.

Finished hypotheses are ranked by the length and coverage penalties of `LengthControl`
(ctxnmt.decoding.length); for the coverage penalty each row carries its attention summed
over its steps, kept only when β > 0.  With a length-ratio prior every open row's </s>
finishes a hypothesis at every step (see there).

`search_batches` runs many batches; with refill, the next batch joins the tail of
the current one (see there).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import torch
from torch.nn import functional as F

from ctxnmt.data.vocab import EOS, PAD
from ctxnmt.data.words import word_starts
from ctxnmt.decoding.length import LengthControl, coverage_penalty
from ctxnmt.decoding.searchable import Searchable
from ctxnmt.models.state import State


@dataclass
class Hypothesis:
    tokens: list[int]  # without the final EOS
    score: float  # log-probability / lp(y) + cp(x; y) (ctxnmt.decoding.length)
    logprob: float
    attention: torch.Tensor | None = None  # (len(tokens) + 1, S): per output incl. EOS, per source position
    signals: dict = field(default_factory=dict)  # with the attention: the rest the model shows (Searchable.signals)


@dataclass
class _Sentence:
    max_len: int
    src_words: int = 0  # W(x), counted only for a length-ratio prior
    src_len: int = 0  # its source positions: the columns of its hypotheses' attention (not the batch's padding)
    keep: int = 1  # finished hypotheses worth keeping: max(K, nbest)
    finished: list[Hypothesis] = field(default_factory=list)

    def settle(self) -> None:
        """Keep the `keep` best finished hypotheses, best first.  A length-ratio prior ends K
        rows a step, so unpruned the list would grow with the output (and hold each one's
        attention).  The sort is stable and later ones are only appended, so what is kept
        and returned is what sorting the whole list would give."""
        if len(self.finished) > 1:
            self.finished = sorted(self.finished, key=lambda h: -h.score)[:self.keep]


@dataclass
class _Part:
    """Sentences searched together.  Sentences that joined later have taken fewer
    steps, so each row's words are its last `steps` entries of a left-padded history."""
    active: list[int | None]  # the caller's index of each sentence; None: finished, its rows not yet dropped
    steps: list[int]  # words each sentence's hypotheses hold so far
    src_lens: list[int]  # each sentence's source length
    width: int  # padded source length of the encoder side
    enc: State  # per sentence
    state: State  # per hypothesis
    scores: torch.Tensor  # (n, K)
    history: torch.Tensor  # (n·K, L)
    att_history: torch.Tensor | None = None  # (n·K, L, S)
    prev: torch.Tensor | None = None  # the words just chosen; None before the first step
    coverage: torch.Tensor | None = None  # (n·K, S): Σ_t α_t of each row; only for a coverage penalty
    # where each sentence's memory ends when its model attends to more than its source (a
    # concatenation model's context, after the source positions); None: the source lengths
    memory_lens: list[int] | None = None
    record: State | None = None  # each row's Searchable.recorded over its steps (n·K, L, …); with attention

    def attended(self) -> list[int]:
        return self.memory_lens if self.memory_lens is not None else self.src_lens

    def searching(self) -> int:
        """Sentences still searched."""
        return sum(i is not None for i in self.active)


# Search given no length settings (direct callers): the shipped defaults (LengthOptions).
DEFAULT_LENGTH = LengthControl()

# Devices whose tensors the host reads directly: a step's bookkeeping reads them in place.
ON_HOST = ("cpu",)
# Finished sentences leave the search once they are this share of its sentences (or rows).
DROP_SHARE = Fraction(1, 8)
# The log-probability of a word that would repeat an n-gram (block_ngram_repeat): finite, as
# OpenNMT-py's, so that a row whose every proposal is blocked still ends with an output.
BLOCKED = -1e9
# The encoder side is trimmed once its longest source is at most this share of its padded width.
TRIM_SHARE = Fraction(3, 4)


@torch.no_grad()
def search_batches(model: Searchable, batches, beam: int = 5, nbest: int = 1, length: LengthControl = DEFAULT_LENGTH,
                   return_attention: bool = False, refill_below: int = 0) -> dict[int, list[Hypothesis]]:
    """Search batches of (indices, padded src, src_mask, context or None); returns the
    `nbest` hypotheses of every index.

    With `refill_below` > 0, once fewer sentences than that are left in the search the
    next batch joins them after its own first step: the tail of a batch (a few long
    outputs) otherwise runs steps of a few rows, each costing nearly what a full step
    costs, because every step reads all the weight matrices.  The arithmetic of each
    sentence is unchanged (its source padding grows, and padding gets zero attention).
    Joining needs decoder states without a time axis; the summaries of target-context
    models grow with t, so their batches run one after the other."""
    search = _Search(model, beam, length, return_attention, keep=max(beam, nbest))
    pending, waiting, part = iter(batches), [], None
    while True:
        if part is None:
            if waiting:
                part = waiting.pop(0)
            else:
                batch = next(pending, None)
                if batch is None:
                    break
                part = search.start(*batch)
        part = search.advance(part)
        if part is None or not refill_below or part.searching() >= refill_below or return_attention or waiting:
            continue
        batch = next(pending, None)
        if batch is None:
            continue
        joining = search.advance(search.start(*batch))
        if joining is None:
            continue
        joined = _join(part, joining)
        if joined is None:
            waiting.append(joining)
        else:
            part = joined
    return {i: s.finished[:nbest] for i, s in search.sentences.items()}


@dataclass
class _Candidates:
    """A step's 2K best continuations of each of n sentences, best first, each (n, 2K)."""
    scores: torch.Tensor  # log-probability of the hypothesis with the word
    beam: torch.Tensor  # which of the sentence's K rows it continues
    tokens: torch.Tensor  # the word
    cp: torch.Tensor | None  # the coverage penalty of that row; None without one


@dataclass
class _OnHost:
    """What a step's bookkeeping reads, copied to the host in one transfer: on a GPU every
    read of a device tensor waits for the device, and a step reads once per hypothesis
    that ends (docs/speed-log.md).  The candidates' (n, 2K) scores, rows and words (and
    coverage penalties), and each sentence's best open hypothesis: its log-probability
    and coverage penalty (n,)."""
    scores: torch.Tensor
    beam: torch.Tensor
    tokens: torch.Tensor
    cp: torch.Tensor | None
    best_alive: torch.Tensor
    best_alive_cp: torch.Tensor | None
    best_alive_words: torch.Tensor | None = None  # its W(y), with a length-ratio prior

    @classmethod
    def of(cls, candidates: _Candidates, alive_scores: torch.Tensor, beam_of: torch.Tensor,
           row_cp: torch.Tensor | None, words: _RowWords | None = None, tok_of: torch.Tensor | None = None
           ) -> _OnHost:
        best_cp = row_cp.gather(1, beam_of[:, :1]).view(-1) if row_cp is not None else None
        best_words = None
        if words is not None:  # the best open hypothesis: its row and the subword it goes on with
            n = beam_of.size(0)
            rows = torch.arange(n, device=beam_of.device) * (words.words.numel() // n) + beam_of[:, 0]
            best_words = words.with_next(rows, tok_of[:, 0])
        fields = {"scores": candidates.scores, "beam": candidates.beam, "tokens": candidates.tokens,
                  "cp": candidates.cp, "best_alive": alive_scores[:, 0], "best_alive_cp": best_cp,
                  "best_alive_words": best_words}
        if candidates.scores.device.type in ON_HOST:  # already on the host: nothing to pack
            return cls(**fields)
        present = {name: x for name, x in fields.items() if x is not None}
        # float32 holds every word id and row exactly (< 2^24), and the scores are float32
        flat = torch.cat([x.reshape(-1).float() for x in present.values()]).cpu()
        host = {name: part.view(x.shape) for (name, x), part in
                zip(present.items(), flat.split([x.numel() for x in present.values()]))}
        host["beam"], host["tokens"] = host["beam"].long(), host["tokens"].long()
        return cls(**{name: host.get(name) for name in fields})


@dataclass
class _RowWords:
    """W of each row's history (R,), and whether the row's next subword starts a new word (R,)
    unless it joins back on to the row's last (`joins_back` (V,), None where none does): what
    a length-ratio prior needs of the rows."""
    words: torch.Tensor
    opens: torch.Tensor
    started: torch.Tensor  # (R,) whether the row holds a subword yet
    joins_back: torch.Tensor | None = None

    @classmethod
    def of(cls, part: _Part, K: int, continues: torch.Tensor, joins_back: torch.Tensor | None = None) -> _RowWords:
        history = part.history
        steps = torch.tensor(part.steps, device=history.device).repeat_interleave(K)
        real = torch.arange(history.size(1), device=history.device) >= history.size(1) - steps.view(-1, 1)
        words = word_starts(history, real, continues, joins_back)
        if history.size(1):
            last = continues.to(history.device)[history[:, -1]] & (steps > 0)
        else:
            last = torch.zeros_like(steps, dtype=torch.bool)
        return cls(words, ~last, steps > 0, joins_back.to(history.device) if joins_back is not None else None)

    def with_next(self, rows: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """W of the rows `rows` (on the rows' device) each with one more subword, `tokens`."""
        rows, tokens = rows.to(self.words.device), tokens.to(self.words.device)
        opens = self.opens[rows]
        if self.joins_back is not None:
            opens = opens & ~(self.joins_back[tokens] & self.started[rows])
        return self.words[rows] + opens.long()


class _Search:
    def __init__(self, model: Searchable, beam: int, length: LengthControl = DEFAULT_LENGTH,
                 return_attention: bool = False, keep: int | None = None):
        self.model, self.K, self.length = model, beam, length
        self.keep = keep or beam
        self.return_attention = return_attention
        self.sentences: dict[int, _Sentence] = {}

    def start(self, indices, src, src_mask, context=None, ahead=None) -> _Part:
        """Encode a batch (or take its encoding formed `ahead`); its rows wait for their first step."""
        src_lens = [int(n) for n in src_mask.sum(1).tolist()]
        src_words = (word_starts(src, src_mask.bool(), self.length.words.src_continues,
                                 self.length.words.src_joins_back).tolist()
                     if self.length.ratio_penalty else [0] * len(src_lens))
        for i, n, w in zip(indices, src_lens, src_words):
            self.sentences[i] = _Sentence(max_len=self.length.max_len(n), src_words=w, src_len=n, keep=self.keep)
        B, K = src.size(0), self.K
        # one copy per sentence, shared by its K rows
        formed = {} if ahead is None else {"ahead": ahead}
        enc = self.model.encode(src, src_mask, context, K, signals=self.return_attention, **formed)
        memory_lens = self.model.memory_lengths(enc)
        width = src.size(1) if memory_lens is None else max(src.size(1), max(memory_lens))
        scores = torch.full((B, K), float("-inf"), device=src.device)
        scores[:, 0] = 0.0  # all K rows start identical: let only the first one expand
        coverage = torch.zeros(B * K, width, device=src.device) if self.length.beta else None
        return _Part(list(indices), [0] * B, src_lens, width, enc, self.model.init_state(enc, K), scores,
                     torch.zeros(B * K, 0, dtype=torch.long, device=src.device), coverage=coverage,
                     memory_lens=memory_lens)

    def advance(self, part: _Part) -> _Part | None:
        """One step for every sentence of `part`; None once all of them are finished."""
        K = self.K
        # A sentence's 2K best continuations are each among the 2K best of their own row,
        # so each row proposes only those (never a (rows × vocabulary) score matrix).
        C = min(2 * K, self.model.vocab_size)
        row_eos = words = None
        if self.length.ratio_penalty:  # every row's </s>, whatever its rank
            row_logp, row_tok, row_eos, state, alpha = self.model.step_candidates_with_end(
                part.enc, part.state, part.prev, C)
            words = _RowWords.of(part, K, self.length.words.tgt_continues, self.length.words.tgt_joins_back)
        else:
            row_logp, row_tok, state, alpha = self.model.step_candidates(part.enc, part.state, part.prev, C)
        if self.length.block_ngram_repeat:
            steps = torch.tensor(part.steps, device=row_tok.device).repeat_interleave(K)
            row_logp = row_logp.masked_fill(
                repeats_an_ngram(part.history, steps, row_tok, self.length.block_ngram_repeat), BLOCKED)
        att_history, record = self._attention_history(part, alpha), self._record(part, state)
        coverage, row_cp = self._coverage(part, alpha)
        candidates = self._candidates(part, row_logp, row_tok, row_cp)
        alive_scores, beam_of, tok_of = self._continuations(candidates)
        seen = _OnHost.of(candidates, alive_scores, beam_of, row_cp, words, tok_of)
        sentences = [None if i is None else self.sentences[i] for i in part.active]
        lengths = [t + 1 for t in part.steps]  # words of each hypothesis with this step's
        self._collect_finished(part, record, sentences, lengths, seen, att_history, words)
        if row_eos is not None:
            self._collect_row_ends(part, record, sentences, lengths, row_eos, row_cp, words, att_history)
        keep = self._searching(sentences, lengths, seen)
        if not keep:
            return None
        n = len(part.active)
        keep, active, alive_scores = self._leaving(part, keep, alive_scores)
        enc, width, src_lens, memory_lens = part.enc, part.width, part.src_lens, part.memory_lens
        history, prev, device = part.history, tok_of.reshape(-1), alive_scores.device
        if len(keep) < n:  # sentences leave: their rows go (the only step that sends indices to the device)
            keep_t = torch.tensor(keep, device=device)
            enc, width, src_lens, memory_lens, att_history, coverage = self._without_the_finished(
                part, keep_t, att_history, coverage)
            alive_scores, beam_of = alive_scores.index_select(0, keep_t), beam_of.index_select(0, keep_t)
            prev = tok_of.index_select(0, keep_t).view(-1)
            row_index = (keep_t.view(-1, 1) * K + beam_of).view(-1)
        else:
            row_index = (torch.arange(n, device=device).view(-1, 1) * K + beam_of).view(-1)
        if K > 1 or len(keep) < n:  # otherwise (greedy, none left) every row stays where it is
            history, state = history.index_select(0, row_index), state.select(row_index)
            att_history, coverage = (None if x is None else x.index_select(0, row_index)
                                     for x in (att_history, coverage))
            record = record.select(row_index) if record is not None else None
        return _Part(active, [lengths[j] for j in keep], src_lens, width, enc, state, alive_scores,
                     torch.cat([history, prev.view(-1, 1)], dim=1), att_history, prev, coverage, memory_lens, record)

    def _attention_history(self, part: _Part, alpha: torch.Tensor) -> torch.Tensor | None:
        """Each row's attention over its steps, this step's included, where it is returned."""
        if not self.return_attention:
            return part.att_history
        step_att = alpha.unsqueeze(1)
        return step_att if part.att_history is None else torch.cat([part.att_history, step_att], 1)

    def _record(self, part: _Part, state: State) -> State | None:
        """Each row's record over its steps, this step's included, where attention is returned."""
        step = self.model.recorded(state) if self.return_attention else None
        if step is None:
            return None
        return State().rows(**{name: torch.cat([part.record[name], value.unsqueeze(1)], 1) if part.record is not None
                               else value.unsqueeze(1) for name, value in step.items()})

    def _coverage(self, part: _Part, alpha: torch.Tensor):
        """Each row's coverage with this step's α_t, and its coverage penalty as (n, K);
        (None, None) without a coverage penalty."""
        if part.coverage is None:
            return None, None
        coverage = part.coverage + alpha.float()
        src_lens = torch.tensor(part.src_lens, device=coverage.device).repeat_interleave(self.K)
        return coverage, coverage_penalty(coverage, src_lens, self.length.beta).view(-1, self.K)

    def _candidates(self, part: _Part, row_logp: torch.Tensor, row_tok: torch.Tensor,
                    row_cp: torch.Tensor | None) -> _Candidates:
        """Each sentence's 2K best continuations among its rows' proposals (C each)."""
        n, K, C = len(part.active), self.K, row_logp.size(1)
        cand = (part.scores.view(-1, 1) + row_logp).view(n, K * C)
        scores, index = cand.topk(min(2 * K, K * C), dim=1)
        beam = index // C
        return _Candidates(scores, beam, row_tok.view(n, K * C).gather(1, index),
                           row_cp.gather(1, beam) if row_cp is not None else None)

    def _collect_finished(self, part: _Part, record: State | None, sentences, lengths: list[int], seen: _OnHost,
                          att_history: torch.Tensor | None, words: _RowWords | None = None) -> None:
        """Move to `finished` every EOS candidate ranked among the first K (and, at a
        sentence's length limit, the K best candidates whatever they end with).  With a
        length-ratio prior (`words` given) the rows' own </s> are collected instead
        (`_collect_row_ends`), so here only the cut-offs at the limit."""
        K, top = self.K, seen
        at_limit = [s is not None and t >= s.max_len for t, s in zip(lengths, sentences)]
        eos = top.tokens[:, :K] == EOS  # only the first K ranks can end here
        if not any(at_limit):
            if words is not None:  # nothing is cut off, and the rows' </s> are collected elsewhere
                return
            ends = eos
        else:
            last_step = torch.tensor(at_limit).view(-1, 1)
            ends = last_step & ~eos if words is not None else eos | last_step
        js, cs = (ends & torch.isfinite(top.scores[:, :K])).nonzero(as_tuple=True)
        if not len(js):
            return
        # Ranked in double precision: the scores are reported, and ties are broken by them.
        logprobs = top.scores[js, cs]
        prior = None
        if words is not None:  # cut off at the limit: each holds its row's words and this step's
            rows = js * K + top.beam[js, cs]
            prior = self.length.ratio_prior(words.with_next(rows, top.tokens[js, cs]).cpu(), _src_words(sentences)[js])
        scores = self.length.score(logprobs.double(), [lengths[j] for j in js.tolist()],
                                   top.cp[js, cs] if top.cp is not None else None, prior).tolist()
        history, width = part.history.cpu(), part.history.size(1)  # one transfer for every hypothesis ending here
        rows, ends_with = (js * K + top.beam[js, cs]).tolist(), top.tokens[js, cs].tolist()
        signals = self._signals(part, record, rows)
        for j, row, token, score, logprob, shown in zip(js.tolist(), rows, ends_with, scores, logprobs.tolist(),
                                                        signals):
            tokens = history[row, width - part.steps[j]:].tolist()
            if token != EOS:
                tokens.append(token)  # cut off at the length limit
            att = _attention(att_history, row, lengths[j], sentences[j])
            sentences[j].finished.append(Hypothesis(tokens, score, logprob, att, shown))
        _settle(sentences, set(js.tolist()))

    def _collect_row_ends(self, part: _Part, record: State | None, sentences, lengths: list[int], row_eos: torch.Tensor,
                          row_cp: torch.Tensor | None, words: _RowWords, att_history: torch.Tensor | None) -> None:
        """With a length-ratio prior: every open row of a sentence still searched, ended here
        by </s>, is a finished hypothesis."""
        K = self.K
        logprob = (part.scores.view(-1) + row_eos).float()
        fields = [logprob, words.words.float()] + ([row_cp.reshape(-1).float()] if row_cp is not None else [])
        host = torch.stack(fields).cpu()  # one transfer
        logprob, n_words = host[0].double(), host[1]
        src_words = _src_words(sentences).repeat_interleave(K)
        row_lengths = [t for t in lengths for _ in range(K)]
        scores = self.length.score(logprob, row_lengths, host[2] if row_cp is not None else None,
                                   self.length.ratio_prior(n_words, src_words))
        live = torch.isfinite(logprob) & torch.tensor([s is not None for s in sentences]).repeat_interleave(K)
        rows = live.nonzero().view(-1).tolist()
        if not rows:
            return
        history, width = part.history.cpu(), part.history.size(1)
        for row, shown in zip(rows, self._signals(part, record, rows)):
            j = row // K
            tokens = history[row, width - part.steps[j]:].tolist()
            att = _attention(att_history, row, lengths[j], sentences[j])
            sentences[j].finished.append(Hypothesis(tokens, float(scores[row]), float(logprob[row]), att, shown))
        _settle(sentences, {row // K for row in rows})

    def _signals(self, part: _Part, record: State | None, rows: list[int]) -> list[dict]:
        """The model's signals of the rows `rows` that end here, where attention is returned."""
        if not self.return_attention:
            return [{} for _ in rows]
        return self.model.signals(part.enc, record, torch.tensor(rows, device=part.scores.device), self.K)

    def _continuations(self, candidates: _Candidates):
        """The K best candidates of each sentence that do not end here: their scores (n, K), and
        the row each continues and its word (n, K)."""
        alive_scores = candidates.scores.masked_fill(candidates.tokens == EOS, float("-inf"))
        alive_scores, pick = alive_scores.topk(self.K, dim=1)
        return alive_scores, candidates.beam.gather(1, pick), candidates.tokens.gather(1, pick)

    def _searching(self, sentences, lengths: list[int], seen: _OnHost) -> list[int]:
        """The sentences not done: each judged by its best open hypothesis, scored as the
        finished ones are (its coverage so far included)."""
        prior = None
        if seen.best_alive_words is not None:
            prior = self.length.ratio_prior(seen.best_alive_words, _src_words(sentences), reachable=True)
        best_alive = self.length.score(seen.best_alive, lengths, seen.best_alive_cp, prior).tolist()
        return [j for j, s in enumerate(sentences) if s is not None and not _done(s, self.K, lengths[j], best_alive[j])]

    def _leaving(self, part: _Part, keep: list[int], alive_scores: torch.Tensor):
        """The sentences whose rows stay (`keep`), their callers' indices, and their scores.
        Finished sentences leave only once they hold DROP_SHARE of the rows (K rows per sentence,
        finished or not: the share of sentences is the share of rows); until then they stay,
        as rows that search nothing (score −inf, so they propose nothing).  Dropping rows
        copies the whole encoder side (docs/speed-log.md)."""
        n = len(part.active)
        if len(keep) == n or Fraction(n - len(keep), n) >= DROP_SHARE:
            return keep, [part.active[j] for j in keep], alive_scores
        searched = torch.zeros(n, dtype=torch.bool, device=alive_scores.device)
        searched[keep] = True
        alive_scores = alive_scores.masked_fill(~searched.view(-1, 1), float("-inf"))
        active = [a if still else None for a, still in zip(part.active, searched.tolist())]
        return list(range(n)), active, alive_scores

    def _without_the_finished(self, part: _Part, keep_t: torch.Tensor, att_history, coverage):
        """The encoder side of the sentences `keep_t` only (the K rows of a sentence share it, so
        it is gathered only when sentences leave, never for a beam reorder), trimmed of padding
        once the longest sources have left (a joined part's tail): once the longest left is
        at most TRIM_SHARE of the width, not at every small change, as each trim copies it."""
        kept = keep_t.tolist()
        src_lens = [part.src_lens[j] for j in kept]
        memory_lens = None if part.memory_lens is None else [part.memory_lens[j] for j in kept]
        attended = memory_lens if memory_lens is not None else src_lens
        enc, width = part.enc.select(keep_t), part.width
        if Fraction(max(attended), width) <= TRIM_SHARE:
            width = max(attended)
            enc = enc.trim(width)
            # the source axis of what rows carry too: later steps' α_t have the new width
            att_history = att_history[..., :width] if att_history is not None else None
            coverage = coverage[:, :width] if coverage is not None else None
        return enc, width, src_lens, memory_lens, att_history, coverage


def repeats_an_ngram(history: torch.Tensor, steps: torch.Tensor, words: torch.Tensor, n: int) -> torch.Tensor:
    """(R, C): whether words[r, c] after row r's words would repeat an n-gram the row already
    holds.  history (R, L): each row's words, its last steps[r] real (left-padded)."""
    R, L = history.shape
    if L < n:  # no row holds an n-gram yet
        return torch.zeros_like(words, dtype=torch.bool)
    ngrams = history.unfold(1, n, 1)  # (R, L − n + 1, n)
    real = torch.arange(L - n + 1, device=history.device) >= (L - steps).unsqueeze(1)
    # An earlier n-gram whose first n − 1 words are the row's last n − 1 would be repeated by its last word.
    prefix = history[:, L - n + 1:].unsqueeze(1)  # (R, 1, n − 1)
    repeated = (ngrams[:, :, : n - 1] == prefix).all(2) & real  # (R, L − n + 1)
    return ((words.unsqueeze(2) == ngrams[:, :, n - 1].unsqueeze(1)) & repeated.unsqueeze(1)).any(2)


def _join(a: _Part, b: _Part) -> _Part | None:
    """One part of a's and b's sentences (b's after fewer steps); None where their states
    differ beyond the rows (a decoder state that grows with t)."""
    if not (a.state.fits(b.state) and a.enc.fits(b.enc)):
        return None
    width = max(a.width, b.width)
    length = max(a.history.size(1), b.history.size(1))
    history = torch.cat([F.pad(h, (length - h.size(1), 0), value=PAD) for h in (a.history, b.history)])
    coverage = None
    if a.coverage is not None:  # padding columns: no attention so far
        coverage = torch.cat([F.pad(c, (0, width - c.size(1))) for c in (a.coverage, b.coverage)])
    memory_lens = None if a.memory_lens is None and b.memory_lens is None else a.attended() + b.attended()
    return _Part(a.active + b.active, a.steps + b.steps, a.src_lens + b.src_lens, width,
                 a.enc.concat(b.enc, width), a.state.concat(b.state, width),
                 torch.cat([a.scores, b.scores]), history, None, torch.cat([a.prev, b.prev]), coverage, memory_lens)


def _settle(sentences: list[_Sentence | None], touched: set[int]) -> None:
    """Settle the sentences that gained finished hypotheses this step (the others are settled)."""
    for j in touched:
        sentences[j].settle()


def _attention(att_history: torch.Tensor | None, row: int, length: int, sentence: _Sentence) -> torch.Tensor | None:
    """Row `row`'s attention over its last `length` steps, over its own source positions only:
    the batch's padding columns (zero weight) depend on which sentences it was searched with."""
    if att_history is None:
        return None
    return att_history[row, att_history.size(1) - length:, :sentence.src_len]


def _src_words(sentences: list[_Sentence | None]) -> torch.Tensor:
    """W(x) of each sentence of a step (1 for one already finished, whose rows search nothing)."""
    return torch.tensor([s.src_words if s is not None else 1 for s in sentences])


def _done(sentence: _Sentence, K: int, length: int, best_alive: float) -> bool:
    """Finished once K hypotheses have ended and none still open scores better than
    the K-th of them (judged by its score so far, the usual heuristic: with length
    normalisation or a coverage penalty no exact bound exists), or at the length limit."""
    if length >= sentence.max_len:
        return True
    if len(sentence.finished) < K:
        return False
    return best_alive <= sentence.finished[K - 1].score  # settled: best first
