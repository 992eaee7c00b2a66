"""Command-line numbers that argparse's types let through but mean nothing (a beam of 0, a
negative count): each refused in one line naming its flag, before anything is loaded."""
from __future__ import annotations

from ctxnmt.errors import ConfigError


def check_at_least(least: int, **flags: int | None) -> None:
    """Refuse the first given flag (`--max-plots` is passed as max_plots=…) below `least`;
    None is a flag left out."""
    for name, value in flags.items():
        if value is not None and value < least:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least {least}, got {value}")
