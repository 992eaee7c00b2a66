"""`ctxnmt analyze context`: does a document-context model use the context it reads?

A cross-sentence model that beats the baseline may owe it to its extra parameters rather
than to the previous sentences.  The same model translates the test set three ways:

- **own**: each sentence after its own document's previous sentences, as in training;
- **none**: every sentence its own document, so it reads no context at all;
- **other**: each sentence after as many previous sentences as it has in its own
  document (up to K), taken from a consecutive run of another document, chosen with a
  seed.

"none" also measures how much the model has come to expect a context; "other" keeps the
amount of context and changes only whose it is, so own − other is what the right
context adds.  Each condition is scored against the references and tested against
"own" with paired approximate randomisation (two-sided).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ctxnmt.data.corpus import check_same_length, read_lines, write_lines_atomic
from ctxnmt.data.documents import other_document_sentences
from ctxnmt.decoding.translator import Translator
from ctxnmt.errors import ConfigError, DataError
from ctxnmt.evaluation.metrics import score_all
from ctxnmt.evaluation.significance import compare
from ctxnmt.utils.arguments import add_checkpoint, add_input, add_model_dir, add_output, add_ref, check_at_least
from ctxnmt.utils.io import make_directory


@dataclass
class ContextInput:
    """The lines to translate, their document ids, and where the test sentences are among them."""

    lines: list[str]
    doc_ids: list[str]
    keep: list[int]
    sources: list[int]  # the test line each line is (a lent context line: the other document's)


def no_context(src: list[str]) -> ContextInput:
    return ContextInput(list(src), [f"line{i}" for i in range(len(src))], list(range(len(src))),
                        list(range(len(src))))


def other_context(src: list[str], doc_ids: list[str], k: int, seed: int) -> ContextInput:
    """Each line after min(k, its position in its document) consecutive lines of another document."""
    lines, ids, keep, sources = [], [], [], []
    for i, lent in enumerate(other_document_sentences(doc_ids, k, seed)):
        lines += [src[j] for j in lent]
        sources += lent
        ids += [f"other{i}"] * len(lent)
        keep.append(len(lines))
        lines.append(src[i])
        sources.append(i)
        ids.append(f"other{i}")
    return ContextInput(lines, ids, keep, sources)


CONDITIONS = ("own", "none", "other")


def chosen_conditions(text: str, allowed: tuple[str, ...] = CONDITIONS) -> tuple[str, ...]:
    """The conditions a --contexts value names, comma-separated, each one of `allowed`."""
    chosen = tuple(c.strip() for c in text.split(",") if c.strip())
    if not chosen or any(c not in allowed for c in chosen):
        raise ConfigError(f"--contexts: a comma-separated choice of {', '.join(allowed)}, not '{text}'")
    return chosen


def context_conditions(src: list[str], doc_ids: list[str], k: int, seed: int,
                       names: tuple[str, ...] = CONDITIONS) -> dict[str, ContextInput]:
    """The inputs of each named condition: own, none and other (module docstring)."""
    unknown = [name for name in names if name not in CONDITIONS]
    if unknown:
        raise DataError(f"unknown context condition '{unknown[0]}' (they are {', '.join(CONDITIONS)})")
    make = {"own": lambda: ContextInput(list(src), list(doc_ids), list(range(len(src))), list(range(len(src)))),
            "none": lambda: no_context(src),
            "other": lambda: other_context(src, doc_ids, k, seed)}
    return {name: make[name]() for name in names}


def translate_condition(translator, given: ContextInput, beam: int | None) -> list[str]:
    out = translator.translate(given.lines, beam=beam, doc_ids=given.doc_ids)
    return [out[i].text for i in given.keep]


def context_table(src: list[str], doc_ids: list[str], refs: list[str], translator, lang: str,
                  seed: int = 1, beam: int | None = None) -> tuple[list[dict], dict[str, list[str]]]:
    """One row per condition (BLEU, chrF, Δ BLEU and two-sided AR p against 'own'), and the outputs."""
    k = translator.document_sents
    if not k:
        raise DataError("this model reads no document context: there is nothing to take away")
    outputs = {name: translate_condition(translator, given, beam)
               for name, given in context_conditions(src, doc_ids, k, seed).items()}
    rows = []
    for name, hyps in outputs.items():
        scores = score_all(hyps, refs, lang=lang)
        row = {"context": name, "bleu": scores["bleu"].value, "chrf": scores["chrf"].value}
        if name != "own":
            test = compare(outputs["own"], hyps, refs, test="ar", metric="bleu", seed=seed)
            row.update(delta=test.system - test.baseline, p=test.p_value)
        rows.append(row)
    return rows, outputs


def markdown(rows: list[dict]) -> str:
    lines = ["| context | BLEU | chrF | Δ BLEU vs own | AR p (two-sided) |", "|---|---|---|---|---|"]
    for r in rows:
        delta = f"{r['delta']:+.2f}" if "delta" in r else ""
        p = f"{r['p']:.3f}" if "p" in r else ""
        lines.append(f"| {r['context']} | {r['bleu']:.2f} | {r['chrf']:.2f} | {delta} | {p} |")
    return "\n".join(lines) + "\n"


def add_document_inputs(p, ref_help: str) -> None:
    """MODEL_DIR, -i, --doc-ids and -r: what the analyses of a document model's context read."""
    add_model_dir(p, "a document-context model's directory (model.doc_*), as ctxnmt train wrote it")
    add_input(p, "source text, one sentence a line", required=True)
    p.add_argument("--doc-ids", required=True, metavar="FILE", help="one document id per input line")
    add_ref(p, ref_help, required=True)


def register(sub) -> None:
    p = sub.add_parser("context", help="a document-context model with its own context, none, and another "
                                       "document's",
                       description="Translate a test set with each sentence's own previous sentences, with none, "
                                   "and with as many from another document; score each and test it against the "
                                   "own context (paired approximate randomisation, two-sided).")
    add_document_inputs(p, "reference translations")
    p.add_argument("--lang", help="the output's language, as Moses tokenises it (default: the model's target "
                                  "language, data.tgt_lang)")
    p.add_argument("--seed", type=int, default=1, help="which other documents lend their sentences (default 1)")
    p.add_argument("--beam", type=int, help="beam size (default: the model's)")
    add_output(p, "write each condition's translation to this directory as {own,none,other}.txt", "--out-dir",
               dest="out_dir", metavar="DIR")
    add_checkpoint(p)
    p.set_defaults(func=cmd_context)


def read_aligned(args) -> tuple[list[str], list[str], list[str]]:
    """-i, --doc-ids and -r, refused unless they have as many lines."""
    src, doc_ids, refs = read_lines(args.input), read_lines(args.doc_ids), read_lines(args.ref)
    for path, lines in ((args.doc_ids, doc_ids), (args.ref, refs)):
        check_same_length(path, lines, args.input, src)
    return src, doc_ids, refs


def cmd_context(args) -> int:
    check_at_least(1, beam=args.beam)
    src, doc_ids, refs = read_aligned(args)
    translator = Translator.load(args.model_dir, checkpoint=args.checkpoint)
    rows, outputs = context_table(src, doc_ids, refs, translator, args.lang or translator.config.data.tgt_lang,
                                  args.seed, args.beam)
    if args.out_dir:
        make_directory(args.out_dir)
        for name, hyps in outputs.items():
            write_lines_atomic(Path(args.out_dir) / f"{name}.txt", hyps)
    print(markdown(rows).rstrip())
    return 0
