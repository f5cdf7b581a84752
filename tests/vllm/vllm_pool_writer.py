"""Runs vLLM's own GLM-5.3-Flash pool-key writer (``kpool_compress_and_write_cache``: the gated
mix of 4 tokens' indexer keys, the Hadamard-128 rotation, one power-of-two scale, e4m3 codes into
the pooled indexer cache) and its index-query rotation (``fwht128_quant_fp8``) on the CPU through
Triton's interpreter, and saves their inputs and what they wrote.

Run as a separate process (tests/vllm/test_glm53.py does), as vllm_cache_writer.py:

    python vllm_pool_writer.py OUT.pt SEED
"""

import os
import sys
import types

os.environ["TRITON_INTERPRET"] = "1"
os.environ["CUDA_VISIBLE_DEVICES"] = ""
sys.modules.setdefault("vllm._C_stable_libtorch", types.ModuleType("vllm._C_stable_libtorch"))

import torch  # noqa: E402

from vllm.models.glm5next.nvidia.ops import kpool_compress  # noqa: E402

KPOOL, BLOCK, NUM_BLOCKS, PAD_ROWS = 4, 64, 5, 3  # BLOCK tokens per block: 16 pool rows
ROWS = BLOCK // KPOOL


def main(out_path, seed):
    gen = torch.Generator().manual_seed(seed)
    # A per-layer view with a padded block stride, as vLLM binds a layer's cache.
    raw = torch.zeros(NUM_BLOCKS, (ROWS + PAD_ROWS) * 132, dtype=torch.uint8)
    cache = raw[:, :ROWS * 132].view(NUM_BLOCKS, ROWS, 132)
    pools = 40
    # Keys of very different magnitudes, so the scales span many powers of two.
    mag = torch.exp2(torch.randint(-6, 6, (pools, 1, 1), generator=gen).float())
    slot_k = (torch.randn(pools, KPOOL, 128, generator=gen) * mag).bfloat16()
    slot_score = torch.randn(pools, KPOOL, 128, generator=gen).bfloat16()
    ape = torch.randn(KPOOL, 128, generator=gen) * 0.5
    # One request whose blocks are scattered over the cache; pool p lands at pool slot
    # block * ROWS + row (block = its block of tokens 4p .. 4p + 3), as vLLM's pool-granular
    # slot mapping gives it to the last token of each complete pool.
    blocks = torch.randperm(NUM_BLOCKS, generator=gen)[:(pools + ROWS - 1) // ROWS]
    p = torch.arange(pools)
    loc = (blocks[p // ROWS] * ROWS + p % ROWS).to(torch.int64)
    kpool_compress.kpool_compress_and_write_cache(
        cache, slot_k, slot_score, ape, loc, pool_size=KPOOL, head_dim=128, round_scale=True)
    queries = (torch.randn(6 * 32, 128, generator=gen) * 3).bfloat16()
    q_fp8, q_scale = kpool_compress.fwht128_quant_fp8(queries)
    torch.save({"cache": cache.contiguous(), "slot_k": slot_k, "slot_score": slot_score,
                "ape": ape, "loc": loc, "blocks": blocks.to(torch.int32), "queries": queries, "q_fp8": q_fp8,
                "q_scale": q_scale, "rows": ROWS, "kpool": KPOOL}, out_path)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
