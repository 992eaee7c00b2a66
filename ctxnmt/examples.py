"""Print a few example translations side by side (used by `make demo`).

    python -m ctxnmt.examples --src test.es --ref test.en --hyp test.hyp.en -n 8
"""
from __future__ import annotations

import argparse
import random
import textwrap

from ctxnmt.data.corpus import read_lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--hyp", required=True)
    parser.add_argument("-n", type=int, default=8)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args(argv)
    src, ref, hyp = read_lines(args.src), read_lines(args.ref), read_lines(args.hyp)
    picks = sorted(random.Random(args.seed).sample(range(len(src)), min(args.n, len(src))))
    wrap = textwrap.TextWrapper(width=100, subsequent_indent=" " * 11)
    for i in picks:
        print(f"--- line {i + 1}")
        for label, text in (("source", src[i]), ("reference", ref[i]), ("output", hyp[i])):
            print(wrap.fill(f"{label:>9}: {text}"))


if __name__ == "__main__":
    main()
