"""The preamble of the GPU test modules (tests/python/*_gpu.py): skip the whole module, saying
why, unless torch sees a CUDA device and this latte was built with CUDA."""

import pytest


def cuda_torch():
    """torch, for a module whose tests need a CUDA device and latte's CUDA backends."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (these run on the GPU machine: scripts/gpu-check python)",
                    allow_module_level=True)
    import latte

    if not latte.built_with_cuda():
        pytest.skip("this latte was built without CUDA", allow_module_level=True)
    return torch
