"""Tiny trained model directories for the server's tests (a few seconds each), and a live
`ctxnmt serve` process on 127.0.0.1."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import httpx
import pytest

from ctxnmt.cli import main
from tests.test_cli import document_corpus, write_config

with warnings.catch_warnings():  # starlette asks for httpx2, which FastAPI's TestClient does not use yet
    warnings.simplefilter("ignore")
    import fastapi.testclient  # noqa: F401

# the baseline, a model with every signal the page draws, and a document-context model
VARIANTS = {
    "base": [],
    # int8_from 0: under --precision int8 every product of this tiny model in int8 (the default leaves
    # products below a million multiply-adds in float32)
    "rich": ["model.target_context=self-attentive", "model.output=adaptive", "model.cell=adaptive-gru",
             "decoding.int8_from=0"],
    "doc": ["model.doc_init_dec=true", "model.doc_aux=gated-aux", "model.doc_init_enc=true"],
}


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("serve-models")
    data = document_corpus(tmp)
    dirs = {}
    for name, overrides in VARIANTS.items():
        cfg = write_config(tmp / f"{name}.yaml", data, tmp / name)
        args = ["train", cfg, "--quiet", "--set", "training.max_updates=4", "--set", "training.threads=1"]
        for item in overrides:
            args += ["--set", item]
        assert main([str(a) for a in args]) == 0
        dirs[name] = tmp / name
    return dirs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """`ctxnmt serve` in a subprocess on 127.0.0.1; stderr goes to a file the tests read."""

    def __init__(self, model_dirs: list, log: Path, *options: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        command = [sys.executable, "-m", "ctxnmt.cli", "serve", *map(str, model_dirs), "--port", str(self.port),
                   *options]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log.open("w"), env=env)
        deadline = time.monotonic() + 120  # generous: the CI machine may be busy
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited ({self.process.returncode}): {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("the server did not answer /health within 120 s")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def stderr(self) -> str:
        return self.log.read_text()


@pytest.fixture
def live_server(model_dirs, tmp_path):
    servers = []

    def start(name="rich", *options):
        names = name if isinstance(name, list) else [name]
        server = LiveServer([model_dirs[n] for n in names], tmp_path / f"server{len(servers)}.log", *options)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
