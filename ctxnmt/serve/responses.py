"""The answers' shapes, for the OpenAPI page at /docs (answers are built as plain dicts;
these models document them without validating every attention matrix again)."""
from __future__ import annotations

from pydantic import BaseModel, Field


class Hypothesis(BaseModel):
    translation: str
    score: float = Field(description="log-probability / lp(y) + cp(x; y): the request's length and coverage penalties")


class Gates(BaseModel):
    encoder: dict[str, list[float]] = Field(
        description="mean hyper-gate value g per source subword, for each encoder recurrence with an adaptive cell")
    output: dict[str, list[float]] = Field(
        description="mean α_s, α_y, α_c per output subword (and </s>) of an adaptive output layer")


class Sentence(BaseModel):
    translation: str = Field(description="detokenised translation; empty for an empty input line")
    score: float
    nbest: list[Hypothesis] = Field(description="the n best, the best first")
    src_tokens: list[str] | None = Field(None, description="source subwords (with \"attention\": true)")
    tokens: list[str] | None = Field(None, description="output subwords, without </s> (with \"attention\": true)")
    attention: list[list[float]] | None = Field(
        None, description="source attention α: one row per output subword and </s>, one column per source subword")
    target_attention: list[list[float]] | None = Field(
        None, description="target-side attention (self-attentive target context): row t-1 holds the weights over "
                          "<s>, y_1 … y_{t-1} used to predict y_t; rows and columns: len(tokens) + 1")
    gates: Gates | None = Field(None, description="gate values (adaptive models)")
    context: list[int] | None = Field(
        None, description="with \"document\": true, the indices of the previous sentences this sentence read as "
                          "context (empty for models without document context)")


class BatchInfo(BaseModel):
    number: int = Field(description="the decoding batch this request was part of")
    sentences: int = Field(description="sentences of all requests decoded in that batch")


class TranslateResponse(BaseModel):
    sentences: list[Sentence]
    beam: int
    batch: BatchInfo


class ErrorResponse(BaseModel):
    error: str = Field(description="one line naming the field")
    field: str
