"""`ctxnmt lm compare`: several LM configs, each trained with several seeds, by test perplexity.

The target-context papers report their summaries' effect on a language model as one
perplexity per system.  Over seeds the honest figure is a mean with its spread and the
per-seed difference to the baseline (the first config) trained with the same seed; a run
is `{out}/{config name}/seed{s}` and a finished one (results.json beside a config.yaml
equal to its effective config) is never trained again; an interrupted one goes on
exactly from its last checkpoint.  So the command can be run again after an interruption,
and `--only` lets two processes train different runs of one comparison.
"""
from __future__ import annotations

import json
import shutil
import statistics
from dataclasses import asdict
from pathlib import Path

from ctxnmt.errors import ConfigError
from ctxnmt.utils.io import atomic_write
from ctxnmt.utils.selectors import select


def run_config(config_path: str, overrides: list[str], seed: int, out: Path):
    from ctxnmt.lm.config import load_lm_config

    name = load_lm_config(config_path, overrides).name
    return load_lm_config(config_path, [*overrides, f"training.seed={seed}",
                                        f"model_dir={out / name / f'seed{seed}'}"])


def run_state(config) -> str:
    """'finished', 'resume' (last.pt beside the same config.yaml) or 'fresh'; another config is an error."""
    from ctxnmt.lm.config import load_lm_config

    directory = Path(config.model_dir)
    if not (directory / "config.yaml").is_file():
        return "fresh"
    if asdict(load_lm_config(directory / "config.yaml")) != asdict(config):
        raise ConfigError(f"{directory} was trained with a different config; use another --out or delete it")
    if (directory / "results.json").is_file():
        return "finished"
    return "resume" if (directory / "checkpoints" / "last.pt").is_file() else "fresh"


def train_run(config, state: str, log) -> None:
    """Train one run, going on from its last checkpoint where it has one."""
    from ctxnmt.lm.commands import train_and_score

    directory = Path(config.model_dir)
    if state == "fresh" and directory.exists():
        log(f"{directory}: unfinished and without a checkpoint, training again from the start")
        shutil.rmtree(directory)
    train_and_score(config, quiet=True, resume=state == "resume")


def summarise(results: dict[str, dict[int, float]], baseline: str) -> list[dict]:
    rows = []
    for name, by_seed in results.items():
        ppl = [by_seed[s] for s in sorted(by_seed)]
        row = {"system": name, "seeds": sorted(by_seed), "test_ppl": ppl, "mean": statistics.fmean(ppl),
               "sd": statistics.stdev(ppl) if len(ppl) > 1 else None}
        if name != baseline:
            deltas = [by_seed[s] - results[baseline][s] for s in sorted(by_seed) if s in results[baseline]]
            row["delta"] = deltas
            row["delta_mean"] = statistics.fmean(deltas) if deltas else None
            row["delta_sd"] = statistics.stdev(deltas) if len(deltas) > 1 else None
            row["lower_every_seed"] = bool(deltas) and all(d < 0 for d in deltas)
        rows.append(row)
    return rows


def _pm(mean: float | None, sd: float | None) -> str:
    if mean is None:
        return "–"
    return f"{mean:.2f}" if sd is None else f"{mean:.2f} ± {sd:.2f}"


def markdown(rows: list[dict], seeds: list[int]) -> str:
    head = "| system | test ppl (mean ± sd) | per seed | Δ vs baseline, same seed (mean ± sd) | lower on every seed |"
    lines = [f"# LM comparison: test perplexity over seeds {', '.join(map(str, seeds))}", "", head,
             "|---|---|---|---|---|"]
    for row in rows:
        per_seed = ", ".join(f"{p:.2f}" for p in row["test_ppl"])
        delta = _pm(row.get("delta_mean"), row.get("delta_sd")) if "delta" in row else "baseline"
        every = ("yes" if row["lower_every_seed"] else "no") if "delta" in row else ""
        lines.append(f"| {row['system']} | {_pm(row['mean'], row['sd'])} | {per_seed} | {delta} | {every} |")
    return "\n".join(lines) + "\n"


def compare(configs: list[str], overrides: list[str], seeds: list[int], out: Path, log=print,
            only: list[str] | None = None) -> list[dict] | None:
    """Train what is missing (of `only`'s runs, if given) and write the report; None, and no
    report, while some run has not finished."""
    if len(set(seeds)) != len(seeds) or not seeds:
        raise ConfigError(f"--seeds must be distinct, got {seeds}")
    runs = [(path, seed, run_config(path, overrides, seed, out)) for path in configs for seed in seeds]
    names = list(dict.fromkeys(config.name for _, _, config in runs))
    if len(names) != len(configs):
        raise ConfigError("two configs have the same name; each system needs its own (set it with name: in the file)")
    states = {id(config): run_state(config) for _, _, config in runs}  # every directory checked first
    chosen = select(runs, only, lambda run: (run[2].name, run[1]), "comparison") if only else runs
    for _, seed, config in chosen:
        state = states[id(config)]
        if state == "finished":
            log(f"{config.name} seed {seed}: already trained")
            continue
        how = "resuming from its last checkpoint" if state == "resume" else "training"
        log(f"{config.name} seed {seed}: {how} in {config.model_dir}")
        train_run(config, state, log)
    waiting = [f"{config.name}:{seed}" for _, seed, config in runs if run_state(config) != "finished"]
    if waiting:
        log(f"not finished yet, no report: {', '.join(waiting)}")
        return None
    results: dict[str, dict[int, float]] = {}
    for _, seed, config in runs:
        stored = json.loads((Path(config.model_dir) / "results.json").read_text(encoding="utf-8"))
        results.setdefault(config.name, {})[seed] = stored["test_ppl"]
    rows = summarise(results, names[0])
    out.mkdir(parents=True, exist_ok=True)
    with atomic_write(out / "report.json", "w") as fh:
        json.dump({"configs": configs, "overrides": overrides, "seeds": seeds, "rows": rows}, fh, indent=1)
    with atomic_write(out / "report.md", "w") as fh:
        fh.write(markdown(rows, seeds))
    return rows
