"""PyTorch peers for bench/indexer, measured in the same run as bench_indexer:
torch.topk over the decode shapes' rows and over 8 x 131072, the eager indexer (e4m3 K
dequantized to bf16, bmm, ReLU, weighted head sum) and a device copy. One JSON object per line."""
import json
import sys

import torch


def time_us(fn, reps=20, warm=3):
    """Time per call with the calls queued back to back between two events (as bench_indexer)."""
    for _ in range(warm):
        fn(0)
    torch.cuda.synchronize()
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    a.record()
    for i in range(reps):
        fn(i)
    b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1000.0 / reps


def main():
    quick = "--quick" in sys.argv
    dev = torch.device("cuda")
    print(json.dumps({"kind": "torch", "version": torch.__version__, "gpu": torch.cuda.get_device_name(0)}))
    n = 1 << 28  # 1 GiB of f32
    a = torch.empty(n, dtype=torch.float32, device=dev).normal_()
    b = torch.empty_like(a)
    us = time_us(lambda i: b.copy_(a), 10, 2)
    print(json.dumps({"kind": "torch_copy", "us": us, "gbs": 2 * 4 * n / (us * 1e3)}))
    del a, b
    sets = [torch.randn(8, 131072, device=dev) for _ in range(8)]
    us = time_us(lambda i: torch.topk(sets[i % 8], 2048, dim=1), 50, 5)
    print(json.dumps({"kind": "torch_topk", "rows": 8, "n": 131072, "k": 2048, "us": us}))
    del sets
    batches = [1, 32] if quick else [1, 32, 128]
    ctxs = [32768] if quick else [8192, 32768, 131072]
    for B in batches:
        for ctx in ctxs:
            x = torch.randn(B, ctx, device=dev)
            us = time_us(lambda i: torch.topk(x, 2048, dim=1))
            print(json.dumps({"kind": "torch_topk", "rows": B, "n": ctx, "k": 2048, "us": us}))
            del x
    # Eager indexer decode, B = 32, 32K context: fp8 K (as stored) -> bf16, bmm, relu, weighted sum.
    for H in (32, 64):
        B, ctx = 32, 32768
        k8 = (torch.randn(B, ctx, 128, device=dev) * 0.1).to(torch.float8_e4m3fn)
        ks = torch.rand(B, ctx, device=dev) * 0.01
        q = torch.randn(B, H, 128, device=dev, dtype=torch.bfloat16)
        w = torch.randn(B, H, device=dev) * 0.01

        def eager(i):
            k = k8.to(torch.bfloat16)
            s = torch.bmm(q, k.transpose(1, 2)).float()  # [B, H, ctx]
            s = torch.relu(s) * w[:, :, None]
            return s.sum(1) * ks

        us = time_us(eager, 10, 2)
        print(json.dumps({"kind": "torch_eager_indexer", "H": H, "B": B, "ctx": ctx, "us": us,
                          "gbs": B * ctx * 132 / (us * 1e3)}))
        del k8, ks, q, w


if __name__ == "__main__":
    main()
