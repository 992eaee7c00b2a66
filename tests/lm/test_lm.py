"""The residual LM: its summaries against a literal per-step reference, truncated BPTT
with carried state against the whole stream at once, overfitting a tiny text through
the command line, and one-line errors for bad input."""
from __future__ import annotations

import itertools
import json
import math
import shutil
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch

from ctxnmt.cli import main
from ctxnmt.data.vocab import EOS
from ctxnmt.errors import DataError
from ctxnmt.lm.compare import perplexity_test
from ctxnmt.lm.config import SUMMARIES, LMModelConfig, load_lm_config
from ctxnmt.lm.model import ResidualLM, detach
from ctxnmt.utils.revision import source_revision

# A stream with sentence ends (</s>) at irregular places, longer than one 16-position block.
STREAM = [EOS, 5, 6, 7, EOS, 8, 9, 5, 5, 10, 11, 6, EOS, 7, EOS, 12, 13, 9, 8, 7, 6, 5, 4, 11, 10, 12, 9, EOS,
          6, 6, 7, 8, 13, 12, 4, 5, EOS, 9, 10, 11, EOS, 4]


def tiny_model(summary: str) -> ResidualLM:
    torch.manual_seed(0)
    return ResidualLM(LMModelConfig(summary=summary, emb_dim=8, hidden_dim=10, dropout=0.0), 14).eval()


def summary_with_start(model: ResidualLM) -> bool:
    return model.cfg.summary == "self-attentive-with-start"


def literal_logprobs(model: ResidualLM, stream: list[int]) -> torch.Tensor:
    """log p(w_{t+1} | w_≤t), one token at a time, from the equations (docs/lm.md)."""
    lstm, E = model.lstm, model.embedding.weight
    H = model.cfg.hidden_dim
    h, c = torch.zeros(H), torch.zeros(H)
    sentence: list[torch.Tensor] = []  # E w_r … E w_t: the current sentence from its </s>
    out = []
    for w, target in zip(stream[:-1], stream[1:]):
        x = E[w]
        i, f, g, o = (lstm.weight_ih_l0 @ x + lstm.bias_ih_l0 + lstm.weight_hh_l0 @ h + lstm.bias_hh_l0).chunk(4)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        sentence = [x] if w == EOS else sentence + [x]
        if model.cfg.summary == "none":  # the plain LSTM: no W_d d_t term
            d = None
        elif model.cfg.summary == "previous":
            d = x
        elif model.cfg.summary == "mean":  # eq. 11: the sentence's words, its start symbol left out
            d = torch.stack(sentence[1:]).mean(0) if len(sentence) > 1 else sentence[0]
        elif model.cfg.summary == "mean-with-start":  # ours: the start symbol counted
            d = torch.stack(sentence).mean(0)
        else:  # content, eqs. 12–14 (AAAI): α_ti = softmax_i(vᵀ tanh(W_y E w_i + b)) over the words
            # w_{r+1} … w_t (the start symbol left out, as eq. 11's mean; alone, d = its embedding);
            # ours, `-with-start`: over w_r … w_t, the start symbol's embedding included
            words = sentence if summary_with_start(model) or len(sentence) == 1 else sentence[1:]
            sa = model.summary
            e = torch.stack([(sa.v.weight[0] * torch.tanh(sa.W_y.weight @ y + sa.W_y.bias)).sum() for y in words])
            d = (torch.softmax(e, 0).unsqueeze(1) * torch.stack(words)).sum(0)
        residual = 0.0 if d is None else model.from_summary.weight @ d
        g_t = torch.tanh(model.from_state.weight @ h + model.from_state.bias + residual)
        out.append(torch.log_softmax(E @ g_t + model.out_bias, 0)[target])
    return torch.stack(out)


@pytest.mark.parametrize("summary", SUMMARIES)
def test_logprobs_match_literal_equations(summary):
    model = tiny_model(summary)
    ids = torch.tensor([STREAM])
    with torch.no_grad():
        fast, _ = model.token_logprobs(ids[:, :-1], ids[:, 1:], model.initial_state(1))
        torch.testing.assert_close(fast[0], literal_logprobs(model, STREAM), atol=1e-5, rtol=0)


@pytest.mark.parametrize("bptt", [3, 7, 20])
@pytest.mark.parametrize("summary", SUMMARIES)
def test_carried_state_equals_whole_stream(summary, bptt):
    """Truncated BPTT changes the gradient path only: values equal the whole stream's."""
    model = tiny_model(summary)
    torch.manual_seed(1)
    data = torch.stack([torch.tensor(STREAM), torch.tensor(STREAM[::-1])])  # two parallel streams
    with torch.no_grad():
        whole, _ = model.token_logprobs(data[:, :-1], data[:, 1:], model.initial_state(2))
        state, parts = model.initial_state(2), []
        for start in range(0, data.size(1) - 1, bptt):
            end = min(start + bptt, data.size(1) - 1)
            logp, state = model.token_logprobs(data[:, start:end], data[:, start + 1: end + 1], state)
            state = detach(state)
            parts.append(logp)
    torch.testing.assert_close(torch.cat(parts, 1), whole, atol=1e-5, rtol=0)


def test_gradient_stops_at_segment_boundary():
    model = tiny_model("self-attentive").train()
    ids = torch.tensor([STREAM[:20]])
    _, state = model.loss(ids[:, :9], ids[:, 1:10], model.initial_state(1))
    carried = detach(state)
    tensors = [carried["h"], carried["c"], *carried["summary"].values()]
    assert len(tensors) == 5 and all(v.grad_fn is None for v in tensors)  # h, c and the summary's num, den, max


TEXT = ["the cat sat on the mat .", "the dog sat on the log .", "a bird flew over the house ."]


@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("lmtext")
    for split, repeat in (("train", 30), ("dev", 2), ("test", 2)):
        (root / f"{split}.en").write_text("\n".join(TEXT * repeat) + "\n", encoding="utf-8")
    return root


def write_config(tmp_path: Path, corpus: Path, summary: str) -> Path:
    path = tmp_path / "lm.yaml"
    path.write_text(f"model_dir: {tmp_path / 'model'}\ndata: {{dir: {corpus}}}\n"
                    f"model: {{summary: {summary}, emb_dim: 16, hidden_dim: 24, dropout: 0.0}}\n"
                    "training: {batch_size: 4, bptt: 10, max_updates: 150, valid_every: 50, lr: 0.01, threads: 1}\n")
    return path


def run(args, capsys):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("summary", SUMMARIES)
def test_tiny_lm_overfits_repeated_text_end_to_end(summary, tiny_corpus, tmp_path, capsys):
    cfg = write_config(tmp_path, tiny_corpus, summary)
    code, out, _ = run(["lm", "train", cfg, "--quiet"], capsys)
    assert code == 0 and "150 updates" in out
    results = json.loads((tmp_path / "model" / "results.json").read_text())
    assert results["dev_ppl"] < 1.2 and results["test_ppl"] < 1.2  # a 17-word vocabulary, learnt by heart
    code, out, _ = run(["lm", "score", tmp_path / "model", "-i", tiny_corpus / "dev.en", "--per-line"], capsys)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 7 and lines[-1].startswith("perplexity")
    assert float(lines[-1].split()[1]) == pytest.approx(results["dev_ppl"], abs=0.01)
    assert [int(line.split("\t")[1]) for line in lines[:-1]] == [8] * 6  # 7 words and </s>


def test_bad_input_gives_one_line_errors(tiny_corpus, tmp_path, capsys):
    cfg = write_config(tmp_path, tiny_corpus, "mean")
    for args, message in (
        (["lm", "train", cfg, "--set", "model.sumary=mean"], "did you mean 'model.summary'"),
        (["lm", "train", cfg, "--set", "model.summary=self-attentive-sum"], "reads the decoder's state or context vector"),
        (["lm", "train", cfg, "--set", "model.summary=meen"], "unknown target_context 'meen' (did you mean 'mean'?)"),
        (["lm", "train", cfg, "--set", f"data.dir={tmp_path / 'none'}"], "no such file"),
        (["lm", "score", tmp_path / "nothing", "-i", tiny_corpus / "dev.en"], "not an LM model directory"),
    ):
        code, _, err = run(args, capsys)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_shipped_lm_configs_load():
    configs = Path(__file__).parents[2] / "configs"
    paths = sorted([*configs.glob("lm-*.yaml"), *configs.glob("variants/lm-*.yaml")])
    assert {load_lm_config(p).model.summary for p in paths} == set(SUMMARIES)


def lm_configs(directory: Path, corpus: Path, *summaries: str, updates: int = 10, model: str = "",
               training: str = "") -> list[Path]:
    """One tiny LM config per summary, named lm-{summary}, for the comparison tests."""
    paths = []
    for summary in summaries:
        path = directory / f"lm-{summary}.yaml"
        path.write_text(f"name: lm-{summary}\ndata: {{dir: {corpus}}}\n"
                        f"model: {{summary: {summary}, emb_dim: 8, hidden_dim: 12{model}}}\n"
                        f"training: {{batch_size: 4, bptt: 10, max_updates: {updates}, valid_every: 10, "
                        f"threads: 1{training}}}\n")
        paths.append(path)
    return paths


def test_compare_trains_each_config_and_seed_once_and_reports_mean_and_per_seed_deltas(tiny_corpus, tmp_path,
                                                                                        capsys):
    configs = lm_configs(tmp_path, tiny_corpus, "previous", "mean", updates=20, model=", dropout: 0.0",
                         training=", lr: 0.01")
    out = tmp_path / "cmp"
    code, stdout, _ = run(["lm", "compare", *configs, "--seeds", "1", "2", "--out", out], capsys)
    assert code == 0 and "| lm-previous | " in stdout and "| lm-mean | " in stdout
    report = json.loads((out / "report.json").read_text())
    runs = {(name, seed): json.loads((out / name / f"seed{seed}" / "results.json").read_text())["test_ppl"]
            for name in ("lm-previous", "lm-mean") for seed in (1, 2)}
    base, mean = report["rows"]
    assert base["test_ppl"] == [runs["lm-previous", 1], runs["lm-previous", 2]]
    assert mean["delta"] == pytest.approx([runs["lm-mean", s] - runs["lm-previous", s] for s in (1, 2)])
    assert mean["mean"] == pytest.approx((runs["lm-mean", 1] + runs["lm-mean", 2]) / 2)
    assert runs["lm-previous", 1] != runs["lm-previous", 2]  # the seed reaches the model
    for name, seed in runs:  # the per-line scores the tests read are the run's test perplexity
        lines = (out / name / f"seed{seed}" / "test.logprobs").read_text().splitlines()
        logprob, tokens = (sum(float(line.split("\t")[i]) for line in lines) for i in (0, 1))
        assert len(lines) == 6 and math.exp(-logprob / tokens) == pytest.approx(runs[name, seed], rel=1e-3)
    assert mean["paired_seeds"] == [1, 2] and list(mean["p_per_seed"]) == ["1", "2"]
    assert all(0 < p <= 1 for p in [*mean["p_per_seed"].values(), mean["p_over_seeds"]])
    assert "| p over seeds (stratified AR) | p over seeds (t-test on Δ) |" in stdout
    assert "Not finished yet" not in stdout
    delta = [runs["lm-mean", s] - runs["lm-previous", s] for s in (1, 2)]  # two seeds: t with 1 degree of freedom
    if delta[0] != delta[1]:
        t = statistics.fmean(delta) / (statistics.stdev(delta) / math.sqrt(2))
        assert mean["t_over_seeds"]["p_value"] == pytest.approx(1 - 2 / math.pi * math.atan(abs(t)), rel=1e-3)
        # the smallest mean Δ that test calls significant: t(0.975, 1) = tan(0.475 π) = 12.706…, times sd / √2
        detectable = math.tan(0.475 * math.pi) * statistics.stdev(delta) / math.sqrt(2)
        assert mean["t_over_seeds"]["detectable"] == pytest.approx(detectable, rel=1e-6)
        assert f"| {detectable:.2f} | " in stdout
    results = [json.loads((out / "lm-mean" / f"seed{seed}" / "results.json").read_text()) for seed in (1, 2)]
    assert mean["dev_ppl"] == [r["dev_ppl"] for r in results] and mean["updates"] == [20, 20]
    dev = statistics.fmean(mean["dev_ppl"]), statistics.stdev(mean["dev_ppl"])
    minutes = statistics.fmean(r["minutes"] for r in results)
    source = source_revision()  # the commit each run was trained from
    assert f"| yes | {dev[0]:.2f} ± {dev[1]:.2f} | 20 | {minutes:.1f} | none | {source[:12]} |" in stdout or \
        f"| no | {dev[0]:.2f} ± {dev[1]:.2f} | 20 | {minutes:.1f} | none | {source[:12]} |" in stdout
    assert mean["interruptions"] == ["none", "none"]  # each run started once
    assert mean["source"] == [source, source] and all(r["source"] == source for r in results)
    assert f"ctxnmt lm compare {configs[0]} {configs[1]} --seeds 1 2 --out {out}\n" in stdout
    # a second call trains nothing; a run whose training finished (done.json) but not its
    # scoring is only scored; an unfinished one goes on from its last checkpoint, and one
    # without a checkpoint is trained again from the start
    for name, seed, files in (("lm-previous", 2, ["results.json"]), ("lm-mean", 2, ["results.json", "done.json"]),
                              ("lm-mean", 1, ["results.json", "done.json", "checkpoints/last.pt"])):
        for file in files:
            (out / name / f"seed{seed}" / file).unlink()
    before = {seed: (out / "lm-previous" / f"seed{seed}" / "checkpoints" / "last.pt").stat().st_mtime_ns
              for seed in (1, 2)}
    code, _, err = run(["lm", "compare", *configs, "--seeds", "1", "2", "--out", out], capsys)
    assert code == 0 and "lm-previous seed 1: already trained" in err
    assert "lm-previous seed 2: scoring its finished training" in err
    assert "lm-mean seed 2: resuming from its last checkpoint" in err
    assert "seed1: unfinished and without a checkpoint, training again from the start" in err
    assert json.loads((out / "lm-mean" / "seed1" / "results.json").read_text())["test_ppl"] == pytest.approx(
        runs["lm-mean", 1])
    assert {seed: (out / "lm-previous" / f"seed{seed}" / "checkpoints" / "last.pt").stat().st_mtime_ns
            for seed in (1, 2)} == before  # neither trained again
    assert json.loads((out / "lm-previous" / "seed2" / "results.json").read_text())["test_ppl"] == pytest.approx(
        runs["lm-previous", 2])
    assert json.loads((out / "lm-mean" / "seed2" / "results.json").read_text())["test_ppl"] == pytest.approx(
        runs["lm-mean", 2])  # the same seed retrained gives the same model
    code, _, err = run(["lm", "compare", *configs, "--seeds", "1", "2", "--out", out, "--set",
                        "training.lr=0.02"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{out}/lm-previous/seed1 was trained with a different config: training.lr is 0.01 there but 0.02 in " \
           "this comparison" in err


def lm_log(directory: Path) -> list[str]:
    """train.log without its timestamps and timings."""
    lines = (directory / "train.log").read_text(encoding="utf-8").splitlines()
    return [line[20:].rsplit(", ", 1)[0] if " min" in line else line[20:] for line in lines]


def whole_run(tmp_path: Path, corpus: Path, summary: str, updates: int, capsys) -> tuple[Path, Path, Path]:
    """A config with dropout, trained uninterrupted into `whole`; `parts` is for the run to compare."""
    cfg = tmp_path / "lm.yaml"
    cfg.write_text(f"data: {{dir: {corpus}}}\nmodel: {{summary: {summary}, emb_dim: 8, hidden_dim: 12, "
                   f"dropout: 0.3}}\ntraining: {{batch_size: 4, bptt: 35, max_updates: {updates}, valid_every: 10, "
                   "log_every: 5, lr: 0.01, threads: 1, max_minutes: 0}\n", encoding="utf-8")
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert run(["lm", "train", cfg, "--quiet", "--set", f"model_dir={whole}"], capsys)[0] == 0
    return cfg, whole, parts


def test_resumed_lm_run_takes_the_same_updates_as_an_uninterrupted_one(tiny_corpus, tmp_path, capsys):
    """Stopped mid-epoch between validations, with dropout, and resumed with a larger budget:
    the updates after the stop, their logged losses and the final weights are the
    uninterrupted run's; the epoch boundary in between is crossed as it was."""
    from ctxnmt.utils.checkpoint import load_checkpoint

    cfg, whole, parts = whole_run(tmp_path, tiny_corpus, "self-attentive", 40, capsys)
    assert run(["lm", "train", cfg, "--quiet", "--set", f"model_dir={parts}",
                "--set", "training.max_updates=9"], capsys)[0] == 0
    progress = load_checkpoint(parts / "checkpoints/last.pt")["progress"]
    assert (progress["epoch"], progress["position"]) == (1, 3)  # an epoch is 6 segments here
    code, out, _ = run(["lm", "train", cfg, "--quiet", "--resume", "--set", f"model_dir={parts}"], capsys)
    assert code == 0 and "40 updates" in out
    whole_log, parts_log = lm_log(whole), lm_log(parts)
    assert any(line.startswith("resumed from") and "at update 9 (epoch 2)" in line for line in parts_log)
    after = [line for line in whole_log if line.startswith(("update ", "validation")) and
             int(line.split()[-4 if line.startswith("validation") else 1].rstrip(":")) > 9]
    assert len(after) == 7 + 4 and all(line in parts_log for line in after), after
    epochs = json.loads((whole / "done.json").read_text())["epoch"]
    assert epochs == 6 and json.loads((parts / "done.json").read_text())["epoch"] == epochs
    a, b = (load_checkpoint(d / "checkpoints/last.pt")["model"] for d in (whole, parts))
    assert all(torch.equal(a[k], b[k]) for k in a)


# Between validations; on a validation update (valid_every 10); on an epoch's last segment (6 a epoch).
@pytest.mark.parametrize("during", [13, 10, 6])
def test_a_signalled_lm_run_saves_and_resumes_as_if_never_stopped(during, tiny_corpus, tmp_path, capsys,
                                                                  monkeypatch):
    import os
    import signal

    from ctxnmt.training.trainer import Trainer
    from ctxnmt.utils.checkpoint import load_checkpoint

    cfg, whole, parts = whole_run(tmp_path, tiny_corpus, "mean", 30, capsys)
    update = Trainer.train_on

    def update_then_signal(trainer, *args):
        if trainer.progress.update == during - 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return update(trainer, *args)

    monkeypatch.setattr(Trainer, "train_on", update_then_signal)
    code, out, err = run(["lm", "train", cfg, "--quiet", "--set", f"model_dir={parts}"], capsys)
    last = parts / "checkpoints" / "last.pt"
    assert code == 143 and out == ""
    assert err.strip().splitlines()[-1] == (f"ctxnmt lm train: stopped by SIGTERM at update {during}; saved {last}; "
                                            f"resume with: ctxnmt lm train {parts}/config.yaml --resume")
    assert load_checkpoint(last)["progress"]["update"] == during and not (parts / "done.json").exists()
    monkeypatch.setattr(Trainer, "train_on", update)
    code, out, _ = run(["lm", "train", parts / "config.yaml", "--quiet", "--resume"], capsys)
    assert code == 0 and "30 updates" in out
    a, b = (load_checkpoint(d / "checkpoints/last.pt") for d in (whole, parts))
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert a["schedule"] == b["schedule"] and a["progress"]["best_metric"] == b["progress"]["best_metric"]
    whole_lines = [line for line in lm_log(whole) if line.startswith(("update ", "validation"))]
    assert [line for line in lm_log(parts) if line.startswith(("update ", "validation"))] == whole_lines


def test_a_signalled_comparison_resumes_its_run_when_run_again(tiny_corpus, tmp_path, capsys, monkeypatch):
    import os
    import signal

    from ctxnmt.training.trainer import Trainer

    [path] = lm_configs(tmp_path, tiny_corpus, "mean", updates=20)
    args = ["lm", "compare", path, "--seeds", "1", "--out", tmp_path / "out"]
    update = Trainer.train_on

    def update_then_signal(trainer, *a):
        if trainer.progress.update == 4:
            os.kill(os.getpid(), signal.SIGINT)
        return update(trainer, *a)

    monkeypatch.setattr(Trainer, "train_on", update_then_signal)
    code, _, err = run(args, capsys)
    last = tmp_path / "out" / "lm-mean" / "seed1" / "checkpoints" / "last.pt"
    assert code == 130
    assert err.strip().splitlines()[-1] == (f"ctxnmt lm: stopped by SIGINT at update 5; saved {last}; "
                                            "the same command resumes")
    monkeypatch.setattr(Trainer, "train_on", update)
    code, stdout, err = run(args, capsys)
    assert code == 0 and "lm-mean seed 1: resuming from its last checkpoint" in err
    assert json.loads((tmp_path / "out" / "lm-mean" / "seed1" / "results.json").read_text())["updates"] == 20
    [row] = json.loads((tmp_path / "out" / "report.json").read_text())["rows"]
    assert row["interruptions"] == ["resumed at 5"]  # the report names the resume its log shows
    assert stdout.splitlines()[4].endswith(f"| 1: resumed at 5 | {source_revision()[:12]} |")


def test_lm_training_stops_when_the_learning_rate_reaches_its_floor(tiny_corpus, tmp_path, capsys, monkeypatch):
    """Dev perplexity made to worsen at every validation after the first: 0.01 → 0.005 → 0.0025 ≤ min_lr."""
    from ctxnmt.lm import task as lm_task

    worsening = iter(range(10, 100))
    monkeypatch.setattr(lm_task, "perplexity", lambda *args: float(next(worsening)))
    cfg = write_config(tmp_path, tiny_corpus, "mean")
    code, out, _ = run(["lm", "train", cfg, "--quiet", "--set", "training.valid_every=5", "--set",
                        "training.min_lr=0.003", "--set", "training.patience=0", "--set",
                        "training.stop_at_min_lr=true"], capsys)
    assert code == 0 and "15 updates, stopped because the learning rate decayed to min_lr (0.003)" in out


def test_resume_refuses_a_checkpoint_of_another_model(tiny_corpus, tmp_path, capsys):
    cfg = write_config(tmp_path, tiny_corpus, "mean")
    assert run(["lm", "train", cfg, "--quiet", "--set", "training.max_updates=10"], capsys)[0] == 0
    code, _, err = run(["lm", "train", cfg, "--quiet", "--resume", "--set", "model.hidden_dim=20"], capsys)
    assert code == 2 and "model.hidden_dim is 24 in the checkpoint but 20 in " in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("key, value", [("batch_size", 2), ("bptt", 7)])
def test_resume_refuses_other_streams_than_the_checkpoints(key, value, tiny_corpus, tmp_path, capsys):
    """The saved stream state holds batch_size streams and the epoch's position counts bptt
    segments: another batch_size had failed inside the LSTM, another bptt resumed elsewhere."""
    cfg = write_config(tmp_path, tiny_corpus, "mean")
    assert run(["lm", "train", cfg, "--quiet", "--set", "training.max_updates=7"], capsys)[0] == 0
    saved = (tmp_path / "model/config.yaml").read_bytes()
    code, _, err = run(["lm", "train", cfg, "--quiet", "--resume", "--set", f"training.{key}={value}"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"was trained with training.{key} " in err and f", not {value}; resume with the same" in err
    assert (tmp_path / "model/config.yaml").read_bytes() == saved


def test_resuming_a_scored_run_drops_its_scores_before_training_on(tiny_corpus, tmp_path, capsys, monkeypatch):
    """results.json says a run is done and what its best.pt scores; once training goes on, it
    no longer holds, so an interruption leaves a run to finish, not old scores beside new weights."""
    from ctxnmt.training.trainer import Trainer

    cfg = write_config(tmp_path, tiny_corpus, "mean")
    assert run(["lm", "train", cfg, "--quiet", "--set", "training.max_updates=7"], capsys)[0] == 0
    assert (tmp_path / "model/results.json").is_file()

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "train", interrupted)
    assert run(["lm", "train", cfg, "--quiet", "--resume", "--set", "training.max_updates=14"], capsys)[0] == 130
    assert not (tmp_path / "model/results.json").exists()
    monkeypatch.undo()
    code, out, _ = run(["lm", "train", cfg, "--quiet", "--resume", "--set", "training.max_updates=14"], capsys)
    assert code == 0 and "14 updates" in out and (tmp_path / "model/results.json").is_file()


def test_a_run_finished_before_the_one_progress_record_is_still_scored(tiny_corpus, tmp_path, capsys):
    """The LM's done.json named the position in the epoch `segment` and kept only `best_ppl`
    before translation and the LM shared one progress record: such a run is scored as it was."""
    from ctxnmt.lm.run import train_and_score

    cfg = write_config(tmp_path, tiny_corpus, "mean")
    assert run(["lm", "train", cfg, "--quiet", "--set", "training.max_updates=7"], capsys)[0] == 0
    done, results = (json.loads((tmp_path / "model" / name).read_text()) for name in ("done.json", "results.json"))
    older = {"epoch": done["epoch"], "update": done["update"], "elapsed": done["elapsed"],
             "best_ppl": done["best_metric"], "stopped": done["stopped"], "segment": done["position"],
             "tokens": done["tokens"], "validation_due": False, "source": done["source"],
             "definitions": done["definitions"]}
    (tmp_path / "model/done.json").write_text(json.dumps(older))
    (tmp_path / "model/results.json").unlink()
    assert train_and_score(load_lm_config(cfg), score_only=True) == results


def test_compare_keeps_an_out_directory_that_yaml_would_misread(tiny_corpus, tmp_path, capsys):
    """Each run's model_dir reached the config as a --set value, parsed as YAML: ' #' began a
    comment, so every seed shared the directory before it."""
    [path] = lm_configs(tmp_path, tiny_corpus, "previous", updates=4)
    out = tmp_path / "cmp #2"
    code, _, err = run(["lm", "compare", path, "--seeds", "1", "2", "--out", out], capsys)
    assert code == 0, err
    assert all((out / f"lm-previous/seed{seed}/results.json").is_file() for seed in (1, 2))
    assert not (tmp_path / "cmp").exists()


def test_compare_refuses_configs_of_other_vocabularies_before_training(tiny_corpus, tmp_path, capsys):
    previous, mean = lm_configs(tmp_path, tiny_corpus, "previous", "mean", updates=4)
    mean.write_text(mean.read_text().replace(f"data: {{dir: {tiny_corpus}}}",
                                             f"data: {{dir: {tiny_corpus}, vocab_size: 5}}"))
    code, _, err = run(["lm", "compare", previous, mean, "--seeds", "1", "--out", tmp_path / "cmp"], capsys)
    assert code == 2 and "lm-mean.yaml: its data section differs from" in err
    assert "data.vocab_size is 10000 there but 5" in err and "do not compare" in err
    assert not (tmp_path / "cmp").exists()  # nothing trained


def test_an_lm_trained_before_eqs_12_13_is_refused_by_name(tiny_corpus, tmp_path, capsys):
    """A self-attentive LM trained before definitions 6 computed the start-inclusive summary:
    scoring it as `self-attentive` (eqs. 12–13) is refused, naming the key and its old name."""
    from ctxnmt.models.migrations import load_model_checkpoint

    cfg = write_config(tmp_path, tiny_corpus, "self-attentive")
    assert run(["lm", "train", cfg, "--quiet", "--set", "training.max_updates=10"], capsys)[0] == 0
    best = tmp_path / "model/checkpoints/best.pt"
    payload = torch.load(best, weights_only=True)
    torch.save({**payload, "definitions": 5}, best)
    code, _, err = run(["lm", "score", tmp_path / "model", "-i", tiny_corpus / "test.en"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "model.summary is 'self-attentive-with-start' in the checkpoint but 'self-attentive' in " in err
    assert load_model_checkpoint(best)["model_config"]["summary"] == "self-attentive-with-start"


def test_compare_only_trains_the_named_runs_and_reports_once_all_are_done(tiny_corpus, tmp_path, capsys):
    [path] = lm_configs(tmp_path, tiny_corpus, "previous")
    out = tmp_path / "cmp"
    code, stdout, err = run(["lm", "compare", path, "--seeds", "1", "2", "--out", out, "--only", "lm-previous:2"],
                            capsys)
    assert code == 0 and (out / "lm-previous/seed2/results.json").is_file()
    assert not (out / "lm-previous/seed1").exists()
    assert "not finished yet: lm-previous:1" in err
    code, _, _ = run(["lm", "compare", path, "--seeds", "1", "2", "--out", out, "--report", "--export",
                      tmp_path / "export"], capsys)  # the unfinished seed has nothing to export
    assert code == 0 and sorted(p.name for p in (tmp_path / "export/lm-previous").iterdir()) == ["seed2"]
    assert "Not finished yet: lm-previous:1." in stdout and "| lm-previous | 2 | " in stdout
    saved = out / "lm-previous/seed2/config.yaml"
    finished_config = saved.read_text(encoding="utf-8")
    saved.write_text(finished_config + "from_a_newer_checkout: 1\n", encoding="utf-8")
    code, stdout, err = run(["lm", "compare", path, "--seeds", "1", "2", "--out", out, "--only", "lm-previous:1"],
                            capsys)  # seed 2 belongs to another process, on a checkout with a key this one lacks
    assert code == 0 and "| lm-previous | 1 | " in stdout
    [left_out] = [line for line in err.splitlines() if "left out of the report: lm-previous:2: " in line]
    assert "from_a_newer_checkout" in left_out
    [named] = json.loads((out / "report.json").read_text(encoding="utf-8"))["left_out"]
    assert named.startswith("lm-previous:2 (") and "from_a_newer_checkout" in named
    assert "Left out: lm-previous:2 (" in stdout
    saved.write_text(finished_config, encoding="utf-8")
    code, stdout, _ = run(["lm", "compare", path, "--seeds", "1", "2", "--out", out, "--only", "lm-previous:1"],
                          capsys)
    assert code == 0 and "| lm-previous | 1, 2 | " in stdout and "Not finished" not in stdout
    code, _, err = run(["lm", "compare", path, "--seeds", "1", "2", "--out", out, "--report", "--export", out], capsys)
    assert code == 0 and f"{out} is --out: nothing to copy" in err
    code, _, err = run(["lm", "compare", path, "--seeds", "1", "2", "--out", out, "--only", "lm-mean"], capsys)
    assert code == 2 and "--only 'lm-mean' names no run of this comparison" in err


def test_report_reads_finished_runs_wherever_they_were_copied_and_trains_nothing(tiny_corpus, tmp_path, capsys):
    """The committed results: --export copies config.yaml, results.json, test.logprobs and
    train.log of each run (no checkpoint) and the report; elsewhere they give the same report
    with --report; runs missing there are reported as such."""
    [path] = lm_configs(tmp_path, tiny_corpus, "previous")
    out, copy = tmp_path / "cmp", tmp_path / "committed"
    args = ["lm", "compare", path, "--seeds", "1", "2"]
    code, _, err = run([*args, "--out", out, "--export", copy], capsys)
    assert code == 0 and f"exported 10 files to {copy}" in err
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file()) == sorted(
        ["report.json", "report.md"] + [f"lm-previous/seed{seed}/{name}" for seed in (1, 2)
                                        for name in ("config.yaml", "results.json", "test.logprobs", "train.log")])
    assert (copy / "report.md").read_text() == (out / "report.md").read_text()
    (copy / "lm-previous/seed1/stale.txt").write_text("an earlier export's")  # a re-export replaces each run whole
    assert run([*args, "--out", out, "--report", "--export", copy], capsys)[0] == 0
    assert not (copy / "lm-previous/seed1/stale.txt").exists() and (copy / "lm-previous/seed1/results.json").is_file()
    code, stdout, _ = run([*args, "--out", copy, "--report"], capsys)
    assert code == 0 and json.loads((copy / "report.json").read_text()) == json.loads((out / "report.json").read_text())
    assert (copy / "report.md").read_text() == (out / "report.md").read_text().replace(str(out), str(copy))
    (copy / "lm-previous/seed1/train.log").unlink()  # a run copied without its log
    assert run([*args, "--out", copy, "--report"], capsys)[0] == 0
    assert json.loads((copy / "report.json").read_text())["rows"][0]["interruptions"] == ["not recorded", "none"]
    results = copy / "lm-previous/seed1/results.json"  # a run trained before the commit was kept
    results.write_text(json.dumps({k: v for k, v in json.loads(results.read_text()).items() if k != "source"}))
    code, stdout, _ = run([*args, "--out", copy, "--report"], capsys)
    assert code == 0 and f"| 1: not recorded, 2: {source_revision()[:12]} |" in stdout
    shutil.rmtree(copy / "lm-previous/seed2")
    code, stdout, err = run([*args, "--out", copy, "--report"], capsys)
    assert code == 0 and "Not finished yet: lm-previous:2." in stdout and not (copy / "lm-previous/seed2").exists()
    for text, message in (("-3.5\tten\n", "not one 'log-probability<TAB>tokens' pair per line"),
                          ("", "empty; a finished run scores every test line")):
        (copy / "lm-previous/seed1/test.logprobs").write_text(text)
        code, _, err = run([*args, "--out", copy, "--report"], capsys)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    code, _, err = run([*args, "--out", copy, "--report", "--only", "lm-previous:1"], capsys)
    assert code == 2 and "--only trains runs and --report trains none" in err


def test_report_tests_only_the_seeds_whose_runs_kept_per_line_scores(tiny_corpus, tmp_path, capsys):
    """A run finished before test.logprobs existed is reported with its perplexity, untested;
    the p-values say which seed they are."""
    configs = lm_configs(tmp_path, tiny_corpus, "previous", "mean")
    out = tmp_path / "cmp"
    assert run(["lm", "compare", *configs, "--seeds", "1", "2", "--out", out], capsys)[0] == 0
    (out / "lm-mean/seed1/test.logprobs").unlink()
    code, stdout, _ = run(["lm", "compare", *configs, "--seeds", "1", "2", "--out", out, "--report"], capsys)
    mean = json.loads((out / "report.json").read_text())["rows"][1]
    assert code == 0 and len(mean["delta"]) == 2 and list(mean["p_per_seed"]) == ["2"]
    p = mean["p_per_seed"]["2"]
    assert f"| 2: {'< 0.001' if p < 0.001 else f'{p:.3f}'} |" in stdout


def lines(*pairs) -> np.ndarray:
    """Per-line (negative log-probability, tokens)."""
    return np.array(pairs, dtype=np.float64)


def test_perplexity_test_matches_the_exhaustive_enumeration():
    """Every one of the 2^(R·N) swaps of two seeds' four lines: the exact p the
    Monte-Carlo test estimates."""
    base = [lines((9, 3), (12, 4), (4, 2), (15, 5)), lines((8, 3), (13, 4), (5, 2), (14, 5))]
    system = [lines((7, 3), (12.5, 4), (3, 2), (11, 5)), lines((8.5, 3), (10, 4), (4.5, 2), (12, 5))]

    def ppl(runs):
        total = np.concatenate(runs).sum(0)
        return math.exp(total[0] / total[1])

    observed = abs(ppl(system) - ppl(base))
    hits = 0
    for swaps in itertools.product([False, True], repeat=8):
        x, y = [b.copy() for b in base], [s.copy() for s in system]
        for k, swap in enumerate(swaps):
            r, i = divmod(k, 4)
            if swap:
                x[r][i], y[r][i] = system[r][i], base[r][i]
        hits += abs(ppl(y) - ppl(x)) >= observed - 1e-9
    exact = hits / 2 ** 8
    result = perplexity_test(base, system, trials=10000, seed=3)
    assert 0 < exact < 1 and result.p_value == pytest.approx(exact, abs=0.02)
    assert result.system == pytest.approx(ppl(system)) and result.delta < 0


def test_perplexity_test_over_seeds_sees_through_a_seed_that_nearly_reverses_the_other():
    """Seed 1: the system is far better; seed 2: almost as much worse.  The pooled
    perplexities still differ, but shuffling the lines of both seeds makes such a
    difference common; a system better on both seeds is far outside it."""
    good, bad, worse = lines(*[(10, 5)] * 40), lines(*[(14, 5)] * 40), lines(*[(13.5, 5)] * 40)
    assert perplexity_test([bad], [good], trials=2000).p_value < 0.01
    mixed = perplexity_test([bad, good], [good, worse], trials=2000)
    assert mixed.delta != 0 and mixed.p_value > 0.3
    assert perplexity_test([bad, bad], [good, good], trials=2000).p_value < 0.01


def test_perplexity_test_refuses_runs_of_different_texts():
    with pytest.raises(DataError, match="replicate 2: the two runs scored different test texts"):
        perplexity_test([lines((1, 2)), lines((1, 2))], [lines((1, 2)), lines((1, 3))])


def test_compare_with_two_jobs_trains_the_same_models_side_by_side(tiny_corpus, tmp_path, capsys):
    [path] = lm_configs(tmp_path, tiny_corpus, "previous")
    one, two = tmp_path / "one", tmp_path / "two"
    assert run(["lm", "compare", path, "--seeds", "1", "2", "--out", one], capsys)[0] == 0
    code, _, err = run(["lm", "compare", path, "--seeds", "1", "2", "--out", two, "--jobs", "2"], capsys)
    assert code == 0 and "lm-previous seed 1: finished" in err and "lm-previous seed 2: finished" in err
    rows = [json.loads((out / "report.json").read_text())["rows"] for out in (one, two)]
    for row in (*rows[0], *rows[1]):
        del row["minutes"]  # all but the training time
    assert rows[0] == rows[1]
    for seed in (1, 2):
        assert (one / f"lm-previous/seed{seed}/test.logprobs").read_text() == \
            (two / f"lm-previous/seed{seed}/test.logprobs").read_text()


def test_a_second_lm_trainer_on_a_busy_directory_is_refused(tiny_corpus, tmp_path):
    from ctxnmt.lm.task import LanguageModelTask
    from ctxnmt.training.trainer import Trainer
    from ctxnmt.utils.lock import DirectoryBusy

    config = load_lm_config(write_config(tmp_path, tiny_corpus, "mean"), ["training.max_updates=5"])
    first = Trainer(LanguageModelTask(config), quiet=True)
    with pytest.raises(DirectoryBusy, match="is training in it"):
        Trainer(LanguageModelTask(config), quiet=True)
    first.train()
    Trainer(LanguageModelTask(config), resume=True, quiet=True).train()


def test_a_comparison_does_not_report_a_run_of_an_older_definition_under_the_new_one(tiny_corpus, tmp_path, capsys):
    """A finished `self-attentive` LM trained before definitions 6 (start-inclusive) is not
    reported as eqs. 12–13: its record, or else its checkpoint, says which definitions it was
    trained under, and the comparison names the difference.  Such a finished run is restated
    in today's names (config.yaml, records), so a plan naming its computation accepts, scores
    and reports it; a copy that tells neither (committed before records kept it) stands as saved."""
    import yaml

    from ctxnmt.models.migrations import DEFINITIONS

    [path] = lm_configs(tmp_path, tiny_corpus, "self-attentive")
    old_name = tmp_path / "old.yaml"  # the same run, planned as the computation it was trained with
    old_name.write_text(path.read_text().replace("summary: self-attentive,", "summary: self-attentive-with-start,"))
    out = tmp_path / "cmp"
    args = ["lm", "compare", "--seeds", "1", "--out", out]
    assert run([*args[:2], path, *args[2:]], capsys)[0] == 0
    run_dir = out / "lm-self-attentive/seed1"
    records = {name: json.loads((run_dir / name).read_text()) for name in ("done.json", "results.json")}
    assert records["done.json"]["definitions"] == records["results.json"]["definitions"] == DEFINITIONS

    def trained_before_definitions_6(record_states_it: bool):
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        (run_dir / "config.yaml").write_text(yaml.safe_dump({**config, "model": {**config["model"],
                                                                                 "summary": "self-attentive"}}))
        for name, record in records.items():
            stated = {k: v for k, v in record.items() if k != "definitions"}
            (run_dir / name).write_text(json.dumps({**stated, "definitions": 5} if record_states_it else stated))
        for checkpoint in (run_dir / "checkpoints").glob("*.pt"):
            torch.save({**torch.load(checkpoint, weights_only=True), "definitions": 5}, checkpoint)

    message = "model.summary is 'self-attentive-with-start' there but 'self-attentive'"
    for record_states_it in (True, False):  # its record says so, or (an older record) its checkpoint
        trained_before_definitions_6(record_states_it)
        code, _, err = run([*args[:2], path, *args[2:], "--report"], capsys)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1
        assert yaml.safe_load((run_dir / "config.yaml").read_text())["model"]["summary"] == "self-attentive-with-start"
        assert json.loads((run_dir / "results.json").read_text())["definitions"] == DEFINITIONS  # restated
        code, stdout, _ = run([*args[:2], old_name, *args[2:], "--report"], capsys)
        assert code == 0 and "| lm-self-attentive | 1 | " in stdout
    trained_before_definitions_6(True)  # trained, not yet scored: scored as what it was trained with
    (run_dir / "results.json").unlink()
    code, _, err = run([*args[:2], old_name, *args[2:]], capsys)
    assert code == 0 and "scoring its finished training" in err
    scored = json.loads((run_dir / "results.json").read_text())
    assert scored["definitions"] == DEFINITIONS and scored["test_ppl"] != pytest.approx(
        records["results.json"]["test_ppl"])  # the start-inclusive computation it was trained with, not eqs. 12–13
    code, stdout, _ = run(["lm", "score", run_dir, "-i", tiny_corpus / "test.en"], capsys)
    assert code == 0 and f"perplexity {scored['test_ppl']:.2f} " in stdout
    copy = tmp_path / "committed/lm-self-attentive/seed1"  # a copy that tells nothing stands as saved
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("checkpoints"))
    trained_before_definitions_6(False)
    for name in ("config.yaml", "done.json", "results.json"):
        shutil.copy(run_dir / name, copy / name)
    assert run([*args[:2], path, "--seeds", "1", "--out", tmp_path / "committed", "--report"], capsys)[0] == 0
