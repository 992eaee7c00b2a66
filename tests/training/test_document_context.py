"""Document context in training: batches carry context by dataset position (so
shuffling changes nothing), validation reads the dev context, and a context model
learns what only the previous sentence can tell while the sentence model cannot."""
from __future__ import annotations

import random

import pytest
import numpy as np
import torch

from ctxnmt.config import Config, ModelConfig, TrainingConfig
from ctxnmt.data.batching import epoch_batches, make_batch
from ctxnmt.data.documents import other_document_sentences, previous_sentences
from ctxnmt.data.indexed import TokenArrays
from ctxnmt.data.vocab import EOS
from ctxnmt.models.context import context_sentences
from ctxnmt.models.nmt import build_model
from ctxnmt.tasks.translation import dev_perplexity, validate
from tests.training.conftest import train_updates

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


def tiny_model(**switches):
    torch.manual_seed(0)
    return build_model(ModelConfig.of(emb_dim=16, hidden_dim=32, att_dim=16, dropout_out=0.0, **switches), VOCAB, VOCAB)


def train_and_score_label(switches: dict, updates: int = 150, whose: str = "own") -> float:
    """Accuracy on the second sentences' label of held-out documents, read with their own context,
    after training with each sentence's own previous sentences or another document's."""
    src, tgt, docs = label_documents(300, seed=1)
    context = previous_sentences(docs, 3) if whose == "own" else other_document_sentences(docs, 3, seed=1)
    model = tiny_model(**switches)
    train_updates(model, src, tgt, context, 3, updates)
    src, tgt, docs = label_documents(100, seed=2)  # held-out documents
    second = list(range(1, len(src), 2))
    model.eval()
    with torch.no_grad():
        held_out = TokenArrays.from_lists(src, tgt)
        b = make_batch(second, held_out.src, held_out.tgt, previous_sentences(docs, 3), 3)
        readout, _ = model(b.src, b.src_mask, b.tgt, b.tgt_mask, b.context)
        predicted = model.logits(readout[:, 0]).argmax(-1)
    return float((predicted == b.tgt[:, 0]).float().mean())


def test_context_model_learns_what_only_the_previous_sentence_tells(one_thread):
    baseline = train_and_score_label({})
    context = train_and_score_label(dict(doc_init_enc=True, doc_init_dec=True, doc_aux="gated-aux"))
    assert context >= 0.9, context
    assert baseline <= 0.45, baseline  # chance is 0.25


def test_trained_on_other_documents_context_the_context_model_learns_nothing_from_it(one_thread):
    """training.document_context=other-document, the control for the cross-sentence model:
    the same model and amount of context, but context that says nothing of the sentence."""
    shuffled = train_and_score_label(dict(doc_init_enc=True, doc_init_dec=True, doc_aux="gated-aux"),
                                     whose="other-document")
    assert shuffled <= 0.45, shuffled


def test_the_trainer_trains_on_the_context_the_config_names(tiny_corpus, tmp_path):
    from ctxnmt.config import load_config
    from ctxnmt.training.trainer import Trainer
    from ctxnmt.tasks.translation import TranslationTask
    from tests.training.conftest import tiny_config

    cfg = tiny_config(tmp_path / "tiny.yaml", tiny_corpus, "unused")
    docs = (tiny_corpus / "train.doc").read_text(encoding="utf-8").split()
    for whose, expected in (("own", previous_sentences(docs, 2)),
                            ("other-document", other_document_sentences(docs, 2, seed=7))):
        config = load_config(cfg, [f"model_dir={tmp_path / whose}", "model.doc_aux=aux", "model.doc_sents=2",
                                   f"training.document_context={whose}"])
        trainer = Trainer(TranslationTask(config), quiet=True)
        positions, count = trainer.task.train_context.positions(np.arange(len(docs)))
        found = [positions[i, :count[i]].tolist() for i in range(len(docs))]
        assert found == expected
        assert found != previous_sentences(docs, 2) or whose == "own"


def per_sentence_nll(model, batch) -> dict[int, float]:
    readout, _ = model(batch.src, batch.src_mask, batch.tgt, batch.tgt_mask, batch.context)
    logp = torch.log_softmax(model.logits(readout), -1).gather(2, batch.tgt.unsqueeze(-1)).squeeze(-1)
    nll = -(logp * batch.tgt_mask).sum(1)
    return {int(i): float(v) for i, v in zip(batch.indices, nll)}


def test_shuffled_and_unshuffled_batches_give_the_same_losses_per_sentence(one_thread):
    src, tgt, docs = label_documents(30, seed=3)
    context = previous_sentences(docs, 3)
    model = tiny_model(doc_init_dec=True, doc_aux="aux").eval()
    pairs = TokenArrays.from_lists(src, tgt)
    lens = (pairs.src.lens, pairs.tgt.lens)
    losses = []
    with torch.no_grad():
        for shuffle in (False, True):
            batches = epoch_batches(*lens, 60, 7, seed=5, epoch=1, shuffle=shuffle)
            found = {}
            for index in batches:
                found.update(per_sentence_nll(model, make_batch(index, pairs.src, pairs.tgt, context, 3)))
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
    dev = TokenArrays.from_lists(src, tgt, docs)
    ppl = validate(model, type("Data", (), {"dev": dev, "references": []})(), config, "cpu")["ppl"]
    with_context = dev_perplexity(model, dev.src, dev.tgt, 200, 8, "cpu", previous_sentences(docs, 3), 3)
    without = dev_perplexity(model, dev.src, dev.tgt, 200, 8, "cpu")
    assert ppl == pytest.approx(with_context, rel=1e-6)
    assert abs(with_context - without) > 1e-4


def test_random_context_size_keeps_the_most_recent_sentences_of_a_uniform_draw():
    """training.context_size=random: min(n, available) previous sentences, n uniform on 0 … K,
    the most recent kept, the same draw for the same (seed, update) and a new one at each update."""
    from ctxnmt.data.documents import PreviousSentences, RandomContextSize

    docs = np.repeat(np.arange(400), 6)  # 400 documents of 6 sentences
    rows = np.arange(len(docs))
    own = previous_sentences([str(d) for d in docs], 3)
    source = RandomContextSize(PreviousSentences(docs, 3), 3, seed=5)
    draws = source.at(7).sizes(rows)
    assert np.array_equal(draws, source.at(7).sizes(rows)) and not np.array_equal(draws, source.at(8).sizes(rows))
    shares = np.bincount(draws, minlength=4) / len(rows)
    assert np.allclose(shares, 0.25, atol=0.03), shares
    positions, count = source.at(7).positions(rows)
    for r in rows:
        n = min(int(draws[r]), len(own[r]))
        assert positions[r, :count[r]].tolist() == own[r][len(own[r]) - n:]
        assert not positions[r, count[r]:].any()


def test_the_trainer_draws_context_sizes_only_when_asked(tiny_corpus, tmp_path):
    from ctxnmt.config import load_config
    from ctxnmt.errors import ConfigError
    from ctxnmt.training.trainer import Trainer
    from ctxnmt.tasks.translation import TranslationTask
    from tests.training.conftest import tiny_config

    cfg = tiny_config(tmp_path / "tiny.yaml", tiny_corpus, "unused")
    fixed = Trainer(TranslationTask(load_config(cfg, [f"model_dir={tmp_path / 'f'}", "model.doc_aux=aux"])),
                    quiet=True).task
    assert fixed.random_context is None
    drawn = Trainer(TranslationTask(load_config(cfg, [f"model_dir={tmp_path / 'r'}", "model.doc_aux=aux",
                                                      "training.context_size=random"])), quiet=True).task
    assert drawn.random_context.k == context_sentences(drawn.config.model) == 3
    with pytest.raises(ConfigError, match="training.context_size=random needs a document-context model"):
        load_config(cfg, ["training.context_size=random"])
