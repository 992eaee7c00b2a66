"""The JSON request of POST /v1/translate: its schema, and every way it can be wrong.

The body is read and checked here rather than by FastAPI so that each fault (bytes that
are not UTF-8, JSON that does not parse, an unknown field, a wrong type, text that is
empty or over a limit) gets its own one-line error naming the field, with a 4xx status.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from ctxnmt.data.corpus import split_lines
from ctxnmt.length_options import FIELDS, OPTIONS, decoding_options, fixed_if_a_given, ignored, problem, with_options
from ctxnmt.serve.settings import MAX_BEAM, Limits


class _Text(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    text: str | list[str] = Field(description="one sentence per line, or a list of sentences")
    beam: int | None = Field(None, ge=1, le=MAX_BEAM, description="beam size (default: the server's --beam)")
    nbest: int = Field(1, ge=1, le=MAX_BEAM, description="hypotheses returned per sentence (at most the beam)")
    attention: bool = Field(False, description="also return subwords, source and target-side attention, gates")
    document: bool = Field(False, description="the sentences are one document, in order: document-context "
                                              "models read each sentence's previous sentences")


def _length_field(option: dataclasses.Field) -> tuple[Any, Any]:
    """A length option as a request field; left out, it is the server's (--length-penalty, …)."""
    within, text = option.metadata["within"], option.metadata["help"]
    if isinstance(option.default, str):
        return Literal[within] | None, Field(None, description=text)
    bounds = {"allow_inf_nan": False} if isinstance(option.default, float) else {}
    return type(option.default) | None, Field(None, ge=within[0], le=within[1], description=text, **bounds)


TranslateRequest = create_model(
    "TranslateRequest", __base__=_Text, __doc__="One request: a text (one sentence per line) or a list of sentences.",
    **{option.name: _length_field(option) for option in FIELDS})


class RequestError(Exception):
    def __init__(self, status: int, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.status, self.field = status, field


def parse_request(body: bytes, limits: Limits) -> TranslateRequest:
    if len(body) > limits.max_body_bytes:
        raise RequestError(413, "body", f"{len(body)} bytes, more than the limit of {limits.max_body_bytes}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RequestError(400, "body", f"invalid UTF-8 at byte {err.start}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise RequestError(400, "body", f"invalid JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    except RecursionError:
        raise RequestError(400, "body", "invalid JSON (nested too deeply)") from None
    except ValueError as err:  # e.g. an integer of more digits than Python converts
        raise RequestError(400, "body", f"invalid JSON ({err})") from None
    if not isinstance(data, dict):
        raise RequestError(422, "body", f"expected a JSON object, not {type(data).__name__}")
    try:
        request = TranslateRequest.model_validate(data)
    except ValidationError as err:
        raise _first_error(err) from None
    _check_text(request, limits)
    return request


def sentences(request: TranslateRequest) -> list[str]:
    """The text's lines, split as `ctxnmt translate` splits a file and the page splits its
    text (at \n or \r\n; a final line break starts no new line), or the list as it is."""
    return split_lines(request.text) if isinstance(request.text, str) else list(request.text)


def length_options(request: TranslateRequest, server: dict[str, Any], dec) -> dict[str, Any]:
    """The length options of a request over the server's, checked with the model's config
    `dec` (a value may be right alone and wrong with the others)."""
    given = {key: getattr(request, key) for key in OPTIONS if getattr(request, key) is not None}
    merged = {**server, **fixed_if_a_given(given)}
    found = ignored(given) or problem(decoding_options(with_options(dec, merged)))
    if found is not None:
        raise RequestError(422, found[0], found[1])
    return merged


def _first_error(err: ValidationError) -> RequestError:
    errors = err.errors()
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    if unknown:  # before all else: a misspelt field ("txt") leaves its own ("text") missing too
        return _unknown_field(str(unknown[0]["loc"][0]))
    if errors[0]["loc"][0] == "text" and errors[0]["type"] != "missing":
        # both branches of str | list[str] failed: name the list item, else both branches
        items = [e["loc"][2] for e in errors if len(e["loc"]) == 3]
        if items:
            return RequestError(422, f"text[{items[0]}]", "should be a string")
        return RequestError(422, "text", "should be a string or a list of strings")
    first = errors[0]
    field = ".".join(str(part) for part in first["loc"])
    if first["type"] == "missing":
        return RequestError(422, field, "missing (a required field)")
    return RequestError(422, field or "body", first["msg"])


def _unknown_field(field: str) -> RequestError:
    fields = list(TranslateRequest.model_fields)
    close = difflib.get_close_matches(field, fields, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return RequestError(422, field, f"unknown field '{field}' ({hint}the fields are {', '.join(fields)})")


def _check_text(request: TranslateRequest, limits: Limits) -> None:
    lines = sentences(request)
    for i, line in enumerate(lines):
        where = "text" if isinstance(request.text, str) else f"text[{i}]"
        if isinstance(request.text, list) and len(split_lines(line)) > 1:
            raise RequestError(422, where, "a sentence of the list may not contain a line break")
        try:
            line.encode("utf-8")
        except UnicodeEncodeError as err:  # a lone surrogate escape such as \ud800: valid JSON, not text
            raise RequestError(422, where, f"not valid Unicode (a lone surrogate at character {err.start})") from None
        words = len(line.split())
        if words > limits.max_line_words:
            line_no = f" (line {i + 1})" if isinstance(request.text, str) else ""
            raise RequestError(413, where, f"{words} words in one sentence{line_no}, more than the limit of "
                                           f"{limits.max_line_words} (--max-line-words)")
    if not any(line.strip() for line in lines):
        raise RequestError(422, "text", "empty: no sentence to translate")
    if len(lines) > limits.max_request_sents:
        raise RequestError(413, "text", f"{len(lines)} sentences, more than the limit of "
                                        f"{limits.max_request_sents} (--max-request-sents)")
    chars = sum(len(line) for line in lines)
    if chars > limits.max_chars:
        raise RequestError(413, "text", f"{chars} characters, more than the limit of {limits.max_chars} (--max-chars)")
