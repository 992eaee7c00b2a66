"""Training progress: a tqdm bar on a terminal only; into a file, a plain line now and then
(the bar's carriage returns had filled log files with overwritten copies of itself)."""
from __future__ import annotations

import io

from tqdm import tqdm

from ctxnmt.training import progress as progress_module
from ctxnmt.training.progress import PlainProgress, progress


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_progress_writes_a_line_per_interval_with_the_latest_figures():
    lines, clock = [], Clock()
    bar = PlainProgress(total=200, initial=0, unit="upd", log=lines.append, every=60, clock=clock)
    for update in range(1, 201):
        clock.now = update * 1.0  # one update a second
        bar.set_postfix_str(f"loss/tok {1 / update:.3f}")
        bar.update(1)
    bar.close()
    assert lines == ["training: 60/200 upd (30%), loss/tok 0.017", "training: 120/200 upd (60%), loss/tok 0.008",
                     "training: 180/200 upd (90%), loss/tok 0.006"]


def test_plain_progress_without_a_total_counts_from_where_a_resumed_run_stood():
    lines, clock = [], Clock()
    bar = PlainProgress(total=None, initial=500, unit="upd", log=lines.append, every=10, clock=clock)
    clock.now = 10
    bar.update(3)
    assert lines == ["training: 503 upd"]


def test_a_bar_on_a_terminal_and_plain_lines_elsewhere(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(progress_module.sys, "stderr", io.StringIO())
    assert isinstance(progress(10, 0, "upd"), PlainProgress)
    monkeypatch.setattr(progress_module.sys, "stderr", Terminal())
    bar = progress(10, 0, "upd")
    assert isinstance(bar, tqdm)
    bar.close()
