"""Ensembles: several trained models searched as one.

`Ensemble` is a Searchable (ctxnmt.decoding.searchable), as its members are, so the
search itself does not know it decodes with several models.  Each member
keeps its own encoder side and decoder state, as a part of the ensemble's State
named by the member's index (ctxnmt.models.state), so members may have any
architecture and search reorders them all with one `select`.  At every step the members' next-word distributions
are combined:

  logprob  mean_k log p_k(y_t | …)          (the usual ensemble of Nematus / Marian)
  prob     log mean_k p_k(y_t | …)          (a mixture of the members' distributions)

All members must read the same source subwords and write the same target
subwords: identical preprocessing (tokeniser, truecaser and BPE files) and
identical source and target vocabularies.
"""
from __future__ import annotations

import hashlib
import math
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from ctxnmt.data.vocab import EOS
from ctxnmt.decoding.searchable import TranslationModel
from ctxnmt.errors import CheckpointError
from ctxnmt.models.capabilities import Capabilities
from ctxnmt.models.state import State

MODES = ("logprob", "prob")


def pack(states: list[State]) -> State:
    """The members' states as the parts of one."""
    out = State()
    for k, state in enumerate(states):
        out.with_part(str(k), state)
    return out


def unpack(state: State, members: int) -> list[State]:
    return [state.part(str(k)) for k in range(members)]


class Ensemble(nn.Module):
    def __init__(self, models: list[TranslationModel], mode: str = "logprob"):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"ensemble mode must be one of {', '.join(MODES)}, not {mode!r}")
        if not models:
            raise ValueError("an ensemble needs at least one model")
        if len({m.vocab_size for m in models}) > 1:
            raise ValueError("ensemble members must share one target vocabulary (their output sizes differ)")
        self.members = nn.ModuleList(models)
        self.mode = mode

    @property
    def vocab_size(self) -> int:
        return self.members[0].vocab_size

    @property
    def capabilities(self) -> Capabilities:
        """The analyses run on one model, so an ensemble offers none of its members'; it reads
        document context where any member does."""
        return Capabilities(document_context=any(m.capabilities.document_context for m in self.members))

    @property
    def encoding_reads_target(self) -> bool:
        return any(m.encoding_reads_target for m in self.members)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor, context=None, beam: int = 1,
               signals: bool = False, ahead: State | None = None) -> State:
        """`context`: previous source sentences, read by the document-context members.  No signals:
        one member's values would not describe the ensemble's search.  `ahead`: as NMTModel's, the
        members' encodings as this one packed them."""
        members = unpack(ahead, len(self.members)) if ahead is not None else [None] * len(self.members)
        return pack([m.encode(src, src_mask, context, beam, ahead=a) if a is not None
                     else m.encode(src, src_mask, context, beam) for m, a in zip(self.members, members)])

    def recorded(self, state) -> None:
        return None

    def signals(self, enc, record, rows, beam: int) -> list[dict]:
        return [{} for _ in rows]

    def memory_lengths(self, enc) -> list[int] | None:
        """The furthest any member's memory reaches (a concatenation member's holds its context too)."""
        found = [lens for m, e in zip(self.members, unpack(enc, len(self.members)))
                 for lens in [m.memory_lengths(e)] if lens is not None]
        return [max(column) for column in zip(*found)] if found else None

    def init_state(self, enc, beam: int = 1):
        encs = unpack(enc, len(self.members))
        return pack([m.init_state(e, beam) for m, e in zip(self.members, encs)])

    def step(self, enc, state, prev_tokens):
        """Combined log-probabilities (R, V), the members' new states, and their mean α_t."""
        encs, states = unpack(enc, len(self.members)), unpack(state, len(self.members))
        logps, new_states, alphas = zip(*(model.step(e, s, prev_tokens)
                                          for model, e, s in zip(self.members, encs, states)))
        stacked = torch.stack(logps)
        if self.mode == "logprob":
            combined = stacked.mean(0)
        else:
            combined = torch.logsumexp(stacked, 0) - math.log(len(logps))
        width = max(a.size(1) for a in alphas)  # a concatenation member attends to its context too
        alphas = [F.pad(a, (0, width - a.size(1))) for a in alphas]
        return combined, pack(new_states), torch.stack(alphas).mean(0)

    def step_candidates(self, enc, state, prev_tokens, k: int):
        """Each row's k best next words under the combined distribution (see NMTModel)."""
        logp, state, alpha = self.step(enc, state, prev_tokens)
        return *logp.topk(k, dim=-1), state, alpha

    def step_candidates_with_end(self, enc, state, prev_tokens, k: int):
        """As `step_candidates`, and each row's </s> under the combined distribution."""
        logp, state, alpha = self.step(enc, state, prev_tokens)
        return *logp.topk(k, dim=-1), logp[:, EOS], state, alpha


def preprocessing_fingerprint(model_dir: Path) -> str:
    """Hash of the files that define the preprocessing (tokeniser options, truecaser, subword model)."""
    digest = hashlib.sha256()
    prep = Path(model_dir) / "prep" / "preprocess"
    for path in sorted(p for p in prep.rglob("*") if p.is_file()):
        digest.update(path.relative_to(prep).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def document_sents(model_dirs: list[Path], translators) -> int:
    """K previous sentences the ensemble's document-context members read (0: none does);
    members that read different numbers are refused, naming them."""
    reading = [(d, t.document_sents) for d, t in zip(model_dirs, translators) if t.document_sents]
    for model_dir, k in reading[1:]:
        if k != reading[0][1]:
            raise CheckpointError(f"cannot ensemble {reading[0][0]} and {model_dir}: their document context is "
                                  f"{reading[0][1]} and {k} previous sentences (model.doc_sents must agree)")
    return reading[0][1] if reading else 0


def check_members(model_dirs: list[Path], translators) -> None:
    """Refuse members that do not share preprocessing and vocabularies, naming them."""
    first, reference = model_dirs[0], translators[0]
    expected = (reference.tgt_vocab.fingerprint(), reference.src_vocab.fingerprint(),
                preprocessing_fingerprint(first))
    for model_dir, translator in zip(model_dirs[1:], translators[1:]):
        found = (translator.tgt_vocab.fingerprint(), translator.src_vocab.fingerprint(),
                 preprocessing_fingerprint(model_dir))
        for what, a, b in zip(("target vocabulary", "source vocabulary", "preprocessing"), expected, found):
            if a != b:
                raise CheckpointError(f"cannot ensemble {first} and {model_dir}: they have a different {what} "
                                      f"(ensemble members must share preprocessing and vocabularies)")
