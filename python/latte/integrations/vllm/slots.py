"""Where latte goes in vLLM's own priority list, and whether vLLM's own sparse backends work.

vLLM's automatic selector walks a fixed list of built-in backends per GPU family
(``_get_backend_priorities`` in ``vllm/platforms/cuda.py``); a new backend name is reached only
with ``--attention-backend``. To be chosen with no flag, latte takes the *slot* of a built-in
sparse backend (``register_backend(member, latte_class)``). A slot is a *hole* when its own
backend refuses the GPU's compute capability (or cannot be imported): nothing is lost by
filling it. ``LATTE_VLLM=prefer`` takes the first sparse slot instead.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from vllm.logger import init_logger

logger = init_logger(__name__)


def _priorities(capability: Any, *, head_size: int = 576, kv_cache_dtype: Optional[str] = None,
                num_heads: Optional[int] = None) -> List[Any]:
    from vllm.platforms.cuda import _get_backend_priorities

    return list(_get_backend_priorities(use_mla=True, device_capability=_capability(capability),
                                        num_heads=num_heads, kv_cache_dtype=kv_cache_dtype,
                                        head_size=head_size))


def original_class(member: Any) -> Optional[type]:
    """The built-in class of an enum member (its default path, ignoring overrides), or None
    when it cannot be imported here."""
    from vllm.utils.import_utils import resolve_obj_by_qualname

    if not member.value:
        return None
    try:
        return resolve_obj_by_qualname(member.value)
    except Exception as e:  # ImportError, OSError, or a RuntimeError from a missing driver
        logger.debug("latte: %s cannot be imported: %s", member.name, e)
        return None


def _is_sparse(cls: Optional[type]) -> bool:
    try:
        return cls is not None and bool(cls.is_sparse())
    except Exception:  # a vendor class that fails here is no working backend
        return False


def sparse_members(capability: Any, **kwargs: Any) -> List[Any]:
    """vLLM's sparse-MLA members for this GPU, in vLLM's order."""
    return [m for m in _priorities(capability, **kwargs) if _is_sparse(original_class(m))]


def hole(capability: Any) -> Optional[Any]:
    """The first sparse slot whose own backend can never run on this GPU, or None."""
    for member in _priorities(capability):
        cls = original_class(member)
        if cls is None:
            # Not importable here: vLLM's selector counts that as invalid too. Only a member
            # vLLM lists among its sparse backends is a slot latte may take.
            if "SPARSE" in member.name:
                return member
            continue
        if not _is_sparse(cls):
            continue
        try:
            runs_here = bool(cls.supports_compute_capability(_capability(capability)))
        except Exception:
            runs_here = False
        if not runs_here:
            return member
    return None


def preferred(capability: Any) -> List[Any]:
    """The slots LATTE_VLLM=prefer takes: the first sparse member of each list vLLM may walk on
    this GPU (the lists differ by cache dtype and head count on some GPUs, and on sm_90 by head
    size: 512, a model without rope such as GLM-5.3-Flash, puts FlashInfer's sparse backend
    first)."""
    taken: List[Any] = []
    for head_size in (576, 512):
        for kv in (None, "fp8_ds_mla"):
            for heads in (8, 128):
                members = sparse_members(capability, head_size=head_size, kv_cache_dtype=kv,
                                         num_heads=heads)
                if members and members[0] not in taken:
                    taken.append(members[0])
    return taken


def _capability(capability: Any) -> Any:
    from vllm.platforms.interface import DeviceCapability

    return DeviceCapability(int(capability[0]), int(capability[1]))


def valid_vllm_sparse_backends(config: Dict[str, Any], capability: Any) -> List[str]:
    """The names of vLLM's own sparse backends that accept this configuration (their built-in
    classes, asked as vLLM's selector asks them)."""
    from vllm.config import get_current_vllm_config

    vllm_config = get_current_vllm_config()
    num_heads = None
    if getattr(vllm_config, "model_config", None) is not None:
        num_heads = vllm_config.model_config.get_num_attention_heads(vllm_config.parallel_config)
    cap = _capability(capability)
    working = []
    for member in sparse_members(capability, head_size=config["head_size"],
                                 kv_cache_dtype=config["kv_cache_dtype"], num_heads=num_heads):
        cls = original_class(member)
        try:
            reasons = cls.validate_configuration(
                device_capability=cap, use_per_head_quant_scales=False, attn_type="decoder",
                **config)
        except Exception as e:  # a vendor check that fails is no working backend
            logger.debug("latte: asking %s failed: %s", member.name, e)
            continue
        if not reasons:
            working.append(member.name)
    return working
