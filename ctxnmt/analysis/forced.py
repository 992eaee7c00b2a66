"""Target-side attention weights of a model forced to produce given target sentences,
and their reduction from subwords to words."""
from __future__ import annotations

import torch

from ctxnmt.data.batching import pad
from ctxnmt.data.words import join_word, word_groups  # noqa: F401  (the analyses' words, from here)
from ctxnmt.errors import ConfigError


def check_without_context(model, model_dir: str, analysis: str) -> None:
    """The forced decodes here give a model no document context: for a document-context
    model their numbers would be those of another model than the one that translates, so
    the analysis refuses it rather than report them."""
    if model.capabilities.document_context:
        raise ConfigError(f"{model_dir}: a document-context model; {analysis} forces it without the previous "
                          "sentences it reads, so it would describe another model (not supported)")


@torch.no_grad()
def target_attention(model, src_ids: list[list[int]], tgt_ids: list[list[int]],
                     batch_size: int = 32) -> list[torch.Tensor]:
    """α (T, T) per sentence, T = len(tgt_ids[b]) (its EOS included): row t-1 holds the
    weights α_t over y_0 … y_{t-1} that the summary used when predicting y_t, with the
    model forced to produce the given target sentences (Decoder.target_attention)."""
    model.eval()
    out: list[torch.Tensor] = []
    device = model.device  # a server may decode on a GPU (serve --device)
    for start in range(0, len(src_ids), batch_size):
        src, src_mask = (t.to(device) for t in pad(src_ids[start: start + batch_size]))
        tgt, tgt_mask = (t.to(device) for t in pad(tgt_ids[start: start + batch_size]))
        weights = model.decoder.target_attention(model.encode(src, src_mask), model.previous_embeddings(tgt),
                                                 tgt_mask)
        for b, ids in enumerate(tgt_ids[start: start + batch_size]):
            out.append(weights[b, : len(ids), : len(ids)].clone())
    return out


def word_attention(alpha: torch.Tensor, groups: list[list[int]]) -> list[list[float]]:
    """Word-to-earlier-word attention A[w][v] (v < w) from subword weights α (T, T).

    A word's row is that of its first subword (predicted when none of the word is
    there yet, so all its attention goes to earlier words); a column sums the
    weights of the earlier word's subwords.  The start symbol y_0 is left out."""
    A = []
    for w, group in enumerate(groups):
        row = alpha[group[0]]  # predicting subword group[0] (position group[0] + 1)
        A.append([float(sum(row[1 + i] for i in groups[v])) for v in range(w)])
    return A


@torch.no_grad()
def source_attention(model, src_ids: list[list[int]], tgt_ids: list[list[int]],
                     batch_size: int = 32) -> list[torch.Tensor]:
    """α (T, S) per sentence under teacher forcing: row t-1 holds the attention over the
    S source subwords when predicting y_t, T = len(tgt_ids[b]) (its EOS included)."""
    model.eval()
    device = model.device
    out: list[torch.Tensor] = []
    for start in range(0, len(src_ids), batch_size):
        src, src_mask = (t.to(device) for t in pad(src_ids[start: start + batch_size]))
        tgt, tgt_mask = (t.to(device) for t in pad(tgt_ids[start: start + batch_size]))
        _, alpha = model(src, src_mask, tgt, tgt_mask)
        for b, (s, t) in enumerate(zip(src_ids[start: start + batch_size], tgt_ids[start: start + batch_size])):
            out.append(alpha[b, : len(t), : len(s)].float().cpu().clone())
    return out
