"""The server's settings and a request's limits, with their defaults written once: the
command line's flags, the app, the batcher and the request checks all take them from here."""
from __future__ import annotations

from dataclasses import dataclass, field

MAX_BATCH_SENTS = 32  # a batch closes at this many sentences (1 turns batching off)
MAX_WAIT_MS = 10.0  # or this long after its first request
MAX_REQUEST_SENTS = 64
MAX_CHARS = 20000  # characters of one request
MAX_LINE_WORDS = 250  # words of one sentence
MAX_BEAM = 50  # a request's beam and n-best, and the server's beam
HOST, PORT = "127.0.0.1", 8080


@dataclass(frozen=True)
class Limits:
    max_request_sents: int = MAX_REQUEST_SENTS
    max_chars: int = MAX_CHARS
    max_line_words: int = MAX_LINE_WORDS

    @property
    def max_body_bytes(self) -> int:
        """Generous for JSON escapes (\\uXXXX is 6 bytes a character) and the other fields, and at
        least 1 MiB, so that the text's own limits name what is wrong with a big request."""
        return max(6 * self.max_chars + 4096, 1 << 20)


@dataclass(frozen=True)
class ServeSettings:
    beam: int
    max_batch_sents: int = MAX_BATCH_SENTS
    max_wait_ms: float = MAX_WAIT_MS
    limits: Limits = field(default_factory=Limits)
    length: dict = field(default_factory=dict)  # length options (--length-penalty, …) replacing the config's
    workers: int = 1  # decoding processes (--workers), each decoding its share of a batch
