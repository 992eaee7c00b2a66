"""Training the residual LM: truncated BPTT over B parallel streams, dev perplexity,
early stopping, time and update budgets, atomic checkpoints."""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ctxnmt.config import save_config
from ctxnmt.lm import data as lm_data
from ctxnmt.lm.config import LMConfig
from ctxnmt.lm.model import ResidualLM, detach
from ctxnmt.training.budget import budget_reached
from ctxnmt.training.checkpoint import save_checkpoint
from ctxnmt.training.optim import PlateauSchedule, build_optimizer, set_lr
from ctxnmt.training.trainer import Logger, setup_threads
from ctxnmt.utils.io import atomic_write

EVAL_CHUNK = 512  # tokens per forward pass when evaluating (one stream; the state carries over)


@dataclass
class LMProgress:
    epoch: int = 0
    update: int = 0
    elapsed: float = 0.0
    best_ppl: float | None = None
    stopped: str = ""


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


class LMTrainer:
    def __init__(self, config: LMConfig, quiet: bool = False):
        self.config = config
        t = config.training
        self.model_dir = Path(config.model_dir)
        (self.model_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        self.log = Logger(self.model_dir, tensorboard=False, quiet=quiet)
        setup_threads(t.threads)
        torch.manual_seed(t.seed)
        self.device = torch.device(t.device)
        train_words = lm_data.read_split(config.data, "train")
        self.vocab = lm_data.build_vocab(train_words, config.data)
        self.vocab.save(self.model_dir / "vocab.txt")
        self.train_data = lm_data.batchify(lm_data.stream(train_words, self.vocab), t.batch_size,
                                           "training text").to(self.device)
        self.dev = lm_data.stream(lm_data.read_split(config.data, "dev"), self.vocab).to(self.device)
        save_config(config, self.model_dir / "config.yaml")
        self.model = ResidualLM(config.model, len(self.vocab)).to(self.device)
        self.optimizer = build_optimizer(self.model.parameters(), t)
        self.schedule = PlateauSchedule(t.lr, 0, t.lr_decay, t.lr_patience, t.min_lr, higher_is_better=False)
        self.progress = LMProgress()
        n_params = sum(p.numel() for p in self.model.parameters())
        self.log(f"LM: {n_params:,} parameters ({config.model.summary} summary), vocabulary {len(self.vocab)}, "
                 f"{self.train_data.numel():,} training tokens in {t.batch_size} streams")

    def _limit(self) -> str:
        return budget_reached(self.config.training, self.progress)

    def _update(self, tokens, targets, state):
        t = self.config.training
        self.model.train()
        set_lr(self.optimizer, self.schedule.lr(self.progress.update))
        self.optimizer.zero_grad(set_to_none=True)
        nll, state = self.model.loss(tokens, targets, state)
        (nll / targets.numel()).backward()
        if t.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip_norm)
        self.optimizer.step()
        return float(nll.detach()), detach(state)

    def train(self) -> LMProgress:
        t, p = self.config.training, self.progress
        window_nll, window_tokens = 0.0, 0
        stop = self._limit()
        while not stop:
            state = self.model.initial_state(t.batch_size)  # an epoch starts at the beginning of the text
            for tokens, targets in lm_data.segments(self.train_data, t.bptt):
                start = time.perf_counter()
                nll, state = self._update(tokens, targets, state)
                p.elapsed += time.perf_counter() - start
                p.update += 1
                if not math.isfinite(nll):
                    stop = p.stopped = "non-finite loss"
                    break
                window_nll, window_tokens = window_nll + nll, window_tokens + targets.numel()
                if p.update % t.log_every == 0:
                    self.log(f"update {p.update}: train ppl {math.exp(window_nll / window_tokens):.2f}, "
                             f"lr {self.schedule.lr(p.update):.2e}, {p.elapsed / 60:.1f} min")
                    window_nll, window_tokens = 0.0, 0
                stop = self._limit()
                if p.update % t.valid_every == 0 or stop:
                    stop = self._validate(scheduled=p.update % t.valid_every == 0) or stop
                if stop:
                    break
            else:
                p.epoch += 1
                stop = self._limit()
                if stop:
                    self._validate(scheduled=False)
        p.stopped = p.stopped or stop
        self._save("last.pt")
        with atomic_write(self.model_dir / "done.json", "w") as fh:
            json.dump(asdict(p), fh, indent=1)
        self.log(f"training stopped: {p.stopped}; {p.update} updates in {p.elapsed / 60:.1f} min, "
                 f"best dev ppl {p.best_ppl}")
        return p

    def _validate(self, scheduled: bool) -> str:
        p, t = self.progress, self.config.training
        ppl = perplexity(self.model, self.dev)
        self.log(f"validation at update {p.update}: dev ppl {ppl:.2f}")
        if self.schedule.observe(ppl) if scheduled else self.schedule.is_better(ppl, p.best_ppl):
            p.best_ppl = ppl
            self._save("best.pt")
        if t.patience and self.schedule.bad >= t.patience:
            return f"no improvement of dev perplexity in {t.patience} validations"
        return ""

    def _save(self, name: str) -> None:
        save_checkpoint(self.model_dir / "checkpoints" / name, {
            "model": self.model.state_dict(),
            "model_config": asdict(self.config.model),
            "vocab": self.vocab.fingerprint(),
            "progress": asdict(self.progress),
        })
