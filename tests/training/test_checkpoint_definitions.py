"""A checkpoint trained when `mean` or `adaptive` computed what are now `mean-with-start`
and `adaptive-gain3` states so when loaded, and a config with the old name is refused."""
from __future__ import annotations

import pytest
import torch

from ctxnmt.errors import CheckpointError
from ctxnmt.models.migrations import directory_definitions, load_model_checkpoint, save_model_checkpoint
from ctxnmt.utils.checkpoint import FORMAT_VERSION, check_compatible


def _old_checkpoint(path, **model_config):
    torch.save({"format_version": FORMAT_VERSION, "model": {}, "src_vocab": "s", "tgt_vocab": "t",
                "model_config": model_config}, path)


def test_an_old_mean_checkpoint_is_refused_under_the_new_meaning(tmp_path):
    _old_checkpoint(tmp_path / "old.pt", target_context="mean", output="deep")
    payload = load_model_checkpoint(tmp_path / "old.pt")
    assert payload["model_config"]["target_context"] == "mean-with-start"
    with pytest.raises(CheckpointError, match="model.target_context is 'mean-with-start' in the checkpoint but 'mean'"):
        check_compatible(payload, tmp_path / "old.pt", {"target_context": "mean", "output": "deep"}, "s", "t")
    check_compatible(payload, tmp_path / "old.pt", {"target_context": "mean-with-start", "output": "deep"}, "s", "t")


def test_an_old_adaptive_output_checkpoint_states_its_gain(tmp_path):
    _old_checkpoint(tmp_path / "old.pt", target_context="previous", output="adaptive")
    assert load_model_checkpoint(tmp_path / "old.pt")["model_config"]["output"] == "adaptive-gain3"


def test_a_new_checkpoint_keeps_its_names(tmp_path):
    save_model_checkpoint(tmp_path / "new.pt", {"model": {}, "model_config": {"target_context": "mean", "output": "adaptive"}})
    saved = load_model_checkpoint(tmp_path / "new.pt")["model_config"]
    assert (saved["target_context"], saved["output"]) == ("mean", "adaptive")


@pytest.mark.parametrize("definitions", [1, 2, 3])
def test_an_old_memory_rnn_checkpoint_is_refused(tmp_path, definitions):
    """Definitions 2 made the score read s̃_{t-1} (eq. 17); 4 took s_0 out of the memory (eq. 15)."""
    _checkpoint_of(tmp_path / "old.pt", definitions, decoder="memory-rnn", target_context="previous")
    with pytest.raises(CheckpointError, match="memory-RNN before it followed eqs. 15 and 17.*retrain it"):
        load_model_checkpoint(tmp_path / "old.pt")
    _checkpoint_of(tmp_path / "new.pt", 4, decoder="memory-rnn", target_context="previous")
    assert load_model_checkpoint(tmp_path / "new.pt")["model_config"]["decoder"] == "memory-rnn"


def _checkpoint_of(path, definitions, **model_config):
    torch.save({"format_version": FORMAT_VERSION, "definitions": definitions, "model": {}, "model_config": model_config},
               path)


def test_each_rename_applies_only_to_checkpoints_older_than_its_change(tmp_path):
    """Definitions 2 made the translation decoder's `mean` eq. 9; definitions 3 the LM's `mean`
    summary eq. 11.  A definitions-2 LM still computed the start-inclusive mean; a
    definitions-2 translation model already computed eq. 9."""
    _checkpoint_of(tmp_path / "lm.pt", 2, summary="mean")
    assert load_model_checkpoint(tmp_path / "lm.pt")["model_config"]["summary"] == "mean-with-start"
    _checkpoint_of(tmp_path / "nmt.pt", 2, target_context="mean", output="adaptive")
    assert load_model_checkpoint(tmp_path / "nmt.pt")["model_config"] == {"target_context": "mean", "output": "adaptive"}
    _checkpoint_of(tmp_path / "lm3.pt", 3, summary="mean")
    assert load_model_checkpoint(tmp_path / "lm3.pt")["model_config"]["summary"] == "mean"


@pytest.mark.parametrize("definitions, states", [(1, "self-attentive-with-start"), (5, "self-attentive-with-start"),
                                                 (6, "self-attentive")])
def test_an_lm_trained_before_eqs_12_13_states_its_start_inclusive_summary(tmp_path, definitions, states):
    """Definitions 6 left the start symbol out of the LM's self-attentive summary; the translation
    decoder's `self-attentive` (the released code's start slot) did not change."""
    _checkpoint_of(tmp_path / "lm.pt", definitions, summary="self-attentive")
    assert load_model_checkpoint(tmp_path / "lm.pt")["model_config"]["summary"] == states
    _checkpoint_of(tmp_path / "nmt.pt", definitions, target_context="self-attentive")
    assert load_model_checkpoint(tmp_path / "nmt.pt")["model_config"]["target_context"] == "self-attentive"


def test_an_old_gated_aux_checkpoint_states_its_gate_bias(tmp_path):
    """Before definitions 5 the gated-aux gate had a bias b_z and no key said so: an old
    checkpoint states it, so the paper's bias-free config (eq. 5) refuses it by name."""
    _checkpoint_of(tmp_path / "old.pt", 4, doc_aux="gated-aux")
    payload = load_model_checkpoint(tmp_path / "old.pt")
    assert payload["model_config"]["doc_gate_bias"] is True
    with pytest.raises(CheckpointError, match="model.doc_gate_bias is True in the checkpoint but False in the config"):
        check_compatible(payload, tmp_path / "old.pt", {"doc_aux": "gated-aux", "doc_gate_bias": False}, None, None)
    _checkpoint_of(tmp_path / "aux.pt", 4, doc_aux="aux")
    assert "doc_gate_bias" not in load_model_checkpoint(tmp_path / "aux.pt")["model_config"]
    _checkpoint_of(tmp_path / "new.pt", 5, doc_aux="gated-aux", doc_gate_bias=False)
    assert load_model_checkpoint(tmp_path / "new.pt")["model_config"]["doc_gate_bias"] is False


def test_an_old_document_checkpoint_states_its_zero_start(tmp_path):
    """Before definitions 5 a document's first sentence had D = 0 and no key said so."""
    _checkpoint_of(tmp_path / "old.pt", 4, doc_init_dec=True, doc_aux="none")
    assert load_model_checkpoint(tmp_path / "old.pt")["model_config"]["doc_start"] == "zero"
    _checkpoint_of(tmp_path / "sentence.pt", 4, doc_init_enc=False, doc_init_dec=False, doc_aux="none")
    assert "doc_start" not in load_model_checkpoint(tmp_path / "sentence.pt")["model_config"]


def _run_directory(path, definitions, model, checkpoint_definitions=None):
    """A finished run's directory: config.yaml with `model`, done.json stating `definitions`
    (None: not stated), and best.pt written under `checkpoint_definitions` (None: no checkpoint)."""
    import json

    import yaml

    path.mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump({"model": dict(model), "seed": 1}))
    (path / "done.json").write_text(json.dumps({"update": 10} if definitions is None
                                               else {"update": 10, "definitions": definitions}))
    if checkpoint_definitions is not None:
        (path / "checkpoints").mkdir()
        _checkpoint_of(path / "checkpoints/best.pt", checkpoint_definitions, **model)
    return path / "config.yaml"


def test_a_run_directory_states_its_model_in_todays_names(tmp_path):
    """What a run directory trained under older definitions computed, in today's names: its
    done.json says which definitions, else its checkpoint; neither (a committed copy): as saved."""
    from ctxnmt.errors import ConfigError
    from ctxnmt.experiments.runs import saved_as_trained

    saved = _run_directory(tmp_path / "a", 1, {"target_context": "mean", "output": "adaptive"})
    assert saved_as_trained(saved, "done.json")["model"] == {"target_context": "mean-with-start",
                                                             "output": "adaptive-gain3"}
    saved = _run_directory(tmp_path / "b", None, {"target_context": "mean"}, checkpoint_definitions=1)
    assert saved_as_trained(saved, "done.json")["model"]["target_context"] == "mean-with-start"
    saved = _run_directory(tmp_path / "c", None, {"target_context": "mean"})
    assert saved_as_trained(saved, "done.json")["model"]["target_context"] == "mean"
    saved = _run_directory(tmp_path / "d", 4, {"doc_aux": "gated-aux"})
    assert saved_as_trained(saved, "done.json")["model"]["doc_gate_bias"] is True  # a key added in 5
    saved = _run_directory(tmp_path / "e", 3, {"decoder": "memory-rnn"})
    with pytest.raises(ConfigError, match="memory-RNN before it followed eqs. 15 and 17.*retrain it"):
        saved_as_trained(saved, "done.json")


def test_a_run_directory_is_rewritten_in_today_s_names_only_when_asked(tmp_path):
    """`experiment --dry-run` only looks: reading a finished run's state leaves its files as
    they are; a report (rewrite) states them in today's names."""
    from ctxnmt.experiments.runs import saved_as_trained

    saved = _run_directory(tmp_path / "a", 1, {"target_context": "mean"})
    files = {p.name: p.read_bytes() for p in saved.parent.iterdir() if p.is_file()}
    assert saved_as_trained(saved, "done.json", rewrite=False)["model"]["target_context"] == "mean-with-start"
    assert {p.name: p.read_bytes() for p in saved.parent.iterdir() if p.is_file()} == files
    saved_as_trained(saved, "done.json")
    assert b"mean-with-start" in saved.read_bytes()


def test_a_run_directorys_definitions_read_past_a_bad_record_or_checkpoint(tmp_path):
    """A record whose definitions are not a number is passed over for the checkpoints, and a
    corrupt best.pt for last.pt; nothing readable: None."""
    import json

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "done.json").write_text(json.dumps({"definitions": "six"}))
    (tmp_path / "checkpoints/best.pt").write_bytes(b"not a checkpoint")
    assert directory_definitions(tmp_path, "done.json") is None
    _checkpoint_of(tmp_path / "checkpoints/last.pt", 3, summary="mean")
    assert directory_definitions(tmp_path, "done.json") == 3
    (tmp_path / "done.json").write_text(json.dumps({"definitions": 4}))
    assert directory_definitions(tmp_path, "done.json") == 4
