"""`ctxnmt lm train CONFIG`, `ctxnmt lm compare CONFIG … --out DIR` and `ctxnmt lm score MODEL_DIR -i FILE`."""
from __future__ import annotations

from pathlib import Path

from ctxnmt.lm.compare import compare
from ctxnmt.lm.config import load_lm_config
from ctxnmt.lm.run import train_and_score
from ctxnmt.lm.scoring import score_file
from ctxnmt.training import runs
from ctxnmt.utils.messages import stderr_log, to_stderr
from ctxnmt.utils.preemption import Preempted


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
    c.add_argument("--export", metavar="DIR",
                   help="then copy the report and every finished run's small files (config.yaml, train.log, "
                        "test.logprobs, results.json) to DIR, to be committed: `--report --out DIR` reports them again")
    runs.add_arguments(c, "NAME[:SEED]", "report the runs under --out that have finished (e.g. committed ones)")
    c.set_defaults(func=cmd_compare)

    s = inner.add_parser("score", help="perplexity of a text (and per-line log-probabilities)")
    s.add_argument("model_dir", help="directory written by ctxnmt lm train")
    s.add_argument("-i", "--input", required=True, help="text file, one sentence a line (raw, untokenised)")
    s.add_argument("--per-line", action="store_true",
                   help="print each line's natural log-probability and token count (words + </s>) first")
    s.add_argument("--checkpoint", choices=("best", "last"), default="best")
    s.set_defaults(func=cmd_score)


def cmd_train(args) -> int:
    overrides = list(args.overrides)
    if args.max_minutes is not None:
        overrides.append(f"training.max_minutes={args.max_minutes}")
    config = load_lm_config(args.config, overrides)
    try:
        record = train_and_score(config, quiet=args.quiet, resume=args.resume)
    except Preempted as err:
        to_stderr(f"ctxnmt lm train: {err}; resume with: ctxnmt lm train {config.model_dir}/config.yaml --resume")
        return err.exit_code
    print(f"{config.model_dir}: {record['updates']} updates, stopped because {record['stopped']}; "
          f"best checkpoint: dev ppl {record['dev_ppl']:.2f}, test ppl {record['test_ppl']:.2f}")
    return 0


def cmd_compare(args) -> int:
    runs.check_arguments(args)
    rows = compare(args.configs, args.overrides, args.seeds, Path(args.out), only=args.only,
                   log=stderr_log("lm compare: "), train=not args.report,
                   jobs=args.jobs, export=Path(args.export) if args.export else None)
    if rows is not None:
        print((Path(args.out) / "report.md").read_text(encoding="utf-8").rstrip())
    return 0


def cmd_score(args) -> int:
    result = score_file(args.model_dir, args.input, args.checkpoint)
    if args.per_line:
        print("".join(result.per_line()), end="")
    print(f"perplexity {result.perplexity:.2f} ({sum(result.line_tokens)} tokens, {len(result.line_tokens)} lines)")
    return 0
