"""The length options of decoding (docs/decoding.md): `LengthOptions` holds their names,
defaults, ranges or choices and help texts, read by the config's decoding section, the
command line's flags, the server's requests and beam search's LengthControl.  What the
options do in search is ctxnmt.decoding.length; they are defined here, below the config,
because loading a config checks them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ctxnmt.errors import ConfigError
from ctxnmt.utils.options import field_problem, option

RULES = ("fixed", "data")


@dataclass
class LengthOptions:
    """The defaults were chosen on the demo model's dev set with benchmarks/length_sweep.py;
    the experiments that ran before pin power, α = 1, fixed, a = 2, b = 10.  Beyond the
    ranges the penalties are degenerate (powers that overflow) or the output limit lets one
    request keep the server busy for minutes."""
    length_penalty: float = option(0.6, (0.0, 10.0), "α of the length penalty; 0 = raw log-probability")
    length_penalty_kind: str = option("wu", ("power", "wu", "none"),
                                       "power: logP / |y|^α; wu: logP / ((5+|y|)/6)^α (GNMT); none")
    coverage_penalty: float = option(0.0, (0.0, 10.0), "β of GNMT's coverage penalty; 0 = off")
    max_len_a: float = option(2.0, (0.0, 10.0), "an output has at most max_len_a·|x| + max_len_b subwords, "
                                                 "as fairseq's --max-len-a, --max-len-b")
    max_len_b: int = option(5, (0, 1000), "see max_len_a")
    max_len_rule: str = option("data", RULES, "fixed: max_len_a as given; data: the training pairs' "
                                               "99th-percentile target/source ratio")
    block_ngram_repeat: int = option(0, (0, 10), "n > 0: no output repeats an n-gram of its own subwords "
                                                  "(OpenNMT-py's); 0 = off")
    length_ratio_penalty: float = option(0.0, (0.0, 100.0), "λ of the length-ratio prior "
                                                             "−λ·|log(words(y) / (r·words(x)))| (ours); 0 = off")
    length_ratio: float = option(1.1, (0.05, 10.0), "r, output words per source word")
    length_ratio_rule: str = option("data", RULES, "fixed: length_ratio as given; data: the training pairs' "
                                                    "median word ratio")


FIELDS = dataclasses.fields(LengthOptions)
OPTIONS = tuple(f.name for f in FIELDS)
# a value and the rule that, as data, replaces it with the training data's
RULED = {"max_len_a": "max_len_rule", "length_ratio": "length_ratio_rule"}


def problem(values: Mapping[str, Any], name: Callable[[str], str] = str) -> tuple[str, str] | None:
    """(option, what is wrong with it) for the first option of `values` out of range, or None;
    another option the text mentions is called `name(option)`."""
    for f in FIELDS:
        found = field_problem(values[f.name], f.metadata["within"]) if f.name in values else None
        if found:
            return f.name, found
    if values.get("max_len_a", 1) == 0 and values.get("max_len_b", 1) == 0:
        return "max_len_b", f"must be at least 1 when {name('max_len_a')} is 0 (every output would be one subword)"
    return None


def check(values: Mapping[str, Any], name: Callable[[str], str], error: type[Exception]) -> None:
    """Raise `error` with one line naming the option as `name(option)` calls it."""
    found = problem(values, name)
    if found is not None:
        raise error(f"{name(found[0])} {found[1]}")


def ignored(given: Mapping[str, Any], name: Callable[[str], str] = str) -> tuple[str, str] | None:
    """(option, why) for a value given together with its rule as data, which would ignore it."""
    for value, rule in RULED.items():
        if value in given and given.get(rule) == "data":
            return value, f"has no effect with {name(rule)} data (it then comes from the training data)"
    return None


def decoding_options(dec) -> dict[str, Any]:
    """The length options of a DecodingConfig."""
    return {key: getattr(dec, key) for key in OPTIONS}


def fixed_if_a_given(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options given (None: not given), where an a without a rule means a fixed limit:
    whoever passes fairseq's --max-len-a expects it to bind, whatever rule the config has.
    Likewise a length ratio given without its rule is the ratio used."""
    given = {k: v for k, v in options.items() if v is not None}
    for value, rule in RULED.items():
        if value in given and rule not in given:
            given[rule] = "fixed"
    return given


def with_options(dec, overrides: Mapping[str, Any]):
    """A DecodingConfig with the given length options replaced."""
    return dataclasses.replace(dec, **fixed_if_a_given(overrides))


# -- the command line (`translate`, `serve`) -----------------------------------------------

def flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def add_arguments(parser, default: str = "the config's") -> None:
    """The length options as flags; each left out keeps `default` (the model's config)."""
    group = parser.add_argument_group("length control (docs/decoding.md)")
    for f in FIELDS:
        within = f.metadata["within"]
        text = "" if isinstance(f.default, str) else f"{within[0]:g}–{within[1]:g}; "
        group.add_argument(flag(f.name), type=type(f.default), help=f"{f.metadata['help']} ({text}default: {default})")


def from_arguments(args) -> dict[str, Any]:
    """The length options given on the command line, checked (one line naming the flag)."""
    given = {key: getattr(args, key) for key in OPTIONS if getattr(args, key) is not None}
    check(given, flag, ConfigError)
    found = ignored(given, flag)
    if found is not None:
        raise ConfigError(f"{flag(found[0])} {found[1]}")
    return fixed_if_a_given(given)
