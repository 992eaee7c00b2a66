"""Document context in training: batches carry context by dataset position (so
shuffling changes nothing), validation reads the dev context, and a context model
learns what only the previous sentence can tell while the sentence model cannot."""
from __future__ import annotations

import random

import pytest
import torch

from ctxnmt.config import Config, ModelConfig, TrainingConfig
from ctxnmt.data.batching import epoch_batches, make_batch
from ctxnmt.data.documents import previous_sentences
from ctxnmt.data.prepare import Split
from ctxnmt.data.vocab import EOS
from ctxnmt.models.nmt import build_model
from ctxnmt.training.validate import dev_perplexity, validate

LABEL_SRC, LABEL_TGT = [4, 5, 6, 7], [8, 9, 10, 11]
CONTENT = list(range(12, 24))  # translated as word + 12
VOCAB = 36


def label_documents(n_docs: int, seed: int):
    """Two-sentence documents.  Sentence 1 ends in one of four label words, translated
    in place; sentence 2's translation starts with the same label's target word, but
    its source holds only content words drawn independently of the label: only the
    previous sentence tells which label it is (chance: 1 in 4)."""
    gen = random.Random(seed)
    src, tgt, docs = [], [], []
    for d in range(n_docs):
        label = gen.randrange(4)
        for first in (True, False):
            content = [gen.choice(CONTENT) for _ in range(gen.randint(2, 4))]
            words = [c + 12 for c in content]
            if first:
                src.append(content + [LABEL_SRC[label]])
                tgt.append(words + [LABEL_TGT[label], EOS])
            else:
                src.append(content)
                tgt.append([LABEL_TGT[label]] + words + [EOS])
            docs.append(f"doc{d}")
    return src, tgt, docs


@pytest.fixture
def one_thread():
    """Tiny models train several times faster without thread hand-offs (and on a shared machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_model(**switches):
    torch.manual_seed(0)
    return build_model(ModelConfig(emb_dim=16, hidden_dim=32, att_dim=16, dropout_out=0.0, **switches), VOCAB, VOCAB)


def train_and_score_label(switches: dict, updates: int = 150) -> float:
    src, tgt, docs = label_documents(300, seed=1)
    context = previous_sentences(docs, 3)
    model = tiny_model(**switches)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    step, epoch = 0, 0
    while step < updates:  # the trainer's path: shuffled, length-bucketed batches with context by position
        for index in epoch_batches([len(s) for s in src], [len(t) for t in tgt], 400, 64, seed=0, epoch=epoch):
            b = make_batch(index, src, tgt, context, 3)
            opt.zero_grad()
            nll, _ = model.loss(b.src, b.src_mask, b.tgt, b.tgt_mask, context=b.context)
            (nll / b.n_sents).backward()
            opt.step()
            step += 1
            if step == updates:
                break
        epoch += 1
    src, tgt, docs = label_documents(100, seed=2)  # held-out documents
    second = list(range(1, len(src), 2))
    model.eval()
    with torch.no_grad():
        b = make_batch(second, src, tgt, previous_sentences(docs, 3), 3)
        readout, _ = model(b.src, b.src_mask, b.tgt, b.tgt_mask, b.context)
        predicted = model.logits(readout[:, 0]).argmax(-1)
    return float((predicted == b.tgt[:, 0]).float().mean())


def test_context_model_learns_what_only_the_previous_sentence_tells(one_thread):
    baseline = train_and_score_label({})
    context = train_and_score_label(dict(doc_init_enc=True, doc_init_dec=True, doc_aux="gated-aux"))
    assert context >= 0.9, context
    assert baseline <= 0.45, baseline  # chance is 0.25


def per_sentence_nll(model, batch) -> dict[int, float]:
    readout, _ = model(batch.src, batch.src_mask, batch.tgt, batch.tgt_mask, batch.context)
    logp = torch.log_softmax(model.logits(readout), -1).gather(2, batch.tgt.unsqueeze(-1)).squeeze(-1)
    nll = -(logp * batch.tgt_mask).sum(1)
    return {int(i): float(v) for i, v in zip(batch.indices, nll)}


def test_shuffled_and_unshuffled_batches_give_the_same_losses_per_sentence(one_thread):
    src, tgt, docs = label_documents(30, seed=3)
    context = previous_sentences(docs, 3)
    model = tiny_model(doc_init_dec=True, doc_aux="aux").eval()
    lens = ([len(s) for s in src], [len(t) for t in tgt])
    losses = []
    with torch.no_grad():
        for shuffle in (False, True):
            batches = epoch_batches(*lens, 60, 7, seed=5, epoch=1, shuffle=shuffle)
            found = {}
            for index in batches:
                found.update(per_sentence_nll(model, make_batch(index, src, tgt, context, 3)))
            losses.append(found)
    assert [b for b in epoch_batches(*lens, 60, 7, 5, 1, True)] != [b for b in epoch_batches(*lens, 60, 7, 5, 1,
                                                                                               False)]
    assert sorted(losses[0]) == sorted(losses[1]) == list(range(len(src)))
    for i in losses[0]:
        assert losses[0][i] == pytest.approx(losses[1][i], abs=1e-4)


def test_validation_reads_the_dev_context():
    src, tgt, docs = label_documents(10, seed=4)
    model = tiny_model(doc_aux="aux", doc_init_dec=True)
    config = Config(model=model.cfg, training=TrainingConfig(valid_bleu=False, batch_tokens=200, batch_sents=8))
    data = type("Data", (), {"dev": Split(src, tgt, [], [], docs)})()
    ppl = validate(model, data, config, "cpu")["ppl"]
    with_context = dev_perplexity(model, src, tgt, 200, 8, "cpu", previous_sentences(docs, 3), 3)
    without = dev_perplexity(model, src, tgt, 200, 8, "cpu")
    assert ppl == pytest.approx(with_context, rel=1e-6)
    assert abs(with_context - without) > 1e-4
