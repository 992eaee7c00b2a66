"""`ctxnmt judge create` and the study file: sampling, sides, identical outputs, answers,
undo, resume, and one-line errors for every bad input."""
from __future__ import annotations

import sqlite3

import pytest

from ctxnmt.judge.study import next_item, open_study, progress, record_answer, undo_last
from tests.judge.common import OUTPUTS, SRC, write_study_inputs
from tests.test_cli import run


def create(tmp_path, capsys, *extra):
    return run(["judge", "create", *write_study_inputs(tmp_path), "-o", tmp_path / "study.sqlite", *extra], capsys)


def test_create_samples_every_pair_and_records_identical_outputs(tmp_path, capsys):
    code, out, _ = create(tmp_path, capsys, "--n", "5", "--seed", "3")
    assert code == 0
    # 5 non-empty lines × 3 pairs; identical: base/mean on uno, tres, cinco; base/self on dos, cuatro, cinco;
    # mean/self on cinco
    assert "5 sentences × 3 pairs = 15 items, 7 with identical outputs" in out
    with open_study(tmp_path / "study.sqlite") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        lines = [line for (line,) in db.execute("SELECT line FROM segments ORDER BY line")]
        assert lines == [1, 2, 3, 4, 6]  # the empty line 5 is never sampled
        pairs = set(db.execute("SELECT sys_a, sys_b FROM items"))
        assert pairs == {("base", "mean"), ("base", "self"), ("mean", "self")}
        for src, out_a, out_b, sys_a, sys_b, identical in db.execute(
                "SELECT s.src, i.out_a, i.out_b, i.sys_a, i.sys_b, i.identical FROM items i "
                "JOIN segments s ON s.id = i.segment"):
            k = SRC.index(src)
            assert (out_a, out_b) == (OUTPUTS[sys_a][k], OUTPUTS[sys_b][k])
            assert identical == (out_a == out_b)
        sides = {left for (left,) in db.execute("SELECT left_is_a FROM items")}
        assert sides == {0, 1}  # both sides occur
        assert progress(db, "ana") == (0, 8)


def test_same_seed_same_study_other_seed_other_sample(tmp_path, capsys):
    def items(path):
        with open_study(path) as db:
            return db.execute("SELECT segment, sys_a, left_is_a, position FROM items ORDER BY id").fetchall()

    args = write_study_inputs(tmp_path)
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        assert run(["judge", "create", *args, "--n", "3", "--seed", seed, "-o", tmp_path / name], capsys)[0] == 0
    assert items(tmp_path / "a") == items(tmp_path / "b")
    assert items(tmp_path / "a") != items(tmp_path / "c")


def test_answers_undo_and_resume(tmp_path, capsys):
    assert create(tmp_path, capsys, "--n", "5")[0] == 0
    with open_study(tmp_path / "study.sqlite") as db:
        first = next_item(db, "ana")
        assert set(first) == {"item", "src", "ref", "left", "right"}  # no system names reach the page
        record_answer(db, "ana", first["item"], "left")
        second = next_item(db, "ana")
        assert second["item"] != first["item"] and next_item(db, "ben") == first  # judges go separately
        record_answer(db, "ana", second["item"], "equal")
        assert progress(db, "ana") == (2, 8)
        assert undo_last(db, "ana") == second["item"]
        assert next_item(db, "ana") == second and progress(db, "ana") == (1, 8)
        assert undo_last(db, "ben") is None
    with open_study(tmp_path / "study.sqlite") as db:  # resume from the file alone
        assert next_item(db, "ana") == second


def test_bad_answers_are_refused(tmp_path, capsys):
    assert create(tmp_path, capsys, "--n", "5")[0] == 0
    with open_study(tmp_path / "study.sqlite") as db:
        item = next_item(db, "ana")["item"]
        record_answer(db, "ana", item, "right")
        for judge, it, choice, message in (("ana", item, "left", "already answered item"),
                                           ("ana", 999, "left", "no item 999"),
                                           ("ana", item + 1, "better", "choice must be one of"),
                                           ("  ", item, "left", "judge name is empty")):
            try:
                record_answer(db, judge, it, choice)
            except Exception as err:  # noqa: BLE001
                assert message in str(err)
            else:
                raise AssertionError(f"accepted {judge, it, choice}")
        identical = db.execute("SELECT id FROM items WHERE identical = 1 LIMIT 1").fetchone()[0]
        try:
            record_answer(db, "ana", identical, "left")
        except Exception as err:  # noqa: BLE001
            assert f"no item {identical}" in str(err)
        assert db.execute("SELECT COUNT(*) FROM answers").fetchone()[0] == 1


def test_create_errors_are_one_line_and_leave_nothing(tmp_path, capsys):
    args = write_study_inputs(tmp_path)
    out = tmp_path / "study.sqlite"
    (tmp_path / "short.en").write_text("one\n", encoding="utf-8")
    cases = [
        (["--n", "6"], "--n 6 is more than the 5 non-empty source lines"),
        (["--n", "0"], "--n must be at least 1"),
        (["--system", f"base={tmp_path / 'base.en'}"], "--system name 'base' is given twice"),
        (["--system", f"short={tmp_path / 'short.en'}"], "short.en (system short) has 1 lines but"),
        (["--system", "nofile"], "--system 'nofile': expected NAME=FILE"),
        (["--system", f"x={tmp_path / 'missing.en'}"], "missing.en: no such file"),
        (["-o", tmp_path / "no-dir" / "s.sqlite"], "s.sqlite: there is no directory"),  # was sqlite's traceback
    ]
    for extra, message in cases:
        code, _, err = run(["judge", "create", *args, "-o", out, *extra], capsys)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (extra, err)
        assert not out.exists() and not list(tmp_path.glob(".study*"))
    code, _, err = run(["judge", "create", "--src", tmp_path / "src.es", "--system", f"a={tmp_path / 'base.en'}",
                        "-o", out], capsys)
    assert code == 2 and "at least two --system" in err
    assert run(["judge", "create", *args, "--n", "3", "-o", out], capsys)[0] == 0
    before = out.read_bytes()
    code, _, err = run(["judge", "create", *args, "--n", "3", "-o", out], capsys)
    assert code == 2 and "already exists" in err and out.read_bytes() == before


def test_opening_a_foreign_or_other_version_file_is_a_one_line_error(tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    assert create(tmp_path, capsys, "--n", "2")[0] == 0
    newer = tmp_path / "study.sqlite"
    with sqlite3.connect(newer) as db:
        db.execute("UPDATE meta SET value = '99' WHERE key = 'version'")
    for path, message in ((text, "not a ctxnmt judge study"), (other, "not a ctxnmt judge study"),
                          (newer, "study version 99 but this ctxnmt reads version 1"),
                          (tmp_path / "none.sqlite", "no such study file")):
        for action in (["report", path], ["serve", path, "--port", "0"]):
            code, _, err = run(["judge", *action], capsys)
            assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (action, err)


@pytest.mark.parametrize("port", ["-1", "65536"])
def test_serving_on_a_port_out_of_range_is_a_one_line_error(tmp_path, capsys, port):
    assert create(tmp_path, capsys, "--n", "2")[0] == 0
    code, _, err = run(["judge", "serve", tmp_path / "study.sqlite", "--port", port], capsys)
    assert code == 2 and err.strip() == f"ctxnmt judge: error: --port must be between 0 and 65535, not {port}"
