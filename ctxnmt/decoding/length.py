"""Length control in beam search: the length penalty, the coverage penalty and the
maximum output length.

A finished hypothesis y of source x is ranked by

    s(y, x) = log P(y|x) / lp(y) + cp(x; y)                      (Wu et al. 2016, eq. 14)

lp(y), chosen by `decoding.length_penalty_kind`, with α = `decoding.length_penalty`:

    power   |y|^α                  fairseq's --lenpen, Marian's --normalize (the default, α = 1)
    wu      ((5 + |y|) / 6)^α      GNMT: (5 + |Y|)^α / (5 + 1)^α
    none    1                      the raw log-probability (as power with α = 0)

|y| counts the output subwords and the final </s>: one per search step.

    cp(x; y) = β · Σ_{i=1}^{|x|} log(min(Σ_t a_{t,i}, 1.0))      (eq. 14; β = `decoding.coverage_penalty`)

over the source subwords i and every output step t, </s> included.  β = 0 turns it off,
and search then keeps no coverage at all.

An output has at most max_len(x) = a·|x| + b subwords (floored, and at least 1), with
fairseq's names and convention (--max-len-a, --max-len-b): a = `decoding.max_len_a`,
b = `decoding.max_len_b`.  With `decoding.max_len_rule: data`, a is instead the 99th
percentile of the target/source subword ratios of the model's training pairs
(prep/lengths.json, see ctxnmt.data.prepare.length_ratios).

With `decoding.block_ngram_repeat` = n > 0, no hypothesis may repeat an n-gram of its own
subwords (OpenNMT-py's -block_ngram_repeat): a word that would complete an n-gram already
in the hypothesis is not proposed.  Search looks only at each row's 2K most probable words,
so a row with more of them blocked proposes fewer.

With `decoding.length_ratio_penalty` = λ > 0 (ours) a finished hypothesis also
pays for a length out of proportion with its source, in words:

    s(y, x) = log P(y|x) / lp(y) + cp(x; y) − λ · |log(W(y) / (r · W(x)))|

W counts words, a word being a run of subwords joined by the BPE separator ("new@@ found@@
land" is one) or, for SentencePiece, one piece starting with ▁ and those after it without
("▁new found land"; ctxnmt.data.words); r = `decoding.length_ratio`, or with `decoding.length_ratio_rule: data` the
median W(y)/W(x) of the model's training pairs (prep/lengths.json, `words 0.5`).  Words,
not subwords: text unlike the training data splits into many more subwords on the source
side, so a prior in subwords would let its translations grow with them.  Since the prior
can favour a shorter output than the ones that rank among the K best, every open
hypothesis's </s> is then a finished candidate at every step (not only those among the
K best), which needs the whole next-word distribution: such a search calls the model's
`step`, not `step_candidates` (no fused top-k, no CUDA graphs).  An open hypothesis is
judged against the finished ones with the prior it could still reach: none while it is
shorter than r·W(x), its excess beyond that otherwise.  The log makes the prior a Laplace
prior on the log length ratio: twice too long costs what half as long costs (λ·log 2), and
an empty output (W taken as 1/2) costs the most, which a linear form |W(y)/W(x) − r| does
not: on the demo model it let empty outputs win on news text (docs/decoding.md).

The options, their defaults, ranges and help texts are defined once, for the config, the
command line and the server alike, in ctxnmt.length_options (below the config, which checks them).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from ctxnmt.data.prepare import WORD_RATIO
from ctxnmt.data.words import WordBoundaries
from ctxnmt.length_options import LengthOptions

DATA_QUANTILE = "0.99"  # the ratio quantile `max_len_rule: data` takes as a (a key of prep/lengths.json)

# A coverage that underflowed to 0 would make log −inf, and every hypothesis of the
# sentence −inf: ranking would then be arbitrary.
_TINY = torch.finfo(torch.float32).tiny
_DEFAULT = LengthOptions()


@dataclass(frozen=True)
class LengthControl:
    """What beam search needs, in numbers (the rules resolved); the defaults are LengthOptions'."""
    kind: str = _DEFAULT.length_penalty_kind
    alpha: float = _DEFAULT.length_penalty
    beta: float = _DEFAULT.coverage_penalty
    max_len_a: float = _DEFAULT.max_len_a
    max_len_b: int = _DEFAULT.max_len_b
    block_ngram_repeat: int = _DEFAULT.block_ngram_repeat
    ratio_penalty: float = _DEFAULT.length_ratio_penalty  # λ of the length-ratio prior; 0 = off
    ratio: float = _DEFAULT.length_ratio  # r, output words per source word
    words: WordBoundaries | None = field(default=None, compare=False, repr=False)  # needed where λ > 0

    def __post_init__(self):
        if self.ratio_penalty and self.words is None:
            raise ValueError("a length-ratio prior counts words: give the vocabularies' WordBoundaries")

    @property
    def normalises(self) -> bool:
        return self.kind != "none" and self.alpha != 0

    def lp(self, length: int) -> float:
        """lp(y) for |y| = `length` (output subwords and </s>)."""
        if not self.normalises:
            return 1.0
        if self.kind == "wu":
            return ((5 + length) / 6) ** self.alpha
        return float(length) ** self.alpha

    def score(self, logprob: torch.Tensor, lengths: Sequence[int], cp: torch.Tensor | None = None,
              prior: torch.Tensor | None = None) -> torch.Tensor:
        """s(y, x) = log P(y|x) / lp(y) + cp(x; y) for log-probabilities (n, …) whose row i has
        |y| = lengths[i], in logprob's precision; `cp`: the coverage penalties (n, …), if any;
        `prior`: the length-ratio prior's terms (n, …), if any."""
        if self.normalises:  # lp is 1 otherwise: skip making the tensor
            lp = torch.tensor([self.lp(t) for t in lengths], dtype=logprob.dtype, device=logprob.device)
            logprob = logprob / lp.view(-1, *[1] * (logprob.dim() - 1))
        for term in (cp, prior):
            if term is not None:
                logprob = logprob + term.to(logprob.dtype)
        return logprob

    def ratio_prior(self, words: torch.Tensor, src_words: torch.Tensor, reachable: bool = False) -> torch.Tensor:
        """−λ·|log(W(y) / (r·W(x)))| for output and source word counts (broadcast; W(y) = 0 is
        taken as 1/2, W(x) = 0 as 1); `reachable`: the best an open hypothesis of W(y) words
        can still get, −λ·max(0, log(W(y) / (r·W(x))))."""
        excess = (words.double().clamp(min=0.5) / (self.ratio * src_words.double().clamp(min=1))).log()
        return -self.ratio_penalty * (excess.clamp(min=0) if reachable else excess.abs())

    def max_len(self, src_len: int) -> int:
        """Most output subwords (</s> not counted); every step emits one, so at least 1."""
        return max(1, int(self.max_len_a * src_len) + self.max_len_b)


def coverage_penalty(coverage: torch.Tensor, src_lens: torch.Tensor, beta: float) -> torch.Tensor:
    """cp = β · Σ_{i ≤ |x|} log(min(Σ_t a_{t,i}, 1.0)) per row (eq. 14).  `coverage` (R, S):
    each row's attention summed over its steps so far; `src_lens` (R,): |x| of each row,
    whose columns beyond it are padding (zero attention, and no source word)."""
    real = torch.arange(coverage.size(1), device=coverage.device) < src_lens.view(-1, 1)
    logs = coverage.clamp(min=_TINY, max=1.0).log()
    return beta * torch.where(real, logs, torch.zeros_like(logs)).sum(1)


def needs_word_ratio(dec) -> bool:
    """Whether the settings read the training pairs' word ratio."""
    return bool(dec.length_ratio_penalty) and dec.length_ratio_rule == "data"


def uses_ratios(dec) -> bool:
    """Whether the settings read the training data's length ratios."""
    return dec.max_len_rule == "data" or needs_word_ratio(dec)


def length_control(dec, ratios: Mapping[str, float] | None, warn: Callable[[str], None] | None = None,
                   words: WordBoundaries | None = None) -> LengthControl:
    """The search's settings from a DecodingConfig; `ratios`: the training data's target/source
    ratio quantiles, read by `max_len_rule: data` and `length_ratio_rule: data` (None: not
    known, and a model directory from before they were recorded: a keeps `max_len_a`, r
    `length_ratio`, with a warning); `words`: the vocabularies' word boundaries, which a
    length-ratio prior needs."""
    def from_data(rule: str, key: str, value: str, what: str) -> float:
        fallback = getattr(dec, value)
        if ratios is None or key not in ratios:
            if warn is not None:
                warn(f"{rule} data: no training {what} for this model (prep/lengths.json or the prepared pairs); "
                     f"using {value} = {fallback:g} instead")
            return fallback
        return float(ratios[key])

    a = dec.max_len_a if dec.max_len_rule != "data" else from_data("max_len_rule", DATA_QUANTILE, "max_len_a",
                                                                    "length ratios")
    control = LengthControl(dec.length_penalty_kind, dec.length_penalty, dec.coverage_penalty, a, dec.max_len_b,
                            dec.block_ngram_repeat)
    if not dec.length_ratio_penalty:
        return control
    r = dec.length_ratio
    if dec.length_ratio_rule == "data":
        r = from_data("length_ratio_rule", WORD_RATIO, "length_ratio", "word ratios")
    return dataclasses.replace(control, ratio_penalty=dec.length_ratio_penalty, ratio=r, words=words)

