"""docs/README.md lists every page of docs/, in reading order, and nothing else."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INDEX = ROOT / "docs" / "README.md"


def listed() -> list[str]:
    """The pages the index's numbered list links to, in its order."""
    return re.findall(r"^\d+\. \[[^\]]+\]\(([^)#]+)\)", INDEX.read_text(encoding="utf-8"), re.M)


def test_the_index_lists_every_page_once_and_only_pages_that_exist():
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name != "README.md")
    assert sorted(listed()) == pages
    assert len(listed()) == len(set(listed()))


def test_every_link_of_the_index_resolves():
    for target in re.findall(r"\]\(([^)#]+)", INDEX.read_text(encoding="utf-8")):
        assert (INDEX.parent / target).exists(), target
