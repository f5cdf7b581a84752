"""GLM-5.3-Flash's pooled indexer step of the vLLM adapter (``kernels.pooled_indexer_step``, what
latte's ``SparseAttnIndexerKpool`` runs inside vLLM) on a GPU, at the model's sizes (32 index
heads, 512 pools kept of 4 tokens, vLLM's 2176-wide top-k buffer, 64-token blocks, a tail ring of
8), over steps as vLLM schedules them, against the same function on CPU copies (latte's float64
oracle): pool pages byte for byte, the tail cache bit for bit, every top-k row the oracle's set
(up to scores at the boundary within float32 error). The step is run with torch's sync debug
mode set to error: it never waits on the GPU. tests/vllm runs the same function inside the real
vLLM, on the CPU.
"""

from __future__ import annotations

import pytest
from gpu_only import cuda_torch

torch = cuda_torch()

import latte  # noqa: E402
from latte.integrations.vllm import kernels  # noqa: E402

DEV = torch.device("cuda")
KPOOL, BLOCK, RING, HEADS = 4, 64, 8, 32
POOL_TOPK, WIDTH = 512, 2176
MAX_TOKENS = 2304
NUM_BLOCKS = 48
# (request, first position, tokens) per step; D is a padding request (vLLM's null tail block).
STEPS = [
    [("A", 0, 2060), ("B", 0, 37)],
    [("A", 2060, 1), ("B", 37, 563), ("C", 0, 1)],  # B's chunk starts inside a pool
    [("A", 2061, 3), ("B", 600, 1), ("C", 1, 6), ("D", 0, 4)],
]
TAIL_BLOCK = {"A": 2, "B": 5, "C": 1, "D": 0}
LENGTH = 2100


def _state(gen):
    perm = torch.randperm(NUM_BLOCKS, generator=gen).tolist()
    need = (LENGTH + BLOCK - 1) // BLOCK
    blocks = {"A": perm[:need], "B": perm[need:2 * need], "C": perm[2 * need:2 * need + 1]}
    blocks["D"] = blocks["A"]  # a padding request must not write A's pools
    raw = torch.zeros(NUM_BLOCKS, (BLOCK // KPOOL + 4) * 132, dtype=torch.uint8)
    k_cache = raw[:, :BLOCK // KPOOL * 132].view(NUM_BLOCKS, BLOCK // KPOOL, 132)
    tail_raw = torch.randn(6, 2 * RING * 128 + 64, generator=gen).bfloat16()
    tail = tail_raw[:, :2 * RING * 128].view(6, 2, RING, 128)
    data = {r: (torch.randn(LENGTH, 128, generator=gen).bfloat16(),
                (torch.randn(LENGTH, 128, generator=gen) * 2).bfloat16()) for r in "ABCD"}
    return blocks, k_cache, tail, data, torch.randn(KPOOL, 128, generator=gen) * 0.5


def _inputs(step, blocks, data, gen):
    pos, tail_slots, k, gate = [], [], [], []
    for r, first, n in step:
        for p in range(first, first + n):
            pos.append(p)
            tail_slots.append(TAIL_BLOCK[r] * RING + p % RING if TAIL_BLOCK[r] else -1)
        k.append(data[r][0][first:first + n])
        gate.append(data[r][1][first:first + n])
    width = max(len(blocks[r]) for r, _, _ in step)
    table = torch.full((len(step), width), -1, dtype=torch.int32)
    for i, (r, _, _) in enumerate(step):
        table[i, :len(blocks[r])] = torch.tensor(blocks[r], dtype=torch.int32)
    tokens = len(pos)
    return dict(
        q=(torch.randn(tokens, HEADS, 128, generator=gen) * 2).to(torch.float8_e4m3fn),
        weights=torch.rand(tokens, HEADS, generator=gen), k=torch.cat(k), gate=torch.cat(gate),
        positions=torch.tensor(pos), tail_slots=torch.tensor(tail_slots), table=table)


def _run(inp, k_cache, tail, ape, topk, ones):
    return kernels.pooled_indexer_step(
        inp["q"], inp["weights"], inp["k"], inp["gate"], ape, inp["positions"],
        inp["tail_slots"], inp["table"], k_cache, tail, kpool=KPOOL, pool_topk=POOL_TOPK,
        q_scale=ones, topk_out=topk)


def _check_rows(got, want, inp, k_cache):
    """Each GPU row holds the oracle's set; where the sets differ, the pools swapped score
    within float32 error of the oracle's boundary."""
    logits = latte.indexer_logits(
        inp["q"], inp["weights"], k_cache, inp["table"], inp["positions"].int() + 1,
        q_scale=torch.ones(inp["q"].shape[:2]), kpool=KPOOL,
        token_request=torch.tensor(_requests(inp["tail_slots"]), dtype=torch.int32),
        backend="cpu.reference")
    for t in range(got.shape[0]):
        have = [x for x in got[t].tolist() if x >= 0]
        mine = [x for x in want[t].tolist() if x >= 0]
        assert got[t].tolist() == have + [-1] * (WIDTH - len(have)), t
        assert len(have) == len(mine) == len(set(have)), t
        if set(have) == set(mine):
            continue
        pools_want = {x // KPOOL for x in mine}
        bound = min(float(logits[t, p]) for p in pools_want if logits[t, p] > -float("inf"))
        for x in set(have).symmetric_difference(mine):
            score = float(logits[t, x // KPOOL])
            assert abs(score - bound) <= 1e-3 * max(abs(bound), 1e-30), (t, x)


def _requests(tail_slots):
    blocks = (tail_slots // RING).tolist()
    out, r = [], -1
    for i, b in enumerate(blocks):
        r += i == 0 or b != blocks[i - 1]
        out.append(r)
    return out


def test_pooled_step_matches_the_oracle():
    gen = torch.Generator().manual_seed(21)
    blocks, k_ref, tail_ref, data, ape = _state(gen)
    k_gpu, tail_gpu = k_ref.to(DEV), tail_ref.to(DEV)
    null_block = tail_ref[0].clone()
    topk_ref = torch.full((MAX_TOKENS, WIDTH), 7, dtype=torch.int32)
    topk_gpu = topk_ref.to(DEV)
    ones = torch.ones(MAX_TOKENS, HEADS)
    ones_gpu = ones.to(DEV)
    ape_gpu = ape.to(DEV)
    for step in STEPS:
        inp = _inputs(step, blocks, data, gen)
        tokens = inp["positions"].shape[0]
        on_gpu = {name: value.to(DEV) for name, value in inp.items()}
        topk_gpu.fill_(7)
        topk_ref.fill_(7)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")  # any wait on the GPU raises
        try:
            _run(on_gpu, k_gpu, tail_gpu, ape_gpu, topk_gpu, ones_gpu)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        _run(inp, k_ref, tail_ref, ape, topk_ref, ones)
        assert torch.equal(k_gpu.cpu(), k_ref), step  # cuda.kv_store = cpu.reference, byte for byte
        assert torch.equal(tail_gpu.cpu(), tail_ref), step
        assert torch.equal(tail_ref[0], null_block)
        assert (topk_gpu[tokens:].cpu() == 7).all()  # rows past the step untouched
        _check_rows(topk_gpu[:tokens].cpu(), topk_ref[:tokens], inp, k_ref)
        if step is STEPS[0]:
            first_page = k_ref[blocks["A"][0]].clone()
    # D's tokens 0..3 would complete pool 0 in A's first block: skipped, A's page is as it was.
    assert torch.equal(k_ref[blocks["A"][0]], first_page)
