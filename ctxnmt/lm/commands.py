"""`ctxnmt lm train CONFIG`, `ctxnmt lm compare CONFIG … --out DIR` and `ctxnmt lm score MODEL_DIR -i FILE`."""
from __future__ import annotations

import json
import sys
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
    t.add_argument("--resume", action="store_true", help="continue exactly from MODEL_DIR/checkpoints/last.pt")
    t.set_defaults(func=cmd_train)

    c = inner.add_parser("compare", help="train several LM configs with several seeds; test perplexity, mean ± sd")
    c.add_argument("configs", nargs="+", metavar="CONFIG", help="LM configs; the first is the baseline")
    c.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="training seeds (default 1 2 3)")
    c.add_argument("--out", required=True, help="directory for the runs ({out}/{name}/seed{s}) and report.md/.json")
    c.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="an override for every config (repeatable), e.g. --set training.max_epochs=20")
    c.add_argument("--only", action="append", metavar="NAME[:SEED]",
                   help="train only these runs (repeatable), then report the finished ones: lets two "
                        "processes share one comparison")
    c.add_argument("--report", action="store_true",
                   help="train nothing: report the runs under --out that have finished (e.g. committed ones)")
    c.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="train up to N runs at once, each in its own process (default 1)")
    c.set_defaults(func=cmd_compare)

    s = inner.add_parser("score", help="perplexity of a text (and per-line log-probabilities)")
    s.add_argument("model_dir", help="directory written by ctxnmt lm train")
    s.add_argument("-i", "--input", required=True, help="text file, one sentence a line (raw, untokenised)")
    s.add_argument("--per-line", action="store_true",
                   help="print each line's natural log-probability and token count (words + </s>) first")
    s.add_argument("--checkpoint", choices=("best", "last"), default="best")
    s.set_defaults(func=cmd_score)


def train_and_score(config, quiet: bool = False, resume: bool = False, score_only: bool = False) -> dict:
    """Train (or go on from last.pt; with `score_only`, take the finished training's
    done.json), then score dev and test with the best checkpoint.  test.logprobs keeps
    each test line's log-probability for significance tests; results.json is written
    last, so its presence says the run finished."""
    from ctxnmt.lm.scoring import LINE_SCORES, score_file
    from ctxnmt.lm.train import LMProgress, LMTrainer

    if score_only:
        progress = LMProgress(**json.loads((Path(config.model_dir) / "done.json").read_text(encoding="utf-8")))
    else:
        progress = LMTrainer(config, resume=resume, quiet=quiet).train()
    d = config.data
    scores = {split: score_file(config.model_dir, Path(d.dir) / f"{getattr(d, split)}.{d.lang}")
              for split in ("dev", "test")}
    with atomic_write(Path(config.model_dir) / LINE_SCORES, "w") as fh:
        fh.writelines(scores["test"].per_line())
    record = {"updates": progress.update, "minutes": progress.elapsed / 60, "stopped": progress.stopped,
              **{f"{k}_ppl": v.perplexity for k, v in scores.items()}}
    with atomic_write(Path(config.model_dir) / "results.json", "w") as fh:
        json.dump(record, fh, indent=1)
    return record


def cmd_train(args) -> int:
    from ctxnmt.lm.config import load_lm_config
    from ctxnmt.utils.preemption import Preempted

    overrides = list(args.overrides)
    if args.max_minutes is not None:
        overrides.append(f"training.max_minutes={args.max_minutes}")
    config = load_lm_config(args.config, overrides)
    try:
        record = train_and_score(config, quiet=args.quiet, resume=args.resume)
    except Preempted as err:
        print(f"ctxnmt lm train: {err}; resume with: ctxnmt lm train {config.model_dir}/config.yaml --resume",
              file=sys.stderr)
        return err.exit_code
    print(f"{config.model_dir}: {record['updates']} updates, stopped because {record['stopped']}; "
          f"best checkpoint: dev ppl {record['dev_ppl']:.2f}, test ppl {record['test_ppl']:.2f}")
    return 0


def cmd_compare(args) -> int:
    from ctxnmt.errors import ConfigError
    from ctxnmt.lm.compare import compare

    if args.only and args.report:
        raise ConfigError("--only trains runs and --report trains none: give one of them")
    rows = compare(args.configs, args.overrides, args.seeds, Path(args.out), only=args.only,
                   log=lambda message: print(f"lm compare: {message}", file=sys.stderr), train=not args.report,
                   jobs=args.jobs)
    if rows is not None:
        print((Path(args.out) / "report.md").read_text(encoding="utf-8").rstrip())
    return 0


def cmd_score(args) -> int:
    from ctxnmt.lm.scoring import score_file

    result = score_file(args.model_dir, args.input, args.checkpoint)
    if args.per_line:
        print("".join(result.per_line()), end="")
    print(f"perplexity {result.perplexity:.2f} ({sum(result.line_tokens)} tokens, {len(result.line_tokens)} lines)")
    return 0
