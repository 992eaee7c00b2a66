"""The `ctxnmt` console script.

Each command family lives next to the code it drives and exposes
``register(subparsers)`` (and, in EXTENDING_MODULES, ``extend(commands)``); this
module only assembles them and turns user errors into one-line messages with a
non-zero exit status.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import importlib.metadata
import sys

from ctxnmt.errors import CtxnmtError
from ctxnmt.utils.messages import to_stderr
from ctxnmt.utils.preemption import Preempted

# Modules that contribute sub-commands, in the order they appear in --help.
COMMAND_MODULES = (
    "ctxnmt.data.commands",
    "ctxnmt.training.commands",
    "ctxnmt.decoding.commands",
    "ctxnmt.evaluation.commands",
    "ctxnmt.lm.commands",
    "ctxnmt.analysis.commands",
    "ctxnmt.experiments.commands",
    "ctxnmt.serve.commands",
    "ctxnmt.judge.commands",
)

# Families that add a kind to a command of a lower layer's family, through `extend(commands)`
# once every command is registered: `score contrastive` needs a model, which `score` does not.
EXTENDING_MODULES = ("ctxnmt.analysis.commands",)


class CommandImportError(CtxnmtError):
    """A command family's module failed to import: every command is refused, naming it,
    rather than one of them missing from --help without a word."""


def version() -> str:
    """The installed package's version; a source tree that was never installed has none."""
    try:
        return importlib.metadata.version("ctxnmt")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxnmt", description="Context-aware recurrent NMT toolkit.",
                                     epilog="`ctxnmt COMMAND --help` describes a command and its options.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    # not required: a bare `ctxnmt` prints this help and exits 0 (main)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError as err:
            raise CommandImportError(f"cannot load the commands of {name}: {err}") from err
        module.register(sub)
    for name in EXTENDING_MODULES:
        importlib.import_module(name).extend(sub.choices)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
    except CommandImportError as err:
        to_stderr(f"ctxnmt: error: {err}")
        return 2
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        result = args.func(args)
    except Preempted as err:  # not an error: `ctxnmt experiment` resumes where it stopped
        to_stderr(f"ctxnmt {args.command}: {err}; the same command resumes")
        return err.exit_code
    except CtxnmtError as err:
        to_stderr(f"ctxnmt {args.command}: error: {err}")
        return 2
    except OSError as err:
        if err.filename is None:  # not about a file the user named: a fault of ours, with its traceback
            raise
        to_stderr(f"ctxnmt {args.command}: error: {err.filename}: {err.strerror}")
        return 2
    except KeyboardInterrupt:
        to_stderr(f"ctxnmt {args.command}: interrupted")
        return 130
    return int(result or 0)


def run_as_rank(argv: list[str] | None = None) -> int:
    """`main`, then a garbage collection while the interpreter is still whole.  A trainer sits
    in reference cycles, and its DistributedDataParallel keeps the gloo process group alive
    past destroy_process_group; freed only as the interpreter shuts down, gloo's threads can
    abort a rank (SIGABRT, exit 134) after it stopped cleanly, as seen once in the suite."""
    code = main(argv)
    gc.collect()
    return code


if __name__ == "__main__":
    sys.exit(main())
