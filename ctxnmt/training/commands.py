"""`ctxnmt prepare` and `ctxnmt train`."""
from __future__ import annotations

import sys

from ctxnmt.config import load_config


def _add_config_args(p) -> None:
    p.add_argument("config", help="YAML config file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set training.lr=0.0005 (repeatable)")


def register(sub) -> None:
    p = sub.add_parser("prepare", help="tokenise, truecase, learn BPE and vocabularies into the model directory")
    _add_config_args(p)
    p.add_argument("--force", action="store_true", help="redo even if the model directory is up to date")
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser("train", help="train a model (prepares the data first if needed)")
    _add_config_args(p)
    p.add_argument("--resume", action="store_true", help="continue exactly from MODEL_DIR/checkpoints/last.pt")
    p.add_argument("--max-minutes", type=float, help="wall-clock budget for training (overrides the config)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or log lines on stderr")
    p.set_defaults(func=cmd_train)


def cmd_prepare(args) -> int:
    from ctxnmt.data.prepare import prepare

    config = load_config(args.config, args.overrides)
    data = prepare(config, log=lambda message: print(message, file=sys.stderr), force=args.force)
    print(f"prepared {len(data.train.src)} training and {len(data.dev.src)} dev pairs in {config.model_dir}/prep; "
          f"vocabulary {len(data.src_vocab)} source / {len(data.tgt_vocab)} target symbols")
    return 0


def cmd_train(args) -> int:
    from ctxnmt.training.trainer import Trainer

    overrides = list(args.overrides)
    if args.max_minutes is not None:
        overrides.append(f"training.max_minutes={args.max_minutes}")
    config = load_config(args.config, overrides)
    trainer = Trainer(config, resume=args.resume, quiet=args.quiet)
    progress = trainer.train()
    print(f"{config.model_dir}: {progress.update} updates, stopped because {progress.stopped}; "
          f"best dev {config.training.early_stop_metric}: {progress.best_metric}")
    return 0
