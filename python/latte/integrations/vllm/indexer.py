"""The DSA indexer through latte, inside vLLM: scores + exact top-k on vLLM's indexer cache.

vLLM 0.33's CUDA DSA model (``vllm.models.deepseek_v32``) writes both caches itself (its fused
norm/rope kernel) and then calls the indexer *function* ``sparse_attn_indexer``, whose logits
need DeepGEMM (sm_90 / sm_100 only). Two pieces replace it where DeepGEMM is missing or
``LATTE_VLLM=prefer``:

- :class:`LatteSparseAttnIndexer`, registered with ``CustomOp.register_oot`` under
  ``SparseAttnIndexer``: vLLM builds it instead of its own op, whose constructor refuses to run
  without DeepGEMM.
- :class:`LatteDsaForCausalLM`, registered with ``ModelRegistry.register_model`` for the DSA
  architectures: vLLM's own model class, whose attention layers compute their top-k with
  :func:`run_indexer` (``latte.indexer_topk``, logical positions into vLLM's top-k buffer)
  before vLLM's own attention step runs. Below sm_89 its layers also prepare the step through
  latte (:mod:`.prep`): vLLM's Triton kernels for that step need fp8 support sm_80 / sm_86 lack.
"""

from __future__ import annotations

import threading
import types
from typing import Any, Dict, Tuple

import torch

from vllm.compilation.breakable_cudagraph import eager_break_during_capture
from vllm.forward_context import get_forward_context
from vllm.model_executor.layers.sparse_attn_indexer import SparseAttnIndexer
from vllm.models.deepseek_v32.attention import DeepseekV32Attention

from . import kernels, prep

DSA_ARCHITECTURES = ("DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM")

_ones: Dict[Tuple[Any, int], torch.Tensor] = {}
_ones_rows: Dict[Tuple[Any, int, int], torch.Tensor] = {}
_ones_lock = threading.Lock()


def q_scale_ones(device: torch.device, heads: int, tokens: int) -> torch.Tensor:
    # vLLM folds the query's scale into the head weights; latte's e4m3 query then takes a scale
    # of 1 per (token, head): rows of one buffer per device and head count, grown outside graph
    # capture, its [tokens] views kept (a slice per layer would cost a launch's host time).
    key = (device, heads, tokens)
    view = _ones_rows.get(key)
    if view is not None:
        return view
    with _ones_lock:
        ones = _ones.get(key[:2])
        if ones is None or ones.shape[0] < tokens:
            ones = torch.ones((max(tokens, 8192), heads), dtype=torch.float32, device=device)
            _ones[key[:2]] = ones
            _ones_rows.clear()  # views of the old buffer
        if len(_ones_rows) > 4096:
            _ones_rows.clear()
        view = _ones_rows[key] = ones[:tokens]
    return view


def run_indexer(layer: Any, q_fp8: torch.Tensor, weights: torch.Tensor,
                positions: torch.Tensor) -> bool:
    """Fills ``layer.topk_indices_buffer`` for this step's tokens with latte's exact top-k.

    ``layer`` is vLLM's DSA attention layer (its ``indexer.k_cache`` and ``layer_name`` name the
    metadata of this step). Returns False when there is no step metadata (vLLM's profiling run),
    where nothing is computed."""
    md_all = get_forward_context().attn_metadata
    if not isinstance(md_all, dict):
        return False
    mla_md = md_all.get(layer.layer_name)
    index_md = md_all.get(layer.indexer.k_cache.prefix)
    if mla_md is None or index_md is None:
        return False
    tokens = int(mla_md.num_actual_tokens)
    visible = getattr(mla_md, "visible_lens", None)
    if visible is None:  # vLLM's own attention backend: the causal length from the positions
        visible = positions[:tokens].to(torch.int32) + 1
    block_table = index_md.block_table if index_md.block_table is not None else mla_md.block_table
    topk_out = layer.topk_indices_buffer
    if topk_out.shape[1] != layer.indexer.topk_tokens:
        topk_out = topk_out[:, :layer.indexer.topk_tokens]
    kernels.indexer_topk_logical(
        kernels.rows(q_fp8, tokens), kernels.rows(weights, tokens),
        layer.indexer.k_cache.kv_cache, block_table, mla_md.req_id_per_token, visible,
        q_scale=q_scale_ones(q_fp8.device, q_fp8.shape[1], tokens), topk_out=topk_out)
    return True


class LatteSparseAttnIndexer(SparseAttnIndexer):
    """vLLM's indexer op without its DeepGEMM requirement: the attention layers of
    :class:`LatteDsaForCausalLM` compute the top-k through latte (:func:`run_indexer`)."""

    def __init__(self, k_cache: Any, quant_block_size: int, scale_fmt: str, topk_tokens: int,
                 head_dim: int, max_model_len: int, max_total_seq_len: int,
                 topk_indices_buffer: torch.Tensor, skip_k_cache_insert: bool = False,
                 use_fp4_cache: bool = False, compress_ratio: int = 1,
                 candidate_blocks: Any = None, candidate_block_size: int = 0,
                 candidate_write: bool = False) -> None:
        if use_fp4_cache or compress_ratio != 1 or candidate_blocks is not None:
            raise NotImplementedError(
                "latte's indexer reads the fp8 indexer cache of DeepSeek-V3.2 / GLM-5 (no FP4 "
                "cache, compression or candidate blocks); set LATTE_VLLM=off for this model")
        torch.nn.Module.__init__(self)
        self._enforce_enable = False
        self._forward_method = self.forward_latte
        self.k_cache = k_cache
        self.quant_block_size = quant_block_size
        self.scale_fmt = scale_fmt
        self.topk_tokens = topk_tokens
        self.head_dim = head_dim
        self.max_model_len = max_model_len
        self.max_total_seq_len = max_total_seq_len
        self.topk_indices_buffer = topk_indices_buffer
        self.skip_k_cache_insert = skip_k_cache_insert
        self.use_fp4_cache = use_fp4_cache
        self.compress_ratio = compress_ratio
        self.candidate_blocks = None
        self.candidate_block_size = 0
        self.candidate_write = False
        self.dense_mha_metadata_layer_name = ""
        self.topk_backend = "latte"
        self.dcp_world_size = 1
        self.dcp_rank = 0
        self.use_pcp = False
        self.pcp_shard_decode_requests = False

    def forward_latte(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        raise NotImplementedError(
            "latte computes the indexer inside the DSA attention layer (LatteDsaForCausalLM); "
            "this model called the indexer op directly, which latte does not serve. Set "
            "LATTE_VLLM=off, or install DeepGEMM for vLLM's own indexer")


class LatteDeepseekV32Attention(DeepseekV32Attention):
    """vLLM's DSA attention layer whose indexer step runs through latte."""

    @eager_break_during_capture
    def _sparse_indexer_and_attn(self, positions, q_c, q_nope, q_pe, index_q_fp8, index_k,
                                 index_weights_out, kv_c, k_pe, ql_nope, mqa_q, output):
        vllm_step = DeepseekV32Attention._sparse_indexer_and_attn.__wrapped__
        args = (positions, q_c, q_nope, q_pe, index_q_fp8, index_k, index_weights_out, kv_c,
                k_pe, ql_nope, mqa_q, output)
        if self.indexer is None or self.skip_topk or self.use_pcp or index_q_fp8 is None:
            return vllm_step(self, *args)
        run_indexer(self, index_q_fp8, index_weights_out, positions)
        # vLLM's step then skips its own indexer (skip_topk) and runs the attention.
        self.skip_topk = True
        try:
            return vllm_step(self, *args)
        finally:
            self.skip_topk = False


def rebind(function: Any, **names: Any) -> Any:
    """vLLM's own ``function``, its code unchanged, with the module-level ``names`` it calls
    bound to latte's (a copy: vLLM's module and function are left as they are)."""
    bound = types.FunctionType(function.__code__, dict(function.__globals__, **names),
                               function.__name__, function.__defaults__, function.__closure__)
    bound.__kwdefaults__ = function.__kwdefaults__
    bound.__qualname__ = function.__qualname__
    bound.__doc__ = function.__doc__
    return bound


def _forward_with_latte_prep() -> Any:
    """vLLM's own ``DeepseekV32Attention.forward`` with the two Triton helpers it calls
    (``fused_norm_rope``, ``fused_q``) bound to latte's (:mod:`.prep`)."""
    return rebind(DeepseekV32Attention.forward, fused_norm_rope=prep.fused_norm_rope,
                  fused_q=prep.fused_q)


class LattePrepDeepseekV32Attention(LatteDeepseekV32Attention):
    """The DSA attention layer for GPUs below sm_89, where Triton cannot compile vLLM's fp8
    step-preparation kernels: latte computes that step too (:mod:`.prep`)."""

    forward = _forward_with_latte_prep()


def attention_class(capability: Any) -> type:
    """The class latte gives vLLM's DSA attention layers on a GPU of ``capability``."""
    if prep.needs_portable_prep(capability):
        return LattePrepDeepseekV32Attention
    return LatteDeepseekV32Attention


def _base_model_class() -> type:
    from vllm.models.deepseek_v32.nvidia.model import DeepseekV32ForCausalLM

    return DeepseekV32ForCausalLM


class LatteDsaForCausalLM(_base_model_class()):
    """vLLM's DSA model (GLM-5, DeepSeek-V3.2) with the indexer step through latte."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from vllm.platforms import current_platform

        super().__init__(*args, **kwargs)
        cls = attention_class(current_platform.get_device_capability())
        for module in self.modules():
            if type(module) is DeepseekV32Attention:
                module.__class__ = cls
