"""GLM-5.3-Flash's pooled indexer through latte inside vLLM (``LatteSparseAttnIndexerKpool``, the
op vLLM builds in place of its ``SparseAttnIndexerKpool`` where DeepGEMM is missing or
``LATTE_VLLM=prefer``), on the CPU against the real vLLM and a float64 reference.

A sequence of steps as vLLM schedules them (prefills, chunked prefills that start inside a pool,
decodes, several tokens of one request in a step as speculative decoding verifies them, and a
padding request with vLLM's null tail block) runs through the op with vLLM's own metadata
objects and its own tail slot mapping. After every step: each complete pool's key in the pool
cache is the model's gated mix of its 4 tokens (tokens of earlier steps coming from vLLM's tail
cache), rotated and quantized exactly as vLLM writes it; the tail cache holds each request's last
``ring`` tokens where vLLM's kernels put them; vLLM's null block is untouched; and every top-k row
is the float64 top-k over the written pool keys, expanded, with the incomplete pool appended.
"""

from __future__ import annotations

import types

import pytest
import torch

from conftest import vllm_config
from pooled_reference import pool_key, pool_row, pow2_scale

KPOOL, BLOCK, HEADS = 4, 64, 32  # BLOCK tokens per indexer block: 16 pool rows
ROWS = BLOCK // KPOOL
TOPK = 64  # pool_topk 16: small contexts already select
WIDTH = 128
NUM_BLOCKS, TAIL_BLOCKS, PAD = 8, 6, 4  # PAD: other layers' pool rows between blocks
# (request, first position, tokens) per step, in vLLM's batch order.
STEPS = [
    [("A", 0, 10), ("B", 0, 70)],
    [("A", 10, 1), ("B", 70, 31), ("C", 0, 3)],  # B's chunk starts inside a pool
    [("A", 11, 1), ("B", 101, 1), ("C", 3, 1), ("D", 0, 4)],  # D: a padding request
    [("A", 12, 3), ("B", 102, 6), ("C", 4, 5)],  # several tokens per request
]
TAIL_BLOCK = {"A": 3, "B": 1, "C": 5, "D": 0}  # D has vLLM's null block: its tokens are skipped
MAX_LEN = 128


def _setup(gen, ring):
    raw = torch.zeros(NUM_BLOCKS, (ROWS + PAD) * 132, dtype=torch.uint8)
    k_cache = raw[:, :ROWS * 132].view(NUM_BLOCKS, ROWS, 132)
    tail_raw = torch.randn(TAIL_BLOCKS, 2 * ring * 128 + 64, generator=gen).bfloat16()
    tail = tail_raw[:, :2 * ring * 128].view(TAIL_BLOCKS, 2, ring, 128)
    perm = torch.randperm(NUM_BLOCKS, generator=gen).tolist()
    blocks = {"A": perm[0:2], "B": perm[2:4], "C": perm[4:6], "D": perm[0:2]}  # D: A's blocks
    data = {r: (torch.randn(MAX_LEN, 128, generator=gen).bfloat16(),
                (torch.randn(MAX_LEN, 128, generator=gen) * 2).bfloat16()) for r in "ABCD"}
    ape = torch.randn(KPOOL, 128, generator=gen) * 0.5
    return k_cache, tail, blocks, data, ape


def _want_row(k, gate, ape, p):
    """The codes and scale vLLM stores for pool p: its key quantized with the power-of-two
    scale."""
    sl = slice(KPOOL * p, KPOOL * p + KPOOL)
    key = pool_key(k[sl], gate[sl], ape)
    scale = pow2_scale(key)
    return (key / scale).to(torch.float8_e4m3fn), scale


def _page_row(k_cache, block, row):
    return pool_row(k_cache, ROWS, block * ROWS + row)


def _step_metadata(step, blocks, ring):
    from vllm.v1.attention.backends.mla.indexer import (DeepseekV32IndexerMetadata,
                                                        compute_kpool_tail_slot_mapping)

    positions = torch.tensor([p for _, first, n in step for p in range(first, first + n)])
    qsl = [0]
    for _, _, n in step:
        qsl.append(qsl[-1] + n)
    tokens = qsl[-1]
    table = torch.tensor([blocks[r] for r, _, _ in step], dtype=torch.int32)
    seq_lens = torch.tensor([first + n for _, first, n in step], dtype=torch.int32)
    index_md = DeepseekV32IndexerMetadata(
        seq_lens=seq_lens, max_seq_len=int(seq_lens.max()),
        slot_mapping=torch.full((tokens,), -1, dtype=torch.int64), num_decodes=0,
        num_decode_tokens=0, num_prefills=len(step), num_prefill_tokens=tokens,
        block_table=table)
    # vLLM's own tail slot mapping (block * ring + pos % ring, -1 for the null block).
    tail_table = torch.tensor([[TAIL_BLOCK[r]] for r, _, _ in step], dtype=torch.int32)
    tail_slots = compute_kpool_tail_slot_mapping(
        torch.zeros(tokens, dtype=torch.int64), tail_table,
        torch.tensor(qsl, dtype=torch.int32), positions, tokens, len(step), ring)
    tail_md = DeepseekV32IndexerMetadata(
        seq_lens=seq_lens, max_seq_len=int(seq_lens.max()), slot_mapping=tail_slots,
        num_decodes=0, num_decode_tokens=0, num_prefills=len(step),
        num_prefill_tokens=tokens, positions=positions)
    return positions, index_md, tail_md


def _op(k_cache, tail, buffer, skip_insert=False):
    from latte.integrations.vllm.pooled import LatteSparseAttnIndexerKpool

    return LatteSparseAttnIndexerKpool(
        types.SimpleNamespace(prefix="layer.indexer.k_cache", kv_cache=k_cache), 128, "ue8m0",
        TOPK, 128, MAX_LEN // KPOOL, MAX_LEN, buffer, skip_k_cache_insert=skip_insert,
        tail_cache=types.SimpleNamespace(prefix="layer.indexer.tail_cache", kv_cache=tail))


def _run_step(op, step, blocks, data, ape, ring, gen, config):
    from vllm.forward_context import set_forward_context

    positions, index_md, tail_md = _step_metadata(step, blocks, ring)
    tokens = positions.shape[0]
    padded = tokens + 2  # vLLM's hidden states may hold padding rows past the step's tokens
    k = torch.randn(padded, 128, generator=gen).bfloat16()
    gate = torch.randn(padded, 128, generator=gen).bfloat16()
    t = 0
    for r, first, n in step:
        k[t:t + n], gate[t:t + n] = data[r][0][first:first + n], data[r][1][first:first + n]
        t += n
    q = (torch.randn(padded, HEADS, 128, generator=gen) * 2).to(torch.float8_e4m3fn)
    weights = torch.rand(padded, HEADS, generator=gen)
    op.topk_indices_buffer.fill_(7)
    md = {"layer.indexer.k_cache": index_md, "layer.indexer.tail_cache": tail_md}
    with set_forward_context(md, config):
        out = op.forward_latte(torch.zeros(padded, 16), q, k, weights, gate_score=gate,
                               compress_ape=ape, index_kpool=KPOOL,
                               positions=torch.cat([positions, torch.zeros(2, dtype=torch.long)]))
    assert out is op.topk_indices_buffer
    return q, weights, tokens, padded


def _check_pages(k_cache, blocks, data, ape, lengths):
    for r, length in lengths.items():
        for p in range(length // KPOOL):
            codes, scale = _page_row(k_cache, blocks[r][KPOOL * p // BLOCK], p % ROWS)
            want_codes, want_scale = _want_row(*data[r], ape, p)
            assert scale == want_scale, (r, p)
            assert torch.equal(codes.view(torch.uint8), want_codes.view(torch.uint8)), (r, p)


def _check_tail(tail, tail_before, data, lengths, ring):
    for r, length in lengths.items():
        for pos in range(max(0, length - ring), length):
            b = TAIL_BLOCK[r]
            assert torch.equal(tail[b, 0, pos % ring], data[r][0][pos]), (r, pos)
            assert torch.equal(tail[b, 1, pos % ring], data[r][1][pos]), (r, pos)
    assert torch.equal(tail[0], tail_before[0])  # vLLM's null block


def _check_topk(buffer, step, q, weights, k_cache, blocks, tokens, padded):
    t = 0
    for r, first, n in step:
        for pos in range(first, first + n):
            row = buffer[t].tolist()
            valid = [x for x in row if x >= 0]
            assert row == valid + [-1] * (WIDTH - len(valid)), (r, pos)
            if r == "D":
                assert valid == [], pos
                t += 1
                continue
            complete = (pos + 1) // KPOOL
            keys = []
            for p in range(complete):
                codes, scale = _page_row(k_cache, blocks[r][KPOOL * p // BLOCK], p % ROWS)
                keys.append(codes.double() * scale)
            want = set()
            if complete:
                scores = (torch.relu(q[t].double() @ torch.stack(keys).T) *
                          weights[t].double()[:, None]).sum(0)
                kept = torch.topk(scores, min(TOPK // KPOOL, complete)).indices.tolist()
                want = {KPOOL * p + s for p in kept for s in range(KPOOL)}
            want |= set(range(KPOOL * complete, pos + 1))
            assert sorted(valid) == sorted(want) and len(valid) == len(want), (r, pos)
            t += 1
    assert (buffer[tokens:padded] == -1).all()


@pytest.mark.parametrize("ring", [4, 8], ids=["ring4", "ring8-speculative"])
def test_pooled_indexer_steps_match_float64(model_dirs, ring):
    gen = torch.Generator().manual_seed(11)
    k_cache, tail, blocks, data, ape = _setup(gen, ring)
    tail_before = tail.clone()
    buffer = torch.zeros(128 + 8, WIDTH, dtype=torch.int32)[:128]  # a view, as vLLM's may be
    op = _op(k_cache, tail, buffer)
    config = vllm_config(model_dirs, "glm-5.3-flash", tp=8)
    lengths = {}
    for step in STEPS:
        q, weights, tokens, padded = _run_step(op, step, blocks, data, ape, ring, gen, config)
        for r, first, n in step:
            if r != "D":
                lengths[r] = first + n
        _check_pages(k_cache, blocks, data, ape, lengths)
        _check_tail(tail, tail_before, data, lengths, ring)
        _check_topk(buffer, step, q, weights, k_cache, blocks, tokens, padded)


def test_skip_insert_scores_without_writing(model_dirs):
    gen = torch.Generator().manual_seed(12)
    k_cache, tail, blocks, data, ape = _setup(gen, 4)
    buffer = torch.zeros(128, WIDTH, dtype=torch.int32)
    config = vllm_config(model_dirs, "glm-5.3-flash", tp=8)
    _run_step(_op(k_cache, tail, buffer), STEPS[0], blocks, data, ape, 4, gen, config)
    pages, tails = k_cache.clone(), tail.clone()
    q, weights, tokens, padded = _run_step(_op(k_cache, tail, buffer, skip_insert=True),
                                           STEPS[1], blocks, data, ape, 4, gen, config)
    assert torch.equal(k_cache, pages) and torch.equal(tail, tails)
    # Rows still score the pools already written (B's first 17 pools): a row of B sees them.
    assert (buffer[1, :TOPK] >= 0).all()


def test_profiling_run_computes_nothing(model_dirs):
    from vllm.forward_context import set_forward_context

    gen = torch.Generator().manual_seed(13)
    k_cache, tail, _, _, ape = _setup(gen, 4)
    buffer = torch.full((8, WIDTH), 5, dtype=torch.int32)
    op = _op(k_cache, tail, buffer)
    with set_forward_context(None, vllm_config(model_dirs, "glm-5.3-flash", tp=8)):
        out = op.forward_latte(torch.zeros(4, 16), torch.zeros(4, HEADS, 128).to(torch.float8_e4m3fn),
                               torch.zeros(4, 128).bfloat16(), torch.zeros(4, HEADS),
                               gate_score=torch.zeros(4, 128).bfloat16(), compress_ape=ape,
                               index_kpool=KPOOL, positions=torch.arange(4))
    assert out is buffer and (buffer == 5).all()


@pytest.mark.parametrize("kwargs, words", [
    (dict(use_fp4_cache=True), "use_fp4_cache=True"),
    (dict(scale_fmt="fp32"), "scale_fmt='fp32'"),
    (dict(tail_cache=None), "tail cache missing"),
])
def test_refuses_other_indexer_forms(kwargs, words):
    from latte.integrations.vllm.pooled import LatteSparseAttnIndexerKpool

    args = dict(k_cache=None, quant_block_size=128, scale_fmt="ue8m0", topk_tokens=TOPK,
                head_dim=128, max_pool_len=32, max_total_seq_len=128,
                topk_indices_buffer=torch.zeros(4, WIDTH, dtype=torch.int32),
                tail_cache=types.SimpleNamespace(prefix="t", kv_cache=None))
    args.update(kwargs)
    with pytest.raises(NotImplementedError, match="LATTE_VLLM=off") as e:
        LatteSparseAttnIndexerKpool(**args)
    assert words in str(e.value)
