"""One LM run, as `lm train` and `ctxnmt experiment` make it: train (or go on training), then score
dev and test with the best checkpoint."""
from __future__ import annotations

import json
from pathlib import Path

from ctxnmt.lm.scoring import LINE_SCORES, score_file
from ctxnmt.lm.task import LanguageModelTask
from ctxnmt.training.task import Progress
from ctxnmt.training.trainer import Trainer
from ctxnmt.utils.io import atomic_write, read_json_object


def train_and_score(config, quiet: bool = False, resume: bool = False, score_only: bool = False) -> dict:
    """Train (or go on from last.pt; with `score_only`, take the finished training's
    done.json), then score dev and test with the best checkpoint.  test.logprobs keeps
    each test line's log-probability for significance tests; results.json is written
    last, so its presence says the run finished."""
    if not score_only:
        trainer = Trainer(LanguageModelTask(config), resume=resume, quiet=quiet, progress_bar=False)
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
