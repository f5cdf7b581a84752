#!/usr/bin/env python3
"""Host time per latte op call from Python, beside the GPU time of the same calls.

An inference engine calls attention eagerly on every layer, so the host time of one call (the
Python wrapper, tensor descriptors, selection lookup, workspace, launch) is paid 60-80 times a
step; once it exceeds the kernel's GPU time the GPU waits on Python. This prints both:

- host us/call: time.perf_counter around N queued calls (no synchronization inside), divided by
  N; the median of several rounds. The caller passes the outputs (out=, indices=, slots=), as
  an engine does.
- GPU us/call: CUDA events around the same N queued calls (n/a on the CPU). When the host is
  slower than the kernels, the GPU waits between them and this shows the host's rate instead.

    python3 bench/python/host_overhead.py --device cuda --calls 300
    python3 bench/python/host_overhead.py --device cpu

Shapes: GLM-5 at TP8 (8 heads, topk 2048, page 64), one decode token. The "vLLM" rows are the
vLLM adapter's calls (latte.integrations.vllm.kernels, what LatteMLASparseImpl.forward_mqa and
the indexer step run per layer), beside the bare ops they are made of. On the CPU the
cpu.reference backend computes in float64, so its host time is mostly compute; the
logical_to_slots T=1 K=1 row is the one that shows the per-call overhead there.

A measurement, not a test: nothing here passes or fails on a timing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Callable, List, Optional

import torch

import latte

HEADS = 8           # GLM-5 attention heads per rank at TP8
INDEX_HEADS = 32    # GLM-5 indexer heads
TOPK = 2048
PAGE = 64
MLA_CONTEXT = 32768  # tokens in the MLA cache the indices point into


class Case:
    def __init__(self, name: str, call: Callable[[], object], note: str = ""):
        self.name = name
        self.call = call
        self.note = note


def sparse_mla_case(device: str, kv_format: str, tokens: int = 1, note: str = "") -> Case:
    blocks = MLA_CONTEXT // PAGE
    q = torch.randn(tokens, HEADS, 576, device=device).bfloat16()
    if kv_format == "bf16":
        kv = (torch.randn(blocks, PAGE, 576, device=device) * 0.1).bfloat16()
    else:
        # fp8_ds_mla bytes; zeros decode to 0 (scale 0): the timing does not depend on values.
        kv = torch.zeros(blocks, PAGE, 656, dtype=torch.uint8, device=device)
    idx = torch.randperm(blocks * PAGE, device=device)[:TOPK].to(torch.int32).view(1, TOPK)
    idx = idx.expand(tokens, TOPK).contiguous()
    out = torch.empty(tokens, HEADS, 512, dtype=torch.bfloat16, device=device)

    def call():
        return latte.sparse_mla(q, kv, idx, 0.0625, out=out)

    return Case(f"sparse_mla {kv_format} T={tokens} H={HEADS} topk={TOPK}", call, note)


def indexer_topk_case(device: str, context: int) -> Case:
    blocks = context // PAGE
    q = torch.randn(1, INDEX_HEADS, 128, device=device).to(torch.float8_e4m3fn)
    q_scale = torch.ones(1, INDEX_HEADS, device=device)
    weights = torch.randn(1, INDEX_HEADS, device=device)
    k_cache = torch.zeros(blocks, PAGE, 132, dtype=torch.uint8, device=device)
    block_table = torch.randperm(blocks, device=device).to(torch.int32).view(1, blocks)
    visible = torch.full((1,), context, dtype=torch.int32, device=device)
    indices = torch.empty(1, TOPK, dtype=torch.int32, device=device)

    def call():
        return latte.indexer_topk(q, weights, k_cache, block_table, visible, TOPK,
                                  q_scale=q_scale, indices=indices)

    return Case(f"indexer_topk e4m3 H_i={INDEX_HEADS} ctx={context}", call)


def logical_to_slots_case(device: str, k: int, note: str = "") -> Case:
    blocks = MLA_CONTEXT // PAGE
    positions = torch.arange(k, dtype=torch.int32, device=device).view(1, k)
    block_table = torch.arange(blocks, dtype=torch.int32, device=device).view(1, blocks)
    slots = torch.empty(1, k, dtype=torch.int32, device=device)

    def call():
        return latte.logical_to_slots(positions, block_table, PAGE, slots=slots)

    return Case(f"logical_to_slots T=1 K={k}", call, note)


def vllm_forward_case(device: str, kv_format: str, split_q: bool) -> Case:
    """The vLLM adapter's forward_mqa as LatteMLASparseImpl runs it: logical top-k positions ->
    slots (logical_to_slots), then sparse_mla; vLLM's bf16 path hands (ql_nope, q_pe)."""
    from latte.integrations.vllm import kernels

    blocks = MLA_CONTEXT // PAGE
    q = torch.randn(1, HEADS, 576, device=device).bfloat16()
    q_arg = (q[..., :512], q[..., 512:]) if split_q else q
    if kv_format == "bf16":
        kv = (torch.randn(blocks, PAGE, 576, device=device) * 0.1).bfloat16()
    else:
        kv = torch.zeros(blocks, PAGE, 656, dtype=torch.uint8, device=device)
    topk = torch.randperm(MLA_CONTEXT, device=device)[:TOPK].to(torch.int32).view(1, TOPK)
    block_table = torch.arange(blocks, dtype=torch.int32, device=device).view(1, blocks)
    token_request = torch.zeros(1, dtype=torch.int32, device=device)
    slots = torch.empty(1, TOPK, dtype=torch.int32, device=device)

    def call():
        return kernels.sparse_mla_forward(q_arg, kv, topk, block_table, token_request, 0.0625,
                                          slots=slots)

    q_note = "q as (ql_nope, q_pe): q + q_rope" if split_q else "q as one [T, H, 576]"
    name = f"vLLM forward_mqa {kv_format}{' split q' if split_q else ''}"
    return Case(name, call, f"logical_to_slots + sparse_mla, {q_note}")


def vllm_indexer_case(device: str, context: int) -> Case:
    """The vLLM adapter's indexer step as run_indexer calls it: the step's per-token views (made
    once per step by the metadata builder), the q_scale ones view, and vLLM's persistent top-k
    buffer, whose first rows are written."""
    from latte.integrations.vllm import kernels

    blocks = context // PAGE
    q = torch.randn(1, INDEX_HEADS, 128, device=device).to(torch.float8_e4m3fn)
    ones = torch.ones(64, INDEX_HEADS, device=device)[:1]
    weights = torch.randn(1, INDEX_HEADS, device=device)
    k_cache = torch.zeros(blocks, PAGE, 132, dtype=torch.uint8, device=device)
    block_table = torch.randperm(blocks, device=device).to(torch.int32).view(1, blocks)
    token_request = torch.zeros(64, dtype=torch.int32, device=device)[:1]
    visible = torch.full((64,), context, dtype=torch.int32, device=device)[:1]
    topk_buffer = torch.empty(64, TOPK, dtype=torch.int32, device=device)

    def call():
        return kernels.indexer_topk_logical(q, weights, k_cache, block_table, token_request,
                                            visible, q_scale=ones, topk_out=topk_buffer)

    return Case(f"vLLM indexer step ctx={context}", call, "indexer_topk, logical, into the buffer")


def floor_cases(device: str) -> List[Case]:
    """What any call from Python costs on this host: the floor the rows above are measured
    against (one torch kernel launch; one call into latte's extension that does nothing)."""
    x = torch.zeros(64, device=device)
    return [Case("floor: torch x.zero_()", lambda: x.zero_(), "one torch kernel launch"),
            Case("floor: latte.built_with_cuda()", latte.built_with_cuda,
                 "one call into the extension")]


def host_us(call: Callable[[], object], calls: int, rounds: int, sync: Callable[[], None]) -> float:
    per_round: List[float] = []
    for _ in range(rounds):
        sync()  # start each round with an idle queue, so rounds measure the same thing
        start = time.perf_counter()
        for _ in range(calls):
            call()
        per_round.append((time.perf_counter() - start) / calls * 1e6)
    sync()
    return statistics.median(per_round)


def gpu_us(call: Callable[[], object], calls: int, rounds: int) -> float:
    per_round: List[float] = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            call()
        end.record()
        end.synchronize()
        per_round.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(per_round)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--calls", type=int, default=300, help="queued calls per round")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (the median is printed)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device visible to torch: use --device cpu", file=sys.stderr)
        return 2
    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    cases = [
        sparse_mla_case(args.device, "bf16"),
        sparse_mla_case(args.device, "fp8_ds_mla"),
        indexer_topk_case(args.device, 4096),
        indexer_topk_case(args.device, 32768),
        logical_to_slots_case(args.device, TOPK),
        vllm_forward_case(args.device, "bf16", split_q=True),
        vllm_forward_case(args.device, "bf16", split_q=False),
        vllm_forward_case(args.device, "fp8_ds_mla", split_q=False),
        vllm_indexer_case(args.device, 32768),
        *floor_cases(args.device),
    ]
    if not cuda:
        # No compute: what the call path itself costs (T=0 tokens: every tensor is still read,
        # validated and selected for).
        cases.append(logical_to_slots_case(args.device, 1, "overhead only"))
        cases.append(sparse_mla_case(args.device, "bf16", tokens=0, note="overhead only"))

    # The CPU reference computes sparse_mla and the indexer in float64: fewer calls there.
    calls_for = {c.name: args.calls for c in cases}
    if not cuda:
        for c in cases:
            if c.note != "overhead only" and not c.name.startswith(("logical_to_slots", "floor")):
                calls_for[c.name] = max(1, min(args.calls, 5))

    print(f"latte {latte.__version__}, torch {torch.__version__}, device "
          f"{torch.cuda.get_device_name() if cuda else 'cpu'}, {args.rounds} rounds (median)")
    header = f"{'op':<40} {'calls':>6} {'host us/call':>13} {'GPU us/call':>12}  note"
    print(header)
    print("-" * len(header))
    for case in cases:
        n = calls_for[case.name]
        for _ in range(min(n, 20)):  # warm up: selection, kernel made, workspace, lazy init
            case.call()
        sync()
        host = host_us(case.call, n, args.rounds, sync)
        gpu = f"{gpu_us(case.call, n, args.rounds):12.1f}" if cuda else f"{'n/a':>12}"
        print(f"{case.name:<40} {n:>6} {host:13.1f} {gpu}  {case.note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
