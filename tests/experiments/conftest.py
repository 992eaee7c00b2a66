"""A tiny synthetic corpus and config: experiments that train in seconds."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

# A word-for-word "translation" with a few reorderings: learnable a little in a few dozen updates.
LEXICON = {"el": "the", "gato": "cat", "perro": "dog", "come": "eats", "ve": "sees", "pan": "bread",
           "agua": "water", "grande": "big", "rojo": "red", "y": "and", "casa": "house", "sol": "sun"}
NOUNS = ["gato", "perro", "pan", "agua", "casa", "sol"]

TINY_CONFIG = """
name: tiny
model_dir: unused
data: {{corpus: files, dir: {data}, bpe_merges: 40, max_len: 80}}
model: {{emb_dim: 16, hidden_dim: 24, att_dim: 16, dropout_out: 0.0}}
training: {{batch_tokens: 400, batch_sents: 32, max_updates: 1000, valid_every: 1000, valid_max_sents: 12,
           valid_beam: 2, log_every: 10, lr: 0.01, threads: 1}}
decoding: {{beam: 2, batch_size: 32}}
"""


def _sentence(rng: random.Random) -> tuple[str, str]:
    clauses = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        noun, obj = rng.choice(NOUNS), rng.choice(NOUNS)
        adjective = rng.choice(["grande", "rojo"])
        clauses.append(["el", noun, adjective, rng.choice(["come", "ve"]), "el", obj])
    src = " y ".join(" ".join(c) for c in clauses)
    # Spanish noun-adjective order becomes English adjective-noun.
    tgt = " and ".join(" ".join([LEXICON[c[0]], LEXICON[c[2]], LEXICON[c[1]], LEXICON[c[3]], LEXICON[c[4]],
                                 LEXICON[c[5]]]) for c in clauses)
    return src.capitalize() + " .", tgt.capitalize() + " ."


def write_corpus(directory: Path, sizes=(("train", 400), ("dev", 12), ("test", 24)), seed: int = 3) -> Path:
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for split, n in sizes:
        pairs = [_sentence(rng) for _ in range(n)]
        (directory / f"{split}.es").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
        (directory / f"{split}.en").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    return directory


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("tiny-corpus"))


@pytest.fixture(scope="session")
def tiny_config(tiny_corpus, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("configs") / "tiny.yaml"
    path.write_text(TINY_CONFIG.format(data=tiny_corpus), encoding="utf-8")
    return path
