"""copy_into: a copied directory appears whole, its completion markers last, shared like any output."""
from __future__ import annotations

import os

import pytest

from ctxnmt.errors import DataError
from ctxnmt.utils import io
from ctxnmt.utils.io import atomic_write, copy_into, read_json_object


def sources(tmp_path, names, folder="src"):
    src = tmp_path / folder
    src.mkdir()
    for name in names:
        (src / name).write_text(name, encoding="utf-8")
    return [src / name for name in names]


@pytest.mark.parametrize("last", [("decode.json", "config.yaml"), ("config.yaml", "decode.json")])
def test_the_markers_named_last_are_moved_in_last_and_in_the_order_given(tmp_path, monkeypatch, last):
    """An interruption between two moves must never leave the first marker without the other:
    a restored run counts as present by config.yaml, and decode.json must be there by then."""
    files = sources(tmp_path, ["decode.json", "train.log", "config.yaml", "test.hyp.en", "a.json"])
    target = tmp_path / "run"
    target.mkdir()  # an existing directory: the files are moved in one by one
    moved = []
    replace = os.replace

    def recording(src, dst):
        moved.append(os.path.basename(dst))
        replace(src, dst)

    monkeypatch.setattr(io.os, "replace", recording)
    copy_into(files, target, last=last)
    assert tuple(moved[-2:]) == last
    assert sorted(p.name for p in target.iterdir()) == sorted(f.name for f in files)


def test_a_copied_directory_has_the_mode_mkdir_gives_not_mkdtemp_s(tmp_path):
    """mkdtemp makes 0700 directories; an export or a restored run is shared like any output."""
    (tmp_path / "out" / "swapped").mkdir(parents=True)
    umask = os.umask(0o022)
    try:
        copy_into(sources(tmp_path, ["a"]), tmp_path / "out" / "new")  # a new directory: moved in whole
        copy_into(sources(tmp_path, ["b"], "src2"), tmp_path / "out" / "swapped", replace=True)  # swapped in whole
    finally:
        os.umask(umask)
    for name in ("new", "swapped"):
        assert (tmp_path / "out" / name).stat().st_mode & 0o777 == 0o755, name


@pytest.mark.parametrize("text,message", [
    ("{\"update\": 3,", "not valid JSON (Expecting property name enclosed in double quotes at line 1 column 14)"),
    ("[1, 2]", "expected a JSON object, not list"),
    ("<<<<<<< HEAD\n{}\n", "not valid JSON (Expecting value at line 1 column 1)"),
])
def test_a_broken_json_record_is_a_one_line_error_naming_the_file(tmp_path, text, message):
    """A hand edit or a merge conflict in a committed done.json or report.json."""
    path = tmp_path / "done.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_json_object(path)
    assert str(err.value) == f"{path}: {message}"


def test_atomic_write_refuses_a_directory_before_its_body_runs(tmp_path):
    (tmp_path / "out").mkdir()
    ran = []
    with pytest.raises(DataError, match=r"out: is a directory, not a file to write$"):
        with atomic_write(tmp_path / "out"):
            ran.append(True)
    assert not ran and list(tmp_path.iterdir()) == [tmp_path / "out"]  # no temporary file left


def test_atomic_write_into_a_missing_directory_is_a_one_line_error(tmp_path):
    with pytest.raises(DataError, match=r"x\.txt: there is no directory .*missing to write it in$"):
        with atomic_write(tmp_path / "missing" / "x.txt"):
            pass
