"""What the commands share on the command line: one spelling for model directories and for
what a command reads and writes, and checks of values that argparse's types let through
but that mean nothing (a beam of 0, a device that is not there): each refused in one line
naming its flag, before anything is loaded."""
from __future__ import annotations

from ctxnmt.errors import ConfigError


def check_at_least(least: int, **flags: int | None) -> None:
    """Refuse the first given flag (`--max-plots` is passed as max_plots=…) below `least`;
    None is a flag left out."""
    for name, value in flags.items():
        if value is not None and value < least:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least {least}, got {value}")


# One spelling for what every command reads and writes (-i, -o, -r) and for model
# directories; a command's older spelling of the same option stays as an alias.
MODEL_DIR_HELP = "a model directory written by ctxnmt train"


def add_model_dir(parser, help: str = MODEL_DIR_HELP) -> None:
    parser.add_argument("model_dir", metavar="MODEL_DIR", help=help)


def add_model_dirs(parser, several: str) -> None:
    """MODEL_DIR [MODEL_DIR …] as one positional (args.model_dirs): one model, or several
    combined as `several` says."""
    parser.add_argument("model_dirs", nargs="+", metavar="MODEL_DIR", help=f"{MODEL_DIR_HELP}; several: {several}")


def add_checkpoint(parser) -> None:
    """--checkpoint, one meaning everywhere: utils.checkpoint.checkpoint_file."""
    parser.add_argument("--checkpoint", metavar="best|last|FILE",
                        help="the model directory's best or last checkpoint, or a checkpoint file "
                             "(default: best, else last; an exported model: its weights)")


def add_input(parser, help: str, *aliases: str, **options) -> None:
    parser.add_argument("-i", "--input", *aliases, metavar="FILE", help=help, **options)


def add_output(parser, help: str, *aliases: str, metavar: str = "FILE", **options) -> None:
    parser.add_argument("-o", "--output", *aliases, metavar=metavar, help=help, **options)


def add_ref(parser, help: str, *aliases: str, **options) -> None:
    parser.add_argument("-r", "--ref", *aliases, metavar="FILE", help=help, **options)
