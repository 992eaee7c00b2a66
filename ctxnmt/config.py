"""Typed configuration: one YAML file per system, overridable with --set.

A config has four sections (data, model, training, decoding) plus the model
directory.  `base: OTHER.yaml` (a path relative to the file) takes every key the
file does not set from another config, so a variant states only its differences.
Every key is a dataclass field, so an unknown key is an error that
names the key and the closest valid one, and a value of the wrong type is an
error that names the key and the expected type.  The model section also takes the
keys that registered components declare as their own settings
(`declare_model_settings`), flat beside ModelConfig's.
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import json
import re
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from typing import Any, ClassVar, TypeVar

import yaml

from ctxnmt.errors import ConfigError
from ctxnmt.length_options import LengthOptions, check, decoding_options
from ctxnmt.utils.io import atomic_write


@dataclass
class DataConfig:
    """Where the corpus is and how text becomes subword ids."""

    corpus: str = "bible"  # "bible" builds the default corpus into `dir`; "files" uses the paths below
    dir: str = "data/bible"
    src_lang: str = "es"
    tgt_lang: str = "en"
    train: str = "train"  # file prefixes inside `dir`: {dir}/{train}.{src_lang}
    dev: str = "dev"
    test: str = "test"
    tokenize: bool = True
    truecase: bool = True
    bpe_merges: int = 8000  # subword-nmt merges (subwords: bpe); 0 = whole words
    joint_bpe: bool = True  # one subword model on both sides (BPE's or SentencePiece's), else one per side
    subwords: str = "bpe"  # bpe (subword-nmt) | sentencepiece (bpe_merges is then ignored)
    sentencepiece_vocab: int = 8000  # pieces of the SentencePiece model (at most: a small corpus may give fewer)
    sentencepiece_type: str = "unigram"  # unigram | bpe: SentencePiece's training algorithm
    vocab_size: int = 0  # 0 = every subword seen in training
    max_len: int = 80  # subword tokens; longer training pairs are dropped (and counted)
    # Cleaning of the training pairs, each off by default (the papers' data came cleaned):
    filter_ratio: float = 0.0  # drop pairs whose word counts differ by more than this factor (Moses clean-corpus-n: 9)
    filter_duplicates: bool = False  # drop a pair that occurred before
    filter_identical: bool = False  # drop a pair whose source and target are the same text
    # Subword regularisation of the training pairs only (ctxnmt.data.sampling), 0 = off:
    bpe_dropout: float = 0.0  # BPE-dropout (Provilkov et al. 2020): each merge skipped with this probability
    sentencepiece_alpha: float = 0.0  # SentencePiece sampling (Kudo 2018): its alpha, all segmentations
    subword_samples: int = 8  # sampled segmentations written at prepare; epoch e trains on sample e mod this


class ComponentSettings:
    """A base for a component's settings dataclass that has a rule across keys or sections:
    `check` refuses a config the component cannot be built from (config.validate calls it
    for the components a config names)."""

    def check(self, config: Any) -> None:
        """Raise a ConfigError naming the key; `config` is the whole config the section is in."""


@dataclass(eq=False)
class ComponentSection:
    """A model section whose components are registry entries (ctxnmt.models.registry): beside
    its own keys it takes the keys its components declare as their settings
    (`declare_model_settings`), flat among its own in the file, kept in `components` as set."""

    # The kinds of component this section names, each with the key that names it.
    NAMES: ClassVar[dict[str, str]] = {}
    components: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls: type[S], **keys: Any) -> S:
        """A section from its keys: its own and its components' settings."""
        own, declared = _own_keys(cls), _component_keys(cls)
        unknown = [key for key in keys if key not in own and key not in declared]
        if unknown:
            raise _unknown_key(unknown[0], [*own, *declared], "model.")
        return cls(**{k: v for k, v in keys.items() if k in own},
                   components={k: v for k, v in keys.items() if k not in own})

    def settings(self, cls: type[T]) -> T:
        """A component's settings (the dataclass it registered with) from this section: each
        field from the key of its name, the field's default where the file sets none."""
        own = _own_keys(type(self))
        values = {f.name: self.components[f.name] if f.name in self.components else getattr(self, f.name)
                  for f in dataclasses.fields(cls) if f.name in self.components or f.name in own}
        return cls(**values)

    def in_use(self) -> list[Any]:
        """The settings of the components this section names."""
        _load_components()
        declared = [_DECLARED.get((kind, getattr(self, key))) for kind, key in self.NAMES.items()]
        return [self.settings(cls) for cls in dict.fromkeys(declared) if cls is not None]

    def __eq__(self, other: object) -> bool:
        """Equal where the files are: a setting given its default equals one not given."""
        return type(other) is type(self) and other.to_dict() == self.to_dict()

    def to_dict(self) -> dict[str, Any]:
        """The section as the file has it: the settings of the components in use flat among its
        own keys (a setting of a component it does not name is no part of it)."""
        out = dataclasses.asdict(self)
        del out["components"]
        for settings in self.in_use():
            out.update({k: v for k, v in dataclasses.asdict(settings).items() if k not in out})
        return out


@dataclass(eq=False)
class ModelConfig(ComponentSection):
    """Architecture switches, each a registry entry in ctxnmt.models, and the sizes and
    regularisation several components read; what one component alone reads is its own
    setting (e.g. the document context's doc_* keys, ctxnmt.models.document)."""

    NAMES: ClassVar[dict[str, str]] = {kind: kind for kind in
                                       ("cell", "encoder", "decoder", "target_context", "output", "doc_aux",
                                                       "context")}
    encoder: str = "birnn"
    decoder: str = "cgru"
    cell: str = "gru"  # gru | adaptive-gru | adaptive-gru-scaled | adaptive-gru-balanced | adaptive-gru-released
    encoder_cell: str = ""  # the encoder's cell when it differs from `cell` ("" = `cell`)
    target_context: str = "previous"
    output: str = "deep"  # deep | adaptive (the paper's) | adaptive-gain3 (ours): how s_t, d_t and c_t are combined into the readout
    # Cross-sentence context (Wang et al.): how the summary D of the previous source sentences
    # enters the decoder transition: none | aux | gated-aux | gated-aux-code (its settings:
    # ctxnmt.models.document)
    doc_aux: str = "none"
    # Document context (ctxnmt.models.context): none | hierarchical (selected by the doc_* keys
    # too) | concat (the previous sentences joined to the current one)
    context: str = "none"
    emb_dim: int = 256
    hidden_dim: int = 512
    att_dim: int = 512
    tie_embeddings: bool = False  # W_o shares the target embedding matrix (needs the readout size emb_dim)
    share_src_tgt_embeddings: bool = False  # only meaningful with a joint vocabulary
    learned_start: bool = False  # y_0 embedding: zero vector (dl4mt) or a learned vector
    # "pytorch": torch defaults (uniform ±1/√fan_in), the default because it learns far faster in
    # short budgets; "normal": the papers' N(0, 0.01) with dl4mt's orthogonal square recurrent blocks, which
    # at small sizes leaves most gradients below Adam's eps (benchmarks/init_gradients.py).
    init: str = "pytorch"
    dropout_emb: float = 0.0
    dropout_hidden: float = 0.0
    dropout_out: float = 0.5


T = TypeVar("T")
S = TypeVar("S", bound=ComponentSection)

# The settings keys that registered components declare beyond their sections' own keys:
# key -> (type, default, the kinds of component that declared it).
_COMPONENT_KEYS: dict[str, tuple[type, Any, set[str]]] = {}
# (kind, registered name) -> its settings dataclass
_DECLARED: dict[tuple[str, str], type] = {}
# The package whose import registers every component (and so declares their settings).
COMPONENTS = "ctxnmt.models"


def _load_components() -> None:
    """Import the components, once, before their settings are looked up.  By name: they import
    this module to declare their settings, and `import ctxnmt` leaves them (and torch) out so
    that `ctxnmt --help` is quick; reading a config is what needs them."""
    importlib.import_module(COMPONENTS)


def _own_keys(cls: type = ModelConfig) -> dict[str, Any]:
    types = _field_types(cls)
    types.pop("components")
    return types


def _component_keys(cls: type) -> dict[str, Any]:
    """The declared settings keys a section takes (of the kinds of component it names), with their types."""
    _load_components()
    return {key: typ for key, (typ, _, kinds) in _COMPONENT_KEYS.items() if kinds & cls.NAMES.keys()}


def declare_model_settings(settings: type, kind: str = "", name: str = "") -> None:
    """Take the fields of a component's settings dataclass as keys of the model section of
    the configs that name components of its `kind`; a field named as one of ModelConfig's
    keys reads that key (and must have its type).  `name`: the component registered with it."""
    own = _own_keys()
    for key, typ in _field_types(settings).items():
        default = next(f.default for f in dataclasses.fields(settings) if f.name == key)
        if default is dataclasses.MISSING:
            raise ValueError(f"model setting '{key}' of {settings.__name__} needs a default")
        known = own.get(key, _COMPONENT_KEYS.get(key, (typ,))[0])
        if known is not typ:
            raise ValueError(f"model setting '{key}' of {settings.__name__} is a {typ.__name__}, "
                             f"but already declared a {known.__name__}")
        if key not in own:
            _COMPONENT_KEYS.setdefault(key, (typ, default, set()))[2].update([kind] if kind else ModelConfig.NAMES)
    if name:
        _DECLARED[(kind, name)] = settings


@dataclass
class TrainingConfig:
    optimizer: str = "adam"  # adam | adadelta
    lr: float = 1e-3
    warmup_updates: int = 0
    clip_norm: float = 1.0
    label_smoothing: float = 0.0
    batch_tokens: int = 2600  # target-token budget per batch
    batch_sents: int = 80  # sentence cap per batch
    max_updates: int = 0  # 0 = unlimited
    max_epochs: int = 0  # 0 = unlimited
    max_minutes: float = 0.0  # wall-clock budget for the training loop; 0 = unlimited
    valid_every: int = 500  # updates between validations
    valid_bleu: bool = True
    valid_beam: int = 5
    valid_max_sents: int = 0  # 0 = the whole dev set
    early_stop_metric: str = "bleu"  # bleu | ppl
    patience: int = 10  # validations without improvement before stopping; 0 = never stop early
    lr_decay: float = 0.5  # factor applied when the metric plateaus; 1.0 = off
    lr_patience: int = 3
    min_lr: float = 1e-5
    stop_at_min_lr: bool = False  # stop once lr_decay has brought the learning rate down to min_lr
    # Ours: the last cooldown_updates of max_updates take the learning rate linearly to zero.
    cooldown_updates: int = 0  # 0 = off
    seed: int = 1234
    threads: int = 0  # 0 = all cores
    log_every: int = 50
    device: str = "cpu"  # cpu | cuda; a distributed run on cuda gives each local rank its own GPU
    precision: str = "fp32"  # fp32 | bf16 | fp16: autocast for the training forward pass (docs/distributed.md)
    # Ours: each training step's forward and backward pass replayed from a CUDA
    # graph, one per padded batch shape (ctxnmt/training/graphs.py, docs/speed.md).
    cuda_graphs: bool = False
    checkpoint_every: int = 0  # updates between writes of last.pt, independent of validation; 0 = at validation only
    # the weights at each of the last N writes of last.pt before the end (checkpoints/update-U.pt),
    # for `ctxnmt average`; 0 = none
    keep_checkpoints: int = 0
    # Whose previous sentences a document model trains on: its own document's, or (a control
    # that keeps the amount of context and removes its information) another document's,
    # drawn once with the seed.  Validation and translation always read the own document.
    document_context: str = "own"  # own | other-document
    # fixed: every training sentence reads all its previous sentences (up to K), as the papers
    # train; random: as many as a uniform draw from 0 … K allows, anew each update (context
    # dropout, Fernandes et al. 2021), so that an empty context is in the model's distribution
    context_size: str = "fixed"  # fixed | random
    # CoWord dropout (Fernandes et al. 2021): each word of the current source sentence becomes
    # the unknown word with this probability in training, so that the model must read its context
    coword_dropout: float = 0.0

    @property
    def selection_metric(self) -> str:
        """The dev metric that early stopping, the learning-rate schedule and best.pt follow:
        early_stop_metric, except that without dev BLEU (valid_bleu false) it is perplexity."""
        return "ppl" if self.early_stop_metric == "bleu" and not self.valid_bleu else self.early_stop_metric


@dataclass
class _Beam:  # a base, so that beam and batch_size stay first in a saved decoding section
    beam: int = 5
    batch_size: int = 64  # sentences decoded together


@dataclass
class DecodingConfig(LengthOptions, _Beam):
    """Search's settings; the length options are ctxnmt.length_options's (docs/decoding.md)."""
    max_src_len: int = 200  # longer inputs are translated in pieces
    # ours: on CUDA, each search step replayed from a CUDA graph (ctxnmt/decoding/graphs.py)
    cuda_graphs: bool = False
    # ours: bf16 = on CUDA, the search's products in bfloat16 under autocast (softmax and
    # scores in float32); on other devices the search stays float32 (docs/decoding.md).
    # int8 = on the CPU, the matrix products in int8 (ctxnmt/models/int8.py; docs/speed.md)
    precision: str = "fp32"


SEARCH_PRECISIONS = ("fp32", "bf16", "int8")


@dataclass
class Config:
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


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


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


def _unknown_key(key: str, valid: list[str], where: str) -> ConfigError:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    # the suggestion with its section, so that it can be pasted into --set or the file as it is
    hint = f"; did you mean '{where}{close[0]}'?" if close else f"; valid keys: {', '.join(sorted(valid))}"
    return ConfigError(f"unknown config key '{where}{key}'{hint}", key=f"{where}{key}")


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


def _build(cls: type, raw: dict[str, Any], where: str) -> Any:
    if not isinstance(raw, dict):
        section = where.rstrip(".")
        raise ConfigError(f"config section '{section}' must be a mapping, got {raw!r}", key=section)
    if issubclass(cls, ComponentSection):
        types = {**_own_keys(cls), **_component_keys(cls)}
    else:
        types = _field_types(cls)
    kwargs = {}
    for key, value in raw.items():
        if key not in types:
            raise _unknown_key(str(key), list(types), where)
        typ = types[key]
        if dataclasses.is_dataclass(typ):
            kwargs[key] = _build(typ, {} if value is None else value, f"{where}{key}.")
        else:
            kwargs[key] = _coerce(value, typ, f"{where}{key}")
    return cls.of(**kwargs) if issubclass(cls, ComponentSection) else cls(**kwargs)


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


def from_dict(raw: dict[str, Any]) -> Config:
    return _build(Config, _renamed(raw), "")


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
    """An instance of the config dataclass `cls` from a raw mapping, with the same errors
    for unknown keys and wrong types as the translation config (for other config kinds)."""
    return _build(cls, raw, "")


def model_kind(raw: dict[str, Any]) -> str | None:
    """'translation model' or 'language model', by what only that kind's saved config holds (a
    decoding section; training.bptt), so that a command given the other kind's directory says so."""
    if isinstance(raw.get("decoding"), dict):
        return "translation model"
    if isinstance(raw.get("training"), dict) and "bptt" in raw["training"]:
        return "language model"
    return None


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    raw = read_raw(path, overrides)
    with naming_the_file(path, overrides):
        config = from_dict(raw)
        validate(config)
    return config


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


# A single field's range, where its type allows values that mean nothing: (test, words).
RANGES = {
    ">=1": (lambda v: v >= 1, "at least 1"),
    ">=0": (lambda v: v >= 0, "0 or more"),
    ">0": (lambda v: v > 0, "above 0"),
    "[0,1)": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "(0,1]": (lambda v: 0 < v <= 1, "in (0, 1]"),
}
# The translation config's fields, beyond the training loop's (LOOP_RANGES); 0 means "off",
# "every", "unlimited" or "as another size" where the field's comment says so.
FIELD_RANGES = {
    "data": {"bpe_merges": ">=0", "vocab_size": ">=0", "max_len": ">=1", "filter_ratio": ">=0",
             "sentencepiece_vocab": ">=1", "bpe_dropout": "[0,1)", "sentencepiece_alpha": ">=0",
             "subword_samples": ">=1"},
    "model": {"emb_dim": ">=1", "hidden_dim": ">=1", "att_dim": ">=1",
              "dropout_emb": "[0,1)", "dropout_hidden": "[0,1)", "dropout_out": "[0,1)"},
    "training": {"warmup_updates": ">=0", "label_smoothing": "[0,1)", "batch_tokens": ">=1", "batch_sents": ">=1",
                 "valid_beam": ">=1", "valid_max_sents": ">=0",
                 "coword_dropout": "[0,1)"},
    "decoding": {"beam": ">=1", "batch_size": ">=1", "max_src_len": ">=1"},
}
# What every training loop and its plateau schedule read, in the NMT and the LM config alike.
LOOP_RANGES = {"lr": ">0", "clip_norm": ">=0", "max_updates": ">=0", "max_epochs": ">=0", "max_minutes": ">=0",
               "valid_every": ">=1", "patience": ">=0", "lr_decay": "(0,1]", "lr_patience": ">=0", "min_lr": ">=0",
               "log_every": ">=1", "keep_checkpoints": ">=0"}


def check_ranges(section: Any, name: str, ranges: dict[str, str]) -> None:
    """Refuse the first field of `section` (the config's section `name`) outside its range."""
    for key, rule in ranges.items():
        within, words = RANGES[rule]
        value = getattr(section, key)
        if not within(value):
            raise ConfigError(f"{name}.{key} must be {words}, got {value}", key=f"{name}.{key}")


# The document context's settings check the last condition (a sentence-level model).
CUDA_GRAPHS_NEED = ("training.cuda_graphs needs training.device cuda (got '{device}'), precision fp32 "
                    "or bf16 (got '{precision}') and a sentence-level model")


def validate(config: Config) -> None:
    """Each field's range, then the checks across fields that a single field's type cannot express."""
    for name, ranges in FIELD_RANGES.items():
        check_ranges(getattr(config, name), name, ranges)
    m, t = config.model, config.training
    for settings in m.in_use():
        if isinstance(settings, ComponentSettings):
            settings.check(config)
    if m.init not in ("normal", "pytorch"):
        raise ConfigError(f"model.init must be 'normal' or 'pytorch', got '{m.init}'")
    if t.optimizer not in ("adam", "adadelta"):
        raise ConfigError(f"training.optimizer must be 'adam' or 'adadelta', got '{t.optimizer}'")
    if t.precision not in ("fp32", "bf16", "fp16"):
        raise ConfigError(f"training.precision must be 'fp32', 'bf16' or 'fp16', got '{t.precision}'")
    if t.cooldown_updates and not 0 < t.cooldown_updates <= t.max_updates:
        raise ConfigError(f"training.cooldown_updates needs training.max_updates of at least as many updates, "
                          f"got {t.cooldown_updates} with max_updates {t.max_updates}")
    if t.cuda_graphs and (not t.device.startswith("cuda") or t.precision == "fp16"):
        raise ConfigError(CUDA_GRAPHS_NEED.format(device=t.device, precision=t.precision))
    if t.early_stop_metric not in ("bleu", "ppl"):
        raise ConfigError(f"training.early_stop_metric must be 'bleu' or 'ppl', got '{t.early_stop_metric}'")
    if t.document_context not in ("own", "other-document"):
        raise ConfigError(f"training.document_context must be 'own' or 'other-document', got '{t.document_context}'")
    if t.context_size not in ("fixed", "random"):
        raise ConfigError(f"training.context_size must be 'fixed' or 'random', got '{t.context_size}'")
    validate_loop(t)
    _validate_decoding(config.decoding)
    if config.data.corpus not in ("bible", "files"):
        raise ConfigError(f"data.corpus must be 'bible' or 'files', got '{config.data.corpus}'")
    _validate_subwords(config.data)


def _validate_subwords(d: DataConfig) -> None:
    if d.subwords not in ("bpe", "sentencepiece"):
        raise ConfigError(f"data.subwords must be 'bpe' or 'sentencepiece', got '{d.subwords}'", key="data.subwords")
    if d.sentencepiece_type not in ("unigram", "bpe"):
        raise ConfigError(f"data.sentencepiece_type must be 'unigram' or 'bpe', got '{d.sentencepiece_type}'",
                          key="data.sentencepiece_type")
    _validate_sampling(d)


def _validate_sampling(d: DataConfig) -> None:
    """Each scheme's own regularisation: a probability set for the other scheme would be silently unused."""
    if d.bpe_dropout and d.subwords != "bpe":
        raise ConfigError(f"data.bpe_dropout is for subwords: bpe, not {d.subwords}; SentencePiece samples with "
                          "data.sentencepiece_alpha", key="data.bpe_dropout")
    if d.bpe_dropout and not d.bpe_merges:
        raise ConfigError("data.bpe_dropout needs BPE merges to drop: data.bpe_merges is 0 (whole words)",
                          key="data.bpe_dropout")
    if d.sentencepiece_alpha and d.subwords != "sentencepiece":
        raise ConfigError(f"data.sentencepiece_alpha is for subwords: sentencepiece, not {d.subwords}; BPE samples "
                          "with data.bpe_dropout", key="data.sentencepiece_alpha")
    if d.sentencepiece_alpha >= 1 and d.sentencepiece_type == "bpe":
        # SentencePiece's BPE reads alpha as the probability of dropping a merge: 1 leaves characters alone
        raise ConfigError("data.sentencepiece_alpha must be in [0, 1) with sentencepiece_type bpe (it is the "
                          f"probability of dropping a merge), got {d.sentencepiece_alpha}",
                          key="data.sentencepiece_alpha")


DEVICE = re.compile(r"cpu|cuda(:\d+)?")


def validate_loop(t: Any) -> None:
    """The `training` settings the Trainer reads (ctxnmt.training.trainer), for any task's config."""
    if t.checkpoint_every < 0:
        raise ConfigError(f"training.checkpoint_every must be 0 (off) or a number of updates, got {t.checkpoint_every}")
    if t.threads < 0:
        raise ConfigError(f"training.threads must be 0 (every core) or a number of threads, got {t.threads}")
    check_ranges(t, "training", LOOP_RANGES)
    if not DEVICE.fullmatch(t.device):
        raise ConfigError(f"training.device must be 'cpu', 'cuda' or 'cuda:N', got '{t.device}'")


def _validate_decoding(dec: DecodingConfig) -> None:
    check(decoding_options(dec), lambda key: f"decoding.{key}", ConfigError)
    if dec.precision not in SEARCH_PRECISIONS:
        raise ConfigError(f"decoding.precision must be one of {', '.join(SEARCH_PRECISIONS)}, not '{dec.precision}'")


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


def check_device(device: str) -> None:
    """`--device`: cpu, cuda or cuda:N, and a GPU that is there (else a traceback from torch
    once the model is loaded)."""
    if not DEVICE.fullmatch(device):
        raise ConfigError(f"--device must be cpu, cuda or cuda:N, got '{device}'")
    if device == "cpu":
        return
    index = int(device.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise ConfigError(f"--device {device}: {torch.cuda.device_count()} CUDA device(s) visible")
