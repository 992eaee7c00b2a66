"""The `model` section: the architecture switches (each a registry entry of ctxnmt.models), the
sizes and regularisation several components read, and the keys that components declare as
their own settings, flat beside these.  Torch-free, so that reading a config loads no model code:
the settings of the components shipped in ctxnmt.models are declared here, at the end, by the
names they are registered under; a component defined elsewhere declares its own when it is
registered (`register(name, settings=…)`, ctxnmt.models.registry)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from ctxnmt.errors import ConfigError
from ctxnmt.training.settings import CUDA_GRAPHS_NEED
from ctxnmt.utils.options import check_fields, field_types, option, unknown_key


class ComponentSettings:
    """A base for a component's settings dataclass that has a rule across keys or sections:
    `check` refuses a config the component cannot be built from (config.validate calls it
    for the components a config names, after their fields' values)."""

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
        own, declared = own_keys(cls), component_keys(cls)
        unknown = [key for key in keys if key not in own and key not in declared]
        if unknown:
            raise unknown_key(unknown[0], [*own, *declared], "model.")
        return cls(**{k: v for k, v in keys.items() if k in own},
                   components={k: v for k, v in keys.items() if k not in own})

    def settings(self, cls: type[T]) -> T:
        """A component's settings (the dataclass it registered with) from this section: each
        field from the key of its name, the field's default where the file sets none."""
        own = own_keys(type(self))
        values = {f.name: self.components[f.name] if f.name in self.components else getattr(self, f.name)
                  for f in dataclasses.fields(cls) if f.name in self.components or f.name in own}
        return cls(**values)

    def in_use(self) -> list[Any]:
        """The settings of the components this section names."""
        declared = [_DECLARED.get((kind, getattr(self, key)), _DECLARED.get((kind, EVERY)))
                    for kind, key in self.NAMES.items()]
        return [self.settings(cls) for cls in dict.fromkeys(declared) if cls is not None]

    def check(self, config: Any) -> None:
        """The settings of the components in use: each field's values, then their own rules."""
        for settings in self.in_use():
            check_fields(settings, "model")
            if isinstance(settings, ComponentSettings):
                settings.check(config)

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
    """What one component alone reads is its own setting (e.g. the document context's doc_*
    keys, ctxnmt.models.document); the names each switch takes are its registry's."""

    NAMES: ClassVar[dict[str, str]] = {kind: kind for kind in
                                       ("cell", "encoder", "decoder", "target_context", "output", "doc_aux",
                                        "context")}
    encoder: str = "birnn"
    decoder: str = "cgru"
    cell: str = "gru"
    encoder_cell: str = option("", help="the encoder's cell when it differs from `cell` ('' = `cell`)")
    target_context: str = "previous"
    output: str = option("deep", help="how s_t, d_t and c_t are combined into the readout")
    # Cross-sentence context (Wang et al.): how the summary D of the previous source sentences
    # enters the decoder transition (its settings: ctxnmt.models.document)
    doc_aux: str = "none"
    # Document context (ctxnmt.models.context): hierarchical is selected by the doc_* keys too
    context: str = "none"
    emb_dim: int = option(256, ">=1")
    hidden_dim: int = option(512, ">=1")
    att_dim: int = option(512, ">=1")
    tie_embeddings: bool = option(False, help="W_o shares the target embedding matrix (needs the readout "
                                              "size emb_dim)")
    share_src_tgt_embeddings: bool = option(False, help="only meaningful with a joint vocabulary")
    learned_start: bool = option(False, help="y_0 embedding: zero vector (dl4mt) or a learned vector")
    # "pytorch": torch defaults (uniform ±1/√fan_in), the default because it learns far faster in
    # short budgets; "normal": the papers' N(0, 0.01) with dl4mt's orthogonal square recurrent blocks, which
    # at small sizes leaves most gradients below Adam's eps (benchmarks/init_gradients.py).
    init: str = option("pytorch", ("normal", "pytorch"))
    dropout_emb: float = option(0.0, "[0,1)")
    dropout_hidden: float = option(0.0, "[0,1)")
    dropout_out: float = option(0.5, "[0,1)")


def model_default(key: str) -> Any:
    """A component setting that reads one of ModelConfig's keys: that key's default, declared there."""
    return field(default=next(f.default for f in dataclasses.fields(ModelConfig) if f.name == key))


T = TypeVar("T")
S = TypeVar("S", bound=ComponentSection)

# The settings keys that registered components declare beyond their sections' own keys:
# key -> (type, default, the kinds of component that declared it).
_COMPONENT_KEYS: dict[str, tuple[type, Any, set[str]]] = {}
# (kind, registered name) -> its settings dataclass; the name EVERY: every component of the kind
_DECLARED: dict[tuple[str, str], type] = {}
EVERY = "*"


def own_keys(cls: type = ModelConfig) -> dict[str, Any]:
    types = field_types(cls)
    types.pop("components")
    return types


def component_keys(cls: type) -> dict[str, Any]:
    """The declared settings keys a section takes (of the kinds of component it names), with their types."""
    return {key: typ for key, (typ, _, kinds) in _COMPONENT_KEYS.items() if kinds & cls.NAMES.keys()}


def declare_model_settings(settings: type, kind: str = "", name: str = "") -> None:
    """Take the fields of a component's settings dataclass as keys of the model section of
    the configs that name components of its `kind`; a field named as one of ModelConfig's
    keys reads that key (and must have its type).  `name`: the component registered with it
    (EVERY: each of its kind)."""
    own = own_keys()
    for key, typ in field_types(settings).items():
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


# -- the settings of the shipped components -------------------------------------------------

@dataclass(frozen=True)
class StackedSettings(ComponentSettings):
    encoder_layers: int = option(2, ">=1", "bidirectional layers")


@dataclass(frozen=True)
class ReadoutSettings(ComponentSettings):
    out_dim: int = option(0, ">=0", "the readout t_t's size; 0 = emb_dim (as in dl4mt)")
    emb_dim: int = model_default("emb_dim")
    tie_embeddings: bool = model_default("tie_embeddings")  # W_o is the target embedding matrix, emb_dim wide

    def check(self, config: Any) -> None:
        if self.tie_embeddings and (self.out_dim or self.emb_dim) != self.emb_dim:
            raise ConfigError("model.tie_embeddings needs model.out_dim equal to model.emb_dim")


@dataclass(frozen=True)
class DocumentSettings(ComponentSettings):
    """The hierarchical document context's keys (ctxnmt.models.document), each way of giving D to
    the model combinable with the others (`doc_aux`, the decoder's input, names the DOC_INPUTS entry)."""

    doc_aux: str = model_default("doc_aux")  # read here to say whether the model reads a document
    doc_init_enc: bool = option(False, help="D (projected if sizes differ) initialises every encoder GRU")
    doc_init_dec: bool = option(False, help="s_0 = tanh(W_init mean(h) + W_D D)")
    doc_sents: int = option(3, ">=0", "K previous sentences")
    doc_dim: int = option(0, ">=0", "sentence- and document-RNN size; 0 = hidden_dim")
    doc_embeddings: str = option("shared", ("shared", "separate"),
                                 "history sentences use the source embeddings, or separate ones")
    # gated-aux: a bias b_z in the gate (ours, and what the earlier runs had); eq. 5 has
    # none, and the paper's configs (configs/doc-*gated-aux*.yaml) set false
    doc_gate_bias: bool = True
    # D of a sentence without previous sentences (a document's first): zero (ours; every integration
    # but the released gate is then the sentence model) | null-sentence (the released code's data
    # format: a one-word pseudo-sentence NULL, read as the unknown word); the paper is silent, and
    # its configs follow the released code
    doc_start: str = option("zero", ("zero", "null-sentence"))
    # s-hier-to-2 (Bawden et al. 2018): a second summary, of the previous target sentences (the
    # references in training, the model's own translations in translation), with RNNs of its own
    # over the target embeddings; D is the two summaries side by side.  Ours on this model.
    doc_target: bool = False
    hidden_dim: int = model_default("hidden_dim")  # the size of doc_dim 0

    @property
    def reads_document(self) -> bool:
        return self.doc_init_enc or self.doc_init_dec or self.doc_aux != "none"

    @property
    def sentences(self) -> int:
        """K, the previous sentences the model reads; 0 for a sentence-level model."""
        return self.doc_sents if self.reads_document else 0

    @property
    def dim(self) -> int:
        return self.doc_dim or self.hidden_dim

    @property
    def summary_dim(self) -> int:
        """The width of D: the source summary's, beside the target summary's with doc_target."""
        return self.dim * (2 if self.doc_target else 1)

    def check(self, config: Any) -> None:
        if self.doc_target and not self.reads_document:
            raise ConfigError("model.doc_target needs a hierarchical document model (model.doc_aux or doc_init_*)",
                              key="model.doc_target")
        if self.reads_document and self.doc_sents < 1:
            raise ConfigError(f"model.doc_sents must be at least 1 for a document-context model, got {self.doc_sents}")
        t = config.training
        sentence_level = not self.reads_document and config.model.context == "none"
        if sentence_level and t.context_size != "fixed":
            raise ConfigError("training.context_size=random needs a document-context model (model.context)")
        if sentence_level and t.document_context != "own":
            raise ConfigError("training.document_context=other-document needs a document-context model "
                              "(model.context)")
        if sentence_level and t.coword_dropout:
            raise ConfigError("training.coword_dropout needs a document-context model (model.context)")
        if self.reads_document and t.cuda_graphs:
            raise ConfigError(CUDA_GRAPHS_NEED.format(device=t.device, precision=t.precision))


# Target contexts whose search state is a fixed set of per-row tensors (a running sum, not a
# growing memory), so that rows whose prefix is shorter can wait with their state held.
STEADY_TARGET_CONTEXTS = ("previous", "mean", "mean-with-start", "self-attentive")


@dataclass(frozen=True)
class ConcatenationSettings(ComponentSettings):
    concat_sents: int = option(1, ">=1", "K previous sentences joined before the current one "
                                         "(Tiedemann & Scherrer: 1)")
    # 2-to-2: the previous target sentences and a break as a forced decoder prefix (the reference in
    # training, the model's own translations at translation)
    concat_target: bool = False
    # current: the loss on the current sentence's words only (contextual-mt's default); all: on the
    # prefix too, where the end of each earlier sentence is learned as </s>
    concat_loss: str = option("current", ("current", "all"))

    def check(self, config: Any) -> None:
        m, t = config.model, config.training
        if m.settings(DocumentSettings).reads_document:
            raise ConfigError("model.context: concat reads no hierarchical summary; set model.doc_aux: none and "
                              "model.doc_init_enc/doc_init_dec: false", key="model.context")
        if self.concat_target and (m.decoder != "cgru" or m.target_context not in STEADY_TARGET_CONTEXTS):
            raise ConfigError("model.concat_target needs a decoder state that keeps its size while the prefix is "
                              f"forced: decoder cgru with target_context {' or '.join(STEADY_TARGET_CONTEXTS)}",
                              key="model.concat_target")
        if self.concat_loss == "all" and not self.concat_target:
            raise ConfigError("model.concat_loss: all needs model.concat_target: true (a target prefix to learn)",
                              key="model.concat_loss")
        if t.cuda_graphs:
            raise ConfigError(CUDA_GRAPHS_NEED.format(device=t.device, precision=t.precision))


declare_model_settings(StackedSettings, "encoder", "stacked-birnn")
declare_model_settings(ReadoutSettings, "output", EVERY)
declare_model_settings(DocumentSettings, "doc_aux", EVERY)
declare_model_settings(DocumentSettings, "context", "hierarchical")
declare_model_settings(ConcatenationSettings, "context", "concat")
