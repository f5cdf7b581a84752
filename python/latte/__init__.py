"""latte: the attention layer for MLA and DeepSeek-Sparse-Attention models, from Python.

The same library as the C++ API (liblatte, installed inside this package): the same backends,
the same selection and policy, the same error messages. Ops take torch tensors or numpy arrays
(any DLPack producer) without copying them and run CUDA tensors on torch's current stream.

    import torch, latte
    sel = latte.select("glm-5", tp=8, device="sm_120")
    print(sel.explain())
    out = latte.sparse_mla(q, kv_cache, indices, scale=0.0625)

See docs/python.md for every function, the error classes and how to build.
"""

from __future__ import annotations

from . import _latte
from .errors import (
    ArgumentTypeError,
    ConfigError,
    CudaError,
    DTypeError,
    InternalError,
    InvalidArgumentError,
    LatteError,
    NoValidBackendError,
    NotFoundError,
    OutOfMemoryError,
    PluginError,
    PolicyError,
    UnsupportedError,
)
from .ops import (
    indexer_k_store,
    indexer_pool_store,
    indexer_logits,
    indexer_topk,
    kv_store,
    logical_to_slots,
    mla_decode,
    sparse_mla,
)
from .selection import (
    DsaStepReport,
    Selection,
    backends,
    built_with_cuda,
    check_policy,
    cuda_device_count,
    devices,
    load_plugin,
    model_presets,
    model_spec,
    plugin_load_results,
    policy_rules,
    run_dsa_step,
    select,
    set_policy,
)

__version__: str = _latte.__version__

__all__ = [
    "__version__",
    # ops
    "sparse_mla",
    "mla_decode",
    "indexer_topk",
    "indexer_logits",
    "kv_store",
    "indexer_k_store",
    "indexer_pool_store",
    "logical_to_slots",
    # choosing and inspecting
    "select",
    "Selection",
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
    "DsaStepReport",
    # errors
    "LatteError",
    "InvalidArgumentError",
    "ArgumentTypeError",
    "DTypeError",
    "NotFoundError",
    "NoValidBackendError",
    "ConfigError",
    "PolicyError",
    "PluginError",
    "UnsupportedError",
    "CudaError",
    "OutOfMemoryError",
    "InternalError",
]
