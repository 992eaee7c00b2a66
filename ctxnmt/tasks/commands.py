"""`ctxnmt prepare` and `ctxnmt train`."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch

from ctxnmt.config import load_config
from ctxnmt.data.prepare import prepare
from ctxnmt.errors import ConfigError, DataError
from ctxnmt.tasks.translation import TranslationTask, check_document_files
from ctxnmt.training.averaging import last_kept, write_average
from ctxnmt.training.budget import add_budget_arguments, budget_overrides
from ctxnmt.training.distributed import LAUNCHER_PID
from ctxnmt.training.launch import launch
from ctxnmt.training.log import score_text
from ctxnmt.training.trainer import Trainer, check_fresh_start, held_training
from ctxnmt.utils.messages import to_stderr
from ctxnmt.utils.preemption import Preempted


def _add_config_args(p) -> None:
    p.add_argument("config", metavar="CONFIG", help="YAML config file, e.g. configs/rnnsearch-small.yaml")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set training.lr=0.0005 (repeatable)")


def _workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a number of processes, at least 1, not {text!r}")
    return value


def register(sub) -> None:
    p = sub.add_parser("prepare",
                       description="Prepare the config's corpus for training into MODEL_DIR/prep: tokenise, truecase, "
                                   "learn BPE and the vocabularies.  `ctxnmt train` does it first when it is not done; "
                                   "an up-to-date prep directory is kept.")
    _add_config_args(p)
    p.add_argument("--force", action="store_true", help="redo even if the model directory is up to date")
    p.add_argument("--workers", type=_workers, default=0, metavar="N",
                   help="processes that prepare the training pairs (default: one per core); the output is the same "
                        "for any N")
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser("train",
                       description="Train the model a config describes into its model_dir: prepare the data if "
                                   "needed, validate every training.valid_every updates, keep checkpoints/best.pt "
                                   "and last.pt, stop at a budget or by early stopping.  --resume continues exactly.")
    _add_config_args(p)
    p.add_argument("--resume", action="store_true", help="continue exactly from MODEL_DIR/checkpoints/last.pt")
    add_budget_arguments(p)
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar or log lines on stderr (train.log still has them)")
    p.add_argument("--nproc", type=int, default=1, metavar="N",
                   help="data-parallel training in N local processes (docs/distributed.md)")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("average",
                       description="Write the element-wise mean of a model directory's last N kept checkpoints "
                                   "(training.keep_checkpoints) or of the given checkpoint files as one checkpoint, "
                                   "which translate, serve, score contrastive and analyze take with --checkpoint.")
    p.add_argument("model_dir", metavar="MODEL_DIR", help="the trained model directory")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--last", type=int, metavar="N", help="its last N kept checkpoints (default 5)")
    which.add_argument("--checkpoints", nargs="+", metavar="FILE", help="these checkpoint files instead")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the averaged checkpoint (written atomically)")
    p.set_defaults(func=cmd_average)


def cmd_prepare(args) -> int:
    config = load_config(args.config, args.overrides)
    check_document_files(config)
    held = held_training(Path(config.model_dir))
    if held and args.force:
        raise DataError(f"{config.model_dir}: holds a training ({', '.join(held)}), which must go on with the data "
                        "it was prepared from; --force would prepare it again: prepare into another model_dir")
    data = prepare(config, log=to_stderr, force=args.force, keep=bool(held), workers=args.workers)
    print(f"prepared {len(data.train.src)} training and {len(data.dev.src)} dev pairs in {config.model_dir}/prep; "
          f"vocabulary {len(data.src_vocab)} source / {len(data.tgt_vocab)} target symbols")
    return 0


def cmd_average(args) -> int:
    if args.last is not None and args.last < 1:
        raise ConfigError(f"--last must be at least 1, not {args.last}")
    paths = [Path(f) for f in args.checkpoints] if args.checkpoints else last_kept(Path(args.model_dir), args.last or 5)
    averaged = write_average(paths, Path(args.output))
    update = (averaged.get("progress") or {}).get("update")
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) into {args.output}"
          + (f"; the last at update {update}" if update is not None else ""))
    return 0


def cmd_train(args) -> int:
    config = load_config(args.config, [*args.overrides, *budget_overrides(args)])
    check_document_files(config)  # before the model directory, its log and the data are made
    if args.nproc != 1:
        return _launch(args, config)
    trainer = Trainer(TranslationTask(config), resume=args.resume, quiet=args.quiet)
    try:
        progress = trainer.train()
    except Preempted as err:
        to_stderr(f"ctxnmt train{_rank_tag(trainer)}: {err}; resume with: {_resume_command(config)}")
        return err.exit_code
    if trainer.world.is_main:
        print(f"{config.model_dir}: {progress.update} updates, stopped because {progress.stopped}; "
              f"best dev {config.training.selection_metric}: {score_text(progress.best_metric)}")
    return 0


def _rank_tag(trainer) -> str:
    return f" (rank {trainer.world.rank})" if trainer.world.distributed else ""


def _resume_command(config) -> str:
    """The command that continues this run (its config.yaml holds every --set)."""
    command = f"ctxnmt train {config.model_dir}/config.yaml --resume"
    world = os.environ.get("WORLD_SIZE", "1")
    if os.environ.get(LAUNCHER_PID):
        return f"{command} --nproc {world}"
    if world != "1":
        return f"torchrun (as before) … -m {command}"
    return command


def _launch(args, config) -> int:
    """Prepare once, then run the ranks (ctxnmt.training.launch)."""
    if args.nproc < 1:
        raise ConfigError(f"--nproc must be at least 1, got {args.nproc}")
    if args.nproc > 1 and config.training.cuda_graphs:
        raise ConfigError("training.cuda_graphs runs on one device; it cannot be used with --nproc above 1")
    if config.training.device.startswith("cuda"):
        if args.nproc > torch.cuda.device_count():
            raise ConfigError(f"--nproc {args.nproc} needs as many GPUs; {torch.cuda.device_count()} visible")
    held = held_training(Path(config.model_dir))
    if not args.resume:  # before preparing: the ranks would refuse only after the data was prepared again
        check_fresh_start(Path(config.model_dir))
    prepare(config, log=to_stderr, keep=bool(held))
    child = [args.config, *[a for o in args.overrides for a in ("--set", o)]]
    if args.max_minutes is not None:
        child += ["--max-minutes", str(args.max_minutes)]
    if args.max_updates is not None:
        child += ["--max-updates", str(args.max_updates)]
    child += ["--resume"] * args.resume + ["--quiet"] * args.quiet
    return launch(child, args.nproc)
