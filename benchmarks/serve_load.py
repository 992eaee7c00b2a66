"""Load on `ctxnmt serve` from concurrent clients on 127.0.0.1: throughput and latency
with dynamic batching, against the same load with batching off, in one run.

    python benchmarks/serve_load.py [--model-dir DIR] [--beam 5] [--requests 4] [--max-seconds 90]
                                    [--workers N] [--int8 [--int8-only] [--int8-rounds 5]]

Each client sends single sentences (Bible test verses, each client its own) one after
another.  Levels: 1, 8 and 32 clients against a server with dynamic batching
(--max-batch-sents 32 --max-wait-ms 10), then 32 clients against one with batching off
(--max-batch-sents 1).  A level stops after `--requests` requests per client (at least 16
in all) or `--max-seconds`, whichever comes first.  Reported: start-up time to the first
/health, sentences/s, p50/p95/p99 latency per level, the 32-client throughput ratio
(batching on / off; the bar is 3×), and the server's peak RSS during the 32-client load
against its idle RSS after a warm-up (the bar is 1.5×; with --workers, the decoding
processes' PSS is added, so that the weights they share count once).  With --int8, two more batching
servers, one searching in float32 and one in int8 (`--precision int8`), take turns at the
32-client level (--int8-rounds each), and the ratio of their median p50 latencies, fp32 / int8,
is reported (issue 64's bar is 1.4×); a single level of each is too noisy to compare.
--int8-only runs those turns alone.  --workers N starts every server with `serve --workers N`.

Without --model-dir the model is the demo's size (configs/rnnsearch-small.yaml) briefly
trained (60 updates, a few minutes) into runs/serve-bench; it needs data/bible (make data).
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
CTXNMT = [sys.executable, "-m", "ctxnmt.cli"]


def briefly_trained(model_dir: Path, updates: int) -> Path:
    if not (model_dir / "done.json").is_file():
        subprocess.run([*CTXNMT, "train", str(ROOT / "configs" / "rnnsearch-small.yaml"), "--quiet",
                        "--set", f"model_dir={model_dir}", "--set", f"training.max_updates={updates}",
                        "--set", f"training.valid_every={updates}", "--set", "training.valid_max_sents=50"],
                       check=True, cwd=ROOT)
    return model_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> float:
    """The server's resident memory: its RSS, plus its decoding processes' (--workers) proportional
    share (PSS), so that the weights they share with it by the fork count once."""
    total = _status_kib(pid, "VmRSS:")
    for child in (int(c) for task in Path(f"/proc/{pid}/task").iterdir()
                  for c in (task / "children").read_text().split()):
        total += _status_kib(child, "Pss:", "smaps_rollup")
    return total / 1024


def _status_kib(pid: int, key: str, name: str = "status") -> float:
    try:
        for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:  # gone meanwhile
        pass
    return 0.0

class Server:
    workers = 1  # serve --workers, for every server

    def __init__(self, model_dir: Path, beam: int, *options: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        start = time.perf_counter()
        self.process = subprocess.Popen([*CTXNMT, "serve", str(model_dir), "--port", str(self.port),
                                         "--beam", str(beam), "--workers", str(self.workers), *options],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        while True:
            if self.process.poll() is not None:
                raise SystemExit(f"the server exited with status {self.process.returncode}")
            if time.perf_counter() - start > 120:
                self.stop()
                raise SystemExit("the server did not answer /health within 120 s")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        self.startup_s = time.perf_counter() - start

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)


def run_level(url: str, sentences: list[str], clients: int, per_client: int, max_seconds: float,
              pid: int | None = None) -> dict:
    latencies: list[float] = []
    failures = [0]
    lock = threading.Lock()
    deadline = time.monotonic() + max_seconds
    peak = [rss_mib(pid) if pid else 0.0]
    done = threading.Event()

    def client(k: int) -> None:
        with httpx.Client(timeout=max_seconds + 60) as http:
            for n in range(per_client):
                if time.monotonic() > deadline:
                    return
                text = sentences[(k * per_client + n) % len(sentences)]
                start = time.perf_counter()
                answer = http.post(url + "/v1/translate", json={"text": text})
                with lock:
                    if answer.status_code == 200:
                        latencies.append(time.perf_counter() - start)
                    else:
                        failures[0] += 1

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], rss_mib(pid))

    sampler = threading.Thread(target=sample) if pid else None
    if sampler:
        sampler.start()
    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    done.set()
    if sampler:
        sampler.join()
    q = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 else [latencies[0]] * 99
    return {"clients": clients, "requests": len(latencies), "failures": failures[0], "seconds": round(elapsed, 2),
            "sentences_per_s": round(len(latencies) / elapsed, 2), "p50_ms": round(1000 * q[49], 1),
            "p95_ms": round(1000 * q[94], 1), "p99_ms": round(1000 * q[98], 1), "peak_rss_mib": round(peak[0], 1)}


def batching_levels(model_dir: Path, args, level, sentences: list[str], report: dict) -> None:
    """1, 8 and 32 clients with batching on, then 32 with it off; start-up, throughput and memory into `report`."""
    on = Server(model_dir, args.beam, "--max-batch-sents", "32", "--max-wait-ms", "10")
    try:
        report["startup_s"] = round(on.startup_s, 2)
        run_level(on.url, sentences, 1, 2, args.max_seconds)  # warm-up
        idle = rss_mib(on.process.pid)
        for clients in (1, 8):
            level(on, clients, "on")
        loaded = level(on, 32, "on", on.process.pid)
    finally:
        on.stop()
    off = Server(model_dir, args.beam, "--max-batch-sents", "1")
    try:
        run_level(off.url, sentences, 1, 2, args.max_seconds)
        unbatched = level(off, 32, "off")
    finally:
        off.stop()
    report.update(idle_rss_mib=round(idle, 1), peak_rss_mib_32=loaded["peak_rss_mib"],
                  throughput_ratio_32=round(loaded["sentences_per_s"] / unbatched["sentences_per_s"], 2),
                  rss_ratio_32=round(loaded["peak_rss_mib"] / idle, 3))


def int8_ratio(model_dir: Path, args, level, sentences: list[str]) -> float:
    """The 32-client level against two batching servers, float32 and int8, both up and warmed,
    taking turns for --int8-rounds rounds (a shared machine's slow spells hit both alike):
    the median p50 of the float32 levels over the median p50 of the int8 levels."""
    options = ("--max-batch-sents", "32", "--max-wait-ms", "10")
    servers = {"fp32": Server(model_dir, args.beam, *options),
               "int8": Server(model_dir, args.beam, *options, "--precision", "int8")}
    try:
        for server in servers.values():
            run_level(server.url, sentences, 1, 2, args.max_seconds)
        p50s: dict[str, list[float]] = {name: [] for name in servers}
        for _ in range(args.int8_rounds):
            for name, server in servers.items():
                p50s[name].append(level(server, 32, f"{name} turn")["p50_ms"])
    finally:
        for server in servers.values():
            server.stop()
    return round(statistics.median(p50s["fp32"]) / statistics.median(p50s["int8"]), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", help="a trained model directory (default: runs/serve-bench, built if absent)")
    parser.add_argument("--updates", type=int, default=60, help="training updates of the default model")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--requests", type=int, default=4, help="requests per client and level")
    parser.add_argument("--max-seconds", type=float, default=90.0, help="time limit of each level")
    parser.add_argument("--sentences", default=str(ROOT / "data" / "bible" / "test.es"))
    parser.add_argument("--int8", action="store_true",
                        help="also the 32-client level against batching servers in float32 and in int8 "
                             "(--precision int8), taking turns")
    parser.add_argument("--int8-rounds", type=int, default=5, help="turns of each with --int8")
    parser.add_argument("--workers", type=int, default=1,
                        help="every server decodes in N processes of one thread each (serve --workers)")
    parser.add_argument("--int8-only", action="store_true", help="with --int8, only the float32 / int8 turns")
    args = parser.parse_args()

    Server.workers = args.workers
    model_dir = Path(args.model_dir) if args.model_dir else briefly_trained(ROOT / "runs" / "serve-bench", args.updates)
    sentences = [line for line in Path(args.sentences).read_text(encoding="utf-8").splitlines() if line.strip()]
    rows, report = [], {"model_dir": str(model_dir), "beam": args.beam}

    def level(server, clients, label, pid=None):
        per_client = max(args.requests, -(-16 // clients))
        row = {"batching": label, **run_level(server.url, sentences, clients, per_client, args.max_seconds, pid)}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
        return row

    if not args.int8_only:
        batching_levels(model_dir, args, level, sentences, report)
    if args.int8:
        report["p50_ratio_32_fp32_over_int8"] = int8_ratio(model_dir, args, level, sentences)
    report["levels"] = rows
    print(f"model {model_dir}, beam {args.beam}, {args.workers} worker(s); server start-up "
          f"{report.get('startup_s', '-')} s (to the first /health)")
    print(f"{'batching':>10} {'clients':>7} {'requests':>8} {'sent/s':>7} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    for r in rows:
        print(f"{r['batching']:>10} {r['clients']:>7} {r['requests']:>8} {r['sentences_per_s']:>7} {r['p50_ms']:>8} "
              f"{r['p95_ms']:>8} {r['p99_ms']:>8}")
    if not args.int8_only:
        print(f"32 clients: batching on / off throughput ×{report['throughput_ratio_32']} (bar ×3); peak RSS "
              f"{report['peak_rss_mib_32']} MiB against {report['idle_rss_mib']} MiB idle: ×{report['rss_ratio_32']} "
              f"(bar ×1.5)")
    if args.int8:
        print(f"32 clients, batching on, {args.int8_rounds} turns each: median p50 latency fp32 / int8 "
              f"×{report['p50_ratio_32_fp32_over_int8']} (bar ×1.4)")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
