"""Test data helpers: random bf16 tensors, distinct slot lists, paged block tables."""

from __future__ import annotations

import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16


def bf16(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(BF16)


def distinct_slots(rng: np.random.Generator, rows: int, topk: int, num_slots: int,
                   empty: int = 0) -> np.ndarray:
    """[rows, topk] int32 of distinct slots per row, with `empty` trailing -1s per row and the
    last row all -1 when rows > 1 (the empty-row case)."""
    out = np.full((rows, topk), -1, dtype=np.int32)
    for r in range(rows):
        n = topk - empty
        out[r, :n] = rng.permutation(num_slots)[:n]
        rng.shuffle(out[r])
    if rows > 1:
        out[-1] = -1
    return out


def paged_requests(rng: np.random.Generator, lengths: list[int], block_size: int,
                   num_blocks: int) -> np.ndarray:
    """A block table [B, max_blocks] int32 giving each request distinct random blocks."""
    max_blocks = max(-(-n // block_size) for n in lengths)
    assert max_blocks * len(lengths) <= num_blocks
    blocks = rng.permutation(num_blocks)[:max_blocks * len(lengths)]
    return blocks.reshape(len(lengths), max_blocks).astype(np.int32)
