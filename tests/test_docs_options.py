"""The docs name only options and configs that exist.

README.md and docs/*.md name registry-backed model options (`model.cell: adaptive-gru`,
`--set model.output=adaptive-gain3`, the model table of docs/reference.md) and config files
(`configs/adaptive-{gru,both}-small.yaml`).  A renamed or removed option or config
leaves such a name behind; this test finds it.  Checked: a value written right after
its key (`model.KEY: VALUE`, `model.KEY=VALUE`; `a | b` lists; a trailing `*` is a
prefix), the value column of a table whose first column names the key (rows with an
empty first column continue the key above), and every `configs/…yaml` or
`experiments/NAME.yaml` path (braces expanded, `*` globbed).  A name a doc registers
itself in a code block (`@TARGET_CONTEXTS.register("last-two")`, docs/new-variant.md)
counts as registered in that doc.  Names in prose without their key are not checked:
a historical sentence may name an option that no longer exists."""
from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

import ctxnmt.models.components  # noqa: F401  (registers every component)
from ctxnmt.lm.config import SUMMARIES
from ctxnmt.models import registry

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

REGISTRIES = {name: obj for name, obj in vars(registry).items() if isinstance(obj, registry.Registry)}
KNOWN = {r.kind: set(r.names()) for r in REGISTRIES.values()}
KNOWN["encoder_cell"] = KNOWN["cell"]
# the language model's model.summary (ctxnmt/lm/config.py): its own names and any target context
KNOWN["summary"] = set(SUMMARIES) | KNOWN["target_context"]

NAME = r"[a-z][a-z0-9-]*\*?"
KEY_VALUE = re.compile(r"\bmodel\.(%s)(?::[ \t]+|=)(%s(?:[ \t]*\|[ \t]*%s)*)" % ("|".join(KNOWN), NAME, NAME))
DOC_REGISTERED = re.compile(r"@(\w+)\.register\(\"([^\"]+)\"")
PATH = re.compile(r"\b((?:configs|experiments)/(?:[\w./*-]|\{[^}\s]*(?:\s+[^}\s]*)*\})+?\.yaml)\b")
TABLE_KEY = re.compile(r"^`model\.(\w+)`$")
TOKEN = re.compile(r"`(%s)`" % NAME)


def known(kind: str, value: str, extra: dict[str, set[str]]) -> bool:
    names = KNOWN[kind] | extra.get(kind, set())
    if value.endswith("*"):
        return any(n.startswith(value[:-1]) for n in names)
    return value in names


def expand(path: str) -> list[str]:
    """`a{b,c}d` -> [abd, acd]; whitespace (a line break inside the braces) dropped."""
    parts = re.split(r"(\{[^}]*\})", re.sub(r"\s+", "", path))
    options = [p[1:-1].split(",") if p.startswith("{") else [p] for p in parts]
    return ["".join(combo) for combo in itertools.product(*options)]


def stale_names(text: str) -> list[str]:
    """What a doc's text names that does not exist: 'line N: what'."""
    extra: dict[str, set[str]] = {}
    for reg, name in DOC_REGISTERED.findall(text):
        if reg in REGISTRIES:
            extra.setdefault(REGISTRIES[reg].kind, set()).add(name)
    extra["summary"] = extra.get("target_context", set())

    def line_of(pos: int) -> int:
        return text.count("\n", 0, pos) + 1

    found = []
    for m in KEY_VALUE.finditer(text):
        for value in re.split(r"[ \t]*\|[ \t]*", m.group(2)):
            if not known(m.group(1), value, extra):
                found.append(f"line {line_of(m.start())}: model.{m.group(1)} value '{value}' is not registered")
    for m in PATH.finditer(text):
        if re.search(r"[A-Z]", m.group(1)) or m.group(1).startswith("experiments/results/"):
            continue  # a placeholder (configs/NEW.yaml), or a committed result's own record
        for path in expand(m.group(1)):
            if not (any(ROOT.glob(path)) if "*" in path else (ROOT / path).is_file()):
                found.append(f"line {line_of(m.start())}: {path} does not exist")
    key = None
    for n, line in enumerate(text.splitlines(), 1):
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else None
        if not cells or len(cells) < 2:
            key = None
            continue
        if cells[0]:
            k = TABLE_KEY.match(cells[0])
            key = k.group(1) if k and k.group(1) in KNOWN else None
        if key:
            for value in TOKEN.findall(cells[1]):
                if not known(key, value, extra):
                    found.append(f"line {n}: model.{key} value '{value}' (table) is not registered")
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_name_registered_options_and_existing_configs(doc):
    assert stale_names(doc.read_text(encoding="utf-8")) == []


def test_the_check_finds_a_stale_name():
    text = """`model.output: adaptive-unscaled` and `--set model.cell=adaptive-gru-balanced`,
`model.target_context: self-attentive*`, `model.encoder: fcae | bcae | cae`,
`configs/adaptive-{gru,both}{,-small}.yaml`, `configs/variants/mean-with-start.yaml`

| switch | value | model |
|---|---|---|
| `model.output` | `deep` | t_t |
| | `adaptive-unscaled` | K = 1 |
| `training.document_context` | `other-document` | a control |
"""
    assert stale_names(text) == [
        "line 1: model.output value 'adaptive-unscaled' is not registered",
        "line 2: model.encoder value 'cae' is not registered",
        "line 3: configs/variants/mean-with-start.yaml does not exist",
        "line 8: model.output value 'adaptive-unscaled' (table) is not registered",
    ]
