"""The references the committed results were scored against, and a warning when one differs.

`ctxnmt data bible` rebuilds the Bible test set from Debian's SWORD modules, whose package
versions can change a verse's text; a score against a reference rebuilt so is not comparable
with a committed report, and nothing in the score itself would say so.
`experiments/results/references.json` (the registry) records, for each reference a committed
report was scored against, its path as the reports name it (relative to the repository root),
its SHA-256 and what it was built from.  `ctxnmt score` looks the given reference up by that
path and warns when its content hashes differently.  A reference the registry does not name
is not checked: the registry speaks only for the committed results.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ctxnmt.utils.io import file_sha256

# in a checkout, next to the package; an installed package finds none and checks nothing
REGISTRY = Path(__file__).resolve().parents[2] / "experiments" / "results" / "references.json"


def load_registry(registry: Path | None = None) -> dict[str, dict[str, Any]]:
    """The registry's references by path; empty where there is no registry."""
    registry = registry or REGISTRY
    if not registry.is_file():
        return {}
    return json.loads(registry.read_text(encoding="utf-8"))["references"]


def registered_name(ref: str | os.PathLike, names) -> str | None:
    """The registry's name that `ref` ends with, component by component (`./data/bible/test.en`
    and an absolute path to it are both `data/bible/test.en`; another corpus's test.en is not)."""
    parts = Path(os.path.abspath(ref)).parts
    for name in names:
        tail = Path(name).parts
        if parts[-len(tail):] == tail:
            return name
    return None


def reference_warning(ref: str | os.PathLike, registry: Path | None = None) -> str | None:
    """One line saying how `ref` differs from the reference the committed reports record under its
    name, or None where it is the same, or the registry does not name it."""
    registry = registry or REGISTRY
    references = load_registry(registry)
    name = registered_name(ref, references)
    if name is None:
        return None
    recorded, actual = references[name]["sha256"], file_sha256(ref)
    if actual == recorded:
        return None
    return (f"{ref} is not the {name} the committed reports were scored against (SHA-256 {actual[:12]}…, "
            f"recorded {recorded[:12]}… in {registry.name}): its scores are not comparable with theirs; "
            f"it was built from {_built_from(references[name])}")


def _built_from(entry: dict[str, Any]) -> str:
    packages = entry.get("built_from", {})
    return ", ".join(f"{name} {version}" for name, version in packages.items()) or "an unrecorded source"
