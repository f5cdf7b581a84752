#!/usr/bin/env python3
"""A DeepSeek-Sparse-Attention layer of GLM-5 in PyTorch, with latte doing the attention.

This is how an inference engine calls latte: the projections stay in torch; latte writes the
paged caches, runs the lightning indexer's top-k and the sparse MLA attention, on torch's
current stream and without copying any tensor. One tensor-parallel rank (TP8: 8 heads) with
random weights runs a chunked prefill (every token of each request) and then one decode step,
and each output is checked against a torch-only implementation of the same layer.

    python examples/dsa_layer_glm5.py                  # CPU: small context, topk 64
    python examples/dsa_layer_glm5.py --device cuda    # GLM-5's topk 2048 over 4096 tokens

Illustrative simplifications, equal on both sides: rotate-half RoPE, no Hadamard rotation of
the indexer, RMSNorm and LayerNorm without learned weights.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

import torch

import latte

HIDDEN = 6144       # GLM-5 hidden_size (latte.model_spec gives the attention dims)
BLOCK_SIZE = 64     # KV-cache page size in tokens
ROPE_THETA = 1e6    # GLM-5 rope_theta


def rms_norm(x: torch.Tensor) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def rope(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE over the last dim of x [T, ..., d] at `positions` [T]."""
    d = x.shape[-1]
    inv_freq = ROPE_THETA ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    angles = positions.float()[:, None] * inv_freq[None, :]
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (d // 2,)
    cos, sin = angles.cos().reshape(shape), angles.sin().reshape(shape)
    x1, x2 = x.float()[..., : d // 2], x.float()[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def fp8_roundtrip(x: torch.Tensor, group: int) -> torch.Tensor:
    """What an e4m3 cache with one amax/448 scale per `group` values gives back
    (docs/design.md, section 5.3)."""
    g = x.float().reshape(*x.shape[:-1], -1, group)
    amax = g.abs().amax(-1, keepdim=True)
    # The format's scale is the float32 quotient amax / 448. Divide by a tensor: on CUDA, torch
    # divides by a Python scalar as a multiplication by its reciprocal, which is an ulp off for
    # about half the groups (and then moves some codes).
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / torch.full_like(amax, 448.0))
    return ((g / scale).to(torch.float8_e4m3fn).float() * scale).reshape(x.shape)


@dataclass
class Projected:
    """One step's tokens after the torch projections: what the attention needs."""
    q: torch.Tensor        # [T, H, 576] bf16: W_UK-absorbed latent query + roped q_pe
    latent: torch.Tensor   # [T, 512] bf16: normalized kv_a latent
    k_pe: torch.Tensor     # [T, 64] bf16: roped key
    index_q: torch.Tensor  # [T, 32, 128] bf16
    index_k: torch.Tensor  # [T, 128] bf16
    index_w: torch.Tensor  # [T, 32] f32: weights_proj(x) * H_i^-0.5 * 128^-0.5


class Glm5DsaAttention:
    """One tensor-parallel rank of GLM-5's attention with random weights."""

    def __init__(self, tp: int, device: torch.device, seed: int):
        m = latte.model_spec("glm-5", tp=tp)
        self.heads, self.nope, self.rope_dim = m["heads_per_rank"], m["qk_nope_head_dim"], m["qk_rope_head_dim"]
        self.v_dim, self.kv_rank, self.scale = m["v_head_dim"], m["kv_lora_rank"], m["softmax_scale"]
        self.index_heads, self.index_dim = m["indexer"]["num_heads"], m["indexer"]["head_dim"]
        g = torch.Generator().manual_seed(seed)

        def weight(out_features: int, in_features: int) -> torch.Tensor:
            w = torch.randn(out_features, in_features, generator=g) / math.sqrt(in_features)
            return w.to(device=device, dtype=torch.bfloat16)

        h = self.heads
        self.q_a = weight(m["q_lora_rank"], HIDDEN)
        self.q_b = weight(h * (self.nope + self.rope_dim), m["q_lora_rank"])
        self.kv_a = weight(self.kv_rank + self.rope_dim, HIDDEN)
        kv_b = weight(h * (self.nope + self.v_dim), self.kv_rank).float().reshape(h, -1, self.kv_rank)
        self.w_uk, self.w_uv = kv_b[:, : self.nope], kv_b[:, self.nope:]  # [H, 192 | 256, 512]
        self.o_proj = weight(HIDDEN, h * self.v_dim)
        self.index_wq = weight(self.index_heads * self.index_dim, m["q_lora_rank"])
        self.index_wk = weight(self.index_dim, HIDDEN)
        self.index_weights = weight(self.index_heads, HIDDEN)

    def project(self, x: torch.Tensor, positions: torch.Tensor) -> Projected:
        t, h = x.shape[0], self.heads
        q_lora = rms_norm(x @ self.q_a.T).bfloat16()
        q = (q_lora @ self.q_b.T).reshape(t, h, self.nope + self.rope_dim)
        q_latent = torch.einsum("thd,hdc->thc", q[..., : self.nope].float(), self.w_uk)  # absorb W_UK
        q_pe = rope(q[..., self.nope:], positions)
        kv = x @ self.kv_a.T
        index_q = (q_lora @ self.index_wq.T).reshape(t, self.index_heads, self.index_dim).float()
        index_k = torch.nn.functional.layer_norm((x @ self.index_wk.T).float(), (self.index_dim,))
        half = self.rope_dim  # the indexer ropes its first 64 dims
        index_q = torch.cat([rope(index_q[..., :half], positions), index_q[..., half:]], -1)
        index_k = torch.cat([rope(index_k[..., :half], positions), index_k[..., half:]], -1)
        return Projected(
            q=torch.cat([q_latent, q_pe], -1).bfloat16(),
            latent=rms_norm(kv[:, : self.kv_rank]).bfloat16(),
            k_pe=rope(kv[:, self.kv_rank:], positions).bfloat16(),
            index_q=index_q.bfloat16(),
            index_k=index_k.bfloat16(),
            index_w=(x @ self.index_weights.T).float() * (self.index_heads * self.index_dim) ** -0.5,
        )

    def output(self, latent_out: torch.Tensor) -> torch.Tensor:
        """[T, H, 512] attention output in latent space -> W_UV -> o_proj -> [T, hidden]."""
        v = torch.einsum("thc,hvc->thv", latent_out.float(), self.w_uv)
        return v.reshape(v.shape[0], -1).bfloat16() @ self.o_proj.T


class PagedCaches:
    """The layer's latte caches: MLA KV (bf16 or fp8_ds_mla) and indexer K pages."""

    def __init__(self, batch: int, max_tokens: int, kv_cache: str, device: torch.device, seed: int):
        blocks_per_request = -(-max_tokens // BLOCK_SIZE)
        num_blocks = batch * blocks_per_request + 1
        g = torch.Generator().manual_seed(seed)
        # Each request gets blocks scattered over the cache, as a block allocator would give.
        self.block_table = torch.randperm(num_blocks, generator=g)[: batch * blocks_per_request]
        self.block_table = self.block_table.reshape(batch, blocks_per_request).int().to(device)
        if kv_cache == "bf16":
            self.kv = torch.zeros(num_blocks, BLOCK_SIZE, 576, dtype=torch.bfloat16, device=device)
        else:
            self.kv = torch.zeros(num_blocks, BLOCK_SIZE, 656, dtype=torch.uint8, device=device)
        self.index_k = torch.zeros(num_blocks, BLOCK_SIZE, 132, dtype=torch.uint8, device=device)

    def slots(self, requests: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        blocks = self.block_table[requests.long(), (positions // BLOCK_SIZE).long()]
        return (blocks * BLOCK_SIZE + positions % BLOCK_SIZE).int()


def attention_latte(layer: Glm5DsaAttention, p: Projected, caches: PagedCaches,
                    requests: torch.Tensor, positions: torch.Tensor,
                    topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The engine's attention with latte: cache writes, indexer top-k, sparse MLA.
    Returns the [T, H, 512] output and the chosen logical positions [T, topk] (-1 = none)."""
    slots = caches.slots(requests, positions)
    latte.kv_store(p.latent, p.k_pe, slots, caches.kv)
    latte.indexer_k_store(p.index_k, slots, caches.index_k)
    chosen = latte.indexer_topk(p.index_q, p.index_w, caches.index_k, caches.block_table,
                                (positions + 1).int(), topk, token_request=requests.int(),
                                kind="logical")
    indices = latte.logical_to_slots(chosen, caches.block_table, BLOCK_SIZE, token_request=requests.int())
    return latte.sparse_mla(p.q, caches.kv, indices, layer.scale), chosen


class TorchHistory:
    """The torch-only engine's per-request context, unpaged: what the caches hold, dequantized."""

    def __init__(self, batch: int, kv_cache: str):
        self.kv = [[] for _ in range(batch)]       # [n, 576] float32 per request
        self.index_k = [[] for _ in range(batch)]  # [n, 128] float32
        self.fp8 = kv_cache == "fp8_ds_mla"

    def append(self, p: Projected, requests: torch.Tensor) -> None:
        latent = fp8_roundtrip(p.latent, 128) if self.fp8 else p.latent.float()
        kv = torch.cat([latent, p.k_pe.float()], -1)
        index_k = fp8_roundtrip(p.index_k, 128)
        for r in range(len(self.kv)):
            mine = requests == r
            self.kv[r].append(kv[mine])
            self.index_k[r].append(index_k[mine])


@dataclass
class TorchCheck:
    out: torch.Tensor          # [T, H, 512] float32: attention over latte's chosen tokens
    selection_error: float     # worst |score(latte's pick) - score(torch's pick)|, rank by rank


def attention_torch(layer: Glm5DsaAttention, p: Projected, history: TorchHistory,
                    requests: torch.Tensor, positions: torch.Tensor, topk: int,
                    latte_chosen: torch.Tensor, chunk: int = 256) -> TorchCheck:
    """The same attention in plain torch (float32): indexer scores and top-k, then softmax
    attention. Scores of nearly equal keys can order differently in two correct
    implementations (fp32 sums in another order), and one swapped key at the top-k boundary
    moves a token's output by about 1/sqrt(topk); so the two halves are checked apart: latte's
    chosen set must carry torch's top-k scores, and the attention runs over latte's set."""
    history.append(p, requests)
    out = torch.zeros(p.q.shape[0], layer.heads, 512, device=p.q.device)
    selection_error = 0.0
    for r in range(len(history.kv)):
        kv, keys = torch.cat(history.kv[r]), torch.cat(history.index_k[r])
        for rows in torch.nonzero(requests == r).flatten().split(chunk):
            pos = positions[rows].long()
            dots = torch.einsum("njd,ld->njl", p.index_q[rows].float(), keys).clamp_min(0)
            scores = torch.einsum("nj,njl->nl", p.index_w[rows], dots)
            visible = torch.arange(len(keys), device=pos.device)[None, :] <= pos[:, None]
            scores = scores.masked_fill(~visible, float("-inf"))
            best, _ = scores.topk(min(topk, len(keys)), dim=1)
            picked = latte_chosen[rows, : best.shape[1]].long()
            valid = picked >= 0
            picked_scores = scores.gather(1, picked.clamp_min(0)).masked_fill(~valid, float("-inf"))
            picked_scores, _ = picked_scores.sort(dim=1, descending=True)
            both = torch.isfinite(best) & torch.isfinite(picked_scores)
            if not torch.equal(torch.isfinite(best), torch.isfinite(picked_scores)):
                selection_error = float("inf")  # a different number of tokens was chosen
            elif both.any():
                span = best[both].abs().max().clamp_min(1e-30)
                selection_error = max(selection_error,
                                      ((picked_scores - best)[both].abs().max() / span).item())
            c = kv[picked.clamp_min(0)]                       # [n, k, 576]
            logits = layer.scale * torch.einsum("nhd,nkd->nhk", p.q[rows].float(), c)
            logits = logits.masked_fill(~valid[:, None, :], float("-inf"))
            out[rows] = torch.einsum("nhk,nkd->nhd", logits.softmax(-1), c[..., :512])
    return TorchCheck(out, selection_error)


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--batch", type=int, default=2, help="requests")
    parser.add_argument("--context", type=int, help="prefill tokens per request "
                        "(default: 160 on the CPU, 4096 on CUDA)")
    parser.add_argument("--topk", type=int, help="indexer top-k (default: 64 on the CPU, GLM-5's "
                        "2048 on CUDA)")
    parser.add_argument("--kv-cache", default="bf16", choices=["bf16", "fp8_ds_mla"])
    parser.add_argument("--tp", type=int, default=8, help="tensor-parallel size (heads per rank = 64 / tp)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=2e-2,
                        help="largest relative error of the layer output vs the torch-only layer")
    a = parser.parse_args(argv)
    device = torch.device(a.device)
    on_gpu = device.type == "cuda"
    context = a.context or (4096 if on_gpu else 160)
    topk = a.topk or (2048 if on_gpu else 64)
    torch.manual_seed(a.seed)

    where = f"cuda:{device.index or 0}" if on_gpu else "cpu"
    for op in ("kv_store", "indexer_k_store", "indexer_topk", "sparse_mla"):
        s = latte.select("glm-5", tp=a.tp, kv_cache=a.kv_cache, op=op, device=where)
        print(f"{op:<16} -> {s.backend}  ({s.rule})")

    layer = Glm5DsaAttention(a.tp, device, a.seed)
    caches = PagedCaches(a.batch, context + 1, a.kv_cache, device, a.seed)
    history = TorchHistory(a.batch, a.kv_cache)
    # Step 1 prefills `context` tokens of every request; step 2 decodes one more token each.
    steps = [
        ("prefill", torch.arange(a.batch).repeat_interleave(context), torch.arange(context).repeat(a.batch)),
        ("decode", torch.arange(a.batch), torch.full((a.batch,), context)),
    ]
    passed = True
    for name, requests, positions in steps:
        requests, positions = requests.to(device), positions.to(device)
        x = torch.randn(len(requests), HIDDEN, device=device).bfloat16()
        p = layer.project(x, positions)
        attn_latte, chosen = attention_latte(layer, p, caches, requests, positions, topk)
        check = attention_torch(layer, p, history, requests, positions, topk, chosen)
        error = relative_error(layer.output(attn_latte), layer.output(check.out))
        ok = error <= a.tolerance and check.selection_error <= 1e-3
        passed = passed and ok
        print(f"{name:<8} {len(requests):>6} tokens  topk {topk:<5} indexer picks vs torch top-k: "
              f"score error {check.selection_error:.1e} (<= 1e-3); layer output vs torch-only: "
              f"relative error {error:.2e} (<= {a.tolerance:.0e}) {'ok' if ok else 'FAILED'}")
    print("PASSED" if passed else "FAILED")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
