"""Translation as a task of the Trainer (ctxnmt.training.task): the prepared parallel data,
the model a config describes, batches of sentence pairs, the label-smoothed loss (on
several ranks each batch dealt to them, through CUDA graphs where asked), and dev
perplexity and BLEU.  Its checkpoints hold the vocabularies' fingerprints, so that a
resume with other data is refused."""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from ctxnmt.config import TRANSLATION, Config, from_dict, load_config
from ctxnmt.data.batching import epoch_batches, make_batch, padding_ratio
from ctxnmt.data.documents import ListedContext, PreviousSentences, RandomContextSize, other_document_sentences
from ctxnmt.data.indexed import Side, TokenArrays
from ctxnmt.data.prepare import Prepared, prepare, split_paths
from ctxnmt.data.sampling import epoch_sample
from ctxnmt.data.vocab import UNK
from ctxnmt.data.words import WordBoundaries
from ctxnmt.decoding.length import length_control, uses_ratios
from ctxnmt.decoding.translator import translate_ids
from ctxnmt.errors import ConfigError, DataError
from ctxnmt.evaluation.metrics import bleu
from ctxnmt.models.context import context_name, context_sentences, reads_target_context
from ctxnmt.models.nmt import NMTModel, build_model, check_names, count_parameters
from ctxnmt.training.distributed import World, collective
from ctxnmt.training.graphs import GraphedSteps
from ctxnmt.training.log import TrainingLog
from ctxnmt.training.optim import PlateauSchedule
from ctxnmt.training.precision import Precision
from ctxnmt.training.task import Progress, Task, Window
from ctxnmt.training.trainer import Trainer, held_training
from ctxnmt.utils.checkpoint import check_compatible


def document_context(split: TokenArrays, config: Config, name: str, whose: str = "own"):
    """Where each sentence of `split` finds its previous sentences, for a document-context model
    (None for a sentence-level one), as a source computed per batch (ctxnmt.data.documents);
    with `whose` "other-document", as many from another document (training.document_context).
    A DataError if the split has no usable document ids."""
    k = context_sentences(config.model)
    if not k:
        return None
    path = split_paths(config.data, name)[2]
    if split.docs is None:
        raise _no_document_ids(path, name)
    # prepare drops training pairs, never dev pairs: a dev split's line numbers are its file's
    lines = f"{path} (line numbers of kept pairs)" if name == "train" else str(path)
    if split.doc_problem:
        raise DataError(f"{lines}:{split.doc_problem}")
    if whose == "other-document":
        try:
            return ListedContext(other_document_sentences(split.docs.tolist(), k, config.training.seed), k)
        except DataError as err:
            raise DataError(f"{lines}: {err}") from None
    return PreviousSentences(split.docs, k)


def check_document_files(config: Config) -> None:
    """Refuse a document-context model whose training or dev split has text but no .doc file,
    before anything is prepared (document_context would, once it was).  A split without its
    text is left to prepare: the Bible corpus is built there, .doc files and all."""
    if not context_sentences(config.model):
        return
    for name in ("train", "dev"):
        src, tgt, doc = split_paths(config.data, name)
        if src.is_file() and tgt.is_file() and not doc.is_file():
            raise _no_document_ids(doc, name)


def _no_document_ids(path, name: str) -> DataError:
    return DataError(f"{path}: no such file; a document-context model (model.context) needs document ids "
                     f"for the {name} split")


@torch.no_grad()
def dev_perplexity(model, src: Side, tgt: Side, batch_tokens: int, batch_sents: int, device, context=None,
                   k: int = 0, target_context: bool = False) -> float:
    """Perplexity over the dev pairs with a non-empty source: an empty source is all padding,
    with no attention distribution and so no conditional to score (it translates as empty)."""
    model.eval()
    total, tokens = 0.0, 0
    batches = epoch_batches(src.lens, tgt.lens, batch_tokens, batch_sents, 0, 0, shuffle=False)
    for index in batches:
        index = [i for i in index if src.lens[i]]
        if not index:
            continue
        b = make_batch(index, src, tgt, context, k, target_context).to(device)
        nll, n = model.loss(b.src, b.src_mask, b.tgt, b.tgt_mask, context=b.context)
        total, tokens = total + float(nll), tokens + n
    return math.exp(min(total / max(tokens, 1), 50.0))


def _listed(context, n: int) -> list[list[int]]:
    """The context positions of the first n sentences, as lists (what translation reads)."""
    positions, count = context.positions(np.arange(n))
    return [row[:c].tolist() for row, c in zip(positions, count)]


def _length(config: Config, data):
    """The length settings `translate` will use, the training data's length ratios included."""
    dec = config.decoding
    words = (WordBoundaries.of(data.src_vocab, data.tgt_vocab, data.preprocessor.options.subwords)
             if dec.length_ratio_penalty else None)
    return length_control(dec, data.length_ratios() if uses_ratios(dec) else None, words=words)


def validate(model, data, config: Config, device) -> dict[str, float]:
    """{'ppl': …, 'bleu': …} on the dev set (BLEU only if training.valid_bleu)."""
    t = config.training
    n = min(t.valid_max_sents or len(data.dev), len(data.dev))
    src, tgt = data.dev.src.head(n), data.dev.tgt.head(n)
    k = context_sentences(config.model)
    context = document_context(data.dev, config, "dev")  # context lies before a sentence: still in dev[:n]
    target = reads_target_context(config.model)  # perplexity: the references'; BLEU: its own translations
    result = {"ppl": dev_perplexity(model, src, tgt, t.batch_tokens, t.batch_sents, device, context, k, target)}
    if t.valid_bleu:
        listed = None if context is None else _listed(context, n)
        sentences = None if listed is None else [[src[j] for j in c] for c in listed]
        target_of = [[[j] for j in c] for c in listed] if target else None
        hyps = translate_ids(model, list(src), data.preprocessor, data.tgt_vocab, config.decoding,
                             beam=t.valid_beam, device=device, context=sentences, length=_length(config, data),
                             target_of=target_of)
        result["bleu"] = bleu([h.text for h in hyps], data.references[:n]).value
    model.train()
    return result


class _Loss(torch.nn.Module):
    """The model's summed loss as a module's forward pass, which DistributedDataParallel wraps."""

    def __init__(self, model: NMTModel):
        super().__init__()
        self.model = model

    def forward(self, batch, label_smoothing: float):
        return self.model.loss(batch.src, batch.src_mask, batch.tgt, batch.tgt_mask, label_smoothing, batch.context)


def coword_dropout(src: torch.Tensor, src_mask: torch.Tensor, p: float, key: tuple[int, ...]) -> torch.Tensor:
    """CoWord dropout (Fernandes et al. 2021): each word of the current source sentence becomes
    the unknown word with probability p, drawn from `key` (seed, update, rank) alone, so that a
    resumed run masks what the uninterrupted one did.  The context sentences stay whole."""
    gen = torch.Generator().manual_seed(hash(key) & 0x7FFF_FFFF_FFFF_FFFF)
    drop = (torch.rand(src.shape, generator=gen) < p) & src_mask.bool().cpu()
    return src.masked_fill(drop.to(src.device), UNK)


class TranslationTask(Task):
    name = TRANSLATION
    kept, command, shares_preparation = "decode.json", ("ctxnmt", "train"), True
    unit = "batch"
    data_parallel = True
    tensorboard = True
    from_dict = staticmethod(from_dict)

    def __init__(self, config: Config):
        check_names(config.model)  # before the model directory is made and the data prepared
        super().__init__(config)
        self.metric = self.metric_name = config.training.selection_metric
        self.higher_is_better = self.metric == "bleu"
        self.precision = config.training.precision

    # -- its config and its runs ---------------------------------------------------------
    @staticmethod
    def load(path: str | Path | None, overrides: list[str]) -> Config:
        """A config whose components' names are checked too (as training checks them before it begins)."""
        config = load_config(path, overrides)
        check_names(config.model)
        return config

    @classmethod
    def train_run(cls, config: Config, resume: bool = False, trained: bool = False, quiet: bool = False) -> None:
        Trainer(cls(config), resume=resume, quiet=quiet).train()

    # -- setting up ----------------------------------------------------------------------
    def setup(self, world: World, device: torch.device, log: TrainingLog) -> NMTModel:
        """Each machine's first rank prepares (or finds prepared) the data before the others read it;
        a training already in the directory (one being resumed) refuses data changed since it began."""
        self.world, self.device, self.log = world, device, log
        config, t = self.config, self.training
        if world.local_rank > 0:
            world.barrier()
        self.data: Prepared = prepare(config, log=log, keep=bool(held_training(self.model_dir)))
        if world.local_rank == 0:
            world.barrier()
        self.train = self.data.train  # the epoch's segmentation of the pairs (epoch_units)
        self.train_context = document_context(self.data.train, config, "train", t.document_context)
        self.context_sents = context_sentences(config.model)  # K, read by every batch
        self.target_context = reads_target_context(config.model)  # 2-to-2: the references' previous sentences too
        self.random_context = (RandomContextSize(self.train_context, self.context_sents, t.seed)
                               if t.context_size == "random" else None)
        document_context(self.data.dev, config, "dev")  # validation needs dev context too: fail early
        self.model = build_model(config.model, len(self.data.src_vocab), len(self.data.tgt_vocab))
        return self.model

    def schedule(self) -> PlateauSchedule:
        t = self.training
        return PlateauSchedule(t.lr, t.warmup_updates, t.lr_decay, t.lr_patience, t.min_lr,
                               higher_is_better=self.higher_is_better, total=t.max_updates,
                               cooldown=t.cooldown_updates)

    def start(self, model: NMTModel, precision: Precision) -> None:
        """DistributedDataParallel on several ranks (after any restore: it starts from rank 0's
        parameters), or CUDA graphs where the config asks.  Every model variant uses all its
        parameters in every forward pass (checked for each config in configs/), so DDP need not
        search the graph for unused ones."""
        self.amp = precision  # the Trainer's: autocast and loss scaling
        self.loss_fn = _Loss(model)
        if self.world.distributed:
            with collective("wrapping the model in DistributedDataParallel"):
                self.loss_fn = DistributedDataParallel(
                    self.loss_fn, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        self.graphs = None
        if self.training.cuda_graphs:
            if self.world.distributed:  # ctxnmt train refuses this combination before it starts ranks
                raise ConfigError("training.cuda_graphs runs on one device; it cannot be used with several ranks")
            self.graphs = GraphedSteps(model, self.training.label_smoothing,
                                       lambda: precision.autocast(cache=False), self.log)

    def describe(self) -> str:
        m = self.config.model
        document = context_name(m)
        return (f"model: {count_parameters(self.model):,} parameters "
                f"({m.encoder} encoder, {m.decoder} decoder, {m.cell} cell, {m.target_context} target context"
                f"{'' if document == 'none' else f', {document} document context'})")

    # -- training ------------------------------------------------------------------------
    def epoch_units(self, epoch: int, starting: bool) -> list[list[int]]:
        """The epoch's batches (sentence indices), a pure function of seed and epoch; they index
        the epoch's segmentation of the pairs, which `backward` reads from here on."""
        t = self.training
        self.train, sampled = self.epoch_split(epoch)
        src_lens, tgt_lens = self.train.src.lens, self.train.tgt.lens
        batches = epoch_batches(src_lens, tgt_lens, t.batch_tokens, t.batch_sents, t.seed, epoch)
        if starting:
            ps, pt = padding_ratio(batches, src_lens, tgt_lens)
            self.log(f"epoch {epoch + 1}: {len(batches)} batches, padding {ps:.1%} source / {pt:.1%} target{sampled}")
        return batches

    def epoch_split(self, epoch: int) -> tuple[TokenArrays, str]:
        """The training pairs as epoch `epoch` reads them: its sampled segmentation where the data
        has them (ctxnmt.data.sampling), else the deterministic one; and the log line's words on it."""
        samples = self.data.samples
        if not samples:
            return self.data.train, ""
        sample = epoch_sample(epoch, len(samples))
        return samples[sample], f", sampled segmentation {sample + 1} of {len(samples)}"

    def backward(self, index: list[int], update: int) -> tuple[float, int]:
        """This rank's share of the batch `index`.  dl4mt: cross-entropy summed over each sentence,
        averaged over the update's sentences; DDP averages the ranks' gradients, so each rank's
        share counts `size` times.  A rank left without a sentence computes a dummy share, weight 0."""
        share, weight = self.world.share(index)
        train = self.train
        context = self.random_context.at(update) if self.random_context else self.train_context
        batch = make_batch(share, train.src, train.tgt, context, self.context_sents, self.target_context)
        if self.training.coword_dropout:
            batch.src = coword_dropout(batch.src, batch.src_mask, self.training.coword_dropout,
                                       (self.training.seed, update, self.world.rank))
        if self.graphs is not None:  # one device: the batch is the whole update, taken from the host
            self.graphs.zero_grad()
            return float(self.graphs.forward_backward(batch, 1.0 / len(index))), int(batch.tgt_mask.sum())
        with self.amp.autocast():
            nll, n_tokens = self.loss_fn(batch.to(self.device), self.training.label_smoothing)
        with collective("exchanging gradients"):
            self.amp.backward(nll * (weight * self.world.size) / len(index))
        return float(nll.detach()) * weight, n_tokens if weight else 0

    def log_window(self, window: Window, progress: Progress, lr: float) -> None:
        rate = window.timed / (time.perf_counter() - window.start)
        self.log(f"update {progress.update}: loss/token {window.loss / window.tokens:.4f}, "
                 f"{rate:.0f} target tok/s, lr {lr:.2e}")
        self.log.scalar("train/loss_per_token", window.loss / window.tokens, progress.update)
        self.log.scalar("train/target_tokens_per_s", rate, progress.update)

    def evaluate(self, progress: Progress) -> dict[str, float]:
        result = validate(self.model, self.data, self.config, self.device)
        scores = ", ".join(f"{k} {v:.2f}" for k, v in result.items())
        self.log(f"validation at update {progress.update} ({progress.tokens} target tokens): {scores}")
        for k, v in result.items():
            self.log.scalar(f"dev/{k}", v, progress.update)
        return result

    # -- checkpoints -----------------------------------------------------------------------
    def state(self) -> dict:
        return {"src_vocab": self.data.src_vocab.fingerprint(), "tgt_vocab": self.data.tgt_vocab.fingerprint()}

    def check(self, payload: dict, path: Path) -> None:
        check_compatible(payload, path, self.config.to_dict()["model"], self.data.src_vocab.fingerprint(),
                         self.data.tgt_vocab.fingerprint())
