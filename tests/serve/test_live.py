"""`ctxnmt serve` as a process on 127.0.0.1: one log line per request, a client that
disconnects mid-request does not poison its batch, SIGTERM finishes in-flight requests
and exits 0, and bad options or a taken port are one-line errors."""
from __future__ import annotations

import re
import signal
import socket
import threading
import time

import httpx
import pytest

from ctxnmt.cli import main
from ctxnmt.decoding.translator import Translator
from tests.serve.conftest import LiveServer, free_port


@pytest.fixture(scope="module")
def rich_server(model_dirs, tmp_path_factory):
    server = LiveServer([model_dirs["rich"]], tmp_path_factory.mktemp("live") / "server.log", "--beam", "2",
                        "--max-wait-ms", "300")
    yield server
    server.stop()


def test_the_server_answers_and_logs_one_line_per_request(rich_server, model_dirs):
    server = rich_server
    answer = httpx.post(f"{server.url}/v1/translate", json={"text": "el gato 3 .\nel gato 4 ."}, timeout=60)
    assert answer.status_code == 200
    want = Translator.load(model_dirs["rich"]).translate(["el gato 3 .", "el gato 4 ."], beam=2)
    assert [s["translation"] for s in answer.json()["sentences"]] == [t.text for t in want]
    bad = httpx.post(f"{server.url}/v1/translate", content=b"{", headers={"content-type": "application/json"},
                     timeout=60)
    assert bad.status_code == 400
    log = server.stderr()
    for response, status, sentences in ((answer, 200, 2), (bad, 400, 0)):
        request_id = response.headers["x-request-id"]
        lines = [line for line in log.splitlines() if f" request {request_id} " in line]
        assert len(lines) == 1
        assert re.search(rf"request {request_id} POST /v1/translate {status} sentences={sentences} "
                         rf"latency=\d+\.\dms$", lines[0])
    assert "model(s) loaded in" in log


def send_and_hang_up(url: str, body: bytes) -> None:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        time.sleep(0.1)  # the request is in the queue, waiting for its batch


def test_a_client_that_disconnects_does_not_poison_the_batch(rich_server, model_dirs):
    server = rich_server  # its batches wait 300 ms for more requests
    results = {}

    def patient():
        results["answer"] = httpx.post(f"{server.url}/v1/translate", json={"text": ["el gato 5 ."]}, timeout=60)

    waiting = threading.Thread(target=patient)
    waiting.start()
    for _ in range(3):
        send_and_hang_up(server.url, b'{"text": ["el gato 9 .", "el gato 1 ."], "attention": true}')
    waiting.join(60)
    answer = results["answer"]
    assert answer.status_code == 200
    want = Translator.load(model_dirs["rich"]).translate(["el gato 5 ."], beam=2)[0].text
    assert answer.json()["sentences"][0]["translation"] == want
    again = httpx.post(f"{server.url}/v1/translate", json={"text": "el gato 5 ."}, timeout=60)
    assert again.status_code == 200 and again.json()["sentences"][0]["translation"] == want
    assert httpx.get(f"{server.url}/health", timeout=10).json()["status"] == "ok"


def test_sigterm_finishes_in_flight_requests_and_exits_0(live_server):
    server = live_server("base", "--max-wait-ms", "1500")
    results = {}

    def in_flight():
        results["answer"] = httpx.post(f"{server.url}/v1/translate", json={"text": "el gato 2 ."}, timeout=60)

    thread = threading.Thread(target=in_flight)
    thread.start()
    time.sleep(0.5)  # the request waits in its batch for up to 1.5 s
    server.process.send_signal(signal.SIGTERM)
    thread.join(60)
    assert server.process.wait(60) == 0
    assert results["answer"].status_code == 200 and results["answer"].json()["sentences"][0]["translation"] is not None


def test_bad_options_and_a_taken_port_are_one_line_errors(model_dirs, tmp_path, capsys):
    def serve(*args):
        code = main(["serve", *map(str, args)])
        return code, [line for line in capsys.readouterr().err.splitlines() if "error" in line.lower()]

    code, errors = serve(model_dirs["base"], "--max-batch-sents", "0")
    assert code == 2 and errors == ["ctxnmt serve: error: --max-batch-sents must be at least 1, not 0"]
    code, errors = serve(tmp_path, "--port", free_port())
    assert code == 2 and errors == [f"ctxnmt serve: error: {tmp_path}: not a model directory (no config.yaml)"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        code, errors = serve(model_dirs["base"], "--port", taken.getsockname()[1])
    assert code == 2 and errors[-1].startswith("ctxnmt serve: error: could not serve on 127.0.0.1:")


def test_an_int8_server_searches_as_the_int8_translator_does(model_dirs, tmp_path):
    server = LiveServer([model_dirs["rich"]], tmp_path / "server.log", "--beam", "2", "--precision", "int8")
    try:
        info = httpx.get(f"{server.url}/v1/models", timeout=60).json()
        answer = httpx.post(f"{server.url}/v1/translate", json={"text": "el gato 3 .\nel gato 4 ."}, timeout=60)
    finally:
        assert server.stop() == 0
    assert info["decoding"]["precision"] == "int8"
    translator = Translator.load(model_dirs["rich"])
    translator.use_precision("int8")
    want = translator.translate(["el gato 3 .", "el gato 4 ."], beam=2)
    assert [s["translation"] for s in answer.json()["sentences"]] == [t.text for t in want]
