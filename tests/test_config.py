"""Config loading: overrides, type checks, and errors that name the key."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from ctxnmt.config import DecodingConfig, ModelConfig, load_config, override
from ctxnmt.errors import ConfigError

# lm-*.yaml are language-model configs, with their own schema (tests/lm)
CONFIGS = sorted(p for p in (Path(__file__).parent.parent / "configs").glob("*.yaml") if not p.name.startswith("lm-"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads(path):
    config = load_config(path)
    assert config.model_dir


def test_overrides_are_typed(tmp_path):
    cfg = load_config(None, ["training.lr=0.002", "model.tie_embeddings=true", "model.hidden_dim=64",
                             "training.max_minutes=1.5"])
    assert cfg.training.lr == 0.002 and cfg.model.tie_embeddings is True
    assert cfg.model.hidden_dim == 64 and cfg.training.max_minutes == 1.5


def test_unknown_key_names_key_and_closest_match(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  hiden_dim: 10\n")
    with pytest.raises(ConfigError, match=r"unknown config key 'model.hiden_dim'; did you mean 'model.hidden_dim'"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"'traning'.*did you mean 'training'"):
        load_config(None, ["traning.lr=1"])


def test_wrong_type_names_key():
    with pytest.raises(ConfigError, match=r"config key 'model.hidden_dim' must be of type int"):
        load_config(None, ["model.hidden_dim=big"])


def test_cross_field_checks():
    with pytest.raises(ConfigError, match="tie_embeddings"):
        load_config(None, ["model.tie_embeddings=true", "model.out_dim=7"])
    with pytest.raises(ConfigError, match="optimizer"):
        load_config(None, ["training.optimizer=sgd"])
    with pytest.raises(ConfigError, match=r"^training.document_context must be one of own, other-document, not 'r"):
        load_config(None, ["model.doc_aux=aux", "training.document_context=random"])
    with pytest.raises(ConfigError, match=r"^training.document_context=other-document needs a document-context model"):
        load_config(None, ["training.document_context=other-document"])


BAD_DECODING = [
    ("length_penalty=-1", "decoding.length_penalty must be between 0 and 10, not -1.0"),
    ("length_penalty=.nan", "decoding.length_penalty must be between 0 and 10, not nan"),
    ("length_penalty_kind=gnmt", "decoding.length_penalty_kind must be one of power, wu, none, not 'gnmt'"),
    ("coverage_penalty=10.5", "decoding.coverage_penalty must be between 0 and 10, not 10.5"),
    ("max_len_a=-0.1", "decoding.max_len_a must be between 0 and 10, not -0.1"),
    ("max_len_b=-1", "decoding.max_len_b must be between 0 and 1000, not -1"),
    ("block_ngram_repeat=11", "decoding.block_ngram_repeat must be between 0 and 10, not 11"),
    ("max_len_b=1.5", "config key 'decoding.max_len_b' must be of type int"),
    ("max_len_rule=auto", "decoding.max_len_rule must be one of fixed, data, not 'auto'"),
    ("precision=fp16", "decoding.precision must be one of fp32, bf16, int8, not 'fp16'"),
]


@pytest.mark.parametrize("item, message", BAD_DECODING, ids=[i for i, _ in BAD_DECODING])
def test_length_options_out_of_range_are_one_line_errors_naming_the_key(item, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"decoding.{item}"])
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_zero_a_and_b_together_are_refused_and_either_alone_is_not():
    with pytest.raises(ConfigError, match=r"^decoding.max_len_b must be at least 1 when decoding.max_len_a is 0"):
        load_config(None, ["decoding.max_len_a=0", "decoding.max_len_b=0"])
    assert load_config(None, ["decoding.max_len_a=0"]).decoding.max_len_b == DecodingConfig().max_len_b
    assert load_config(None, ["decoding.max_len_b=0"]).decoding.max_len_a == 2.0


def test_the_old_name_max_len_ratio_still_loads_as_max_len_a(tmp_path):
    """Model directories trained before the rename keep loading, and their runs keep matching."""
    old = tmp_path / "config.yaml"
    old.write_text("decoding: {beam: 5, length_penalty: 1.0, max_len_ratio: 1.5, max_src_len: 200}\n")
    assert load_config(old).decoding.max_len_a == 1.5
    assert load_config(None, ["decoding.max_len_ratio=1.2"]).decoding.max_len_a == 1.2
    with pytest.raises(ConfigError, match=r"'decoding.max_len_ratio' and 'decoding.max_len_a' are the old and"):
        load_config(old, ["decoding.max_len_a=1.2"])


def test_bad_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodel: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:3:1: invalid YAML: while parsing a flow sequence"):
        load_config(bad)  # the line and column of the problem, not only its first words
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: not UTF-8 text \(byte 9\)"):  # was a traceback
        load_config(bad)


@pytest.mark.parametrize("item", ["model.encoder=[birnn", "data.dir=@x", "name=`x"])
def test_a_set_value_that_is_not_yaml_is_one_line_naming_the_key(item):
    key = item.split("=")[0]
    with pytest.raises(ConfigError, match=rf"--set {key}: the value .* is not valid YAML .*quote it"):
        load_config(None, [item])  # was a yaml.ParserError traceback


def test_an_empty_section_in_a_child_keeps_its_base(tmp_path):
    """A section written with every key commented out reads as null: it changes nothing (it
    had replaced the base's whole section with the defaults), and --set can still fill it."""
    (tmp_path / "root.yaml").write_text("model: {hidden_dim: 64}\ntraining: {lr: 0.01}\n")
    (tmp_path / "leaf.yaml").write_text("base: root.yaml\nmodel:\n  # hidden_dim: 8\ntraining:\n")
    cfg = load_config(tmp_path / "leaf.yaml", ["training.seed=7"])
    assert (cfg.model.hidden_dim, cfg.training.lr, cfg.training.seed) == (64, 0.01, 7)
    (tmp_path / "alone.yaml").write_text("training:\n")
    assert load_config(tmp_path / "alone.yaml", ["training.lr=0.5"]).training.lr == 0.5  # was 'not a section'


@pytest.mark.parametrize("item, message", [
    ("training.threads=-1", "training.threads must be 0 or more, got -1"),
    ("training.log_every=0", "training.log_every must be at least 1, got 0"),
    ("training.device=gpu", "training.device must be 'cpu', 'cuda' or 'cuda:N', got 'gpu'"),
])
def test_the_loops_settings_are_checked_before_training(item, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, [item])  # each had passed, then failed in training with a traceback


# Each value below was accepted: a traceback later (zero sizes, a negative learning rate, a
# zero valid_every's modulo), or a run that meant nothing (label smoothing 1.5, a decay to 0).
@pytest.mark.parametrize("item, message", [
    ("model.hidden_dim=0", "model.hidden_dim must be at least 1, got 0"),
    ("model.emb_dim=-3", "model.emb_dim must be at least 1, got -3"),
    ("model.att_dim=0", "model.att_dim must be at least 1, got 0"),
    ("model.dropout_out=1.5", "model.dropout_out must be in [0, 1), got 1.5"),
    ("data.vocab_size=-2", "data.vocab_size must be 0 or more, got -2"),
    ("data.max_len=0", "data.max_len must be at least 1, got 0"),
    ("training.batch_tokens=0", "training.batch_tokens must be at least 1, got 0"),
    ("training.batch_sents=0", "training.batch_sents must be at least 1, got 0"),
    ("training.label_smoothing=1.5", "training.label_smoothing must be in [0, 1), got 1.5"),
    ("training.warmup_updates=-1", "training.warmup_updates must be 0 or more, got -1"),
    ("decoding.beam=0", "decoding.beam must be at least 1, got 0"),
    ("decoding.batch_size=0", "decoding.batch_size must be at least 1, got 0"),
])
def test_a_field_outside_its_range_is_refused_naming_it(item, message):
    with pytest.raises(ConfigError, match="^" + re.escape(message) + "$"):
        load_config(None, [item])


@pytest.mark.parametrize("item, message", [
    ("training.lr=-1", "training.lr must be above 0, got -1.0"),
    ("training.lr=0", "training.lr must be above 0, got 0.0"),
    ("training.clip_norm=-1", "training.clip_norm must be 0 or more, got -1.0"),
    ("training.valid_every=0", "training.valid_every must be at least 1, got 0"),
    ("training.max_updates=-5", "training.max_updates must be 0 or more, got -5"),
    ("training.max_minutes=-1", "training.max_minutes must be 0 or more, got -1.0"),
    ("training.patience=-1", "training.patience must be 0 or more, got -1"),
    ("training.lr_decay=0", "training.lr_decay must be in (0, 1], got 0.0"),
    ("training.lr_decay=1.5", "training.lr_decay must be in (0, 1], got 1.5"),
    ("training.min_lr=-1", "training.min_lr must be 0 or more, got -1.0"),
])
def test_the_training_loops_ranges_hold_for_the_translation_and_the_language_model(item, message):
    from ctxnmt.lm.config import load_lm_config

    for load in (load_config, load_lm_config):
        with pytest.raises(ConfigError, match="^" + re.escape(message) + "$"):
            load(None, [item])


def test_every_shipped_config_is_within_the_ranges():
    from ctxnmt.lm.config import load_lm_config

    root = Path(__file__).resolve().parents[1] / "configs"
    configs = sorted(root.rglob("*.yaml"))
    assert len(configs) > 20
    for path in configs:
        (load_lm_config if path.name.startswith("lm") else load_config)(path)


def test_a_keys_error_names_the_file_and_line_or_the_set_item_that_gave_it(tmp_path):
    """A bad value in the file was reported as '{file} with --set' whenever any --set was given."""
    path = tmp_path / "c.yaml"
    path.write_text("name: x\ndata:\n  corpuss: files\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}:3: unknown config key 'data.corpuss'"):
        load_config(path)
    path.write_text("name: x\nmodel: {emb_dim: 8,\n  hidden_dim: big}\n")
    for overrides in ([], ["training.lr=0.1"]):
        with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}:3: config key 'model.hidden_dim' must be"):
            load_config(path, overrides)
    with pytest.raises(ConfigError, match=r"^--set model.hidden_dim=0: model.hidden_dim must be at least 1, got 0$"):
        load_config(path, ["model.hidden_dim=0"])
    with pytest.raises(ConfigError, match=r"^--set model=\{hidden_dim: -1\}: model.hidden_dim must be at least 1"):
        load_config(path, ["model={hidden_dim: -1}"])  # a section given whole: its keys are the --set's
    with pytest.raises(ConfigError, match=r"^--set traning.lr=1: unknown config key 'traning'"):
        load_config(path, ["model.hidden_dim=3", "traning.lr=1"])


def test_a_key_from_a_base_names_the_base_and_a_check_across_keys_names_each_given_one(tmp_path):
    (tmp_path / "root.yaml").write_text("name: r\nmodel:\n  tie_embeddings: true\n")
    (tmp_path / "leaf.yaml").write_text("base: root.yaml\ntraining: {lr: -1}\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(tmp_path / 'leaf.yaml'))}:2: training.lr must be above 0"):
        load_config(tmp_path / "leaf.yaml", ["training.seed=3"])
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "leaf.yaml", ["model.out_dim=7", "training.lr=0.1"])
    assert str(err.value) == (f"{tmp_path / 'root.yaml'}:3 and --set model.out_dim=7: model.tie_embeddings needs "
                              "model.out_dim equal to model.emb_dim")
    (tmp_path / "leaf.yaml").write_text("base: root.yaml\n")
    with pytest.raises(ConfigError, match=r"^--set training.cooldown_updates=5: training.cooldown_updates needs"):
        load_config(tmp_path / "leaf.yaml", ["model.tie_embeddings=false", "training.cooldown_updates=5"])


def test_a_suggested_key_carries_its_section_so_that_it_can_be_pasted():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["training.valid_evry=3"])
    suggested = re.search(r"did you mean '([^']+)'\?$", str(err.value)).group(1)
    assert suggested == "training.valid_every"
    assert load_config(None, [f"{suggested}=3"]).training.valid_every == 3


@pytest.mark.parametrize("value", ["runs/cmp #2", "a: b", "plain/dir", "@x", "", "yes"])
def test_override_gives_a_key_exactly_the_string(value):
    assert load_config(None, [override("model_dir", value)]).model_dir == value
    assert override("training.seed", 3) == "training.seed=3"
    assert override("model_dir", "runs/exp/seed1") == "model_dir=runs/exp/seed1"  # plain where YAML reads it so


def test_unknown_component_name_lists_known_ones():
    from ctxnmt.models.nmt import build_model

    cfg = load_config(None, ["model.encoder=birn"])
    with pytest.raises(ConfigError, match=r"unknown encoder 'birn' \(did you mean 'birnn'\?\)"):
        build_model(cfg.model, 10, 10)


# -- configs by difference (base:) -----------------------------------------------------------

ALL_CONFIGS = sorted([*(Path(__file__).parent.parent / "configs").glob("*.yaml"),
                      *(Path(__file__).parent.parent / "configs" / "variants").glob("*.yaml")])
RESOLVED = Path(__file__).parent / "fixtures" / "resolved-configs"


@pytest.mark.parametrize("path", ALL_CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_resolves_to_its_recorded_effective_config(path):
    """The fixtures were written from the configs as they were before they stated only their
    differences (tests/fixtures/write_resolved_configs.py); a new config needs its own."""
    import json

    from tests.fixtures.write_resolved_configs import resolved

    fixture = RESOLVED / f"{path.stem}.json"
    assert fixture.is_file(), f"no fixture for {path.name}: run tests/fixtures/write_resolved_configs.py {path}"
    expected, now = json.loads(fixture.read_text()), resolved(path)
    if "encoder_layers" in expected.get("model", {}) and expected["model"]["encoder"] != "stacked-birnn":
        # a setting of a component the config does not use is no longer part of it
        assert expected["model"].pop("encoder_layers") == 2
    if path.name.startswith("lm-"):  # a key the LM config took since, at its default
        expected["training"]["checkpoint_every"] = 0
    else:  # keys the translation config took since (issue 62), at their defaults
        expected["model"].setdefault("context", "none")
        expected["training"].setdefault("coword_dropout", 0.0)
        if "doc_start" in expected["model"]:
            expected["model"].setdefault("doc_target", False)
        for key, default in (("bpe_dropout", 0.0), ("sentencepiece_alpha", 0.0), ("subword_samples", 8)):
            expected["data"].setdefault(key, default)  # issue 65, subword regularisation: off
        expected["decoding"].setdefault("workers", 1)  # issue 64: one search
        expected["decoding"].setdefault("int8_from", 1_000_000)  # issue 64: small products stay float32
    expected["training"].setdefault("keep_checkpoints", 0)  # issue 65, both kinds of config
    expected.setdefault("task", "language-model" if path.name.startswith("lm-") else "translation")  # issue 63
    assert now == expected


def test_a_config_states_only_what_it_changes_from_its_base(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "root.yaml").write_text("name: root\nmodel: {hidden_dim: 64, att_dim: 32}\ntraining: {lr: 0.01}\n")
    (tmp_path / "sub" / "mid.yaml").write_text("base: ../root.yaml\nmodel: {hidden_dim: 48}\n")
    (tmp_path / "leaf.yaml").write_text("base: sub/mid.yaml\nname: leaf\ntraining: {seed: 7}\n")
    cfg = load_config(tmp_path / "leaf.yaml", ["model.att_dim=16"])
    assert (cfg.name, cfg.model.hidden_dim, cfg.model.att_dim, cfg.training.lr, cfg.training.seed) == \
        ("leaf", 48, 16, 0.01, 7)
    assert cfg.model.emb_dim == ModelConfig().emb_dim  # set nowhere: the default


def test_bad_bases_are_one_line_errors_naming_the_file(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("base: b.yaml\n")
    b.write_text("base: a.yaml\n")
    with pytest.raises(ConfigError, match=r"a.yaml: its base chain loops back to itself"):
        load_config(a)
    a.write_text("base: missing.yaml\n")
    with pytest.raises(ConfigError, match=r"config file not found: .*missing.yaml \(the base of .*a.yaml\)"):
        load_config(a)
    a.write_text("base: [b.yaml]\n")
    with pytest.raises(ConfigError, match=r"a.yaml: 'base' must be the path of another config file"):
        load_config(a)
    b.write_text("model: {hiden_dim: 3}\n")
    a.write_text("base: b.yaml\n")
    with pytest.raises(ConfigError, match=r"unknown config key 'model.hiden_dim'"):
        load_config(a)


# -- settings that components declare (declare_model_settings) ------------------------------------

@dataclasses.dataclass(frozen=True)
class _WindowSettings:
    cfgtest_window: int = 3
    hidden_dim: int = 0  # a ModelConfig key: read from there


def test_a_components_declared_setting_is_a_flat_model_key(tmp_path):
    from ctxnmt.config import save_config
    from ctxnmt.models.settings import declare_model_settings

    declare_model_settings(_WindowSettings, "target_context", "cfgtest-window")
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  target_context: cfgtest-window\n  cfgtest_window: 5\n  hidden_dim: 7\n")
    config = load_config(path)
    assert config.model.components == {"cfgtest_window": 5}
    assert config.model.settings(_WindowSettings) == _WindowSettings(5, 7)
    assert ModelConfig().settings(_WindowSettings) == _WindowSettings(3, 512)  # defaults where the file sets none
    assert config.to_dict()["model"]["cfgtest_window"] == 5 and "components" not in config.to_dict()["model"]
    # the setting of a component the config does not name is no part of it
    assert "cfgtest_window" not in load_config(path, ["model.target_context=mean"]).to_dict()["model"]
    save_config(config, tmp_path / "saved.yaml")
    assert "cfgtest_window: 5" in (tmp_path / "saved.yaml").read_text()
    assert load_config(tmp_path / "saved.yaml") == config
    with pytest.raises(ConfigError, match="cfgtest_window' must be of type int"):
        load_config(path, ["model.cfgtest_window=wide"])
    with pytest.raises(ConfigError, match="unknown config key 'model.components'"):
        load_config(path, ["model.components={}"])


def test_a_declared_setting_keeps_one_type_and_needs_a_default():
    from ctxnmt.models.settings import declare_model_settings

    @dataclasses.dataclass
    class Clash:
        cfgtest_window: float = 1.0

    @dataclasses.dataclass
    class NoDefault:
        cfgtest_size: int

    @dataclasses.dataclass
    class WrongOwnType:
        hidden_dim: str = "big"

    declare_model_settings(_WindowSettings)
    for settings in (Clash, NoDefault, WrongOwnType):
        with pytest.raises(ValueError, match=settings.__name__):
            declare_model_settings(settings)


def test_a_config_names_its_task_and_a_reader_of_one_task_refuses_another_tasks(tmp_path):
    """The task is what the `task:` key says (translation unless it says otherwise), never guessed
    from the other keys; a model directory saves it."""
    from ctxnmt.config import Config, save_config
    from ctxnmt.lm.config import LMConfig, load_lm_config

    assert (load_config(None).task, LMConfig().task) == ("translation", "language-model")
    lm = Path(__file__).parent.parent / "configs" / "lm-mean.yaml"
    assert load_lm_config(lm).task == "language-model"
    with pytest.raises(ConfigError, match=r"lm-mean\.yaml:\d+: config key 'task' is 'language-model', "
                                          "but a translation config is read here"):
        load_config(lm)
    (tmp_path / "nmt.yaml").write_text("task: translation\n")
    with pytest.raises(ConfigError, match="config key 'task' is 'translation', but a language-model config"):
        load_lm_config(tmp_path / "nmt.yaml")
    save_config(Config(), tmp_path / "config.yaml")
    assert (tmp_path / "config.yaml").read_text().startswith("task: translation\n")


def test_an_old_model_directory_without_a_task_key_is_read_by_the_one_migration_rule():
    from ctxnmt.models.migrations import saved_task

    assert saved_task({"task": "language-model", "decoding": {}}) == "language-model"  # the key decides
    assert saved_task({"training": {"bptt": 35}, "model": {}}) == "language-model"  # only an LM's has bptt
    assert saved_task({"training": {"lr": 0.001}, "decoding": {"beam": 5}}) == "translation"
