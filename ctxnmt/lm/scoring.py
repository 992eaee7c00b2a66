"""A trained LM from its model directory, and the log-probabilities of a text under it."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ctxnmt.config import LANGUAGE_MODEL, first_difference, lookup, read_raw
from ctxnmt.data.corpus import read_lines
from ctxnmt.data.vocab import Vocab
from ctxnmt.errors import CheckpointError
from ctxnmt.lm import data as lm_data
from ctxnmt.lm.config import LMConfig, load_lm_config
from ctxnmt.lm.model import ResidualLM
from ctxnmt.models.migrations import load_model_checkpoint, saved_task
from ctxnmt.utils.checkpoint import checkpoint_file, default_checkpoint, load_model_state
from ctxnmt.utils.threads import setup_threads

LINE_SCORES = "test.logprobs"  # a finished run's per-line test log-probabilities (an experiment's significance tests read them)
EVAL_CHUNK = 512  # tokens per forward pass when evaluating (one stream; the state carries over)


@torch.no_grad()
def stream_logprobs(model: ResidualLM, ids: torch.Tensor) -> torch.Tensor:
    """log p(w_k | w_<k) for every token of a stream after the first, as one stream."""
    model.eval()
    data = ids.view(1, -1)
    state = model.initial_state(1)
    out = []
    for tokens, targets in lm_data.segments(data, EVAL_CHUNK):
        logp, state = model.token_logprobs(tokens, targets, state)
        out.append(logp[0])
    return torch.cat(out)


def perplexity(model: ResidualLM, ids: torch.Tensor) -> float:
    return math.exp(-float(stream_logprobs(model, ids).mean()))


@dataclass
class TextScore:
    line_logprobs: list[float]  # natural log-probability of each line's words and its </s>
    line_tokens: list[int]
    perplexity: float

    def per_line(self) -> list[str]:
        """`log-probability<TAB>tokens` lines, as `lm score --per-line` prints them and LINE_SCORES holds them."""
        return [f"{logprob:.4f}\t{n}\n" for logprob, n in zip(self.line_logprobs, self.line_tokens)]


def check_trained_as(payload: dict, path: Path, config: LMConfig, vocab: Vocab, where: Path) -> None:
    """Refuse a checkpoint trained with another vocabulary or model than `config` (read from
    `where`), naming the first model setting that differs: e.g. one whose summary has since
    been renamed (ctxnmt.models.migrations, RENAMED) states its old name."""
    if payload.get("vocab") != vocab.fingerprint():
        raise CheckpointError(f"{path}: was trained with a different vocabulary than {where.parent / 'vocab.txt'}")
    saved, wanted = payload.get("model_config", {}), config.model.to_dict()
    key = first_difference(saved, wanted)
    if key is not None:
        raise CheckpointError(f"{path}: model.{key} is {lookup(saved, key)!r} in the checkpoint but "
                              f"{lookup(wanted, key)!r} in {where}")


def load_lm(model_dir: str | Path, checkpoint: str | None = None) -> tuple[LMConfig, Vocab, ResidualLM]:
    model_dir = Path(model_dir)
    if not (model_dir / "config.yaml").is_file():
        raise CheckpointError(f"{model_dir}: not an LM model directory (no config.yaml; made by ctxnmt lm train?)")
    if saved_task(read_raw(model_dir / "config.yaml")) != LANGUAGE_MODEL:
        raise CheckpointError(f"{model_dir}: a translation model's directory (ctxnmt translate reads it), "
                              "not a language model's")
    config = load_lm_config(model_dir / "config.yaml")
    vocab = Vocab.load(model_dir / "vocab.txt")
    path = checkpoint_file(model_dir, checkpoint) if checkpoint else default_checkpoint(model_dir)
    payload = load_model_checkpoint(path)
    check_trained_as(payload, path, config, vocab, model_dir / "config.yaml")
    model = ResidualLM(config.model, len(vocab))
    load_model_state(model, payload, path)
    return config, vocab, model.eval()


def score_lines(config: LMConfig, vocab: Vocab, model: ResidualLM, lines: list[str]) -> TextScore:
    """Score lines as one continuous text, as the model was trained (the state runs across lines)."""
    word_lists = lm_data.words(lines, config.data)
    logp = stream_logprobs(model, lm_data.stream(word_lists, vocab))
    counts = [len(w) + 1 for w in word_lists]
    per_line = [float(chunk.sum()) for chunk in torch.split(logp, counts)]
    return TextScore(per_line, counts, math.exp(-float(logp.mean())))


def score_file(model_dir: str | Path, path: str | Path, checkpoint: str | None = None) -> TextScore:
    config, vocab, model = load_lm(model_dir, checkpoint)
    setup_threads(config.training.threads)
    return score_lines(config, vocab, model, read_lines(path))
