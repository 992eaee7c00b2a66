"""The JSON API through FastAPI's TestClient: answers against the Translator and the
analysis functions they come from, /v1/models, /health, /docs, document mode, and a
one-line 4xx for each kind of bad input (after which the server still answers)."""
from __future__ import annotations

import asyncio
import json

import pytest
import torch
from fastapi.testclient import TestClient

from ctxnmt.analysis.forced import target_attention
from ctxnmt.config import DecodingConfig
from ctxnmt.analysis.gates import encoder_gates, output_weights
from ctxnmt.data.vocab import EOS
from ctxnmt.decoding.translator import Translator
from ctxnmt.serve.app import _read_body, create_app
from ctxnmt.serve.requests import RequestError
from ctxnmt.serve.settings import Limits, ServeSettings


def as_tensor(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


LINES = ["el gato 3 .", "", "el gato 5 . el gato 6 .", "el gato 7 ."]
LENGTH_FIELDS = ("length_penalty", "length_penalty_kind", "coverage_penalty", "max_len_a", "max_len_b", "max_len_rule",
                 "block_ngram_repeat", "length_ratio_penalty", "length_ratio", "length_ratio_rule")
DEFAULT_LENGTH = {key: getattr(DecodingConfig(), key) for key in LENGTH_FIELDS}  # the shipped defaults


def client_for(dirs: list, **settings) -> tuple[TestClient, Translator]:
    translator = Translator.load([str(d) for d in dirs] if len(dirs) > 1 else dirs[0])
    settings.setdefault("beam", 3)
    return TestClient(create_app(translator, [str(d) for d in dirs], ServeSettings(**settings))), translator


@pytest.fixture(scope="module")
def rich(model_dirs):
    client, translator = client_for([model_dirs["rich"]], limits=Limits(8, 300, 12))
    with client:
        yield client, translator


def test_translations_are_the_translators(rich):
    client, translator = rich
    answer = client.post("/v1/translate", json={"text": "\n".join(LINES), "beam": 2, "nbest": 2})
    assert answer.status_code == 200
    body = answer.json()
    expected = translator.translate(LINES, beam=2, nbest=2)
    assert body["beam"] == 2 and len(body["sentences"]) == len(LINES)
    for got, want in zip(body["sentences"], expected):
        assert got["translation"] == want.text
        assert got["score"] == pytest.approx(want.score, abs=1e-3)
        assert [h["translation"] for h in got["nbest"]] == [h.text for h in want.nbest]
        assert "attention" not in got and "context" not in got
    assert body["sentences"][1] == {"translation": "", "score": 0.0, "nbest": []}  # an empty line stays empty
    assert len(body["sentences"][0]["nbest"]) == 2
    assert body["sentences"][0]["nbest"][0]["score"] >= body["sentences"][0]["nbest"][1]["score"]
    # a list of sentences is the same as lines, and the server's --beam is the default
    listed = client.post("/v1/translate", json={"text": LINES}).json()
    assert [s["translation"] for s in listed["sentences"]] == [t.text for t in translator.translate(LINES, beam=3)]


def test_attention_target_attention_and_gates_are_the_analysis_values(rich):
    client, translator = rich
    s = client.post("/v1/translate", json={"text": LINES[0], "attention": True}).json()["sentences"][0]
    want = translator.translate(LINES[:1], beam=3, return_attention=True)[0]
    assert s["src_tokens"] == want.src_tokens and s["tokens"] == want.tokens
    T, S = len(s["tokens"]) + 1, len(s["src_tokens"])
    assert as_tensor(s["attention"]).shape == (T, S)
    torch.testing.assert_close(as_tensor(s["attention"]), want.attention.double(), atol=6e-5, rtol=0)
    model, src = translator.model, [translator.src_vocab.encode(want.src_tokens, add_eos=False)]
    out = [translator.tgt_vocab.encode(want.tokens, add_eos=False)]
    alpha = target_attention(model, src, [out[0] + [EOS]])[0]
    got = as_tensor(s["target_attention"])
    assert got.shape == (T, T) and torch.all(got.triu(1) == 0)  # only earlier words are attended
    torch.testing.assert_close(got, alpha.double(), atol=6e-5, rtol=0)
    for name, values in encoder_gates(model, src).items():
        torch.testing.assert_close(as_tensor(s["gates"]["encoder"][name]), values[0].double(), atol=6e-5, rtol=0)
    assert set(s["gates"]["encoder"]) == {"forward", "backward"}
    alphas = output_weights(model, src, out)[0]
    for j, name in enumerate(("alpha_s", "alpha_y", "alpha_c")):
        torch.testing.assert_close(as_tensor(s["gates"]["output"][name]), alphas[:, j].double(), atol=6e-5, rtol=0)


def test_a_baseline_has_source_attention_only(model_dirs):
    client, _ = client_for([model_dirs["base"]])
    with client:
        s = client.post("/v1/translate", json={"text": "el gato 3 .", "attention": True}).json()["sentences"][0]
        signals = client.get("/v1/models").json()["signals"]
    assert s["attention"] and s["target_attention"] is None and s["gates"] is None
    assert signals == {"target_attention": False, "encoder_gates": False, "output_gates": False,
                       "document_context": False}


def test_models_health_and_docs(rich):
    client, translator = rich
    info = client.get("/v1/models").json()
    member = info["models"][0]
    assert info["ensemble"] is False and info["signals"]["target_attention"] and info["signals"]["output_gates"]
    assert member["parameters"] == sum(p.numel() for p in translator.model.parameters())
    assert member["architecture"]["target_context"] == "self-attentive" and member["architecture"]["hidden_dim"] == 48
    assert member["vocabularies"]["source"] == {"language": "es", "size": len(translator.src_vocab)}
    assert member["checkpoint"]["path"].endswith("best.pt") and member["checkpoint"]["update"] == 4
    assert set(member["dev_scores"]) >= {"ppl", "bleu"}
    assert info["server"] == {"beam": 3, "max_batch_sents": 32, "max_wait_ms": 10.0, "workers": 1,
                              "max_request_sents": 8, "max_chars": 300, "max_line_words": 12, "length": DEFAULT_LENGTH}
    assert client.get("/health").json()["status"] == "ok"
    schema = client.get("/openapi.json").json()
    body = schema["paths"]["/v1/translate"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["properties"]) == {"text", "beam", "nbest", "attention", "document", *LENGTH_FIELDS}
    assert body["properties"]["coverage_penalty"]["anyOf"][0]["maximum"] == 10
    assert "/v1/models" in schema["paths"] and "/health" in schema["paths"]
    assert client.get("/docs").status_code == 200
    page = client.get("/")
    assert page.status_code == 200 and "/static/app.js" in page.text
    assert client.get("/static/app.js").status_code == 200 and client.get("/static/style.css").status_code == 200
    for path in ("/", "/static/app.js", "/static/style.css"):  # revalidated, so an upgrade is never half-seen
        assert client.get(path).headers["cache-control"] == "no-cache", path


def test_document_mode_reads_the_previous_sentences(model_dirs):
    client, translator = client_for([model_dirs["doc"]])
    doc = ["el gato 1 .", "el gato 2 .", "", "el gato 4 .", "el gato 5 .", "el gato 6 ."]
    with client:
        as_document = client.post("/v1/translate", json={"text": doc, "document": True, "beam": 2}).json()
        alone = client.post("/v1/translate", json={"text": doc, "beam": 2}).json()
    # K = 3 previous non-empty sentences, the empty line never context
    assert [s["context"] for s in as_document["sentences"]] == [[], [0], [], [0, 1], [0, 1, 3], [1, 3, 4]]
    with_ids = translator.translate(doc, beam=2, doc_ids=["d"] * len(doc))
    without = translator.translate(doc, beam=2, doc_ids=[str(i) for i in range(len(doc))])
    assert [s["score"] for s in as_document["sentences"]] == pytest.approx([t.score for t in with_ids], abs=1e-3)
    assert [s["score"] for s in alone["sentences"]] == pytest.approx([t.score for t in without], abs=1e-3)
    assert any(abs(a.score - b.score) > 1e-3 for a, b in zip(with_ids, without))  # context changes the scores
    assert "context" not in alone["sentences"][0]


@pytest.mark.parametrize("order", [["base", "doc"], ["doc", "base"]])
def test_an_ensemble_reads_document_context_when_any_member_does(model_dirs, order):
    """translate's rule, whatever the member order: an ensemble's config is its first member's,
    which must not decide whether the ensemble reads context."""
    client, translator = client_for([model_dirs[name] for name in order])
    doc = ["el gato 1 .", "el gato 2 .", "", "el gato 4 ."]
    with client:
        info = client.get("/v1/models").json()
        signals = info["signals"]
        answer = client.post("/v1/translate", json={"text": doc, "document": True, "beam": 2}).json()
    assert signals["document_context"] is True and info["document_sents"] == translator.document_sents == 3
    assert [s["context"] for s in answer["sentences"]] == [[], [0], [], [0, 1]]
    with_ids = translator.translate(doc, beam=2, doc_ids=["d"] * len(doc))
    assert [s["score"] for s in answer["sentences"]] == pytest.approx([t.score for t in with_ids], abs=1e-3)


def test_empty_lines_come_back_empty_and_leave_their_batch_unaffected(model_dirs):
    """Empty and blank lines among others in one request (one batch): each sentence is
    answered as when it is translated alone."""
    client, _ = client_for([model_dirs["rich"]])
    text = ["", "el gato 3 .", "  ", "el gato 5 . el gato 6 .", "", "el gato 7 ."]
    with client:
        batched = client.post("/v1/translate", json={"text": text, "nbest": 2}).json()
        alone = {line: client.post("/v1/translate", json={"text": line, "nbest": 2}).json()["sentences"][0]
                 for line in text if line.strip()}
    assert batched["batch"]["sentences"] == len(text)
    for line, got in zip(text, batched["sentences"]):
        want = alone.get(line, {"translation": "", "score": 0.0, "nbest": []})
        assert got["translation"] == want["translation"] and got["score"] == pytest.approx(want["score"], abs=1e-3)
        assert [h["translation"] for h in got["nbest"]] == [h["translation"] for h in want["nbest"]]


def test_an_ensemble_is_served(model_dirs):
    client, translator = client_for([model_dirs["base"], model_dirs["rich"]])
    with client:
        info = client.get("/v1/models").json()
        s = client.post("/v1/translate", json={"text": "el gato 3 .", "attention": True}).json()["sentences"][0]
    assert info["ensemble"] is True and info["ensemble_mode"] == "logprob" and len(info["models"]) == 2
    assert [m["architecture"]["target_context"] for m in info["models"]] == ["previous", "self-attentive"]
    assert s["translation"] == translator.translate(["el gato 3 ."], beam=3)[0].text
    assert s["attention"] and s["target_attention"] is None  # the members' mean α only


BAD = [  # (body bytes, status, field, words the error must contain)
    (b'{"text": "el gato', 400, "body", "invalid JSON"),
    (b'{"text": "caf\xe9 con leche"}', 400, "body", "invalid UTF-8 at byte 13"),
    (b'["el gato"]', 422, "body", "JSON object"),
    (b'{"text": 3}', 422, "text", "string or a list of strings"),
    (b'{"text": ["el gato", 4]}', 422, "text[1]", "should be a string"),
    (b'{"text": "el gato", "beam": "5"}', 422, "beam", "integer"),
    (b'{"text": "el gato", "beam": 0}', 422, "beam", "greater than or equal to 1"),
    (b'{"text": "el gato", "attention": "yes"}', 422, "attention", "boolean"),
    (b'{"text": "el gato", "colour": "red"}', 422, "colour", "unknown field 'colour' (the fields are text, beam,"),
    # it said "text: missing (a required field)"
    (b'{"txt": "el gato"}', 422, "txt", "unknown field 'txt' (did you mean 'text'? the fields are text, beam,"),
    (b'{"beam": 2}', 422, "text", "missing"),
    (b'{"text": ""}', 422, "text", "empty"),
    (b'{"text": ["", "  "]}', 422, "text", "empty"),
    (b'{"text": ["el gato\\nperro"]}', 422, "text[0]", "line break"),
    (b'{"text": ["el gato", "el \\ud800 gato"]}', 422, "text[1]", "lone surrogate at character 3"),
    (b'{"text": "el gato", "nbest": 4, "beam": 2}', 422, "nbest", "more than the beam"),
    (b'{"text": "el gato", "nbest": 5}', 422, "nbest", "more than the beam (3)"),
    (b'{"text": "el gato", "length_penalty": -1}', 422, "length_penalty", "greater than or equal to 0"),
    (b'{"text": "el gato", "length_penalty": NaN}', 422, "length_penalty", "finite number"),
    (b'{"text": "el gato", "length_penalty": true}', 422, "length_penalty", "valid number"),
    (b'{"text": "el gato", "length_penalty_kind": "gnmt"}', 422, "length_penalty_kind", "'power', 'wu' or 'none'"),
    (b'{"text": "el gato", "coverage_penalty": "0.2"}', 422, "coverage_penalty", "valid number"),
    (b'{"text": "el gato", "coverage_penalty": 10.5}', 422, "coverage_penalty", "less than or equal to 10"),
    (b'{"text": "el gato", "max_len_a": 11}', 422, "max_len_a", "less than or equal to 10"),
    (b'{"text": "el gato", "max_len_b": 2.5}', 422, "max_len_b", "valid integer"),
    (b'{"text": "el gato", "max_len_b": 1001}', 422, "max_len_b", "less than or equal to 1000"),
    (b'{"text": "el gato", "max_len_a": 0, "max_len_b": 0}', 422, "max_len_b", "at least 1 when max_len_a is 0"),
    (b'{"text": "el gato", "max_len_rule": "auto"}', 422, "max_len_rule", "'fixed' or 'data'"),
    (b'{"text": "el gato", "block_ngram_repeat": 11}', 422, "block_ngram_repeat", "less than or equal to 10"),
    (b'{"text": "el gato", "block_ngram_repeat": 1.5}', 422, "block_ngram_repeat", "valid integer"),
    (b'{"text": "el gato", "max_len_rule": "data", "max_len_a": 1}', 422, "max_len_a", "no effect with max_len_rule"),
    (b'{"text": "el gato", "length_ratio_penalty": -2}', 422, "length_ratio_penalty", "greater than or equal to 0"),
    (b'{"text": "el gato", "length_ratio_penalty": 101}', 422, "length_ratio_penalty", "less than or equal to 100"),
    (b'{"text": "el gato", "length_ratio": 0}', 422, "length_ratio", "greater than or equal to 0.05"),
    (b'{"text": "el gato", "length_ratio": "1"}', 422, "length_ratio", "valid number"),
    (b'{"text": "el gato", "length_ratio_rule": "median"}', 422, "length_ratio_rule", "'fixed' or 'data'"),
    (b'{"text": "el gato", "length_ratio_rule": "data", "length_ratio": 1}', 422, "length_ratio",
     "no effect with length_ratio_rule data"),
    (b'{"text": ' + b"[" * 100000 + b"]" * 100000 + b"}", 400, "body", "invalid JSON (nested too deeply)"),
    (b'{"text": "el gato", "beam": ' + b"9" * 5000 + b"}", 400, "body", "invalid JSON (Exceeds the limit"),
    (json.dumps({"text": " ".join(["gato"] * 10000)}).encode(), 413, "text", "10000 words"),
    (json.dumps({"text": ["gato"] * 9}).encode(), 413, "text", "9 sentences, more than the limit of 8"),
    (json.dumps({"text": ["gato " * 10] * 7}).encode(), 413, "text", "350 characters, more than the limit of 300"),
]


@pytest.mark.parametrize("body,status,field,words", BAD, ids=[f"{b[:24]!r}" for b, *_ in BAD])
def test_bad_input_gets_a_one_line_error_naming_the_field(rich, body, status, field, words):
    client, _ = rich
    answer = client.post("/v1/translate", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == status, answer.text
    error = answer.json()
    assert error["field"] == field and words in error["error"] and error["error"].startswith(field + ": ")
    assert "\n" not in error["error"]
    assert client.post("/v1/translate", json={"text": "el gato 3 ."}).status_code == 200  # still serving


@pytest.mark.parametrize("kind", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_body_not_sent_as_json_is_refused(rich, kind):
    """What a form on another page can post without the browser asking first: text/plain
    that parses as JSON.  It is a 415, and nothing is decoded."""
    client, _ = rich
    headers = {"content-type": kind} if kind else {}
    answer = client.post("/v1/translate", content=b'{"text": "el gato 3 ."}', headers=headers)
    assert answer.status_code == 415 and answer.json()["field"] == "body"
    assert "content-type application/json" in answer.json()["error"]
    assert client.post("/v1/translate", content=b'{"text": "el gato 3 ."}',
                       headers={"content-type": "application/json; charset=utf-8"}).status_code == 200


def test_length_options_per_request_and_per_server_are_the_translators(model_dirs):
    """A request's length options over the server's (--max-len-b …) over the config's, each
    decoded as `Translator.translate` decodes them; requests differing in them never share a search."""
    client, translator = client_for([model_dirs["base"]], length={"max_len_a": 0.0, "max_len_b": 1})
    options = {"length_penalty_kind": "wu", "length_penalty": 2.0, "coverage_penalty": 0.3, "max_len_b": 2,
               "length_ratio_penalty": 3.0, "length_ratio": 0.8}
    with client:
        server = client.post("/v1/translate", json={"text": LINES, "attention": True}).json()
        own = client.post("/v1/translate", json={"text": LINES, "beam": 2, "nbest": 2, **options}).json()
        info = client.get("/v1/models").json()["server"]["length"]
    # a given a means a fixed limit (the default rule is data)
    assert info == {**DEFAULT_LENGTH, "max_len_a": 0.0, "max_len_b": 1, "max_len_rule": "fixed"}
    assert all(len(s["tokens"]) <= 1 for s in server["sentences"])
    assert [s["translation"] for s in server["sentences"]] == \
        [t.text for t in translator.translate(LINES, beam=3, length={"max_len_a": 0.0, "max_len_b": 1})]
    want = translator.translate(LINES, beam=2, nbest=2, length={"max_len_a": 0.0, **options})
    for got, expected in zip(own["sentences"], want):
        assert [h["translation"] for h in got["nbest"]] == [h.text for h in expected.nbest]
        assert [h["score"] for h in got["nbest"]] == pytest.approx([h.score for h in expected.nbest], abs=1e-3)
    assert own["sentences"][0]["nbest"][0]["translation"] != server["sentences"][0]["translation"] or \
        own["sentences"][0]["score"] != server["sentences"][0]["score"]


def test_an_oversized_body_is_refused_before_it_is_read(rich):
    client, _ = rich
    answer = client.post("/v1/translate", content=b"x" * (2 << 20), headers={"content-type": "application/json"})
    assert answer.status_code == 413 and answer.json()["field"] == "body"
    chunked = (b"x" * (64 << 10) for _ in range(64))  # no Content-Length to refuse it by
    answer = client.post("/v1/translate", content=chunked, headers={"content-type": "application/json"})
    assert answer.status_code == 413 and answer.json()["error"].startswith("body: more than the limit of ")
    assert client.post("/v1/translate", json={"text": "el gato 3 ."}).status_code == 200  # still serving
    assert client.get("/nowhere").json() == {"error": "/nowhere: Not Found", "field": "path"}
    wrong_method = client.get("/v1/translate")
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
    assert wrong_method.json() == {"error": "/v1/translate: Method Not Allowed", "field": "path"}


def test_a_chunked_body_is_read_no_further_than_the_limit():
    """A body without a Content-Length is read only until it passes the limit, not whole."""

    read = []

    class Chunked:
        async def stream(self):
            for _ in range(64):
                read.append(64 << 10)
                yield b"x" * (64 << 10)

    with pytest.raises(RequestError, match="more than the limit of 1048576 bytes"):
        asyncio.run(_read_body(Chunked(), 1 << 20))
    assert sum(read) == (1 << 20) + (64 << 10)  # the chunk that passed the limit, and no more


def test_text_is_split_into_sentences_as_translate_splits_a_file(rich):
    """At \n and \r\n only, as `ctxnmt translate` reads a file and the page splits its text:
    a U+2028 or a form feed inside a sentence (str.splitlines would break there) is no new
    sentence, so the page's cards keep their sources."""
    client, _ = rich
    answer = client.post("/v1/translate", json={"text": "el gato\u2028perro\r\nel perro\x0c3 .\n"})
    assert answer.status_code == 200 and len(answer.json()["sentences"]) == 2


def test_a_request_that_fails_unhandled_still_gets_its_log_line(model_dirs):
    lines: list[str] = []
    translator = Translator.load(model_dirs["base"])
    app = create_app(translator, [str(model_dirs["base"])], ServeSettings(beam=3), log=lines.append)

    def broken():
        raise RuntimeError("a bug")

    app.add_api_route("/broken", broken)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/broken").status_code == 500
    assert any(line.startswith("request 1 GET /broken 500 sentences=0 latency=") for line in lines), lines


def test_each_model_is_described_in_plain_words(model_dirs):
    """The page's header had said 'recurrences: forward, backward, decoder-gru1, decoder-gru2;
    beyond source attention: nothing'."""
    descriptions = {}
    for name in ("base", "rich", "doc"):
        client, _ = client_for([model_dirs[name]])
        with client:
            descriptions[name] = client.get("/v1/models").json()["models"][0]["description"]
    base = "RNNsearch: bidirectional GRU encoder, conditional GRU decoder"
    assert descriptions == {
        "base": base,
        "rich": f"{base}, self-attention over the previous target words, hyper-gated (adaptive) GRUs in the encoder "
                "and decoder, adaptive output weights",
        "doc": f"{base}; reads the 3 previous source sentences of the document as context",
    }


def test_a_component_without_plain_words_is_named_by_its_registry_name():
    from ctxnmt.config import ModelConfig
    from ctxnmt.models.capabilities import Capabilities
    from ctxnmt.serve.models import describe

    model = ModelConfig.of(encoder="stacked-birnn", encoder_layers=3, decoder="toy-decoder", target_context="mean")
    assert describe(model, Capabilities(decoder_hyper_gates=("gru1",))) == (
        "RNNsearch: stacked bidirectional GRU encoder (3 layers), toy-decoder decoder, the mean of the previous target "
        "words as target context, hyper-gated (adaptive) GRUs in the decoder")


def test_each_document_context_is_described_by_its_reader():
    """The model list had said 'reads the 1 previous source sentences … as context' of a 2-to-2
    concatenation model too, hiding that it also reads its own earlier translations."""
    from ctxnmt.config import ModelConfig
    from ctxnmt.models.capabilities import Capabilities
    from ctxnmt.serve.models import describe

    base = "RNNsearch: bidirectional GRU encoder, conditional GRU decoder"
    cases = {
        "concat 2-to-1": (dict(context="concat"), "; reads the 1 previous source sentences of the document joined "
                          "before the sentence"),
        "concat 2-to-2": (dict(context="concat", concat_sents=2, concat_target=True),
                          "; reads the 2 previous source sentences of the document joined before the sentence, and "
                          "its own translations of them as the start of its output"),
        "s-hier-to-2": (dict(doc_init_enc=True, doc_target=True), "; reads the 3 previous source sentences of the "
                        "document as context, and its own translations of them"),
        "sentence": (dict(), ""),
    }
    for name, (keys, words) in cases.items():
        assert describe(ModelConfig.of(**keys), Capabilities()) == base + words, name
