"""A setting declared once, by the module that owns it: its default, the values it may take and
its help, as a dataclass field's metadata (`option`).  One function (`check_fields`) refuses a
value outside them for every section of every config, in one line naming the key; what a
field's values cannot say alone (a rule across keys) is the section's own `check`."""
from __future__ import annotations

import dataclasses
import difflib
import typing
from dataclasses import field
from typing import Any

from ctxnmt.errors import ConfigError

# A number's range, where its type allows values that mean nothing: (test, words).
RANGES = {
    ">=1": (lambda v: v >= 1, "at least 1"),
    ">=0": (lambda v: v >= 0, "0 or more"),
    ">0": (lambda v: v > 0, "above 0"),
    "[0,1)": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "(0,1]": (lambda v: 0 < v <= 1, "in (0, 1]"),
}


class Section:
    """A base for a config section without rules across its keys."""

    def check(self, config: Any) -> None:
        """Raise a ConfigError naming the key; `config` is the whole config the section is in."""


def option(default: Any, within: Any = None, help: str = "") -> Any:
    """A field whose values are `within`: a tuple of strings (its choices), a rule of RANGES
    (">=1"), a tuple of two numbers (an inclusive range) or None (any value of its type)."""
    if isinstance(within, str) and within not in RANGES:
        raise ValueError(f"unknown range {within!r}; known: {', '.join(RANGES)}")
    return field(default=default, metadata={"within": within, "help": help})


def redefault(cls: type, name: str, default: Any) -> Any:
    """A subclass's field that keeps the declaration of `cls`'s (values, help) with another default."""
    return field(default=default, metadata=next(f.metadata for f in dataclasses.fields(cls) if f.name == name))


def choices(cls: type, name: str) -> tuple[str, ...]:
    """The choices a field of a settings dataclass declares."""
    return next(f.metadata["within"] for f in dataclasses.fields(cls) if f.name == name)


def field_problem(value: Any, within: Any) -> str | None:
    """What is wrong with `value` for a field declared `within`, or None."""
    if within is None:
        return None
    if isinstance(within, str):
        test, words = RANGES[within]
        return None if test(value) else f"must be {words}, got {value}"
    if all(isinstance(v, str) for v in within):
        return None if value in within else f"must be one of {', '.join(within)}, not {value!r}"
    low, high = within
    return None if low <= value <= high else f"must be between {low:g} and {high:g}, not {value!r}"  # NaN too


def check_fields(section: Any, name: str) -> None:
    """Refuse the first field of `section` (the config's section `name`) outside its values."""
    for f in dataclasses.fields(section):
        problem = field_problem(getattr(section, f.name), f.metadata.get("within"))
        if problem:
            raise ConfigError(f"{name}.{f.name} {problem}", key=f"{name}.{f.name}")


def check_section(section: Any, name: str, config: Any) -> None:
    """Each field's values, then the section's own rules across keys (its `check(config)`)."""
    check_fields(section, name)
    section.check(config)


def field_types(cls: type) -> dict[str, Any]:
    """A dataclass's fields with their (resolved) types."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def unknown_key(key: str, valid: list[str], where: str) -> ConfigError:
    """The error for a key no section declares, with the closest valid one."""
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    # the suggestion with its section, so that it can be pasted into --set or the file as it is
    hint = f"; did you mean '{where}{close[0]}'?" if close else f"; valid keys: {', '.join(sorted(valid))}"
    return ConfigError(f"unknown config key '{where}{key}'{hint}", key=f"{where}{key}")
