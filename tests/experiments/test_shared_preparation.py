"""Two `ctxnmt experiment --only` started together on a fresh experiment share one
preparation: the second waits for the first's instead of deleting its half-written files."""
from __future__ import annotations

import subprocess
import sys
import threading

import yaml

from ctxnmt.experiments.runs import PREP_LOCK, plan_runs, prepare_shared
from ctxnmt.experiments.spec import load_experiment

HOLD = "import sys, time; from pathlib import Path; from ctxnmt.utils.lock import waiting_for\n" \
       "with waiting_for(Path(sys.argv[1])):\n    print('held', flush=True); sys.stdin.readline()"


def experiment_file(tmp_path, tiny_config):
    raw = {"name": "two", "out_dir": str(tmp_path / "exp"), "baseline": "a", "budget": {"updates": 2},
           "systems": [{"name": "a", "config": str(tiny_config)},
                       {"name": "b", "config": str(tiny_config), "overrides": ["model.target_context=mean"]}]}
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return load_experiment(path)


def test_a_preparation_under_way_is_waited_for_then_reused(tiny_config, tmp_path):
    experiment = experiment_file(tmp_path, tiny_config)
    runs = plan_runs(experiment)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(experiment.root / PREP_LOCK)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    log: list[str] = []
    try:
        assert holder.stdout.readline().strip() == "held"
        second = threading.Thread(target=prepare_shared, args=(experiment, runs[1:], log.append))
        second.start()
        second.join(timeout=2.0)
        assert second.is_alive() and not log  # waiting: it has neither logged nor begun to write
        assert not (experiment.root / "prep.partial").exists() and not (experiment.root / "prep").exists()
        holder.stdin.write("\n")
        holder.stdin.flush()
        second.join(timeout=120)
    finally:
        holder.kill()
    assert not second.is_alive()
    assert (runs[1].model_dir / "prep" / "fingerprint.json").is_file()
    log.clear()
    prepare_shared(experiment, runs, log.append)  # the first run's copy; the shared data is reused
    assert (runs[0].model_dir / "prep" / "fingerprint.json").is_file()
    assert not any("learning tokenisation" in line for line in log), log
