"""`ctxnmt analyze curve` on training logs written for the test, whose answers are known."""
from __future__ import annotations

import csv

import pytest

from ctxnmt.analysis.curves import last_quarter_gain
from ctxnmt.cli import main
from ctxnmt.training.log import Starts, read_starts, read_validations


def write_log(directory, bleus, every=100, extra_lines=()):
    directory.mkdir(parents=True, exist_ok=True)
    lines = ["2026-11-24 10:00:00 epoch 1: 10 batches, padding 1.0% source / 0.1% target"]
    for i, bleu in enumerate(bleus, 1):
        lines.append(f"2026-11-24 10:0{i % 10}:00 update {i * every}: loss/token 3.0, 900 target tok/s, lr 1.00e-03")
        lines.append(f"2026-11-24 10:0{i % 10}:01 validation at update {i * every} ({i * every * 2500} target "
                     f"tokens): ppl {50 - i:.2f}, bleu {bleu:.2f}")
    (directory / "train.log").write_text("\n".join([*lines, *extra_lines]) + "\n", encoding="utf-8")
    return directory


def test_gain_is_the_rise_of_the_running_best_over_the_last_quarter(tmp_path):
    # 8 validations to update 800: the last quarter is (600, 800]; best by 600 is 30.0, by 800 30.4
    rising = write_log(tmp_path / "a", [10, 20, 25, 28, 29, 30, 29.5, 30.4])
    assert last_quarter_gain(read_validations(rising)) == pytest.approx(0.4)
    # a dip that is not recovered does not count as a loss: the selected checkpoint stays the best one
    flat = write_log(tmp_path / "b", [10, 20, 25, 28, 30, 29, 28, 27])
    assert last_quarter_gain(read_validations(flat)) == pytest.approx(0.0)


def test_a_log_line_cut_mid_character_does_not_hide_the_rest_of_the_log(tmp_path):
    """A run killed while writing "ä" leaves half its bytes; the validations around it still read."""
    run = write_log(tmp_path / "k", [10, 20])
    with (run / "train.log").open("ab") as fh:
        fh.write(b"2026-11-24 11:00:00 killed while writing \xc3\n")
        fh.write(b"2026-11-24 11:00:01 validation at update 300 (750000 target tokens): ppl 47.00, bleu 21.00\n")
    assert [v.scores["bleu"] for v in read_validations(run)] == [10, 20, 21]


def test_a_resumed_run_logs_a_validation_twice_and_it_counts_once(tmp_path):
    run = write_log(tmp_path / "r", [10, 20], extra_lines=[
        "2026-11-24 11:00:00 resumed from x/checkpoints/last.pt at update 200 (epoch 1, batch 5)",
        "2026-11-24 11:00:01 validation at update 200 (500000 target tokens): ppl 48.00, bleu 20.00"])
    assert [v.update for v in read_validations(run)] == [100, 200]


MODEL_LINE = "2026-11-24 {}:00:00 model: 3,958,906 parameters (birnn encoder, cgru decoder, gru cell)"


def test_starts_count_resumes_and_restarts_from_update_0(tmp_path):
    # started, resumed at 200, resumed at 1,250, then started again without a last.pt
    run = write_log(tmp_path / "r", [10, 20], extra_lines=[
        MODEL_LINE.format(10),
        "2026-11-24 11:00:00 resumed from x/checkpoints/last.pt at update 200 (epoch 1, batch 5)",
        MODEL_LINE.format(11),
        "2026-11-24 12:00:00 resumed from x/checkpoints/last.pt at update 1250 (epoch 3, batch 0)",
        MODEL_LINE.format(12),
        MODEL_LINE.format(13),
        "2026-11-24 13:00:01 checkpoint of 2 rank(s) resumed on 1: ranks beyond the first start afresh"])
    assert read_starts(run) == Starts([200, 1250], 1)
    assert read_starts(run).describe() == "resumed at 200, 1,250; restarted from update 0 1×"
    once = write_log(tmp_path / "once", [10], extra_lines=[MODEL_LINE.format(10)])
    assert read_starts(once) == Starts([], 0) and read_starts(once).describe() == "none"
    lm_line = "2026-11-24 {}:00:00 LM: 2,120,654 parameters (mean summary), vocabulary 10004, 911,260 training tokens"
    lm = write_log(tmp_path / "lm", [10], extra_lines=[lm_line.format(10), lm_line.format(11)])
    assert read_starts(lm) == Starts([], 1)  # the LM trainer's start line counts too


def test_cli_names_a_runs_resumes(tmp_path, capsys):
    run = write_log(tmp_path / "r", [10, 20], extra_lines=[
        MODEL_LINE.format(10), "2026-11-24 11:00:00 resumed from x/last.pt at update 200 (epoch 1, batch 5)",
        MODEL_LINE.format(11)])
    assert main(["analyze", "curve", str(run), "--name", "r"]) == 0
    assert capsys.readouterr().out.strip().endswith("gain over the last quarter +10.00 (resumed at 200)")


def test_cli_prints_each_run_and_writes_csv_and_plot(tmp_path, capsys):
    a = write_log(tmp_path / "a", [10, 20, 25, 28, 29, 30, 29.5, 30.4])
    b = write_log(tmp_path / "b", [5, 15, 18], every=250)
    single = write_log(tmp_path / "single", [7])
    out_csv, out_png = tmp_path / "new" / "c.csv", tmp_path / "new" / "c.png"  # folders made as needed
    assert main(["analyze", "curve", str(a), str(b), str(single), "--name", "big", "--name", "small",
                 "--name", "one", "--csv", str(out_csv), "--plot", str(out_png)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("big: 8 validations to update 800; best dev bleu 30.40 at update 800; "
                      "gain over the last quarter +0.40")
    assert out[1].startswith("small: 3 validations to update 750; best dev bleu 18.00 at update 750")
    assert out[2].endswith("gain over the last quarter n/a (no validation before it)")
    rows = list(csv.DictReader(out_csv.open(encoding="utf-8")))
    assert len(rows) == 12 and rows[-2] == {"run": "small", "update": "750", "target_tokens": "1875000",
                                            "ppl": "47.0", "bleu": "18.0"}
    assert out_png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("setup, message", [
    (lambda d: None, "no training log"),
    (lambda d: (d.mkdir(), (d / "train.log").write_text("update 5: loss\n")), "no validation logged yet"),
])
def test_a_directory_without_validations_is_a_one_line_error(tmp_path, capsys, setup, message):
    setup(tmp_path / "run")
    assert main(["analyze", "curve", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
