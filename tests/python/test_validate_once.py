"""One op call from Python, one validation: the binding hands latte::run its arguments and
latte::run builds the validated problem once (kv_format, when given, is checked against that
problem, not by validating again). latte._latte._validation_count() counts every validation of
the process."""

import numpy as np
from helpers import bf16, distinct_slots, paged_requests

import latte
from latte import _latte

SCALE = 0.0625


def validations(call):
    before = _latte._validation_count()
    call()
    return _latte._validation_count() - before


def test_each_op_call_validates_once(rng):
    t, h, nb, bs = 3, 4, 4, 16
    q = bf16(rng, t, h, 576)
    cache = bf16(rng, nb, bs, 576)
    indices = distinct_slots(rng, t, 8, nb * bs)
    fp8 = np.zeros((nb, bs, 656), dtype=np.uint8)
    k_cache = np.zeros((nb, bs, 132), dtype=np.uint8)
    slots = np.arange(t, dtype=np.int32)
    table = paged_requests(rng, [20, 9, 33], bs, nb * 3)
    lens = np.array([20, 9, 33], dtype=np.int32)
    k_cache = np.zeros((nb * 3, bs, 132), dtype=np.uint8)
    calls = {
        "sparse_mla": lambda: latte.sparse_mla(q, cache, indices, SCALE),
        "sparse_mla, kv_format given": lambda: latte.sparse_mla(q, cache, indices, SCALE, kv_format="bf16"),
        "sparse_mla, check mode": lambda: latte.sparse_mla(q, cache, indices, SCALE, check_indices=True),
        "mla_decode": lambda: latte.mla_decode(bf16(rng, 3, 1, h, 576), cache, table[:, :3] % nb,
                                               np.array([5, 9, 16], dtype=np.int32), SCALE),
        "kv_store": lambda: latte.kv_store(bf16(rng, t, 512), bf16(rng, t, 64), slots, fp8,
                                           kv_format="fp8_ds_mla"),
        "indexer_k_store": lambda: latte.indexer_k_store(bf16(rng, t, 128), slots, k_cache),
        "indexer_topk": lambda: latte.indexer_topk(bf16(rng, 3, 2, 128),
                                                   rng.standard_normal((3, 2)).astype(np.float32),
                                                   k_cache, table, lens, 8),
    }
    for name, call in calls.items():
        call()  # the first call selects and makes the kernel
        assert validations(call) == 1, name


def test_logical_sparse_mla_validates_each_of_its_two_steps_once(rng):
    t, h, nb, bs = 2, 4, 6, 16
    table = paged_requests(rng, [30, 40], bs, nb)
    positions = np.array([[0, 5, 29, -1], [1, 39, 20, 3]], dtype=np.int32)
    call = lambda: latte.sparse_mla(bf16(rng, t, h, 576), bf16(rng, nb, bs, 576), positions, SCALE,
                                    block_table=table)
    call()
    assert validations(call) == 2  # logical_to_slots, then sparse_mla


def test_a_declared_kv_format_that_disagrees_is_refused_naming_both(rng):
    q, cache = bf16(rng, 2, 4, 576), bf16(rng, 2, 8, 576)
    try:
        latte.sparse_mla(q, cache, distinct_slots(rng, 2, 4, 16), SCALE, kv_format="fp8_ds_mla")
    except latte.InvalidArgumentError as e:
        assert "kv_format is 'fp8_ds_mla' but kv_cache holds a bf16 cache" in str(e)
    else:
        raise AssertionError("a bf16 cache passed as fp8_ds_mla")
