"""`ctxnmt lm train CONFIG` and `ctxnmt lm score MODEL_DIR -i FILE`."""
from __future__ import annotations

import json
from pathlib import Path

from ctxnmt.utils.io import atomic_write


def register(sub) -> None:
    p = sub.add_parser("lm", help="the residual LSTM language model: train, score")
    inner = p.add_subparsers(dest="lm_command", required=True, metavar="LM_COMMAND")

    t = inner.add_parser("train", help="train an LM; prints dev and test perplexity of the best checkpoint")
    t.add_argument("config", help="YAML LM config file")
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set model.summary=mean (repeatable)")
    t.add_argument("--max-minutes", type=float, help="training-time budget (overrides the config)")
    t.add_argument("--quiet", action="store_true", help="no log lines on stderr")
    t.set_defaults(func=cmd_train)

    s = inner.add_parser("score", help="perplexity of a text (and per-line log-probabilities)")
    s.add_argument("model_dir", help="directory written by ctxnmt lm train")
    s.add_argument("-i", "--input", required=True, help="text file, one sentence a line (raw, untokenised)")
    s.add_argument("--per-line", action="store_true",
                   help="print each line's natural log-probability and token count (words + </s>) first")
    s.add_argument("--checkpoint", choices=("best", "last"), default="best")
    s.set_defaults(func=cmd_score)


def cmd_train(args) -> int:
    from ctxnmt.lm.config import load_lm_config
    from ctxnmt.lm.scoring import score_file
    from ctxnmt.lm.train import LMTrainer

    overrides = list(args.overrides)
    if args.max_minutes is not None:
        overrides.append(f"training.max_minutes={args.max_minutes}")
    config = load_lm_config(args.config, overrides)
    progress = LMTrainer(config, quiet=args.quiet).train()
    d = config.data
    results = {split: score_file(config.model_dir, Path(d.dir) / f"{getattr(d, split)}.{d.lang}").perplexity
               for split in ("dev", "test")}
    with atomic_write(Path(config.model_dir) / "results.json", "w") as fh:
        json.dump({"updates": progress.update, "minutes": progress.elapsed / 60, "stopped": progress.stopped,
                   **{f"{k}_ppl": v for k, v in results.items()}}, fh, indent=1)
    print(f"{config.model_dir}: {progress.update} updates, stopped because {progress.stopped}; "
          f"best checkpoint: dev ppl {results['dev']:.2f}, test ppl {results['test']:.2f}")
    return 0


def cmd_score(args) -> int:
    from ctxnmt.lm.scoring import score_file

    result = score_file(args.model_dir, args.input, args.checkpoint)
    if args.per_line:
        for logprob, n in zip(result.line_logprobs, result.line_tokens):
            print(f"{logprob:.4f}\t{n}")
    print(f"perplexity {result.perplexity:.2f} ({sum(result.line_tokens)} tokens, {len(result.line_tokens)} lines)")
    return 0
