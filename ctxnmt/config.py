"""Typed configuration: one YAML file per system, overridable with --set.

A config has four sections (data, model, training, decoding) plus the model
directory.  `base: OTHER.yaml` (a path relative to the file) takes every key the
file does not set from another config, so a variant states only its differences.
Every key is a dataclass field, so an unknown key is an error that
names the key and the closest valid one, and a value of the wrong type is an
error that names the key and the expected type.  The model section also takes the
keys that registered components declare as their own settings, flat beside ModelConfig's.
Each section is declared by its owner, torch-free (ctxnmt/{data,models,training,decoding}/settings.py,
each key with its default, values and help); this module composes them, loads, merges and
overrides the files, and says where a key's value was written.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ctxnmt.data.settings import DataConfig
from ctxnmt.decoding.settings import DecodingConfig
from ctxnmt.errors import ConfigError
from ctxnmt.models.settings import ComponentSection, ModelConfig, component_keys, own_keys
from ctxnmt.training.settings import TrainingConfig
from ctxnmt.utils.io import atomic_write
from ctxnmt.utils.options import check_section, field_types, unknown_key

# The tasks (ctxnmt.tasks) by the names a config's and an experiment's `task:` key give them; the registry
# (ctxnmt.tasks.registry.TASKS) holds one task for each, so that reading an experiment file needs no torch.
TRANSLATION, LANGUAGE_MODEL = "translation", "language-model"
TASK_NAMES = (TRANSLATION, LANGUAGE_MODEL)


@dataclass
class Config:
    task: str = TRANSLATION
    name: str = "rnnsearch"
    model_dir: str = "runs/rnnsearch"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    decoding: DecodingConfig = field(default_factory=DecodingConfig)

    def to_dict(self) -> dict[str, Any]:
        return config_dict(self)


def config_dict(config: Any) -> dict[str, Any]:
    """Any config dataclass as its file has it: a component section's settings flat among its keys."""
    return {f.name: section.to_dict() if isinstance(section, ComponentSection) else
            dataclasses.asdict(section) if dataclasses.is_dataclass(section) else section
            for f in dataclasses.fields(config) for section in [getattr(config, f.name)]}


def read_yaml_mapping(path: Path, not_a_mapping: str) -> dict[str, Any]:
    """A YAML file's top-level mapping ({} for an empty file); a one-line error naming the
    file for invalid YAML or any other top-level value."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start})") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}{_yaml_place(err)}: invalid YAML: {_yaml_problem(err)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: {not_a_mapping}")
    return raw


def _yaml_place(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    return f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""


def _yaml_problem(err: yaml.YAMLError) -> str:
    parts = [getattr(err, "context", None), getattr(err, "problem", None)]
    return ", ".join(p for p in parts if p) or str(err).splitlines()[0]


def _coerce(value: Any, typ: Any, key: str) -> Any:
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
    elif typ in (int, float):
        # int keys take ints only; float keys take ints too (YAML writes 1 for 1.0)
        accepted = (int,) if typ is int else (int, float)
        if isinstance(value, accepted) and not isinstance(value, bool):
            return typ(value)
        if isinstance(value, str):
            try:
                return typ(value)
            except ValueError:
                pass
    elif typ is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    raise ConfigError(f"config key '{key}' must be of type {typ.__name__}, got {value!r}", key=key)


def build_section(cls: type, raw: dict[str, Any], where: str = "") -> Any:
    """The dataclass `cls` from a raw mapping: each key one of its fields, each value of its type
    (a dataclass field a section of its own, a list field a list); `where` prefixes the keys."""
    if not isinstance(raw, dict):
        section = where.rstrip(".")
        raise ConfigError(f"config section '{section}' must be a mapping, got {raw!r}", key=section)
    if issubclass(cls, ComponentSection):
        types = {**own_keys(cls), **component_keys(cls)}
    else:
        types = field_types(cls)
    kwargs = {}
    for key, value in raw.items():
        if key not in types:
            raise unknown_key(str(key), list(types), where)
        kwargs[key] = _value(value, types[key], f"{where}{key}")
    return cls.of(**kwargs) if issubclass(cls, ComponentSection) else cls(**kwargs)


def _value(value: Any, typ: Any, key: str) -> Any:
    if typing.get_origin(typ) is list:
        if not isinstance(value, list):
            raise ConfigError(f"config key '{key}' must be a list, got {value!r}", key=key)
        (item,) = typing.get_args(typ)
        return [_value(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
    if dataclasses.is_dataclass(typ):
        return build_section(typ, {} if value is None else value, f"{key}.")
    return _coerce(value, typ, key)


# Keys that were renamed: a config (or a model directory's config.yaml) written with the
# old name still loads, as the new one.
RENAMED = {("decoding", "max_len_ratio"): "max_len_a"}


def _renamed(raw: dict[str, Any]) -> dict[str, Any]:
    for (section, old), new in RENAMED.items():
        values = raw.get(section)
        if not isinstance(values, dict) or old not in values:
            continue
        if new in values:
            raise ConfigError(f"config keys '{section}.{old}' and '{section}.{new}' are the old and the new name "
                              f"of one setting; give only '{section}.{new}'")
        raw = {**raw, section: {(new if k == old else k): v for k, v in values.items()}}
    return raw


def from_dict(raw: dict[str, Any], cls: type = Config) -> Any:
    """The checked config (of `cls`: a task's config class) of a raw mapping: a file's, or a model
    directory's saved config.yaml."""
    config = build_typed(cls, _renamed(raw))
    validate(config)
    return config


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `section.key=value` strings; values are parsed as YAML scalars."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set expects key=value, got '{item}'")
        dotted, text = item.split("=", 1)
        parts = dotted.strip().split(".")
        node = raw
        for part in parts[:-1]:
            if node.get(part) is None:  # absent, or a section written empty
                node[part] = {}
            node = node[part]
            if not isinstance(node, dict):
                raise ConfigError(f"--set {dotted}: '{part}' is not a section")
        try:
            node[parts[-1]] = yaml.safe_load(text) if text != "" else ""
        except yaml.YAMLError as err:
            raise ConfigError(f"--set {dotted}: the value {text!r} is not valid YAML ({_yaml_problem(err)}); "
                              f"quote it: --set '{dotted}=\"...\"'") from None
    return raw


def override(dotted: str, value: str | int | float) -> str:
    """A `--set` item that gives `dotted` exactly `value`: a string that YAML would read as
    something else (a path holding ' #' or ': ', a comment or a mapping) is quoted."""
    if not isinstance(value, str):
        return f"{dotted}={value}"
    try:
        plain = yaml.safe_load(value) == value
    except yaml.YAMLError:
        plain = False
    return f"{dotted}={value if plain else json.dumps(value)}"


def read_raw(path: str | Path | None, overrides: list[str] | None = None) -> dict[str, Any]:
    """The YAML mapping of a config file (empty for None), its `base:` chain merged
    under it, with `--set` overrides applied."""
    raw = {} if path is None else _read_with_bases(Path(path), ())
    return apply_overrides(raw, overrides or [])


def _read_with_bases(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    """A config file states what it changes: `base: OTHER.yaml` (relative to the file)
    gives every key it does not set; sections merge key by key."""
    if not path.is_file():
        where = f" (the base of {seen[-1]})" if seen else ""
        raise ConfigError(f"config file not found: {path}{where}")
    if path.resolve() in seen:
        chain = " -> ".join(str(p) for p in (*seen, path.resolve()))
        raise ConfigError(f"{path}: its base chain loops back to itself ({chain})")
    raw = read_yaml_mapping(path, "a config must be a mapping of sections")
    if "base" not in raw:
        return raw
    base = raw.pop("base")
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{path}: 'base' must be the path of another config file, got {base!r}")
    return merge(_read_with_bases(path.parent / base, (*seen, path.resolve())), raw)


def merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`base` with `changes` applied: mappings merge key by key, anything else is replaced."""
    out = dict(base)
    for key, value in changes.items():
        if value is None and isinstance(out.get(key), dict):
            continue  # a section written with every key commented out changes nothing
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def build_typed(cls: type, raw: dict[str, Any]) -> Any:
    """An instance of the config dataclass `cls` (a task's: Config, LMConfig) from a raw mapping.
    Its `task:` key, where given, must name the task `cls` is read for: another task's config is
    refused as such, before its keys are read as the wrong task's (`unknown config key`)."""
    task = getattr(cls.__dataclass_fields__.get("task"), "default", None)
    if task is not None and raw.get("task", task) != task:
        raise ConfigError(f"config key 'task' is {raw['task']!r}, but a {task} config is read here", key="task")
    return build_section(cls, raw)


def load_config(path: str | Path | None, overrides: list[str] | None = None, cls: type = Config) -> Any:
    raw = read_raw(path, overrides)
    with naming_the_file(path, overrides):
        return from_dict(raw, cls)


@contextlib.contextmanager
def naming_the_file(path: str | Path | None, overrides: list[str] | None) -> Iterator[None]:
    """A key's error names where its value was written: the file and line (a base's, where the
    key came from a base) or the --set item; an error naming no key that was written anywhere
    names the config and whether --set changed it."""
    try:
        yield
    except ConfigError as err:
        if path is None:
            raise
        raise ConfigError(f"{_source_of(err, Path(path), overrides or [])}: {err}", err.key) from None


# A dotted config key in an error's text (`model.out_dim`), for errors about several keys.
DOTTED_KEY = re.compile(r"\b[a-z_]+(?:\.[a-z_0-9]+)+")


def _source_of(err: ConfigError, path: Path, overrides: list[str]) -> str:
    sources = key_sources(path, overrides)
    if err.key:
        named = [_source_of_key(sources, err.key)]
    else:  # a check across keys: each key it names that was written somewhere
        named = [sources.get(key) for key in DOTTED_KEY.findall(str(err))]
    named = list(dict.fromkeys(n for n in named if n))
    return " and ".join(named) if named else f"{path}{' with --set' if overrides else ''}"


def _source_of_key(sources: dict[str, str], key: str) -> str | None:
    """The key's own source; else, for a section, where a key inside it was written; else the
    source of the section that holds it (`--set model={...}`)."""
    if key in sources:
        return sources[key]
    inside = [source for k, source in sources.items() if k.startswith(f"{key}.")]
    if inside:
        return inside[-1]
    parts = key.split(".")
    return next((sources[p] for p in (".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)) if p in sources),
                None)


def key_sources(path: Path, overrides: list[str]) -> dict[str, str]:
    """Where each dotted key of a config was last given: 'FILE:LINE' (the file or one of its
    bases) or '--set ITEM'.  Read again only when an error needs it: the files were read once
    already and are known to be valid YAML."""
    sources: dict[str, str] = {}
    for file in _base_chain(path):
        sources.update({key: f"{file}:{line}" for key, line in _key_lines(file).items()})
    for item in overrides:
        dotted = item.split("=", 1)[0].strip()
        sources = {k: v for k, v in sources.items() if not k.startswith(f"{dotted}.")}
        sources[dotted] = f"--set {item}"
    return sources


def _base_chain(path: Path) -> list[Path]:
    """The config and its bases, the furthest base first (the order in which they are merged)."""
    base = read_yaml_mapping(path, "").get("base")
    return [*_base_chain(path.parent / base), path] if isinstance(base, str) and base else [path]


def _key_lines(path: Path) -> dict[str, int]:
    """Each dotted key a YAML file writes -> the line it is written on."""
    lines: dict[str, int] = {}

    def walk(node: yaml.Node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                dotted = f"{prefix}{key.value}"
                lines[dotted] = key.start_mark.line + 1
                walk(value, f"{dotted}.")

    walk(yaml.compose(path.read_text(encoding="utf-8")), "")
    return lines


def validate(config: Any) -> None:
    """Each section's fields' values, then its rules across keys (the components' among them)."""
    for f in dataclasses.fields(config):
        if dataclasses.is_dataclass(section := getattr(config, f.name)):
            check_section(section, f.name, config)


def first_difference(a: dict[str, Any], b: dict[str, Any], prefix: str = "",
                     ignore: tuple[str, ...] = ()) -> str | None:
    """The first dotted key (in b's order, none of `ignore`) whose value differs between two nested dicts."""
    for key in [*b, *(k for k in a if k not in b)]:
        left, right = a.get(key), b.get(key)
        if isinstance(left, dict) and isinstance(right, dict):
            inner = first_difference(left, right, f"{prefix}{key}.", ignore)
            if inner is not None:
                return inner
        elif left != right and f"{prefix}{key}" not in ignore:
            return f"{prefix}{key}"
    return None


def lookup(tree: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        tree = tree.get(part) if isinstance(tree, dict) else None
    return tree


def config_difference(saved: dict[str, Any], current: dict[str, Any], ignore: tuple[str, ...] = ()) -> str:
    """'KEY is X there but Y' for the first setting in which a run's saved config differs
    from the current one, or ''."""
    key = first_difference(saved, current, ignore=ignore)
    return "" if key is None else f"{key} is {lookup(saved, key)!r} there but {lookup(current, key)!r}"


def save_config(config: Any, path: str | Path) -> None:
    """Write any config dataclass as YAML, atomically."""
    tree = config_dict(config)
    with atomic_write(path, "w") as fh:
        yaml.safe_dump(tree, fh, sort_keys=False)
