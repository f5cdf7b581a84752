"""GLM-5.3-Flash's pooled indexer through latte, inside vLLM.

vLLM 0.33's GLM-5.3-Flash model (``vllm.models.glm5next``) computes its pooled indexer in one
custom op, ``SparseAttnIndexerKpool`` (pool-key writes, the tail cache of the incomplete pool,
DeepGEMM's scores, the top-k over pools and its expansion to tokens), whose constructor refuses
to run without DeepGEMM. Where DeepGEMM is missing or ``LATTE_VLLM=prefer``:

- :class:`LatteSparseAttnIndexerKpool`, registered with ``CustomOp.register_oot`` under
  ``SparseAttnIndexerKpool``: vLLM's model builds it instead of its own op and calls it as its
  own; it runs :func:`kernels.pooled_indexer_step`.
- Below sm_89 the model's indexer layer also rotates and quantizes its index query with a Triton
  kernel that stores e4m3, which Triton cannot compile there: the model classes here are vLLM's
  own whose indexer layers call :func:`prep.fwht128_quant_fp8` instead (registered with
  ``ModelRegistry.register_model`` for the architectures of :data:`PREP_MODEL_CLASSES`, below
  sm_89 only).
"""

from __future__ import annotations

from typing import Any

import torch

from vllm.compilation.breakable_cudagraph import eager_break_during_capture
from vllm.forward_context import get_forward_context
from vllm.models.glm5next.common.attention import Indexer
from vllm.models.glm5next.nvidia.sparse_indexer import SparseAttnIndexerKpool

from . import kernels, prep
from .indexer import q_scale_ones, rebind

# GLM-5.3-Flash's architectures in vLLM 0.33 (the MTP draft's too) -> latte's model class for
# them below sm_89.
PREP_MODEL_CLASSES = {"Glm5NextForConditionalGeneration": "LatteGlm5NextForConditionalGeneration",
                      "Glm5NextForCausalLM": "LatteGlm5NextForCausalLM",
                      "Glm5NextMTPModel": "LatteGlm5NextMTP"}


class LatteSparseAttnIndexerKpool(SparseAttnIndexerKpool):
    """GLM-5.3-Flash's pooled indexer op through latte, registered with
    ``CustomOp.register_oot`` under ``SparseAttnIndexerKpool``: vLLM builds it instead of its own
    op (which needs DeepGEMM) and calls it as its own. It writes the pools the step completes
    and keeps vLLM's tail cache as vLLM's op does, then writes the pooled top-k into vLLM's
    top-k buffer (:func:`kernels.pooled_indexer_step`)."""

    def __init__(self, k_cache: Any, quant_block_size: int, scale_fmt: str, topk_tokens: int,
                 head_dim: int, max_pool_len: int, max_total_seq_len: int,
                 topk_indices_buffer: torch.Tensor, skip_k_cache_insert: bool = False,
                 use_fp4_cache: bool = False, tail_cache: Any = None) -> None:
        if use_fp4_cache or tail_cache is None or head_dim != 128 or scale_fmt != "ue8m0":
            raise NotImplementedError(
                f"latte's pooled indexer reads GLM-5.3-Flash's fp8 pool cache with power-of-two "
                f"scales and keeps its tail cache (got use_fp4_cache={use_fp4_cache}, "
                f"head_dim={head_dim}, scale_fmt={scale_fmt!r}, tail cache "
                f"{'missing' if tail_cache is None else 'present'}); set LATTE_VLLM=off for "
                f"this model")
        from vllm.config import get_current_vllm_config_or_none

        cfg = get_current_vllm_config_or_none()
        parallel = cfg.parallel_config if cfg is not None else None
        if parallel is not None and parallel.decode_context_parallel_size > 1:
            raise NotImplementedError(
                f"latte's pooled indexer does not shard the context (decode context parallel "
                f"size {parallel.decode_context_parallel_size}); run without "
                f"--decode-context-parallel-size or set LATTE_VLLM=off")
        torch.nn.Module.__init__(self)
        self._enforce_enable = False
        self._forward_method = self.forward_latte
        self.k_cache = k_cache
        self.tail_cache = tail_cache
        self.quant_block_size = quant_block_size
        self.scale_fmt = scale_fmt
        self.topk_tokens = topk_tokens
        self.head_dim = head_dim
        self.max_pool_len = max_pool_len
        self.max_total_seq_len = max_total_seq_len
        self.topk_indices_buffer = topk_indices_buffer
        self.skip_k_cache_insert = skip_k_cache_insert
        self.use_fp4_cache = False
        self.topk_backend = "latte"
        self.dcp_world_size = 1
        self.dcp_rank = 0

    @eager_break_during_capture
    def forward_latte(self, hidden_states: torch.Tensor, q_quant: Any, k: torch.Tensor,
                      weights: torch.Tensor, *, gate_score: Any = None, compress_ape: Any = None,
                      index_kpool: int = 1, positions: Any = None) -> torch.Tensor:
        buffer = self.topk_indices_buffer
        md_all = get_forward_context().attn_metadata
        if not isinstance(md_all, dict):  # vLLM's profiling run: nothing to compute
            return buffer
        index_md = md_all.get(self.k_cache.prefix)
        tail_md = md_all.get(self.tail_cache.prefix)
        if index_md is None or tail_md is None:
            return buffer
        if isinstance(q_quant, tuple) or gate_score is None or compress_ape is None \
                or positions is None or index_kpool < 2:
            raise NotImplementedError(
                "latte's pooled indexer takes GLM-5.3-Flash's fp8 index query, gate scores, "
                "ape and positions; this layer passed another form. Set LATTE_VLLM=off")
        tokens = int(index_md.slot_mapping.shape[0])
        if hidden_states.shape[0] > tokens:  # vLLM's padding rows, cleared as its op does
            buffer[tokens:hidden_states.shape[0]] = -1
        kernels.pooled_indexer_step(
            q_quant, weights, k, gate_score, compress_ape, positions,
            tail_md.slot_mapping[:tokens], index_md.block_table, self.k_cache.kv_cache,
            self.tail_cache.kv_cache, kpool=index_kpool,
            pool_topk=self.topk_tokens // index_kpool,
            q_scale=q_scale_ones(q_quant.device, q_quant.shape[1], tokens), topk_out=buffer,
            write=not self.skip_k_cache_insert)
        return buffer


class LattePrepGlm5NextIndexer(Indexer):
    """vLLM's GLM-5.3-Flash indexer layer, its code unchanged, rotating and quantizing the index
    query with latte's torch operations (:func:`prep.fwht128_quant_fp8`) instead of vLLM's Triton
    kernel (below sm_89)."""

    forward = rebind(Indexer.forward, fwht128_quant_fp8=prep.fwht128_quant_fp8)


def _with_prep_indexers(model: torch.nn.Module) -> None:
    for module in model.modules():
        if type(module) is Indexer:
            module.__class__ = LattePrepGlm5NextIndexer


def _model_classes() -> Any:
    from vllm.models.glm5next import (Glm5NextForCausalLM, Glm5NextForConditionalGeneration,
                                      Glm5NextMTP)

    return Glm5NextForConditionalGeneration, Glm5NextForCausalLM, Glm5NextMTP


_CONDITIONAL, _CAUSAL, _MTP = _model_classes()


class LatteGlm5NextForConditionalGeneration(_CONDITIONAL):
    """vLLM's GLM-5.3-Flash (multimodal) model with latte's index-query preparation."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _with_prep_indexers(self)


class LatteGlm5NextForCausalLM(_CAUSAL):
    """vLLM's GLM-5.3-Flash text model with latte's index-query preparation."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _with_prep_indexers(self)


class LatteGlm5NextMTP(_MTP):
    """vLLM's GLM-5.3-Flash MTP draft model with latte's index-query preparation."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _with_prep_indexers(self)
