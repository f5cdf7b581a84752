# Type stubs of latte._latte, the compiled half of the package (python/src/). The documented
# API is the pure-Python layer (latte/ops.py, latte/selection.py); these are its building blocks.
from typing import Any, Callable, Dict, List, Optional

__version__: str

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

def sparse_mla(
    q: TensorArg,
    kv_cache: TensorArg,
    indices: TensorArg,
    out: TensorArg,
    lse: Optional[TensorArg],
    scale: float,
    *,
    kv_format: Optional[str] = None,
    backend: Optional[str] = None,
    stream: int = 0,
    check_indices: bool = False,
) -> str: ...
def mla_decode(
    q: TensorArg,
    kv_cache: TensorArg,
    block_table: TensorArg,
    seq_lens: TensorArg,
    out: TensorArg,
    lse: Optional[TensorArg],
    scale: float,
    *,
    kv_format: Optional[str] = None,
    backend: Optional[str] = None,
    stream: int = 0,
    check_indices: bool = False,
) -> str: ...
def indexer_topk(
    q: TensorArg,
    q_scale: Optional[TensorArg],
    weights: TensorArg,
    k_cache: TensorArg,
    block_table: TensorArg,
    token_request: Optional[TensorArg],
    visible_lens: TensorArg,
    indices: TensorArg,
    *,
    kind: str = "physical",
    backend: Optional[str] = None,
    stream: int = 0,
    check_indices: bool = False,
) -> str: ...
def indexer_logits(
    q: TensorArg,
    q_scale: Optional[TensorArg],
    weights: TensorArg,
    k_cache: TensorArg,
    block_table: TensorArg,
    token_request: Optional[TensorArg],
    visible_lens: TensorArg,
    logits: TensorArg,
    *,
    backend: Optional[str] = None,
    stream: int = 0,
    check_indices: bool = False,
) -> str: ...
def kv_store(
    latent: TensorArg,
    rope: TensorArg,
    slot_mapping: TensorArg,
    kv_cache: TensorArg,
    *,
    scale_kind: str = "amax",
    kv_format: Optional[str] = None,
    backend: Optional[str] = None,
    stream: int = 0,
    check_indices: bool = False,
) -> str: ...
def indexer_k_store(
    k: TensorArg,
    slot_mapping: TensorArg,
    k_cache: TensorArg,
    *,
    scale_kind: str = "amax",
    backend: Optional[str] = None,
    stream: int = 0,
    check_indices: bool = False,
) -> str: ...
def logical_to_slots(
    positions: TensorArg,
    block_table: TensorArg,
    token_request: Optional[TensorArg],
    slots: TensorArg,
    block_size: int,
    *,
    backend: Optional[str] = None,
    stream: int = 0,
    check_indices: bool = False,
) -> str: ...
def model_spec(
    model: str, *, tp: int = 1, kv_cache: str = "bf16", block_size: int = 64
) -> Dict[str, Any]: ...
def select(
    model: str,
    *,
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
