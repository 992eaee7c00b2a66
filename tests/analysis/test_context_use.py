"""Context use: forced scoring, CXMI (`analyze cxmi`) and contrastive scoring (`score
contrastive`), held to values computed here from the model's teacher-forced forward pass and
to a constructed corpus in which only the previous sentence decides the pronoun."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from ctxnmt.cli import main
from ctxnmt.analysis.contrastive import Example, condition_contexts, read_examples
from ctxnmt.evaluation.significance import mcnemar, wilson
from ctxnmt.data.batching import pad, pad_context
from ctxnmt.data.documents import previous_sentences
from ctxnmt.decoding.translator import Translator
from ctxnmt.errors import DataError
from tests.test_cli import run

# The pronoun of the second sentence of each two-sentence document is his or her as the first
# sentence's name is a man's or a woman's: the second sentence alone never tells.
MEN = {"Juan": "John", "Pedro": "Peter", "Pablo": "Paul"}
WOMEN = {"María": "Mary", "Ana": "Anna", "Marta": "Martha"}
THINGS = {"casa": "house", "perro": "dog", "libro": "book", "campo": "field"}
QUALITIES = {"grande": "big", "nuevo": "new", "bueno": "good"}

CONFIG = """
name: pronouns
model_dir: {model_dir}
data: {{corpus: files, dir: {data}, bpe_merges: 0, max_len: 20, truecase: false}}
model: {{emb_dim: 24, hidden_dim: 32, att_dim: 24, dropout_out: 0.0{model}}}
training: {{batch_tokens: 2000, batch_sents: 48, max_updates: {updates}, valid_every: 1000, valid_bleu: false,
           log_every: 100, seed: 3, lr: 0.01, threads: 1}}
decoding: {{beam: 2, batch_size: 32, int8_from: 0}}
"""  # int8_from 0: every product of these small models in int8, not only those of a million multiply-adds
DOCUMENT_MODEL = ", doc_init_enc: true, doc_init_dec: true, doc_aux: gated-aux, doc_sents: 1"


def documents():
    """(document id, Spanish, English) of every sentence, two sentences a document."""
    out = []
    for name, (es_name, en_name) in enumerate([*MEN.items(), *WOMEN.items()]):
        pronoun = "his" if es_name in MEN else "her"
        for thing, (es_thing, en_thing) in enumerate(THINGS.items()):
            for quality, (es_q, en_q) in enumerate(QUALITIES.items()):
                doc = f"d{name}.{thing}.{quality}"
                out.append((doc, f"vino {es_name} .", f"{en_name} came ."))
                out.append((doc, f"su {es_thing} es {es_q} .", f"{pronoun} {en_thing} is {en_q} ."))
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A document model and a sentence model trained on the constructed corpus."""
    root = tmp_path_factory.mktemp("pronouns")
    data = root / "data"
    data.mkdir()
    rows = documents()
    for split in ("train", "dev"):
        for column, ext in ((0, "doc"), (1, "es"), (2, "en")):
            (data / f"{split}.{ext}").write_text("".join(r[column] + "\n" for r in rows), encoding="utf-8")
    models = {}
    for name, model, updates in (("document", DOCUMENT_MODEL, 150), ("sentence", "", 40)):
        cfg = root / f"{name}.yaml"
        cfg.write_text(CONFIG.format(model_dir=root / name, data=data, model=model, updates=updates))
        assert main(["train", str(cfg), "--quiet"]) == 0
        models[name] = root / name
    return root, data, models


def examples_file(path, rows) -> list[Example]:
    """Every second sentence as an example: the right pronoun against the other one."""
    items = []
    for (doc, es1, _), (_, es2, en2) in zip(rows[::2], rows[1::2]):
        wrong = en2.replace("his", "her") if en2.startswith("his") else en2.replace("her", "his")
        items.append({"document id": doc, "context": [es1], "source": es2, "ref segment": en2,
                      "errors": [{"contrastive": wrong, "replacement": wrong.split()[0]}], "tag": "possessive",
                      "ante distance": 1})
    path.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    return read_examples(str(path))


def teacher_forced(translator, sources, targets, contexts) -> list[float]:
    """Σ_t log p(y_t | y_<t, x, C) from the model's whole-sentence forward pass."""
    model = translator.model
    src = [translator.src_vocab.encode(translator.preprocessor.encode(s, "src"), add_eos=False) for s in sources]
    tgt = [translator.tgt_vocab.encode(translator.preprocessor.encode(t, "tgt")) for t in targets]
    ctx = [[translator.src_vocab.encode(translator.preprocessor.encode(c, "src"), add_eos=False) for c in cs]
           for cs in contexts]
    (s, sm), (t, tm) = pad(src), pad(tgt)
    with torch.no_grad():
        readout, _ = model(s, sm, t, tm, pad_context(ctx, 1) if model.document is not None else None)
        logp = torch.log_softmax(model.generator(readout), -1).gather(2, t[..., None]).squeeze(2)
    return [float((logp[b] * tm[b]).sum()) for b in range(len(sources))]


def test_forced_scores_are_the_teacher_forced_log_probabilities(trained):
    _, _, models = trained
    translator = Translator.load(models["document"])
    rows = documents()[:12]
    lines, docs, refs = [r[1] for r in rows], [r[0] for r in rows], [r[2] for r in rows]
    scores = translator.score(lines, refs, docs)
    contexts = [[lines[j] for j in js] for js in previous_sentences(docs, 1)]
    expected = teacher_forced(translator, lines, refs, contexts)
    assert [s.total for s in scores] == pytest.approx(expected, abs=1e-4)
    assert scores[1].tokens == ["her" if "Mar" in lines[0] else "his", "house", "is", "big", ".", "</s>"]
    # a context line is read, not scored
    half = translator.score(lines[:2], [None, refs[1]], docs[:2])
    assert half[0] is None and half[1].total == pytest.approx(scores[1].total, abs=1e-5)


def test_cxmi_is_the_mean_difference_of_summed_log_probabilities(trained, tmp_path, capsys):
    _, data, models = trained
    rows = documents()[:24]
    for ext, column in (("es", 1), ("en", 2), ("doc", 0)):
        (tmp_path / f"t.{ext}").write_text("".join(r[column] + "\n" for r in rows), encoding="utf-8")
    code, out, _ = run(["analyze", "cxmi", models["document"], "-i", tmp_path / "t.es", "-r", tmp_path / "t.en",
                        "--doc-ids", tmp_path / "t.doc", "--contexts", "none", "--no-pos", "--min-count", "1",
                        "-o", tmp_path / "cx"], capsys)
    assert code == 0
    translator = Translator.load(models["document"])
    lines, docs, refs = [r[1] for r in rows], [r[0] for r in rows], [r[2] for r in rows]
    own = teacher_forced(translator, lines, refs, [[lines[j] for j in js] for js in previous_sentences(docs, 1)])
    none = teacher_forced(translator, lines, refs, [[] for _ in lines])
    tokens = sum(len(r.split()) + 1 for r in refs)  # no subwords here (bpe_merges 0): words + </s>
    report = json.loads((tmp_path / "cx" / "cxmi.json").read_text())
    assert report["conditions"]["none"]["cxmi"] == pytest.approx((sum(own) - sum(none)) / tokens, abs=1e-5)
    assert report["conditions"]["none"]["tokens"] == tokens
    low, high = report["conditions"]["none"]["interval"]
    assert low <= report["conditions"]["none"]["cxmi"] <= high
    # the documents' first sentences have no context either way: their tokens' P-CXMI is 0
    table = (tmp_path / "cx" / "tokens.tsv").read_text().splitlines()
    firsts = [line.split("\t") for line in table[1:] if int(line.split("\t")[0]) % 2 == 1]
    assert firsts and all(abs(float(cells[-1])) < 1e-5 for cells in firsts)
    # the pronoun is what the context decides: it has the largest P-CXMI of the words
    assert report["words"][0]["key"] in ("his", "her")
    assert "| none |" in out


def test_only_the_document_model_gets_the_pronouns_right(trained, tmp_path, capsys):
    _, _, models = trained
    examples_file(tmp_path / "pronouns.json", documents())
    code, out, _ = run(["score", "contrastive", models["document"], tmp_path / "pronouns.json",
                        "-o", tmp_path / "doc.json"], capsys)
    assert code == 0
    report = json.loads((tmp_path / "doc.json").read_text())
    assert report["conditions"]["own"]["accuracy"] >= 0.9
    # every source comes with both pronouns equally often: without the context a model can only
    # prefer the same pronoun for both, exactly half right
    assert report["conditions"]["none"]["accuracy"] == 0.5
    assert report["conditions"]["none"]["p_vs_own"] < 0.05
    code, out, _ = run(["score", "contrastive", models["sentence"], tmp_path / "pronouns.json",
                        "-o", tmp_path / "sent.json"], capsys)
    sentence = json.loads((tmp_path / "sent.json").read_text())
    assert code == 0 and list(sentence["conditions"]) == ["own"] and sentence["conditions"]["own"]["accuracy"] == 0.5
    assert "reads no document context" in out


def test_an_ensemble_scores_with_its_combined_probabilities(trained, tmp_path, capsys):
    _, _, models = trained
    examples_file(tmp_path / "pronouns.json", documents()[:12])
    reports = []
    for dirs in ([models["document"]], [models["sentence"]], [models["document"], models["sentence"]]):
        out = tmp_path / f"r{len(reports)}.json"
        assert run(["score", "contrastive", *dirs, tmp_path / "pronouns.json", "--contexts", "own", "-o", out],
                   capsys)[0] == 0
        reports.append(np.array(json.loads(out.read_text())["scores"]["own"]))
    # logprob mode: each token's log-probability is the members' mean, and so is each sum
    assert reports[2] == pytest.approx((reports[0] + reports[1]) / 2, abs=1e-4)


def test_other_context_lends_as_many_sentences_of_another_document():
    examples = [Example("s", "c", ["w"], [f"{d}{i}" for i in range(n)], d) for d, n in
                (("a", 2), ("a", 1), ("b", 3), ("c", 0), ("d", 3))]
    lent = condition_contexts(examples, "other", seed=4)
    for example, context in zip(examples, lent):
        assert len(context) == len(example.context)
        assert not context or context[0][0] != example.document
    assert condition_contexts(examples, "none") == [[]] * 5
    assert condition_contexts(examples, "other", seed=4) == lent
    with pytest.raises(DataError, match="example 3: no example of another document has the 3 context sentences"):
        condition_contexts(examples[:4], "other")


def test_wilson_and_mcnemar_against_hand_computed_values():
    low, high = wilson(8, 10)  # p = 0.8, n = 10, z = 1.96
    z = 1.959964
    centre, half = (0.8 + z * z / 20) / (1 + z * z / 10), z * math.sqrt(0.016 + z * z / 400) / (1 + z * z / 10)
    assert (low, high) == pytest.approx((centre - half, centre + half)) and low == pytest.approx(0.4902, abs=1e-4)
    first = np.array([True] * 7 + [False] * 1 + [True] * 5)
    second = np.array([False] * 7 + [True] * 1 + [True] * 5)
    assert mcnemar(first, second) == pytest.approx(2 * (1 + 8) / 256)  # b = 7, c = 1: 2 P(X ≤ 1), X ~ B(8, ½)
    assert mcnemar(first, first) == 1.0


@pytest.mark.parametrize("content, message", [
    ('[{"source": "a", "ref segment": "b", "errors": []}]', "example 1: no contrastive target"),
    ('[{"source": "a", "ref segment": "b", "errors": [{"contrastive": "c"}]}, 3]',
     "example 2: an object was expected"),
    ('[{"source": "a", "errors": [{"contrastive": "c"}]}]', "example 1: no 'ref segment' text"),
    ('[{"source": "a", "ref segment": "b",\n "errors": [{"contrastive": "c"}],}]', "not valid JSON at line 2"),
    ("document\ttag\tsource\n", "the header must be"),
    ("document\ttag\tcontext\tsource\tcorrect\tcontrastive\nd\tt\t\ts\tc\n", ":2: 5 columns"),
])
def test_bad_example_files_are_refused_naming_the_example(tmp_path, content, message):
    path = tmp_path / "x.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=message):
        read_examples(str(path))


def test_tsv_examples(tmp_path):
    path = tmp_path / "x.tsv"
    path.write_text("document\ttag\tcontext\tsource\tcorrect\tcontrastive\tcontrastive\n"
                    "d1\tposs\tvino Juan . ||| y se fue .\tsu casa\this house\ther house\ttheir house\n",
                    encoding="utf-8")
    (example,) = read_examples(str(path))
    assert example.context == ["vino Juan .", "y se fue ."] and example.contrastive == ["her house", "their house"]
    assert example.tag == "poss" and example.document == "d1"


def test_cxmi_command_errors(trained, tmp_path, capsys):
    _, data, models = trained
    (tmp_path / "short.doc").write_text("d0\n", encoding="utf-8")
    base = ["analyze", "cxmi", models["document"], "-i", data / "dev.es", "-r", data / "dev.en"]
    code, _, err = run([*base, "--doc-ids", tmp_path / "short.doc"], capsys)
    assert code == 2 and "short.doc has 1 lines but" in err and len(err.strip().splitlines()) == 1
    code, _, err = run([*base, "--doc-ids", data / "dev.doc", "--contexts", "own"], capsys)
    assert code == 2 and err.strip().endswith("--contexts: a comma-separated choice of none, other, not 'own'")
    code, _, err = run(["score", "contrastive", models["document"], tmp_path / "unread.json", "--contexts",
                        "own,,nobody"], capsys)
    assert code == 2 and err.strip().endswith(
        "--contexts: a comma-separated choice of own, none, other, not 'own,,nobody'")
    code, _, err = run(["analyze", "cxmi", models["sentence"], "-i", data / "dev.es", "-r", data / "dev.en",
                        "--doc-ids", data / "dev.doc"], capsys)
    assert code == 2 and "reads no document context" in err


def test_contrastive_scores_and_cxmi_in_int8_are_near_float32s(trained, tmp_path, capsys):
    """score contrastive and analyze cxmi --precision int8: the forced scores move a little
    (int8 products ran), and the pronoun verdict and CXMI stay."""
    _, _, models = trained
    examples_file(tmp_path / "pronouns.json", documents())
    reports = {}
    for precision in ("fp32", "int8"):
        out = tmp_path / f"{precision}.json"
        assert run(["score", "contrastive", models["document"], tmp_path / "pronouns.json", "--precision", precision,
                    "-o", out], capsys)[0] == 0
        reports[precision] = json.loads(out.read_text())
    fp32, int8 = (np.array(reports[p]["scores"]["own"]) for p in ("fp32", "int8"))
    assert 0 < abs(int8 - fp32).max() < 0.5
    assert reports["int8"]["conditions"]["own"]["accuracy"] >= 0.9
    assert reports["int8"]["conditions"]["none"]["accuracy"] == 0.5
    rows = documents()[:24]
    for ext, column in (("es", 1), ("en", 2), ("doc", 0)):
        (tmp_path / f"t.{ext}").write_text("".join(r[column] + "\n" for r in rows), encoding="utf-8")
    cxmi = {}
    for precision in ("fp32", "int8"):
        assert run(["analyze", "cxmi", models["document"], "-i", tmp_path / "t.es", "-r", tmp_path / "t.en",
                    "--doc-ids", tmp_path / "t.doc", "--contexts", "none", "--no-pos", "--precision", precision,
                    "-o", tmp_path / precision], capsys)[0] == 0
        cxmi[precision] = json.loads((tmp_path / precision / "cxmi.json").read_text())["conditions"]["none"]["cxmi"]
    assert cxmi["int8"] != cxmi["fp32"] and cxmi["int8"] == pytest.approx(cxmi["fp32"], abs=0.05)
