"""`serve --workers N`: a batch's requests dealt among N forked decoding processes, each
answered as the translator answers it alone; a failing or dead process fails its batch with
a message, and the server still exits 0 on SIGTERM, its processes with it."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch

from ctxnmt.cli import main
from ctxnmt.decoding.translator import Translator
from ctxnmt.serve.batching import Job
from ctxnmt.serve.processes import deal
from tests.serve.conftest import LiveServer


def test_jobs_are_dealt_longest_first_to_the_lightest_share_each_share_in_arrival_order():
    jobs = [Job(["aaaa"], 1), Job(["a", "b"], 1), Job(["aaaaaaaa"], 1), Job(["aaa"], 1), Job(["aa"], 1)]
    # 8 characters to share 0; 4, 3 and then 2 (7 < 8) to share 1; the last 2 to share 0 (8 < 9)
    assert deal(jobs, 2) == [[2, 4], [0, 1, 3]]
    assert deal(jobs[:1], 3) == [[0], [], []]
    assert sorted(j for share in deal(jobs, 4) for j in share) == [0, 1, 2, 3, 4]


def children(pid: int) -> list[int]:
    tasks = Path(f"/proc/{pid}/task")
    return [int(c) for task in tasks.iterdir() for c in (task / "children").read_text().split()]


def test_two_workers_answer_each_request_as_the_translator_does_and_exit_with_the_server(model_dirs, tmp_path):
    server = LiveServer([model_dirs["doc"]], tmp_path / "server.log", "--beam", "2", "--workers", "2",
                        "--max-wait-ms", "500")
    requests = {"document": {"text": "el gato 3 .\nel gato 4 .\nel perro 5 .", "document": True, "attention": True},
                "one": {"text": "el perro 2 ."}, "two": {"text": "el gato 1 .\nel perro 1 ."}}
    answers = {}

    def send(name):
        answers[name] = httpx.post(f"{server.url}/v1/translate", json=requests[name], timeout=60)

    try:
        processes = children(server.process.pid)
        clients = [threading.Thread(target=send, args=(name,)) for name in requests]
        for client in clients:
            client.start()
        for client in clients:
            client.join(60)
        info = httpx.get(f"{server.url}/v1/models", timeout=60).json()
    finally:
        assert server.stop() == 0
    assert len(processes) == 2 and not any(Path(f"/proc/{pid}").exists() for pid in processes)
    assert info["server"]["workers"] == 2
    translator = Translator.load(model_dirs["doc"])
    for name, request in requests.items():
        assert answers[name].status_code == 200, answers[name].text
        lines = request["text"].split("\n")
        ids = ["d"] * len(lines) if request.get("document") else [str(i) for i in range(len(lines))]
        want = translator.translate(lines, beam=2, doc_ids=ids, return_attention=bool(request.get("attention")))
        got = answers[name].json()["sentences"]
        assert [s["translation"] for s in got] == [t.text for t in want]
        assert [s["score"] for s in got] == pytest.approx([t.score for t in want], abs=1e-3)
        if request.get("document"):
            assert [s["context"] for s in got] == [list(t.context) for t in want]
            for s, t in zip(got, want):
                torch.testing.assert_close(torch.tensor(s["attention"], dtype=torch.float64), t.attention.double(),
                                           atol=6e-5, rtol=0)
    batches = {}  # every answer names its whole batch, not its process's share
    for answer in answers.values():
        batch = answer.json()["batch"]
        batches.setdefault(batch["number"], []).append((batch["sentences"], len(answer.json()["sentences"])))
    for members in batches.values():
        assert {size for size, _ in members} == {sum(n for _, n in members)}


FAKE_SERVER = textwrap.dedent("""
    import os, signal, sys
    from ctxnmt.serve.batching import Batch, Job
    from ctxnmt.serve.processes import DecodingProcesses

    def decode(batch):
        if any(line == "boom" for job in batch.jobs for line in job.lines):
            raise ValueError("a bad line")
        if any(line == "die" for job in batch.jobs for line in job.lines):
            os._exit(3)
        return [{"sentences": [line.upper() for line in job.lines], "pid": os.getpid()} for job in batch.jobs]

    processes = DecodingProcesses(decode, 2)
    jobs = [Job(["a", "b"], 1), Job(["cc"], 1), Job(["d"], 1)]
    results = processes(Batch(7, jobs))
    print([r["sentences"] for r in results], [r["batch"] for r in results], len({r["pid"] for r in results}))
    for lines in (["boom"], ["die"], ["x"]):
        try:
            processes(Batch(8, [Job(["ok"], 1), Job(lines, 1)]))
        except Exception as err:
            print(type(err).__name__, err)
    processes.close()
""")


def test_a_decoding_error_or_a_dead_process_fails_its_batch_with_a_message():
    run = subprocess.run([sys.executable, "-c", FAKE_SERVER], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == ("[['A', 'B'], ['CC'], ['D']] " + str([{"number": 7, "sentences": 4}] * 3) + " 2")
    assert lines[1] == "ValueError a bad line"
    assert lines[2] == "CtxnmtError decoding process 0 exited (status 3); restart the server"
    assert lines[3] == lines[2]  # the dead one stays dead: said each time, never a hang


def test_bad_workers_are_one_line_errors(model_dirs, capsys):
    assert main(["serve", str(model_dirs["base"]), "--workers", "0"]) == 2
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said == "ctxnmt serve: error: --workers must be at least 1, not 0"


def test_a_dead_decoding_process_makes_health_fail_and_requests_say_why(model_dirs, tmp_path):
    server = LiveServer([model_dirs["base"]], tmp_path / "server.log", "--beam", "2", "--workers", "2")
    try:
        assert httpx.get(f"{server.url}/health", timeout=60).json()["status"] == "ok"
        dead = children(server.process.pid)[0]
        os.kill(dead, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{dead}").exists() and time.monotonic() < deadline:  # reaped by the server's join
            health = httpx.get(f"{server.url}/health", timeout=60)
            if health.status_code == 503:
                break
            time.sleep(0.1)
        health = httpx.get(f"{server.url}/health", timeout=60)
        answers = [httpx.post(f"{server.url}/v1/translate", json={"text": text}, timeout=60)
                   for text in ("el gato 1 .", "el perro 2 .\nel gato 3 .")]
    finally:
        assert server.stop() == 0
    said = health.json()["problem"]
    assert health.status_code == 503 and health.json()["status"] == "failing"
    assert re.fullmatch(r"decoding process [01] exited \(status -9\); restart the server", said)
    assert [a.status_code for a in answers] == [500, 500]
    assert all(a.json() == {"error": f"decoding failed: CtxnmtError: {said}", "field": "text"} for a in answers)
