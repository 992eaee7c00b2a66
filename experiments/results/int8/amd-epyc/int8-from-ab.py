"""decoding.int8_from A/B (issue 64): float32 against int8 with every product in int8
(int8_from 0, as before) and with products of fewer multiply-adds per matrix left in float32
(1, 2 and 4 million), on the test split (a document model with its document ids), beam 5,
two workers of one thread, three rounds alternating the arms; median sentences/s and sacreBLEU.

    python -P experiments/results/int8/amd-epyc/int8-from-ab.py MODEL_DIR [MODEL_DIR ...]
"""
import dataclasses
import statistics
import sys
import time

import torch

from ctxnmt.data.corpus import read_lines
from ctxnmt.decoding.translator import Translator
from ctxnmt.evaluation.metrics import bleu

ARMS = {"fp32": ("fp32", 0), "int8, all": ("int8", 0), "int8, from 1M": ("int8", 1_000_000),
        "int8, from 2M": ("int8", 2_000_000), "int8, from 4M": ("int8", 4_000_000)}


def main() -> None:
    torch.set_num_threads(1)
    lines, refs = read_lines("data/bible/test.es"), read_lines("data/bible/test.en")
    doc_ids = read_lines("data/bible/test.doc")
    for model_dir in sys.argv[1:]:
        translator = Translator.load(model_dir)
        translator.use_workers(2)
        ids = doc_ids if translator.document_sents else None
        rates, outputs = {arm: [] for arm in ARMS}, {}

        def run(arm, n):
            precision, fewest = ARMS[arm]
            translator.config.decoding = dataclasses.replace(translator.config.decoding, precision=precision,
                                                             int8_from=fewest)
            start = time.perf_counter()
            out = translator.translate(lines[:n], beam=5, doc_ids=ids and ids[:n])
            return len(out) / (time.perf_counter() - start), [t.text for t in out]

        for arm in ARMS:  # warm-up: kernels, packs, word tables
            run(arm, 20)
        for _ in range(3):
            for arm in ARMS:
                rate, outputs[arm] = run(arm, len(lines))
                rates[arm].append(rate)
        fp32 = statistics.median(rates["fp32"])
        for arm in ARMS:
            rate = statistics.median(rates[arm])
            print(f"{model_dir[-44:]:44} {arm:14} {rate:7.2f} sent/s  x{rate / fp32:.3f}  "
                  f"BLEU {bleu(outputs[arm], refs).value:.2f}  runs {' '.join(f'{r:.1f}' for r in rates[arm])}",
                  flush=True)


if __name__ == "__main__":
    main()
