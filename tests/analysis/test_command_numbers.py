"""The analyses' numeric flags: a beam of 0 had silently meant the config's beam, and a
negative --max-plots no heatmaps; each is now refused by name before a model is loaded."""
from __future__ import annotations

import pytest

from tests.test_cli import run


@pytest.mark.parametrize("analysis, flag, value, least", [
    ("target-attention", "--beam", "0", 1),
    ("target-attention", "--bins", "0", 1),
    ("target-attention", "--max-plots", "-1", 0),
    ("gates", "--beam", "0", 1),
    ("gates", "--top", "0", 1),
    ("context", "--beam", "0", 1),
])
def test_a_number_below_its_least_is_refused_before_loading(tmp_path, capsys, analysis, flag, value, least):
    extra = ["--doc-ids", "ids", "-r", "ref"] if analysis == "context" else []
    code, _, err = run(["analyze", analysis, tmp_path / "no-model", "-i", "in", *extra, flag, value], capsys)
    assert code == 2 and err.strip() == f"ctxnmt analyze: error: {flag} must be at least {least}, got {value}"
