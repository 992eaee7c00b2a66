"""`ctxnmt translate --doc-ids` with a document-context model: each line gets its own
previous lines of its document whatever the length sorting does; without ids the
model translates with empty context and says so once; bad ids are one-line errors."""
from __future__ import annotations

import pytest

from ctxnmt.cli import main
from ctxnmt.decoding.translator import Translator, search_ids
from tests.test_cli import document_corpus, run, small_corpus, write_config

DOCS = ["d1"] * 4 + ["d2"] * 3 + ["d3"]
LINES = ["el gato 1 .", "el gato 2 . el gato 3 .", "", "el gato 4 .", "el gato 5 . el gato 6 . el gato 7 .",
         "el gato 8 .", "el gato 9 . el gato 10 .", "el gato 11 ."]


@pytest.fixture(scope="module")
def doc_model_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("docmodel")
    data = document_corpus(tmp)
    cfg = write_config(tmp / "c.yaml", data, tmp / "m")
    code = main([str(a) for a in ["train", cfg, "--quiet", "--set", "training.max_updates=2",
                                  "--set", "model.doc_init_dec=true", "--set", "model.doc_aux=gated-aux",
                                  "--set", "model.doc_init_enc=true"]])
    assert code == 0
    return tmp / "m", data


def test_each_line_is_translated_with_its_own_previous_lines(doc_model_dir):
    translator = Translator.load(doc_model_dir[0])
    out = translator.translate(LINES, beam=2, doc_ids=DOCS, batch_size=3)
    assert len(out) == len(LINES) and out[2].text == ""
    assert_each_line_has_its_own_context(translator, out)


def test_without_document_ids_it_warns_once_and_uses_empty_context(doc_model_dir, tmp_path, capsys):
    src = tmp_path / "in.es"
    src.write_text("\n".join(LINES) + "\n")
    code, out, err = run(["translate", doc_model_dir[0], "-i", src, "--beam", "2"], capsys)
    assert code == 0 and len(out.split("\n")) == len(LINES) + 1
    assert err.count("no document ids were given") == 1
    translator = Translator.load(doc_model_dir[0])
    warnings = []
    translator.warn = warnings.append
    first = translator.translate(LINES[:2], beam=2)
    translator.translate(LINES[:2], beam=2)
    assert len(warnings) == 1
    alone = translator.translate(LINES[:2], beam=2, doc_ids=["x", "y"])  # two documents: no context either
    assert [t.score for t in first] == pytest.approx([t.score for t in alone], abs=1e-5)


def test_translate_with_document_ids_file(doc_model_dir, tmp_path, capsys):
    src, ids, hyp = tmp_path / "in.es", tmp_path / "in.doc", tmp_path / "out.en"
    src.write_text("\n".join(LINES) + "\n")
    ids.write_text("\n".join(DOCS) + "\n")
    code, _, err = run(["translate", doc_model_dir[0], "-i", src, "--doc-ids", ids, "-o", hyp, "--beam", "2"], capsys)
    assert code == 0 and "warning" not in err
    assert len(hyp.read_text().split("\n")) == len(LINES) + 1
    ids.write_text("\n".join(DOCS[:-1]) + "\n")
    code, _, err = run(["translate", doc_model_dir[0], "-i", src, "--doc-ids", ids, "-o", hyp], capsys)
    assert code == 2 and "in.doc: 7 document ids for 8 input lines" in err and len(err.strip().splitlines()) == 1


def test_training_a_context_model_needs_document_ids(tmp_path, capsys):
    data = small_corpus(tmp_path)
    cfg = write_config(tmp_path / "c.yaml", data, tmp_path / "m")
    code, _, err = run(["train", cfg, "--quiet", "--set", "model.doc_aux=aux"], capsys)
    errors = [line for line in err.splitlines() if "error" in line]
    assert code == 2 and len(errors) == 1 and "train.doc: no such file; a document-context model" in errors[0]


# -- ensembles with a document-context member, and documents separated by blank lines ------

@pytest.fixture(scope="module")
def sentence_model_dir(doc_model_dir, tmp_path_factory):
    """A sentence-level model on the document model's data: the same preprocessing and vocabularies."""
    tmp = tmp_path_factory.mktemp("sentmodel")
    cfg = write_config(tmp / "c.yaml", doc_model_dir[1], tmp / "m")
    assert main([str(a) for a in ["train", cfg, "--quiet", "--set", "training.max_updates=2",
                                  "--set", "model.hidden_dim=24"]]) == 0
    return tmp / "m"


@pytest.mark.parametrize("doc_first", [True, False])
def test_an_ensemble_with_a_document_member_reads_the_context_in_either_order(doc_model_dir, sentence_model_dir,
                                                                              doc_first):
    dirs = [doc_model_dir[0], sentence_model_dir] if doc_first else [sentence_model_dir, doc_model_dir[0]]
    translator = Translator.load(dirs)
    warnings = []
    translator.warn = warnings.append
    out = translator.translate(LINES, beam=2, doc_ids=DOCS, batch_size=3)
    assert len(out) == len(LINES) and out[2].text == "" and warnings == []
    assert_each_line_has_its_own_context(translator, out)


def test_an_ensemble_through_the_command_line_with_document_ids(doc_model_dir, sentence_model_dir, tmp_path, capsys):
    src, ids = tmp_path / "in.es", tmp_path / "in.doc"
    src.write_text("\n".join(LINES) + "\n")
    ids.write_text("\n".join(DOCS) + "\n")
    outputs = []
    for dirs in ([doc_model_dir[0], sentence_model_dir], [sentence_model_dir, doc_model_dir[0]]):
        hyp = tmp_path / f"out{len(outputs)}.en"
        code, _, err = run(["translate", *dirs, "-i", src, "--doc-ids", ids, "-o", hyp, "--beam", "2"], capsys)
        assert code == 0 and "warning" not in err
        outputs.append(hyp.read_text())
    assert outputs[0] == outputs[1] and len(outputs[0].split("\n")) == len(LINES) + 1


def test_documents_separated_by_blank_lines(doc_model_dir, tmp_path, capsys):
    """--doc-blank-lines: each run of non-blank lines is a document; blank lines stay blank,
    and the output equals that of --doc-ids with the same documents."""
    from ctxnmt.data.documents import blank_line_documents

    assert blank_line_documents(["", "a", "b", "", "", "c", ""]) == ["doc1", "doc1", "doc1", "doc1", "doc1",
                                                                       "doc2", "doc2"]
    blank = ["el gato 1 .", "el gato 2 .", "", "el gato 4 .", "el gato 5 . el gato 6 .", "", "", "el gato 8 ."]
    docs = ["a", "a", "a", "b", "b", "b", "b", "c"]
    src, ids, hyp, ref = tmp_path / "in.es", tmp_path / "in.doc", tmp_path / "out.en", tmp_path / "ref.en"
    src.write_text("\n".join(blank) + "\n")
    ids.write_text("\n".join(docs) + "\n")
    code, _, err = run(["translate", doc_model_dir[0], "-i", src, "--doc-blank-lines", "-o", hyp, "--beam", "2",
                        "--nbest", "2"], capsys)
    assert code == 0 and "warning" not in err
    code, _, _ = run(["translate", doc_model_dir[0], "-i", src, "--doc-ids", ids, "-o", ref, "--beam", "2",
                      "--nbest", "2"], capsys)
    assert code == 0 and hyp.read_text() == ref.read_text()
    code, _, _ = run(["translate", doc_model_dir[0], "-i", src, "-o", ref, "--beam", "2", "--nbest", "2"], capsys)
    assert code == 0 and hyp.read_text() != ref.read_text()  # without documents: other scores
    code, _, _ = run(["translate", doc_model_dir[0], "-i", src, "--doc-blank-lines", "-o", hyp], capsys)
    assert code == 0 and len(hyp.read_text().split("\n")[:-1]) == len(blank)
    code, _, err = run(["translate", doc_model_dir[0], "-i", src, "--doc-blank-lines", "--doc-ids", ids], capsys)
    assert code == 2 and "use one" in err and len(err.strip().splitlines()) == 1


def assert_each_line_has_its_own_context(translator, out):
    """Every output scores as its line decoded alone with its own document's previous
    lines as context, and for some line that context changes the score (it reaches the model)."""
    model, vocab, pre = translator.model, translator.src_vocab, translator.preprocessor
    ids = {n: vocab.encode(pre.encode(line, "src"), add_eos=False) for n, line in enumerate(LINES) if line}
    own_context = {0: [], 1: [0], 3: [0, 1], 4: [], 5: [4], 6: [4, 5], 7: []}  # line 2 is empty: no context
    changed = 0
    for n, previous in own_context.items():
        alone = search_ids(model, [ids[n]], translator.config.decoding, beam=2,
                           context=[[ids[j] for j in previous]])[0][0]
        assert out[n].score == pytest.approx(alone.score, abs=1e-4), n
        empty = search_ids(model, [ids[n]], translator.config.decoding, beam=2)[0][0]
        changed += previous != [] and abs(empty.score - alone.score) > 1e-4
    assert changed
