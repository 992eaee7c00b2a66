"""The fused CPU kernels of kernels.cpp: built once per machine, loaded on first use.

`available()` is True when the ops are loaded.  The build needs a C++ compiler and
ninja; where either is missing, or CTXNMT_KERNELS=0, the models run the same
mathematics in plain PyTorch (ctxnmt.models.functional chooses).  The library is
built in a private directory and moved into the cache in one rename, so an
interrupted build never leaves a half-written library behind.

Built with -ffast-math, the kernels assume finite inputs: σ's clamp maps a NaN to a bound
where PyTorch would pass it on.  A diverging run is still stopped by its non-finite loss
(ctxnmt.training.trainer) once the NaN reaches the softmax layer; with clip_norm > 0 (every
shipped config) a NaN gradient norm carries it to every parameter in one update.

`python -m ctxnmt.models.kernels` builds them (make install does) and says where.
"""
from __future__ import annotations

import hashlib
import logging
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("kernels.cpp")
FLAGS = ["-O3", "-march=native", "-ffast-math", "-fopenmp"]  # -fopenmp: at::parallel_for runs on torch's libgomp
_state: dict[str, object] = {}


def cache_dir() -> Path:
    root = os.environ.get("CTXNMT_KERNEL_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return Path(root) / "ctxnmt-kernels"


def _cpu_flags() -> str:
    """The CPU's instruction-set flags.  -march=native builds for this CPU, and the library
    crashes on one that lacks an instruction it uses: a cache shared with another CPU (a
    home directory on several machines) must not hand it this CPU's library."""
    try:
        with open("/proc/cpuinfo") as info:
            line = next((line for line in info if line.startswith("flags")), "")
    except OSError:
        line = ""
    return " ".join(sorted(line.partition(":")[2].split())) or f"{platform.machine()} {platform.processor()}"


def library_path() -> Path:
    """Where the library for this source, these flags, this torch and this CPU lives."""
    parts = [SOURCE.read_bytes(), " ".join(FLAGS).encode(), torch.__version__.encode(), _cpu_flags().encode()]
    key = hashlib.sha256(b"\0".join(parts)).hexdigest()
    return cache_dir() / f"ctxnmt_kernels_{key[:16]}.so"


def _build(target: Path) -> None:
    """Build in a child process: torch's builder looks for ninja on PATH, and ninja may come
    from the venv (pip's ninja package) without the venv being activated.  The child's PATH
    gains the venv's bin directory; this process's environment stays as it was."""
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": os.pathsep.join([venv_bin, os.environ.get("PATH", "")])}
    code = "import sys; from ctxnmt.models.kernels import compile_library; compile_library(sys.argv[1])"
    done = subprocess.run([sys.executable, "-c", code, str(target)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise RuntimeError(lines[-1] if lines else f"the kernel build exited with status {done.returncode}")


def compile_library(target: str | Path) -> None:
    """Compile kernels.cpp into `target` (what `_build`'s child process runs)."""
    from torch.utils import cpp_extension

    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        name = "ctxnmt_kernels"
        cpp_extension.load(name, [str(SOURCE)], build_directory=tmp, extra_cflags=FLAGS, extra_ldflags=["-fopenmp"],
                           is_python_module=False, verbose=False)
        os.replace(Path(tmp) / f"{name}.so", target)  # atomic: readers see all of it or nothing


def available() -> bool:
    """Load (building if needed) the kernels once per process; False if they cannot be had."""
    if "ok" not in _state:
        _state["ok"] = _load()
    return bool(_state["ok"])


def _load() -> bool:
    if os.environ.get("CTXNMT_KERNELS", "1") == "0":
        return False
    target = library_path()
    try:
        if not target.exists():
            log.info("building the fused CPU kernels (once per machine) into %s", target.parent)
            _build(target)
        torch.ops.load_library(str(target))
        return True
    except Exception as err:  # no compiler, no ninja, a foreign CPU: the PyTorch path does the same work
        log.warning("fused CPU kernels unavailable, using plain PyTorch (%s)", str(err).splitlines()[0][:200])
        return False


def main() -> int:
    if os.environ.get("CTXNMT_KERNELS", "1") == "0":
        print("CTXNMT_KERNELS=0: the fused CPU kernels are switched off")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(f"fused CPU kernels: {library_path()}" if available() else "fused CPU kernels unavailable (see above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
