"""`decoding.workers` (`translate --workers N`): N searches side by side on the CPU, each on
its own share of the batches with one intra-op thread, in forked processes where the process
has no other thread and in threads where it has, find what one search finds, in float32 and
in int8; the thread count is restored; a worker's error reaches the caller; bad values are
one-line errors."""
from __future__ import annotations

import multiprocessing
import os
import threading

import pytest
import torch

from ctxnmt.cli import main
from ctxnmt.decoding import translator as translator_module
from ctxnmt.decoding import workers
from ctxnmt.decoding.translator import Translator
from ctxnmt.errors import ConfigError
from tests.test_cli import document_corpus, run, small_corpus, write_config

LINES = [" ".join(["el gato", str(i), "."] * (1 + i % 3)) for i in range(11)] + [""]
INT8_EVERY_PRODUCT = "decoding.int8_from=0"  # a tiny model's products are all below the default's million


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("workers")
    data = small_corpus(tmp)
    cfg = write_config(tmp / "c.yaml", data, tmp / "m")
    assert main([str(a) for a in ["train", cfg, "--quiet", "--set", "training.max_updates=3",
                                  "--set", INT8_EVERY_PRODUCT]]) == 0
    return tmp / "m"


@pytest.fixture(params=["processes", "threads"])
def kind(request, monkeypatch):
    """Workers of either kind, whatever threads earlier tests left idle in this process (a
    training log's TensorBoard writers): `may_fork` decides, and is tested on its own below."""
    monkeypatch.setattr(workers, "may_fork", lambda: request.param == "processes")
    return request.param


def _translate(translator, beam):
    return [(t.text, t.score) for t in translator.translate(LINES, beam=beam, batch_size=2)]


@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.parametrize("beam", [1, 3])
def test_searches_side_by_side_find_what_one_search_finds(model_dir, precision, beam, kind, tmp_path):
    translator = Translator.load(model_dir)
    translator.use_precision(precision)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # each worker's intra-op threads: the same arithmetic, batch by batch
    try:
        alone = _translate(translator, beam)
    finally:
        torch.set_num_threads(threads)
    model, where = translator.model, tmp_path / "steps"
    step = model.step_candidates
    # Each worker's first step waits for the other two to reach theirs: the three shares are
    # searched at once, each by its own worker.  Without it a worker of a loaded machine may
    # finish its tiny share before the others start and take a second (the executor deals
    # tasks to whichever process is free), leaving fewer than three pids to see.
    all_started, started = multiprocessing.Barrier(3, timeout=300), set()

    def recorded(*args):  # a file, which a forked worker shares
        worker = (os.getpid(), threading.current_thread().name)
        if worker not in started:
            started.add(worker)
            all_started.wait()
        with open(where, "a") as f:
            f.write(f"{os.getpid()} {threading.current_thread().name} {torch.get_num_threads()}\n")
        return step(*args)

    model.step_candidates = recorded
    translator.use_workers(3)
    try:
        together = _translate(translator, beam)
    finally:
        del model.step_candidates
    if beam > 1:  # the same batches, each searched alone: the same arithmetic, int8's input scales too
        assert together == alone
    else:  # greedy refill joins a worker's own next batch: another padding (and in int8 other input scales)
        if precision == "fp32":
            assert [text for text, _ in together] == [text for text, _ in alone]
        tolerance = 1e-3 if precision == "fp32" else 0.05
        assert [score for _, score in together] == pytest.approx([score for _, score in alone], abs=tolerance)
    ran_in = {tuple(line.split()) for line in where.read_text().splitlines()}
    assert {n for _, _, n in ran_in} == {"1"} and torch.get_num_threads() == threads
    if kind == "threads":
        assert {name for _, name, _ in ran_in} == {"ctxnmt-search-0", "ctxnmt-search-1", "ctxnmt-search-2"}
        assert {pid for pid, _, _ in ran_in} == {str(os.getpid())}
    else:
        pids = {pid for pid, _, _ in ran_in}
        assert len(pids) == 3 and str(os.getpid()) not in pids


def test_an_error_in_a_worker_reaches_the_caller(model_dir, kind):
    translator = Translator.load(model_dir)
    translator.use_workers(2)
    step, parent = translator.model.step_candidates, os.getpid()

    def broken(*args):
        if threading.current_thread().name == "ctxnmt-search-1" or os.getpid() != parent:
            raise RuntimeError("step failed in a worker")
        return step(*args)

    translator.model.step_candidates = broken
    threads = torch.get_num_threads()
    with pytest.raises(RuntimeError, match="step failed in a worker"):
        translator.translate(LINES, beam=2, batch_size=2)
    assert torch.get_num_threads() == threads


def test_a_killed_worker_fails_the_search_rather_than_leaving_it_waiting(model_dir, monkeypatch):
    from concurrent.futures.process import BrokenProcessPool

    monkeypatch.setattr(workers, "may_fork", lambda: True)
    translator = Translator.load(model_dir)
    translator.use_workers(2)
    step, parent = translator.model.step_candidates, os.getpid()

    def killed(*args):
        if os.getpid() != parent:
            os._exit(9)  # as the kernel's out-of-memory killer would end it
        return step(*args)

    translator.model.step_candidates = killed
    with pytest.raises(BrokenProcessPool):
        translator.translate(LINES, beam=2, batch_size=2)


def test_a_process_with_other_threads_searches_in_threads(monkeypatch):
    """A fork copies only the calling thread: with another thread running (a server's, a
    training's writer), workers are threads; alone, forked processes."""
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not workers.may_fork()
    finally:
        stop.set()
        other.join()
    monkeypatch.setattr(threading, "active_count", lambda: 1)  # as in `ctxnmt translate`
    assert workers.may_fork()


def test_bad_workers_are_one_line_errors(model_dir, tmp_path, capsys):
    translator = Translator.load(model_dir)
    with pytest.raises(ConfigError, match="--workers must be at least 1, got 0"):
        translator.use_workers(0)
    translator.device = "cuda"
    with pytest.raises(ConfigError, match="--workers 2 runs on the CPU only"):
        translator.use_workers(2)
    src, out = tmp_path / "in.es", tmp_path / "out.en"
    src.write_text("\n".join(LINES) + "\n")
    code, _, err = run(["translate", model_dir, "-i", src, "-o", out, "--workers", "0"], capsys)
    assert code != 0 and "--workers must be at least 1" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    code, _, err = run(["translate", model_dir, "-i", src, "-o", out, "--workers", "2", "--beam", "2"], capsys)
    assert code == 0 and len(out.read_text().split("\n")) == len(LINES) + 1


@pytest.fixture(scope="module")
def two_to_two_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("workers-2to2")
    data = document_corpus(tmp)
    cfg = write_config(tmp / "c.yaml", data, tmp / "m")
    assert main([str(a) for a in ["train", cfg, "--quiet", "--set", "training.max_updates=3", "--set",
                                  "model.context=concat", "--set", "model.concat_target=true",
                                  "--set", INT8_EVERY_PRODUCT]]) == 0
    return tmp / "m"


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_workers_take_whole_documents_of_a_model_that_reads_its_own_translations(two_to_two_dir, precision, kind,
                                                                                   tmp_path, monkeypatch):
    """Each worker searches its documents wave by wave: a document's sentence reads the
    translation of its previous sentence, found in the same worker."""
    translator = Translator.load(two_to_two_dir)
    translator.use_precision(precision)
    ids = [f"d{i // 3}" for i in range(len(LINES))]  # four documents
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        alone = translator.translate(LINES, beam=2, batch_size=2, doc_ids=ids)
    finally:
        torch.set_num_threads(threads)
    where, step = tmp_path / "steps", translator.model.step_candidates

    def recorded(*args):
        with open(where, "a") as f:
            f.write(f"{os.getpid()}-{threading.current_thread().name}\n")
        return step(*args)

    deals = []

    def side_by_side(search, dealt):
        deals.append(dealt)
        return workers.side_by_side(search, dealt)

    monkeypatch.setattr(translator_module, "side_by_side", side_by_side)
    translator.model.step_candidates = recorded
    translator.use_workers(2)
    try:
        together = translator.translate(LINES, beam=2, batch_size=2, doc_ids=ids)
    finally:
        del translator.model.step_candidates
    assert len(set(where.read_text().split())) == 2  # both workers searched
    # one deal for the whole run, of whole documents: [0, 1, 2] is d0's (line 12 is empty)
    assert len(deals) == 1 and sorted(d for share in deals[0] for d in share) == [[0, 1, 2], [3, 4, 5], [6, 7, 8],
                                                                                  [9, 10]]
    assert [t.context for t in together] == [t.context for t in alone]
    if precision == "fp32":  # a wave's batches hold only one worker's documents: other padding, the same search
        assert [t.text for t in together] == [t.text for t in alone]
    tolerance = 1e-3 if precision == "fp32" else 0.05
    assert [t.score for t in together] == pytest.approx([t.score for t in alone], abs=tolerance)


def test_documents_are_the_sentences_their_target_context_links():
    from ctxnmt.decoding.translator import _documents

    # sentences 0, 2, 4 one document (each reads the one before), 1 and 3 another, 5 alone
    target_of = [[], [], [[0]], [[1]], [[2]], []]
    assert sorted(_documents([0, 1, 2, 3, 4, 5], target_of)) == [[0, 2, 4], [1, 3], [5]]
    assert sorted(_documents([2, 4, 5], target_of)) == [[2, 4], [5]]  # links to sentences not searched: none
