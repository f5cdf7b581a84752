"""``LATTE_MLA_SPARSE``: a vLLM sparse-MLA attention backend that computes through latte.

Imported by vLLM (through the class path :func:`latte.integrations.vllm.register` registers),
never by ``import latte``. The classes follow vLLM 0.33's contracts: an ``AttentionBackend``
that answers ``validate_configuration`` from latte's selector, a metadata builder that adds
per-token tables to vLLM's sparse-MLA metadata once per step, and an impl whose
``forward_mqa`` returns ``[T, H, 512]``. The computation lives in
:mod:`latte.integrations.vllm.kernels`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, ClassVar, List, Optional

import torch

from vllm.config import get_current_vllm_config
from vllm.logger import init_logger
from vllm.model_executor.layers.attention.sparse_mla_attention import (
    SparseMLACommonImpl,
    SparseMLACommonMetadata,
)
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionCGSupport,
    AttentionMetadataBuilder,
    AttentionType,
    MultipleOf,
)
from vllm.v1.attention.backends.utils import split_decodes_and_prefills

from . import choice, kernels

logger = init_logger(__name__)

NAME = "LATTE_MLA_SPARSE"
_logged = set()
_log_lock = threading.Lock()


def _log_once(key: str, text: str) -> None:
    # The decision goes to vLLM's log once per process, not once per layer.
    with _log_lock:
        if key in _logged:
            return
        _logged.add(key)
    logger.info("%s", text)


def _model_config_dict(vllm_config: Any) -> Optional[dict]:
    model_config = getattr(vllm_config, "model_config", None)
    if model_config is None:
        return None
    return model_config.hf_text_config.to_dict()


def _tp_size(vllm_config: Any) -> int:
    parallel = getattr(vllm_config, "parallel_config", None)
    return int(getattr(parallel, "tensor_parallel_size", 1) or 1)


def layer_choice(kv_cache_dtype: Optional[str], block_size: Optional[int],
                 device_capability: Any) -> choice.LayerChoice:
    """latte's decision for the model vLLM is configuring now (its current config). Never
    raises: vLLM's selector counts only import errors as a backend's refusal, so anything else
    going wrong here becomes a reason rather than taking vLLM down."""
    try:
        return _layer_choice(kv_cache_dtype, block_size, device_capability)
    except Exception as e:
        result = choice.LayerChoice(device=str(device_capability), kv_cache=None)
        result.reasons.append(f"latte could not evaluate this configuration "
                              f"({type(e).__name__}: {e})")
        return result


def _layer_choice(kv_cache_dtype: Optional[str], block_size: Optional[int],
                  device_capability: Any) -> choice.LayerChoice:
    vllm_config = get_current_vllm_config()
    config = _model_config_dict(vllm_config)
    if config is None:
        result = choice.LayerChoice(device=choice.arch_name(device_capability), kv_cache=None)
        result.reasons.append("vLLM has no model config here; latte needs the model's "
                              "config.json fields to choose")
        return result
    scheduler = getattr(vllm_config, "scheduler_config", None)
    max_tokens = int(getattr(scheduler, "max_num_batched_tokens", 0) or 0)
    return choice.choose(config, tp=_tp_size(vllm_config), kv_cache_dtype=kv_cache_dtype,
                         block_size=block_size, capability=device_capability,
                         max_tokens=max_tokens)


def _head_size_reason(head_size: int) -> Optional[str]:
    """Why ``head_size`` does not fit the model being configured, or None. Both 576 (with rope)
    and 512 (without: GLM-5.3-Flash) are latte's, but each only for the model that has it."""
    try:
        config = _model_config_dict(get_current_vllm_config())
    except Exception:
        return None
    if not config:
        return None  # layer_choice words the missing config
    rope = config.get("qk_rope_head_dim")
    latent = config.get("kv_lora_rank")
    if not isinstance(rope, int) or not isinstance(latent, int):
        return None  # latte's selector reads the config and words what is wrong
    expected = latent + rope
    if int(head_size) != expected:
        return (f"head size {head_size} does not fit this model: kv_lora_rank {latent} + "
                f"qk_rope_head_dim {rope} = {expected}")
    return None


class LatteMLASparseBackend(AttentionBackend):
    """Sparse MLA (DeepSeek Sparse Attention) through latte, on every NVIDIA GPU latte runs on."""

    supported_dtypes: ClassVar[List[torch.dtype]] = [torch.bfloat16]
    supported_kv_cache_dtypes: ClassVar[List[str]] = ["auto", "bfloat16", "fp8_ds_mla"]

    @staticmethod
    def get_name() -> str:
        return NAME

    @staticmethod
    def get_impl_cls() -> type:
        return LatteMLASparseImpl

    @staticmethod
    def get_builder_cls() -> type:
        return LatteMLASparseMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec: Any = None) -> list:
        # latte's kernels read any page size; the indexer cache's backend asks for 64.
        return [MultipleOf(1)]

    @classmethod
    def get_supported_head_sizes(cls) -> List[int]:
        # 576 = 512 latent + 64 rope (GLM-5, DeepSeek-V3.2); 512 = the latent alone (GLM-5.3-Flash,
        # qk_rope_head_dim 0). vLLM's fp8_ds_mla rows are 656 bytes either way.
        return [576, 512]

    @classmethod
    def is_mla(cls) -> bool:
        return True

    @classmethod
    def is_sparse(cls) -> bool:
        return True

    @classmethod
    def supports_compute_capability(cls, capability: Any) -> bool:
        return int(capability[0]) >= 8

    @classmethod
    def supports_combination(cls, head_size: int, dtype: torch.dtype, kv_cache_dtype: Any,
                             block_size: Optional[int], use_mla: bool, has_sink: bool,
                             use_sparse: bool, use_mm_prefix: bool,
                             device_capability: Any) -> Optional[str]:
        # vLLM's generic checks (head size, dtype, MLA, sparse, ...) run before this; latte's
        # selector answers for the model, the cache, the block size and the GPU.
        if not (use_mla and use_sparse):
            return None  # already refused by the generic checks
        wrong_head = _head_size_reason(head_size)
        if wrong_head:
            return wrong_head
        result = layer_choice(kv_cache_dtype, block_size, device_capability)
        if not result.ok:
            return "; ".join(result.reasons)
        return None


class LatteMLASparseHoleFillBackend(LatteMLASparseBackend):
    """The same backend in a slot of vLLM's own priority list whose original backend cannot run
    on this GPU (register() chooses the slot). It steps aside when any of vLLM's own sparse
    backends is valid, so latte only fills holes unless LATTE_VLLM=prefer."""

    @classmethod
    def supports_combination(cls, head_size, dtype, kv_cache_dtype, block_size, use_mla,
                             has_sink, use_sparse, use_mm_prefix, device_capability):
        own = super().supports_combination(head_size, dtype, kv_cache_dtype, block_size,
                                           use_mla, has_sink, use_sparse, use_mm_prefix,
                                           device_capability)
        if own is not None:
            return own
        from . import slots

        working = slots.valid_vllm_sparse_backends(
            dict(head_size=head_size, dtype=dtype, kv_cache_dtype=kv_cache_dtype,
                 block_size=block_size, use_mla=use_mla, has_sink=has_sink,
                 use_sparse=use_sparse, use_mm_prefix=use_mm_prefix),
            device_capability)
        if working:
            return (f"{NAME} steps aside: vLLM's own {', '.join(working)} is valid here "
                    f"(LATTE_VLLM=prefer or --attention-backend {NAME} chooses latte)")
        return None


@dataclass(kw_only=True)
class LatteMLASparseMetadata(SparseMLACommonMetadata):
    """vLLM's sparse-MLA metadata plus what latte reads per token: ``req_id_per_token`` (the
    token's block-table row), ``visible_lens`` (its position + 1), and the ``slots`` buffer the
    logical top-k positions are converted into (as wide as the model's top-k buffer)."""

    visible_lens: torch.Tensor
    slots: torch.Tensor


class LatteMLASparseMetadataBuilder(AttentionMetadataBuilder):
    """Builds :class:`LatteMLASparseMetadata` from vLLM's ``CommonAttentionMetadata``: two small
    tensor passes per step (a token's request and causal length), shared by every layer."""

    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.UNIFORM_BATCH

    def __init__(self, kv_cache_spec: Any, layer_names: List[str], vllm_config: Any,
                 device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self._init_reorder_batch_threshold(1, supports_spec_as_decode=True)
        self.topk_tokens = int(vllm_config.model_config.hf_text_config.index_topk)
        # The top-k buffer's width: index_topk, or wider where the model pads it (GLM-5.3-Flash:
        # 2176 = index_topk + index_kpool - 1 rounded up to 128; vLLM's spec carries it).
        self.topk_width = int(getattr(kv_cache_spec, "topk_buffer_width", None)
                              or self.topk_tokens)
        max_tokens = int(vllm_config.scheduler_config.max_num_batched_tokens)
        # Persistent buffers: their addresses stay fixed across steps and CUDA-graph replays.
        self.token_request = torch.zeros(max_tokens, dtype=torch.int32, device=device)
        self.visible_lens = torch.zeros(max_tokens, dtype=torch.int32, device=device)
        self.slots = torch.full((max_tokens, self.topk_width), -1, dtype=torch.int32,
                                device=device)

    def build(self, common_prefix_len: int, common_attn_metadata: Any,
              fast_build: bool = False) -> LatteMLASparseMetadata:
        cm = common_attn_metadata
        num_tokens = int(cm.num_actual_tokens)
        req, vis = kernels.step_token_tables(cm.query_start_loc, cm.seq_lens, int(cm.num_reqs),
                                             num_tokens, self.token_request, self.visible_lens)
        num_decodes, num_prefills, num_decode_tokens, _ = split_decodes_and_prefills(
            cm, decode_threshold=self.reorder_batch_threshold or 1)
        return LatteMLASparseMetadata(
            num_reqs=cm.num_reqs,
            max_query_len=cm.max_query_len,
            max_seq_len=cm.max_seq_len,
            num_actual_tokens=num_tokens,
            query_start_loc=cm.query_start_loc,
            slot_mapping=cm.slot_mapping,
            block_table=cm.block_table_tensor,
            req_id_per_token=req,
            seq_lens=cm.seq_lens,
            block_size=int(self.kv_cache_spec.block_size),
            topk_tokens=self.topk_tokens,
            num_decodes=num_decodes,
            num_prefills=num_prefills,
            num_decode_tokens=num_decode_tokens,
            decode_max_query_len=int(cm.max_query_len) if num_prefills == 0 else 0,
            prefill=None,  # latte runs prefill and decode tokens alike (top-k MQA path)
            visible_lens=vis,
            slots=self.slots,
        )


class LatteMLASparseImpl(SparseMLACommonImpl):
    """The sparse-MLA impl: logical top-k -> cache slots (latte.logical_to_slots), then
    latte.sparse_mla on vLLM's own cache bytes."""

    is_sparse = True
    supports_dense_mha_prefill = False

    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int,
                 alibi_slopes: Optional[List[float]], sliding_window: Optional[int],
                 kv_cache_dtype: str, logits_soft_cap: Optional[float], attn_type: str,
                 kv_sharing_target_layer_name: Optional[str], indexer: Any = None,
                 **mla_args: Any) -> None:
        if alibi_slopes or sliding_window or logits_soft_cap:
            raise NotImplementedError(
                f"{NAME} does not support alibi slopes, sliding windows or logit soft-capping "
                f"(got alibi={bool(alibi_slopes)}, sliding_window={sliding_window}, "
                f"soft_cap={logits_soft_cap}); choose another --attention-backend")
        if attn_type != AttentionType.DECODER:
            raise NotImplementedError(f"{NAME} runs decoder self-attention only, not {attn_type}")
        fmt, fix = choice.cache_format(kv_cache_dtype)
        if fix:
            raise NotImplementedError(f"{NAME}: {fix}")
        topk_indices_buffer = mla_args.pop("topk_indices_buffer", None)
        super().__init__(num_heads, head_size, scale, num_kv_heads, alibi_slopes,
                         sliding_window, kv_cache_dtype, logits_soft_cap, attn_type,
                         kv_sharing_target_layer_name, indexer=indexer,
                         topk_indices_buffer=topk_indices_buffer, **mla_args)
        if self.dcp_world_size > 1:
            raise NotImplementedError(
                f"{NAME} does not support decode context parallelism (DCP world size "
                f"{self.dcp_world_size}); run without --decode-context-parallel-size")
        if self.index_group is not None and type(self.index_group).__name__.startswith("HiSparse"):
            raise NotImplementedError(f"{NAME} does not support HiSparse KV offloading")
        if self.topk_indices_buffer is None:
            raise NotImplementedError(f"{NAME} needs the DSA indexer's top-k buffer; this layer "
                                      f"has none (is the model a DSA model?)")
        self.kv_format = fmt
        # 64 (GLM-5, DeepSeek-V3.2) or 0 (GLM-5.3-Flash: q and the cache rows are the 512 latent
        # values; an fp8_ds_mla row keeps vLLM's 656 bytes, of which latte reads 528).
        if self.qk_rope_head_dim not in (0, 64):
            raise NotImplementedError(
                f"{NAME} serves MLA with 64 rope dims or none (GLM-5.3-Flash), not "
                f"qk_rope_head_dim={self.qk_rope_head_dim}")
        self.rope_dim = int(self.qk_rope_head_dim)
        self.supports_quant_query_input = False  # latte takes the bf16 query
        vllm_config = get_current_vllm_config()
        cache_config = getattr(vllm_config, "cache_config", None)
        block_size = getattr(cache_config, "block_size", None)
        from vllm.platforms import current_platform

        capability = current_platform.get_device_capability()
        key = f"choice:{capability}:{kv_cache_dtype}:{block_size}"
        if capability is not None and key not in _logged:
            result = layer_choice(kv_cache_dtype, block_size, capability)
            _log_once(key, f"latte serves this model's sparse MLA ({NAME}):\n{result.explain()}")

    def forward_mqa(self, q: Any, kv_c_and_k_pe_cache: torch.Tensor,
                    attn_metadata: LatteMLASparseMetadata, layer: Any):
        md = attn_metadata
        topk = self.topk_indices_buffer
        slots = md.slots
        if slots.shape[1] != topk.shape[1]:  # a builder made for another buffer width
            slots = _slots_like(topk)
        # vLLM's own indexers hand no row lengths: -1 padding marks the unused columns.
        out = kernels.sparse_mla_forward(
            q, kv_c_and_k_pe_cache, topk, md.block_table, md.req_id_per_token, self.scale,
            slots=slots, rope_dim=self.rope_dim)
        return out, None


_slot_buffers: dict = {}


def _slots_like(topk: torch.Tensor) -> torch.Tensor:
    # One slots buffer per top-k buffer shape and device, kept (allocated outside graph capture
    # on the first call of a shape, as vLLM's warm-up runs every shape before capturing).
    key = (tuple(topk.shape), topk.device)
    buf = _slot_buffers.get(key)
    if buf is None:
        buf = _slot_buffers[key] = torch.full(topk.shape, -1, dtype=torch.int32,
                                              device=topk.device)
    return buf
