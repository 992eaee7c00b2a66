"""Which source a run was trained with: the git commit of the checkout ctxnmt runs from."""
from __future__ import annotations

import functools
import subprocess
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]


@functools.cache
def source_revision() -> str:
    """The commit of the checkout holding this package, with "+modified" when files of the
    package differ from it; "unknown" outside a git checkout (an installed wheel)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(PACKAGE), *args], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
    try:
        commit = git("rev-parse", "HEAD")
        modified = git("status", "--porcelain", "--untracked-files=no", "--", ".")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("+modified" if modified else "")
