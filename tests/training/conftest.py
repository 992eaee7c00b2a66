"""A tiny parallel corpus in the `files` format and a config for training on it in seconds."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

SRC_WORDS = "el gato perro casa sol luna agua fuego tierra cielo rojo azul verde grande come bebe ve va".split()
TGT_WORDS = "the cat dog house sun moon water fire earth sky red blue green big eats drinks sees goes".split()

# 121 training pairs in batches of at most 8 sentences (the token budget never binds): each
# epoch has 15 batches of 8 and one of a single sentence, which leaves a second rank short.
TINY_CONFIG = """
name: tiny
model_dir: {model_dir}
data: {{corpus: files, dir: {data}, bpe_merges: 40, max_len: 100}}
model: {{emb_dim: 16, hidden_dim: 24, att_dim: 16, dropout_out: {dropout}}}
training: {{batch_tokens: 10000, batch_sents: 8, max_epochs: 1, valid_every: 10, valid_bleu: false,
           early_stop_metric: ppl, log_every: 1, seed: 7, lr: 0.003, threads: 1}}
"""


def write_corpus(out: Path, n_train: int = 121, n_dev: int = 12) -> Path:
    """Sentences of 2–12 words; the target is the reversed word-by-word translation."""
    gen = random.Random(3)
    out.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("dev", n_dev)):
        src, tgt, doc = [], [], []
        for i in range(n):
            ids = [gen.randrange(len(SRC_WORDS)) for _ in range(gen.randint(2, 12))]
            src.append(" ".join(SRC_WORDS[j] for j in ids) + " .")
            tgt.append(" ".join(TGT_WORDS[j] for j in reversed(ids)) + " .")
            doc.append(f"doc{i // 4}")
        for ext, lines in (("es", src), ("en", tgt), ("doc", doc)):
            (out / f"{split}.{ext}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("tiny-corpus"))


def tiny_config(path: Path, data: Path, model_dir: Path, dropout: float = 0.0) -> Path:
    path.write_text(TINY_CONFIG.format(data=data, model_dir=model_dir, dropout=dropout), encoding="utf-8")
    return path


def train_updates(model, src, tgt, context, k: int, updates: int, target_context: bool = False) -> None:
    """`updates` Adam steps (lr 0.01) on the trainer's path: shuffled, length-bucketed batches
    (400 target tokens, 64 sentences) with each sentence's context taken by its position."""
    import torch

    from ctxnmt.data.batching import epoch_batches, make_batch
    from ctxnmt.data.indexed import Side

    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    step, epoch = 0, 0
    src, tgt = Side.from_lists(src), Side.from_lists(tgt)
    while step < updates:
        for index in epoch_batches(src.lens, tgt.lens, 400, 64, seed=0, epoch=epoch):
            b = make_batch(index, src, tgt, context, k, target_context)
            opt.zero_grad()
            nll, _ = model.loss(b.src, b.src_mask, b.tgt, b.tgt_mask, context=b.context)
            (nll / b.n_sents).backward()
            opt.step()
            step += 1
            if step == updates:
                return
        epoch += 1


@pytest.fixture
def one_thread():
    """Tiny models train several times faster without thread hand-offs (and on a shared machine)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
