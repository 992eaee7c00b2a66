"""The ``ctxnmt score`` command end to end, through ``ctxnmt.cli.main``."""
import csv
import json

import pytest

from ctxnmt.cli import main


def _write(path, lines):
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return str(path)


@pytest.fixture
def files(tmp_path, corpus):
    return {
        "ref": _write(tmp_path / "ref.txt", corpus["refs"]),
        "base": _write(tmp_path / "base.txt", corpus["baseline"]),
        "better": _write(tmp_path / "better.txt", corpus["better"]),
        "src": _write(tmp_path / "src.txt", [r.lower() for r in corpus["refs"]]),
        "short": _write(tmp_path / "short.txt", corpus["baseline"][:5]),
    }


def test_scores_print_signature_and_labelled_tokenised_bleu(files, capsys):
    assert main(["score", "--hyp", files["base"], "--ref", files["ref"], "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert "BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in out
    assert "chrF2|" in out and "TER|" in out
    assert "tokenised BLEU (multi-bleu convention)|" in out and "tok:none" in out


def test_line_count_mismatch_names_both_files(files, capsys):
    assert main(["score", "--hyp", files["short"], "--ref", files["ref"], "--lang", "en"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ctxnmt score: error: ")
    assert f"{files['short']} has 5 lines but {files['ref']} has 40" in err


def test_unknown_metric_lists_valid_names(files, capsys):
    assert main(["score", "--hyp", files["base"], "--ref", files["ref"], "--lang", "en", "--metrics", "bleu,bert"]) == 2
    assert "valid metrics: bleu, chrf, ter" in capsys.readouterr().err


def test_significance_needs_two_systems(files, capsys):
    assert main(["score", "--hyp", files["base"], "--ref", files["ref"], "--lang", "en", "--significance", "sign"]) == 2
    assert "at least two --hyp" in capsys.readouterr().err


def test_empty_file_is_an_error(files, tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    assert main(["score", "--hyp", str(empty), "--ref", files["ref"], "--lang", "en"]) == 2
    assert "empty" in capsys.readouterr().err


@pytest.mark.parametrize("test", ["bootstrap", "ar", "ttest", "sign"])
def test_significance_against_first_system(files, capsys, test):
    argv = ["score", "--hyp", files["base"], "--hyp", files["better"], "--ref", files["ref"], "--lang", "en",
            "--metrics", "bleu", "--significance", test, "--samples", "100"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"baseline {files['base']}" in out
    assert f"{files['better']}: " in out and " *" in out  # significant at 0.05


def test_json_output(files, capsys):
    argv = ["score", "--hyp", files["base"], "--hyp", files["better"], "--ref", files["ref"], "--lang", "en",
            "--metrics", "bleu,chrf", "--significance", "bootstrap", "--samples", "100", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert [s["hyp"] for s in data["systems"]] == [files["base"], files["better"]]
    assert set(data["systems"][0]["scores"]) == {"bleu", "bleu_tok", "chrf"}
    assert "tok:13a" in data["systems"][0]["scores"]["bleu"]["signature"]
    assert [r["metric"] for r in data["significance"]["results"]] == ["BLEU", "chrF2"]
    assert all(r["p_value"] < 0.05 for r in data["significance"]["results"])


def test_buckets_csv_and_png(files, tmp_path):
    table = tmp_path / "buckets.csv"
    plot = tmp_path / "buckets.png"
    common = ["score", "--hyp", files["base"], "--hyp", files["better"], "--ref", files["ref"], "--lang", "en",
              "--metrics", "bleu", "--src", files["src"]]
    assert main(common + ["--buckets", str(table)]) == 0
    rows = list(csv.DictReader(table.open(encoding="utf-8")))
    assert {r["system"] for r in rows} == {files["base"], files["better"]}
    assert sum(int(r["count"]) for r in rows) == 80
    assert main(common + ["--buckets", str(plot)]) == 0
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_buckets_need_source(files, tmp_path, capsys):
    argv = ["score", "--hyp", files["base"], "--ref", files["ref"], "--lang", "en",
            "--buckets", str(tmp_path / "b.csv")]
    assert main(argv) == 2
    assert "--buckets needs -i/--input, the source text" in capsys.readouterr().err


def test_length_buckets_table_on_stdout(files, capsys):
    argv = ["score", "--hyp", files["base"], "--hyp", files["better"], "--ref", files["ref"], "--lang", "en",
            "--metrics", "bleu", "--src", files["src"], "--length-buckets"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "by source length" in out
    assert f"| source words | sentences | reference length | {files['base']} BLEU |" in out
    assert main(argv[:-3] + ["--length-buckets"]) == 2
    assert "--length-buckets needs -i/--input" in capsys.readouterr().err


def test_stratified_ar_over_replicates_groups_the_files_per_system(files, tmp_path, capsys):
    """Baseline = (base, better), system = (better, base): the seeds disagree and the pooled
    outputs are equal, so p = 1; the same files as two single runs are significant."""
    flipped = ["score", "--hyp", files["base"], "--hyp", files["better"], "--hyp", files["better"],
               "--hyp", files["base"], "--ref", files["ref"], "--lang", "en", "--metrics", "bleu",
               "--significance", "stratified-ar", "--replicates", "2", "--samples", "300", "--json"]
    assert main(flipped) == 0
    result = json.loads(capsys.readouterr().out)["significance"]["results"]
    assert len(result) == 1 and result[0]["hyp"] == files["better"]
    assert result[0]["p_value"] == 1.0 and result[0]["replicates"] == 2
    # the replicate pairs differ by +d and −d: the t-test over them sees a mean of zero
    t_test = result[0]["t_over_replicates"]
    assert t_test["df"] == 1 and t_test["mean"] == pytest.approx(0.0) and t_test["p_value"] == pytest.approx(1.0)
    assert result[0]["system_replicates"][0] - result[0]["baseline_replicates"][0] > 1
    single = ["score", "--hyp", files["base"], "--hyp", files["better"], "--ref", files["ref"], "--lang", "en",
              "--metrics", "bleu", "--significance", "stratified-ar", "--samples", "300"]
    assert main(single) == 0
    out = capsys.readouterr().out
    assert "p = 0.0033 *" in out and "[1 replicates together; 300 trials]\n" in out  # one replicate: no t-test
    agreeing = ["score", "--hyp", files["base"], "--hyp", files["base"], "--hyp", files["better"],
                "--hyp", files["better"], *single[5:]]
    assert main(agreeing + ["--replicates", "2"]) == 0
    out = capsys.readouterr().out  # both replicate pairs gain the same: no spread, p = 0
    assert "[2 replicates together; 300 trials] [t-test over replicates: no spread, p = 0.0000]" in out


@pytest.mark.parametrize("extra, message", [
    (["--replicates", "2"], "--replicates groups the --hyp files for --significance stratified-ar only"),
    (["--significance", "stratified-ar", "--replicates", "2"], "needs a multiple of 2 --hyp files, at least two "
                                                                 "systems; got 3"),
    (["--significance", "stratified-ar", "--replicates", "0"], "--replicates must be positive"),
    (["--significance", "stratified-ar", "--seed", "-1"], "seed must be a positive integer or None, not -1"),
])
def test_bad_replicate_groupings_are_one_line_errors(files, capsys, extra, message):
    args = ["score", "--hyp", files["base"], "--hyp", files["better"], "--hyp", files["base"], "--ref", files["ref"],
            "--lang", "en"]
    assert main(args + extra) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_tokenised_scoring_takes_the_tokens_as_they_are(tmp_path, capsys):
    """Published systems' outputs come Moses-tokenised; --tokenised --lowercase is multi-bleu.perl -lc:
    'A b c d e' against 'a b c d f' has 1-4-gram precisions 4/5, 3/4, 2/3, 1/2 and no brevity penalty."""
    hyp, other, ref = tmp_path / "hyp", tmp_path / "other", tmp_path / "ref"
    hyp.write_text("A b c d e\n")
    other.write_text("a b c d f\n")
    ref.write_text("a b c d f\n")
    argv = ["score", "--tokenised", "--lowercase", "--metrics", "bleu", "--hyp", str(hyp), "--hyp", str(other),
            "--ref", str(ref), "--significance", "bootstrap", "--samples", "50", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    expected = 100 * (4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25
    assert out["systems"][0]["scores"]["bleu"]["value"] == pytest.approx(expected)
    assert out["systems"][1]["scores"]["bleu"]["value"] == pytest.approx(100.0)
    assert "case:lc" in out["significance"]["results"][0]["signature"]


@pytest.mark.parametrize("extra, message", [
    (["--lowercase"], "--lowercase applies to --tokenised scoring only"),
    (["--tokenised"], "--tokenised scores BLEU only: use --metrics bleu"),
    (["--tokenised", "--metrics", "bleu", "--hyp", "X", "--significance", "sign"],
     "--tokenised works with --significance bootstrap or ar, not sign"),
])
def test_tokenised_scoring_refuses_what_it_cannot_do(files, capsys, extra, message):
    extra = [files["base"] if e == "X" else e for e in extra]
    assert main(["score", "--hyp", files["base"], "--ref", files["ref"], *extra]) == 2
    assert message in capsys.readouterr().err


def test_a_bucket_width_below_one_is_a_one_line_error(files, capsys):
    assert main(["score", "--hyp", files["base"], "--ref", files["ref"], "--lang", "en", "--src", files["src"],
                 "--length-buckets", "--bucket-width", "0"]) == 2
    err = capsys.readouterr().err
    assert "bucket width must be at least 1, not 0" in err and len(err.strip().splitlines()) == 1


def test_tokenised_bleu_needs_the_outputs_language_and_tokenises_in_it(tmp_path, capsys):
    """--lang was 'en' unless given: Spanish output was Moses-tokenised by English rules.  Then
    a score without --lang was refused; now it gives what needs no language, and says so."""
    hyp, ref = tmp_path / "hyp.es", tmp_path / "ref.es"
    hyp.write_text("Dijo: «sí».\n", encoding="utf-8")
    ref.write_text("Dijo: «sí».\n", encoding="utf-8")
    assert main(["score", "--hyp", str(hyp), "--ref", str(ref), "--json"]) == 0
    out, err = capsys.readouterr()
    assert list(json.loads(out)["systems"][0]["scores"]) == ["bleu", "chrf", "ter"]
    assert err == "tokenised BLEU left out: --lang L (the output's language, e.g. --lang en) adds it\n"
    assert main(["score", "--hyp", str(hyp), "--ref", str(ref), "--metrics", "chrf"]) == 0  # no tokenisation
    assert capsys.readouterr().err == ""
    assert main(["score", "--hyp", str(hyp), "-r", str(ref), "--lang", "es", "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)["systems"][0]["scores"]
    assert scores["bleu_tok"]["pretok"] == "sacremoses-es"
    assert main(["score", "--tokenised", "--metrics", "bleu", "--hyp", str(hyp), "--ref", str(ref),
                 "--lang", "es"]) == 2
    assert "--tokenised files are scored as they are: leave out --lang" in capsys.readouterr().err


def test_the_source_is_given_as_for_every_other_command(files, capsys):
    """-i/--input is the source text, as in translate and analyze; --src stays an alias."""
    argv = ["score", "--hyp", files["base"], "-r", files["ref"], "--metrics", "chrf", "--length-buckets"]
    for flag in ("-i", "--input", "--src"):
        assert main([*argv, flag, files["src"]]) == 0
        assert "by source length" in capsys.readouterr().out


def test_the_usage_shows_what_score_needs_and_its_kinds(capsys):
    """It ended in `KIND ...`, as if a kind were required."""
    with pytest.raises(SystemExit):
        main(["score", "--help"])
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert usage == ("usage: ctxnmt score --hyp FILE [--hyp FILE ...] -r FILE [--lang L] [options]\n"
                     "       ctxnmt score contrastive MODEL_DIR [MODEL_DIR ...] FILE [options]")
    with pytest.raises(SystemExit):
        main(["score", "contrastive", "--help"])
    assert capsys.readouterr().out.startswith("usage: ctxnmt score contrastive [-h] ")
