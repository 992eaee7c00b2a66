"""`ctxnmt analyze gates`: how much the adaptive-weighting gates trust each source.

Two quantities, the papers' Tables 4 and 5:
  hyper-gate g   mean over the hidden dimensions of g_i (the weight of the state
                 against the input) at every source position, for each encoder
                 recurrence with a hyper-gated cell (forward and backward for
                 birnn; layerK-… for stacked-birnn; future, context-lower and
                 context-upper for the CAEncoders)
  α_s, α_y, α_c  mean over the output dimensions of the adaptive output weights
                 of s_t, d_t and c_t for every output token of the model's own
                 (beam-search) translation, teacher-forced

Subwords and words: a word is a maximal run of BPE pieces whose pieces but the
last end in "@@", or of SentencePiece pieces whose first alone starts with "▁" (the
tokenised, truecased word the pieces join to, ctxnmt.data.words); its value is
the mean of its pieces' values.  Per-token tags (`--tags`, e.g. POS) have one tag
per such word, i.e. per token of the model's Moses tokenisation of the line: tag
input that is already tokenised (Moses tokenisation leaves it unchanged).

    from ctxnmt.analysis.gates import analyse_lines
    rows = analyse_lines(Translator.load("runs/adaptive-both-small"), lines, tags)
"""
from __future__ import annotations

import contextlib
import csv
import sys
from dataclasses import dataclass, field

import torch

from ctxnmt.analysis.forced import check_without_context
from ctxnmt.analysis.tagger import apertium_tags
from ctxnmt.data.batching import pad
from ctxnmt.data.corpus import read_lines, write_lines_atomic
from ctxnmt.data.preprocess import BPE_SCHEME
from ctxnmt.data.vocab import EOS
from ctxnmt.data.words import join_word, word_groups
from ctxnmt.decoding.translator import Translator, search_ids
from ctxnmt.errors import ConfigError, DataError
from ctxnmt.models.cells import AdaptiveGRUCell
from ctxnmt.models.output import OUTPUT_WEIGHTS
from ctxnmt.utils.arguments import add_checkpoint, add_input, add_model_dir, add_output, check_at_least
from ctxnmt.utils.io import atomic_write

# -- gate values per token ------------------------------------------------------------------

@torch.no_grad()
def encoder_gates(model, src_ids: list[list[int]]) -> dict[str, list[torch.Tensor]]:
    """{recurrence: [mean hyper-gate value per source token (len_i,), one per sentence]} of the
    encoder recurrences with a hyper-gate (Capabilities.encoder_hyper_gates)."""
    model.eval()
    src, mask = (t.to(model.device) for t in pad(src_ids))
    recurrences = model.encoder.recurrences(model.src_emb(src), mask)
    gates = {name: recurrences[name].hyper_gate() for name in model.capabilities.encoder_hyper_gates}  # (B, S)
    return {name: [g[b, : len(ids)] for b, ids in enumerate(src_ids)] for name, g in gates.items()}


@torch.no_grad()
def output_weights(model, src_ids: list[list[int]], out_ids: list[list[int]]) -> list[torch.Tensor]:
    """Mean α_s, α_y, α_c (len_i + 1, 3) per output token of each given output (EOS appended)."""
    model.eval()
    device = model.device
    src, src_mask = (t.to(device) for t in pad(src_ids))
    tgt, tgt_mask = (t.to(device) for t in pad([ids + [EOS] for ids in out_ids]))
    weights = model.decoder.output_weights(model.encode(src, src_mask), model.previous_embeddings(tgt), tgt_mask)
    alpha = weights.mean(-1).permute(1, 2, 0)  # (B, T, 3)
    return [alpha[b, : len(ids) + 1] for b, ids in enumerate(out_ids)]


def decoder_gate_cells(model) -> dict[str, AdaptiveGRUCell]:
    """The decoder's hyper-gated cells (Capabilities.decoder_hyper_gates) as decoder-NAME."""
    cells = model.decoder.recurrence_cells()
    return {f"decoder-{name}": cells[name] for name in model.capabilities.decoder_hyper_gates}


@contextlib.contextmanager
def recording_hyper_gates(cells: dict[str, AdaptiveGRUCell]):
    """Record g = σ(W_g x + U_g h) of each cell's every combine() call, as the model computes it:
    the instance attribute shadows the class's method until the block ends."""
    record: dict[str, list[torch.Tensor]] = {name: [] for name in cells}
    for name, cell in cells.items():
        def combine(xp, hp, h, _cell=cell, _out=record[name], _original=cell.combine):
            _out.append(_cell.hyper_gate(xp, hp).mean(-1))
            return _original(xp, hp, h)
        cell.combine = combine
    try:
        yield record
    finally:
        for cell in cells.values():
            del cell.combine


@torch.no_grad()
def decoder_gates(model, src_ids: list[list[int]], out_ids: list[list[int]]) -> dict[str, list[torch.Tensor]]:
    """{decoder-NAME: [mean hyper-gate value per output token (len_i + 1,) (EOS appended)]} of the
    decoder's hyper-gated recurrences (the cGRU's: gru1 and gru2), teacher-forced on the given outputs."""
    cells = decoder_gate_cells(model)
    if not cells:
        return {}
    model.eval()
    device = model.device
    src, src_mask = (t.to(device) for t in pad(src_ids))
    tgt, tgt_mask = (t.to(device) for t in pad([ids + [EOS] for ids in out_ids]))
    with recording_hyper_gates(cells) as record:
        model.decoder(model.encode(src, src_mask), model.previous_embeddings(tgt), tgt_mask)
    out = {}
    for name, steps in record.items():
        g = torch.stack(steps, 1)  # (B, T)
        out[name] = [g[b, : len(ids) + 1] for b, ids in enumerate(out_ids)]
    return out


# -- subwords to words ----------------------------------------------------------------------

def word_spans(tokens: list[str], scheme: str = BPE_SCHEME) -> list[tuple[str, int, int]]:
    """(word, start, end) for each word of the subwords `tokens` (a dangling continuation is a
    word of its own)."""
    return [(join_word(tokens, group, scheme), group[0], group[-1] + 1) for group in word_groups(tokens, scheme)]


def word_values(values: torch.Tensor, spans) -> list[list[float]]:
    """The mean of each word's token rows; values (tokens, …)."""
    return [values[start:end].mean(0).reshape(-1).tolist() for _, start, end in spans]


# -- aggregation -----------------------------------------------------------------------------

@dataclass
class Row:
    section: str  # source-word | source-tag | output-word | output-tag | all
    item: str
    count: int = 0
    sums: dict[str, float] = field(default_factory=dict)

    def add(self, values: dict[str, float]) -> None:
        self.count += 1
        for key, value in values.items():
            self.sums[key] = self.sums.get(key, 0.0) + value

    def means(self) -> dict[str, float]:
        return {key: total / self.count for key, total in self.sums.items()}


class Aggregate:
    def __init__(self):
        self.rows: dict[tuple[str, str], Row] = {}

    def add(self, section: str, item: str, values: dict[str, float]) -> None:
        self.rows.setdefault((section, item), Row(section, item)).add(values)

    def sorted_rows(self) -> list[Row]:
        order = {"all": 0, "source-word": 1, "source-tag": 2, "output-word": 3, "output-tag": 4}
        return sorted(self.rows.values(), key=lambda r: (order[r.section], -r.count, r.item))


def check_tags(tags: list[str], spans_per_line: list[list], tags_path: str) -> list[list[str]]:
    if len(tags) != len(spans_per_line):
        raise DataError(f"{tags_path} has {len(tags)} lines but the input has {len(spans_per_line)}")
    out = []
    for n, (line, spans) in enumerate(zip(tags, spans_per_line), 1):
        items = line.split()
        if len(items) != len(spans):
            raise DataError(f"{tags_path}:{n}: {len(items)} tags for {len(spans)} tokenised source words "
                            f"({' '.join(w for w, _, _ in spans)[:80]})")
        out.append(items)
    return out


def analyse_lines(translator, lines: list[str], tags: list[str] | None = None, beam: int | None = None,
                  tags_path: str = "tags", batch_size: int = 32, output_tagger=None) -> list[Row]:
    """Mean gate values per source word, per tag and per output word (see the module doc).

    `output_tagger`: words (list of lists) → tags, for the output-tag section."""
    model = translator.model
    capabilities = model.capabilities
    gated, decoder_gated = bool(capabilities.encoder_hyper_gates), bool(capabilities.decoder_hyper_gates)
    adaptive_output = capabilities.adaptive_output
    if not gated and not adaptive_output and not decoder_gated:
        raise ConfigError("this model has no adaptive gates (no adaptive-gru cell in its encoder or decoder and "
                          "model.output is neither 'adaptive' nor 'adaptive-gain3'): nothing to analyse")
    tokens = [translator.preprocessor.encode(line, "src") if line.strip() else [] for line in lines]
    scheme = translator.preprocessor.options.subwords
    spans = [word_spans(t, scheme) for t in tokens]
    tag_lists = check_tags(tags, spans, tags_path) if tags is not None else [None] * len(lines)
    agg = Aggregate()
    todo = [i for i, t in enumerate(tokens) if t]
    for start in range(0, len(todo), batch_size):
        index = todo[start: start + batch_size]
        ids = [translator.src_vocab.encode(tokens[i], add_eos=False) for i in index]
        if gated:
            _add_source(agg, encoder_gates(model, ids), [spans[i] for i in index], [tag_lists[i] for i in index])
        if adaptive_output or decoder_gated:
            _add_output(agg, translator, ids, beam, adaptive_output, output_tagger)
    return agg.sorted_rows()


def _add_source(agg: Aggregate, gates: dict[str, list[torch.Tensor]], spans: list, tags: list) -> None:
    for k, (sentence_spans, sentence_tags) in enumerate(zip(spans, tags)):
        per_word = {name: word_values(values[k], sentence_spans) for name, values in gates.items()}
        for w, (word, _, _) in enumerate(sentence_spans):
            values = {f"gate_{name}": per_word[name][w][0] for name in gates}
            agg.add("source-word", word, values)
            agg.add("all", "source words", values)
            if sentence_tags is not None:
                agg.add("source-tag", sentence_tags[w], values)


def _add_output(agg: Aggregate, translator, ids: list[list[int]], beam: int | None, adaptive_output: bool,
                output_tagger=None) -> None:
    dec = translator.config.decoding
    model = translator.model
    hyps = search_ids(model, ids, dec, beam or dec.beam, device=translator.device, length=translator.length_control())
    outs = [h[0].tokens if h else [] for h in hyps]
    alphas = output_weights(model, ids, outs) if adaptive_output else [None] * len(outs)
    gates = decoder_gates(model, ids, outs)
    spans = []
    for out_ids in outs:
        out_tokens = [translator.tgt_vocab.token(i) for i in out_ids]
        spans.append(word_spans(out_tokens, translator.preprocessor.options.subwords)
                     + [("</s>", len(out_tokens), len(out_tokens) + 1)])
    tags = output_tagger([[w for w, _, _ in sp[:-1]] for sp in spans]) if output_tagger else None
    for k, (sentence_spans, alpha) in enumerate(zip(spans, alphas)):
        per_word = {f"gate_{name}": [v[0] for v in word_values(values[k], sentence_spans)]
                    for name, values in gates.items()}  # {column: one value per word}
        if alpha is not None:
            weights = word_values(alpha, sentence_spans)
            per_word.update({name: [w[n] for w in weights] for n, name in enumerate(OUTPUT_WEIGHTS)})
        for w, (word, _, _) in enumerate(sentence_spans):
            named = {key: values[w] for key, values in per_word.items()}
            agg.add("output-word", word, named)
            agg.add("all", "output words", named)
            if tags is not None and w < len(tags[k]):
                agg.add("output-tag", tags[k][w], named)


# -- output ----------------------------------------------------------------------------------

def columns(rows: list[Row]) -> list[str]:
    seen: list[str] = []
    for row in rows:
        seen += [k for k in row.sums if k not in seen]
    return seen


def write_csv(rows: list[Row], path: str) -> None:
    cols = columns(rows)
    with atomic_write(path, "w") as fh:
        writer = csv.writer(fh)
        writer.writerow(["section", "item", "count"] + cols)
        for row in rows:
            means = row.means()
            writer.writerow([row.section, row.item, row.count] + [f"{means[c]:.6f}" if c in means else ""
                                                                   for c in cols])


def format_table(rows: list[Row], top: int = 20) -> str:
    """Per section, the `top` most frequent items with their mean values."""
    cols = columns(rows)
    lines = []
    for section in ("all", "source-word", "source-tag", "output-word", "output-tag"):
        chosen = [r for r in rows if r.section == section][:top]
        if not chosen:
            continue
        keys = [c for c in cols if any(c in r.sums for r in chosen)]
        width = max(12, max(len(r.item) for r in chosen))
        lines.append(f"\n{section} (top {len(chosen)} by count)")
        lines.append(f"{'item':<{width}} {'count':>6} " + " ".join(f"{k:>18}" for k in keys))
        for r in chosen:
            m = r.means()
            lines.append(f"{r.item:<{width}} {r.count:>6} " + " ".join(f"{m[k]:>18.4f}" if k in m else " " * 18
                                                            for k in keys))
    return "\n".join(lines).lstrip("\n")


# -- command ---------------------------------------------------------------------------------

def source_words(translator, lines: list[str]) -> list[list[str]]:
    """The words (tokenised, truecased, subwords joined) the analysis reports, per line."""
    scheme = translator.preprocessor.options.subwords
    return [[w for w, _, _ in word_spans(translator.preprocessor.encode(line, "src"), scheme)] if line.strip()
            else [] for line in lines]


def tag_lines(translator, lines: list[str]) -> list[str]:
    """Universal POS tags of the source words, one line of tags per input line."""
    return [" ".join(t) for t in apertium_tags(source_words(translator, lines), translator.config.data.src_lang)]


def register(sub) -> None:
    p = sub.add_parser("gates", help="mean hyper-gate values per source word/tag and adaptive output weights "
                                     "per output word",
                       description="Translate a text and report the adaptive model's mean hyper-gate value per "
                                   "source word (or tag) and its adaptive output weights per output word "
                                   "(docs/encoders-and-adaptive.md).")
    add_model_dir(p, "a model with adaptive cells or an adaptive output, as ctxnmt train wrote it")
    add_input(p, "source text, one sentence per line", required=True)
    tags = p.add_mutually_exclusive_group()
    tags.add_argument("--tags", help="one tag per tokenised source word, one line per input line (e.g. POS)")
    tags.add_argument("--tagger", choices=("apertium",),
                      help="tag the source words with Universal POS tags (Debian's apertium-eng-spa)")
    p.add_argument("--write-tags", metavar="F", help="with --tagger: write the tags made (the --tags format)")
    add_output(p, "CSV file (written atomically); default: the table only")
    p.add_argument("--beam", type=int, help="beam size for the translations whose α are reported")
    p.add_argument("--top", type=int, default=20, help="items per section in the printed table")
    add_checkpoint(p)
    p.set_defaults(func=cmd_gates)


def cmd_gates(args) -> int:
    check_at_least(1, beam=args.beam, top=args.top)
    lines = read_lines(args.input, allow_empty=True)
    tags = read_lines(args.tags, allow_empty=True) if args.tags else None
    translator = Translator.load(args.model_dir, checkpoint=args.checkpoint)
    check_without_context(translator.model, args.model_dir, "the gate analysis")
    output_tagger = None
    if args.tagger:
        try:
            tags = tag_lines(translator, lines)
        except DataError as err:
            raise DataError(f"{args.input}: {err}") from None
        if args.write_tags:
            write_lines_atomic(args.write_tags, tags)

        def output_tagger(words):
            return apertium_tags(words, translator.config.data.tgt_lang)
    rows = analyse_lines(translator, lines, tags, beam=args.beam, tags_path=args.tags or "tags",
                         output_tagger=output_tagger)
    if args.output:
        write_csv(rows, args.output)
    sys.stdout.write(format_table(rows, args.top) + "\n")
    return 0
