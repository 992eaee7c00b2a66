"""Language modelling as a task of the Trainer (ctxnmt.training.task): truncated BPTT over
B parallel streams, an update a segment, early stopping on dev perplexity.

The LSTM and summary state at the end of a segment starts the next one; it is part of
the checkpoint, so a resumed run takes the very updates the uninterrupted one would.  That
state holds batch_size streams, and the position in the epoch counts segments of bptt
tokens: a resume with either changed is refused."""
from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import torch

from ctxnmt.config import LANGUAGE_MODEL, config_difference, lookup, read_raw
from ctxnmt.errors import CheckpointError, ConfigError
from ctxnmt.lm import data as lm_data
from ctxnmt.lm.config import LMConfig, lm_from_dict, load_lm_config
from ctxnmt.lm.model import ResidualLM, check_summary, detach
from ctxnmt.lm.scoring import LINE_SCORES, check_trained_as, perplexity, score_file
from ctxnmt.training.distributed import World
from ctxnmt.training.log import TrainingLog
from ctxnmt.training.optim import PlateauSchedule
from ctxnmt.training.task import Progress, Task, Window
from ctxnmt.training.trainer import Trainer
from ctxnmt.utils.io import atomic_write, read_json_object

Segment = tuple[torch.Tensor, torch.Tensor]  # (inputs, targets) of every stream


class LanguageModelTask(Task):
    name = LANGUAGE_MODEL
    # the scores (results.json) come after training: a run with done.json alone is only scored
    finished = kept = "results.json"
    command = ("ctxnmt", "lm", "train")
    metric, metric_name = "ppl", "perplexity"
    config: LMConfig
    stream_state = None  # carried into the next segment of the epoch (None: the epoch's start)

    # -- its config and its runs ---------------------------------------------------------
    @staticmethod
    def load(path: str | Path | None, overrides: list[str]) -> LMConfig:
        """A config whose summary is checked too (as training checks it before it begins)."""
        config = load_lm_config(path, overrides)
        check_summary(config.model)
        return config

    from_dict = staticmethod(lm_from_dict)

    @classmethod
    def train_run(cls, config: LMConfig, resume: bool = False, trained: bool = False, quiet: bool = False) -> dict:
        """Train (or go on from last.pt; with `trained`, take the finished training's
        done.json), then score dev and test with the best checkpoint.  test.logprobs keeps
        each test line's log-probability for significance tests; results.json is written
        last, so its presence says the run finished."""
        if not trained:
            trainer = Trainer(cls(config), resume=resume, quiet=quiet, progress_bar=False)
            # past the resume's checks: the scores of the training so far no longer say what best.pt is
            (Path(config.model_dir) / "results.json").unlink(missing_ok=True)
            trainer.train()
        done = read_json_object(Path(config.model_dir) / "done.json")
        progress = Progress.saved(done)  # older LM runs' done.json too
        d = config.data
        scores = {split: score_file(config.model_dir, Path(d.dir) / f"{getattr(d, split)}.{d.lang}")
                  for split in ("dev", "test")}
        with atomic_write(Path(config.model_dir) / LINE_SCORES, "w") as fh:
            fh.writelines(scores["test"].per_line())
        record = {"updates": progress.update, "minutes": progress.elapsed / 60, "stopped": progress.stopped,
                  "source": done.get("source", "not recorded"),
                  **({"definitions": done["definitions"]} if "definitions" in done else {}),
                  **{f"{k}_ppl": v.perplexity for k, v in scores.items()}}
        with atomic_write(Path(config.model_dir) / "results.json", "w") as fh:
            json.dump(record, fh, indent=1)
        return record

    @classmethod
    def check_runs(cls, runs) -> None:
        """Perplexities compare only over one text cut into one vocabulary: another vocab_size
        changes what <unk> covers, another tokenisation what a token is."""
        for run in runs:
            differs = config_difference(asdict(runs[0].config.data), asdict(run.config.data))
            if differs:
                raise ConfigError(f"system '{run.system}': its data section differs from '{runs[0].system}''s "
                                  f"(data.{differs}); perplexities over other texts or vocabularies do not compare")

    # -- setting up ----------------------------------------------------------------------
    def setup(self, world: World, device: torch.device, log: TrainingLog) -> ResidualLM:
        self.log = log
        d, t = self.config.data, self.training
        train_words = lm_data.read_split(d, "train")
        self.vocab = lm_data.build_vocab(train_words, d)
        self.train_data = lm_data.batchify(lm_data.stream(train_words, self.vocab), t.batch_size,
                                           "training text").to(device)
        self.dev = lm_data.stream(lm_data.read_split(d, "dev"), self.vocab).to(device)
        self.model = ResidualLM(self.config.model, len(self.vocab))
        return self.model

    def schedule(self) -> PlateauSchedule:
        t = self.training
        return PlateauSchedule(t.lr, 0, t.lr_decay, t.lr_patience, t.min_lr, higher_is_better=False)

    def describe(self) -> str:
        n_params = sum(p.numel() for p in self.model.parameters())
        return (f"LM: {n_params:,} parameters ({self.config.model.summary} summary), vocabulary {len(self.vocab)}, "
                f"{self.train_data.numel():,} training tokens in {self.training.batch_size} streams")

    # -- training ------------------------------------------------------------------------
    def epoch_units(self, epoch: int, starting: bool) -> list[Segment]:
        """The segments of the training streams, in order: every epoch reads the text from its start."""
        if starting:
            self.stream_state = None
        return list(lm_data.segments(self.train_data, self.training.bptt))

    def backward(self, segment: Segment, update: int) -> tuple[float, int]:
        """The loss averaged over the segment's tokens (in float32: no loss scale); the state after
        it goes on into the next segment."""
        tokens, targets = segment
        state = self.stream_state or self.model.initial_state(self.training.batch_size)
        nll, state = self.model.loss(tokens, targets, state)
        (nll / targets.numel()).backward()
        self.stream_state = detach(state)
        return float(nll.detach()), targets.numel()

    def log_window(self, window: Window, progress: Progress, lr: float) -> None:
        self.log(f"update {progress.update}: train ppl {math.exp(window.loss / window.tokens):.2f}, "
                 f"lr {lr:.2e}, {progress.elapsed / 60:.1f} min")

    def evaluate(self, progress: Progress) -> dict[str, float]:
        ppl = perplexity(self.model, self.dev)
        self.log(f"validation at update {progress.update}: dev ppl {ppl:.2f}")
        return {"ppl": ppl}

    # -- checkpoints and files -----------------------------------------------------------
    def state(self) -> dict:
        return {"vocab": self.vocab.fingerprint(), "stream_state": self.stream_state}

    def check(self, payload: dict, path: Path) -> None:
        """Another vocabulary or model (ctxnmt.lm.scoring), or other streams than the checkpoint's:
        the saved state and the epoch's position count streams of batch_size and segments of bptt
        tokens; with others they point elsewhere, or do not fit."""
        saved = self.model_dir / "config.yaml"
        check_trained_as(payload, path, self.config, self.vocab, saved)
        if not saved.is_file():
            return
        trained = read_raw(saved)
        for key in ("batch_size", "bptt"):
            was, now = lookup(trained, f"training.{key}"), getattr(self.training, key)
            if was is not None and was != now:
                raise CheckpointError(f"{path}: was trained with training.{key} {was} ({saved}), not {now}; "
                                      f"resume with the same, or train afresh in another model_dir")

    def load_state(self, payload: dict) -> None:
        self.stream_state = payload["stream_state"]

    def write_files(self) -> None:
        self.vocab.save(self.model_dir / "vocab.txt")

