"""docs/operations.md's rule for index values out of range, on every CUDA backend that reads a
block table, against cpu.reference (the float64 oracle) on CPU copies of the same bytes, with
check mode off: block-table holes (-1, a negative id, an id past the cache) hold no token;
mla_decode lengths past the table still end each query's window at seq_lens - s_q + i, and a
length below s_q leaves the first queries with nothing (out = 0, lse = -inf); the indexer's
visible lengths past the table or negative are clamped; logical_to_slots maps a hole to -1.
Both cache formats. Run on the GPU machine (scripts/gpu-check python)."""

from __future__ import annotations

import pytest
from gpu_only import cuda_torch

torch = cuda_torch()

import latte  # noqa: E402

BS, MAX_BLOCKS, NUM_BLOCKS = 13, 3, 12
INDEX_BS = 12  # an indexer page is a multiple of 16 bytes
HOLES = [[3, -1, 7], [10, 1_000_000, 2], [-7, 5, 11], [4, 8, 6], [9, -1, 0]]


def _cuda_backends(op):
    ids = [b["id"] for b in latte.backends() if op in b["capabilities"]["ops"]
           and "cuda" in b["capabilities"]["devices"]]
    if not ids:
        pytest.skip(f"no CUDA backend for {op} in this build")
    return ids


def _mla_cache(fmt, g):
    latent = torch.randn(NUM_BLOCKS * BS, 512, generator=g).bfloat16()
    rope = torch.randn(NUM_BLOCKS * BS, 64, generator=g).bfloat16()
    slots = torch.arange(NUM_BLOCKS * BS, dtype=torch.int32)
    if fmt == "bf16":
        cache = torch.zeros(NUM_BLOCKS, BS, 576, dtype=torch.bfloat16)
    else:
        cache = torch.zeros(NUM_BLOCKS, BS, 656, dtype=torch.uint8)
    latte.kv_store(latent, rope, slots, cache, backend="cpu.reference")
    return cache


@pytest.mark.parametrize("fmt", ["bf16", "fp8_ds_mla"])
@pytest.mark.parametrize("s_q", [1, 2, 4])
def test_mla_decode_holes_and_lengths_past_the_table(fmt, s_q):
    g = torch.Generator().manual_seed(31 + s_q)
    heads = 7
    cache = _mla_cache(fmt, g)
    table = torch.tensor(HOLES, dtype=torch.int32)
    seq_lens = torch.tensor([77, 41, 39, 20, 1], dtype=torch.int32)  # the table holds 39
    q = (torch.randn(len(HOLES), s_q, heads, 576, generator=g) * 3).bfloat16()
    want, want_lse = latte.mla_decode(q, cache, table, seq_lens, 0.0625, return_lse=True,
                                      backend="cpu.reference")
    tested = 0
    for backend in _cuda_backends("mla_decode"):
        try:
            got, got_lse = latte.mla_decode(q.cuda(), cache.cuda(), table.cuda(), seq_lens.cuda(),
                                            0.0625, return_lse=True, backend=backend)
        except latte.NoValidBackendError:
            continue  # a backend that does not take this shape
        got, got_lse = got.cpu().double(), got_lse.cpu().double()
        err = ((got - want.double()).norm() / want.double().norm()).item()
        assert err < 1e-2, (backend, err)
        finite = torch.isfinite(want_lse)
        assert torch.equal(torch.isfinite(got_lse), finite), backend
        assert (got_lse[~finite] == float("-inf")).all() and (got[~finite] == 0).all(), backend
        assert (got_lse[finite] - want_lse[finite].double()).abs().max() < 1e-3, backend
        tested += 1
    assert tested, "no CUDA backend ran this mla_decode"


def _index_cache(g):
    keys = torch.randn(NUM_BLOCKS * INDEX_BS, 128, generator=g).bfloat16()
    cache = torch.zeros(NUM_BLOCKS, INDEX_BS, 132, dtype=torch.uint8)
    latte.indexer_k_store(keys, torch.arange(NUM_BLOCKS * INDEX_BS, dtype=torch.int32), cache,
                          backend="cpu.reference")
    return cache


@pytest.mark.parametrize("q_kind", ["e4m3", "bf16"])
def test_indexer_holes_and_visible_lengths_out_of_range(q_kind):
    g = torch.Generator().manual_seed(5)
    heads, tokens = 32, len(HOLES)
    cache = _index_cache(g)
    table = torch.tensor(HOLES, dtype=torch.int32)
    visible = torch.tensor([77, 36, 20, -4, 1], dtype=torch.int32)  # the table holds 36
    weights = torch.rand(tokens, heads, generator=g)
    q = torch.randn(tokens, heads, 128, generator=g)
    extra = {}
    if q_kind == "e4m3":
        q = q.to(torch.float8_e4m3fn)
        extra["q_scale"] = torch.rand(tokens, heads, generator=g) + 0.5
    else:
        q = q.bfloat16()
    width = MAX_BLOCKS * INDEX_BS + 5
    want = latte.indexer_logits(q, weights, cache, table, visible, backend="cpu.reference",
                                logits=torch.empty(tokens, width), **extra)
    want_idx = latte.indexer_topk(q, weights, cache, table, visible, topk=16, kind="logical",
                                  backend="cpu.reference", **extra)
    tested = 0
    dev = {k: v.cuda() for k, v in extra.items()}
    for backend in _cuda_backends("indexer_topk"):
        try:
            got_idx = latte.indexer_topk(q.cuda(), weights.cuda(), cache.cuda(), table.cuda(),
                                         visible.cuda(), topk=16, kind="logical",
                                         backend=backend, **dev).cpu()
        except latte.NoValidBackendError:
            continue  # e.g. a backend that takes only e4m3 queries
        # The same positions (valid entries first; their order is backend-defined).
        assert torch.equal(got_idx.sort(dim=1, descending=True).values,
                           want_idx.sort(dim=1, descending=True).values), backend
        tested += 1
        if "indexer_logits" not in next(b for b in latte.backends()
                                        if b["id"] == backend)["capabilities"]["ops"]:
            continue
        got = latte.indexer_logits(q.cuda(), weights.cuda(), cache.cuda(), table.cuda(),
                                   visible.cuda(), backend=backend,
                                   logits=torch.empty(tokens, width, device="cuda"), **dev).cpu()
        assert torch.equal(torch.isinf(got), torch.isinf(want)), backend
        fin = torch.isfinite(want)
        assert (got[fin] - want[fin]).abs().max() <= 1e-3 * want[fin].abs().max(), backend
    assert tested, "no CUDA backend ran this indexer_topk"


def test_logical_to_slots_holes():
    table = torch.tensor(HOLES, dtype=torch.int32)
    positions = torch.tensor([[0, 13, 26, 38, 39, -1], [12, 13, 30, 5, 25, 26]] * 2 +
                             [[0, 1, 14, 27, 38, 3]], dtype=torch.int32)
    want = latte.logical_to_slots(positions, table, block_size=BS, backend="cpu.reference")
    for backend in _cuda_backends("logical_to_slots"):
        got = latte.logical_to_slots(positions.cuda(), table.cuda(), block_size=BS,
                                     backend=backend).cpu()
        assert torch.equal(got, want), backend
