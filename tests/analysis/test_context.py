"""`ctxnmt analyze context`: the inputs that take a document model's context away or give it
another document's, and the command end to end on a small document model."""
from __future__ import annotations

import pytest

from ctxnmt.analysis.context import no_context, other_context
from ctxnmt.errors import DataError
from ctxnmt.evaluation.metrics import score_all
from tests.test_cli import run, small_corpus, write_config

DOCS = ["a", "a", "a", "a", "a", "b", "b", "c", "c", "c", "c"]
SRC = [f"s{i}" for i in range(len(DOCS))]


def test_other_context_keeps_each_sentence_and_the_amount_of_its_context():
    given = other_context(SRC, DOCS, k=3, seed=5)
    assert [given.lines[i] for i in given.keep] == SRC
    for i, at in enumerate(given.keep):
        context = [j for j in range(len(given.lines)) if given.doc_ids[j] == given.doc_ids[at] and j < at]
        own = DOCS[:i].count(DOCS[i])
        assert len(context) == min(3, own)
        lent = [int(given.lines[j][1:]) for j in context]
        assert len({DOCS[j] for j in lent}) <= 1 and all(DOCS[j] != DOCS[i] for j in lent)
        assert lent == list(range(lent[0], lent[0] + len(lent))) if lent else True  # consecutive
    assert other_context(SRC, DOCS, k=3, seed=5) == given and other_context(SRC, DOCS, k=3, seed=6) != given


def test_no_context_puts_every_sentence_in_its_own_document():
    given = no_context(SRC)
    assert given.lines == SRC and len(set(given.doc_ids)) == len(SRC)


def test_a_context_no_other_document_can_lend_is_a_clear_error():
    with pytest.raises(DataError, match="line 3: no other document has the 2 sentences"):
        other_context(["x"] * 5, ["a", "a", "a", "a", "b"], k=3, seed=1)


def test_context_command_end_to_end(tmp_path, capsys):
    data = small_corpus(tmp_path)
    for split in ("train", "dev"):
        (data / f"{split}.doc").write_text("".join(f"d{i // 4}\n" for i in range(12)), encoding="utf-8")
    cfg = write_config(tmp_path / "c.yaml", data, tmp_path / "m")
    assert run(["train", cfg, "--quiet", "--set", "training.max_updates=3", "--set", "training.valid_bleu=false",
                "--set", "model.doc_init_enc=true", "--set", "model.doc_aux=gated-aux"], capsys)[0] == 0
    out = tmp_path / "ctx"
    args = ["analyze", "context", tmp_path / "m", "-i", data / "dev.es", "--doc-ids", data / "dev.doc",
            "-r", data / "dev.en", "--beam", "2", "--out-dir", out]
    code, stdout, _ = run(args, capsys)
    assert code == 0
    refs = (data / "dev.en").read_text(encoding="utf-8").splitlines()
    hyps = {name: (out / f"{name}.txt").read_text(encoding="utf-8").splitlines() for name in ("own", "none", "other")}
    for name, lines in hyps.items():
        assert len(lines) == 12
        assert f"| {name} | {score_all(lines, refs)['bleu'].value:.2f} |" in stdout
    starts = [0, 4, 8]  # a document's first sentence has no context in any condition
    assert [hyps["own"][i] for i in starts] == [hyps["none"][i] for i in starts] == [hyps["other"][i] for i in starts]
    code, own, _ = run(["translate", tmp_path / "m", "-i", data / "dev.es", "--doc-ids", data / "dev.doc",
                        "--beam", "2"], capsys)
    assert own.splitlines() == hyps["own"]

    # the forced-decoding analyses give a model no context: a document model is refused, not misdescribed
    tags = tmp_path / "dev.tags"
    tags.write_text("".join("X " * len(line.split()) + "\n" for line in
                            (data / "dev.es").read_text(encoding="utf-8").splitlines()), encoding="utf-8")
    for analysis in (["alignment", tmp_path / "m", "-i", data / "dev.es", "-r", data / "dev.en", "--silver"],
                     ["gates", tmp_path / "m", "-i", data / "dev.es", "--tags", tags],
                     ["target-attention", tmp_path / "m", "-i", data / "dev.es"]):
        code, _, err = run(["analyze", *analysis], capsys)
        assert code == 2 and "a document-context model;" in err and len(err.strip().splitlines()) == 1, analysis

    (data / "short.doc").write_text("d0\n", encoding="utf-8")
    code, _, err = run([*args[:6], data / "short.doc", *args[7:]], capsys)
    assert code == 2 and "short.doc has 1 lines but" in err and len(err.strip().splitlines()) == 1


def test_context_command_refuses_a_model_without_document_context(tmp_path, capsys):
    data = small_corpus(tmp_path)
    (data / "dev.doc").write_text("d\n" * 12, encoding="utf-8")
    cfg = write_config(tmp_path / "c.yaml", data, tmp_path / "m")
    assert run(["train", cfg, "--quiet", "--set", "training.max_updates=1", "--set", "training.valid_bleu=false"],
               capsys)[0] == 0
    code, _, err = run(["analyze", "context", tmp_path / "m", "-i", data / "dev.es", "--doc-ids", data / "dev.doc",
                        "-r", data / "dev.en"], capsys)
    assert code == 2 and "reads no document context" in err
