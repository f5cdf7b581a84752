"""The pooled ("C4") indexer of GLM-5.3-Flash on numpy arrays (docs/operations.md,
"indexer_pool_store" and "The pooled indexer"): pool keys and page rows against this file's own
float64 reading, the state across calls, pooled top-k rows and out_lens, pooled logits, errors."""

import ml_dtypes
import numpy as np
import pytest
from helpers import bf16

import latte
import numpy_reference as ref

KPOOL = 4


def to_bf16(x):
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


def hadamard(x):
    """x @ H / sqrt(128), H the Sylvester Hadamard matrix (H[i, j] = (-1)^popcount(i & j))."""
    i = np.arange(128)
    signs = np.array([[(-1) ** bin(a & b).count("1") for b in i] for a in i], dtype=np.float64)
    return x @ signs / np.sqrt(128.0)


def pool_keys(k, gate, ape, rotate):
    """[P*KPOOL, 128] tokens -> [P, 128] pool keys: per-dimension softmax over the pool's slots."""
    logits = ref.f64(gate).reshape(-1, KPOOL, 128) + ref.f64(ape)[None]
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    keys = to_bf16((w * ref.f64(k).reshape(-1, KPOOL, 128)).sum(axis=1) / w.sum(axis=1))
    return to_bf16(hadamard(keys)) if rotate else keys


def geometry(rng, tokens, rows=4, blocks=6):
    bs = KPOOL * rows
    table = rng.permutation(blocks)[None, :(tokens + bs - 1) // bs].astype(np.int32)
    return table, np.zeros((blocks, rows, 132), np.uint8), np.zeros((1, KPOOL - 1, 2, 128), np.float32)


@pytest.mark.parametrize("scale_kind", ["amax", "pow2"])
@pytest.mark.parametrize("rotate", [False, True])
def test_pool_rows_are_the_pool_keys_quantized(rng, scale_kind, rotate):
    tokens = 30  # 7 complete pools and 2 tokens of the 8th
    k, gate = bf16(rng, tokens, 128), rng.standard_normal((tokens, 128)).astype(np.float32)
    ape = rng.standard_normal((KPOOL, 128)).astype(np.float32)
    table, cache, state = geometry(rng, tokens)
    latte.indexer_pool_store(k, gate, ape, np.arange(tokens, dtype=np.int32), table, cache, state,
                             kpool=KPOOL, scale_kind=scale_kind, hadamard=rotate,
                             token_request=np.zeros(tokens, np.int32), check_indices=True)
    keys = pool_keys(k[:28], gate[:28], ape, rotate)
    rows = cache.shape[1]
    for p, key in enumerate(keys):
        block, row = int(table[0, p * KPOOL // (KPOOL * rows)]), p % rows
        codes, scale = ref.quantize_group(key, scale_kind)
        page = cache[block].reshape(-1)
        np.testing.assert_array_equal(page[row * 128:(row + 1) * 128], codes)
        assert page[rows * 128 + 4 * row:rows * 128 + 4 * row + 4].view(np.float32)[0] == scale
    # The incomplete pool's tokens 28, 29 are in slots 0, 1; slot 2 holds token 26 (stored in order).
    np.testing.assert_array_equal(state[0, :, 0], ref.f64(k[[28, 29, 26]]))
    np.testing.assert_array_equal(state[0, :, 1], gate[[28, 29, 26]])


def test_prefill_then_decode_equals_one_call(rng):
    tokens = 23
    k, gate = bf16(rng, tokens, 128), bf16(rng, tokens, 128)
    ape = rng.standard_normal((KPOOL, 128)).astype(np.float32)
    table, whole, whole_state = geometry(rng, tokens)
    pos = np.arange(tokens, dtype=np.int32)
    req = np.zeros(tokens, np.int32)
    latte.indexer_pool_store(k, gate, ape, pos, table, whole, whole_state, kpool=KPOOL, token_request=req)
    cache, state = np.zeros_like(whole), np.zeros_like(whole_state)
    for lo, hi in [(0, 10)] + [(t, t + 1) for t in range(10, tokens)]:
        latte.indexer_pool_store(k[lo:hi], gate[lo:hi], ape, pos[lo:hi], table, cache, state, kpool=KPOOL,
                                 token_request=req[lo:hi])
    np.testing.assert_array_equal(cache, whole)
    np.testing.assert_array_equal(state, whole_state)


def test_pooled_topk_rows_out_lens_and_logits(rng):
    rows, blocks, heads = 4, 8, 2
    bs = KPOOL * rows
    cache = np.zeros((blocks, rows, 132), np.uint8)
    table = rng.permutation(blocks)[None].astype(np.int32).repeat(3, axis=0)
    # Keys written by the store from random tokens, all positions 0 .. 127.
    n = blocks * bs
    k, gate = bf16(rng, n, 128), bf16(rng, n, 128)
    ape = np.zeros((KPOOL, 128), np.float32)
    latte.indexer_pool_store(k, gate, ape, np.arange(n, dtype=np.int32), table, cache,
                             np.zeros((3, KPOOL - 1, 2, 128), np.float32), kpool=KPOOL,
                             token_request=np.zeros(n, np.int32))
    keys = ref.unpack_indexer_cache(cache)  # [blocks * rows, 128], by (block, row)
    q = bf16(rng, 3, heads, 128)
    weights = np.ones((3, heads), np.float32)
    visible = np.array([2, 37, 128], np.int32)
    pool_topk = 5
    indices, lens = latte.indexer_topk(q, weights, cache, table, visible, kind="logical", kpool=KPOOL,
                                       pool_topk=pool_topk, select_tail=True, return_lens=True,
                                       check_indices=True)
    assert indices.shape == (3, KPOOL * pool_topk + KPOOL - 1)
    logits = latte.indexer_logits(q, weights, cache, table, visible, kpool=KPOOL)
    assert logits.shape == (3, blocks * rows)
    for t in range(3):
        v = int(visible[t])
        pools = v // KPOOL
        key_rows = [int(table[t, p * KPOOL // bs]) * rows + p % rows for p in range(pools)]
        scores = np.maximum(ref.f64(q[t]) @ keys[key_rows].T, 0).sum(axis=0)
        np.testing.assert_allclose(logits[t, :pools], scores, rtol=1e-6)
        assert np.all(logits[t, pools:] == -np.inf)
        order = sorted(range(pools), key=lambda p: (-scores[p], p))[:pool_topk]
        want = [p * KPOOL + o for p in order for o in range(KPOOL)] + list(range(pools * KPOOL, v))
        assert lens[t] == len(want)
        np.testing.assert_array_equal(indices[t, :len(want)], want)
        assert np.all(indices[t, len(want):] == -1)
    # Physical: the same positions through the block table.
    slots = latte.indexer_topk(q, weights, cache, table, visible, kpool=KPOOL, pool_topk=pool_topk,
                               select_tail=True, indices=np.empty((3, 2176), np.int32))
    for t in range(3):
        pos = indices[t, :lens[t]]
        np.testing.assert_array_equal(slots[t, :lens[t]], table[t, pos // bs] * bs + pos % bs)
        assert np.all(slots[t, lens[t]:] == -1)


def test_pooled_errors_name_the_value_and_the_fix(rng):
    table, cache, state = geometry(rng, 8)
    k, gate = bf16(rng, 8, 128), bf16(rng, 8, 128)
    ape = np.zeros((KPOOL, 128), np.float32)
    pos = np.arange(8, dtype=np.int32)
    req = np.zeros(8, np.int32)
    with pytest.raises(latte.InvalidArgumentError, match="kpool is 1; expected 2..16"):
        latte.indexer_pool_store(k, gate, ape, pos, table, cache, state, kpool=1, token_request=req)
    with pytest.raises(latte.InvalidArgumentError, match=r"pool_state has 2 in dimension 1, not 3"):
        latte.indexer_pool_store(k, gate, ape, pos, table, cache, state[:, :2], kpool=KPOOL, token_request=req)
    q, w = bf16(rng, 1, 2, 128), np.ones((1, 2), np.float32)
    with pytest.raises(latte.InvalidArgumentError, match="fewer than the 2051 positions"):
        latte.indexer_topk(q, w, cache, table, np.array([8], np.int32), kpool=KPOOL, pool_topk=512,
                           select_tail=True, indices=np.empty((1, 2048), np.int32))
    with pytest.raises(latte.InvalidArgumentError, match="arguments of the pooled indexer, but kpool is 0"):
        latte.indexer_topk(q, w, cache, table, np.array([8], np.int32), 4, pool_topk=2)


@pytest.mark.parametrize("big", [2 ** 31, -2 ** 31 - 1, 2 ** 70])
def test_ints_beyond_a_c_int_are_latte_errors(rng, big):
    """kpool, pool_topk and rope_dim past a C int are refused by latte, naming the value (they
    once reached the extension and failed there with a TypeError; found by the soak)."""
    table, cache, state = geometry(rng, 8)
    k, gate = bf16(rng, 8, 128), bf16(rng, 8, 128)
    ape = np.zeros((KPOOL, 128), np.float32)
    pos, req = np.arange(8, dtype=np.int32), np.zeros(8, np.int32)
    q, w, vis = bf16(rng, 1, 2, 128), np.ones((1, 2), np.float32), np.array([8], np.int32)
    calls = {
        "indexer_pool_store kpool": lambda: latte.indexer_pool_store(k, gate, ape, pos, table, cache, state,
                                                                    kpool=big, token_request=req),
        "indexer_topk kpool": lambda: latte.indexer_topk(q, w, cache, table, vis, 8, kpool=big),
        "indexer_topk pool_topk": lambda: latte.indexer_topk(q, w, cache, table, vis, 8, kpool=KPOOL,
                                                             pool_topk=big),
        "indexer_logits kpool": lambda: latte.indexer_logits(q, w, cache, table, vis, kpool=big),
        "kv_store rope_dim": lambda: latte.kv_store(bf16(rng, 2, 512), None, np.zeros(2, np.int32),
                                                    np.zeros((2, 4, 512), ml_dtypes.bfloat16), rope_dim=big),
        "sparse_mla rope_dim": lambda: latte.sparse_mla(bf16(rng, 1, 2, 512), np.zeros((2, 4, 512), ml_dtypes.bfloat16),
                                                        np.zeros((1, 4), np.int32), 0.0625, rope_dim=big),
    }
    for what, call in calls.items():
        with pytest.raises(latte.InvalidArgumentError, match=f"{big} is out of range"):
            call()
    with pytest.raises(latte.ArgumentTypeError, match="kpool must be an int"):
        latte.indexer_logits(q, w, cache, table, vis, kpool="4")
