"""One padded batch through search's entry point (`search_batches`), as the tests search it."""
from __future__ import annotations

from ctxnmt.decoding.beam import DEFAULT_LENGTH, search_batches


def search_batch(model, src, src_mask, beam: int = 5, nbest: int = 1, length=DEFAULT_LENGTH,
                 return_attention: bool = False, context=None) -> list:
    """Each sentence's `nbest` hypotheses, in the batch's order."""
    found = search_batches(model, [(list(range(src.size(0))), src, src_mask, context)], beam, nbest, length,
                           return_attention)
    return [found[i] for i in range(src.size(0))]
