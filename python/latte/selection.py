"""Choosing backends and asking what this process has: the library functions behind the CLI's
``select``, ``devices``, ``backends``, ``policy`` and ``run``."""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Union

from . import _latte

__all__ = [
    "Selection",
    "DsaStepReport",
    "select",
    "devices",
    "backends",
    "load_plugin",
    "plugin_load_results",
    "set_policy",
    "policy_rules",
    "check_policy",
    "model_presets",
    "model_spec",
    "built_with_cuda",
    "cuda_device_count",
    "run_dsa_step",
]

Selection = _latte.Selection
DsaStepReport = _latte.DsaStepReport
PolicyArg = Union[str, "os.PathLike[str]", Dict[str, Any], None]
ModelArg = Union[str, "os.PathLike[str]", Mapping[str, Any]]


def _names(value: Union[str, Iterable[str], None]) -> List[str]:
    # "a,b" and ["a", "b"] alike, as the CLI's --force a,b and repeated --force.
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    return [part for item in items for part in str(item).split(",") if part]


def _model(model: ModelArg) -> Dict[str, Any]:
    # A config's fields (an engine's parsed config.json) travel as JSON text, named "config"
    # in messages unless the mapping names itself with "_name_or_path".
    if isinstance(model, Mapping):
        source = str(model.get("_name_or_path") or "config")
        return {"model": source, "model_json": json.dumps(dict(model), default=str)}
    return {"model": os.fspath(model), "model_json": None}


def _policy(policy: PolicyArg) -> Dict[str, Optional[str]]:
    if policy is None:
        return {"policy_path": None, "policy_json": None}
    if isinstance(policy, dict):
        return {"policy_path": None, "policy_json": json.dumps(policy)}
    return {"policy_path": os.fspath(policy), "policy_json": None}


def select(
    model: ModelArg,
    *,
    tp: int = 1,
    kv_cache: str = "bf16",
    device: Optional[str] = None,
    op: Optional[str] = None,
    block_size: int = 64,
    tokens: int = 0,
    force: Union[str, Iterable[str], None] = None,
    exclude: Union[str, Iterable[str]] = (),
    policy: PolicyArg = None,
) -> "_latte.Selection":
    """Chooses the backend for one operation of a model and explains the choice.

    Args:
        model: a preset (glm-5, glm-5.3-flash, deepseek-v3.2, deepseek-v3, kimi-k2), a config.json path, or
            the config's fields as a dict (what ``transformers`` ``config.to_dict()`` gives).
        tp: tensor-parallel size (heads per rank = num_attention_heads / tp).
        kv_cache: "bf16" or "fp8_ds_mla".
        device: "cpu", "cuda", "cuda:N", or an architecture "sm_80" ... "sm_120" to ask "what
            if"; None = "cpu", as the CLI.
        op: the operation (sparse_mla, mla_decode, indexer_topk, indexer_logits, kv_store,
            indexer_k_store, logical_to_slots); None = sparse_mla for a DSA model, mla_decode
            for a dense one, as the CLI.
        block_size: KV-cache page size in tokens.
        tokens: tokens per call (matches policy "tokens" conditions); 0 = unknown.
        force: "[op=]id-glob" entries (a list, or comma-separated) that must be used.
        exclude: "[op=]id-glob" entries removed from consideration.
        policy: a policy file path, or the policy as a dict, used as the user layer for this
            call only (see :func:`set_policy` to change it for every call).

    Returns:
        A :class:`Selection`: ``.backend``, ``.rule``, ``.explain()`` (the table ``latte
        select`` prints), ``.to_dict()``.

    Raises:
        NoValidBackendError: nothing accepts the request (its ``.selection`` holds the
            explanation), or a forced backend refuses it.
        NotFoundError, ConfigError, PolicyError, InvalidArgumentError: bad inputs.
    """
    return _latte.select(
        **_model(model), tp=tp, kv_cache=kv_cache, block_size=block_size,
        device=device or "cpu", op=op, tokens=tokens, force=_names(force),
        exclude=_names(exclude), **_policy(policy))


def devices(*, described: bool = False) -> List[Dict[str, Any]]:
    """This machine's devices (the CPU, then each CUDA device), or with ``described=True`` the
    architectures latte can describe by name (sm_80 ... sm_120). Keys as ``latte devices
    --json``: label, kind, index, name, arch, sm_count, max_smem_per_block, memory_bytes,
    probed."""
    return _latte.devices(described=described)


def backends() -> List[Dict[str, Any]]:
    """The registered backends: id, description, source ("built-in" or the plugin's path),
    capabilities (as ``latte backends --json``) and limits (each rule in words)."""
    return _latte.backends()


def load_plugin(path: Union[str, "os.PathLike[str]"]) -> Dict[str, Any]:
    """Loads a backend plugin (.so) into the process. Returns its path, name, backend_ids and
    number of policy rules. Raises PluginError (an ImportError) and leaves the registry as it
    was when the library is missing, has another ABI version, or fails."""
    return _latte.load_plugin(os.fspath(path))


def plugin_load_results() -> List[Dict[str, Any]]:
    """What loading LATTE_PLUGIN_PATH did: path, loaded, error, plugin (or None) per library."""
    return _latte.plugin_load_results()


def set_policy(policy: PolicyArg) -> None:
    """Replaces the user policy layer of the global context (what the ops use) with a policy
    file or dict, as LATTE_POLICY does; None removes it. A malformed policy raises PolicyError
    and changes nothing."""
    _latte.set_policy(**_policy(policy))


def policy_rules(policy: PolicyArg = None) -> List[Dict[str, Any]]:
    """Every policy rule in force, highest precedence first: label, name, layer, source, when
    (conditions as written), order (backend id globs). ``policy`` adds a user layer for this
    listing only."""
    return _latte.policy_rules(**_policy(policy))


def check_policy(path: Union[str, "os.PathLike[str]"]) -> int:
    """Parses a policy file; returns its number of rules or raises PolicyError naming the first
    problem (its JSON path and value)."""
    return _latte.check_policy(os.fspath(path))


def model_presets() -> List[str]:
    """The model names select() and run_dsa_step() know without a config.json."""
    return _latte.model_presets()


def model_spec(
    model: ModelArg, *, tp: int = 1, kv_cache: str = "bf16", block_size: int = 64
) -> Dict[str, Any]:
    """A model's MLA/DSA shape as latte reads it from a preset or config.json, with the
    deployment applied: num_heads, heads_per_rank, kv_lora_rank, qk_nope_head_dim,
    qk_rope_head_dim, v_head_dim, q_lora_rank, softmax_scale (yarn mscale included), indexer
    (num_heads, head_dim, topk, kpool, kpool_compress, kpool_always_select_tail,
    attended_tokens; None for a dense model), is_dsa, nope and rope_dim (0 for MLA without
    rope), num_layers, mla_layers (the layers whose attention latte computes), mtp_layers,
    layer_ops (the ops one layer runs through latte), coverage (what latte does not serve of the
    model, in words; "" when it serves it whole), ... ``model`` as for :func:`select`."""
    return _latte.model_spec(**_model(model), tp=tp, kv_cache=kv_cache, block_size=block_size)


def built_with_cuda() -> bool:
    """True when this latte has its CUDA backends."""
    return _latte.built_with_cuda()


def cuda_device_count() -> int:
    """CUDA devices visible (0 without CUDA or without a GPU)."""
    return _latte.cuda_device_count()


def run_dsa_step(
    model: str = "glm-5",
    *,
    tp: int = 1,
    kv_cache: str = "bf16",
    block_size: int = 64,
    batch: int = 4,
    context: int = 2048,
    device: str = "cpu",
    seed: int = 1,
    repeats: int = 0,
    force: Union[str, Iterable[str], None] = None,
    exclude: Union[str, Iterable[str]] = (),
    policy: PolicyArg = None,
    progress: Optional[Callable[[str], None]] = None,
) -> "_latte.DsaStepReport":
    """One DSA decode step of a model's shape on random data, end to end through the selected
    backends (kv_store, indexer_k_store, indexer_topk, sparse_mla), each stage verified against
    cpu.reference: what ``latte run`` does. ``progress`` receives one line per step.

    Returns a :class:`DsaStepReport`: ``.passed``, ``.to_text()`` (the table ``latte run``
    prints), ``.to_dict()``."""
    return _latte.run_dsa_step(
        os.fspath(model), tp=tp, kv_cache=kv_cache, block_size=block_size, batch=batch,
        context=context, device=device, seed=seed, repeats=repeats, force=_names(force),
        exclude=_names(exclude), progress=progress, **_policy(policy))
