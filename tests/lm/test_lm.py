"""The residual LM: its summaries against a literal per-step reference, truncated BPTT
with carried state against the whole stream at once, overfitting a tiny text through
the command line, and one-line errors for bad input."""
from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from ctxnmt.cli import main
from ctxnmt.data.vocab import EOS
from ctxnmt.errors import DataError
from ctxnmt.experiments.perplexity import perplexity_test
from ctxnmt.lm.config import SUMMARIES, LMModelConfig, load_lm_config
from ctxnmt.lm.model import ResidualLM, detach

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


def test_lm_score_takes_a_checkpoint_by_name_or_as_a_file(tiny_corpus, tmp_path, capsys):
    """It took best or last only; translate took a file only."""
    cfg = write_config(tmp_path, tiny_corpus, "mean")
    assert run(["lm", "train", cfg, "--quiet", "--max-updates", "4"], capsys)[0] == 0
    score = ["lm", "score", tmp_path / "model", "-i", tiny_corpus / "dev.en", "--checkpoint"]
    code, by_name, _ = run([*score, "last"], capsys)
    assert code == 0 and by_name.startswith("perplexity ")
    last = tmp_path / "model" / "checkpoints" / "last.pt"
    copy = tmp_path / "copy.pt"
    copy.write_bytes(last.read_bytes())
    assert run([*score, copy], capsys) == (0, by_name, "")
    code, _, err = run([*score, tmp_path / "none.pt"], capsys)
    assert code == 2 and f"--checkpoint {tmp_path / 'none.pt'}: no such file" in err


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


def test_lm_training_stops_when_the_learning_rate_reaches_its_floor(tiny_corpus, tmp_path, capsys, monkeypatch):
    """Dev perplexity made to worsen at every validation after the first: 0.01 → 0.005 → 0.0025 ≤ min_lr."""
    from ctxnmt.tasks import language_model as lm_task

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
    from ctxnmt.tasks.language_model import LanguageModelTask

    cfg = write_config(tmp_path, tiny_corpus, "mean")
    assert run(["lm", "train", cfg, "--quiet", "--set", "training.max_updates=7"], capsys)[0] == 0
    done, results = (json.loads((tmp_path / "model" / name).read_text()) for name in ("done.json", "results.json"))
    older = {"epoch": done["epoch"], "update": done["update"], "elapsed": done["elapsed"],
             "best_ppl": done["best_metric"], "stopped": done["stopped"], "segment": done["position"],
             "tokens": done["tokens"], "validation_due": False, "source": done["source"],
             "definitions": done["definitions"]}
    (tmp_path / "model/done.json").write_text(json.dumps(older))
    (tmp_path / "model/results.json").unlink()
    assert LanguageModelTask.train_run(load_lm_config(cfg), trained=True) == results


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


def test_a_second_lm_trainer_on_a_busy_directory_is_refused(tiny_corpus, tmp_path):
    from ctxnmt.tasks.language_model import LanguageModelTask
    from ctxnmt.training.trainer import Trainer
    from ctxnmt.utils.lock import DirectoryBusy

    config = load_lm_config(write_config(tmp_path, tiny_corpus, "mean"), ["training.max_updates=5"])
    first = Trainer(LanguageModelTask(config), quiet=True)
    with pytest.raises(DirectoryBusy, match="is training in it"):
        Trainer(LanguageModelTask(config), quiet=True)
    first.train()
    Trainer(LanguageModelTask(config), resume=True, quiet=True).train()
