"""The encoder–decoder model: embeddings, a registered encoder and decoder, and
the softmax layer W_o.  Built from a ModelConfig by `build_model`; each component
builds itself from the config (`from_config`, ctxnmt.models.interfaces), so a variant
with settings of its own changes nothing here.  What beam search calls is
ctxnmt.decoding.searchable.Searchable; what the server and analyses ask, `capabilities`."""
from __future__ import annotations

import torch
from torch import nn

from ctxnmt.data.batching import Context
from ctxnmt.data.vocab import EOS, PAD
from ctxnmt.models import components  # noqa: F401  (the registry entries it builds from)
from ctxnmt.models.capabilities import Capabilities, hyper_gated
from ctxnmt.models.cells import RecurrentCell
from ctxnmt.models.context import SENTENCE_LEVEL, after_prefix, reader_from_config
from ctxnmt.models.functional import (WordTable, linear_cross_entropy, step_log_softmax, top_log_softmax,
                                      top_log_softmax_and_word)
from ctxnmt.models.interfaces import ContextReader
from ctxnmt.models.registry import CELLS, CONTEXTS, DECODERS, DOC_INPUTS, ENCODERS, OUTPUTS, TARGET_CONTEXTS
from ctxnmt.models.settings import ModelConfig
from ctxnmt.models.state import State


class NMTModel(nn.Module):
    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__()
        self.cfg = cfg
        self.src_emb = nn.Embedding(src_vocab_size, cfg.emb_dim, padding_idx=PAD)
        if cfg.share_src_tgt_embeddings:
            if src_vocab_size != tgt_vocab_size:
                raise ValueError("share_src_tgt_embeddings needs one joint vocabulary")
            self.tgt_emb = self.src_emb
        else:
            self.tgt_emb = nn.Embedding(tgt_vocab_size, cfg.emb_dim, padding_idx=PAD)
        # y_0: dl4mt feeds a zero vector; a learned start embedding is an option.
        self.start = nn.Parameter(torch.zeros(cfg.emb_dim), requires_grad=cfg.learned_start)
        self.encoder = ENCODERS.get(cfg.encoder).from_config(cfg)
        self.decoder = DECODERS.get(cfg.decoder).from_config(cfg, self.encoder.out_dim)
        # The document context input (ctxnmt.models.context) under its own attribute name, which
        # prefixes its parameters' names in checkpoints (the hierarchical summary's: `document`).
        reader = reader_from_config(cfg, self.encoder.state_dim, src_vocab_size)
        self._reader = reader.attribute if reader is not None else None
        if reader is not None:
            self.add_module(reader.attribute, reader)
        self.generator = nn.Linear(self.decoder.out_dim, tgt_vocab_size)
        if cfg.tie_embeddings:
            self.generator.weight = self.tgt_emb.weight
        self.dropout_emb = nn.Dropout(cfg.dropout_emb)
        self.dropout_hidden = nn.Dropout(cfg.dropout_hidden)
        self.dropout_out = nn.Dropout(cfg.dropout_out)
        init_weights(self, cfg.init)
        self._word_inputs = WordTable()  # search's per-word input terms of the decoder (Decoder.word_input)

    @property
    def capabilities(self) -> Capabilities:
        encoder, decoder = self.encoder.recurrence_cells(), self.decoder.recurrence_cells()
        return Capabilities(encoder_hyper_gates=hyper_gated(encoder), decoder_hyper_gates=hyper_gated(decoder),
                            target_attention=self.decoder.has_target_attention(),
                            adaptive_output=self.decoder.has_adaptive_output(),
                            document_context=self.context_reader is not None)

    @property
    def context_reader(self) -> ContextReader | None:
        """How it reads the previous sentences (None: a sentence-level model)."""
        reader = self._reading
        return None if reader is SENTENCE_LEVEL else reader

    @property
    def _reading(self) -> ContextReader:
        """The context reader, or for a sentence-level model the one that reads the sentence alone."""
        return self._modules[self._reader] if self._reader is not None else SENTENCE_LEVEL

    @property
    def device(self) -> torch.device:
        return self.start.device

    # -- encoder ---------------------------------------------------------------
    def encode(self, src: torch.Tensor, src_mask: torch.Tensor,
               context: Context | None = None, beam: int = 1, signals: bool = False,
               ahead: State | None = None) -> State:
        """`context`: each sentence's previous sentences; a document-context model given none
        reads the empty context, a sentence-level model ignores it.  `beam`: the hypotheses
        that will read each sentence (Decoder.prepare).  `signals`: search will ask for
        `signals`, so the hyper-gates of the encoder's pass are kept (and the decoder records).
        `ahead`: these rows' encoding, formed earlier by `encode` with the source side of the
        same context (Searchable.encode); only the target prefix is added to it."""
        if ahead is not None:
            enc = ahead
            if signals:
                enc.with_part("signals", State())
            return self._with_target_prefix(enc, context)
        reader = self._reading
        gated = self.capabilities.encoder_hyper_gates if signals else ()
        read = []  # what the encoder read (its inputs and h0), under whichever context input
        hook = self.encoder.register_forward_pre_hook(lambda _, inputs: read.append(inputs)) if gated else None
        try:
            enc = reader.encode(self, src, src_mask, context, beam)
        finally:
            if hook is not None:
                hook.remove()
        if gated:
            own = reader.own_positions
            enc.with_part("encoder_gates", State().positions(own_mask=src_mask, **{
                name: own(rec.hyper_gate(), enc, src.size(1))
                for name, rec in self.encoder.recurrences(*read[0]).items() if name in gated}))
        if signals:
            enc.with_part("signals", State())
        return self._with_target_prefix(enc, context)

    def _with_target_prefix(self, enc: State, context: Context | None) -> State:
        prefix = self._target_prefix(context)
        if prefix is not None:
            enc.with_part("prefix", State().rows(ids=prefix[0], mask=prefix[1]))
        return enc

    def _target_prefix(self, context: Context | None):
        return self._reading.target_prefix(self, context)

    @property
    def encoding_reads_target(self) -> bool:
        """Whether `encode` reads the target side of the context (Searchable)."""
        return self._reading.encodes_target

    def memory_lengths(self, enc: State) -> list[int] | None:
        """Where each sentence's memory ends, where it holds more than the source (a concatenation
        model's context, after the batch's source positions); None otherwise."""
        return self._reading.memory_lengths(enc)

    # -- teacher forcing ---------------------------------------------------------
    def previous_embeddings(self, tgt: torch.Tensor) -> torch.Tensor:
        """[y_0, E y_1, …, E y_{T-1}] for targets (B, T) that end in EOS."""
        emb = self._embed_target(tgt[:, :-1])
        start = self.start.expand(tgt.size(0), 1, -1)
        return self.dropout_emb(torch.cat([start, emb], dim=1))

    def forward(self, src, src_mask, tgt, tgt_mask, context: Context | None = None):
        """Readouts (B, T, out_dim) and attention (B, T, S) under teacher forcing."""
        readout, attention, _ = self._forced(src, src_mask, tgt, tgt_mask, context)
        return readout, attention

    def _forced(self, src, src_mask, tgt, tgt_mask, context: Context | None):
        """`forward`'s readouts and attention on the current sentence, and for a model with a
        target prefix (2-to-2) the whole forced sequence's (readouts, labels, mask) as well."""
        enc = self.encode(src, src_mask, context)
        prefix = (enc.part("prefix")["ids"], enc.part("prefix")["mask"]) if "prefix" in enc.parts else None
        if prefix is None:
            readout, attention = self.decoder(enc, self.previous_embeddings(tgt), tgt_mask)
            return readout, _own(attention, src_mask), None
        V = self.tgt_emb.num_embeddings
        full, full_mask, before = after_prefix(*prefix, tgt, tgt_mask)
        readout, attention = self.decoder(enc, self.previous_embeddings(full), full_mask)
        at = (before.unsqueeze(1) + torch.arange(tgt.size(1), device=tgt.device)).clamp(max=full.size(1) - 1)
        current = readout.gather(1, at.unsqueeze(-1).expand(-1, -1, readout.size(-1)))
        attention = _own(attention.gather(1, at.unsqueeze(-1).expand(-1, -1, attention.size(-1))), src_mask)
        return current, attention, (readout, full.masked_fill(full == V, EOS), full_mask)

    def _embed_target(self, ids: torch.Tensor) -> torch.Tensor:
        """E y, the break of a target prefix (one past the vocabulary) included."""
        return self._reading.embed_target(self.tgt_emb, ids)

    def embeddings(self) -> list[nn.Embedding]:
        """Every word embedding table: source, target (the same one where shared) and the
        document context's own, where it has one."""
        return [self.src_emb, self.tgt_emb, *self._reading.embeddings()]

    @property
    def vocab_size(self) -> int:
        """Target vocabulary size V."""
        return self.generator.out_features

    def logits(self, readout: torch.Tensor) -> torch.Tensor:
        return self.generator(self.dropout_out(readout))

    def loss(self, src, src_mask, tgt, tgt_mask, label_smoothing: float = 0.0, context: Context | None = None):
        """Summed token cross-entropy and the number of target tokens.

        The softmax runs only on real (unpadded) positions: padding costs no
        output-layer work.
        """
        readout, _, whole = self._forced(src, src_mask, tgt, tgt_mask, context)
        keep = tgt_mask.bool()
        if whole is not None and self._reading.loss_on_prefix():
            readout, tgt, keep = whole[0], whole[1], whole[2].bool()
        nll = linear_cross_entropy(self.dropout_out(readout[keep]), self.generator.weight, self.generator.bias,
                                   tgt[keep], label_smoothing)
        return nll, int(keep.sum())

    def padded_loss(self, src, src_mask, tgt, tgt_mask, label_smoothing: float = 0.0) -> torch.Tensor:
        """`loss`'s summed cross-entropy, every tensor's shape set by the batch's padded shape
        alone: the softmax runs on padding too, weighted 0.  What a CUDA graph of the training
        step holds (ctxnmt.training.graphs), where `loss` indexes out the real positions and
        counts them on the host.  For sentence-level models."""
        readout, _ = self(src, src_mask, tgt, tgt_mask)
        rows = self.dropout_out(readout.reshape(-1, readout.size(-1)))
        return linear_cross_entropy(rows, self.generator.weight, self.generator.bias, tgt.reshape(-1),
                                    label_smoothing, rows_kept=tgt_mask.reshape(-1))

    # -- incremental decoding ----------------------------------------------------
    def init_state(self, enc, beam: int = 1):
        if "prefix" not in enc.parts:
            state = self.decoder.init_state(enc, beam)
        else:
            state = self._force_prefix(enc, enc.part("prefix"))
            state = state.select(torch.arange(state.batch_size(), device=self.device).repeat_interleave(beam))
        # recording starts after a target prefix: its forced steps keep the state's shapes
        return self.decoder.recording(state) if "signals" in enc.parts else state

    def recorded(self, state: State) -> State | None:
        return self.decoder.recorded(state)

    def signals(self, enc: State, record: State | None, rows: torch.Tensor, beam: int) -> list[dict]:
        """What the search rows `rows` show besides source attention, where `encode` was asked for
        signals: per row, the decoder's values at each of its steps from `record` (Decoder.signals)
        and `encoder_gates`, each hyper-gated encoder recurrence's mean hyper-gate at each of the
        row's source positions, as the encoder computed them."""
        found = self.decoder.signals(record.select(rows)) if record is not None else {}
        out = [{name: values[i] for name, values in found.items()} for i in range(len(rows))]
        if "encoder_gates" in enc.parts:
            sentences = rows // beam
            gates = dict(enc.part("encoder_gates").select(sentences).items())
            lengths = gates.pop("own_mask").sum(1).tolist()
            for i, (row, n) in enumerate(zip(out, lengths)):
                row["encoder_gates"] = {name: values[i, :int(n)] for name, values in gates.items()}
        return out

    def _force_prefix(self, enc: State, prefix: State) -> State:
        """The decoder state (one row per sentence) after reading y_0 and each word of the target
        prefix but its last (the break), which the first search step reads.  Prefixes are
        right-aligned: a row waits, its state held, until its own prefix begins."""
        ids, mask = prefix["ids"], prefix["mask"]
        lens = mask.sum(1).long()
        P = ids.size(1)
        right = (torch.arange(P, device=ids.device) - (P - lens).unsqueeze(1)).clamp(min=0)
        ids = ids.gather(1, right)  # row b's prefix in columns P − len_b … P − 1
        start = self.start.expand(ids.size(0), 1, -1)
        # column t reads y_0 where row b's prefix begins, else the prefix word before it
        before = torch.cat([start, self._embed_target(ids[:, :-1])], 1) if P > 1 else start
        embs = torch.where(((P - lens).unsqueeze(1) == torch.arange(P, device=ids.device)).unsqueeze(-1),
                           start, before)
        word_inputs = self.decoder.word_input(embs)  # one product for every column, not one a step
        state = self._forced_steps(enc, embs, word_inputs, lens)
        last = self._embed_target(ids[:, -1])
        first = torch.where((lens > 0).unsqueeze(1), last, start[:, 0])
        return state.with_part("first", State().rows(emb=first))

    def _forced_steps(self, enc: State, embs: torch.Tensor, word_inputs: torch.Tensor, lens: torch.Tensor) -> State:
        """The decoder state after the forced steps of right-aligned prefixes (`lens` words
        each, inputs `embs` and `word_inputs` (B, P, ·)).  A step runs only the rows whose
        prefix has begun: ordered longest prefix first, those are the first n_t rows, read as
        views.  (Running every row and keeping the waiting ones' states computed half the
        rows of a wave's forcing for nothing.)  A product of fewer rows may round otherwise in
        CPU BLAS, so the states match running every row to float rounding, not to the bit."""
        B, P = embs.size(0), embs.size(1)
        order = torch.argsort(lens, descending=True, stable=True)
        identity = bool((order == torch.arange(B, device=order.device)).all())
        if not identity:
            enc, embs, word_inputs, lens = enc.select(order), embs[order], word_inputs[order], lens[order]
        width = enc["src_mask"].size(1)
        begun = torch.searchsorted((P - lens).contiguous(), torch.arange(P, device=lens.device),
                                   right=True).tolist()  # rows whose prefix has begun by column t
        state = self.decoder.init_state(enc, 1)
        for t, n in enumerate(begun):
            if n == B:
                state = self.decoder.forced_step(enc, state, embs[:, t], word_inputs[:, t])
            elif n:
                stepped = self.decoder.forced_step(enc.slice_rows(0, n), state.slice_rows(0, n), embs[:n, t],
                                                   word_inputs[:n, t])
                state = stepped.concat(state.slice_rows(n, B), width)
        return state if identity else state.select(torch.argsort(order))

    def step(self, enc, state, prev_tokens: torch.Tensor | None):
        """Log-probabilities (B, V) of the next word, the new state, and α_t (B, S).

        prev_tokens is None at the first step (y_0)."""
        readout, state, alpha = self._readout_step(enc, state, prev_tokens)
        return self.log_probs(readout), state, alpha

    def step_candidates(self, enc, state, prev_tokens: torch.Tensor | None, k: int):
        """As `step`, but only each row's k most probable next words: their
        log-probabilities and ids (B, k), best first.  All a beam of k/2 needs."""
        readout, state, alpha = self._readout_step(enc, state, prev_tokens)
        return *self.top_log_probs(readout, k), state, alpha

    def step_candidates_with_end(self, enc, state, prev_tokens: torch.Tensor | None, k: int):
        """As `step_candidates`, and each row's log-probability of </s> whatever its rank (B,)."""
        readout, state, alpha = self._readout_step(enc, state, prev_tokens)
        if self.training:
            logp = self.log_probs(readout)
            return *logp.topk(k, dim=-1), logp[:, EOS], state, alpha
        return *top_log_softmax_and_word(readout, self.generator.weight, self.generator.bias, k, EOS), state, alpha

    def _readout_step(self, enc, state, prev_tokens):
        if prev_tokens is None:  # y_0, or after a target prefix its break
            start = state.part("first")["emb"] if "first" in state.parts else self.start.expand(state.batch_size(), -1)
            return self.decoder.step(enc, state, start, self.decoder.word_input(start))
        emb = self.tgt_emb(prev_tokens)
        return self.decoder.step(enc, state, emb, self._word_input(prev_tokens, emb))

    def _word_input(self, prev_tokens: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        """The decoder's input term of the previous words; search looks it up per word."""
        if self.training:  # formed as in training, per step
            return self.decoder.word_input(emb)
        return self._word_inputs.lookup(self.decoder.word_input, self.tgt_emb.weight,
                                        self.decoder.word_input_parameters(), prev_tokens, emb)

    def top_log_probs(self, readout: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The k largest log-probabilities of each row and their word ids, best first."""
        if self.training:  # with the output dropout of `log_probs`
            return self.log_probs(readout).topk(k, dim=-1)
        return top_log_softmax(readout, self.generator.weight, self.generator.bias, k)

    def log_probs(self, readout: torch.Tensor) -> torch.Tensor:
        """log softmax(W_o t + b) (R, V) for the R rows of one decoding step."""
        if self.training:
            return torch.log_softmax(self.logits(readout), dim=-1)
        return step_log_softmax(readout, self.generator.weight, self.generator.bias)


def init_weights(model: nn.Module, scheme: str) -> None:
    """'normal': the papers' N(0, 0.01) weights, except dl4mt's orthogonal square blocks in
    the recurrent matrices (the papers state N(0, 0.01) for all; dl4mt, their code, makes
    the recurrent blocks orthogonal), and zero biases.  'pytorch' keeps torch's defaults."""
    if scheme == "pytorch":
        if model.cfg.tie_embeddings:
            # N(0, 1) embeddings would start a shared softmax layer with logits of
            # standard deviation √e; scale as for a linear layer of fan-in e.
            with torch.no_grad():
                model.tgt_emb.weight.normal_(0.0, model.cfg.emb_dim ** -0.5)
                model.tgt_emb.weight[PAD].zero_()
        init_module_biases(model)
        return
    # Each gate block of a recurrent matrix U is square: orthogonal, as in dl4mt.
    blocks_of = {id(cell.U): cell.n_blocks for cell in model.modules() if isinstance(cell, RecurrentCell)}
    with torch.no_grad():
        for module in model.modules():
            blocks = blocks_of.get(id(module))
            for name, param in module.named_parameters(recurse=False):
                if not param.requires_grad:
                    continue
                if name == "bias":
                    param.zero_()
                elif blocks and name == "weight":
                    for block in param.chunk(blocks, dim=0):
                        nn.init.orthogonal_(block)
                else:
                    param.normal_(0.0, 0.01)
        for emb in model.embeddings():
            emb.weight[PAD].zero_()
    init_module_biases(model)


def init_module_biases(model: nn.Module) -> None:
    """Biases that a cell's equations want away from the scheme's (a gate that starts open)."""
    for module in model.modules():
        if isinstance(module, RecurrentCell):
            module.init_biases()


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def build_model(cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> NMTModel:
    return NMTModel(cfg, src_vocab_size, tgt_vocab_size)


# The model keys that name a registered component ("" for encoder_cell: the same as cell).
NAMED_COMPONENTS = (("encoder", ENCODERS), ("decoder", DECODERS), ("cell", CELLS), ("encoder_cell", CELLS),
                    ("target_context", TARGET_CONTEXTS), ("output", OUTPUTS), ("doc_aux", DOC_INPUTS),
                    ("context", CONTEXTS))


def check_names(cfg: ModelConfig) -> None:
    """Every component `cfg` names is registered: a misspelt name is found before the data is
    prepared (minutes on the Bible) or an experiment's earlier runs train, not when the model is built."""
    for key, registry in NAMED_COMPONENTS:
        name = getattr(cfg, key)
        if name or key != "encoder_cell":
            registry.get(name, key=f"model.{key}")


__all__ = ["NMTModel", "build_model", "check_names", "count_parameters", "init_weights"]


def _own(attention: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
    """Attention (B, T, ·) on the sentence's own S positions, zero at its padding (where a
    concatenation's memory holds the context of a row shorter than S)."""
    S = src_mask.size(1)
    return attention[..., :S] * src_mask.unsqueeze(1).to(attention.dtype)
