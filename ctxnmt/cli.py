"""The `ctxnmt` console script.

Each command family lives next to the code it drives and exposes ``register(subparsers)``
(and, where it adds a kind to another family's command, ``extend(commands)``); this module
lists the commands, imports a family only once one of its commands is chosen, and turns
user errors into one-line messages with a non-zero exit status.
"""
from __future__ import annotations

import argparse
import difflib
import gc
import importlib
import importlib.metadata
import sys
from types import ModuleType
from typing import NoReturn

from ctxnmt.errors import CtxnmtError
from ctxnmt.utils.cores import wait_passively_when_busy
from ctxnmt.utils.messages import to_stderr
from ctxnmt.utils.preemption import Preempted

# Each command, in the order of --help: the module that registers it and its line in --help.
# The line is here, not in the module, because the module (and torch with it) is imported only
# when its command is chosen: `ctxnmt --help` and `--version` load none of them.
COMMANDS: dict[str, tuple[str, str]] = {
    "data": ("ctxnmt.data.commands", "prepare corpora"),
    "prepare": ("ctxnmt.tasks.commands",
                "tokenise, truecase, learn BPE and vocabularies into the model directory"),
    "train": ("ctxnmt.tasks.commands", "train a model (prepares the data first if needed)"),
    "average": ("ctxnmt.tasks.commands", "average a model directory's last checkpoints into one checkpoint file"),
    "translate": ("ctxnmt.decoding.commands", "translate raw text with a trained model directory"),
    "export": ("ctxnmt.decoding.commands",
               "write what translation needs of a model directory (weights as safetensors) to a new directory"),
    "score": ("ctxnmt.evaluation.commands", "score translations (BLEU, chrF, TER) and test significance"),
    "lm": ("ctxnmt.tasks.lm_commands", "the residual LSTM language model: train, score"),
    "analyze": ("ctxnmt.analysis.commands",
                "analyse a trained model (attention, trees, gates, alignment, document context, CXMI)"),
    "experiment": ("ctxnmt.experiments.commands",
                   "train and compare several systems under one budget; write a report"),
    "serve": ("ctxnmt.serve.commands",
              "serve model(s) over HTTP: a JSON API with dynamic batching and a web page"),
    "judge": ("ctxnmt.judge.commands", "blind pairwise human ranking of system outputs (create, serve, report)"),
}

# Families that add a kind to a command of a lower layer's family, through `extend(commands)`
# once that command is registered: `score contrastive` needs a model, which `score` does not.
EXTENSIONS: dict[str, tuple[str, ...]] = {"score": ("ctxnmt.analysis.commands",)}


class CommandImportError(CtxnmtError):
    """A command family's module failed to import: its commands are refused, naming it,
    rather than missing from --help without a word."""


def version() -> str:
    """The installed package's version; a source tree that was never installed has none."""
    try:
        return importlib.metadata.version("ctxnmt")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise CommandImportError(f"cannot load the commands of {name}: {err}") from err


class Commands(argparse._SubParsersAction):
    """The sub-commands of COMMANDS: each is a stand-in with its line in --help until it is
    chosen, when its module registers its real parser in the stand-in's place."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for name, (_, line) in COMMANDS.items():
            super().add_parser(name, help=line, add_help=False)
        self.families: set[str] = set()  # the modules that registered their commands
        self.extended: set[str] = set()  # the commands their EXTENSIONS extended

    def add_parser(self, name: str, **kwargs) -> argparse.ArgumentParser:
        """A family's parser for one of its commands (argparse's signature, less `help`)."""
        if name not in COMMANDS:
            raise CommandImportError(f"command '{name}' is not in COMMANDS of {__name__}, which gives its line "
                                     "in --help")
        if "help" in kwargs:
            raise CommandImportError(f"command '{name}': its line in --help is in COMMANDS of {__name__} alone")
        parser = self._parser_class(prog=f"{self._prog_prefix} {name}", **kwargs)
        self._name_parser_map[name] = parser
        return parser

    def load(self, name: str) -> None:
        """Register the command `name` (with the rest of its family) and its extensions."""
        module = COMMANDS[name][0]
        if module not in self.families:
            _import(module).register(self)
            self.families.add(module)
        if name not in self.extended:
            for extending in EXTENSIONS.get(name, ()):
                _import(extending).extend(self._name_parser_map)
            self.extended.add(name)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        self.load(values[0])
        super().__call__(parser, namespace, values, option_string)


def build_parser(every_command: bool = True) -> argparse.ArgumentParser:
    """The command line; with every_command False, a command's family is loaded only once the
    command is chosen (as `main` does)."""
    parser = argparse.ArgumentParser(prog="ctxnmt", description="Context-aware recurrent NMT toolkit.",
                                     epilog="`ctxnmt COMMAND --help` describes a command and its options.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    # not required: a bare `ctxnmt` prints this help and exits 0 (main)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", action=Commands)
    if every_command:
        for name in COMMANDS:
            commands.load(name)
    return parser


def chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the deepest command or sub-command that the parsed arguments name."""
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        name = getattr(args, sub.dest, None) if sub else None
        if name is None:
            return parser
        parser = sub.choices[name]


def refuse_unknown(parser: argparse.ArgumentParser, unknown: list[str]) -> NoReturn:
    """argparse's error for arguments no parser took, but in the usage of the command that was
    given them, and with the closest option to the first unknown one."""
    message = f"unrecognized arguments: {' '.join(unknown)}"
    flag = next((arg.partition("=")[0] for arg in unknown if arg.startswith("-")), None)
    close = closest_option(flag, [o for action in parser._actions for o in action.option_strings]) if flag else None
    if close:
        message += f"; did you mean {close}?"
    parser.error(message)


def closest_option(flag: str, options: list[str]) -> str | None:
    """The option most like `flag`: the longest that it starts with (--beam for --beam-size, which
    difflib finds nearer --batch-size), else difflib's closest, else None."""
    starts = [option for option in options if option.startswith("--") and flag.startswith(option + "-")]
    if starts:
        return max(starts, key=len)
    close = difflib.get_close_matches(flag, options, n=1)
    return close[0] if close else None


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # a process of its own (the console script, python -m ctxnmt), before torch loads
        wait_passively_when_busy()
    parser = build_parser(every_command=False)
    try:
        args, unknown = parser.parse_known_args(argv)
    except CommandImportError as err:
        to_stderr(f"ctxnmt: error: {err}")
        return 2
    if unknown:
        refuse_unknown(chosen_parser(parser, args), unknown)
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
