"""Edges of the op arguments on numpy arrays: calls with no tokens (T = 0) for every op, outputs
that share memory with an input (refused, naming both), and topk checked before the result is
allocated for it."""

import ml_dtypes
import numpy as np
import pytest
from helpers import BF16, bf16

import latte
from latte import ops
from latte.errors import ArgumentTypeError, InvalidArgumentError

SCALE = 0.0625
E4M3 = ml_dtypes.float8_e4m3fn


def no_tokens(*shape, dtype=BF16):
    # numpy 2 gives an array with no elements zero strides.
    return np.zeros(shape, dtype)


# ---- T = 0 ----------------------------------------------------------------------------------

@pytest.mark.parametrize("lse", [False, True])
def test_sparse_mla_with_no_tokens(lse):
    cache = np.ones((4, 16, 576), BF16)
    got = latte.sparse_mla(no_tokens(0, 8, 576), cache, no_tokens(0, 8, dtype=np.int32), SCALE,
                           return_lse=lse)
    out, lse_out = got if lse else (got, None)
    assert out.shape == (0, 8, 512) and out.dtype == BF16
    if lse:
        assert lse_out.shape == (0, 8) and lse_out.dtype == np.float32


def test_sparse_mla_with_no_tokens_split_query_and_logical_positions():
    cache = np.ones((4, 16, 576), BF16)
    out = latte.sparse_mla(no_tokens(0, 8, 512), cache, no_tokens(0, 8, dtype=np.int32), SCALE,
                           q_rope=no_tokens(0, 8, 64), block_table=np.zeros((1, 4), np.int32))
    assert out.shape == (0, 8, 512)


@pytest.mark.parametrize("cache_shape, cache_dtype", [((4, 16, 576), BF16),
                                                      ((4, 16, 656), np.uint8)])
def test_mla_decode_with_no_requests(cache_shape, cache_dtype):
    out, lse = latte.mla_decode(no_tokens(0, 2, 8, 576), np.zeros(cache_shape, cache_dtype),
                                no_tokens(0, 4, dtype=np.int32), no_tokens(0, dtype=np.int32),
                                SCALE, return_lse=True)
    assert out.shape == (0, 2, 8, 512) and out.dtype == BF16
    assert lse.shape == (0, 2, 8) and lse.dtype == np.float32


def indexer_inputs(q_dtype):
    q = no_tokens(0, 4, 128, dtype=q_dtype)
    q_scale = no_tokens(0, 4, dtype=np.float32) if q_dtype == E4M3 else None
    return dict(q=q, weights=no_tokens(0, 4, dtype=np.float32),
                k_cache=np.zeros((4, 16, 132), np.uint8),
                block_table=no_tokens(0, 2, dtype=np.int32),
                visible_lens=no_tokens(0, dtype=np.int32), q_scale=q_scale)


@pytest.mark.parametrize("q_dtype", [BF16, E4M3])
def test_indexer_ops_with_no_tokens(q_dtype):
    indices = latte.indexer_topk(**indexer_inputs(q_dtype), topk=8, kind="logical")
    assert indices.shape == (0, 8) and indices.dtype == np.int32
    logits = latte.indexer_logits(**indexer_inputs(q_dtype))
    assert logits.shape == (0, 2 * 16) and logits.dtype == np.float32


@pytest.mark.parametrize("cache_shape, cache_dtype", [((2, 4, 576), BF16),
                                                      ((2, 4, 656), np.uint8)])
def test_kv_store_with_no_tokens_leaves_the_cache(cache_shape, cache_dtype):
    cache = np.full(cache_shape, 3, cache_dtype)
    latte.kv_store(no_tokens(0, 512), no_tokens(0, 64), no_tokens(0, dtype=np.int32), cache)
    assert np.all(cache.astype(np.float64) == 3)


def test_indexer_k_store_with_no_tokens_leaves_the_cache():
    k_cache = np.full((2, 4, 132), 5, np.uint8)
    latte.indexer_k_store(no_tokens(0, 128), no_tokens(0, dtype=np.int32), k_cache)
    assert np.all(k_cache == 5)


def test_logical_to_slots_with_no_tokens():
    slots = latte.logical_to_slots(no_tokens(0, 8, dtype=np.int32), np.zeros((1, 2), np.int32), 16)
    assert slots.shape == (0, 8) and slots.dtype == np.int32


# ---- outputs sharing memory with inputs ---------------------------------------------------

def refused(fragments, call):
    with pytest.raises(InvalidArgumentError) as e:
        call()
    for fragment in fragments:
        assert fragment in str(e.value)


def test_sparse_mla_out_inside_the_cache_is_refused(rng):
    cache = bf16(rng, 4, 16, 576)
    before = cache.copy()
    q = bf16(rng, 2, 8, 576)
    indices = np.arange(16, dtype=np.int32).reshape(2, 8)
    out = cache.reshape(-1)[:2 * 8 * 512].reshape(2, 8, 512)  # a view of kv_cache
    refused(["sparse_mla: out shares memory with kv_cache",
             "Pass as out a tensor that does not share memory with kv_cache."],
            lambda: latte.sparse_mla(q, cache, indices, SCALE, out=out))
    np.testing.assert_array_equal(cache.view(np.uint16), before.view(np.uint16))
    # The same call into memory of its own runs.
    assert latte.sparse_mla(q, cache, indices, SCALE).shape == (2, 8, 512)


def test_mla_decode_out_over_its_query_is_refused(rng):
    q = bf16(rng, 2, 1, 8, 576)
    refused(["mla_decode: out shares memory with q"],
            lambda: latte.mla_decode(q, bf16(rng, 4, 16, 576), np.array([[0], [1]], np.int32),
                                     np.array([3, 5], np.int32), SCALE, out=q[..., :512]))


def test_sparse_mla_out_and_lse_in_one_buffer_are_refused(rng):
    buffer = np.zeros(2 * 8 * 512 * 2, np.uint8)
    out = buffer.view(BF16).reshape(2, 8, 512)
    lse = buffer[:2 * 8 * 4].view(np.float32).reshape(2, 8)
    refused(["sparse_mla: out shares memory with lse"],
            lambda: latte.sparse_mla(bf16(rng, 2, 8, 576), bf16(rng, 1, 16, 576),
                                     np.zeros((2, 4), np.int32), SCALE, out=out, lse=lse))


def test_indexer_outputs_over_their_inputs_are_refused(rng):
    t, heads = 2, 4
    inputs = dict(q=bf16(rng, t, heads, 128), weights=np.ones((t, heads), np.float32),
                  k_cache=np.zeros((4, 16, 132), np.uint8),
                  block_table=np.zeros((t, 3), np.int32),
                  visible_lens=np.array([5, 9], np.int32))
    refused(["indexer_topk: indices shares memory with block_table",
             "Pass as indices a tensor that does not share memory with block_table."],
            lambda: latte.indexer_topk(**inputs, indices=inputs["block_table"][:, :2]))
    refused(["indexer_logits: logits shares memory with weights"],
            lambda: latte.indexer_logits(**inputs, logits=inputs["weights"]))


def test_cache_writes_from_the_cache_itself_are_refused(rng):
    cache = bf16(rng, 2, 4, 576)
    rows = cache.reshape(-1, 576)
    refused(["kv_store: kv_cache shares memory with latent",
             "Pass as kv_cache a tensor that does not share memory with latent."],
            lambda: latte.kv_store(rows[:2, :512], rows[:2, 512:], np.array([6, 7], np.int32),
                                   cache))
    k_cache = np.zeros((2, 4, 132), np.uint8)
    k = k_cache.reshape(-1)[:2 * 256].view(BF16).reshape(2, 128)
    refused(["indexer_k_store: k_cache shares memory with k"],
            lambda: latte.indexer_k_store(k, np.array([1, 2], np.int32), k_cache))


def test_sparse_mla_over_positions_keeps_its_two_steps_apart(rng):
    # logical_to_slots writes slots, then attention reads them and writes out: slots over q or
    # the cache, or out over the block table, would corrupt what the other step reads.
    cache = bf16(rng, 2, 16, 576)
    before = cache.copy()
    q = bf16(rng, 2, 8, 576)
    positions = np.array([[0, 3, -1, 7], [1, 2, 3, 4]], np.int32)
    table = np.array([[1, 0], [0, 1]], np.int32)
    slots_in_cache = cache.reshape(-1)[:2 * 8].view(np.int32).reshape(2, 4)
    refused(["sparse_mla: slots shares memory with kv_cache",
             "Pass as slots a tensor that does not share memory with kv_cache."],
            lambda: latte.sparse_mla(q, cache, positions, SCALE, block_table=table,
                                     slots=slots_in_cache))
    np.testing.assert_array_equal(cache.view(np.uint16), before.view(np.uint16))
    table_rows = np.zeros(2 * 8 * 512, BF16)
    refused(["sparse_mla: out shares memory with block_table"],
            lambda: latte.sparse_mla(q, cache, positions, SCALE,
                                     block_table=table_rows[:8].view(np.int32).reshape(2, 2),
                                     out=table_rows.reshape(2, 8, 512)))
    want = latte.sparse_mla(q, cache, latte.logical_to_slots(positions, table, 16), SCALE)
    got = latte.sparse_mla(q, cache, positions, SCALE, block_table=table)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_logical_to_slots_in_place_is_refused():
    positions = np.array([[0, 5, -1]], np.int32)
    refused(["logical_to_slots: slots shares memory with positions"],
            lambda: latte.logical_to_slots(positions, np.array([[1, 0]], np.int32), 4,
                                           slots=positions))


# ---- topk sizes the result: checked before allocating it ----------------------------------

@pytest.fixture
def no_allocation(monkeypatch):
    def allocate(*args, **kwargs):
        raise AssertionError(f"an output was allocated: {args}")
    monkeypatch.setattr(ops, "empty_like_input", allocate)


def small_indexer_call(topk, **kwargs):
    return latte.indexer_topk(np.zeros((2, 4, 128), BF16), np.ones((2, 4), np.float32),
                              np.zeros((4, 16, 132), np.uint8), np.zeros((2, 1), np.int32),
                              np.array([3, 16], np.int32), topk, **kwargs)


@pytest.mark.parametrize("topk", [-3, 0, 65537, 2 ** 31, 2 ** 70])
def test_indexer_topk_refuses_a_bad_topk_before_allocating(no_allocation, topk):
    refused([f"indexer_topk: topk is {topk} ", "topk must be 1..65536."],
            lambda: small_indexer_call(topk))


def test_indexer_topk_refuses_a_topk_that_is_not_an_int(no_allocation):
    with pytest.raises(ArgumentTypeError, match="topk must be an int .* got a float"):
        small_indexer_call(8.5)


def test_indexer_topk_takes_numpy_integers():
    indices = small_indexer_call(np.int64(4), kind="logical")
    assert indices.shape == (2, 4)
    assert sorted(indices[0]) == [-1, 0, 1, 2]
