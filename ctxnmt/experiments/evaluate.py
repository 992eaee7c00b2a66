"""Test-set translation, scores and significance for an experiment, each cached.

Every cached result is stored next to a key made of the hashes of what it was
computed from (checkpoint, input, output, reference, test settings), so a rerun
recomputes exactly what changed or is missing and nothing else.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxnmt.data.corpus import check_same_length, read_lines
from ctxnmt.data.prepare import ensure_corpus, split_paths
from ctxnmt.decoding.translator import Translator
from ctxnmt.errors import CheckpointError, DataError
from ctxnmt.evaluation.metrics import score_all
from ctxnmt.evaluation.replicates import stratified_ar
from ctxnmt.evaluation.significance import compare
from ctxnmt.experiments.runs import Run
from ctxnmt.experiments.spec import SignificanceSpec
from ctxnmt.models.context import context_sentences
from ctxnmt.models.nmt import count_parameters
from ctxnmt.utils.checkpoint import default_checkpoint
from ctxnmt.utils.io import atomic_write, file_sha256, read_json_object
from ctxnmt.utils.messages import Log, to_stderr
from ctxnmt.utils.threads import setup_threads

SCORE_KEYS = ("bleu_tok", "bleu", "chrf", "ter")


@dataclass
class TestSet:
    src_path: Path
    ref_path: Path
    lang: str
    src: list[str]
    refs: list[str]
    doc_path: Path | None = None  # the test set's document ids, for document-context models


@dataclass
class Output:
    """One system's test-set output (one seed of a trained system, or an external file)."""

    system: str
    seed: int | None
    hyp_path: Path
    lines: list[str]
    scores: dict[str, Any]
    decode: dict[str, Any] | None = None  # trained systems: speed and parameter count
    training: dict[str, Any] | None = None  # trained systems: what done.json recorded


def load_test_set(run: Run, log: Log = to_stderr) -> TestSet:
    data = run.config.data
    ensure_corpus(data, log)
    src_path, ref_path, doc_path = split_paths(data, "test")
    src, refs = read_lines(src_path), read_lines(ref_path)
    check_same_length(src_path, src, ref_path, refs)
    return TestSet(src_path, ref_path, data.tgt_lang, src, refs, doc_path if doc_path.is_file() else None)


def document_ids(run: Run, test: TestSet) -> Path | None:
    """The test set's document ids when the run's model reads previous sentences."""
    if not context_sentences(run.config.model):
        return None
    if test.doc_path is None:
        raise DataError(f"system '{run.system}' uses document context but the test set has no .doc file "
                        f"next to {test.src_path}")
    return test.doc_path


def cached(path: Path, key: dict[str, Any], compute: Callable[[], dict[str, Any]],
           still_valid: Callable[[dict[str, Any]], bool] = lambda value: True) -> tuple[dict[str, Any], bool]:
    """The value stored at ``path`` under ``key``, else ``compute()`` stored there; and whether it was cached."""
    if path.is_file():
        try:
            stored = read_json_object(path)
        except DataError:  # a broken cache is no cache: computed again and rewritten
            stored = {}
        if stored.get("key") == key and "value" in stored and still_valid(stored["value"]):
            return stored["value"], True
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w") as fh:
        json.dump({"key": key, "value": value}, fh, indent=1)
    return value, False


def has_checkpoint(run: Run) -> bool:
    """Whether the run holds the checkpoint `ctxnmt translate` uses by default (best.pt, else last.pt)."""
    try:
        default_checkpoint(run.model_dir)
    except CheckpointError:
        return False
    return True


def restored_translation(record: Path, out: Path, test: TestSet, what: str, log: Log = to_stderr) -> dict[str, Any]:
    """The recorded translation of a run restored from an export (`ctxnmt experiment --restore`),
    whose checkpoints were not kept: it stands as long as its output and input are the recorded ones."""
    if not record.is_file():
        raise CheckpointError(f"{what}: {record.parent} has no checkpoint and no recorded test translation")
    stored = read_json_object(record)
    if not out.is_file() or file_sha256(out) != stored["value"].get("output_sha256"):
        raise CheckpointError(f"{what}: {out} is missing or differs from the translation {record} records, "
                              f"and there is no checkpoint to translate again")
    if stored["key"].get("input") != file_sha256(test.src_path):
        raise CheckpointError(f"{what}: {record} was translated from another {test.src_path}, "
                              f"and there is no checkpoint to translate again")
    log(f"{what}: restored test translation (no checkpoint)")
    return stored["value"]


def hyp_path(run: Run, test: TestSet) -> Path:
    return run.model_dir / f"test.hyp.{test.lang}"


def translate_run(run: Run, test: TestSet, log: Log = to_stderr) -> dict[str, Any]:
    """Translate the test set with the run's selected checkpoint and beam; timed."""
    def key() -> dict[str, Any]:
        return {"checkpoint": file_sha256(default_checkpoint(run.model_dir)), "input": file_sha256(test.src_path)}

    return _translated([run], hyp_path(run, test), test, key, f"{run.system} seed {run.seed}", log)


def _translated(runs: list[Run], out: Path, test: TestSet, key: Callable[[], dict[str, Any]], what: str,
                log: Log) -> dict[str, Any]:
    """The test set translated by `runs` (one run, or an ensemble) into `out`, cached in the
    decode.json beside it under `key()`; restored as recorded where a run kept no checkpoint."""
    record = out.parent / "decode.json"
    if not all(has_checkpoint(run) for run in runs):
        return restored_translation(record, out, test, what, log)

    def output_intact(info: dict[str, Any]) -> bool:
        return out.is_file() and file_sha256(out) == info.get("output_sha256")

    out.parent.mkdir(parents=True, exist_ok=True)
    info, was_cached = cached(record, key(), lambda: _decode(runs, test, out), output_intact)
    if was_cached:
        log(f"{what}: test translation cached")
    return info


def _decode(runs: list[Run], test: TestSet, out: Path) -> dict[str, Any]:
    """Translate the test set with one run's model or the ensemble of several; timed."""
    first = runs[0].config
    setup_threads(first.training.threads)
    dirs = [run.model_dir for run in runs]
    translator = Translator.load(dirs if len(dirs) > 1 else dirs[0], device=first.training.device)
    doc_path = next((path for path in (document_ids(run, test) for run in runs) if path), None)
    doc_ids = read_lines(doc_path) if doc_path else None
    start = time.perf_counter()
    results = translator.translate(test.src, doc_ids=doc_ids)
    seconds = time.perf_counter() - start
    with atomic_write(out, "w") as fh:
        fh.writelines(r.text + "\n" for r in results)
    return {"checkpoint": default_checkpoint(runs[0].model_dir).name, "beam": first.decoding.beam,
            "device": first.training.device, "sentences": len(test.src), "seconds": seconds,
            "sentences_per_s": len(test.src) / seconds if seconds else 0.0,
            "parameters": sum(count_parameters(m) for m in translator.members),
            "output_sha256": file_sha256(out)}


def ensemble_dir(root: Path, name: str, seed: int) -> Path:
    return root / "ensembles" / name / f"seed{seed}"


def undecodable_members(name: str, seed: int, members: list[Run], root: Path) -> list[Run]:
    """The members restored without a checkpoint, where the ensemble's own translation of this
    seed is not on record either: the ensemble can then be neither decoded nor restored."""
    if (ensemble_dir(root, name, seed) / "decode.json").is_file():
        return []
    return [run for run in members if not has_checkpoint(run)]


def translate_ensemble(name: str, seed: int, members: list[Run], test: TestSet, root: Path,
                       log: Log = to_stderr) -> tuple[Path, dict[str, Any]]:
    """The test set decoded by the members' same-seed runs together (average of log-probabilities,
    the first member's beam); cached on every member's checkpoint."""
    out = ensemble_dir(root, name, seed) / f"test.hyp.{test.lang}"

    def key() -> dict[str, Any]:
        return {"checkpoints": [file_sha256(default_checkpoint(run.model_dir)) for run in members],
                "input": file_sha256(test.src_path)}

    return out, _translated(members, out, test, key, f"{name} seed {seed}", log)


def score_output(hyp: Path, test: TestSet, cache: Path) -> dict[str, Any]:
    """Tokenised BLEU, sacreBLEU, chrF and TER of one output file, with signatures."""
    def compute() -> dict[str, Any]:
        lines = read_lines(hyp, allow_empty=True)
        check_same_length(hyp, lines, test.ref_path, test.refs)
        scores = score_all(lines, test.refs, lang=test.lang)
        return {**{k: scores[k].value for k in SCORE_KEYS},
                "signatures": {k: f"{scores[k].name}|{scores[k].signature}" for k in SCORE_KEYS}}

    key = {"hyp": file_sha256(hyp), "ref": file_sha256(test.ref_path), "lang": test.lang}
    return cached(cache, key, compute)[0]


def significance(baseline: Output, system: Output, test: TestSet, spec: SignificanceSpec,
                 cache: Path) -> dict[str, Any]:
    """The paired test of one system output against one baseline output."""
    def compute() -> dict[str, Any]:
        result = compare(baseline.lines, system.lines, test.refs, test=spec.test, metric=spec.metric,
                         n=spec.samples or None, seed=spec.seed)
        return result.to_dict()

    key = {"baseline": file_sha256(baseline.hyp_path), "system": file_sha256(system.hyp_path),
           "ref": file_sha256(test.ref_path), "spec": {**spec.__dict__}}
    return cached(cache, key, compute)[0]


def replicate_significance(pairs: list[tuple[Output, Output]], test: TestSet, spec: SignificanceSpec,
                           cache: Path) -> dict[str, Any]:
    """Clark et al.'s stratified approximate randomisation over every seed pair at once."""
    def compute() -> dict[str, Any]:
        return stratified_ar([b.lines for b, _ in pairs], [s.lines for _, s in pairs], test.refs, spec.metric,
                             spec.samples or 10000, spec.seed).to_dict()

    key = {"pairs": [[file_sha256(b.hyp_path), file_sha256(s.hyp_path)] for b, s in pairs],
           "ref": file_sha256(test.ref_path), "metric": spec.metric, "samples": spec.samples, "seed": spec.seed}
    return cached(cache, key, compute)[0]


def scored_output(system: str, seed: int | None, hyp: Path, test: TestSet, cache: Path,
                  decode: dict[str, Any] | None = None, training: dict[str, Any] | None = None) -> Output:
    """An output file, refused unless line-aligned with the references, and its scores (cached in `cache`)."""
    lines = read_lines(hyp, allow_empty=True)
    check_same_length(hyp, lines, test.ref_path, test.refs)
    return Output(system, seed, hyp, lines, score_output(hyp, test, cache), decode, training)


def external_output(name: str, path: str, test: TestSet, root: Path, seed: int | None = None) -> Output:
    return scored_output(name, seed, Path(path), test, external_scores_path(root, name, seed))


def external_scores_path(root: Path, name: str, seed: int | None = None) -> Path:
    """Where experiment directory `root` keeps the scores of its external output `name` (of
    one seed, where it has one per seed)."""
    return root / "external" / (f"{name}.scores.json" if seed is None else f"{name}-seed{seed}.scores.json")
