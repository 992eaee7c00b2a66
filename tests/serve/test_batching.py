"""Dynamic batching: the queue closes a batch at --max-batch-sents or --max-wait-ms,
leaves out requests whose client has gone, survives a failing batch; and with the real
model two concurrent requests decode in one batch with the translations they get alone."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from ctxnmt.decoding.translator import Translator
from ctxnmt.serve.app import create_app
from ctxnmt.serve.batching import DynamicBatcher, Job
from ctxnmt.serve.settings import ServeSettings


class Recorder:
    """A decode function that records its batches; `gate` holds the worker inside a batch."""

    def __init__(self):
        self.batches: list[list[list[str]]] = []
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, batch):
        self.gate.wait(10)
        self.batches.append([job.lines for job in batch.jobs])
        if any(line == "fail" for job in batch.jobs for line in job.lines):
            raise RuntimeError("this batch fails")
        return [[line.upper() for line in job.lines] for job in batch.jobs]


def submit_all(batcher, jobs):
    return [batcher.submit(job) for job in jobs]


def test_requests_within_the_wait_share_a_batch_up_to_the_sentence_limit():
    record = Recorder()
    batcher = DynamicBatcher(record, max_batch_sents=4, max_wait_ms=200).start()
    futures = submit_all(batcher, [Job(["a"], 5), Job(["b", "c"], 5), Job(["d", "e"], 5), Job(["f"], 5)])
    assert [f.result(10) for f in futures] == [["A"], ["B", "C"], ["D", "E"], ["F"]]
    batcher.stop(10)
    # a+b+c = 3 sentences; d,e would make 5 > 4, so they open the next batch, which f joins
    assert record.batches == [[["a"], ["b", "c"]], [["d", "e"], ["f"]]]
    assert list(batcher.recent_batch_sizes) == [3, 3] and batcher.batches_decoded == 2


def test_the_wait_closes_a_batch():
    record = Recorder()
    batcher = DynamicBatcher(record, max_batch_sents=32, max_wait_ms=30).start()
    first = batcher.submit(Job(["a"], 5))
    assert first.result(10) == ["A"]  # alone: the batch closed after the wait, not at 32 sentences
    second = batcher.submit(Job(["b"], 5))
    assert second.result(10) == ["B"]
    batcher.stop(10)
    assert record.batches == [[["a"]], [["b"]]]


def test_one_sentence_batches_turn_batching_off_and_settings_split_a_batch():
    record = Recorder()
    batcher = DynamicBatcher(record, max_batch_sents=1, max_wait_ms=100).start()
    for f in submit_all(batcher, [Job(["a"], 5), Job(["b"], 5)]):
        f.result(10)
    batcher.stop(10)
    assert record.batches == [[["a"]], [["b"]]]
    record = Recorder()
    batcher = DynamicBatcher(record, max_batch_sents=8, max_wait_ms=100).start()
    for f in submit_all(batcher, [Job(["a"], 5), Job(["b"], 2), Job(["c"], 5), Job(["d"], 5, nbest=2)]):
        f.result(10)
    batcher.stop(10)
    assert record.batches == [[["a"], ["c"]], [["b"]], [["d"]]]  # one beam search per (beam, n-best)
    record = Recorder()
    batcher = DynamicBatcher(record, max_batch_sents=8, max_wait_ms=100).start()
    wu = (("length_penalty_kind", "wu"),)
    for f in submit_all(batcher, [Job(["a"], 5), Job(["b"], 5, length=wu), Job(["c"], 5, length=wu),
                                  Job(["d"], 5, length=(("max_len_b", 3),))]):
        f.result(10)
    batcher.stop(10)
    assert record.batches == [[["a"]], [["b"], ["c"]], [["d"]]]  # … and per set of length options


def test_gone_clients_are_left_out_and_a_failing_batch_fails_only_its_requests():
    record = Recorder()
    record.gate.clear()
    batcher = DynamicBatcher(record, max_batch_sents=2, max_wait_ms=0).start()
    busy = batcher.submit(Job(["busy"], 5))
    time.sleep(0.1)  # the worker is inside the first batch now
    gone, failing, later = submit_all(batcher, [Job(["gone"], 5), Job(["fail"], 5), Job(["later"], 5)])
    assert gone.cancel()  # its client disconnected while it waited
    record.gate.set()
    assert busy.result(10) == ["BUSY"]
    with pytest.raises(RuntimeError, match="this batch fails"):
        failing.result(10)
    assert later.result(10) == ["LATER"]
    batcher.stop(10)
    assert ["gone"] not in [lines for batch in record.batches for lines in batch]


def test_stop_decodes_what_was_submitted():
    record = Recorder()
    batcher = DynamicBatcher(record, max_batch_sents=2, max_wait_ms=50).start()
    futures = submit_all(batcher, [Job([w], 5) for w in "abcde"])
    batcher.stop(10)
    assert [f.result(0) for f in futures] == [[w.upper()] for w in "abcde"]


def test_bad_settings():
    with pytest.raises(ValueError, match="max_batch_sents must be at least 1"):
        DynamicBatcher(Recorder(), max_batch_sents=0)
    with pytest.raises(ValueError, match="max_wait_ms must not be negative"):
        DynamicBatcher(Recorder(), max_wait_ms=-1)


def test_concurrent_requests_decode_in_one_batch_with_their_own_translations(model_dirs):
    translator = Translator.load(model_dirs["rich"])
    first, second = ["el gato 3 .", "el gato 11 ."], ["el gato 7 . el gato 2 ."]
    alone = {tuple(s): translator.translate(s, beam=3) for s in (first, second)}
    app = create_app(translator, [str(model_dirs["rich"])], ServeSettings(beam=3, max_wait_ms=1500))
    with TestClient(app) as client, ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda s: client.post("/v1/translate", json={"text": s}).json(), [first, second]))
    assert answers[0]["batch"] == answers[1]["batch"] == {"number": 1, "sentences": 3}
    for sentences, answer in zip((first, second), answers):
        want = alone[tuple(sentences)]
        assert [s["translation"] for s in answer["sentences"]] == [t.text for t in want]
        assert [s["score"] for s in answer["sentences"]] == pytest.approx([t.score for t in want], abs=1e-3)


def test_the_batch_record_is_a_count_and_a_bounded_window(monkeypatch):
    """/health's count keeps growing; the sizes kept for inspection do not (a server that runs
    for weeks must not keep one entry per batch)."""
    import ctxnmt.serve.batching as batching

    monkeypatch.setattr(batching, "RECENT_BATCHES", 3)
    batcher = DynamicBatcher(Recorder(), max_batch_sents=1, max_wait_ms=0).start()
    for i in range(5):
        assert batcher.submit(Job([str(i)] * (i + 1), 5)).result(10)
    batcher.stop(10)
    assert batcher.batches_decoded == 5 and list(batcher.recent_batch_sizes) == [3, 4, 5]
