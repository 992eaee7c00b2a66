"""Batched beam search over many sentences at once.

Each row of the decoder state is one hypothesis (sentence-major, K rows per
sentence); the encoder side is kept once per sentence and shared by its rows.
After every step one index vector both reorders the beams and drops the
sentences that are finished, and that one gather (`State.select`) is applied to
the decoder state; both states declare their entries (ctxnmt.models.state), so
search needs to know nothing of any model's.  Finished sentences are dropped once they hold an eighth of the rows;
until then their rows stay and search nothing.  Greedy search is beam search with K = 1.

Finished hypotheses are ranked by the length and coverage penalties of `LengthControl`
(ctxnmt.decoding.length); for the coverage penalty each row carries its attention summed
over its steps, kept only when β > 0.

`search_batches` runs many batches; with refill, the next batch joins the tail of
the current one (see there).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from ctxnmt.data.vocab import EOS, PAD
from ctxnmt.decoding.length import LengthControl, coverage_penalty
from ctxnmt.models.state import State


@dataclass
class Hypothesis:
    tokens: list[int]  # without the final EOS
    score: float  # log-probability / lp(y) + cp(x; y) (ctxnmt.decoding.length)
    logprob: float
    attention: torch.Tensor | None = None  # (len(tokens) + 1, S): one row per output incl. EOS


@dataclass
class _Sentence:
    max_len: int
    finished: list[Hypothesis] = field(default_factory=list)


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

    def searching(self) -> int:
        """Sentences still searched."""
        return sum(i is not None for i in self.active)


NO_LENGTH_CONTROL = LengthControl()


@torch.no_grad()
def beam_search(model, src: torch.Tensor, src_mask: torch.Tensor, beam: int = 5, nbest: int = 1,
                length: LengthControl = NO_LENGTH_CONTROL, return_attention: bool = False,
                context=None) -> list[list[Hypothesis]]:
    """Translate a padded batch; returns for each sentence its `nbest` best hypotheses.
    `context` (ctxnmt.data.batching.Context): previous source sentences, for document-context models."""
    results = search_batches(model, [(list(range(src.size(0))), src, src_mask, context)], beam, nbest,
                             length, return_attention)
    return [results[i] for i in range(src.size(0))]


@torch.no_grad()
def search_batches(model, batches, beam: int = 5, nbest: int = 1, length: LengthControl = NO_LENGTH_CONTROL,
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
    search = _Search(model, beam, length, return_attention)
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
    return {i: sorted(s.finished, key=lambda h: -h.score)[:nbest] for i, s in search.sentences.items()}


class _Search:
    def __init__(self, model, beam: int, length: LengthControl = NO_LENGTH_CONTROL, return_attention: bool = False):
        self.model, self.K, self.length = model, beam, length
        self.return_attention = return_attention
        self.sentences: dict[int, _Sentence] = {}

    def start(self, indices, src, src_mask, context=None) -> _Part:
        """Encode a batch; its rows wait for their first step."""
        src_lens = [int(n) for n in src_mask.sum(1).tolist()]
        for i, n in zip(indices, src_lens):
            self.sentences[i] = _Sentence(max_len=self.length.max_len(n))
        # one copy per sentence, shared by its K rows; context only when given, so that models
        # without document context keep their plain encode(src, src_mask)
        enc = self.model.encode(src, src_mask) if context is None else self.model.encode(src, src_mask, context)
        B, K = src.size(0), self.K
        scores = torch.full((B, K), float("-inf"), device=src.device)
        scores[:, 0] = 0.0  # all K rows start identical: let only the first one expand
        coverage = torch.zeros(B * K, src.size(1), device=src.device) if self.length.beta else None
        return _Part(list(indices), [0] * B, src_lens, src.size(1), enc, self.model.init_state(enc, K), scores,
                     torch.zeros(B * K, 0, dtype=torch.long, device=src.device), coverage=coverage)

    def advance(self, part: _Part) -> _Part | None:
        """One step for every sentence of `part`; None once all of them are finished."""
        K = self.K
        # A sentence's 2K best continuations are each among the 2K best of their own row,
        # so each row proposes only those (never a (rows × vocabulary) score matrix).
        row_logp, row_tok, state, alpha = self.model.step_candidates(
            part.enc, part.state, part.prev, min(2 * K, self.model.vocab_size))
        n, C = len(part.active), row_logp.size(1)
        att_history = part.att_history
        if self.return_attention:
            step_att = alpha.unsqueeze(1)
            att_history = step_att if att_history is None else torch.cat([att_history, step_att], 1)
        cand = (part.scores.view(-1, 1) + row_logp).view(n, K * C)
        top_scores, top_idx = cand.topk(min(2 * K, K * C), dim=1)
        top_beam, top_tok = top_idx // C, row_tok.view(n, K * C).gather(1, top_idx)
        coverage, row_cp = self._coverage(part, alpha)
        top_cp = row_cp.gather(1, top_beam) if row_cp is not None else None
        sentences = [None if i is None else self.sentences[i] for i in part.active]
        lengths = [t + 1 for t in part.steps]  # words of each hypothesis with this step's
        last_step = torch.tensor([s is not None and t >= s.max_len for t, s in zip(lengths, sentences)],
                                 device=cand.device)
        self._collect_finished(part, sentences, lengths, top_scores, top_cp, top_beam, top_tok, last_step,
                               att_history)
        # Continue with the K best candidates that do not end here.
        alive_scores = top_scores.masked_fill(top_tok == EOS, float("-inf"))
        alive_scores, pick = alive_scores.topk(K, dim=1)
        beam_of = top_beam.gather(1, pick)
        tok_of = top_tok.gather(1, pick)
        best_alive = self._normalised(alive_scores[:, 0], lengths)
        if row_cp is not None:  # judged as the finished ones are, by its coverage so far too
            best_alive = best_alive + row_cp.gather(1, beam_of)[:, 0]
        best_alive = best_alive.tolist()
        keep = [j for j, s in enumerate(sentences) if s is not None and not _done(s, K, lengths[j], best_alive[j])]
        if not keep:
            return None
        if len(keep) < n and 8 * (n - len(keep)) < n:
            # Few rows are finished: they stay, as rows that search nothing (score −inf, so
            # they propose nothing), until an eighth of the rows are such (K rows per
            # sentence, finished or not: the share of sentences is the share of rows).
            # Dropping rows copies the whole encoder side (docs/speed-log.md).
            searched = torch.zeros(n, dtype=torch.bool, device=cand.device)
            searched[keep] = True
            alive_scores = alive_scores.masked_fill(~searched.view(-1, 1), float("-inf"))
            active = [a if still else None for a, still in zip(part.active, searched.tolist())]
            keep = list(range(n))
        else:
            active = [part.active[j] for j in keep]
        keep_t = torch.tensor(keep, device=cand.device)
        # The K rows of a sentence share its encoder output, so the encoder side is
        # gathered only when sentences leave, never for a beam reorder.
        enc, width, src_lens = part.enc, part.width, part.src_lens
        if len(keep) < n:
            src_lens = [src_lens[j] for j in keep]
            enc = enc.select(keep_t)
            if max(src_lens) <= 3 * width // 4:
                # The longest sources have left (a joined part's tail): trim the padding.
                # Not for every small change: each trim copies the encoder side.
                width = max(src_lens)
                enc = enc.trim(width)
                if att_history is not None:  # its source axis too: later steps' α_t have the new width
                    att_history = att_history[..., :width]
                if coverage is not None:
                    coverage = coverage[:, :width]
        prev = tok_of.index_select(0, keep_t).view(-1)
        history = part.history
        if K > 1 or len(keep) < n:  # otherwise (greedy, no sentence dropped) every row stays where it is
            row_index = (keep_t.view(-1, 1) * K + beam_of.index_select(0, keep_t)).view(-1)
            history = history.index_select(0, row_index)
            if att_history is not None:
                att_history = att_history.index_select(0, row_index)
            if coverage is not None:
                coverage = coverage.index_select(0, row_index)
            state = state.select(row_index)
        return _Part(active, [lengths[j] for j in keep], src_lens, width, enc, state,
                     alive_scores.index_select(0, keep_t), torch.cat([history, prev.view(-1, 1)], dim=1),
                     att_history, prev, coverage)

    def _coverage(self, part: _Part, alpha: torch.Tensor):
        """Each row's coverage with this step's α_t, and its coverage penalty as (n, K);
        (None, None) without a coverage penalty."""
        if part.coverage is None:
            return None, None
        coverage = part.coverage + alpha.float()
        src_lens = torch.tensor(part.src_lens, device=coverage.device).repeat_interleave(self.K)
        return coverage, coverage_penalty(coverage, src_lens, self.length.beta).view(-1, self.K)

    def _normalised(self, logprob: torch.Tensor, lengths: list[int]) -> torch.Tensor:
        """log-probability / lp(y) for each row, as the finished hypotheses are scored."""
        if not self.length.normalises:  # lp is 1: skip making the tensor
            return logprob
        return logprob / torch.tensor([self.length.lp(t) for t in lengths], device=logprob.device)

    def _collect_finished(self, part, sentences, lengths, top_scores, top_cp, top_beam, top_tok, last_step,
                          att_history):
        """Move to `finished` every EOS candidate ranked among the first K (and, at a
        sentence's length limit, the K best candidates whatever they end with)."""
        K = self.K
        rank = torch.arange(top_scores.size(1), device=top_scores.device).unsqueeze(0)
        ends = ((top_tok == EOS) | last_step.view(-1, 1)) & (rank < K) & torch.isfinite(top_scores)
        for j, c in ends.nonzero().tolist():
            row, words = j * K + int(top_beam[j, c]), part.steps[j]
            tokens = part.history[row, part.history.size(1) - words:].tolist()
            if int(top_tok[j, c]) != EOS:
                tokens.append(int(top_tok[j, c]))  # cut off at the length limit
            logprob = float(top_scores[j, c])
            att = att_history[row, att_history.size(1) - lengths[j]:] if att_history is not None else None
            score = logprob / self.length.lp(lengths[j])  # lp is 1 where nothing normalises
            if top_cp is not None:
                score += float(top_cp[j, c])
            sentences[j].finished.append(Hypothesis(tokens, score, logprob, att))


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
    return _Part(a.active + b.active, a.steps + b.steps, a.src_lens + b.src_lens, width,
                 a.enc.concat(b.enc, width), a.state.concat(b.state, width),
                 torch.cat([a.scores, b.scores]), history, None, torch.cat([a.prev, b.prev]), coverage)


def _done(sentence: _Sentence, K: int, length: int, best_alive: float) -> bool:
    """Finished once K hypotheses have ended and none still open scores better than
    the K-th of them (judged by its score so far, the usual heuristic: with length
    normalisation or a coverage penalty no exact bound exists), or at the length limit."""
    if length >= sentence.max_len:
        return True
    if len(sentence.finished) < K:
        return False
    kth = sorted((h.score for h in sentence.finished), reverse=True)[K - 1]
    return best_alive <= kth
