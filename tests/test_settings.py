"""Each setting is declared once, by its owner: the values a config key may take are the
metadata of one dataclass field (ctxnmt.utils.options), and no other literal in the package
lists them again, so that a new choice is added in one place."""
from __future__ import annotations

import ast
import dataclasses
import sys
from pathlib import Path

import pytest
import yaml

from ctxnmt.config import LANGUAGE_MODEL, Config, config_dict, load_config
from ctxnmt.errors import ConfigError
from ctxnmt.lm.config import LMConfig, load_lm_config
from ctxnmt.models.migrations import saved_task
from ctxnmt.models.settings import (ConcatenationSettings, DocumentSettings, ModelConfig, ReadoutSettings,
                                    StackedSettings, component_keys)
from ctxnmt.utils.options import check_fields, option, redefault

PACKAGE = Path(__file__).resolve().parents[1] / "ctxnmt"
COMPONENT_SETTINGS = (StackedSettings, ReadoutSettings, DocumentSettings, ConcatenationSettings)


def sections():
    """(section name, dataclass) for every config section and component settings of the package."""
    for config in (Config, LMConfig):
        for f in dataclasses.fields(config):
            if dataclasses.is_dataclass(f.type if isinstance(f.type, type) else f.default_factory):
                yield f.name, f.default_factory
    for settings in COMPONENT_SETTINGS:
        yield "model", settings


def declared_choices() -> dict[str, set[frozenset[str]]]:
    """section.key -> the choice sets its declarations give."""
    found: dict[str, set[frozenset[str]]] = {}
    for name, cls in sections():
        for f in dataclasses.fields(cls):
            within = f.metadata.get("within")
            if isinstance(within, tuple) and all(isinstance(v, str) for v in within):
                found.setdefault(f"{name}.{f.name}", set()).add(frozenset(within))
    return found


def string_literals() -> list[tuple[str, frozenset[str]]]:
    """('file:line', the strings) of every tuple, list or set literal, and every dict's keys, of two
    or more strings in the package."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
            if not isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)) or not items or len(items) < 2:
                continue
            if all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in items):
                out.append((f"{path.relative_to(PACKAGE.parent)}:{node.lineno}", frozenset(e.value for e in items)))
    return out


def test_every_choice_list_is_declared_once_across_the_package():
    declared = declared_choices()
    assert {"training.optimizer", "training.precision", "model.init", "data.subwords", "decoding.precision",
            "model.doc_start", "model.concat_loss", "decoding.length_penalty_kind"} <= declared.keys()
    literals = string_literals()
    wrong = []
    for key, sets in declared.items():
        assert len(sets) == 1, f"{key} is declared with different choices: {sets}"
        where = [place for place, strings in literals if strings in sets]
        if len(where) != 1:
            wrong.append(f"{key}: its choices are written {len(where)} times ({', '.join(where)})")
    assert not wrong, "\n".join(wrong)


def test_the_check_finds_a_choice_list_written_twice(tmp_path, monkeypatch):
    source = tmp_path / "ctxnmt" / "m.py"
    source.parent.mkdir()
    source.write_text('A = ("adam", "adadelta")\nB = {"adam": 1, "adadelta": 2}\nC = ["x"]\n', encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", source.parent)
    assert [strings for _, strings in string_literals()] == [frozenset({"adam", "adadelta"})] * 2


@dataclasses.dataclass
class _Toy:
    kind: str = option("a", ("a", "b"))
    size: int = option(1, ">=1")
    ratio: float = option(0.5, (0.0, 1.0))


@dataclasses.dataclass
class _Redefaulted(_Toy):
    size: int = redefault(_Toy, "size", 4)


@pytest.mark.parametrize("values, message", [
    (dict(kind="c"), "toy.kind must be one of a, b, not 'c'"),
    (dict(size=0), "toy.size must be at least 1, got 0"),
    (dict(ratio=1.5), "toy.ratio must be between 0 and 1, not 1.5"),
    (dict(ratio=float("nan")), "toy.ratio must be between 0 and 1, not nan"),
])
def test_a_value_outside_its_declaration_is_a_one_line_error_naming_the_key(values, message):
    with pytest.raises(ConfigError) as err:
        check_fields(_Toy(**values), "toy")
    assert str(err.value) == message and err.value.key == message.split()[0]


def test_a_redefaulted_field_keeps_its_declaration():
    assert _Redefaulted().size == 4
    with pytest.raises(ConfigError, match="toy.size must be at least 1, got 0"):
        check_fields(_Redefaulted(size=0), "toy")


COMMITTED_RUNS = sorted((PACKAGE.parent / "experiments" / "results").rglob("config.yaml"))


@pytest.mark.parametrize("path", COMMITTED_RUNS, ids=lambda p: str(p.relative_to(PACKAGE.parent / "experiments")))
def test_every_committed_runs_config_loads_with_its_settings(path):
    """A run's saved config, written before the settings moved to their owners, reads back with
    each of its values unchanged; a key it holds that the loaded config leaves out is a setting
    of a component the run does not use (older runs wrote those too)."""
    saved = yaml.safe_load(path.read_text(encoding="utf-8"))
    loader = load_lm_config if saved_task(saved) == LANGUAGE_MODEL else load_config
    loaded = config_dict(loader(path))
    for section, values in saved.items():
        if not isinstance(values, dict):
            assert loaded[section] == values
            continue
        for key, value in values.items():
            assert loaded[section].get(key, value) == value, f"{section}.{key}"
            assert key in loaded[section] or (section == "model" and key in component_keys(ModelConfig)), key
