"""Tests of latte's vLLM plugin against the real vLLM (scripts/test-vllm installs the pinned
release into .venv-vllm). They run on a machine without a GPU driver:

- ``vllm.platforms.cuda`` imports the compiled extension ``vllm._C_stable_libtorch``, which
  needs ``libcuda.so.1``; without a driver the tests stand in for that one module (an empty
  module in ``sys.modules``) so vLLM's real CUDA selector code can be imported and asked, with
  the device capability mocked per test;
- latte computes on the CPU (``cpu.reference``), the float64 oracle.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MODELS = REPO / "configs" / "models"

vllm = pytest.importorskip("vllm", reason="tests/vllm run in .venv-vllm (scripts/test-vllm)")


def _has_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


if not _has_driver() and "vllm._C_stable_libtorch" not in sys.modules:
    sys.modules["vllm._C_stable_libtorch"] = types.ModuleType("vllm._C_stable_libtorch")


def model_config_dict(name: str) -> dict:
    return json.loads((MODELS / f"{name}.json").read_text())


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory):
    """A directory holding a config.json per model fixture, as vLLM's ModelConfig reads one."""
    dirs = {}
    for path in MODELS.glob("*.json"):
        d = tmp_path_factory.mktemp(path.stem)
        (d / "config.json").write_text(path.read_text())
        dirs[path.stem] = d
    return dirs


_configs = {}


def vllm_config(model_dirs, model: str, *, tp: int = 1, kv_cache_dtype: str = "auto",
                block_size: int = 64, max_num_batched_tokens: int = 256):
    """A real VllmConfig for a model fixture (no weights, no tokenizer), cached per arguments."""
    key = (model, tp, kv_cache_dtype, block_size, max_num_batched_tokens)
    if key in _configs:
        return _configs[key]
    from vllm.config import (CacheConfig, DeviceConfig, ModelConfig, ParallelConfig,
                             SchedulerConfig, VllmConfig)

    model_config = ModelConfig(model=str(model_dirs[model]), skip_tokenizer_init=True,
                               dtype="bfloat16", max_model_len=4096)
    config = VllmConfig(
        model_config=model_config,
        device_config=DeviceConfig(device="cpu"),  # no GPU here; the capability is mocked
        cache_config=CacheConfig(block_size=block_size, cache_dtype=kv_cache_dtype),
        parallel_config=ParallelConfig(tensor_parallel_size=tp),
        scheduler_config=SchedulerConfig(max_num_batched_tokens=max_num_batched_tokens,
                                         max_num_seqs=16, max_model_len=4096,
                                         is_encoder_decoder=False),
    )
    _configs[key] = config
    return config


@pytest.fixture
def clean_overrides():
    """Undo every slot latte took in vLLM's enum, before and after a test."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    def clear():
        for member in AttentionBackendEnum:
            if member.is_overridden() and member.name != "LATTE_MLA_SPARSE":
                member.clear_override()

    clear()
    yield
    clear()


def reload_plugin():
    """A fresh latte.integrations.vllm (its register() runs once per process otherwise)."""
    import latte.integrations.vllm as plugin

    return importlib.reload(plugin)


@pytest.fixture(scope="session", params=[("auto", 1), ("fp8_ds_mla", 0)],
                ids=["bf16-interleaved", "fp8_ds_mla-neox"])
def written(request, tmp_path_factory):
    """What vLLM's own Triton kernels ``fused_norm_rope`` and ``fused_q`` wrote, run on the CPU
    through Triton's interpreter in a process of its own (vllm_cache_writer.py), with their
    inputs: a bf16 MLA cache with GLM-5's interleaved index rope, and an fp8_ds_mla cache with
    DeepSeek-V3.2's NeoX one."""
    import torch

    mla_dtype, interleave = request.param
    out = tmp_path_factory.mktemp("cache") / "written.pt"
    subprocess.run([sys.executable, str(HERE / "vllm_cache_writer.py"), str(out), mla_dtype, "3",
                    str(interleave)], check=True, env=dict(os.environ), capture_output=True,
                   timeout=600)
    data = torch.load(out, weights_only=False)
    data["mla_dtype"] = mla_dtype
    return data


def paged_batch(requests, block, gen):
    """vLLM's metadata of a batch of (query tokens, sequence length) requests: query_start_loc,
    seq_lens, a block table whose rows hold each request's blocks scattered over the cache (not in
    order; -1 past them) and the number of blocks."""
    import torch

    qsl = [0]
    for q, _ in requests:
        qsl.append(qsl[-1] + q)
    seq_lens = [s for _, s in requests]
    max_blocks = max((s + block - 1) // block for s in seq_lens)
    num_blocks = 2 + sum((s + block - 1) // block for s in seq_lens)
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    table = torch.full((len(requests), max_blocks + 1), -1, dtype=torch.int32)
    used = 0
    for r, s in enumerate(seq_lens):
        n = (s + block - 1) // block
        table[r, :n] = torch.tensor(perm[used:used + n], dtype=torch.int32)
        used += n
    return (torch.tensor(qsl, dtype=torch.int32), torch.tensor(seq_lens, dtype=torch.int32),
            table, num_blocks)


def latte_impl(monkeypatch, topk_buffer, kv_cache_dtype, *, num_heads, scale, rope, qk_nope_head_dim,
               q_lora_rank):
    """latte's sparse-MLA impl as vLLM's MLA layer builds it for one rank (no tensor-parallel
    group in a unit test), for a model with ``rope`` rope dims (64, or 0 for GLM-5.3-Flash)."""
    import vllm.model_executor.layers.attention.sparse_mla_attention as sparse

    from latte.integrations.vllm.backend import LatteMLASparseImpl

    monkeypatch.setattr(sparse, "get_tensor_model_parallel_world_size", lambda: 1)
    return LatteMLASparseImpl(
        num_heads=num_heads, head_size=512 + rope, scale=scale, num_kv_heads=1, alibi_slopes=None,
        sliding_window=None, kv_cache_dtype=kv_cache_dtype, logits_soft_cap=None,
        attn_type="decoder", kv_sharing_target_layer_name=None, q_lora_rank=q_lora_rank,
        kv_lora_rank=512, qk_nope_head_dim=qk_nope_head_dim, qk_rope_head_dim=rope,
        qk_head_dim=qk_nope_head_dim + rope, v_head_dim=256, kv_b_proj=None, indexer=None,
        topk_indices_buffer=topk_buffer)
