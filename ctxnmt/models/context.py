"""Document context inputs: how a model reads the sentences before the current one.

Each entry of CONTEXTS (the config key `model.context`) is one way, with its settings
dataclass, and says what the data side must bring every batch (ctxnmt.data.batching.Context):
the K previous source sentences, and for some the previous target sentences too.  The
training task, validation, `translate`, forced scoring and `serve` ask only this module.

  none          a sentence-level model
  hierarchical  Wang et al.'s summary D of the previous source sentences (ctxnmt.models.document;
                its doc_* keys, which also select it where `context` is left at none)
  concat        concatenation (Tiedemann & Scherrer 2017): the K previous source sentences, a
                break, then the sentence (2-to-1); with concat_target the previous target
                sentences and a break as a forced decoder prefix too (2-to-2)

The break is not a word of the vocabulary: it is a learned embedding of its own on each
side, placed by the model between the sentences it joins, so no tokenizer or subword model
can split it or read it from text.
"""
from __future__ import annotations


import torch
from torch import nn

from ctxnmt.data.vocab import EOS, PAD
from ctxnmt.models.interfaces import ContextNeeds, ContextReader
from ctxnmt.models.registry import CONTEXTS
from ctxnmt.models.settings import ComponentSection, ConcatenationSettings, DocumentSettings
from ctxnmt.models.state import State


@CONTEXTS.register("none")
class SentenceLevel(ContextReader):
    """No document context: the model reads the sentence alone.  It adds no module to the model
    (`from_config`: None); the model reads through the one instance, SENTENCE_LEVEL, so that every
    model has a reader and the base class's defaults (no prefix, no memory beyond the source)."""

    encodes_target = False

    @classmethod
    def needs(cls, cfg: ComponentSection) -> ContextNeeds:
        return ContextNeeds()

    @classmethod
    def from_config(cls, cfg, encoder_state_dim, src_vocab_size) -> None:
        return None

    def encode(self, model, src, src_mask, context, beam=1) -> State:
        annotations = model.dropout_hidden(model.encoder(model.dropout_emb(model.src_emb(src)), src_mask))
        return model.decoder.prepare(annotations, src_mask, None, beam)


SENTENCE_LEVEL = SentenceLevel()


@CONTEXTS.register("concat")
class Concatenation(ContextReader):
    """Joins the previous sentences to the current one, each followed by a break.

    Source side: the encoder reads [c_1 … <brk> c_2 … <brk> x_1 … x_S] as one sequence; its
    annotations are then laid out current sentence first (positions 0 … S − 1, as a sentence
    model's) and the context's after them, so that α_t[:S] is the attention on the current
    sentence, length control and coverage read the current sentence, and attention (which
    weighs a set of annotations, whatever their order) computes what it would on the joined
    order.  Target side (2-to-2): the decoder is forced through [c'_1 … <brk> …] before the
    current sentence's first word."""

    attribute = "concat"

    def __init__(self, emb_dim: int, target: bool, loss: str):
        super().__init__()
        self.source_break = nn.Embedding(1, emb_dim)
        self.target_break = nn.Embedding(1, emb_dim) if target else None
        self.loss_on_all = loss == "all"

    @classmethod
    def needs(cls, cfg: ComponentSection) -> ContextNeeds:
        s = cfg.settings(ConcatenationSettings)
        return ContextNeeds(s.concat_sents, s.concat_target)

    @classmethod
    def describe(cls, cfg: ComponentSection) -> str:
        s = cfg.settings(ConcatenationSettings)
        words = f"reads the {s.concat_sents} previous source sentences of the document joined before the sentence"
        return words + (", and its own translations of them as the start of its output" if s.concat_target else "")

    @classmethod
    def from_config(cls, cfg: ComponentSection, encoder_state_dim: int = 0, src_vocab_size: int = 0) -> Concatenation:
        s = cfg.settings(ConcatenationSettings)
        return cls(cfg.emb_dim, s.concat_target, s.concat_loss)

    @property
    def reads_target(self) -> bool:
        return self.target_break is not None

    @property
    def encodes_target(self) -> bool:
        return False  # the target side is the decoder's forced prefix only

    def encode(self, model, src, src_mask, context, beam: int = 1) -> State:
        """The encoder reads the previous sentences, each followed by the break, then the
        sentence; the decoder's memory holds the sentence's annotations first, then its context's."""
        if context is None:
            ids, mask, before = src, src_mask, torch.zeros(src.size(0), dtype=torch.long, device=src.device)
        else:
            ids, mask, before = self.join(context.ids, context.mask, src, src_mask, model.src_emb.num_embeddings)
        emb = model.dropout_emb(self.embed(model.src_emb, ids))
        annotations = model.dropout_hidden(model.encoder(emb, mask, None))
        memory, memory_mask, memory_len = self.current_first(annotations, before, src_mask)
        return model.decoder.prepare(memory, memory_mask, None, beam).rows(memory_len=memory_len, context_len=before)

    def target_prefix(self, model, context):
        """The previous target sentences, each followed by the break (2-to-2)."""
        if not self.reads_target or context is None or context.tgt_ids is None:
            return None
        empty = context.tgt_ids.new_zeros(context.tgt_ids.size(0), 0)
        ids, mask, _ = self.join(context.tgt_ids, context.tgt_mask, empty, empty.float(),
                                 model.tgt_emb.num_embeddings)
        return (ids, mask) if ids.size(1) else None

    def memory_lengths(self, enc: State) -> list[int]:
        return enc["memory_len"].tolist()

    def own_positions(self, values, enc, width):
        start = enc["context_len"]  # the encoder read the context and its breaks first
        index = start.unsqueeze(1) + torch.arange(width, device=values.device)
        return values.gather(1, index.clamp(max=values.size(1) - 1))

    def embed_target(self, table: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
        return self.embed(table, ids, "target")

    def loss_on_prefix(self) -> bool:
        return self.loss_on_all

    def embed(self, table: nn.Embedding, ids: torch.Tensor, side: str = "source") -> torch.Tensor:
        """Embeddings of ids in which BREAK (one past the vocabulary) stands for the break."""
        brk = ids == table.num_embeddings
        emb = table(ids.masked_fill(brk, PAD))
        if not bool(brk.any()):
            return emb
        vector = (self.source_break if side == "source" else self.target_break).weight[0]
        return torch.where(brk.unsqueeze(-1), vector.to(emb.dtype), emb)

    @staticmethod
    def join(block_ids: torch.Tensor, block_mask: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor,
             brk: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[each present context sentence's words, <brk>] then the sentence, left-aligned:
        ids (B, W), mask (B, W), and the context's length with its breaks (B,).  block_*:
        (B, K, L) context sentences (a target sentence's </s> becomes its break)."""
        B, K, L = block_ids.shape
        words = block_mask.bool() & (block_ids != EOS)
        present = block_mask.amax(-1, keepdim=True) > 0
        block = torch.cat([block_ids, torch.full_like(block_ids[..., :1], brk)], -1).view(B, K * (L + 1))
        keep_block = torch.cat([words, present], -1).view(B, K * (L + 1))
        joined, joined_mask = _pack(torch.cat([block, ids], 1), torch.cat([keep_block, mask.bool()], 1))
        return joined, joined_mask, keep_block.sum(1)

    @staticmethod
    def current_first(annotations: torch.Tensor, context_len: torch.Tensor,
                      src_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Annotations of the joined sequence (B, W, ·) laid out as each row's own n_b positions,
        then its context's c_b, then padding: memory (B, M, ·) with M = max(S, max_b n_b + c_b),
        its mask, and n_b + c_b (B,).  A row's own positions are its first n_b, as in a sentence
        model's memory; its context follows at once rather than after the batch's S, so that the
        memory is padded only at its end (a wave's memory held about 46% padding with the context
        after S: docs/speed-log.md).  Attention and its weighted sum do not depend on the order."""
        B, S = src_mask.shape
        own_len = src_mask.sum(1).long()
        memory_len = own_len + context_len
        M = max(S, int(memory_len.max()) if memory_len.numel() else 0)
        at = torch.arange(M, device=src_mask.device).expand(B, M)
        own = at < own_len.unsqueeze(1)
        index = torch.where(own, context_len.unsqueeze(1) + at, at - own_len.unsqueeze(1))
        memory = annotations.gather(1, index.clamp(0, annotations.size(1) - 1).unsqueeze(-1)
                                    .expand(-1, -1, annotations.size(-1)))
        mask = (at < memory_len.unsqueeze(1)).to(src_mask.dtype)
        return memory * mask.unsqueeze(-1).to(memory.dtype), mask, memory_len


def after_prefix(prefix: torch.Tensor, prefix_mask: torch.Tensor, ids: torch.Tensor,
                 mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row's prefix words then its own, left-aligned: ids and mask (B, W), and the prefix
    lengths (B,)."""
    joined, joined_mask = _pack(torch.cat([prefix, ids], 1), torch.cat([prefix_mask, mask], 1).bool())
    return joined, joined_mask, prefix_mask.sum(1).long()


def _pack(ids: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kept ids of each row moved to its front, in order, PAD after them."""
    lens = keep.sum(1)
    width = int(lens.max()) if lens.numel() else 0
    where = torch.where(keep, keep.long().cumsum(1) - 1, torch.full_like(ids, width))
    out = torch.full((ids.size(0), width + 1), PAD, dtype=ids.dtype, device=ids.device)
    out.scatter_(1, where, ids)
    mask = (torch.arange(width, device=ids.device) < lens.unsqueeze(1)).float()
    return out[:, :width], mask


def context_name(cfg: ComponentSection) -> str:
    """The entry `cfg` selects: `model.context`, or hierarchical where the doc_* keys ask for a
    document summary (every config written before the key existed)."""
    if cfg.context == "none" and cfg.settings(DocumentSettings).reads_document:
        return "hierarchical"
    return cfg.context


def context_input(cfg: ComponentSection) -> ContextNeeds:
    return CONTEXTS.get(context_name(cfg), key="model.context").needs(cfg)


def context_sentences(cfg: ComponentSection) -> int:
    """K, the previous sentences a model of `cfg` reads; 0 for a sentence-level model."""
    return context_input(cfg).sentences


def reads_target_context(cfg: ComponentSection) -> bool:
    """Whether a model of `cfg` reads the previous target sentences (in translation: its own)."""
    return context_input(cfg).reads_target


def context_description(cfg: ComponentSection) -> str:
    """How a model of `cfg` reads its document, in plain words ('' for a sentence-level model)."""
    return CONTEXTS.get(context_name(cfg), key="model.context").describe(cfg)


def reader_from_config(cfg: ComponentSection, encoder_state_dim: int, src_vocab_size: int) -> ContextReader | None:
    """The model's context input (None for a sentence-level model)."""
    return CONTEXTS.get(context_name(cfg), key="model.context").from_config(cfg, encoder_state_dim, src_vocab_size)
