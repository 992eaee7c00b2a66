import os

import pytest

from ctxnmt.data.corpus import decode_lines, read_lines, read_parallel, write_lines_atomic
from ctxnmt.errors import DataError
from ctxnmt.utils.io import atomic_write


def write(path, data: bytes):
    path.write_bytes(data)
    return path


def test_read_lines_strips_newlines_and_carriage_returns(tmp_path):
    path = write(tmp_path / "a.txt", "uno\r\ndos\n\ntrés".encode())
    assert read_lines(path) == ["uno", "dos", "", "trés"]


def test_read_lines_invalid_utf8_names_file_line_and_column(tmp_path):
    path = write(tmp_path / "bad.es", b"hola\nadi\xc3s\nok\xff\n")
    with pytest.raises(DataError) as err:
        read_lines(path)
    assert str(err.value) == f"{path}:2: invalid UTF-8 (byte 0xc3 at column 4)"


def test_read_lines_missing_file(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        read_lines(tmp_path / "nope.txt")


def test_read_lines_empty_file(tmp_path):
    path = write(tmp_path / "empty.en", b"")
    with pytest.raises(DataError) as err:
        read_lines(path)
    assert str(err.value) == f"{path}: file is empty"


def test_read_parallel_aligned(tmp_path):
    src = write(tmp_path / "train.es", b"a\nb\n")
    tgt = write(tmp_path / "train.en", b"A\nB\n")
    doc = write(tmp_path / "train.doc", b"d1\nd1\n")
    corpus = read_parallel(src, tgt, doc)
    assert (corpus.src, corpus.tgt, corpus.docs, len(corpus)) == (["a", "b"], ["A", "B"], ["d1", "d1"], 2)
    assert read_parallel(src, tgt).docs is None


def test_read_parallel_length_mismatch_names_both_files_and_counts(tmp_path):
    src = write(tmp_path / "train.es", b"a\nb\nc\n")
    tgt = write(tmp_path / "train.en", b"A\nB\n")
    with pytest.raises(DataError) as err:
        read_parallel(src, tgt)
    assert str(err.value) == f"{src} has 3 lines but {tgt} has 2"


def test_read_parallel_doc_mismatch(tmp_path):
    src = write(tmp_path / "train.es", b"a\nb\n")
    tgt = write(tmp_path / "train.en", b"A\nB\n")
    doc = write(tmp_path / "train.doc", b"d1\n")
    with pytest.raises(DataError, match=r"train\.es has 2 lines but .*train\.doc has 1"):
        read_parallel(src, tgt, doc)


def test_write_lines_atomic_round_trip(tmp_path):
    path = tmp_path / "out.txt"
    write_lines_atomic(path, ["é", "", "z"])
    assert path.read_bytes() == "é\n\nz\n".encode()
    assert read_lines(path) == ["é", "", "z"]


def test_write_lines_atomic_rejects_embedded_newline(tmp_path):
    path = write(tmp_path / "out.txt", b"old\n")
    with pytest.raises(ValueError):
        write_lines_atomic(path, ["ok", "two\nlines"])
    assert path.read_bytes() == b"old\n"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_atomic_write_leaves_target_untouched_on_exception(tmp_path):
    path = write(tmp_path / "model.pt", b"previous")
    with pytest.raises(RuntimeError):
        with atomic_write(path, "wb") as handle:
            handle.write(b"partial")
            raise RuntimeError("crash mid-write")
    assert path.read_bytes() == b"previous"
    assert os.listdir(tmp_path) == ["model.pt"]  # no temporary file left behind


def test_atomic_write_creates_file_with_normal_permissions(tmp_path):
    path = tmp_path / "new.txt"
    with atomic_write(path) as handle:
        handle.write("text\n")
    assert path.read_text(encoding="utf-8") == "text\n"
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_read_lines_allow_empty(tmp_path):
    assert read_lines(write(tmp_path / "empty.txt", b""), allow_empty=True) == []


def test_decode_lines_names_the_source():
    assert decode_lines(b"a\r\nb\n", "<stdin>") == ["a", "b"]
    with pytest.raises(DataError, match=r"^<stdin>:1: invalid UTF-8 \(byte 0xff at column 1\)$"):
        decode_lines(b"\xff\n", "<stdin>")
