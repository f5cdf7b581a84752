"""sparse_mla and mla_decode on numpy arrays against the float64 definitions (docs/design.md,
sections 2 and 3)."""

import numpy as np
import pytest
from helpers import BF16, bf16, distinct_slots, paged_requests

import latte
import numpy_reference as ref

SCALE = 0.0625  # GLM-5
# cpu.reference computes in float64 and rounds to bf16 once: within 2^-9 relative.
BF16_RTOL = 4e-3


def fp8_cache(rng, num_blocks, block_size):
    """An fp8_ds_mla cache written by latte.kv_store from random tokens."""
    cache = np.zeros((num_blocks, block_size, 656), dtype=np.uint8)
    n = num_blocks * block_size
    latent, rope = bf16(rng, n, 512), bf16(rng, n, 64)
    latte.kv_store(latent, rope, np.arange(n, dtype=np.int32), cache)
    return cache


@pytest.mark.parametrize("kv_format", ["bf16", "fp8_ds_mla"])
def test_sparse_mla_matches_float64(rng, kv_format):
    t, h, nb, bs, topk = 5, 8, 4, 16, 24
    q = bf16(rng, t, h, 576, scale=0.5)
    cache = bf16(rng, nb, bs, 576) if kv_format == "bf16" else fp8_cache(rng, nb, bs)
    indices = distinct_slots(rng, t, topk, nb * bs, empty=3)
    out, lse = latte.sparse_mla(q, cache, indices, SCALE, kv_format=kv_format, return_lse=True)
    want_out, want_lse = ref.sparse_mla(q, ref.unpack_mla_cache(cache), indices, SCALE)
    assert out.dtype == BF16 and out.shape == (t, h, 512)
    assert lse.dtype == np.float32 and lse.shape == (t, h)
    np.testing.assert_allclose(ref.f64(out), want_out, rtol=BF16_RTOL, atol=1e-6)
    np.testing.assert_allclose(lse[:-1], want_lse[:-1], rtol=1e-5, atol=1e-5)
    # The last row has no valid index: out = 0 and lse = -inf, never NaN.
    assert np.all(ref.f64(out[-1]) == 0.0) and np.all(np.isneginf(lse[-1]))


def test_sparse_mla_returns_out_only_by_default(rng):
    q, cache = bf16(rng, 2, 4, 576), bf16(rng, 2, 8, 576)
    out = latte.sparse_mla(q, cache, distinct_slots(rng, 2, 4, 16), SCALE)
    assert isinstance(out, np.ndarray) and out.shape == (2, 4, 512)


@pytest.mark.parametrize("s_q", [1, 3])
def test_mla_decode_matches_float64(rng, s_q):
    h, bs, nb = 4, 16, 12
    lengths = [37, 5, 16]
    q = bf16(rng, len(lengths), s_q, h, 576, scale=0.5)
    cache = bf16(rng, nb, bs, 576)
    table = paged_requests(rng, lengths, bs, nb)
    seq_lens = np.array(lengths, dtype=np.int32)
    out, lse = latte.mla_decode(q, cache, table, seq_lens, SCALE, return_lse=True)
    want_out, want_lse = ref.mla_decode(q, ref.unpack_mla_cache(cache), table, seq_lens, bs, SCALE)
    np.testing.assert_allclose(ref.f64(out), want_out, rtol=BF16_RTOL, atol=1e-6)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)


def test_sparse_equals_dense_when_topk_covers_the_context(rng):
    # The equality oracle (docs/design.md, section 2.2), through the Python API: the same tokens
    # either way.
    h, bs, nb, length = 4, 16, 6, 40
    cache = bf16(rng, nb, bs, 576)
    table = paged_requests(rng, [length], bs, nb)
    q = bf16(rng, 1, 1, h, 576)
    dense = latte.mla_decode(q, cache, table, np.array([length], dtype=np.int32), SCALE)
    positions = np.arange(64, dtype=np.int32)[None, :]
    positions[0, length:] = -1
    slots = latte.logical_to_slots(positions, table, bs)
    sparse = latte.sparse_mla(q[:, 0], cache, slots, SCALE)
    np.testing.assert_allclose(ref.f64(sparse), ref.f64(dense[:, 0]), rtol=BF16_RTOL, atol=1e-6)


def test_logical_to_slots_matches_block_table(rng):
    bs, nb = 8, 10
    table = paged_requests(rng, [20, 9], bs, nb)
    positions = np.array([[0, 7, 8, 19, -1], [8, 0, -1, -1, 3]], dtype=np.int32)
    slots = latte.logical_to_slots(positions, table, bs)
    want = np.where(positions < 0, -1,
                    table[np.arange(2)[:, None], np.maximum(positions, 0) // bs] * bs + positions % bs)
    np.testing.assert_array_equal(slots, want)
    # token_request: both rows read request 1.
    slots = latte.logical_to_slots(positions, table, bs, token_request=np.array([1, 1], np.int32))
    want_row0 = [table[1, p // bs] * bs + p % bs if p >= 0 else -1 for p in positions[0]]
    np.testing.assert_array_equal(slots[0], want_row0)


def test_forced_backend_runs(rng):
    q, cache = bf16(rng, 1, 2, 576), bf16(rng, 1, 4, 576)
    out = latte.sparse_mla(q, cache, np.array([[0, 1, 2, 3]], np.int32), SCALE,
                           backend="cpu.reference")
    want, _ = ref.sparse_mla(q, ref.unpack_mla_cache(cache), [[0, 1, 2, 3]], SCALE)
    np.testing.assert_allclose(ref.f64(out), want, rtol=BF16_RTOL, atol=1e-6)


@pytest.mark.parametrize("kv_format", ["bf16", "fp8_ds_mla"])
def test_sparse_mla_over_logical_positions(rng, kv_format):
    # indices as logical positions + block_table: the same as logical_to_slots then sparse_mla,
    # with the engine's persistent buffers (more rows than q) for indices, token_request, slots.
    t, h, nb, bs, topk, rows = 3, 4, 12, 8, 10, 7
    cache = bf16(rng, nb, bs, 576) if kv_format == "bf16" else fp8_cache(rng, nb, bs)
    table = paged_requests(rng, [30, 17], bs, nb)
    token_request = np.array([1, 0, 1, 0, 0, 0, 0], np.int32)
    lengths = [30, 17]
    positions = np.full((rows, topk), -7, np.int32)  # rows past T: never read
    for r in range(t):
        n = lengths[token_request[r]]
        positions[r] = np.concatenate([rng.permutation(n)[:topk - 2], [-1, -1]])
    q = bf16(rng, t, h, 576, scale=0.5)
    slots_buffer = np.full((rows, topk), -9, np.int32)
    out = latte.sparse_mla(q, cache, positions, SCALE, block_table=table,
                           token_request=token_request, slots=slots_buffer)
    slots = latte.logical_to_slots(positions[:t], table, bs, token_request=token_request[:t])
    np.testing.assert_array_equal(slots_buffer[:t], slots)
    assert (slots_buffer[t:] == -9).all()  # only the call's rows written
    np.testing.assert_array_equal(ref.f64(out), ref.f64(latte.sparse_mla(q, cache, slots, SCALE)))
    # Without slots=, latte allocates them; without token_request, token t reads row t.
    out2 = latte.sparse_mla(q[:2], cache, positions[:2], SCALE, block_table=table)
    want2 = latte.sparse_mla(q[:2], cache, latte.logical_to_slots(positions[:2], table, bs), SCALE)
    np.testing.assert_array_equal(ref.f64(out2), ref.f64(want2))


def test_sparse_mla_logical_arguments_need_block_table(rng):
    q, cache = bf16(rng, 1, 2, 576), bf16(rng, 2, 4, 576)
    idx = np.array([[0, 1]], np.int32)
    with pytest.raises(latte.InvalidArgumentError, match="go with block_table"):
        latte.sparse_mla(q, cache, idx, SCALE, slots=np.zeros((1, 2), np.int32))
    with pytest.raises(latte.DTypeError, match="block_table has dtype int64"):
        latte.sparse_mla(q, cache, idx, SCALE, block_table=np.zeros((1, 2), np.int64))
    with pytest.raises(latte.InvalidArgumentError, match="logical_to_slots: block_table"):
        # A block table of the wrong rank is reported by logical_to_slots' validation.
        latte.sparse_mla(q, cache, idx, SCALE, block_table=np.zeros((2,), np.int32))


@pytest.mark.parametrize("kv_format", ["bf16", "fp8_ds_mla"])
def test_sparse_mla_split_query_equals_joined(rng, kv_format):
    # q [T, H, 512] + q_rope [T, H, 64] (a strided view of the joined query and a tensor of its
    # own) gives the joined query's output and lse exactly.
    t, h, nb, bs, topk = 4, 3, 4, 16, 20
    cache = bf16(rng, nb, bs, 576) if kv_format == "bf16" else fp8_cache(rng, nb, bs)
    q = bf16(rng, t, h, 576, scale=0.5)
    indices = distinct_slots(rng, t, topk, nb * bs, empty=2)
    out, lse = latte.sparse_mla(q, cache, indices, SCALE, return_lse=True)
    rope = np.ascontiguousarray(q[..., 512:])
    out2, lse2 = latte.sparse_mla(q[..., :512], cache, indices, SCALE, q_rope=rope,
                                  return_lse=True)
    np.testing.assert_array_equal(ref.f64(out2), ref.f64(out))
    np.testing.assert_array_equal(lse2, lse)
    with pytest.raises(latte.InvalidArgumentError, match="q has 576 in dimension 2, not 512"):
        latte.sparse_mla(q, cache, indices, SCALE, q_rope=rope)
    with pytest.raises(latte.InvalidArgumentError, match="q_rope has 32 in dimension 2, not 64"):
        latte.sparse_mla(q[..., :512], cache, indices, SCALE, q_rope=rope[..., :32])
