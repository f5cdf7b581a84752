"""The DSA layer's steps before attention, for GPUs older than sm_89.

vLLM 0.33's DSA attention layer (``vllm.models.deepseek_v32``) prepares every step with two
Triton kernels:

- ``fused_norm_rope``: RMSNorm of ``q_c`` and ``kv_c``, RoPE of ``k_pe``, the MLA cache write,
  LayerNorm + RoPE of the index key, its e4m3 quantization and indexer-cache write, and the
  reset of the top-k buffer to -1;
- ``fused_q``: RoPE of ``q_pe`` (optionally the e4m3 packing of the whole MQA query), RoPE and
  e4m3 quantization of the index query with one power-of-two scale per (token, head), and the
  head weights multiplied by that scale, the softmax scale and ``H_i^-0.5``.

GLM-5.3-Flash's indexer layer (``vllm.models.glm5next``) rotates and quantizes its index query
with a third, ``fwht128_quant_fp8`` (:func:`fwht128_quant_fp8` here).

All cast to Triton's ``fp8e4nv``, which Triton compiles only for sm_89 and newer, so on an
A100 / A10 / RTX 30xx (sm_80, sm_86) the model cannot run a single step. This module computes
the same results with torch operations and latte's cache writers (``kv_store`` and
``indexer_k_store`` with power-of-two scales), each step as one opaque torch custom op: under
``torch.compile`` the op is called as a whole, so no fp8 Triton code is generated for it, and it
is captured in CUDA graphs like any other op. :func:`fused_norm_rope` and :func:`fused_q` take
the arguments vLLM's layer passes to its own functions.

The caches it writes are laid out exactly as vLLM lays them out; the values can differ from
vLLM's by one e4m3 step (latte quantizes the bf16-rounded value) and, for groups whose largest
magnitude is below 0.0448, by a smaller power-of-two scale (vLLM floors the scale at 2^-13).
Imports no vLLM module.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

from ... import ops

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0
# The smallest amax an index row's scale is computed from (as vLLM's kernels do): an all-zero
# row gets a finite scale.
INDEX_AMAX_FLOOR = 1e-4
# The values of vLLM's ``kv_cache_dtype`` whose MLA cache latte writes (bf16 or 656-byte rows).
MLA_CACHE_DTYPES = ("auto", "bfloat16", "fp8_ds_mla")


def needs_portable_prep(capability: Any) -> bool:
    """True on GPUs whose Triton cannot compile vLLM's fp8 DSA kernels (below sm_89)."""
    if capability is None:
        return False
    major, minor = (capability.major, capability.minor) if hasattr(capability, "major") \
        else (int(capability[0]), int(capability[1]))
    return (major, minor) < (8, 9)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()


def _cos_sin(cache: torch.Tensor, positions: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    # vLLM's cos/sin cache rows: [cos of the half rotary dims | sin of them].
    rows = cache.index_select(0, positions.long()).float()
    half = cache.shape[-1] // 2
    return rows[:, :half], rows[:, half:2 * half]


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleave: bool) -> torch.Tensor:
    """RoPE of the first ``2 * half`` dims of float ``x`` ``[T, ..., D]`` (``cos``/``sin``
    ``[T, half]``), the rest unchanged. Interleaved: pairs (2i, 2i + 1), as GLM-5 rotates;
    else pairs (i, i + half) (NeoX), as DeepSeek-V3.2's indexer does."""
    half = cos.shape[-1]
    shape = (cos.shape[0],) + (1,) * (x.dim() - 2) + (half,)
    cos, sin = cos.reshape(shape), sin.reshape(shape)
    rot = x[..., :2 * half]
    if interleave:
        a, b = rot[..., 0::2], rot[..., 1::2]
        rotated = torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)
    else:
        a, b = rot[..., :half], rot[..., half:]
        rotated = torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)
    return torch.cat((rotated, x[..., 2 * half:]), dim=-1) if x.shape[-1] > 2 * half else rotated


def _e4m3_pow2_rows(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """e4m3 codes of float ``x`` with one power-of-two scale per last-dim row: the smallest
    power of two >= max(amax, 1e-4) / 448. Returns (codes, scales without the last dim)."""
    amax = x.abs().amax(dim=-1, keepdim=True).clamp_min(INDEX_AMAX_FLOOR)
    scale = torch.exp2(torch.ceil(torch.log2(amax / E4M3_MAX)))
    return (x / scale).to(E4M3), scale.squeeze(-1)


# 1 / sqrt(128) as a float32 multiplier, as vLLM's GLM-5.3-Flash kernels scale the rotation.
HADAMARD_128_NORM = 0.08838834764831845


def fwht128_quant_fp8(q: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """GLM-5.3-Flash's index-query rotation and quantization, as vLLM's ``fwht128_quant_fp8``
    computes it (same arguments and results): each 128-wide row through the Hadamard-128
    butterflies in float32 (the same additions in the same order, so the same float32 values),
    times 1/sqrt(128), rounded to bf16, then e4m3 codes with one power-of-two scale per row (the
    smallest >= max(amax, 1e-4) / 448). Returns (codes ``[rows, 128]``, scales ``[rows, 1]``)."""
    x = q.float().reshape(-1, 128)
    for stride in (1, 2, 4, 8, 16, 32, 64):
        x = x.view(-1, 128 // (2 * stride), 2, stride)
        x = torch.stack((x[:, :, 0] + x[:, :, 1], x[:, :, 0] - x[:, :, 1]), 2)
    x = (x.reshape(-1, 128) * HADAMARD_128_NORM).bfloat16().float()
    amax = x.abs().amax(dim=-1, keepdim=True).clamp_min(INDEX_AMAX_FLOOR)
    scale = torch.exp2(torch.ceil(torch.log2(amax * (1.0 / E4M3_MAX))))
    return (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3), scale


@torch.library.custom_op("latte_vllm::dsa_norm_rope_store",
                         mutates_args=("q_c_out", "kv_c_out", "k_pe_out", "index_k_out",
                                       "topk_indices_buffer", "mla_kv_cache", "indexer_k_cache"))
def dsa_norm_rope_store(
        positions: torch.Tensor, q_c: torch.Tensor, q_norm_weight: torch.Tensor, q_eps: float,
        kv_c: torch.Tensor, kv_norm_weight: torch.Tensor, kv_eps: float, k_pe: torch.Tensor,
        k_cos_sin: torch.Tensor, index_k: Optional[torch.Tensor],
        index_norm_weight: Optional[torch.Tensor], index_norm_bias: Optional[torch.Tensor],
        index_eps: float, index_cos_sin: Optional[torch.Tensor], topk_indices_buffer: torch.Tensor,
        slot_mapping: Optional[torch.Tensor], indexer_slot_mapping: Optional[torch.Tensor],
        mla_kv_cache: Optional[torch.Tensor],
        indexer_k_cache: Optional[torch.Tensor], index_interleave: bool,
        q_c_out: torch.Tensor, kv_c_out: Optional[torch.Tensor], k_pe_out: Optional[torch.Tensor],
        index_k_out: Optional[torch.Tensor]) -> None:
    """The work of vLLM's ``fused_norm_rope`` (module docstring) for the ``T`` tokens of
    ``positions``: ``q_c_out`` = RMSNorm(q_c); the normalized latent and roped ``k_pe`` go to
    ``kv_c_out`` / ``k_pe_out`` (when given) and to ``mla_kv_cache`` at ``slot_mapping``
    (-1 = not written); with an index key, its LayerNorm + RoPE goes to ``index_k_out`` (when
    given) and, quantized, to ``indexer_k_cache`` at ``indexer_slot_mapping``, and the first
    ``T`` rows of ``topk_indices_buffer`` become -1."""
    tokens = positions.shape[0]
    q_c_out.copy_(_rms_norm(q_c, q_norm_weight, q_eps))
    latent = _rms_norm(kv_c, kv_norm_weight, kv_eps)
    cos, sin = _cos_sin(k_cos_sin, positions)
    rope = _rope(k_pe.float(), cos, sin, interleave=True)
    if kv_c_out is not None:
        kv_c_out.copy_(latent)
    if k_pe_out is not None:
        k_pe_out.copy_(rope)
    slots = slot_mapping.to(torch.int32) if slot_mapping is not None else None
    if mla_kv_cache is not None and slots is not None and tokens > 0:
        ops.kv_store(latent.to(torch.bfloat16), rope.to(torch.bfloat16), slots, mla_kv_cache,
                     scale_kind="pow2")
    if index_k is None:
        return
    topk_indices_buffer[:tokens].fill_(-1)
    key = torch.nn.functional.layer_norm(index_k.float(), (index_k.shape[-1],),
                                         index_norm_weight.float(), index_norm_bias.float(),
                                         index_eps)
    icos, isin = _cos_sin(index_cos_sin, positions)
    key = _rope(key, icos, isin, index_interleave)
    if index_k_out is not None:
        index_k_out.copy_(key)
    if indexer_k_cache is not None and tokens > 0:
        index_slots = indexer_slot_mapping.to(torch.int32) \
            if indexer_slot_mapping is not None else slots
        if index_slots is not None:
            ops.indexer_k_store(key.to(torch.bfloat16), index_slots, indexer_k_cache,
                                scale_kind="pow2")


@dsa_norm_rope_store.register_fake
def _(*args: Any) -> None:
    return None


@torch.library.custom_op("latte_vllm::dsa_query_prep",
                         mutates_args=("index_q_out", "index_weights_out", "mqa_q_out"))
def dsa_query_prep(
        positions: torch.Tensor, q_pe: torch.Tensor, q_cos_sin: torch.Tensor,
        index_q: Optional[torch.Tensor], index_cos_sin: Optional[torch.Tensor],
        ql_nope: torch.Tensor, q_scale: torch.Tensor, index_weights: Optional[torch.Tensor],
        softmax_scale: float, head_scale: float, index_interleave: bool, quantize_mqa: bool,
        index_q_out: torch.Tensor, index_weights_out: torch.Tensor,
        mqa_q_out: torch.Tensor) -> None:
    """The work of vLLM's ``fused_q`` (module docstring): ``mqa_q_out`` = the roped ``q_pe``
    (or, with ``quantize_mqa``, e4m3 ``[ql_nope | roped q_pe] / q_scale``); with an index query,
    ``index_q_out`` its roped e4m3 codes and ``index_weights_out`` = weights x the row's scale x
    ``softmax_scale`` x ``head_scale``."""
    cos, sin = _cos_sin(q_cos_sin, positions)
    rope = _rope(q_pe.float(), cos, sin, interleave=True)
    if quantize_mqa:
        inv = 1.0 / q_scale.float().reshape(())
        mqa_q_out.copy_(torch.cat((ql_nope.float() * inv, rope * inv), dim=-1).to(E4M3))
    else:
        mqa_q_out.copy_(rope)
    if index_q is None:
        return
    icos, isin = _cos_sin(index_cos_sin, positions)
    codes, scale = _e4m3_pow2_rows(_rope(index_q.float(), icos, isin, index_interleave))
    index_q_out.copy_(codes)
    index_weights_out.copy_(index_weights.float() * scale * (softmax_scale * head_scale))


@dsa_query_prep.register_fake
def _(*args: Any) -> None:
    return None


def fused_norm_rope(positions, q_c, q_norm_weight, q_eps, kv_c, kv_norm_weight, kv_eps, k_pe,
                    k_cos_sin, index_k, index_norm_weight, index_norm_bias, index_eps,
                    index_cos_sin, topk_indices_buffer, slot_mapping=None,
                    indexer_slot_mapping=None, indexer_k_cache=None, indexer_cache_shuffled=False,
                    mla_kv_cache=None, mla_kv_cache_dtype="auto", mla_k_scale=None,
                    has_indexer=True, index_rope_interleave=False, q_c_out=None, kv_c_out=None,
                    k_pe_out=None, index_k_out=None, skip_scale=False):
    """Takes the place of vLLM's ``fused_norm_rope`` (same arguments); returns the normalized
    ``q_c``. ``mla_k_scale`` and ``skip_scale`` belong to cache dtypes latte does not serve."""
    if indexer_cache_shuffled:
        raise NotImplementedError("latte writes the indexer cache in vLLM's CUDA layout, not "
                                  "the shuffled one; set LATTE_VLLM=off")
    if mla_kv_cache is not None:
        if mla_kv_cache_dtype not in MLA_CACHE_DTYPES:
            raise NotImplementedError(
                f"latte writes the MLA cache as bf16 or fp8_ds_mla, not kv_cache_dtype "
                f"{mla_kv_cache_dtype!r}; pass --kv-cache-dtype fp8_ds_mla or auto")
    if slot_mapping is None:
        mla_kv_cache = indexer_k_cache = None
    if q_c_out is None:
        q_c_out = torch.empty_like(q_c)
    if not has_indexer:
        index_k = index_norm_weight = index_norm_bias = index_cos_sin = None
        indexer_k_cache = None
    dsa_norm_rope_store(positions, q_c, q_norm_weight, float(q_eps), kv_c, kv_norm_weight,
                        float(kv_eps), k_pe, k_cos_sin, index_k, index_norm_weight,
                        index_norm_bias, float(index_eps), index_cos_sin, topk_indices_buffer,
                        slot_mapping, indexer_slot_mapping, mla_kv_cache, indexer_k_cache, bool(index_rope_interleave), q_c_out, kv_c_out,
                        k_pe_out, index_k_out)
    return q_c_out


def fused_q(positions, q_pe, q_cos_sin, index_q, index_cos_sin, ql_nope, q_scale, index_weights,
            softmax_scale, head_scale, has_indexer=True, index_rope_interleave=False,
            quantize_mqa=True):
    """Takes the place of vLLM's ``fused_q`` (same arguments); returns ``(index_q_fp8,
    index_weights_out, mqa_q)`` as it does: ``mqa_q`` e4m3 ``[T, H, 576]`` with
    ``quantize_mqa``, else the roped ``q_pe`` in its dtype."""
    tokens, heads = q_pe.shape[0], q_pe.shape[1]
    if quantize_mqa:
        mqa_q = torch.empty((tokens, heads, ql_nope.shape[2] + q_pe.shape[2]), dtype=E4M3,
                            device=q_pe.device)
    else:
        mqa_q = torch.empty_like(q_pe)
    if has_indexer:
        index_q_fp8 = torch.empty(index_q.shape, dtype=E4M3, device=index_q.device)
        weights_out = torch.empty(index_weights.shape, dtype=torch.float32,
                                  device=index_weights.device)
    else:  # a layer without an indexer: placeholders, as vLLM returns
        index_q = index_cos_sin = index_weights = None
        index_q_fp8 = torch.empty((1, 1, 1), dtype=E4M3, device=q_pe.device)
        weights_out = torch.empty((1, 1), dtype=torch.float32, device=q_pe.device)
    dsa_query_prep(positions, q_pe, q_cos_sin, index_q, index_cos_sin, ql_nope, q_scale,
                   index_weights, float(softmax_scale), float(head_scale),
                   bool(index_rope_interleave), bool(quantize_mqa), index_q_fp8, weights_out,
                   mqa_q)
    return index_q_fp8, weights_out, mqa_q
