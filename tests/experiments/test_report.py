"""The report's aggregation over seeds and its significance marks, on constructed results."""
from __future__ import annotations

from pathlib import Path

import pytest

from ctxnmt.experiments.evaluate import Output
from ctxnmt.experiments.report import (
    format_number,
    headers,
    make_row,
    summarise_tests,
    table_cells,
    describe_test,
    train_command,
)
from ctxnmt.experiments.spec import SignificanceSpec


def result(p_value: float, delta: float) -> dict:
    return {"test": "bootstrap", "metric": "BLEU", "p_value": p_value, "delta": delta}


@pytest.mark.parametrize("tests, metric, direction, marks", [
    ([result(0.004, 1.0)], "bleu", "better", "**"),
    ([result(0.004, 1.0), result(0.03, 0.5)], "bleu", "better", "*"),  # the weakest seed pair decides
    ([result(0.004, 1.0), result(0.2, 0.5)], "bleu", "better", ""),
    ([result(0.001, 1.0), result(0.001, -0.5)], "bleu", "", ""),  # seeds disagree on the direction
    ([result(0.01, -2.0)], "bleu", "worse", "*"),
    ([result(0.001, -2.0)], "ter", "better", "**"),  # a lower TER is an improvement
])
def test_marks(tests, metric, direction, marks):
    summary = summarise_tests(tests, metric)
    assert (summary["direction"], summary["marks"]) == (direction, marks)
    assert summary["max_p"] == max(t["p_value"] for t in tests)


def output(seed: int, bleu: float, dev: float) -> Output:
    scores = {"bleu": bleu, "bleu_tok": bleu + 1, "chrf": 50.0, "ter": 60.0}
    return Output("ctx", seed, Path("h"), [], scores, decode={"parameters": 1000, "sentences_per_s": 10.0},
                  training={"dev_bleu": dev, "train_tokens_per_s": 2000.0, "train_minutes": 14.5})


def test_several_seeds_give_mean_and_sample_sd():
    row = make_row("ctx", False, [output(1, 20.0, 18.0), output(2, 22.0, 19.0), output(3, 24.0, 20.0)], [],
                   summarise_tests([result(0.001, 1.0)] * 3, "bleu"))
    assert row.mean("bleu") == pytest.approx(22.0) and row.sd("bleu") == pytest.approx(2.0)
    cells = table_cells(row, baseline="base")
    named = dict(zip(headers(), cells))
    assert [named[k] for k in ("system", "seeds", "parameters", "dev BLEU", "test BLEU (tokenised)",
                               "test sacreBLEU")] == ["ctx", "3", "1,000 ± 0", "19.00 ± 1.00", "23.00 ± 2.00",
                                                      "22.00 ± 2.00"]
    assert named["sig."] == "** (p=0.001)" and named["train min"] == "14.50 ± 0.00"


def test_one_seed_has_no_sd_and_missing_values_show_a_dash():
    assert format_number(3.14159, None, 2) == "3.14" and format_number(None, None, 2) == "–"
    external = make_row("rules", True, [Output("rules", None, Path("r"), [],
                                               {"bleu": 9.0, "bleu_tok": 9.5, "chrf": 40.0, "ter": 70.0})], [], None)
    assert table_cells(external, baseline="base") == ["rules (external)", "–", "–", "–", "–", "9.50", "9.00",
                                                      "40.00", "70.00", "–", "–", "–", "–", "–", "–", "–"]


def test_train_command_quotes_and_keeps_override_order():
    assert train_command("configs/a b.yaml", ["x.y=1", "name=it's"]) == \
        "ctxnmt train 'configs/a b.yaml' --set x.y=1 --set 'name=it'\"'\"'s'"


def test_external_output_must_match_the_test_set(tmp_path):
    from ctxnmt.errors import DataError
    from ctxnmt.experiments.evaluate import TestSet, external_output

    ref = tmp_path / "test.en"
    refs = ["the cat sat down", "a dog ran off", "it rains all day"]
    ref.write_text("".join(r + "\n" for r in refs), encoding="utf-8")
    test = TestSet(tmp_path / "test.es", ref, "en", ["x", "y", "z"], refs)
    (tmp_path / "out.en").write_text("a b\nc d\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"out\.en has 2 lines but .*test\.en has 3"):
        external_output("rules", str(tmp_path / "out.en"), test, tmp_path)
    (tmp_path / "out.en").write_text("".join(r + "\n" for r in refs), encoding="utf-8")
    assert external_output("rules", str(tmp_path / "out.en"), test, tmp_path).scores["bleu"] == pytest.approx(100.0)


def test_document_context_systems_translate_with_the_test_document_ids(tmp_path):
    from ctxnmt.config import load_config
    from ctxnmt.errors import DataError
    from ctxnmt.experiments.evaluate import TestSet, document_ids
    from ctxnmt.experiments.report import translate_command
    from ctxnmt.experiments.runs import Run

    def run(**model) -> Run:
        overrides = [f"model.{k}={v}" for k, v in model.items()]
        return Run("sys", 1, "c.yaml", overrides, load_config(None, overrides))

    docs = tmp_path / "test.doc"
    with_docs = TestSet(tmp_path / "test.es", tmp_path / "test.en", "en", ["a"], ["b"], docs)
    without = TestSet(tmp_path / "test.es", tmp_path / "test.en", "en", ["a"], ["b"])
    assert document_ids(run(), with_docs) is None
    assert document_ids(run(doc_aux="gated-aux"), with_docs) == docs
    with pytest.raises(DataError, match="uses document context but the test set has no .doc file"):
        document_ids(run(doc_init_enc="true"), without)
    assert translate_command(Path("m"), with_docs, Path("h")).endswith("-o h")
    assert translate_command(Path("m"), with_docs, Path("h"), docs).endswith(f"--doc-ids {docs}")


@pytest.mark.parametrize("p_value, cell", [(0.012, "+0.84, p=0.012"), (0.0001, "+0.84, p<0.001")])
def test_the_over_seeds_cell_never_rounds_a_p_value_to_zero(p_value, cell):
    over_seeds = {"delta": 0.84, "p_value": p_value}
    row = make_row("ctx", False, [output(1, 20.0, 18.0), output(2, 22.0, 19.0)], [],
                   summarise_tests([result(0.01, 1.0)] * 2, "bleu", over_seeds))
    assert cell in table_cells(row, baseline="base")


@pytest.mark.parametrize("deltas, cell", [
    ([1.0, 2.0, 3.0], "t=3.46, p=0.074"),  # mean 2, sd 1, 2 degrees of freedom
    ([-0.5, -1.5], "t=-2.00, p=0.295"),  # 1 degree of freedom: p = 1 − (2/π)·atan 2
    ([0.8, 0.8], "no spread, p<0.001"),
])
def test_the_t_test_over_seeds_takes_the_seed_pairs_differences_as_its_sample(deltas, cell):
    over_seeds = {"delta": 0.84, "p_value": 0.01}
    outputs = [output(seed, 20.0, 18.0) for seed in range(1, len(deltas) + 1)]
    row = make_row("ctx", False, outputs, [], summarise_tests([result(0.01, d) for d in deltas], "bleu", over_seeds))
    named = dict(zip(headers(), table_cells(row, baseline="base")))
    assert named["t-test over seeds: t, p"] == cell and named["all seeds: Δ, p"] == "+0.84, p=0.010"


def test_an_output_without_seeds_has_no_t_test_over_seeds():
    # an external output is paired with every baseline seed, but those are not its replicates
    row = make_row("ctx", False, [output(1, 20.0, 18.0)], [], summarise_tests([result(0.01, 1.0)] * 3, "bleu"))
    assert "seeds_t" not in row.significance and table_cells(row, baseline="base")[10] == "–"


def sig_cell(tests: list[dict]) -> str:
    row = make_row("ctx", False, [output(s, 20.0, 18.0) for s in range(1, len(tests) + 1)], [],
                   summarise_tests(tests, "bleu"))
    return dict(zip(headers(), table_cells(row, baseline="base")))["sig."]


def test_an_unmarked_row_says_why_when_its_seeds_differ_in_sign():
    # every p below 0.05, yet no mark: the seeds disagree on the direction (the recipe arm's mean residual)
    assert sig_cell([result(0.022, 0.88), result(0.003, -1.47), result(0.001, 1.71)]) == \
        "n.s., seed pairs differ in sign (p=0.022)"
    assert sig_cell([result(0.2, 0.5), result(0.3, 0.4)]) == "n.s. (p=0.300)"
    assert sig_cell([result(1.0, 0.0)]) == "n.s. (p=1.000)"  # identical outputs: nothing to disagree on


def test_the_report_names_the_per_seed_test_with_its_trials_and_seed():
    assert describe_test(SignificanceSpec()) == \
        "two-sided paired approximate randomisation (sacreBLEU's), 10,000 trials, seed 12345"
    assert "one-sided" in describe_test(SignificanceSpec(test="bootstrap", samples=500))
    assert describe_test(SignificanceSpec(test="sign")) == "one-sided sign test on sentence scores"
