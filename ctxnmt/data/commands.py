"""The ``ctxnmt data`` command family."""
from __future__ import annotations

import argparse

from ctxnmt.data.bible import build_bible
from ctxnmt.utils.messages import to_stderr


def register(subparsers) -> None:
    """Add ``data`` and its sub-commands to the top-level CLI parser."""
    data = subparsers.add_parser("data", description="Prepare corpora.")
    commands = data.add_subparsers(dest="data_command", required=True, metavar="DATA_COMMAND")
    bible = commands.add_parser(
        "bible",
        help="build the Spanish-English Bible corpus with diatheke",
        description="Extract the Reina-Valera 1909 (es) and King James (en) Bibles with diatheke, "
        "align them by verse and split them by chapter into train/dev/test, one document per chapter.",
    )
    bible.add_argument("--out", required=True, metavar="DIR", help="directory for {train,dev,test}.{es,en,doc}")
    bible.set_defaults(func=run_bible)


def run_bible(args: argparse.Namespace) -> int:
    """Build (or reuse) the corpus and print its size."""
    stats = build_bible(args.out, log=to_stderr)
    for name, split in stats["splits"].items():
        print(f"{name}: {split['lines']} verse pairs in {split['documents']} chapters")
    print(f"dropped: {stats['dropped']} verses empty or missing on one side")
    return 0
