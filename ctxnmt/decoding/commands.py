"""`ctxnmt translate`."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from ctxnmt import length_options as length
from ctxnmt.data.corpus import decode_lines, read_lines
from ctxnmt.data.documents import blank_line_documents, check_document_ids
from ctxnmt.decoding.export import export_model
from ctxnmt.decoding.settings import DecodingConfig
from ctxnmt.decoding.translator import Translator
from ctxnmt.errors import ConfigError
from ctxnmt.training.settings import DEVICE
from ctxnmt.utils.arguments import add_checkpoint, add_input, add_model_dirs, add_output, check_at_least
from ctxnmt.utils.checkpoint import checkpoint_file
from ctxnmt.utils.io import atomic_write, check_writable
from ctxnmt.utils.options import choices


def register(sub) -> None:
    p = sub.add_parser("translate",
                       description="Translate raw (untokenised) text, one sentence a line, with a trained model or "
                                   "an ensemble of several: the output is detokenised text, one line per input line.")
    add_model_dirs(p, "an ensemble, decoded together (same preprocessing and vocabularies)")
    p.add_argument("--ensemble-mode", choices=("logprob", "prob"), default="logprob",
                   help="combine members by averaging log-probabilities (default) or probabilities")
    add_input(p, "source text, one sentence a line (default: stdin)")
    add_output(p, "the translations, written atomically (default: stdout)")
    p.add_argument("--beam", type=int, help="beam size (default: the config's; 1 = greedy)")
    p.add_argument("--nbest", type=int, default=1, help="print the N best as 'i ||| text ||| score'")
    p.add_argument("--batch-size", type=int, help="sentences decoded together")
    add_checkpoint(p)
    p.add_argument("--device", default="cpu", help="where to decode: cpu (default) or cuda")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="replay each search step from a CUDA graph (decoding.cuda_graphs, ours; needs --device cuda)")
    add_precision(p)
    p.add_argument("--workers", type=int,
                   help="on the CPU, N searches side by side, each on its own batches with one thread "
                        "(default: the config's decoding.workers, 1)")
    p.add_argument("--bf16", action="store_true", help="the same as --precision bf16")
    p.add_argument("--attention", metavar="JSONL", help="write attention weights, one JSON object per line")
    p.add_argument("--doc-ids", metavar="FILE",
                   help="one document id per input line (like a corpus .doc file): document-context models "
                        "read each line's previous lines of the same document")
    p.add_argument("--doc-blank-lines", action="store_true",
                   help="the input's documents are separated by blank lines (kept as empty output lines)")
    length.add_arguments(p)
    p.set_defaults(func=cmd_translate)

    p = sub.add_parser("export",
                       description="Write what translation needs of a model directory, and nothing of training, to "
                                   "a new directory: config.yaml, prep/ (vocabularies, tokenisation, truecasing and "
                                   "subword models, length ratios) and model.safetensors (the weights; they load "
                                   "without unpickling).  translate, serve, score contrastive and analyze read it "
                                   "as a model directory.")
    p.add_argument("model_dir", metavar="MODEL_DIR", help="the trained model directory")
    p.add_argument("out_dir", metavar="OUT_DIR", help="the new directory (must not exist, or be empty)")
    add_checkpoint(p)
    p.set_defaults(func=cmd_export)


PRECISION_HELP = {
    "bf16": "bf16: search under bf16 autocast, softmax and scores in float32 (needs --device cuda)",
    "int8": "int8: the matrix products in int8, the rest in float32 (on the CPU; docs/speed.md)",
}


def check_device(device: str) -> None:
    """`--device`: cpu, cuda or cuda:N, and a GPU that is there (else a traceback from torch
    once the model is loaded)."""
    if not DEVICE.fullmatch(device):
        raise ConfigError(f"--device must be cpu, cuda or cuda:N, got '{device}'")
    if device == "cpu":
        return
    index = int(device.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise ConfigError(f"--device {device}: {torch.cuda.device_count()} CUDA device(s) visible")


def add_precision(p, choices: tuple[str, ...] = choices(DecodingConfig, "precision")) -> None:
    """--precision, one meaning for every command that searches or scores: decoding.precision for this run."""
    said = "; ".join(PRECISION_HELP[c] for c in choices if c in PRECISION_HELP)
    p.add_argument("--precision", choices=choices, help=f"{said}; default: the config's decoding.precision")


def use_precision_flag(translator: Translator, precision: str | None) -> None:
    """Apply --precision (None: the model directory's decoding.precision)."""
    if precision:
        translator.use_precision(precision)


def cmd_export(args) -> int:
    checkpoint = args.checkpoint and checkpoint_file(args.model_dir, args.checkpoint)
    weights = export_model(Path(args.model_dir), Path(args.out_dir), checkpoint)
    size = sum(p.stat().st_size for p in Path(args.out_dir).rglob("*") if p.is_file())
    print(f"exported {args.model_dir} to {args.out_dir} ({size / 1e6:.1f} MB; weights: {weights})")
    return 0


def _read_input(path: str | None) -> list[str]:
    if path:
        return read_lines(path, allow_empty=True)
    data = sys.stdin.buffer.read()

    return decode_lines(data, "<stdin>")


def cmd_translate(args) -> int:
    if args.doc_ids and args.doc_blank_lines:
        raise ConfigError("--doc-ids and --doc-blank-lines are two ways of giving documents; use one")
    check_at_least(1, beam=args.beam, nbest=args.nbest, batch_size=args.batch_size)  # 0: the config's beam, silently
    check_device(args.device)
    for output in (args.output, args.attention):
        if output:
            check_writable(output)
    options = length.from_arguments(args)
    model_dirs = args.model_dirs
    translator = Translator.load(model_dirs if len(model_dirs) > 1 else model_dirs[0], checkpoint=args.checkpoint,
                                 device=args.device, ensemble_mode=args.ensemble_mode)
    if args.cuda_graphs:
        translator.use_cuda_graphs()
    if args.bf16 and args.precision not in (None, "bf16"):
        raise ConfigError(f"--bf16 and --precision {args.precision} contradict each other; use one")
    if args.bf16 or args.precision:
        translator.use_precision("bf16" if args.bf16 else args.precision, "--bf16" if args.bf16 else None)
    if args.workers is not None:
        translator.use_workers(args.workers)
    translator.length_control(options)  # a bad combination with the model's config fails before reading input
    lines = _read_input(args.input)
    doc_ids = None
    if args.doc_blank_lines:
        doc_ids = blank_line_documents(lines)
    if args.doc_ids:
        doc_ids = read_lines(args.doc_ids, allow_empty=True)
        check_document_ids(doc_ids, args.doc_ids, len(lines))
    results = translator.translate(lines, beam=args.beam, nbest=args.nbest, batch_size=args.batch_size,
                                   return_attention=bool(args.attention), doc_ids=doc_ids, length=options)
    if args.nbest > 1:
        out = [f"{i} ||| {h.text} ||| {h.score:.4f}" for i, r in enumerate(results) for h in (r.nbest or [r])]
    else:
        out = [r.text for r in results]
    if args.output:
        with atomic_write(args.output, "w") as fh:
            fh.writelines(line + "\n" for line in out)
    else:
        sys.stdout.writelines(line + "\n" for line in out)
    if args.attention:
        with atomic_write(args.attention, "w") as fh:
            for i, r in enumerate(results):
                att = r.attention.tolist() if r.attention is not None else []
                fh.write(json.dumps({"line": i + 1, "src": r.src_tokens, "out": r.tokens + ["</s>"],
                                     "attention": att}) + "\n")
    return 0
