"""Diagnostic: the GLM-5 example's indexer on CUDA, split into scoring and selection.
Prints, for the prefill step: latte logits vs torch scores (from the same cache bytes),
latte top-k vs the exact top-k of latte's own logits, and slice / path variants."""
import os, sys, importlib.util, torch, latte
spec = importlib.util.spec_from_file_location("ex", "examples/dsa_layer_glm5.py")
ex = importlib.util.module_from_spec(spec); sys.modules["ex"] = ex; spec.loader.exec_module(ex)

def exact_topk(logits, topk):
    # ties to the smaller position: stable sort on descending scores
    order = torch.sort(logits, dim=1, descending=True, stable=True).indices[:, :topk]
    valid = torch.gather(logits, 1, order) > float("-inf")
    return torch.where(valid, order, torch.full_like(order, -1)).sort(dim=1).values

def compare_sets(name, got, want, logits, topk, limit=4):
    g = got.clone(); g[g < 0] = 1 << 30; g = g.sort(dim=1).values
    w = want.clone(); w[w < 0] = 1 << 30; w = w.sort(dim=1).values
    bad = (g != w).any(dim=1).nonzero().flatten().tolist()
    print(f"{name}: {len(bad)} of {got.shape[0]} rows differ from the exact top-k of latte's logits")
    for r in bad[:limit]:
        gs = set(got[r][got[r] >= 0].tolist()); ws = set(want[r][want[r] >= 0].tolist())
        extra = sorted(gs - ws); miss = sorted(ws - gs)
        row = logits[r]
        kth = torch.sort(row, descending=True).values[min(topk, row.numel()) - 1].item()
        print(f"  row {r}: {len(gs)} chosen, extra {extra[:5]} (scores {[round(row[i].item(), 5) for i in extra[:5]]}),"
              f" missing {miss[:5]} (scores {[round(row[i].item(), 5) for i in miss[:5]]}), kth {kth:.5f},"
              f" visible {(row > float('-inf')).sum().item()}, missing ranks {[(row > row[i]).sum().item() + 1 for i in miss[:5]]}")
    return len(bad)

def main():
    dev = torch.device("cuda")
    torch.manual_seed(0)
    batch, context, topk = 2, int(os.environ.get("CTX", 4096)), int(os.environ.get("TOPK", 2048))
    layer = ex.Glm5DsaAttention(8, dev, 0)
    caches = ex.PagedCaches(batch, context + 1, "bf16", dev, 0)
    requests = torch.arange(batch).repeat_interleave(context).to(dev)
    positions = torch.arange(context).repeat(batch).to(dev)
    x = torch.randn(len(requests), ex.HIDDEN, device=dev).bfloat16()
    p = layer.project(x, positions)
    slots = caches.slots(requests, positions)
    latte.kv_store(p.latent, p.k_pe, slots, caches.kv)
    latte.indexer_k_store(p.index_k, slots, caches.index_k)
    vis = (positions + 1).int(); tr = requests.int()
    args = (p.index_q, p.index_w, caches.index_k, caches.block_table, vis)
    logits = latte.indexer_logits(*args, token_request=tr)
    torch.cuda.synchronize()
    # torch scores from the cache bytes latte wrote
    bs = caches.index_k.shape[1]
    pages = caches.index_k.reshape(caches.index_k.shape[0], -1)
    kq = pages[:, : bs * 128].reshape(-1, bs, 128).view(torch.float8_e4m3fn).float()
    ks = pages[:, bs * 128:].contiguous().view(torch.float32).reshape(-1, bs)
    kdeq = kq * ks[..., None]
    worst = 0.0
    for r in range(batch):
        rows = (requests == r).nonzero().flatten()
        blk = caches.block_table[r].long()
        keys = kdeq[blk].reshape(-1, 128)[: context]
        for part in rows.split(512):
            dots = torch.einsum("njd,ld->njl", p.index_q[part].float(), keys).clamp_min(0)
            sc = torch.einsum("nj,njl->nl", p.index_w[part], dots)
            visible = torch.arange(context, device=dev)[None, :] <= positions[part][:, None]
            sc = sc.masked_fill(~visible, float("-inf"))
            lg = logits[part, :context]
            fin = torch.isfinite(sc)
            if not torch.equal(fin, torch.isfinite(lg)):
                print(f"request {r}: -inf pattern differs"); worst = float("inf"); continue
            span = sc[fin].abs().max()
            worst = max(worst, ((lg - sc)[fin].abs().max() / span).item())
    print(f"logits vs torch (same cache bytes): worst |diff| / span = {worst:.2e}")
    want = exact_topk(logits, topk)
    for path in ("unfused", "fused", None):
        if path: os.environ["LATTE_CUDA_INDEXER_PATH"] = path
        else: os.environ.pop("LATTE_CUDA_INDEXER_PATH", None)
        got = latte.indexer_topk(*args, topk, token_request=tr, kind="logical")
        torch.cuda.synchronize()
        compare_sets(f"path {path or 'automatic'} all {len(requests)} tokens", got, want, logits, topk)
        again = latte.indexer_topk(*args, topk, token_request=tr, kind="logical")
        print(f"  repeat identical: {torch.equal(got, again)}")
    os.environ.pop("LATTE_CUDA_INDEXER_PATH", None)
    for lo, hi in ((0, 64), (context - 64, context), (context + 2000, context + 2064)):
        sl = slice(lo, hi)
        got = latte.indexer_topk(p.index_q[sl], p.index_w[sl], caches.index_k, caches.block_table, vis[sl], topk,
                                 token_request=tr[sl], kind="logical")
        compare_sets(f"tokens [{lo}, {hi}) alone", got, want[sl], logits[sl], topk)
    # the same logits through the plain row top-k (f32 source)
    print("diag done")

main()
