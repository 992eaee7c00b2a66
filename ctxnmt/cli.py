"""The `ctxnmt` console script.

Each command family lives next to the code it drives and exposes
``register(subparsers)``; this module only assembles them and turns user errors
into one-line messages with a non-zero exit status.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from ctxnmt.errors import CtxnmtError

# Modules that contribute sub-commands, in the order they appear in --help.
COMMAND_MODULES = (
    "ctxnmt.data.commands",
    "ctxnmt.training.commands",
    "ctxnmt.decoding.commands",
    "ctxnmt.evaluation.commands",
    "ctxnmt.lm.commands",
    "ctxnmt.analysis.commands",
    "ctxnmt.experiments.commands",
    "ctxnmt.judge.commands",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxnmt", description="Context-aware recurrent NMT toolkit.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            # a command family not written yet
            if err.name and (name == err.name or name.startswith(err.name + ".")):
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except CtxnmtError as err:
        print(f"ctxnmt {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"ctxnmt {args.command}: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
