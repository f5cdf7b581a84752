"""C++ failures reach Python as latte.errors classes carrying the C++ message unchanged."""

import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest
from helpers import bf16

import latte
from latte import _latte

SCALE = 0.0625

MAPPING = [
    ("invalid_argument", latte.InvalidArgumentError, ValueError),
    ("not_found", latte.NotFoundError, ValueError),
    ("no_valid_backend", latte.NoValidBackendError, ValueError),
    ("config_error", latte.ConfigError, ValueError),
    ("policy_error", latte.PolicyError, ValueError),
    ("plugin_error", latte.PluginError, ImportError),
    ("unsupported", latte.UnsupportedError, NotImplementedError),
    ("cuda_error", latte.CudaError, RuntimeError),
    ("out_of_memory", latte.OutOfMemoryError, MemoryError),
    ("internal", latte.InternalError, RuntimeError),
]


@pytest.mark.parametrize("code, cls, builtin", MAPPING)
def test_every_error_code_maps_to_its_class(code, cls, builtin):
    message = f"something about {code}: got 3; expected 4. Do this."
    with pytest.raises(cls) as info:
        _latte._raise_error(code, message)
    assert isinstance(info.value, builtin) and isinstance(info.value, latte.LatteError)
    assert str(info.value) == message and info.value.code == code


def test_a_dtype_problem_is_a_type_error():
    with pytest.raises(latte.DTypeError) as info:
        _latte._raise_error("invalid_argument", "sparse_mla: q has dtype f32: got ...")
    assert isinstance(info.value, TypeError) and info.value.code == "invalid_argument"


def test_shape_error_carries_the_validation_message(rng):
    q = bf16(rng, 2, 576)  # rank 2, not [T, H, 576]
    with pytest.raises(latte.InvalidArgumentError) as info:
        latte.sparse_mla(q, bf16(rng, 1, 4, 576), np.zeros((2, 4), np.int32), SCALE,
                         out=np.zeros((2, 1, 512), ml_dtypes.bfloat16))
    message = str(info.value)
    assert message.startswith("sparse_mla: q has rank 2: got bf16[2, 576]")
    assert "expected [T, H, 576] bf16" in message


def test_wrong_dtype_from_the_validation_layer_is_a_type_error(rng):
    q = bf16(rng, 2, 4, 576).astype(np.float32)
    with pytest.raises(TypeError, match=r"sparse_mla: q has dtype f32: .* Convert q to bf16"):
        latte.sparse_mla(q, bf16(rng, 1, 4, 576), np.zeros((2, 4), np.int32), SCALE)


def test_dtype_latte_does_not_know_is_a_type_error(rng):
    with pytest.raises(latte.DTypeError, match="sparse_mla: indices has dtype int64"):
        latte.sparse_mla(bf16(rng, 2, 4, 576), bf16(rng, 1, 4, 576), np.zeros((2, 4)).astype(np.int64),
                         SCALE)


def test_not_a_tensor_is_an_argument_type_error(rng):
    with pytest.raises(latte.ArgumentTypeError, match="kv_cache must be a tensor .* got a builtins.list, which has no DLPack"):
        latte.sparse_mla(bf16(rng, 2, 4, 576), [[1.0]], np.zeros((2, 4), np.int32), SCALE)


def test_bad_scale_and_kv_format(rng):
    args = (bf16(rng, 1, 4, 576), bf16(rng, 1, 4, 576), np.zeros((1, 4), np.int32))
    with pytest.raises(latte.InvalidArgumentError, match="scale is 0"):
        latte.sparse_mla(*args, 0.0)
    with pytest.raises(latte.InvalidArgumentError, match="kv_format is 'fp8_ds_mla' but kv_cache holds a bf16"):
        latte.sparse_mla(*args, SCALE, kv_format="fp8_ds_mla")
    with pytest.raises(latte.InvalidArgumentError, match="'fp9' is not a cache format"):
        latte.sparse_mla(*args, SCALE, kv_format="fp9")


def test_e4m3_mla_cache_is_refused_with_the_fix(rng):
    cache = np.zeros((1, 4, 656), dtype=ml_dtypes.float8_e4m3fn)
    with pytest.raises(latte.DTypeError, match=r"kv_cache has dtype e4m3.*pass it as u8"):
        latte.sparse_mla(bf16(rng, 1, 4, 576), cache, np.zeros((1, 4), np.int32), SCALE)


def test_unknown_backend_and_model():
    with pytest.raises(latte.NotFoundError):
        latte.select("no-such-model")
    with pytest.raises(latte.NotFoundError, match="nope"):
        latte.sparse_mla(np.zeros((1, 1, 576), ml_dtypes.bfloat16), np.zeros((1, 4, 576), ml_dtypes.bfloat16),
                         np.zeros((1, 4), np.int32), SCALE, backend="nope.*")


def test_config_policy_and_plugin_errors(tmp_path):
    bad_config = tmp_path / "config.json"
    bad_config.write_text('{"num_attention_heads": "many"}')
    with pytest.raises(latte.ConfigError, match="num_attention_heads"):
        latte.select(str(bad_config))
    with pytest.raises(latte.PolicyError):
        latte.select("glm-5", policy={"latte_policy": 1, "rules": [{"order": 5}]})
    with pytest.raises(latte.PluginError) as info:
        latte.load_plugin(tmp_path / "missing.so")
    assert isinstance(info.value, ImportError) and "missing.so" in str(info.value)
    with pytest.raises(latte.InvalidArgumentError, match="tensor-parallel size 3 does not divide"):
        latte.select("glm-5", tp=3)


def test_check_indices_reports_the_bad_entry(rng):
    indices = np.array([[0, 1, 99, -1]], dtype=np.int32)
    args = (bf16(rng, 1, 2, 576), bf16(rng, 1, 8, 576), indices, SCALE)
    latte.sparse_mla(*args)  # out of range is "none" without the check
    with pytest.raises(latte.InvalidArgumentError, match="99"):
        latte.sparse_mla(*args, check_indices=True)


def test_read_only_output_is_refused(rng):
    out = np.zeros((1, 2, 512), ml_dtypes.bfloat16)
    out.flags.writeable = False
    with pytest.raises(latte.InvalidArgumentError, match="out must be a writable tensor"):
        latte.sparse_mla(bf16(rng, 1, 2, 576), bf16(rng, 1, 4, 576), np.zeros((1, 4), np.int32),
                         SCALE, out=out)


def test_a_failed_allocation_inside_latte_is_an_out_of_memory_error():
    # Any std::bad_alloc inside latte: a latte error that `except MemoryError` still catches.
    with pytest.raises(latte.OutOfMemoryError) as info:
        _latte._raise_error("std::bad_alloc", "")
    assert isinstance(info.value, MemoryError) and isinstance(info.value, latte.LatteError)
    assert info.value.code == "out_of_memory" and "std::bad_alloc" in str(info.value)


def test_a_step_larger_than_the_memory_is_refused_with_what_fits():
    with pytest.raises(MemoryError) as info:
        latte.run_dsa_step("glm-5", batch=4096, context=200000)
    assert isinstance(info.value, latte.OutOfMemoryError)
    message = str(info.value)
    assert message.startswith("--batch 4096 --context 200000 of glm-5 needs about ")
    assert "GiB of host memory; available: " in message
    assert "at --context 200000 at most --batch " in message
    assert message.endswith("lower --batch or --context")


def test_an_allocation_the_process_cannot_have_names_the_bytes():
    # Under an address-space limit the estimate (from MemAvailable) passes and the allocation
    # itself fails: a latte error naming the bytes, not a bare MemoryError.
    script = textwrap.dedent("""
        import resource, latte
        with open("/proc/self/statm") as f:
            vm = int(f.read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (vm + (96 << 20), resource.RLIM_INFINITY))
        try:
            latte.run_dsa_step("glm-5", tp=8, batch=16, context=16384)
        except latte.OutOfMemoryError as e:
            print(type(e).__name__, isinstance(e, MemoryError), e)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("OutOfMemoryError True could not allocate "), r.stdout
    assert "bytes) of host memory for a workload buffer" in r.stdout


@pytest.mark.skipif(latte.built_with_cuda(), reason="a CUDA build has CUDA backends")
def test_no_backend_on_a_cuda_device_says_the_build_has_no_cuda():
    # The README's first example on a CPU-only install.
    with pytest.raises(latte.NoValidBackendError) as info:
        latte.select("glm-5", tp=8, device="sm_120", kv_cache="fp8_ds_mla")
    message = str(info.value)
    assert "this latte was built without CUDA, so none of its own backends runs on sm_120" in message
    assert "install a CUDA build (`pip install .` from the source tree with the CUDA toolkit's nvcc" in message
    with pytest.raises(latte.NoValidBackendError) as info:  # nothing valid on the CPU: no such note
        latte.select("glm-5", exclude="cpu.*")
    assert "built without CUDA" not in str(info.value)
