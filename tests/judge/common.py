"""A small study on disk and a `ctxnmt judge serve` subprocess for the judge tests."""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

SRC = ["uno", "dos", "tres", "cuatro", "", "cinco"]
OUTPUTS = {
    "base": ["one", "two", "three", "four", "", "five"],
    "mean": ["one", "2", "three", "four!", "", "five"],
    "self": ["One", "two", "3", "four", "", "five"],
}


def write_study_inputs(tmp_path: Path) -> list[str]:
    """The command-line arguments of `judge create` for SRC, a reference and OUTPUTS."""
    (tmp_path / "src.es").write_text("\n".join(SRC) + "\n", encoding="utf-8")
    (tmp_path / "ref.en").write_text("\n".join(OUTPUTS["base"]) + "\n", encoding="utf-8")
    args = ["--src", tmp_path / "src.es", "--ref", tmp_path / "ref.en"]
    for name, lines in OUTPUTS.items():
        (tmp_path / f"{name}.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
        args += ["--system", f"{name}={tmp_path / f'{name}.en'}"]
    return [str(a) for a in args]


@contextlib.contextmanager
def judge_server(study: Path):
    """`ctxnmt judge serve STUDY --port 0` in a subprocess; yields (process, base URL)."""
    proc = subprocess.Popen([sys.executable, "-m", "ctxnmt.cli", "judge", "serve", str(study), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert " at http://127.0.0.1:" in line, line
        yield proc, line.split(" at ")[1].split()[0]
    finally:
        proc.kill()
        proc.wait(timeout=10)


def call(base: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path.lstrip("/"), data=data,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())
