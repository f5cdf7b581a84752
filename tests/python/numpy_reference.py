"""The math of docs/design.md, sections 2 to 5, and its byte layouts (section 6) in numpy
float64, written independently of latte to check it. Inputs are numpy arrays of any dtype
ml_dtypes reads."""

from __future__ import annotations

import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn
E4M3_MAX = np.float32(448.0)


def f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def attend(q: np.ndarray, c: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """q [H, d], c [S, d] (d 576, or 512 without rope) -> out [H, 512], lse [H] (out = 0, lse =
    -inf when S = 0)."""
    if len(c) == 0:
        return np.zeros((q.shape[0], 512)), np.full(q.shape[0], -np.inf)
    scores = scale * (q @ c.T)
    m = scores.max(axis=1, keepdims=True)
    p = np.exp(scores - m)
    total = p.sum(axis=1, keepdims=True)
    return (p / total) @ c[:, :512], (m + np.log(total))[:, 0]


def sparse_mla(q, slots_576, indices, scale, topk_lens=None):
    """q [T, H, 576]; slots_576 [num_slots, 576] (the cache, flattened and dequantized);
    indices [T, topk] slots, -1 or out of range = none. Rows without rope: q [T, H, 512] and
    slots [num_slots, 512]. topk_lens [T]: row t uses its first topk_lens[t] columns."""
    q, cache = f64(q), f64(slots_576)
    t_count, heads, _ = q.shape
    out, lse = np.zeros((t_count, heads, 512)), np.zeros((t_count, heads))
    for t in range(t_count):
        row = indices[t] if topk_lens is None else indices[t][:max(0, int(topk_lens[t]))]
        valid = [int(s) for s in row if 0 <= s < len(cache)]
        out[t], lse[t] = attend(q[t], cache[valid], scale)
    return out, lse


def request_slots(block_table_row, length, block_size):
    """Physical slots of logical positions 0 .. length-1 of one request."""
    return [int(block_table_row[p // block_size]) * block_size + p % block_size for p in range(length)]


def mla_decode(q, slots_576, block_table, seq_lens, block_size, scale):
    """q [B, s_q, H, 576]: query i of request b sees positions 0 .. seq_lens[b] - s_q + i."""
    q, cache = f64(q), f64(slots_576)
    batch, s_q, heads, _ = q.shape
    out, lse = np.zeros((batch, s_q, heads, 512)), np.zeros((batch, s_q, heads))
    for b in range(batch):
        for i in range(s_q):
            visible = int(seq_lens[b]) - s_q + i + 1
            slots = request_slots(block_table[b], visible, block_size)
            out[b, i], lse[b, i] = attend(q[b, i], cache[slots], scale)
    return out, lse


def fp8_scale(amax: np.float32, kind: str = "amax") -> np.float32:
    if amax == 0:
        return np.float32(1.0)
    scale = np.float32(amax) / E4M3_MAX
    if kind == "pow2":
        scale = np.float32(2.0) ** np.ceil(np.log2(np.float64(scale)))
    return np.float32(scale)


def quantize_group(values: np.ndarray, kind: str = "amax") -> tuple[np.ndarray, np.float32]:
    """float32 values -> (e4m3 codes as uint8, scale): codes = e4m3(values / scale) in float32."""
    values = np.asarray(values, dtype=np.float32)
    scale = fp8_scale(np.abs(values).max(), kind)
    codes = (values / scale).astype(E4M3).view(np.uint8)
    return codes, scale


def pack_fp8_ds_mla(latent, rope, kind="amax") -> np.ndarray:
    """One token [512] + [64] -> 656 bytes: 4 groups of 128 e4m3, 4 float32 scales, 64 bf16."""
    out = np.zeros(656, dtype=np.uint8)
    latent = np.asarray(latent, dtype=np.float32)
    for g in range(4):
        codes, scale = quantize_group(latent[g * 128:(g + 1) * 128], kind)
        out[g * 128:(g + 1) * 128] = codes
        out[512 + 4 * g:516 + 4 * g] = np.frombuffer(np.float32(scale).tobytes(), dtype=np.uint8)
    out[528:656] = np.asarray(rope, dtype=np.float32).astype(BF16).view(np.uint8)
    return out


def unpack_fp8_ds_mla(token656: np.ndarray) -> np.ndarray:
    """656 bytes -> 576 float64 values (latent = e4m3 * group scale, rope = bf16)."""
    token656 = np.ascontiguousarray(token656, dtype=np.uint8)
    codes = f64(token656[:512].view(E4M3))
    scales = f64(token656[512:528].view(np.float32))
    rope = f64(token656[528:656].view(BF16))
    return np.concatenate([codes * np.repeat(scales, 128), rope])


def unpack_mla_cache(cache: np.ndarray) -> np.ndarray:
    """A cache [nb, bs, 576] bf16 or [nb, bs, 656] uint8 -> [nb * bs, 576] float64."""
    flat = cache.reshape(-1, cache.shape[-1])
    if cache.dtype == np.uint8:
        return np.stack([unpack_fp8_ds_mla(tok) for tok in flat])
    return f64(flat)


def unpack_nope_cache(cache: np.ndarray) -> np.ndarray:
    """A cache of rows without rope -> [nb * bs, 512] float64: [nb, bs, 512] bf16, or uint8 rows of
    528 bytes (4 groups of 128 e4m3, then 4 float32 scales) or 656 (the same, then 128 bytes not
    read)."""
    flat = cache.reshape(-1, cache.shape[-1])
    if cache.dtype != np.uint8:
        return f64(flat)
    rows = np.ascontiguousarray(flat[:, :528])
    codes = f64(rows[:, :512].view(E4M3))
    scales = f64(rows[:, 512:528].copy().view(np.float32))
    return codes * np.repeat(scales, 128, axis=1)


def unpack_indexer_cache(k_cache: np.ndarray) -> np.ndarray:
    """[nb, bs, 132] uint8 pages (bs*128 e4m3 codes, then bs float32 scales) -> [nb*bs, 128]."""
    nb, bs, _ = k_cache.shape
    pages = np.ascontiguousarray(k_cache).reshape(nb, bs * 132)
    codes = f64(pages[:, :bs * 128].reshape(nb, bs, 128).view(E4M3))
    scales = f64(pages[:, bs * 128:].copy().view(np.float32).reshape(nb, bs, 1))
    return (codes * scales).reshape(nb * bs, 128)


def indexer_scores(q, weights, keys, block_table, visible_lens, block_size, q_scale=None,
                   token_request=None):
    """Per token t: {position: I[t, position]} over its visible positions
    (docs/design.md, section 4.1)."""
    q = f64(q)
    if q_scale is not None:
        q = q * f64(q_scale)[:, :, None]
    w = f64(weights)
    result = []
    for t in range(q.shape[0]):
        row = t if token_request is None else int(token_request[t])
        slots = request_slots(block_table[row], int(visible_lens[t]), block_size)
        dots = np.maximum(q[t] @ keys[slots].T, 0.0)  # [H_i, L]
        result.append((w[t] @ dots, slots))
    return result


def indexer_topk(scored, topk, kind="physical"):
    """The topk best positions (or slots) per token; ties to the smaller position; -1 padded."""
    out = np.full((len(scored), topk), -1, dtype=np.int32)
    for t, (scores, slots) in enumerate(scored):
        order = sorted(range(len(scores)), key=lambda p: (-scores[p], p))[:topk]
        out[t, :len(order)] = [slots[p] if kind == "physical" else p for p in order]
    return out
