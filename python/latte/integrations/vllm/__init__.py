"""latte inside vLLM, with no patch: the plugin vLLM loads through its entry point
``vllm.general_plugins: latte = latte.integrations.vllm:register`` (installed by ``pip install``).

:func:`register` runs in every vLLM process (possibly more than once) and:

- registers the attention backend ``LATTE_MLA_SPARSE`` (``--attention-backend
  LATTE_MLA_SPARSE`` chooses it);
- fills holes: on a GPU where a sparse slot of vLLM's own priority list holds a backend that
  cannot run there (sm_80 / sm_86 / sm_89 with vLLM 0.33), latte takes that slot, so ``vllm
  serve`` works with no flag; it steps aside whenever one of vLLM's own sparse backends is
  valid. ``LATTE_VLLM=prefer`` puts latte first instead; ``LATTE_VLLM=off`` registers only the
  backend name;
- replaces the DSA indexer (logits + exact top-k through latte) where DeepGEMM is missing or
  ``LATTE_VLLM=prefer``; below sm_89 also the step preparation whose Triton kernels need fp8
  (norms, rope, cache writes, index-query quantization); GLM-5.3-Flash's pooled indexer alike
  (pool writes, tail cache, scores, top-k; below sm_89 its index-query rotation too).

What it decided, and why, goes to vLLM's log. docs/vllm.md is the user's guide.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, List, Optional

# The vLLM releases this adapter was written against and tested with (tests/vllm).
TESTED_VLLM = "0.33.0"  # the pinned release of scripts/test-vllm
TESTED_SERIES = (0, 33)   # the releases accepted: 0.33.x
TESTED_RANGE = f">={TESTED_VLLM},<{TESTED_SERIES[0]}.{TESTED_SERIES[1] + 1}"
ALLOW_UNTESTED_ENV = "LATTE_VLLM_ALLOW_UNTESTED"
BACKEND_PATH = "latte.integrations.vllm.backend.LatteMLASparseBackend"
HOLE_FILL_PATH = "latte.integrations.vllm.backend.LatteMLASparseHoleFillBackend"
MODEL_PATH = "latte.integrations.vllm.indexer:LatteDsaForCausalLM"
POOLED_MODULE = "latte.integrations.vllm.pooled"

_lock = threading.Lock()
_state: Dict[str, Any] = {}


def _vllm_version() -> Optional[str]:
    try:
        from importlib.metadata import version

        return version("vllm")
    except Exception:
        return None


def version_supported(version: Optional[str]) -> bool:
    """True for a vLLM release in :data:`TESTED_RANGE`."""
    if not version:
        return False
    parts = version.split("+")[0].split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return False
    return (major, minor) == TESTED_SERIES


def register() -> None:
    """vLLM's plugin entry point. Never raises: a wrong environment is logged with the fix and
    leaves vLLM as it was."""
    from vllm.logger import init_logger

    logger = init_logger("latte.integrations.vllm")
    with _lock:
        if _state.get("registered"):
            return
        try:
            _state["decisions"] = _register(logger)
        except Exception as e:  # vLLM must keep running whatever latte finds
            logger.error("latte: not registered with vLLM: %s: %s", type(e).__name__, e)
            _state["decisions"] = [f"not registered: {type(e).__name__}: {e}"]
        _state["registered"] = True


def decisions() -> List[str]:
    """What :func:`register` did in this process, one sentence each (for tests and logs)."""
    return list(_state.get("decisions", []))


def _register(logger: Any) -> List[str]:
    from . import choice

    said: List[str] = []

    def say(text: str, level: str = "info") -> None:
        said.append(text)
        getattr(logger, level)("latte: %s", text)

    version = _vllm_version()
    if not version_supported(version) and os.environ.get(ALLOW_UNTESTED_ENV) != "1":
        say(f"vLLM {version} is outside the range latte was tested with ({TESTED_RANGE}); "
            f"nothing registered. Install vllm=={TESTED_VLLM}, or set "
            f"{ALLOW_UNTESTED_ENV}=1 to register anyway", "error")
        return said

    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    from .backend import NAME

    if NAME not in AttentionBackendEnum.__members__:
        register_backend(NAME, BACKEND_PATH)
    say(f"attention backend {NAME} registered (--attention-backend {NAME})")
    mode = choice.mode()
    if mode == "off":
        say(f"{choice.PREFER_ENV}=off: latte takes no slot of vLLM's own list and leaves the "
            f"indexer to vLLM")
        return said

    from vllm.platforms import current_platform

    if not current_platform.is_cuda():
        say(f"platform {type(current_platform).__name__} is not CUDA: latte takes no slot")
        return said
    capability = current_platform.get_device_capability()
    if capability is None:
        say("no CUDA device capability: latte takes no slot")
        return said
    say(_take_slots(mode, capability))
    say(_take_indexer(mode, capability))
    say(_pooled_indexer(mode, capability))
    return said


def _take_slots(mode: str, capability: Any) -> str:
    from vllm.v1.attention.backends.registry import register_backend

    from . import choice, slots

    arch = choice.arch_name(capability)
    if mode == "prefer":
        members = slots.preferred(capability)
        for member in members:
            register_backend(member, BACKEND_PATH)
        text = (f"LATTE_VLLM=prefer: latte takes the slot{'s' if len(members) != 1 else ''} "
                f"{', '.join(m.name for m in members) or '(none)'} of vLLM's list on {arch}")
    else:
        member = slots.hole(capability)
        if member is None:
            text = (f"on {arch} every sparse backend of vLLM's list can run: latte takes no "
                    f"slot (--attention-backend LATTE_MLA_SPARSE or LATTE_VLLM=prefer to use "
                    f"it)")
        else:
            register_backend(member, HOLE_FILL_PATH)
            text = (f"on {arch} vLLM's {member.name} cannot run: latte fills its slot (and "
                    f"steps aside where another of vLLM's sparse backends is valid)")
    return text


POOLED_ARCHITECTURES = ("Glm5NextForConditionalGeneration", "Glm5NextForCausalLM")


def _pooled_indexer(mode: str, capability: Any) -> str:
    """GLM-5.3-Flash: latte's attention serves its DSA layers (no rope, vLLM's 2176-wide top-k
    buffer); its pooled indexer (pool keys, tail cache, scores, top-k) runs through latte where
    DeepGEMM is missing or ``LATTE_VLLM=prefer`` (docs/vllm.md)."""
    from vllm.utils.deep_gemm import has_deep_gemm

    from . import choice
    from .prep import needs_portable_prep

    text = (f"GLM-5.3-Flash ({', '.join(POOLED_ARCHITECTURES)}): latte's attention serves its "
            f"DSA layers (sparse MLA without rope) where it is chosen")
    if int(capability[0]) == 10:
        return text + ("; on sm_100 vLLM writes the pool cache with packed UE8M0 scales, which "
                       "latte does not read: the pooled indexer stays vLLM's (DeepGEMM)")
    if mode != "prefer" and has_deep_gemm():
        return text + "; DeepGEMM is installed: the pooled indexer stays vLLM's"
    from vllm.model_executor.custom_op import CustomOp, op_registry_oot
    from vllm.model_executor.models.registry import ModelRegistry

    from .pooled import PREP_MODEL_CLASSES, LatteSparseAttnIndexerKpool

    if "SparseAttnIndexerKpool" not in op_registry_oot:
        CustomOp.register_oot(LatteSparseAttnIndexerKpool, name="SparseAttnIndexerKpool")
    why = "LATTE_VLLM=prefer" if mode == "prefer" else "DeepGEMM is not installed"
    text += (f"; {why}: its pooled indexer (pool keys, the tail cache, scores, top-k over "
             f"pools) runs through latte")
    if needs_portable_prep(capability):
        for arch, cls in PREP_MODEL_CLASSES.items():
            ModelRegistry.register_model(arch, f"{POOLED_MODULE}:{cls}")
        text += (f"; below sm_89 Triton cannot compile vLLM's rotation of the index query on "
                 f"{choice.arch_name(capability)} (it stores e4m3), so latte computes it too")
    return text


def _take_indexer(mode: str, capability: Any) -> str:
    from vllm.utils.deep_gemm import has_deep_gemm

    if int(capability[0]) == 10:
        # vLLM writes the indexer cache of the sm_100 family with each token's scale as four
        # packed UE8M0 bytes (for DeepGEMM's MX kernels), not the float32 latte reads.
        return ("on sm_100 vLLM writes the indexer cache with packed UE8M0 scales, which latte "
                "does not read: the DSA indexer stays vLLM's (DeepGEMM)")
    if mode != "prefer" and has_deep_gemm():
        return "DeepGEMM is installed: the DSA indexer stays vLLM's"
    from vllm.model_executor.custom_op import CustomOp, op_registry_oot
    from vllm.model_executor.models.registry import ModelRegistry

    from .indexer import DSA_ARCHITECTURES, LatteSparseAttnIndexer

    if "SparseAttnIndexer" not in op_registry_oot:
        CustomOp.register_oot(LatteSparseAttnIndexer, name="SparseAttnIndexer")
    for arch in DSA_ARCHITECTURES:
        ModelRegistry.register_model(arch, MODEL_PATH)
    from .prep import needs_portable_prep

    why = "LATTE_VLLM=prefer" if mode == "prefer" else "DeepGEMM is not installed"
    text = (f"{why}: the DSA indexer (scores + exact top-k) runs through latte for "
            f"{', '.join(DSA_ARCHITECTURES)}")
    if needs_portable_prep(capability):
        text += ("; below sm_89 Triton cannot compile vLLM's fp8 kernels that prepare each DSA "
                 "step (norms, rope, cache writes, index-query quantization), so latte "
                 "computes that step too")
    return text
