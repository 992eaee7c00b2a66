"""`ctxnmt judge serve` over HTTP on 127.0.0.1: the API's answers, its 4xx for bad
requests, and nothing lost when the server is killed mid-study."""
from __future__ import annotations

import sqlite3
import threading
import urllib.error
import urllib.request

import pytest

from ctxnmt.judge import study as study_module
from ctxnmt.judge.server import make_server
from ctxnmt.judge.study import open_study
from tests.judge.common import call, judge_server, write_study_inputs
from tests.test_cli import run


def test_api_answers_undo_errors_and_kill(tmp_path, capsys):
    study = tmp_path / "study.sqlite"
    assert run(["judge", "create", *write_study_inputs(tmp_path), "--n", "5", "-o", study], capsys)[0] == 0
    with judge_server(study) as (proc, base):
        with urllib.request.urlopen(base, timeout=10) as page:
            html = page.read().decode()
        assert "Left is better" in html and "Undo" in html
        status, state = call(base, "api/state?judge=ana")
        assert status == 200 and (state["done"], state["total"]) == (0, 8)
        first = state["item"]
        assert set(first) == {"item", "src", "ref", "left", "right"} and first["left"] != first["right"]
        status, state = call(base, "api/answer", {"judge": "ana", "item": first["item"], "choice": "left"})
        assert status == 200 and state["done"] == 1 and state["item"]["item"] != first["item"]
        second = state["item"]
        # 4xx: the same answer again, unknown item, bad choice, no judge, bad JSON, unknown path
        for body, code, message in (({"judge": "ana", "item": first["item"], "choice": "left"}, 409, "already"),
                                    ({"judge": "ana", "item": 12345, "choice": "left"}, 400, "no item 12345"),
                                    ({"judge": "ana", "item": second["item"], "choice": "x"}, 400, "choice"),
                                    ({"item": second["item"], "choice": "left"}, 400, "judge name is empty"),
                                    ({"judge": "ana", "item": "3", "choice": "left"}, 400, "integer"),
                                    ({"judge": "ana", "item": 10 ** 23, "choice": "left"}, 400,
                                     f"no item {10 ** 23}")):  # beyond SQLite's integers: it overflowed
            status, reply = call(base, "api/answer", body)
            assert status == code and message in reply["error"], (body, reply)
        for raw in (b"{not json", b"[" * 4000 + b"]" * 4000, b'{"item": ' + b"9" * 5000 + b"}"):
            request = urllib.request.Request(base + "api/answer", data=raw, method="POST",
                                             headers={"Content-Type": "application/json"})
            with pytest.raises(urllib.error.HTTPError) as refused:  # before: the last two dropped the connection
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 400 and b"must be a JSON object" in refused.value.read()
        # what a form on another site can send without a preflight: text/plain that parses as JSON
        forged = f'{{"judge": "ana", "item": {second["item"]}, "choice": "left", "x": "="}}'.encode()
        for path, kind in (("api/answer", "text/plain"), ("api/undo", "application/x-www-form-urlencoded")):
            request = urllib.request.Request(base + path, data=forged, method="POST", headers={"Content-Type": kind})
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 415 and b"application/json" in refused.value.read()
        assert call(base, "api/state?judge=ana")[1]["done"] == 1  # neither was recorded or undone
        assert call(base, "api/nothing")[0] == 404
        status, state = call(base, "api/answer", {"judge": "ana", "item": second["item"], "choice": "equal"})
        assert state["done"] == 2
        status, state = call(base, "api/undo", {"judge": "ana"})
        assert status == 200 and state["done"] == 1 and state["item"] == second
        proc.kill()  # no shutdown: every answer given so far must already be in the file
        proc.wait(timeout=10)
    with open_study(study) as db:
        assert db.execute("SELECT item, judge, choice FROM answers").fetchall() == [(first["item"], "ana", "left")]
    with judge_server(study) as (_, base):  # resume after a restart
        status, state = call(base, "api/state?judge=ana")
        assert state["done"] == 1 and state["item"] == second
        port = base.rsplit(":", 1)[1].strip("/")
        code, _, err = run(["judge", "serve", study, "--port", port], capsys)  # the port is taken
        assert code == 2 and f"cannot listen on 127.0.0.1:{port}" in err


def test_a_study_locked_by_another_writer_is_a_503_and_records_nothing(tmp_path, capsys, monkeypatch):
    """A writer holding the study longer than the lock wait: the answer is refused with 503, not
    dropped or half-recorded, and the same answer goes through once the lock is gone."""
    study = tmp_path / "study.sqlite"
    assert run(["judge", "create", *write_study_inputs(tmp_path), "--n", "5", "-o", study], capsys)[0] == 0
    monkeypatch.setattr(study_module, "LOCK_WAIT_S", 0.2)
    server = make_server(str(study), port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        item = call(base, "api/state?judge=ana")[1]["item"]["item"]
        other = sqlite3.connect(study, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")
        status, reply = call(base, "api/answer", {"judge": "ana", "item": item, "choice": "left"})
        assert status == 503 and "the answer was not recorded" in reply["error"], reply
        other.execute("ROLLBACK")
        other.close()
        status, state = call(base, "api/answer", {"judge": "ana", "item": item, "choice": "left"})
        assert status == 200 and state["done"] == 1  # the refused try left nothing behind
    finally:
        server.shutdown()
        server.server_close()
    with open_study(study) as db:
        assert db.execute("SELECT item, judge, choice FROM answers").fetchall() == [(item, "ana", "left")]
