"""Small synthetic corpora shared by the evaluation tests."""
import random

import pytest

WORDS = ("house river stone light garden window market bridge letter winter "
         "music paper table forest valley silver train morning doctor island").split()


def _reference(rng: random.Random, i: int) -> str:
    words = rng.sample(WORDS, 8)
    return f"In sentence {i} the {words[0]} and the {words[1]} met a {words[2]} near {' '.join(words[3:])}."


def _degrade(ref: str) -> str:
    # Drop every third word so each sentence keeps some but not all n-grams.
    tokens = ref.split()
    return " ".join(t for j, t in enumerate(tokens) if j % 3 != 2)


@pytest.fixture(scope="session")
def corpus():
    """40 references, a degraded baseline, and a system with half the sentences perfect."""
    rng = random.Random(7)
    refs = [_reference(rng, i) for i in range(40)]
    baseline = [_degrade(r) for r in refs]
    better = [r if i % 2 == 0 else b for i, (r, b) in enumerate(zip(refs, baseline))]
    return {"refs": refs, "baseline": baseline, "better": better}
