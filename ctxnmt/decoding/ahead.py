"""A document run's sentences encoded once, up front, for a model that reads its own previous
translations (2-to-2).

Its sentences are searched in waves (sentence t of every document after sentence t − 1), each
wave a batch of at most one sentence per document, padded to its longest joined source: the
encoder's scan then runs about 5,000 steps of a few rows over the Bible's test split where a
sentence model's runs about 300 of 64 (docs/speed-log.md).  Only the target side of the
context waits for the previous wave, and the encoder reads the source side alone, so every
sentence is encoded before the waves, in length-sorted batches as a sentence model's are; each
wave's batch takes its rows (`rows`) and the model adds its target prefix
(`Searchable.encode(…, ahead=…)`).  A row's encoding does not depend on the other rows of its
batch, so the search reads what encoding wave by wave gives, to float rounding.  `search_ids`
holds the waves' sentences encoded ahead a group of waves at a time (`AHEAD_SENTENCES`), so that
a long run of documents does not hold all its encodings at once."""
from __future__ import annotations

import torch

from ctxnmt.data.batching import pad, pad_context
from ctxnmt.decoding.searchable import Searchable
from ctxnmt.models.state import State


class EncodedAhead:
    def __init__(self, model: Searchable, src_ids: list[list[int]], context: list[list[list[int]]],
                 todo: list[int], size: int, beam: int, device):
        """Encode the sentences `todo` (their ids `src_ids[i]`, their source context `context[i]`)
        in batches of `size`, sorted by the length of the joined source."""
        self.model, self.device = model, device
        joined = {i: len(src_ids[i]) + sum(len(s) + 1 for s in context[i]) for i in todo}
        order = sorted(todo, key=joined.__getitem__)
        self.encoded: list[State] = []
        self.where: dict[int, tuple[int, int]] = {}  # sentence → (batch, row)
        for k, start in enumerate(range(0, len(order), size)):
            index = order[start:start + size]
            src, mask = pad([src_ids[i] for i in index])
            ctx = pad_context([context[i] for i in index]).to(device)
            self.encoded.append(model.encode(src.to(device), mask.to(device), ctx, beam))
            self.where.update({i: (k, row) for row, i in enumerate(index)})

    def rows(self, index: list[int], src_width: int) -> State:
        """The encoding of the sentences `index`, in that order, as `encode` would give it for
        their batch of `src_width` source positions: positions padded to the widest memory."""
        pieces, order = [], []
        for k in sorted({self.where[i][0] for i in index}):
            mine = [i for i in index if self.where[i][0] == k]
            rows = torch.tensor([self.where[i][1] for i in mine], device=self.device)
            pieces.append(self.encoded[k].select(rows))
            order += mine
        lengths = [n for piece in pieces for n in (self.model.memory_lengths(piece) or [])]
        width = max([src_width, *lengths])
        out = pieces[0].trim(width).pad(width)
        for piece in pieces[1:]:
            out = out.concat(piece.trim(width), width)
        at = {i: r for r, i in enumerate(order)}
        return out.select(torch.tensor([at[i] for i in index], device=self.device))
