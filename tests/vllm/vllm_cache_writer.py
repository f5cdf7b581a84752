"""Runs vLLM's own DSA cache writer and query preparation (the Triton kernels ``fused_norm_rope``
and ``fused_q`` of ``vllm.models.deepseek_v32``) on the CPU through Triton's interpreter, and
saves their inputs and what they wrote.

Run as a separate process (tests/vllm/test_cache_bytes.py does): the interpreter and vLLM's
Triton detection are chosen from the environment at import. ``CUDA_VISIBLE_DEVICES=""`` makes
vLLM keep the real Triton with no GPU driver; ``TRITON_INTERPRET=1`` runs its kernels on CPU
tensors.

    python vllm_cache_writer.py OUT.pt MLA_CACHE_DTYPE(auto|fp8_ds_mla) SEED INTERLEAVE(0|1)
"""

import os
import sys
import types

os.environ["TRITON_INTERPRET"] = "1"
os.environ["CUDA_VISIBLE_DEVICES"] = ""
sys.modules.setdefault("vllm._C_stable_libtorch", types.ModuleType("vllm._C_stable_libtorch"))

import torch  # noqa: E402

from vllm.models.deepseek_v32.common.kernels import fused_norm_rope, fused_q  # noqa: E402

BLOCK, NUM_BLOCKS, PAD_ROWS = 16, 6, 2


def _cache(row, dtype):
    # A per-layer view with a padded block stride, as vLLM binds a layer's cache.
    raw = torch.zeros(NUM_BLOCKS, (BLOCK + PAD_ROWS) * row, dtype=dtype)
    return raw[:, :BLOCK * row].view(NUM_BLOCKS, BLOCK, row)


def main(out_path, mla_dtype, seed, interleave):
    gen = torch.Generator().manual_seed(seed)
    tokens = 40
    slots = torch.randperm(NUM_BLOCKS * BLOCK, generator=gen)[:tokens].to(torch.int64)
    positions = torch.randint(0, 4000, (tokens,), generator=gen)
    # Rows of very different magnitudes, so the group scales span many powers of two.
    mag = torch.exp2(torch.randint(-6, 6, (tokens, 1), generator=gen).float())
    q_c = torch.randn(tokens, 2048, generator=gen).bfloat16()
    kv_c = (torch.randn(tokens, 512, generator=gen) * mag).bfloat16()
    k_pe = torch.randn(tokens, 64, generator=gen).bfloat16()
    index_k = (torch.randn(tokens, 128, generator=gen) * mag).bfloat16()
    cos_sin = torch.cat([torch.cos(torch.rand(4096, 32, generator=gen) * 6),
                         torch.sin(torch.rand(4096, 32, generator=gen) * 6)], dim=-1)
    kv_w = (torch.rand(512, generator=gen) + 0.5).bfloat16()
    idx_w = torch.rand(128, generator=gen) + 0.5
    idx_b = torch.randn(128, generator=gen) * 0.1
    fp8 = mla_dtype == "fp8_ds_mla"
    mla = _cache(656 if fp8 else 576, torch.uint8 if fp8 else torch.bfloat16)
    indexer = _cache(132, torch.uint8)
    kv_out = torch.empty_like(kv_c)
    kpe_out = torch.empty_like(k_pe)
    idx_out = torch.empty_like(index_k)
    topk = torch.zeros(tokens, 64, dtype=torch.int32)
    q_w = (torch.rand(2048, generator=gen) + 0.5).bfloat16()
    # The same call (and argument order) as vLLM's DeepseekV32Attention.forward makes.
    norm_args = (positions, q_c, q_w, 1e-6, kv_c, kv_w, 1e-6, k_pe, cos_sin, index_k, idx_w,
                 idx_b, 1e-6, cos_sin, topk)
    norm_kwargs = dict(slot_mapping=slots, indexer_k_cache=indexer, mla_kv_cache=mla,
                       mla_kv_cache_dtype=mla_dtype, kv_c_out=kv_out, k_pe_out=kpe_out,
                       index_k_out=idx_out, index_rope_interleave=interleave)
    inputs = {"norm_args": [a.clone() if torch.is_tensor(a) else a for a in norm_args],
              "norm_kwargs": {k: v.clone() if torch.is_tensor(v) else v
                              for k, v in norm_kwargs.items()}}
    q_c_normed = fused_norm_rope(*norm_args, **norm_kwargs)

    heads, index_heads = 8, 32
    q_pe = torch.randn(tokens, heads, 64, generator=gen).bfloat16()
    ql_nope = torch.randn(tokens, heads, 512, generator=gen).bfloat16()
    index_q = (torch.randn(tokens, index_heads, 128, generator=gen) * mag[:, :, None]).bfloat16()
    index_weights = torch.randn(tokens, index_heads, generator=gen).bfloat16()
    q_args = (positions, q_pe, cos_sin, index_q, cos_sin, ql_nope,
              torch.tensor([0.5], dtype=torch.float32), index_weights, 128 ** -0.5,
              index_heads ** -0.5)
    inputs["q_args"] = q_args
    inputs["q_kwargs"] = dict(has_indexer=True, index_rope_interleave=interleave)
    q_results = {}
    for quantize in (False, True):
        q_results[quantize] = fused_q(*q_args, **inputs["q_kwargs"], quantize_mqa=quantize)
    torch.save({"slots": slots.to(torch.int32), "mla": mla.contiguous(),
                "indexer": indexer.contiguous(), "kv_c": kv_out, "k_pe": kpe_out,
                "index_k": idx_out, "q_c": q_c_normed, "topk": topk, "block": BLOCK,
                "inputs": inputs, "q_results": q_results}, out_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]),
         bool(int(sys.argv[4])) if len(sys.argv) > 4 else True)
