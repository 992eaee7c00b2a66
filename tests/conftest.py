"""Shared fixtures. The Bible corpus is built once per test session (about 20 s)."""
from __future__ import annotations

import shutil

import pytest

needs_diatheke = pytest.mark.skipif(shutil.which("diatheke") is None,
                                    reason="needs diatheke and the SWORD modules (make sysdeps)")


@pytest.fixture(scope="session")
def bible_corpus(tmp_path_factory):
    """(directory, stats) of the full Bible corpus built with diatheke."""
    from ctxnmt.data.bible import build_bible

    out = tmp_path_factory.mktemp("bible")
    return out, build_bible(out, log=lambda message: None)
