"""The length options of decoding (docs/decoding.md): their names, ranges and choices, and
the one-line error for a value out of them, written once for the config file, the command
line and the server's requests.  What the options do in search is ctxnmt.decoding.length;
they are defined here, below the config, because loading a config checks them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

KINDS = ("power", "wu", "none")
RULES = ("fixed", "data")
# Inclusive ranges of the numeric options; beyond them the penalties are degenerate (powers
# that overflow) or the output limit lets one request keep the server busy for minutes.
RANGES: dict[str, tuple[float, float]] = {
    "length_penalty": (0.0, 10.0),
    "coverage_penalty": (0.0, 10.0),
    "max_len_a": (0.0, 10.0),
    "max_len_b": (0, 1000),
    "block_ngram_repeat": (0, 10),
    "length_ratio_penalty": (0.0, 100.0),
    "length_ratio": (0.05, 10.0),
}
CHOICES: dict[str, tuple[str, ...]] = {"length_penalty_kind": KINDS, "max_len_rule": RULES, "length_ratio_rule": RULES}
OPTIONS = ("length_penalty", "length_penalty_kind", "coverage_penalty", "max_len_a", "max_len_b", "max_len_rule",
           "block_ngram_repeat", "length_ratio_penalty", "length_ratio", "length_ratio_rule")


def problem(values: Mapping[str, Any], name: Callable[[str], str] = str) -> tuple[str, str] | None:
    """(option, what is wrong with it) for the first option of `values` out of range, or None;
    another option the text mentions is called `name(option)`."""
    for key in OPTIONS:
        if key not in values:
            continue
        value = values[key]
        if key in CHOICES and value not in CHOICES[key]:
            return key, f"must be one of {', '.join(CHOICES[key])}, not {value!r}"
        if key in RANGES:
            low, high = RANGES[key]
            if not low <= value <= high:  # NaN fails this too
                return key, f"must be between {low:g} and {high:g}, not {value!r}"
    if values.get("max_len_a", 1) == 0 and values.get("max_len_b", 1) == 0:
        return "max_len_b", f"must be at least 1 when {name('max_len_a')} is 0 (every output would be one subword)"
    return None


def check(values: Mapping[str, Any], name: Callable[[str], str], error: type[Exception]) -> None:
    """Raise `error` with one line naming the option as `name(option)` calls it."""
    found = problem(values, name)
    if found is not None:
        raise error(f"{name(found[0])} {found[1]}")


def decoding_options(dec) -> dict[str, Any]:
    """The length options of a DecodingConfig."""
    return {key: getattr(dec, key) for key in OPTIONS}


def fixed_if_a_given(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options given (None: not given), where an a without a rule means a fixed limit:
    whoever passes fairseq's --max-len-a expects it to bind, whatever rule the config has.
    Likewise a length ratio given without its rule is the ratio used."""
    given = {k: v for k, v in options.items() if v is not None}
    for value, rule in (("max_len_a", "max_len_rule"), ("length_ratio", "length_ratio_rule")):
        if value in given and rule not in given:
            given[rule] = "fixed"
    return given


def with_options(dec, overrides: Mapping[str, Any]):
    """A DecodingConfig with the given length options replaced."""
    return dataclasses.replace(dec, **fixed_if_a_given(overrides))
