"""Batched beam search over many sentences at once.

Each row of the decoder state is one hypothesis (sentence-major, K rows per
sentence); the encoder side is kept once per sentence and shared by its rows.
After every step one index vector both reorders the beams and drops the
sentences that are finished, and that one gather is applied to every state
tensor.  Greedy search is beam search with K = 1.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ctxnmt.data.vocab import EOS


@dataclass
class Hypothesis:
    tokens: list[int]  # without the final EOS
    score: float  # length-normalised log-probability
    logprob: float
    attention: torch.Tensor | None = None  # (len(tokens) + 1, S): one row per output incl. EOS


@dataclass
class _Sentence:
    max_len: int
    finished: list[Hypothesis] = field(default_factory=list)


def select_rows(tree: dict, index: torch.Tensor) -> dict:
    """Gather rows of every batch-first tensor; '_'-prefixed entries are shared."""
    return {k: (v if k.startswith("_") else v.index_select(0, index)) for k, v in tree.items()}


def _normalise(logprob: torch.Tensor | float, length: int, alpha: float):
    return logprob / (length ** alpha) if alpha else logprob


@torch.no_grad()
def beam_search(model, src: torch.Tensor, src_mask: torch.Tensor, beam: int = 5, nbest: int = 1,
                length_penalty: float = 1.0, max_len_ratio: float = 2.0, max_len_extra: int = 10,
                return_attention: bool = False, context=None) -> list[list[Hypothesis]]:
    """Translate a padded batch; returns for each sentence its `nbest` best hypotheses.
    `context` (ctxnmt.data.batching.Context): previous source sentences, for document-context models."""
    B, K = src.size(0), beam
    src_len = src_mask.sum(1).tolist()
    sentences = [_Sentence(max_len=int(max_len_ratio * n) + max_len_extra) for n in src_len]
    # one copy per sentence, shared by its K rows; context only when given, so that models
    # without document context keep their plain encode(src, src_mask)
    enc = model.encode(src, src_mask) if context is None else model.encode(src, src_mask, context)
    state = model.init_state(enc, K)
    active = list(range(B))  # original index of each sentence still searched
    scores = torch.full((B, K), float("-inf"), device=src.device)
    scores[:, 0] = 0.0  # all K rows start identical: let only the first one expand
    history = torch.zeros(B * K, 0, dtype=torch.long, device=src.device)
    att_history = None
    prev = None
    vocab = model.vocab_size
    for t in range(max(s.max_len for s in sentences)):
        # A sentence's 2K best continuations are each among the 2K best of their own row,
        # so each row proposes only those (never a (rows × vocabulary) score matrix).
        row_logp, row_tok, state, alpha = model.step_candidates(enc, state, prev, min(2 * K, vocab))
        n, C = len(active), row_logp.size(1)
        if return_attention:
            step_att = alpha.unsqueeze(1)
            att_history = step_att if att_history is None else torch.cat([att_history, step_att], 1)
        cand = (scores.view(-1, 1) + row_logp).view(n, K * C)
        top_scores, top_idx = cand.topk(min(2 * K, K * C), dim=1)
        top_beam, top_tok = top_idx // C, row_tok.view(n, K * C).gather(1, top_idx)
        last_step = torch.tensor([t + 1 >= sentences[i].max_len for i in active], device=src.device)
        _collect_finished(sentences, active, top_scores, top_beam, top_tok, last_step, history,
                          att_history, t, K, length_penalty)
        # Continue with the K best candidates that do not end here.
        alive_scores = top_scores.masked_fill(top_tok == EOS, float("-inf"))
        alive_scores, pick = alive_scores.topk(K, dim=1)
        beam_of = top_beam.gather(1, pick)
        tok_of = top_tok.gather(1, pick)
        best_alive = _normalise(alive_scores[:, 0], t + 1, length_penalty).tolist()
        keep = [j for j, i in enumerate(active) if not _done(sentences[i], K, t, best_alive[j])]
        if not keep:
            break
        keep_t = torch.tensor(keep, device=src.device)
        row_index = (keep_t.view(-1, 1) * K + beam_of.index_select(0, keep_t)).view(-1)
        if len(keep) < n:
            # The K rows of a sentence share its encoder output, so the encoder side
            # is gathered only when sentences leave, never for a beam reorder.
            enc = select_rows(enc, keep_t)
        active = [active[j] for j in keep]
        scores = alive_scores.index_select(0, keep_t)
        prev = tok_of.index_select(0, keep_t).view(-1)
        if K > 1 or len(keep) < n:  # otherwise (greedy, no sentence finished) every row stays where it is
            history = history.index_select(0, row_index)
            if att_history is not None:
                att_history = att_history.index_select(0, row_index)
            state = select_rows(state, row_index)
        history = torch.cat([history, prev.view(-1, 1)], dim=1)
    return [sorted(s.finished, key=lambda h: -h.score)[:nbest] for s in sentences]


def _done(sentence: _Sentence, K: int, t: int, best_alive: float) -> bool:
    """Finished once K hypotheses have ended and none still open scores better than
    the K-th of them (judged by its score so far, the usual heuristic: with length
    normalisation no exact bound exists), or at the length limit."""
    if t + 1 >= sentence.max_len:
        return True
    if len(sentence.finished) < K:
        return False
    kth = sorted((h.score for h in sentence.finished), reverse=True)[K - 1]
    return best_alive <= kth


def _collect_finished(sentences, active, top_scores, top_beam, top_tok, last_step, history,
                      att_history, t, K, alpha):
    """Move to `finished` every EOS candidate ranked among the first K (and, at a
    sentence's length limit, the K best candidates whatever they end with)."""
    rank = torch.arange(top_scores.size(1), device=top_scores.device).unsqueeze(0)
    ends = ((top_tok == EOS) | last_step.view(-1, 1)) & (rank < K) & torch.isfinite(top_scores)
    for j, c in ends.nonzero().tolist():
        sent = sentences[active[j]]
        row = j * K + int(top_beam[j, c])
        tokens = history[row].tolist()
        if int(top_tok[j, c]) != EOS:
            tokens.append(int(top_tok[j, c]))  # cut off at the length limit
        logprob = float(top_scores[j, c])
        att = att_history[row] if att_history is not None else None
        sent.finished.append(Hypothesis(tokens, float(_normalise(logprob, t + 1, alpha)), logprob, att))
