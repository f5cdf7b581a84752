"""latte's exceptions.

Every failure of the C++ library (``latte::Error``) reaches Python as one of these classes,
chosen by its error code, with the C++ message unchanged: what was wrong, the value, and what
to do. Each class also derives from the built-in exception Python code expects for that kind
of problem, so ``except ValueError`` and ``except TypeError`` keep working.

============================  ====================  =========================================
C++ ``latte::ErrorCode``      latte class           also a
============================  ====================  =========================================
invalid_argument              InvalidArgumentError  ValueError
invalid_argument (a dtype)    DTypeError            TypeError
not_found                     NotFoundError         ValueError
no_valid_backend              NoValidBackendError   ValueError
config_error                  ConfigError           ValueError
policy_error                  PolicyError           ValueError
plugin_error                  PluginError           ImportError
unsupported                   UnsupportedError      NotImplementedError
cuda_error                    CudaError             RuntimeError
out_of_memory                 OutOfMemoryError      MemoryError
internal                      InternalError         RuntimeError
============================  ====================  =========================================

A dtype problem is an ``invalid_argument`` whose message says ``<arg> has dtype <dtype>`` (the
validation layer's wording), or a tensor the Python layer cannot read as any latte dtype.
An argument that is not a tensor at all raises ArgumentTypeError (a TypeError; DTypeError is
one of them). A ``std::bad_alloc`` inside latte is an OutOfMemoryError too. Every instance has
``.code``, the C++ error code's name.
"""

from __future__ import annotations

__all__ = [
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


class LatteError(Exception):
    """Base of every latte error. ``code`` is the C++ ``latte::ErrorCode`` name."""

    code: str = "internal"


class InvalidArgumentError(LatteError, ValueError):
    """A tensor, shape, stride or value the op cannot take."""

    code = "invalid_argument"


class ArgumentTypeError(LatteError, TypeError):
    """An argument of the wrong kind, e.g. a list where a tensor is needed."""

    code = "invalid_argument"


class DTypeError(ArgumentTypeError):
    """A tensor whose dtype the argument does not take."""


class NotFoundError(LatteError, ValueError):
    """An unknown model, backend id, device or file."""

    code = "not_found"


class NoValidBackendError(LatteError, ValueError):
    """No backend accepts the request (or a forced one refuses it).

    The message lists every backend with its reasons and the nearest changes that would make
    one valid. Raised by :func:`latte.select`, ``selection`` is the explained
    :class:`latte.Selection` (``.explain()``, ``.to_dict()``); raised by an op it is None.
    """

    code = "no_valid_backend"
    selection = None


class ConfigError(LatteError, ValueError):
    """A malformed model config.json."""

    code = "config_error"


class PolicyError(LatteError, ValueError):
    """A malformed policy file or dict."""

    code = "policy_error"


class PluginError(LatteError, ImportError):
    """A plugin library that could not be loaded (missing, wrong ABI version, failing)."""

    code = "plugin_error"


class UnsupportedError(LatteError, NotImplementedError):
    """A valid request this build cannot serve (e.g. CUDA tensors with a CPU-only latte)."""

    code = "unsupported"


class CudaError(LatteError, RuntimeError):
    """A CUDA runtime failure."""

    code = "cuda_error"


class OutOfMemoryError(LatteError, MemoryError):
    """Host or device memory that a request needs and that is not there. The message names the
    bytes asked for and, for ``run_dsa_step``, the largest batch and context that fit."""

    code = "out_of_memory"


class InternalError(LatteError, RuntimeError):
    """A bug in latte: please report it with the message."""

    code = "internal"
