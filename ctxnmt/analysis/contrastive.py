"""`ctxnmt score contrastive`: does a model prefer the correct translation to minimally
different wrong ones (Müller et al. 2018, ContraPro; Bawden et al. 2018; Voita et al. 2019)?

Each example is a source sentence, its document context (the previous source sentences),
the correct translation and one or more contrastive ones (the correct one with, say, one
pronoun changed).  The model scores every candidate by its summed token log-probability;
an example is right when the correct candidate scores strictly highest.  Accuracy is the
share of right examples, overall, per tag and by where the antecedent is, under each
context condition: the example's own context, none, or as many sentences of another
document's (an example of another document lends its context's last sentences).

Two input forms:
- ContraPro's JSON: a list of objects with "source", "ref segment" (the correct
  translation), "errors" ([{"contrastive": …}, …]), and where given "document id",
  "ante distance", "src pronoun" / "ref pronoun"; plus "context", a list of the previous
  source sentences, oldest first (ContraPro leaves the context in the OpenSubtitles
  documents; its conversion script extracts it), and "tag" or "class" for the phenomenon
  (else ContraPro's category, "src pronoun:ref pronoun").
- TSV with the header `document  tag  context  source  correct  contrastive …` (one or more
  contrastive columns), the context's sentences separated by " ||| ".
"""
from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ctxnmt.analysis.context import CONDITIONS, chosen_conditions
from ctxnmt.decoding.commands import add_precision, use_precision_flag
from ctxnmt.decoding.translator import Translator
from ctxnmt.errors import DataError
from ctxnmt.evaluation.significance import mcnemar, wilson
from ctxnmt.utils.arguments import add_checkpoint, add_model_dirs, add_output
from ctxnmt.utils.io import atomic_write
from ctxnmt.utils.messages import to_stderr

TSV_COLUMNS = ("document", "tag", "context", "source", "correct", "contrastive")
CONTEXT_SEPARATOR = " ||| "


@dataclass
class Example:
    source: str
    correct: str
    contrastive: list[str]
    context: list[str] = field(default_factory=list)  # previous source sentences, oldest first
    document: str = ""
    tag: str = "all"
    distance: int | None = None  # sentences between the pronoun and its antecedent (0: the same one)

    @property
    def antecedent(self) -> str:
        if self.distance is None:
            return "unknown"
        return "same sentence" if self.distance == 0 else "earlier sentences"


def read_examples(path: str) -> list[Example]:
    """The examples of a ContraPro-style JSON file or a TSV file (module docstring)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not UTF-8 text (byte {err.start})") from None
    except OSError as err:
        raise DataError(f"{path}: cannot read it ({err.strerror})") from None
    examples = _from_json(path, text) if text.lstrip().startswith("[") else _from_tsv(path, text)
    if not examples:
        raise DataError(f"{path}: no examples")
    return examples


def _from_json(path: str, text: str) -> list[Example]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: not valid JSON at line {err.lineno} column {err.colno}: {err.msg}") from None
    return [_json_example(f"{path}: example {n}", item) for n, item in enumerate(items, start=1)]


def _json_example(where: str, item) -> Example:
    if not isinstance(item, dict):
        raise DataError(f"{where}: an object was expected, not {type(item).__name__}")
    for key in ("source", "ref segment"):
        if not isinstance(item.get(key), str) or not item[key].strip():
            raise DataError(f"{where}: no '{key}' text")
    errors = item.get("errors")
    if not isinstance(errors, list) or not errors:
        raise DataError(f"{where}: no contrastive target ('errors' is empty or missing)")
    wrong = [e.get("contrastive") if isinstance(e, dict) else None for e in errors]
    if not all(isinstance(w, str) and w.strip() for w in wrong):
        raise DataError(f"{where}: every item of 'errors' needs a 'contrastive' text")
    context = item.get("context", [])
    context = [context] if isinstance(context, str) else context
    if not isinstance(context, list) or not all(isinstance(c, str) for c in context):
        raise DataError(f"{where}: 'context' must be a list of source sentences")
    distance = item.get("ante distance")
    if distance is not None and (not isinstance(distance, int) or distance < 0):
        raise DataError(f"{where}: 'ante distance' must be a whole number of sentences, not {distance!r}")
    return Example(item["source"], item["ref segment"], wrong, [c for c in context if c.strip()],
                   str(item.get("document id", "")), _tag(item), distance)


def _tag(item: dict) -> str:
    for key in ("tag", "class"):
        if item.get(key):
            return str(item[key])
    if "src pronoun" in item or "ref pronoun" in item:
        return f"{item.get('src pronoun', '')}:{item.get('ref pronoun', '')}".lower()
    return "all"


def _from_tsv(path: str, text: str) -> list[Example]:
    rows = text.splitlines()
    header = rows[0].split("\t") if rows else []
    if tuple(header[:len(TSV_COLUMNS)]) != TSV_COLUMNS or set(header[len(TSV_COLUMNS):]) - {"contrastive"}:
        raise DataError(f"{path}:1: the header must be {' '.join(TSV_COLUMNS)} [contrastive …] (tab-separated), "
                        "or the file a JSON list")
    examples = []
    for number, row in enumerate(rows[1:], start=2):
        cells = row.split("\t")
        if len(cells) < len(TSV_COLUMNS):
            raise DataError(f"{path}:{number}: {len(cells)} columns; an example needs {len(TSV_COLUMNS)} or more "
                            "(at least one contrastive translation)")
        document, tag, context, source, correct, *wrong = cells
        if not source.strip() or not correct.strip() or not all(w.strip() for w in wrong):
            raise DataError(f"{path}:{number}: an empty source, correct or contrastive translation")
        examples.append(Example(source, correct, wrong, [c for c in context.split(CONTEXT_SEPARATOR) if c.strip()],
                                document, tag or "all"))
    return examples


def condition_contexts(examples: list[Example], condition: str, seed: int = 1) -> list[list[str]]:
    """Each example's context under `condition`: its own, none, or the last sentences of another
    document's example with at least as many (the same amount, none of its information)."""
    if condition == "own":
        return [e.context for e in examples]
    if condition == "none":
        return [[] for _ in examples]
    if condition != "other":
        raise DataError(f"unknown context condition '{condition}' (they are {', '.join(CONDITIONS)})")
    rng = random.Random(seed)
    longest = max(len(e.context) for e in examples)
    # at_least[n]: the examples with n context sentences or more (n ≤ the longest context)
    at_least = [[i for i, e in enumerate(examples) if len(e.context) >= n] for n in range(longest + 1)]
    return [_lend(examples, n, at_least[len(example.context)], rng) if example.context else []
            for n, example in enumerate(examples)]


def _lend(examples: list[Example], n: int, donors: list[int], rng: random.Random) -> list[str]:
    """The last sentences of a random donor's context, as many as example n's, from another
    document (any other context where documents are not given)."""
    example = examples[n]

    def other(i: int) -> bool:
        return examples[i].context != example.context and (not example.document
                                                            or examples[i].document != example.document)
    for _ in range(64):  # most draws are from another document: try a few before listing them
        pick = donors[rng.randrange(len(donors))]
        if other(pick):
            return examples[pick].context[-len(example.context):]
    usable = [i for i in donors if other(i)]
    if not usable:
        raise DataError(f"example {n + 1}: no example of another document has the {len(example.context)} "
                        "context sentences it needs")
    return examples[rng.choice(usable)].context[-len(example.context):]


def candidate_scores(translator, examples: list[Example], contexts: list[list[str]]) -> list[np.ndarray]:
    """Each example's summed log-probabilities: the correct candidate first, then the contrastive
    ones, each read after the example's context in `contexts`."""
    lines, targets, doc_ids, owner = [], [], [], []
    for n, (example, context) in enumerate(zip(examples, contexts)):
        for k, candidate in enumerate([example.correct, *example.contrastive]):
            block = f"example{n}.{k}"
            lines += [*context, example.source]
            targets += [None] * len(context) + [candidate]
            doc_ids += [block] * (len(context) + 1)
            owner.append(n)
    reads_context = translator.document_sents > 0
    scores = translator.score(lines, targets, doc_ids if reads_context else None)
    totals: list[list[float]] = [[] for _ in examples]
    for score, n in zip((s for s in scores if s is not None), owner):
        totals[n].append(score.total)
    return [np.array(t) for t in totals]


def right(scores: np.ndarray) -> bool:
    """The correct candidate (first) scores strictly above every contrastive one."""
    return bool(scores[0] > scores[1:].max())


def contrastive_report(translator, examples: list[Example], conditions: tuple[str, ...], seed: int = 1) -> dict:
    """Accuracy per condition with its Wilson interval and McNemar's p against 'own', per tag
    and per antecedent place; a model that reads no context is scored once ('own' = 'none')."""
    if not translator.document_sents:
        conditions = ("own",)
    outcomes, scores = {}, {}
    for condition in conditions:
        scores[condition] = candidate_scores(translator, examples, condition_contexts(examples, condition, seed))
        outcomes[condition] = np.array([right(s) for s in scores[condition]], dtype=bool)
    report = {"examples": len(examples), "seed": seed, "reads_context": bool(translator.document_sents),
              "conditions": {}}
    for condition, ok in outcomes.items():
        row = _accuracy(ok)
        if condition != "own" and "own" in outcomes:
            row["p_vs_own"] = mcnemar(outcomes["own"], ok)
        report["conditions"][condition] = row
    for name, key in (("tags", lambda e: e.tag), ("antecedent", lambda e: e.antecedent)):
        groups = defaultdict(list)
        for n, example in enumerate(examples):
            groups[key(example)].append(n)
        report[name] = {group: {c: _accuracy(ok[rows]) for c, ok in outcomes.items()}
                        for group, rows in sorted(groups.items())}
    report["scores"] = {c: [s.tolist() for s in found] for c, found in scores.items()}
    return report


def _accuracy(ok: np.ndarray) -> dict:
    low, high = wilson(int(ok.sum()), len(ok))
    return {"accuracy": float(ok.mean()) if len(ok) else 0.0, "right": int(ok.sum()), "n": len(ok),
            "interval": [low, high]}


def markdown(report: dict) -> str:
    lines = ["| context | accuracy | 95% interval (Wilson) | examples | McNemar p vs own |", "|---|---|---|---|---|"]
    for condition, row in report["conditions"].items():
        p = f"{row['p_vs_own']:.3f}" if "p_vs_own" in row else ""
        lines.append(f"| {condition} | {row['accuracy']:.3f} | [{row['interval'][0]:.3f}, {row['interval'][1]:.3f}] "
                     f"| {row['n']} | {p} |")
    conditions = list(report["conditions"])
    for title, key in (("tag", "tags"), ("antecedent", "antecedent")):
        if len(report[key]) > 1 or title == "antecedent" and "unknown" not in report[key]:
            lines += ["", f"| {title} | " + " | ".join(conditions) + " | examples |",
                      "|---|" + "---|" * (len(conditions) + 1)]
            for group, by in report[key].items():
                cells = " | ".join(f"{by[c]['accuracy']:.3f}" for c in conditions)
                lines.append(f"| {group} | {cells} | {by[conditions[0]]['n']} |")
    if not report["reads_context"]:
        lines += ["", "This model reads no document context: its scores are the same under any context."]
    return "\n".join(lines) + "\n"


def register(score) -> None:
    """`contrastive` as a kind of the `score` command's parser, with its line in score's usage."""
    score.usage += "\n       %(prog)s contrastive MODEL_DIR [MODEL_DIR ...] FILE [options]"
    # prog: argparse would make the kinds' prog of score's usage, which is more than its name
    kinds = score.add_subparsers(dest="score_kind", metavar="KIND", prog=score.prog,
                                 help="contrastive: score a model's preference for correct over contrastive "
                                      "translations (ctxnmt score contrastive --help)")
    p = kinds.add_parser("contrastive", help="contrastive evaluation: accuracy of a model's preference for the "
                                             "correct translation, with each context",
                         description="Score each example's correct and contrastive translations with a model (or "
                                     "an ensemble's combined probabilities) and report the share where the correct "
                                     "one scores highest, per context condition, per tag and by where the "
                                     "antecedent is. FILE: ContraPro-style JSON or TSV (docs/analysis.md).")
    add_model_dirs(p, "an ensemble, scored with its combined probabilities")
    p.add_argument("file", metavar="FILE", help="the examples: a JSON list or a TSV file with a header")
    p.add_argument("--contexts", default=",".join(CONDITIONS),
                   help="conditions to score: own, none, other (default %(default)s)")
    p.add_argument("--seed", type=int, default=1, help="which examples lend their context for 'other' (default 1)")
    p.add_argument("--ensemble-mode", choices=("logprob", "prob"), default="logprob",
                   help="how an ensemble combines its members (default %(default)s)")
    add_output(p, "write the report with every example's candidate scores as JSON")
    add_checkpoint(p)
    add_precision(p, ("fp32", "int8"))
    p.set_defaults(func=cmd_contrastive)


def cmd_contrastive(args) -> int:
    from_config = chosen_conditions(args.contexts)
    examples = read_examples(args.file)
    translator = Translator.load(args.model_dirs if len(args.model_dirs) > 1 else args.model_dirs[0],
                                 checkpoint=args.checkpoint, ensemble_mode=args.ensemble_mode)
    use_precision_flag(translator, args.precision)
    if translator.reads_target:
        to_stderr("target-side context: the model's own translations of each example's context sentences")
    report = contrastive_report(translator, examples, from_config, args.seed)
    if args.output:
        with atomic_write(args.output, "w") as fh:
            json.dump(report, fh, indent=1)
            fh.write("\n")
    print(markdown(report).rstrip())
    return 0
