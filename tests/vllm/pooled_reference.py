"""The pooled indexer cache of GLM-5.3-Flash as the tests read it: the model's pool key in float64
and a pool row of latte's (and vLLM's) pooled page layout."""

from __future__ import annotations

import functools
import math

import torch


@functools.lru_cache(maxsize=None)
def hadamard() -> torch.Tensor:
    """The 128 x 128 Sylvester Hadamard matrix, H[i][j] = (-1)^popcount(i & j), float64."""
    idx = torch.arange(128)
    bits = (idx[:, None] & idx[None, :]).tolist()
    return torch.tensor([[(-1.0) ** bin(b).count("1") for b in row] for row in bits],
                        dtype=torch.float64)


def pool_key(k: torch.Tensor, gate: torch.Tensor, ape: torch.Tensor,
             rotate: bool = True) -> torch.Tensor:
    """float64 key of one pool from its tokens' keys and gates (``[kpool, 128]``): the
    per-dimension softmax of gate + ape over the tokens mixing their keys, rounded to bf16, then
    (rotate) the Hadamard-128 rotation / sqrt(128), rounded to bf16 again."""
    w = torch.softmax(gate.double() + ape.double(), dim=0)
    key = (w * k.double()).sum(0).bfloat16().double()
    if not rotate:
        return key
    return ((hadamard() @ key) / math.sqrt(128)).bfloat16().double()


def pow2_scale(key: torch.Tensor) -> float:
    """The smallest power of two with amax / scale <= 448 (vLLM's ue8m0 scale)."""
    return 2.0 ** math.ceil(math.log2(float(key.abs().max()) / 448))


def pool_row(cache: torch.Tensor, rows: int, slot: int):
    """(codes [128] float8_e4m3fn, scale) of pool slot ``slot`` (= block * rows + row): a page
    (block) holds ``rows`` rows of 128 e4m3 codes, then ``rows`` float32 scales."""
    block, row = divmod(int(slot), rows)
    page = cache[block].reshape(-1)
    codes = page[row * 128:(row + 1) * 128].view(torch.float8_e4m3fn)
    scale = page[rows * 128 + 4 * row:rows * 128 + 4 * row + 4].view(torch.float32)
    return codes, float(scale)
