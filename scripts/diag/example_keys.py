"""Diagnostic: the GLM-5 example's torch-side index keys (fp8_roundtrip in torch) against the
bytes cuda.kv_store wrote, element by element, on the GPU and on the CPU."""
import sys, importlib.util, torch, latte
spec = importlib.util.spec_from_file_location("ex", "examples/dsa_layer_glm5.py")
ex = importlib.util.module_from_spec(spec); sys.modules["ex"] = ex; spec.loader.exec_module(ex)
dev = torch.device("cuda"); torch.manual_seed(0)
batch, context = 2, 4096
layer = ex.Glm5DsaAttention(8, dev, 0)
caches = ex.PagedCaches(batch, context + 1, "bf16", dev, 0)
requests = torch.arange(batch).repeat_interleave(context).to(dev)
positions = torch.arange(context).repeat(batch).to(dev)
x = torch.randn(len(requests), ex.HIDDEN, device=dev).bfloat16()
p = layer.project(x, positions)
slots = caches.slots(requests, positions).long()
latte.indexer_k_store(p.index_k, slots.int(), caches.index_k)
torch.cuda.synchronize()
bs = caches.index_k.shape[1]
pages = caches.index_k.reshape(caches.index_k.shape[0], -1)
codes = pages[:, : bs * 128].reshape(-1, 128)            # [slots, 128] e4m3 bytes
scales = pages[:, bs * 128:].contiguous().view(torch.float32).reshape(-1)
lat = codes[slots].view(torch.float8_e4m3fn).float() * scales[slots][:, None]
for where in ("cuda", "cpu"):
    ref = ex.fp8_roundtrip(p.index_k.to(where), 128).to(dev)
    bad = (ref != lat)
    print(f"fp8_roundtrip on {where}: {bad.sum().item()} of {bad.numel()} values differ from latte's cache;"
          f" max |diff| {(ref - lat).abs().max().item():.3e}")
    idx = bad.nonzero()[:4].tolist()
    for t, d in idx:
        xv = p.index_k[t, d].float().item(); sc = scales[slots[t]].item()
        amax = p.index_k[t].float().abs().max().item()
        print(f"   token {t} dim {d}: x {xv!r} amax {amax!r} latte scale {sc!r} torch scale {amax/448.0!r}"
              f" x/scale {xv/sc!r} latte {lat[t,d].item()!r} torch {ref[t,d].item()!r}")
# the example's own selection metric with keys from the cache instead of the roundtrip
