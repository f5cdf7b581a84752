#!/usr/bin/env python3
"""GLM-5.3-Flash's pooled indexer on CUDA against the per-token indexer at the same context.

For B decode tokens (a request each, shuffled pages of 64 tokens, 32 index heads, e4m3 queries)
over a context of L tokens, median of ``--reps`` calls with the L2 flushed before each (a
256 MiB buffer written on the same stream, outside the timed region), CUDA events around each
call, outputs preallocated:

- pooled logits: ``latte.indexer_logits(..., kpool=4)`` over the L / 4 pool rows (132 bytes
  each); GB/s over those bytes, and the share of a device-to-device copy of the same bytes
  measured in the same process (the copy ceiling of the issue's target);
- pooled top-k: ``latte.indexer_topk(..., kpool=4, pool_topk=512, select_tail=True)`` into
  2176-wide rows with ``out_lens`` (the 512 best pools expanded to 2048 tokens plus the tail);
- token top-k: ``latte.indexer_topk`` of 2048 over a per-token cache of the same L tokens (GLM-5's
  indexer at the same context), the reference the pooled top-k is held to.

Needs torch with CUDA and latte built with CUDA (the figures of docs/performance.md).
"""
import argparse
import statistics

import torch

import latte

KPOOL, POOL_TOPK, WIDTH, HI, BS, ROW = 4, 512, 2176, 32, 64, 132


def timed(fn, reps, flush):
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for _ in range(3):
        fn()
    for i in range(reps):
        flush.add_(1)
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(start, end))


def random_pages(pages, rows, dev, gen):
    """Pages of `rows` 132-byte rows: e4m3 codes (no NaN) then f32 scales around 1e-2."""
    codes = torch.randint(0, 256, (pages, rows * 128), device=dev, dtype=torch.uint8, generator=gen)
    codes[(codes & 0x7F) == 0x7F] ^= 1
    scales = (torch.rand(pages, rows, device=dev, generator=gen) * 0.01 + 0.005).view(torch.uint8)
    return torch.cat([codes, scales.reshape(pages, rows * 4)], dim=1).reshape(pages, rows, ROW).contiguous()


def shape(B, L, reps, flush, copy_gbs, dev, gen):
    blocks = (L + BS - 1) // BS
    pages = B * blocks + 1
    table = torch.randperm(pages, device=dev, generator=gen)[: B * blocks].reshape(B, blocks).int().contiguous()
    pool_cache = random_pages(pages, BS // KPOOL, dev, gen)
    token_cache = random_pages(pages, BS, dev, gen)
    q = torch.randint(0, 256, (B, HI, 128), device=dev, dtype=torch.uint8, generator=gen)
    q[(q & 0x7F) == 0x7F] ^= 1
    q = q.view(torch.float8_e4m3fn)
    q_scale = torch.rand(B, HI, device=dev, generator=gen) * 0.02 + 0.01
    weights = torch.randn(B, HI, device=dev, generator=gen) / (HI * 128) ** 0.5
    visible = torch.full((B,), L, device=dev, dtype=torch.int32)
    logits = torch.empty(B, blocks * (BS // KPOOL), device=dev, dtype=torch.float32)
    pooled_idx = torch.empty(B, WIDTH, device=dev, dtype=torch.int32)
    lens = torch.empty(B, device=dev, dtype=torch.int32)
    token_idx = torch.empty(B, 2048, device=dev, dtype=torch.int32)
    common = dict(q_scale=q_scale)
    t_logits = timed(lambda: latte.indexer_logits(q, weights, pool_cache, table, visible, logits=logits, kpool=KPOOL,
                                                  **common), reps, flush)
    t_pooled = timed(lambda: latte.indexer_topk(q, weights, pool_cache, table, visible, WIDTH, kpool=KPOOL,
                                                pool_topk=POOL_TOPK, select_tail=True, indices=pooled_idx,
                                                out_lens=lens, **common), reps, flush)
    t_token = timed(lambda: latte.indexer_topk(q, weights, token_cache, table, visible, 2048, indices=token_idx,
                                               **common), reps, flush)
    pool_bytes = B * (L // KPOOL) * ROW
    gbs = pool_bytes / (t_logits * 1e3)
    print(f"| {B} | {L // 1024}K | {t_logits:.1f} ({gbs:.0f} GB/s, {100 * gbs / copy_gbs:.0f} % of copy) | "
          f"{t_pooled:.1f} | {t_token:.1f} | {t_pooled / t_token:.2f} |", flush=True)
    assert int(lens.min()) == min(L, POOL_TOPK * KPOOL + L % KPOOL), "unexpected row length"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--contexts", default="8192,32768,131072")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev)
    gen.manual_seed(7)
    flush = torch.empty(64 << 20, device=dev, dtype=torch.float32)
    src = torch.empty(1 << 30, device=dev, dtype=torch.uint8)
    dst = torch.empty_like(src)
    t_copy = timed(lambda: dst.copy_(src), 20, flush)
    copy_gbs = 2 * src.numel() / (t_copy * 1e3)  # read + write
    del src, dst
    print(f"{torch.cuda.get_device_name()}; device-to-device copy {copy_gbs:.0f} GB/s (read + write); "
          f"median of {args.reps}, L2 flushed; us")
    print("| B | context | pooled logits | pooled top-k (512 pools + tail) | token top-k (2048) | pooled / token |")
    print("|---|---|---|---|---|---|")
    for B in (int(x) for x in args.batches.split(",")):
        for L in (int(x) for x in args.contexts.split(",")):
            shape(B, L, args.reps, flush, copy_gbs, dev, gen)


if __name__ == "__main__":
    main()
