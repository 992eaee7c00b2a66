"""`ctxnmt lm train CONFIG` and `ctxnmt lm score MODEL_DIR -i FILE`; LM configs are compared
over seeds by `ctxnmt experiment` (an experiment file with `task: language-model`)."""
from __future__ import annotations

import argparse

from ctxnmt.errors import ConfigError
from ctxnmt.lm.scoring import score_file
from ctxnmt.tasks.language_model import LanguageModelTask
from ctxnmt.training.budget import add_budget_arguments, budget_overrides
from ctxnmt.utils.arguments import add_checkpoint, add_input, add_model_dir
from ctxnmt.utils.messages import to_stderr
from ctxnmt.utils.preemption import Preempted


def register(sub) -> None:
    p = sub.add_parser("lm",
                       description="The residual LSTM language model (docs/lm.md): train one, score a text's "
                                   "perplexity. ctxnmt experiment compares LM configs over seeds.")
    inner = p.add_subparsers(dest="lm_command", required=True, metavar="LM_COMMAND")

    t = inner.add_parser("train", help="train an LM; prints dev and test perplexity of the best checkpoint",
                         description="Train the language model an LM config describes into its model_dir, then "
                                     "print the dev and test perplexity of its best checkpoint (docs/lm.md).")
    t.add_argument("config", metavar="CONFIG", help="YAML LM config file (configs/lm-*.yaml)")
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set model.summary=mean (repeatable)")
    add_budget_arguments(t)
    t.add_argument("--quiet", action="store_true", help="no log lines on stderr")
    t.add_argument("--resume", action="store_true", help="continue exactly from MODEL_DIR/checkpoints/last.pt")
    t.set_defaults(func=cmd_train)

    gone = "gone: LM configs are compared by ctxnmt experiment, with an experiment file of task: language-model"
    # every argument, options too, lands in `rest`: whatever the old call was, it gets the line
    c = inner.add_parser("compare", help=gone, description=gone + " (docs/lm.md).", add_help=False, prefix_chars="\0")
    c.add_argument("rest", nargs=argparse.REMAINDER, help="ignored")
    c.set_defaults(func=cmd_compare)

    s = inner.add_parser("score", help="perplexity of a text (and per-line log-probabilities)",
                         description="The perplexity of a text under a trained language model, and with --per-line "
                                     "each line's log-probability.")
    add_model_dir(s, "a language model's directory, written by ctxnmt lm train")
    add_input(s, "text file, one sentence a line (raw, untokenised)", required=True)
    s.add_argument("--per-line", action="store_true",
                   help="print each line's natural log-probability and token count (words + </s>) first")
    add_checkpoint(s)
    s.set_defaults(func=cmd_score)


def cmd_train(args) -> int:
    config = LanguageModelTask.load(args.config, [*args.overrides, *budget_overrides(args)])
    try:
        record = LanguageModelTask.train_run(config, resume=args.resume, quiet=args.quiet)
    except Preempted as err:
        to_stderr(f"ctxnmt lm train: {err}; resume with: ctxnmt lm train {config.model_dir}/config.yaml --resume")
        return err.exit_code
    print(f"{config.model_dir}: {record['updates']} updates, stopped because {record['stopped']}; "
          f"best checkpoint: dev ppl {record['dev_ppl']:.2f}, test ppl {record['test_ppl']:.2f}")
    return 0


def cmd_compare(args) -> int:
    raise ConfigError("ctxnmt lm compare is gone: list the LM configs as the systems of an experiment file with "
                      "'task: language-model' (as experiments/lm.yaml does) and run ctxnmt experiment FILE")


def cmd_score(args) -> int:
    result = score_file(args.model_dir, args.input, args.checkpoint)
    if args.per_line:
        print("".join(result.per_line()), end="")
    print(f"perplexity {result.perplexity:.2f} ({sum(result.line_tokens)} tokens, {len(result.line_tokens)} lines)")
    return 0
