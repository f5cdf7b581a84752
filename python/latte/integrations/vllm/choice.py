"""How vLLM's description of a layer becomes a latte decision, with latte's reasons.

vLLM describes an attention layer by head size, dtype, KV-cache dtype, block size, compute
capability and (through its config) the model's ``config.json`` and tensor-parallel size. This
module turns that into latte selections for the two operations vLLM would hand latte (sparse
MLA and the indexer's top-k) and words every refusal with the change that would work. It
imports no vLLM module, so it is tested on its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ...errors import LatteError
from ...selection import built_with_cuda, model_spec, select

# vLLM's --kv-cache-dtype values and the latte cache format each one means.
_KV_CACHE_FORMATS = {None: "bf16", "auto": "bf16", "bfloat16": "bf16", "fp8_ds_mla": "fp8_ds_mla"}
_KV_CACHE_FIXES = {
    "fp8": "latte reads an fp8 cache in DeepSeek's 656-byte layout only: pass "
           "--kv-cache-dtype fp8_ds_mla",
    "fp8_e4m3": "latte reads an fp8 cache in DeepSeek's 656-byte layout only: pass "
                "--kv-cache-dtype fp8_ds_mla",
    "float16": "latte's MLA caches are bfloat16 or fp8_ds_mla: pass --kv-cache-dtype auto with "
               "--dtype bfloat16, or fp8_ds_mla",
}

# The operations latte runs for a DSA layer in vLLM.
LAYER_OPS = ("sparse_mla", "indexer_topk", "logical_to_slots")
# GLM-5.3-Flash (a pooled indexer, index_kpool): the indexer op also writes the pool keys.
POOLED_LAYER_OPS = ("sparse_mla", "indexer_topk", "indexer_pool_store", "logical_to_slots")


def layer_ops(spec: Mapping[str, Any]) -> Tuple[str, ...]:
    """The ops latte runs for a layer of the model ``spec`` (latte.model_spec's dict)."""
    indexer = spec.get("indexer") or {}
    return POOLED_LAYER_OPS if indexer.get("kpool") else LAYER_OPS

PREFER_ENV = "LATTE_VLLM"  # auto (default) | prefer | off


def mode() -> str:
    """LATTE_VLLM: "auto" fills the holes of vLLM's own list, "prefer" puts latte first,
    "off" registers nothing but the named backend."""
    value = os.environ.get(PREFER_ENV, "auto").strip().lower() or "auto"
    return value if value in ("auto", "prefer", "off") else "auto"


def arch_name(capability: Any) -> str:
    """DeviceCapability(9, 0) or (9, 0) -> "sm_90" (latte's described-device name)."""
    major, minor = int(capability[0]), int(capability[1])
    return f"sm_{major}{minor}"


def cache_format(kv_cache_dtype: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
    """(latte cache format, None) for a vLLM cache dtype latte reads, else (None, the fix)."""
    if kv_cache_dtype in _KV_CACHE_FORMATS:
        return _KV_CACHE_FORMATS[kv_cache_dtype], None
    fix = _KV_CACHE_FIXES.get(str(kv_cache_dtype))
    return None, fix or (f"latte cannot read a {kv_cache_dtype!r} KV cache: use "
                         f"--kv-cache-dtype auto (bfloat16) or fp8_ds_mla")


@dataclass
class LayerChoice:
    """latte's decision for one vLLM DSA layer configuration."""

    device: str
    kv_cache: Optional[str]
    reasons: List[str] = field(default_factory=list)
    selections: Dict[str, Any] = field(default_factory=dict)  # op -> latte.Selection
    pooled: bool = False  # GLM-5.3-Flash's pooled indexer (its ops: POOLED_LAYER_OPS)

    @property
    def ok(self) -> bool:
        return not self.reasons

    def explain(self) -> str:
        """The explanation vLLM's log receives: each op's decision as ``latte select`` prints it."""
        if not self.ok:
            return "latte refuses this layer: " + "; ".join(self.reasons)
        return "\n".join(f"[{op}]\n{sel.explain()}" for op, sel in self.selections.items())


def _refusal(op: str, sel: Any) -> str:
    # The selector's reasons per backend, one line: "cuda.sparse_mla: <why>; cpu.reference: <why>".
    data = sel.to_dict()
    parts = []
    for entry in data.get("rejected", []):
        why = ", ".join(r.get("text", r.get("code", "")) for r in entry.get("reasons", []))
        parts.append(f"{entry.get('id')}: {why}")
    hint = ""
    for suggestion in data.get("suggestions", [])[:2]:
        if suggestion.get("text"):
            hint += f"; would work: {suggestion['text']}"
    return f"latte has no backend for {op} ({sel.spec}): " + "; ".join(parts) + hint


def choose(config: Mapping[str, Any], *, tp: int, kv_cache_dtype: Optional[str],
           block_size: Optional[int], capability: Any, max_tokens: int = 0) -> LayerChoice:
    """latte's answer for a DSA layer: ``config`` is the model's config.json fields (a dict),
    ``tp`` the tensor-parallel size, the rest as vLLM passes them to a backend's
    ``validate_configuration``. Never raises for a bad configuration: the reasons say why."""
    device = arch_name(capability)
    fmt, fix = cache_format(kv_cache_dtype)
    choice = LayerChoice(device=device, kv_cache=fmt)
    if fix:
        choice.reasons.append(fix)
        return choice
    if not built_with_cuda():
        choice.reasons.append("this latte was built without its CUDA backends (reinstall it "
                              "with nvcc on PATH: pip install latte)")
        return choice
    block = int(block_size) if block_size else 64
    try:
        spec = model_spec(config, tp=tp, kv_cache=fmt, block_size=block)
    except LatteError as e:
        choice.reasons.append(f"latte cannot read this model: {e}")
        return choice
    if not spec["is_dsa"]:
        choice.reasons.append("the model has no DSA indexer (index_topk); latte's vLLM backend "
                              "serves sparse MLA models (GLM-5, GLM-5.3-Flash, DeepSeek-V3.2)")
        return choice
    ops = layer_ops(spec)
    choice.pooled = ops is POOLED_LAYER_OPS
    for op in ops:
        try:
            sel = select(config, tp=tp, kv_cache=fmt, block_size=block, device=device, op=op,
                         tokens=max_tokens)
        except LatteError as e:
            refused = getattr(e, "selection", None)
            choice.reasons.append(_refusal(op, refused) if refused is not None else str(e))
            continue
        choice.selections[op] = sel
    return choice
