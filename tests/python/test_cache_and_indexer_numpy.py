"""kv_store / indexer_k_store round trips (byte layouts of docs/design.md, section 6) and the DSA
indexer (section 4) on numpy arrays, against numpy_reference."""

import ml_dtypes
import numpy as np
import pytest
from helpers import bf16, paged_requests

import latte
import numpy_reference as ref


def test_kv_store_bf16_writes_each_slot_and_skips_minus_one(rng):
    nb, bs = 3, 8
    cache = np.full((nb, bs, 576), 7.0, dtype=ml_dtypes.bfloat16)
    latent, rope = bf16(rng, 4, 512), bf16(rng, 4, 64)
    slots = np.array([5, -1, 17, 0], dtype=np.int32)
    latte.kv_store(latent, rope, slots, cache, kv_format="bf16")
    flat = cache.reshape(-1, 576)
    for t, s in enumerate(slots):
        if s >= 0:
            np.testing.assert_array_equal(flat[s], np.concatenate([latent[t], rope[t]]))
    untouched = np.setdiff1d(np.arange(nb * bs), slots[slots >= 0])
    assert np.all(ref.f64(flat[untouched]) == 7.0)


@pytest.mark.parametrize("scale_kind", ["amax", "pow2"])
def test_kv_store_fp8_ds_mla_bytes_match_the_layout(rng, scale_kind):
    nb, bs = 2, 4
    cache = np.zeros((nb, bs, 656), dtype=np.uint8)
    latent, rope = bf16(rng, 3, 512, scale=3.0), bf16(rng, 3, 64)
    latent[1, 128:256] = 0  # an all-zero group: scale 1
    slots = np.array([6, 1, 3], dtype=np.int32)
    latte.kv_store(latent, rope, slots, cache, scale_kind=scale_kind)
    flat = cache.reshape(-1, 656)
    for t, s in enumerate(slots):
        want = ref.pack_fp8_ds_mla(ref.f64(latent[t]), ref.f64(rope[t]), scale_kind)
        np.testing.assert_array_equal(flat[s], want)
    # Decoding gives the inputs back within e4m3's precision (3 mantissa bits).
    decoded = ref.unpack_fp8_ds_mla(flat[slots[0]])
    np.testing.assert_allclose(decoded[:512], ref.f64(latent[0]), rtol=2 ** -3, atol=3.0 / 448)
    np.testing.assert_array_equal(decoded[512:], ref.f64(rope[0]))


def test_indexer_k_store_pages_match_the_layout(rng):
    nb, bs = 3, 8
    k_cache = np.zeros((nb, bs, 132), dtype=np.uint8)
    k = bf16(rng, 5, 128)
    slots = np.array([0, 9, -1, 23, 12], dtype=np.int32)
    latte.indexer_k_store(k, slots, k_cache)
    pages = k_cache.reshape(nb, bs * 132)
    for t, s in enumerate(slots):
        if s < 0:
            continue
        block, offset = divmod(int(s), bs)
        codes, scale = ref.quantize_group(ref.f64(k[t]))
        np.testing.assert_array_equal(pages[block, offset * 128:(offset + 1) * 128], codes)
        got_scale = pages[block, bs * 128 + 4 * offset:bs * 128 + 4 * offset + 4].view(np.float32)
        assert got_scale[0] == scale
    assert not pages[0, 2 * 128:3 * 128].any()  # slot 2 (token -1) untouched


def indexer_setup(rng, lengths, bs=16, heads=4):
    nb = max(-(-n // bs) for n in lengths) * len(lengths) + 2
    table = paged_requests(rng, lengths, bs, nb)
    k_cache = np.zeros((nb, bs, 132), dtype=np.uint8)
    slots = np.concatenate([ref.request_slots(table[b], n, bs) for b, n in enumerate(lengths)])
    latte.indexer_k_store(bf16(rng, len(slots), 128), slots.astype(np.int32), k_cache)
    weights = rng.standard_normal((len(lengths), heads)).astype(np.float32)
    return table, k_cache, weights, np.array(lengths, dtype=np.int32), bs


@pytest.mark.parametrize("q_dtype", ["bf16", "e4m3"])
@pytest.mark.parametrize("kind", ["physical", "logical"])
def test_indexer_topk_matches_float64(rng, q_dtype, kind):
    table, k_cache, weights, lens, bs = indexer_setup(rng, [50, 7, 33])
    heads, topk = weights.shape[1], 16
    q_scale = None
    if q_dtype == "bf16":
        q = bf16(rng, 3, heads, 128)
    else:
        q = rng.standard_normal((3, heads, 128)).astype(ml_dtypes.float8_e4m3fn)
        q_scale = rng.uniform(0.5, 2.0, (3, heads)).astype(np.float32)
    indices = latte.indexer_topk(q, weights, k_cache, table, lens, topk, q_scale=q_scale, kind=kind)
    scored = ref.indexer_scores(q, weights, ref.unpack_indexer_cache(k_cache), table, lens, bs,
                                q_scale=q_scale)
    assert indices.dtype == np.int32 and indices.shape == (3, topk)
    np.testing.assert_array_equal(indices, ref.indexer_topk(scored, topk, kind))
    assert np.all(indices[1, 7:] == -1)  # 7 visible tokens: padded with -1


def test_indexer_logits_matches_float64(rng):
    table, k_cache, weights, lens, bs = indexer_setup(rng, [20, 41])
    q = bf16(rng, 2, weights.shape[1], 128)
    logits = latte.indexer_logits(q, weights, k_cache, table, lens)
    assert logits.shape == (2, table.shape[1] * bs) and logits.dtype == np.float32
    scored = ref.indexer_scores(q, weights, ref.unpack_indexer_cache(k_cache), table, lens, bs)
    for t, (scores, _) in enumerate(scored):
        np.testing.assert_allclose(logits[t, :lens[t]], scores, rtol=1e-5, atol=1e-5)
        assert np.all(np.isneginf(logits[t, lens[t]:]))


def test_indexer_token_request_maps_tokens_to_requests(rng):
    # Two tokens of request 0 (positions 0..9 and 0..10), one of request 1.
    table, k_cache, weights, _, bs = indexer_setup(rng, [11, 30])
    weights = np.concatenate([weights, weights[:1]])
    lens = np.array([10, 30, 11], dtype=np.int32)
    token_request = np.array([0, 1, 0], dtype=np.int32)
    q = bf16(rng, 3, weights.shape[1], 128)
    got = latte.indexer_topk(q, weights, k_cache, table, lens, 8, token_request=token_request)
    scored = ref.indexer_scores(q, weights, ref.unpack_indexer_cache(k_cache), table, lens, bs,
                                token_request=token_request)
    np.testing.assert_array_equal(got, ref.indexer_topk(scored, 8))
