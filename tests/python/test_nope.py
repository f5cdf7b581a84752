"""MLA without rope (rope_dim=0, GLM-5.3-Flash) and topk_lens through the Python ops, on numpy
arrays, against numpy_reference; and the glm-5.3-flash model as latte.model_spec reads it."""

import numpy as np
import pytest
from helpers import bf16, distinct_slots

import latte
import numpy_reference as ref

SCALE = 0.0625  # GLM-5.3-Flash: 256 ** -0.5
BF16_RTOL = 4e-3


def nope_fp8_cache(rng, num_blocks, block_size, row_bytes):
    """Rows without rope, byte by byte: e4m3 codes (no NaN code) and float32 group scales that
    are not powers of two; a 656-byte row's reserved tail holds 0xFF, never to be read."""
    cache = np.full((num_blocks, block_size, row_bytes), 0xFF, dtype=np.uint8)
    n = num_blocks * block_size
    magnitudes = rng.integers(0, 0x7F, size=(n, 512), dtype=np.uint8)
    signs = rng.integers(0, 2, size=(n, 512), dtype=np.uint8) << 7
    flat = cache.reshape(n, row_bytes)
    flat[:, :512] = magnitudes | signs
    flat[:, 512:528] = rng.uniform(7e-4, 1.3e-2, size=(n, 4)).astype(np.float32).view(np.uint8)
    return cache


@pytest.mark.parametrize("layout", ["bf16", "fp8_528", "fp8_656"])
def test_sparse_mla_without_rope_matches_float64(rng, layout):
    t, h, nb, bs, topk = 5, 6, 4, 16, 24
    q = bf16(rng, t, h, 512, scale=0.5)
    cache = (bf16(rng, nb, bs, 512) if layout == "bf16"
             else nope_fp8_cache(rng, nb, bs, 528 if layout == "fp8_528" else 656))
    indices = distinct_slots(rng, t, topk, nb * bs, empty=3)
    out, lse = latte.sparse_mla(q, cache, indices, SCALE, rope_dim=0, return_lse=True)
    want_out, want_lse = ref.sparse_mla(q, ref.unpack_nope_cache(cache), indices, SCALE)
    assert out.shape == (t, h, 512)
    np.testing.assert_allclose(ref.f64(out), want_out, rtol=BF16_RTOL, atol=1e-6)
    np.testing.assert_allclose(lse[:-1], want_lse[:-1], rtol=1e-5, atol=1e-5)
    assert np.all(ref.f64(out[-1]) == 0.0) and np.all(np.isneginf(lse[-1]))


def test_topk_lens_use_the_first_columns_of_each_row(rng):
    # GLM-5.3-Flash's index rows: 2176 wide, at most 2051 columns used; the rest ignored.
    t, h, nb, bs, topk = 3, 2, 40, 64, 2176
    q = bf16(rng, t, h, 512, scale=0.25)
    cache = nope_fp8_cache(rng, nb, bs, 656)
    indices = rng.integers(0, nb * bs, size=(t, topk), dtype=np.int32)
    lens = np.array([2051, 0, 17], dtype=np.int32)
    for r, n in enumerate(lens):
        indices[r, n:] = np.where(np.arange(topk - n) % 2 == 0, 1 << 30, indices[r, n:])  # ignored
    out, lse = latte.sparse_mla(q, cache, indices, SCALE, rope_dim=0, topk_lens=lens,
                                return_lse=True, check_indices=True)
    want_out, want_lse = ref.sparse_mla(q, ref.unpack_nope_cache(cache), indices, SCALE, lens)
    np.testing.assert_allclose(ref.f64(out), want_out, rtol=BF16_RTOL, atol=1e-6)
    np.testing.assert_allclose(lse[[0, 2]], want_lse[[0, 2]], rtol=1e-5, atol=1e-5)
    assert np.all(np.isneginf(lse[1]))
    with pytest.raises(latte.InvalidArgumentError, match=r"topk_lens\[1\] = 2177 is out of range"):
        latte.sparse_mla(q, cache, indices, SCALE, rope_dim=0, check_indices=True,
                         topk_lens=np.array([1, 2177, 3], dtype=np.int32))


def test_a_call_without_rope_equals_the_rope_call_with_zero_rope(rng):
    t, h, nb, bs = 3, 4, 2, 16
    q = bf16(rng, t, h, 512)
    cache = bf16(rng, nb, bs, 512)
    indices = distinct_slots(rng, t, 9, nb * bs, empty=2)
    lens = np.array([9, 4, 0], dtype=np.int32)
    out, lse = latte.sparse_mla(q, cache, indices, SCALE, rope_dim=0, topk_lens=lens, return_lse=True)
    q576 = np.concatenate([q, np.zeros((t, h, 64), q.dtype)], axis=-1)
    cache576 = np.concatenate([cache, np.zeros((nb, bs, 64), cache.dtype)], axis=-1)
    out2, lse2 = latte.sparse_mla(q576, cache576, indices, SCALE, topk_lens=lens, return_lse=True)
    np.testing.assert_array_equal(ref.f64(out), ref.f64(out2))
    np.testing.assert_array_equal(lse, lse2)


@pytest.mark.parametrize("row_bytes", [528, 656])
def test_kv_store_without_rope_writes_528_bytes(rng, row_bytes):
    n, nb, bs = 6, 2, 4
    latent = bf16(rng, n, 512)
    slots = np.array([0, 3, -1, 5, 6, 1], dtype=np.int32)
    cache = np.full((nb, bs, row_bytes), 0x5A, dtype=np.uint8)
    latte.kv_store(latent, None, slots, cache, rope_dim=0)
    flat = cache.reshape(-1, row_bytes)
    for t, s in enumerate(slots):
        if s >= 0:
            want = ref.pack_fp8_ds_mla(latent[t], np.zeros(64))[:528]
            np.testing.assert_array_equal(flat[s, :528], want)
    assert np.all(flat[:, 528:] == 0x5A)  # the reserved tail of 656-byte rows is never written
    written = set(int(s) for s in slots if s >= 0)
    for s in set(range(nb * bs)) - written:
        assert np.all(flat[s] == 0x5A)
    bf16_cache = np.zeros((nb, bs, 512), dtype=latent.dtype)
    latte.kv_store(latent, None, slots, bf16_cache, rope_dim=0)
    np.testing.assert_array_equal(bf16_cache.reshape(-1, 512)[slots[0]], latent[0])


def test_rope_dim_errors_name_the_fix(rng):
    q, cache = bf16(rng, 2, 2, 512), bf16(rng, 2, 4, 512)
    idx = np.array([[0, 1], [2, -1]], np.int32)
    with pytest.raises(latte.InvalidArgumentError, match="rope_dim is 32; expected 64"):
        latte.sparse_mla(q, cache, idx, SCALE, rope_dim=32)
    with pytest.raises(latte.InvalidArgumentError, match="q_rope is given but rope_dim is 0"):
        latte.sparse_mla(q, cache, idx, SCALE, rope_dim=0, q_rope=bf16(rng, 2, 2, 64))
    with pytest.raises(latte.InvalidArgumentError, match="not 576 .rope_dim is 64 and q_rope is absent"):
        latte.sparse_mla(q, bf16(rng, 2, 4, 576), idx, SCALE)
    with pytest.raises(latte.InvalidArgumentError, match="a row without rope, but rope_dim is 64"):
        latte.sparse_mla(bf16(rng, 2, 2, 576), cache, idx, SCALE)
    with pytest.raises(latte.ArgumentTypeError, match="rope_dim must be an int"):
        latte.sparse_mla(q, cache, idx, SCALE, rope_dim="0")
    with pytest.raises(latte.InvalidArgumentError, match="rope is given but rope_dim is 0"):
        latte.kv_store(bf16(rng, 2, 512), bf16(rng, 2, 64), np.array([0, 1], np.int32),
                       np.zeros((2, 4, 528), np.uint8), rope_dim=0)
    with pytest.raises(latte.InvalidArgumentError, match="kv_store: rope is absent"):
        latte.kv_store(bf16(rng, 2, 512), None, np.array([0, 1], np.int32),
                       np.zeros((2, 4, 656), np.uint8))


def test_glm53_flash_model_spec():
    m = latte.model_spec("glm-5.3-flash")
    assert m["model_type"] == "glm5_next" and m["nope"] and m["rope_dim"] == 0
    assert m["softmax_scale"] == 0.0625
    assert m["indexer"]["kpool"] == 4 and m["indexer"]["attended_tokens"] == 2051
    assert m["mla_layers"] == list(range(3, 45, 4)) and m["num_layers"] == 45 and m["mtp_layers"] == 1
    assert m["layer_ops"] == ["kv_store", "indexer_pool_store", "indexer_topk", "sparse_mla"]
    assert "its other 34 layers are linear attention, which is not latte's" in m["coverage"]
    assert latte.model_spec("glm-5")["coverage"] == ""
    s = latte.select("glm-5.3-flash")
    assert s.backend == "cpu.reference" and "d=512 (no rope)" in s.spec
    # The pooled indexer: cpu.reference on the CPU; the spec names kpool.
    for op in ("indexer_topk", "indexer_pool_store", "indexer_logits"):
        p = latte.select("glm-5.3-flash", op=op)
        assert p.backend == "cpu.reference" and "kpool=4" in p.spec
    with pytest.raises(latte.InvalidArgumentError, match="indexer_pool_store"):
        latte.select("glm-5.3-flash", op="indexer_k_store")
