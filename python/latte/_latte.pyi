# Type stubs of latte._latte, the compiled half of the package (python/src/). The documented
# API is the pure-Python layer (latte/ops.py, latte/selection.py); these are its building blocks.
from typing import Any, Callable, Dict, List, Optional

__version__: str

Tensor = Any  # a torch.Tensor, a TensorArg or any DLPack producer

class TensorArg:
    """One op argument: a DLPack tensor wrapped without a copy."""

    def __init__(
        self,
        tensor: Any,
        name: str,
        writable: bool = False,
        reinterpret: Optional[str] = None,
        op: str = "",
    ) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def from_descriptor(self) -> bool: ...
    @property
    def data_ptr(self) -> int: ...
    @property
    def shape(self) -> List[int]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def device(self) -> str: ...
    def describe(self) -> str: ...

class Selection:
    """The backend chosen for one operation, and why."""

    @property
    def backend(self) -> Optional[str]: ...
    @property
    def ok(self) -> bool: ...
    @property
    def rule(self) -> Optional[str]: ...
    @property
    def spec(self) -> str: ...
    @property
    def device(self) -> str: ...
    def explain(self) -> str: ...
    def to_json(self) -> str: ...
    def to_dict(self) -> Dict[str, Any]: ...
    def describe_kernel(self) -> str: ...

class DsaStepReport:
    """What run_dsa_step measured and checked, per stage."""

    @property
    def passed(self) -> bool: ...
    def to_text(self) -> str: ...
    def to_json(self) -> str: ...
    def to_dict(self) -> Dict[str, Any]: ...

# The ops take each tensor as a torch.Tensor (read from its descriptor), a TensorArg, or any
# DLPack producer (converted by latte._tensors.arg); stream None = torch's current stream of
# the first tensor's device (0 for other producers).
def sparse_mla(
    q: Tensor,
    kv_cache: Tensor,
    indices: Tensor,
    out: Tensor,
    lse: Optional[Tensor],
    scale: float,
    kv_format: Optional[str] = None,
    backend: Optional[str] = None,
    stream: Any = None,
    check_indices: bool = False,
    block_table: Optional[Tensor] = None,
    token_request: Optional[Tensor] = None,
    slots: Optional[Tensor] = None,
    q_rope: Optional[Tensor] = None,
    rope_dim: int = 64,
    topk_lens: Optional[Tensor] = None,
) -> str: ...
def mla_decode(
    q: Tensor,
    kv_cache: Tensor,
    block_table: Tensor,
    seq_lens: Tensor,
    out: Tensor,
    lse: Optional[Tensor],
    scale: float,
    kv_format: Optional[str] = None,
    backend: Optional[str] = None,
    stream: Any = None,
    check_indices: bool = False,
) -> str: ...
def indexer_topk(
    q: Tensor,
    q_scale: Optional[Tensor],
    weights: Tensor,
    k_cache: Tensor,
    block_table: Tensor,
    token_request: Optional[Tensor],
    visible_lens: Tensor,
    indices: Tensor,
    topk: Optional[int] = None,
    kind: str = "physical",
    backend: Optional[str] = None,
    stream: Any = None,
    check_indices: bool = False,
    kpool: int = 0,
    pool_topk: int = 0,
    select_tail: bool = False,
    out_lens: Optional[Tensor] = None,
) -> str: ...
def check_topk(op: str, topk: Any) -> int: ...
def indexer_logits(
    q: Tensor,
    q_scale: Optional[Tensor],
    weights: Tensor,
    k_cache: Tensor,
    block_table: Tensor,
    token_request: Optional[Tensor],
    visible_lens: Tensor,
    logits: Tensor,
    backend: Optional[str] = None,
    stream: Any = None,
    check_indices: bool = False,
    kpool: int = 0,
) -> str: ...
def kv_store(
    latent: Tensor,
    rope: Optional[Tensor],
    slot_mapping: Tensor,
    kv_cache: Tensor,
    scale_kind: str = "amax",
    kv_format: Optional[str] = None,
    backend: Optional[str] = None,
    stream: Any = None,
    check_indices: bool = False,
    rope_dim: int = 64,
) -> str: ...
def indexer_k_store(
    k: Tensor,
    slot_mapping: Tensor,
    k_cache: Tensor,
    scale_kind: str = "amax",
    backend: Optional[str] = None,
    stream: Any = None,
    check_indices: bool = False,
) -> str: ...
def indexer_pool_store(
    k: Tensor,
    gate: Tensor,
    ape: Tensor,
    positions: Tensor,
    token_request: Optional[Tensor],
    block_table: Tensor,
    k_cache: Tensor,
    pool_state: Tensor,
    kpool: int,
    scale_kind: str = "amax",
    hadamard: bool = False,
    backend: Optional[str] = None,
    stream: Any = None,
    check_indices: bool = False,
) -> str: ...
def logical_to_slots(
    positions: Tensor,
    block_table: Tensor,
    token_request: Optional[Tensor],
    slots: Tensor,
    block_size: int,
    backend: Optional[str] = None,
    stream: Any = None,
    check_indices: bool = False,
) -> str: ...
# The view an op call makes of `tensor` (the torch descriptor path or DLPack).
def tensor_view(tensor: Any, name: str, op: str = "", writable: bool = False) -> TensorArg: ...
def model_spec(
    model: str,
    *,
    model_json: Optional[str] = None,
    tp: int = 1,
    kv_cache: str = "bf16",
    block_size: int = 64,
) -> Dict[str, Any]: ...
def select(
    model: str,
    *,
    model_json: Optional[str] = None,
    tp: int = 1,
    kv_cache: str = "bf16",
    block_size: int = 64,
    device: str = "cpu",
    op: Optional[str] = None,
    tokens: int = 0,
    force: List[str] = ...,
    exclude: List[str] = ...,
    policy_path: Optional[str] = None,
    policy_json: Optional[str] = None,
    strict: bool = True,
) -> Selection: ...
def devices(*, described: bool = False) -> List[Dict[str, Any]]: ...
def built_with_cuda() -> bool: ...
def _validation_count() -> int: ...  # validations run so far in this process (tests: one per call)
def cuda_device_count() -> int: ...
def backends() -> List[Dict[str, Any]]: ...
def load_plugin(path: str) -> Dict[str, Any]: ...
def plugin_load_results() -> List[Dict[str, Any]]: ...
def policy_rules(
    *, policy_path: Optional[str] = None, policy_json: Optional[str] = None
) -> List[Dict[str, Any]]: ...
def policies_json(
    *, policy_path: Optional[str] = None, policy_json: Optional[str] = None
) -> List[str]: ...
def set_policy(*, policy_path: Optional[str] = None, policy_json: Optional[str] = None) -> None: ...
def check_policy(path: str) -> int: ...
def model_presets() -> List[str]: ...
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
    force: List[str] = ...,
    exclude: List[str] = ...,
    policy_path: Optional[str] = None,
    policy_json: Optional[str] = None,
    progress: Optional[Callable[[str], None]] = None,
) -> DsaStepReport: ...
def _raise_error(code: str, message: str) -> None: ...
