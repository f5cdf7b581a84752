"""How Python tensors become latte arguments.

The op functions pass the caller's objects to the extension, which reads a plain torch tensor
(torch.Tensor or nn.Parameter, CPU or CUDA, a dtype latte takes) from its descriptor in C++ and
calls ``arg`` below for everything else (python/src/tensor_arg.hpp, CallTensor).

- ``arg``: any DLPack tensor -> ``_latte.TensorArg``, a latte::TensorView over the same memory
  (no copy). The few dtypes DLPack producers cannot export (numpy's ml_dtypes bfloat16 and
  float8, torch's float8) travel as uint views of the same memory and are read as their real
  dtype.
- ``lead_shape``: the leading sizes of an input, to size an output allocated for it.
- ``empty_like_input``: an output allocated like the op's first input (torch in -> torch out on
  the same device; numpy in -> numpy out).
- ``stream_handle``: the cudaStream_t a call runs on.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

from . import _latte
from .errors import ArgumentTypeError, DTypeError, OutOfMemoryError

# latte dtype name -> the name torch and numpy (with ml_dtypes for bfloat16) give it.
_ARRAY_DTYPE_NAMES = {"bf16": "bfloat16", "f32": "float32", "i32": "int32", "u8": "uint8"}
_DTYPE_BYTES = {"bf16": 2, "f32": 4, "i32": 4, "u8": 1}


def _module(name: str) -> Any:
    # Only a library the caller already imported can have made the tensor: never import torch.
    return sys.modules.get(name)


def is_torch(x: Any) -> bool:
    torch = _module("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def is_numpy(x: Any) -> bool:
    np = _module("numpy")
    return np is not None and isinstance(x, np.ndarray)


def _torch_export(x: Any) -> tuple[Any, str | None]:
    torch = _module("torch")
    t = x.detach()  # same memory; DLPack refuses tensors that require grad
    reinterpret = None
    if t.dtype == getattr(torch, "float8_e4m3fn", None):
        t, reinterpret = t.view(torch.uint8), "e4m3"
    if t.is_cuda:
        # stream=-1: export without making any stream wait. latte runs the op on the stream the
        # call names (torch's current stream by default), which orders it after the producer.
        return t.__dlpack__(stream=-1), reinterpret
    return t, reinterpret


def _numpy_export(x: Any) -> tuple[Any, str | None]:
    np = _module("numpy")
    name = x.dtype.name
    if name == "bfloat16":  # ml_dtypes: numpy's DLPack export does not know these dtypes
        return x.view(np.uint16), "bf16"
    if name == "float8_e4m3fn":
        return x.view(np.uint8), "e4m3"
    return x, None


def arg(x: Any, name: str, op: str, *, writable: bool = False) -> "_latte.TensorArg":
    """Wraps ``x`` for the C++ op without copying. ``writable``: the op writes into it.
    ``op`` and ``name`` name it in error messages."""
    if is_torch(x):
        obj, reinterpret = _torch_export(x)
    elif is_numpy(x):
        obj, reinterpret = _numpy_export(x)
    else:
        obj, reinterpret = x, None
    return _latte.TensorArg(obj, name, writable, reinterpret, op)


def optional_arg(x: Any, name: str, op: str, *,
                 writable: bool = False) -> "_latte.TensorArg | None":
    return None if x is None else arg(x, name, op, writable=writable)


def lead_shape(x: Any, name: str, op: str, count: int) -> tuple[int, ...]:
    """The first ``count`` sizes of an input, to size an output allocated for it; zeros when it
    has fewer dimensions (an output sized from a malformed input is never used: C++ checks that
    input first and reports it). Raises as ``arg`` does for an object that is not a tensor."""
    shape = x.shape if is_torch(x) or is_numpy(x) else arg(x, name, op).shape
    shape = tuple(int(s) for s in shape)
    return shape[:count] if len(shape) >= count else (0,) * count


def empty_like_input(like: Any, shape: Sequence[int], dtype: str, name: str) -> Any:
    """An uninitialized output of latte dtype ``dtype`` allocated the way ``like`` was."""
    shape = tuple(int(s) for s in shape)
    try:
        return _empty_like_input(like, shape, dtype, name)
    except (MemoryError, RuntimeError, ValueError) as e:  # torch's / numpy's allocation failures
        nbytes = _DTYPE_BYTES[dtype]
        for s in shape:
            nbytes *= max(s, 0)
        raise OutOfMemoryError(
            f"{name}: latte could not allocate the output {list(shape)} {dtype} ({nbytes} bytes) "
            f"like the input: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}. "
            f"Check the inputs' shapes, or pass {name}= an output you allocated") from e


def _empty_like_input(like: Any, shape: Sequence[int], dtype: str, name: str) -> Any:
    if is_torch(like):
        torch = _module("torch")
        torch_dtype = getattr(torch, _ARRAY_DTYPE_NAMES[dtype])
        return torch.empty(shape, dtype=torch_dtype, device=like.device)
    if is_numpy(like):
        np = _module("numpy")
        if dtype == "bf16":
            try:
                import ml_dtypes
            except ImportError:
                raise DTypeError(
                    f"{name}: numpy has no bfloat16 without ml_dtypes: pip install ml_dtypes, "
                    f"or pass {name}= a bfloat16 output you allocated"
                ) from None
            return np.empty(shape, dtype=ml_dtypes.bfloat16)
        return np.empty(shape, dtype=_ARRAY_DTYPE_NAMES[dtype])
    raise ArgumentTypeError(
        f"{name}: latte allocates outputs like torch tensors and numpy arrays, and the input is a "
        f"{type(like).__module__}.{type(like).__name__}: pass {name}= (an output tensor of shape "
        f"{list(shape)}, dtype {_ARRAY_DTYPE_NAMES[dtype]}) on the input's device"
    )


def stream_handle(stream: Any, like: Any) -> int:
    """The cudaStream_t for a call: ``stream`` (an int handle, a torch.cuda.Stream, or any object
    with ``cuda_stream`` or ``ptr``), or by default torch's current stream on ``like``'s device.
    0 (the legacy default stream) for other CUDA producers; ignored on the CPU."""
    if stream is None:
        if is_torch(like) and like.is_cuda:
            torch = _module("torch")
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
            if raw is not None:  # the handle, without making a torch.cuda.Stream
                return raw(like.get_device())
            return torch.cuda.current_stream(like.device).cuda_stream
        return 0
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    for attribute in ("cuda_stream", "ptr"):
        handle = getattr(stream, attribute, None)
        if isinstance(handle, int):
            return handle
    raise ArgumentTypeError(
        f"stream must be a cudaStream_t as an int, a torch.cuda.Stream or an object with a "
        f"cuda_stream or ptr attribute; got a {type(stream).__name__}"
    )


def shape_of(x: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in x.shape)
