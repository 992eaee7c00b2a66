"""The FastAPI application: the JSON API, the web page and the request log.

    app = create_app(Translator.load("runs/demo"), ["runs/demo"], ServeSettings(beam=5))
"""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
import traceback
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from ctxnmt.length_options import decoding_options, with_options
from ctxnmt.serve.batching import Batch, DynamicBatcher, Job
from ctxnmt.serve.decoding import BatchDecoder
from ctxnmt.serve.models import models_info
from ctxnmt.serve.requests import RequestError, TranslateRequest, length_options, parse_request, sentences
from ctxnmt.serve.responses import ErrorResponse, TranslateResponse
from ctxnmt.serve.settings import ServeSettings
from ctxnmt.utils.messages import Log, stderr_log

STATIC = Path(__file__).parent / "static"
SERVER_LOG = stderr_log("ctxnmt.serve: ", dated=True)  # requests, start-up, warnings, failures


def error(status: int, field_name: str, message: str) -> JSONResponse:
    return JSONResponse({"error": message, "field": field_name}, status_code=status)


def create_app(translator, model_dirs: list[str], settings: ServeSettings, log: Log = SERVER_LOG,
               checkpoint: Path | None = None, decode: Callable[[Batch], list] | None = None,
               problem: Callable[[], str | None] | None = None) -> FastAPI:
    """The server's app; `checkpoint`: the file a single model was loaded from where not its default;
    `decode`: what decodes a batch (default: the translator in the batching thread); `problem`:
    what keeps it from decoding, if anything (/health answers 503 with it)."""
    batcher = DynamicBatcher(decode or BatchDecoder(translator), settings.max_batch_sents, settings.max_wait_ms)
    info = models_info(model_dirs, translator, checkpoint)
    info["server"] = {"beam": settings.beam, "max_batch_sents": settings.max_batch_sents,
                      "max_wait_ms": settings.max_wait_ms, "workers": settings.workers,
                      **dataclasses.asdict(settings.limits),
                      "length": decoding_options(with_options(translator.config.decoding, settings.length))}

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        yield
        await asyncio.to_thread(batcher.stop)  # the server has already let in-flight requests finish

    app = FastAPI(title="ctxnmt", summary="Context-aware recurrent NMT: translation with what the model attends to",
                  version="1", lifespan=lifespan)
    app.state.batcher = batcher
    _add_request_log(app, log)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        response = error(exc.status_code, "path", f"{request.url.path}: {exc.detail}")
        response.headers.update(exc.headers or {})  # a 405's Allow
        return response

    @app.post("/v1/translate", response_model=None, openapi_extra=_request_body(),
              responses={200: {"model": TranslateResponse}, 400: {"model": ErrorResponse},
                         413: {"model": ErrorResponse}, 415: {"model": ErrorResponse},
                         422: {"model": ErrorResponse}})
    async def translate(request: Request):
        """Translate one sentence per line of `text` (or each sentence of a list)."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > settings.limits.max_body_bytes:
            return error(413, "body", f"body: {declared} bytes, more than the limit of "
                                      f"{settings.limits.max_body_bytes}")
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            # a form on any other page could post text/plain that parses as JSON, with no preflight
            return error(415, "body", "body: must be sent with content-type application/json")
        try:
            req = parse_request(await _read_body(request, settings.limits.max_body_bytes), settings.limits)
            beam = req.beam or settings.beam
            if req.nbest > beam:
                raise RequestError(422, "nbest", f"{req.nbest} is more than the beam ({beam})")
            options = length_options(req, settings.length, translator.config.decoding)
        except RequestError as err:
            return error(err.status, err.field, str(err))
        lines = sentences(req)
        request.state.sentences = len(lines)
        job = Job(lines, beam, req.nbest, req.attention, req.document, tuple(sorted(options.items())))
        try:
            result = await asyncio.wrap_future(batcher.submit(job))
        except Exception as err:  # decoding failed: this batch's clients learn why, the server goes on
            log("decoding failed\n" + traceback.format_exc().rstrip())
            return error(500, "text", f"decoding failed: {type(err).__name__}: {err}".splitlines()[0])
        return {"sentences": result["sentences"], "beam": beam, "batch": result["batch"]}

    @app.get("/v1/models")
    async def models() -> dict:
        """Architecture, parameter count, vocabularies, checkpoint and dev scores of each served model."""
        return info

    @app.get("/health")
    async def health():
        said = problem() if problem else None
        if said:
            return JSONResponse({"status": "failing", "problem": said, "waiting": batcher.waiting,
                                 "batches": batcher.batches_decoded}, status_code=503)
        return {"status": "ok", "waiting": batcher.waiting, "batches": batcher.batches_decoded}

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    app.mount("/static", RevalidatedFiles(directory=STATIC), name="static")
    return app


class RevalidatedFiles(StaticFiles):
    """The page's script and style, revalidated at every load (their ETag makes that cheap),
    so a browser never runs an older app.js against an upgraded server."""

    def file_response(self, *args, **kwargs):
        response = super().file_response(*args, **kwargs)
        response.headers["Cache-Control"] = "no-cache"
        return response


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, read no further than `limit` bytes: a chunked request declares no length,
    and reading it whole first would let one request take the server's memory."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, "body", f"more than the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _request_body() -> dict:
    """The request's schema on /docs (the endpoint reads the body itself: see requests.py)."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": TranslateRequest.model_json_schema(),
        "example": {"text": "Y dijo Dios: Sea la luz.\nY fue la luz.", "beam": 5, "attention": True}}}}}


def _add_request_log(app: FastAPI, log: Log) -> None:
    """One line per request: its id, method and path, status, sentences and latency."""
    ids = itertools.count(1)

    @app.middleware("http")
    async def log_request(request: Request, call_next):
        request.state.id, request.state.sentences = next(ids), 0
        start = time.perf_counter()

        def line(status: int) -> str:
            latency = 1000 * (time.perf_counter() - start)
            return (f"request {request.state.id} {request.method} {request.url.path} {status} "
                    f"sentences={request.state.sentences} latency={latency:.1f}ms")

        try:
            response = await call_next(request)
        except Exception:  # answered 500 further out; the request still gets its line
            log(line(500))
            raise
        log(line(response.status_code))
        response.headers["X-Request-Id"] = str(request.state.id)
        return response
