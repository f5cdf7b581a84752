"""The math of docs/design.md, sections 2 to 4, and its byte layouts (section 6) in torch
float64, on whatever device the inputs are (the GPU tests compare latte's CUDA backends with it
without leaving the GPU)."""

from __future__ import annotations

import torch


def unpack_mla_cache(cache: torch.Tensor) -> torch.Tensor:
    """[nb, bs, 576] bf16 or [nb, bs, 656] uint8 (fp8_ds_mla) -> [nb * bs, 576] float64."""
    flat = cache.reshape(-1, cache.shape[-1])
    if cache.dtype == torch.bfloat16:
        return flat.double()
    latent = flat[:, :512].contiguous().view(torch.float8_e4m3fn).double()
    scales = flat[:, 512:528].contiguous().view(torch.float32).double()
    rope = flat[:, 528:656].contiguous().view(torch.bfloat16).double()
    return torch.cat([latent * scales.repeat_interleave(128, dim=1), rope], dim=1)


def unpack_indexer_cache(k_cache: torch.Tensor) -> torch.Tensor:
    """[nb, bs, 132] uint8 pages (bs*128 e4m3 codes, then bs float32 scales) -> [nb*bs, 128]."""
    nb, bs, _ = k_cache.shape
    pages = k_cache.reshape(nb, bs * 132)
    codes = pages[:, :bs * 128].contiguous().view(torch.float8_e4m3fn).double().reshape(nb, bs, 128)
    scales = pages[:, bs * 128:].contiguous().view(torch.float32).double().reshape(nb, bs, 1)
    return (codes * scales).reshape(nb * bs, 128)


def attend(q: torch.Tensor, keys: torch.Tensor, valid: torch.Tensor, scale: float):
    """q [N, H, 576], keys [N, K, 576], valid [N, K] -> out [N, H, 512], lse [N, H]
    (out = 0 and lse = -inf where a row has no valid key)."""
    scores = scale * torch.einsum("nhd,nkd->nhk", q.double(), keys)
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    p = torch.exp(scores - lse[..., None]).nan_to_num(0.0)
    return torch.einsum("nhk,nkd->nhd", p, keys[..., :512]), lse


def sparse_mla(q, cache, indices, scale):
    """q [T, H, 576] bf16, cache as latte takes it, indices [T, topk] slots (-1 = none)."""
    flat = unpack_mla_cache(cache)
    valid = (indices >= 0) & (indices < flat.shape[0])
    keys = flat[indices.clamp(0, flat.shape[0] - 1).long()]
    return attend(q, keys, valid, scale)


def mla_decode(q, cache, block_table, seq_lens, scale):
    """q [B, s_q, H, 576]: query i of request b sees positions 0 .. seq_lens[b] - s_q + i."""
    flat = unpack_mla_cache(cache)
    b, s_q, h, _ = q.shape
    block_size = cache.shape[1]
    positions = torch.arange(block_table.shape[1] * block_size, device=q.device)
    slots = block_table.long()[:, positions // block_size] * block_size + positions % block_size
    last = seq_lens.long()[:, None] - s_q + torch.arange(s_q, device=q.device)[None, :]  # [B, s_q]
    valid = positions[None, None, :] <= last[:, :, None]                              # [B, s_q, L]
    keys = flat[slots][:, None].expand(b, s_q, -1, -1).reshape(b * s_q, -1, 576)
    out, lse = attend(q.reshape(b * s_q, h, 576), keys, valid.reshape(b * s_q, -1), scale)
    return out.reshape(b, s_q, h, 512), lse.reshape(b, s_q, h)


def indexer_logits(q, weights, k_cache, block_table, visible_lens, q_scale=None):
    """I[t, p] for every position p the block table maps (-inf where p >= visible_lens[t])."""
    keys = unpack_indexer_cache(k_cache)
    block_size = k_cache.shape[1]
    positions = torch.arange(block_table.shape[1] * block_size, device=q.device)
    slots = block_table.long()[:, positions // block_size] * block_size + positions % block_size
    qd = q.double() if q_scale is None else q.double() * q_scale.double()[..., None]
    dots = torch.einsum("tjd,tpd->tjp", qd, keys[slots]).clamp_min(0.0)
    scores = torch.einsum("tj,tjp->tp", weights.double(), dots)
    return scores.masked_fill(positions[None, :] >= visible_lens.long()[:, None], float("-inf"))
