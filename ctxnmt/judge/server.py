"""`ctxnmt judge serve`: the judging page and its small JSON API, on the standard
library's threading HTTP server (no dependency; a ranking study has a handful of
judges, not a load to serve).

  GET  /                      the page
  GET  /api/state?judge=NAME  {"done", "total", "item"} (item: the next one, or null)
  POST /api/answer            {"judge", "item", "choice"} → the state after it (409 if already answered)
  POST /api/undo              {"judge"} → the state after removing that judge's last answer
  (POST bodies must be Content-Type application/json: a form elsewhere cannot send that
  without the browser asking first, so another site cannot answer for a judge)

Each request opens the study on its own connection and every answer is committed
before the reply, so killing the server loses nothing.
"""
from __future__ import annotations

import json
import sqlite3
import sys
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from ctxnmt.errors import DataError
from ctxnmt.judge.page import PAGE
from ctxnmt.judge.study import AlreadyAnswered, check_judge, next_item, open_study, progress, record_answer, undo_last

MAX_BODY = 16 * 1024


def state(db, judge: str) -> dict:
    judge = check_judge(judge)
    done, total = progress(db, judge)
    return {"judge": judge, "done": done, "total": total, "item": next_item(db, judge)}


class JudgeHandler(BaseHTTPRequestHandler):
    study_path = ""  # set on the subclass made by make_server
    server_version = "ctxnmt-judge"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        url = urlsplit(self.path)
        if url.path in ("/", "/index.html"):
            self._send(HTTPStatus.OK, PAGE.encode("utf-8"), "text/html; charset=utf-8")
        elif url.path == "/api/state":
            judge = parse_qs(url.query).get("judge", [""])[0]
            self._api(lambda db: state(db, judge))
        else:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {url.path}"})

    def do_POST(self) -> None:  # noqa: N802
        url = urlsplit(self.path)
        body = self._body()
        if body is None:
            return
        if url.path == "/api/answer":
            def answer(db):
                item = body.get("item")
                if not isinstance(item, int) or isinstance(item, bool):
                    raise DataError(f"item must be an integer, not {item!r}")
                if not 0 < item < 2 ** 63:  # SQLite's integers are 64-bit: a larger one would overflow
                    raise DataError(f"no item {item} to judge in this study")
                record_answer(db, str(body.get("judge", "")), item, str(body.get("choice", "")))
                return state(db, str(body.get("judge", "")))
            self._api(answer)
        elif url.path == "/api/undo":
            def undo(db):
                undo_last(db, str(body.get("judge", "")))
                return state(db, str(body.get("judge", "")))
            self._api(undo)
        else:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {url.path}"})

    def _body(self) -> dict | None:
        if self.headers.get_content_type() != "application/json":
            # a form on any other site could post text/plain that parses as JSON, with no preflight
            self._json(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, {"error": "the body must be sent as application/json"})
            return None
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY:
            self._json(HTTPStatus.BAD_REQUEST, {"error": f"a JSON body of 1 to {MAX_BODY} bytes is required"})
            return None
        try:
            body = json.loads(self.rfile.read(length))
        except (ValueError, RecursionError):  # not UTF-8, not JSON, nested too deeply, an integer too long
            body = None
        if not isinstance(body, dict):
            self._json(HTTPStatus.BAD_REQUEST, {"error": "the body must be a JSON object"})
            return None
        return body

    def _api(self, action) -> None:
        try:
            with open_study(self.study_path) as db:
                result = action(db)
        except AlreadyAnswered as err:
            self._json(HTTPStatus.CONFLICT, {"error": str(err)})
        except DataError as err:
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(err)})
        except sqlite3.OperationalError as err:  # e.g. locked by another writer for longer than the timeout
            self._json(HTTPStatus.SERVICE_UNAVAILABLE, {"error": f"the study file cannot be used now ({err}); "
                                                                 "the answer was not recorded: try again"})
        else:
            self._json(HTTPStatus.OK, result)

    def _json(self, status: HTTPStatus, data: dict) -> None:
        self._send(status, json.dumps(data, ensure_ascii=False).encode("utf-8"), "application/json")

    def _send(self, status: HTTPStatus, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format, *args) -> None:  # noqa: A002 (http.server's signature)
        sys.stderr.write(f"judge: {self.address_string()} {format % args}\n")


def make_server(study_path: str, host: str = "127.0.0.1", port: int = 8765) -> ThreadingHTTPServer:
    with open_study(study_path):  # refuse a bad file before listening
        pass
    handler = type("StudyHandler", (JudgeHandler,), {"study_path": study_path})
    if not 0 <= port <= 65535:
        raise DataError(f"--port must be between 0 and 65535, not {port}")
    try:
        return ThreadingHTTPServer((host, port), handler)
    except OSError as err:
        raise DataError(f"cannot listen on {host}:{port} ({err.strerror})") from None
