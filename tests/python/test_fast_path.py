"""The per-call fast path: torch tensors read from their descriptors (no DLPack) give the same
views, results and errors as the DLPack path, and the per-call selection cache still follows
LATTE_BACKEND / LATTE_EXCLUDE, policies and plugins (docs/python.md, "Host cost of a call")."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import latte
from latte import _latte, _tensors

torch = pytest.importorskip("torch")

ROOT = pathlib.Path(__file__).resolve().parents[2]


def old_arg(x, name, op="test", writable=False):
    """The DLPack path every tensor took before the descriptor path."""
    return _tensors.arg(x, name, op, writable=writable)


def views():
    base = torch.arange(4 * 6 * 8, dtype=torch.float32).reshape(4, 6, 8)
    f8 = torch.randn(3, 5).to(torch.float8_e4m3fn)
    grad = torch.randn(2, 3, requires_grad=True)
    return {
        "f32 contiguous": base,
        "f32 transposed": base.transpose(0, 2),
        "f32 sliced with steps": base[1:, ::2, 1::3],
        "f32 storage offset": base[2],
        "f32 expanded (stride 0)": torch.randn(1, 8).expand(4, 8),
        "bf16": torch.randn(3, 4, 576).bfloat16(),
        "bf16 padded rows": torch.randn(3, 600).bfloat16()[:, :576],
        "f16": torch.randn(2, 2).half(),
        "float8_e4m3fn": f8,
        "float8 as uint8 view": f8.view(torch.uint8),
        "int32": torch.arange(12, dtype=torch.int32).reshape(3, 4),
        "uint8": torch.zeros(2, 64, 656, dtype=torch.uint8),
        "requires_grad": grad,
        "requires_grad view": grad[:, 1:],
        "Parameter": torch.nn.Parameter(torch.randn(2, 2)),
        "rank 0": torch.tensor(1.5),
        "empty": torch.empty(0, 576).bfloat16(),
        "rank 6": torch.zeros(1, 2, 1, 2, 1, 2),
    }


@pytest.mark.parametrize("name", list(views()))
def test_descriptor_view_equals_the_dlpack_view(name):
    x = views()[name]
    new = _latte.tensor_view(x, "x", "test")
    old = old_arg(x, "x")
    assert new.from_descriptor and not old.from_descriptor
    assert new.describe() == old.describe()
    assert (new.data_ptr, new.shape, new.dtype, new.device) == (old.data_ptr, old.shape, old.dtype,
                                                               old.device)
    assert new.data_ptr == x.data_ptr()


def test_what_the_descriptor_path_does_not_take_goes_through_dlpack_and_fails_the_same():
    cases = {
        "int64": torch.zeros(2, 3, dtype=torch.int64),
        "float64": torch.zeros(2, dtype=torch.float64),
        "bool": torch.zeros(2, dtype=torch.bool),
        "meta device": torch.empty(2, 3, device="meta"),
        "sparse": torch.zeros(2, 3).to_sparse(),
        "rank 7": torch.zeros(1, 1, 1, 1, 1, 1, 2),
    }
    for case, x in cases.items():
        with pytest.raises(latte.LatteError) as new:
            _latte.tensor_view(x, "x", "test")
        with pytest.raises(latte.LatteError) as old:
            old_arg(x, "x")
        assert type(new.value) is type(old.value), case
        assert str(new.value) == str(old.value), case


def test_a_torch_subclass_takes_the_dlpack_path():
    class Mine(torch.Tensor):
        pass

    x = torch.arange(6, dtype=torch.int32).as_subclass(Mine)
    view = _latte.tensor_view(x, "x", "test")
    assert not view.from_descriptor and view.describe() == old_arg(x, "x").describe()


# --- the same results through both paths ----------------------------------------------------


def _bf16(*shape, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).bfloat16()


def test_sparse_mla_results_match_the_dlpack_path():
    # q a strided view (rows padded), requiring grad; indices a column slice; fp8 and bf16 caches.
    q_store = torch.zeros(2, 8, 640).bfloat16()
    q_store[..., :576] = _bf16(2, 8, 576, seed=1)
    q = q_store[..., :576].requires_grad_(True)
    idx = torch.randperm(4 * 64, generator=torch.Generator().manual_seed(2))[:2 * 48]
    idx = idx.to(torch.int32).reshape(2, 48)[:, :24]  # [2, 24] with row stride 48
    caches = {"bf16": _bf16(4, 64, 576, scale=0.3, seed=3)}
    fp8 = torch.zeros(4, 64, 656, dtype=torch.uint8)
    latte.kv_store(_bf16(4 * 64, 512, seed=4), _bf16(4 * 64, 64, seed=5),
                   torch.arange(4 * 64, dtype=torch.int32), fp8)
    caches["fp8_ds_mla"] = fp8
    for name, kv in caches.items():
        out_new = torch.empty(2, 8, 512).bfloat16()
        lse_new = torch.empty(2, 8)
        latte.sparse_mla(q, kv, idx, 0.0625, out=out_new, lse=lse_new)
        out_old = torch.empty(2, 8, 512).bfloat16()
        lse_old = torch.empty(2, 8)
        _latte.sparse_mla(old_arg(q.detach(), "q"), old_arg(kv, "kv_cache"), old_arg(idx, "indices"),
                          old_arg(out_old, "out", writable=True),
                          old_arg(lse_old, "lse", writable=True), 0.0625)
        assert torch.equal(out_new.view(torch.int16), out_old.view(torch.int16)), name
        assert torch.equal(lse_new, lse_old), name
        assert torch.isfinite(lse_new).all(), name


def test_indexer_topk_with_float8_q_matches_the_dlpack_path():
    t, h, blocks, bs = 3, 4, 4, 64
    g = torch.Generator().manual_seed(7)
    k_cache = torch.zeros(blocks, bs, 132, dtype=torch.uint8)
    latte.indexer_k_store(_bf16(blocks * bs, 128, seed=8), torch.arange(blocks * bs, dtype=torch.int32),
                          k_cache)
    q = torch.randn(t, h, 128, generator=g).to(torch.float8_e4m3fn)
    q_scale = torch.rand(t, h, generator=g) + 0.5
    weights = torch.randn(t, h, generator=g)
    block_table = torch.randperm(blocks, generator=g).to(torch.int32).reshape(1, blocks)
    visible = torch.tensor([100, 200, 256], dtype=torch.int32)
    request = torch.zeros(t, dtype=torch.int32)
    new = latte.indexer_topk(q, weights, k_cache, block_table, visible, 32, q_scale=q_scale,
                             token_request=request)
    old = torch.empty(t, 32, dtype=torch.int32)
    _latte.indexer_topk(old_arg(q, "q"),
                        old_arg(q_scale, "q_scale"), old_arg(weights, "weights"),
                        old_arg(k_cache, "k_cache"), old_arg(block_table, "block_table"),
                        old_arg(request, "token_request"), old_arg(visible, "visible_lens"),
                        old_arg(old, "indices", writable=True))
    assert torch.equal(new, old)
    assert (new >= 0).sum() > 0


def test_logical_to_slots_strided_and_numpy_agree():
    positions = torch.arange(40, dtype=torch.int32).reshape(4, 10)[:, 1::1]  # row stride 10
    block_table = torch.tensor([[3, 1, 0]], dtype=torch.int32)
    request = torch.zeros(4, dtype=torch.int32)
    new = latte.logical_to_slots(positions, block_table, 16, token_request=request)
    via_numpy = latte.logical_to_slots(positions.numpy(), block_table.numpy(), 16,
                                       token_request=request.numpy())
    assert np.array_equal(new.numpy(), via_numpy)
    slots = torch.full((4, 9), 7, dtype=torch.int32)
    assert latte.logical_to_slots(positions, block_table, 16, token_request=request,
                                  slots=slots) is slots
    assert torch.equal(slots, new)


# --- errors are the ones the DLPack path gave -------------------------------------------------


def _mla_inputs():
    q = _bf16(1, 8, 576)
    kv = _bf16(2, 64, 576)
    idx = torch.arange(16, dtype=torch.int32).reshape(1, 16)
    out = torch.empty(1, 8, 512).bfloat16()
    return q, kv, idx, out


def _error(call):
    with pytest.raises(latte.LatteError) as info:
        call()
    return type(info.value), str(info.value)


def _old_sparse_mla(q, kv, idx, out):
    _latte.sparse_mla(old_arg(q, "q", "sparse_mla"), old_arg(kv, "kv_cache", "sparse_mla"),
                      old_arg(idx, "indices", "sparse_mla"),
                      old_arg(out, "out", "sparse_mla", writable=True), None, 0.0625)


@pytest.mark.parametrize("bad", ["q dim", "q dtype", "indices dtype", "indices int64",
                                 "out strided", "cache rows", "kv dtype"])
def test_errors_are_unchanged(bad):
    q, kv, idx, out = _mla_inputs()
    if bad == "q dim":
        q = _bf16(1, 8, 575)
    elif bad == "q dtype":
        q = q.float()
    elif bad == "indices dtype":
        idx = idx.to(torch.uint8)
    elif bad == "indices int64":
        idx = idx.long()
    elif bad == "out strided":
        out = torch.empty(1, 8, 1024).bfloat16()[..., ::2]
    elif bad == "cache rows":
        kv = _bf16(2, 64, 600)[..., :576].transpose(0, 1)
    elif bad == "kv dtype":
        kv = kv.half()
    new = _error(lambda: latte.sparse_mla(q, kv, idx, 0.0625, out=out))
    old = _error(lambda: _old_sparse_mla(q, kv, idx, out))
    assert new == old
    if bad == "indices int64":
        assert new[0] is latte.DTypeError and "indices has dtype int64" in new[1]


def test_topk_and_indices_disagreeing_is_still_an_invalid_argument():
    q = torch.zeros(1, 4, 128).bfloat16()
    with pytest.raises(latte.InvalidArgumentError, match=r"topk is 8 but indices= is i32\[1, 4\]"):
        latte.indexer_topk(q, torch.zeros(1, 4), torch.zeros(1, 64, 132, dtype=torch.uint8),
                           torch.zeros(1, 1, dtype=torch.int32), torch.ones(1, dtype=torch.int32), 8,
                           indices=torch.empty(1, 4, dtype=torch.int32))


def test_bad_streams_are_still_refused():
    q, kv, idx, out = _mla_inputs()
    with pytest.raises(latte.ArgumentTypeError, match="stream must be a cudaStream_t"):
        latte.sparse_mla(q, kv, idx, 0.0625, out=out, stream="default")
    with pytest.raises(latte.ArgumentTypeError, match="stream must be a cudaStream_t"):
        latte.sparse_mla(q, kv, idx, 0.0625, out=out, stream=True)
    latte.sparse_mla(q, kv, idx, 0.0625, out=out, stream=0)  # ignored on the CPU


def test_non_tensors_are_still_refused_with_the_same_message():
    q, kv, idx, out = _mla_inputs()
    with pytest.raises(latte.ArgumentTypeError, match="sparse_mla: indices must be a tensor"):
        latte.sparse_mla(q, kv, [[1, 2]], 0.0625, out=out)
    with pytest.raises(latte.ArgumentTypeError, match="sparse_mla: q must be a tensor"):
        latte.sparse_mla("q", kv, idx, 0.0625)


# --- the per-call cache follows the environment, policies and plugins -------------------------


def _slots_call():
    positions = torch.zeros(1, 1, dtype=torch.int32)
    slots = torch.empty(1, 1, dtype=torch.int32)
    return lambda: _latte.logical_to_slots(positions, torch.zeros(1, 1, dtype=torch.int32), None,
                                           slots, 64)


def test_environment_changes_take_effect_on_the_next_call(monkeypatch):
    call = _slots_call()
    assert call() == "cpu.reference"
    assert call() == "cpu.reference"  # cached
    monkeypatch.setenv("LATTE_BACKEND", "nothing.here")
    with pytest.raises(latte.NotFoundError, match="nothing.here"):
        call()
    monkeypatch.setenv("LATTE_BACKEND", "cpu.reference")
    assert call() == "cpu.reference"
    monkeypatch.delenv("LATTE_BACKEND")
    monkeypatch.setenv("LATTE_EXCLUDE", "cpu.*")
    with pytest.raises(latte.NoValidBackendError):
        call()
    monkeypatch.delenv("LATTE_EXCLUDE")
    assert call() == "cpu.reference"
    with pytest.raises(latte.NotFoundError):  # backend= is part of the key too
        _latte.logical_to_slots(torch.zeros(1, 1, dtype=torch.int32),
                                torch.zeros(1, 1, dtype=torch.int32), None,
                                torch.empty(1, 1, dtype=torch.int32), 64, "other.*")
    assert call() == "cpu.reference"


def _example_plugin():
    for path in sorted((ROOT / "build" / "plugins").glob("liblatte_example*.so")):
        return path
    return None


@pytest.mark.skipif(_example_plugin() is None,
                    reason="the example plugin is not built (build/plugins/liblatte_example.so; scripts/build)")
def test_policy_environment_and_plugin_changes_switch_the_backend_between_calls():
    # A fresh process: a loaded plugin stays for the process's life.
    script = textwrap.dedent(f"""
        import os, torch, latte
        from latte import _latte
        q = torch.randn(1, 8, 576).bfloat16()
        kv = torch.randn(2, 64, 576).bfloat16()
        idx = torch.arange(16, dtype=torch.int32).reshape(1, 16)
        out = torch.empty(1, 8, 512).bfloat16()
        run = lambda: _latte.sparse_mla(q, kv, idx, out, None, 0.0625)
        seen = [run(), run()]
        latte.load_plugin({str(_example_plugin())!r})
        seen += [run(), run()]
        latte.set_policy({{"latte_policy": 1, "rules": [{{"name": "ref", "order": ["cpu.reference"]}}]}})
        seen += [run()]
        latte.set_policy(None)
        seen += [run()]
        os.environ["LATTE_BACKEND"] = "cpu.reference"
        seen += [run()]
        del os.environ["LATTE_BACKEND"]
        os.environ["LATTE_EXCLUDE"] = "example.*"
        seen += [run()]
        del os.environ["LATTE_EXCLUDE"]
        seen += [run()]
        print(",".join(seen))
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("LATTE_BACKEND", "LATTE_EXCLUDE")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    ref, ex = "cpu.reference", "example.cpu_sparse_mla"
    assert result.stdout.strip().split(",") == [ref, ref, ex, ex, ref, ex, ref, ref, ex]
