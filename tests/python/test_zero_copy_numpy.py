"""No copies: latte reads and writes the caller's numpy memory itself, strides included."""

import ml_dtypes
import numpy as np
import pytest
from helpers import bf16, distinct_slots, paged_requests

import latte
import numpy_reference as ref
from latte import _latte, _tensors

SCALE = 0.0625
# cpu.reference computes in float64 and rounds to bf16 once: within 2^-9 relative.
BF16_RTOL = 4e-3


@pytest.mark.parametrize("make", [
    lambda rng: bf16(rng, 3, 4, 576),                                    # bf16 via ml_dtypes
    lambda rng: bf16(rng, 3, 8, 576)[:, ::2],                            # strided view
    lambda rng: rng.standard_normal((2, 128)).astype(ml_dtypes.float8_e4m3fn),
    lambda rng: np.arange(12, dtype=np.int32).reshape(3, 4)[:, 1:],      # offset view
    lambda rng: np.zeros((2, 4, 656), dtype=np.uint8),
])
def test_views_point_at_the_callers_memory(rng, make):
    x = make(rng)
    view = _tensors.arg(x, "x", "test")
    assert view.data_ptr == x.ctypes.data
    assert tuple(view.shape) == x.shape
    strides = tuple(s // x.itemsize for s in x.strides)
    assert f"strides [{', '.join(map(str, strides))}]" in view.describe()


def test_dtypes_as_latte_reads_them(rng):
    def dtype(x):
        return _tensors.arg(x, "x", "test").dtype

    assert dtype(bf16(rng, 2)) == "bf16"
    assert dtype(np.zeros(2, ml_dtypes.float8_e4m3fn)) == "e4m3"
    assert dtype(np.zeros(2, np.float32)) == "f32"
    assert dtype(np.zeros(2, np.int32)) == "i32"
    assert dtype(np.zeros(2, np.uint8)) == "u8"


def test_reinterpreting_needs_a_same_size_uint_view():
    assert _latte.TensorArg(np.zeros(2, np.uint16), "x", False, "bf16").dtype == "bf16"
    with pytest.raises(latte.DTypeError, match="test: x is a int16 view, which cannot be read as bf16"):
        _latte.TensorArg(np.zeros(2, np.int16), "x", False, "bf16", "test")


def test_out_and_lse_are_written_in_place(rng):
    t, h = 3, 4
    q, cache = bf16(rng, t, h, 576), bf16(rng, 2, 8, 576)
    indices = distinct_slots(rng, t, 6, 16)
    out = np.full((t, h, 512), 9.0, dtype=ml_dtypes.bfloat16)
    lse = np.zeros((t, h), dtype=np.float32)
    address = out.ctypes.data
    got_out, got_lse = latte.sparse_mla(q, cache, indices, SCALE, out=out, lse=lse)
    assert got_out is out and got_lse is lse and out.ctypes.data == address
    want, want_lse = ref.sparse_mla(q, ref.unpack_mla_cache(cache), indices, SCALE)
    np.testing.assert_allclose(ref.f64(out), want, rtol=BF16_RTOL, atol=1e-6)
    np.testing.assert_allclose(lse[:-1], want_lse[:-1], rtol=1e-5)


def test_strided_inputs_and_outputs(rng):
    # q holds every other head of a bigger array; out is a slice of a padded buffer.
    t, h = 2, 4
    q_all = bf16(rng, t, 2 * h, 576)
    q = q_all[:, 1::2]
    cache = bf16(rng, 2, 8, 576)
    indices = distinct_slots(rng, t, 5, 16)
    padded = np.zeros((t, h, 640), dtype=ml_dtypes.bfloat16)
    out = padded[:, :, :512]
    latte.sparse_mla(q, cache, indices, SCALE, out=out)
    want, _ = ref.sparse_mla(q, ref.unpack_mla_cache(cache), indices, SCALE)
    np.testing.assert_allclose(ref.f64(padded[:, :, :512]), want, rtol=BF16_RTOL, atol=1e-6)
    assert not ref.f64(padded[:, :, 512:]).any()  # the padding is untouched


def test_integer_outputs_in_place(rng):
    bs, nb = 8, 6
    table = paged_requests(rng, [20], bs, nb)
    positions = np.array([[3, 19, -1]], dtype=np.int32)
    slots = np.zeros_like(positions)
    assert latte.logical_to_slots(positions, table, bs, slots=slots) is slots
    assert slots[0, 0] == table[0, 0] * bs + 3 and slots[0, 2] == -1

    k_cache = np.zeros((nb, bs, 132), dtype=np.uint8)
    latte.indexer_k_store(bf16(rng, 20, 128), np.array(ref.request_slots(table[0], 20, bs), np.int32),
                          k_cache)
    q, w = bf16(rng, 1, 2, 128), np.ones((1, 2), np.float32)
    lens = np.array([20], np.int32)
    indices = np.zeros((1, 4), np.int32)
    assert latte.indexer_topk(q, w, k_cache, table, lens, indices=indices) is indices
    logits = np.zeros((1, 24), np.float32)
    assert latte.indexer_logits(q, w, k_cache, table, lens, logits=logits) is logits
    assert np.isneginf(logits[0, 20:]).all() and np.isfinite(logits[0, :20]).all()


def test_read_only_inputs_are_read_in_place(rng):
    q, cache = bf16(rng, 1, 2, 576), bf16(rng, 1, 4, 576)
    indices = np.array([[0, 1, 2, 3]], np.int32)
    for a in (q, cache, indices):
        a.flags.writeable = False
    out = latte.sparse_mla(q, cache, indices, SCALE)
    want, _ = ref.sparse_mla(q, ref.unpack_mla_cache(cache), indices, SCALE)
    np.testing.assert_allclose(ref.f64(out), want, rtol=BF16_RTOL, atol=1e-6)
