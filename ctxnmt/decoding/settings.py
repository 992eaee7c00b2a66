"""The `decoding` section: search's settings; the length options are ctxnmt.length_options's
(docs/decoding.md).  Torch-free, so that reading a config loads no model code."""
from __future__ import annotations

from dataclasses import dataclass

from ctxnmt.errors import ConfigError
from ctxnmt.length_options import LengthOptions, check, decoding_options
from ctxnmt.utils.options import option


@dataclass
class _Beam:  # a base, so that beam and batch_size stay first in a saved decoding section
    beam: int = option(5, ">=1")
    batch_size: int = option(64, ">=1", "sentences decoded together")


@dataclass
class DecodingConfig(LengthOptions, _Beam):
    max_src_len: int = option(200, ">=1", "longer inputs are translated in pieces")
    # ours: on CUDA, each search step replayed from a CUDA graph (ctxnmt/decoding/graphs.py)
    cuda_graphs: bool = False
    # ours: bf16 = on CUDA, the search's products in bfloat16 under autocast (softmax and
    # scores in float32); on other devices the search stays float32 (docs/decoding.md).
    # int8 = on the CPU, the matrix products in int8 (ctxnmt/models/int8.py; docs/speed.md)
    precision: str = option("fp32", ("fp32", "bf16", "int8"))
    # ours: under int8, a product of fewer multiply-adds per matrix (rows × in × out) stays
    # float32, where quantising costs more than int8 saves (0: every product in int8, as
    # Marian's and CTranslate2's int8)
    int8_from: int = option(1_000_000, ">=0", "int8: products of fewer multiply-adds stay float32")
    # ours: on the CPU, this many searches side by side, each on its own batches and one thread
    # (Marian's --cpu-threads, CTranslate2's inter_threads; docs/decoding.md)
    workers: int = option(1, ">=1", "searches side by side on the CPU, one thread each")

    def check(self, config) -> None:
        check(decoding_options(self), lambda key: f"decoding.{key}", ConfigError)
