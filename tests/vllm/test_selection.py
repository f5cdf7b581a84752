"""vLLM's questions to latte's backend (``validate_configuration``) and vLLM's own selector
(``CudaPlatform.get_attn_backend_cls``) with the device capability mocked per GPU family."""

from __future__ import annotations

import pytest
import torch

from conftest import model_config_dict, reload_plugin, vllm_config

from vllm.config import set_current_vllm_config
from vllm.platforms.interface import DeviceCapability

ARCHS = [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)]
LATTE = "latte.integrations.vllm.backend.LatteMLASparseBackend"
HOLE_FILL = "latte.integrations.vllm.backend.LatteMLASparseHoleFillBackend"


def _validate(cls, cap, kv_cache_dtype="auto", block_size=64, head_size=576,
              dtype=torch.bfloat16, use_sparse=True):
    return cls.validate_configuration(
        head_size=head_size, dtype=dtype, kv_cache_dtype=kv_cache_dtype, block_size=block_size,
        use_mla=True, has_sink=False, use_sparse=use_sparse, use_mm_prefix=False,
        use_per_head_quant_scales=False, device_capability=DeviceCapability(*cap),
        attn_type="decoder")


@pytest.fixture(scope="module")
def latte_backend():
    plugin = reload_plugin()
    plugin.register()
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    return AttentionBackendEnum["LATTE_MLA_SPARSE"].get_class()


@pytest.mark.parametrize("cap", ARCHS, ids=lambda c: f"sm_{c[0]}{c[1]}")
@pytest.mark.parametrize("model,tp", [("glm-5", 1), ("glm-5", 8), ("deepseek-v3.2", 1),
                                      ("deepseek-v3.2", 8)])
@pytest.mark.parametrize("kv", ["auto", "fp8_ds_mla"])
def test_accepts_dsa_models_on_every_arch(latte_backend, model_dirs, cap, model, tp, kv):
    with set_current_vllm_config(vllm_config(model_dirs, model, tp=tp, kv_cache_dtype=kv)):
        assert _validate(latte_backend, cap, kv) == []


@pytest.mark.parametrize("kv", ["fp8", "fp8_e4m3"])
def test_plain_fp8_cache_is_refused_with_the_fix(latte_backend, model_dirs, kv):
    with set_current_vllm_config(vllm_config(model_dirs, "glm-5", tp=8)):
        reasons = _validate(latte_backend, (8, 9), kv)
    assert "kv_cache_dtype not supported" in reasons
    assert any("--kv-cache-dtype fp8_ds_mla" in r for r in reasons)


def test_dense_model_is_refused_with_its_reason(latte_backend, model_dirs):
    with set_current_vllm_config(vllm_config(model_dirs, "deepseek-v3", tp=8)):
        reasons = _validate(latte_backend, (8, 0))
    assert any("has no DSA indexer" in r for r in reasons)


def test_non_sparse_layers_and_other_shapes_are_refused(latte_backend, model_dirs):
    with set_current_vllm_config(vllm_config(model_dirs, "glm-5", tp=8)):
        assert "sparse not supported" not in _validate(latte_backend, (8, 0))
        assert "non-sparse not supported" in _validate(latte_backend, (8, 0), use_sparse=False)
        assert "head_size not supported" in _validate(latte_backend, (8, 0), head_size=640)
        # 512 is latte's for a model without rope (GLM-5.3-Flash), not for GLM-5's 64 rope dims.
        assert any("head size 512 does not fit this model" in r
                   for r in _validate(latte_backend, (8, 0), head_size=512))
        assert "dtype not supported" in _validate(latte_backend, (8, 0), dtype=torch.float16)
        assert "compute capability not supported" in _validate(latte_backend, (7, 5))


def test_latte_selector_reasons_reach_vllm(latte_backend, model_dirs, monkeypatch):
    # A model latte's selector refuses (index_topk past latte's limit of 65536): the reason is
    # latte's own, per backend, as vLLM's "not valid" message will print it.
    from latte.integrations.vllm import backend, choice

    config = model_config_dict("glm-5")
    config["index_topk"] = 100000
    monkeypatch.setattr(backend, "_model_config_dict", lambda vllm_config: config)
    with set_current_vllm_config(vllm_config(model_dirs, "glm-5", tp=8)):
        reasons = _validate(latte_backend, (8, 9))
    text = "; ".join(reasons)
    assert "latte has no backend for sparse_mla" in text
    assert "cuda.sparse_mla" in text and "topk" in text
    assert choice.choose(config, tp=8, kv_cache_dtype="auto", block_size=64,
                         capability=(8, 9)).reasons


def test_unreadable_model_config_is_a_reason(latte_backend, model_dirs, monkeypatch):
    from latte.integrations.vllm import backend

    monkeypatch.setattr(backend, "_model_config_dict",
                        lambda vllm_config: {"model_type": "llama", "num_attention_heads": 32})
    with set_current_vllm_config(vllm_config(model_dirs, "glm-5", tp=8)):
        reasons = _validate(latte_backend, (8, 0))
    assert any(r.startswith("latte cannot read this model:") and "kv_lora_rank" in r
               for r in reasons)


# --- vLLM's own selector, with no flag -------------------------------------------------------

def _selector_config(kv="auto"):
    from vllm.v1.attention.selector import AttentionSelectorConfig

    return AttentionSelectorConfig(head_size=576, dtype=torch.bfloat16, kv_cache_dtype=kv,
                                   block_size=64, use_mla=True, use_sparse=True)


@pytest.fixture
def cuda_platform(monkeypatch, clean_overrides):
    """vLLM's CudaPlatform with a mocked device capability: ``set(cap)`` picks the GPU."""
    import vllm.platforms.cuda as cuda

    class Platform:
        cls = cuda.CudaPlatform

        @staticmethod
        def set(cap):
            monkeypatch.setattr(cuda.CudaPlatform, "get_device_capability",
                                classmethod(lambda cls, device_id=0: DeviceCapability(*cap)))

    return Platform


@pytest.mark.parametrize("cap", [(8, 0), (8, 6), (8, 9)], ids=lambda c: f"sm_{c[0]}{c[1]}")
@pytest.mark.parametrize("kv", ["auto", "fp8_ds_mla"])
def test_vllm_selects_latte_on_sm8x_with_no_flag(cuda_platform, model_dirs, cap, kv):
    plugin = reload_plugin()
    cuda_platform.set(cap)
    plugin._take_slots("auto", DeviceCapability(*cap))
    with set_current_vllm_config(vllm_config(model_dirs, "glm-5", tp=8, kv_cache_dtype=kv)):
        chosen = cuda_platform.cls.get_attn_backend_cls(None, _selector_config(kv), num_heads=8)
    assert chosen == HOLE_FILL


def test_vllm_without_latte_finds_nothing_on_sm80(cuda_platform, model_dirs):
    # The hole latte fills: vLLM 0.33 alone has no sparse MLA backend for an A100.
    cuda_platform.set((8, 0))
    with set_current_vllm_config(vllm_config(model_dirs, "glm-5", tp=8)):
        with pytest.raises(ValueError, match="No valid attention backend"):
            cuda_platform.cls.get_attn_backend_cls(None, _selector_config(), num_heads=8)


def test_vllm_keeps_flashmla_on_sm90_unless_preferred(cuda_platform, model_dirs):
    plugin = reload_plugin()
    cuda_platform.set((9, 0))
    cfg = vllm_config(model_dirs, "glm-5", tp=8)
    plugin._take_slots("auto", DeviceCapability(9, 0))
    with set_current_vllm_config(cfg):
        chosen = cuda_platform.cls.get_attn_backend_cls(None, _selector_config(), num_heads=8)
    assert chosen.endswith("flashmla_sparse.FlashMLASparseBackend")
    plugin._take_slots("prefer", DeviceCapability(9, 0))
    with set_current_vllm_config(cfg):
        chosen = cuda_platform.cls.get_attn_backend_cls(None, _selector_config(), num_heads=8)
    assert chosen == LATTE


def test_hole_filler_steps_aside_for_a_valid_vllm_backend(cuda_platform, model_dirs, monkeypatch):
    # Were one of vLLM's own sparse backends valid on this GPU, the hole filler would refuse and
    # say which one works.
    from latte.integrations.vllm import backend, slots

    cuda_platform.set((8, 9))
    monkeypatch.setattr(slots, "valid_vllm_sparse_backends", lambda config, cap: ["X_SPARSE"])
    with set_current_vllm_config(vllm_config(model_dirs, "glm-5", tp=8)):
        reasons = _validate(backend.LatteMLASparseHoleFillBackend, (8, 9))
    assert any("steps aside: vLLM's own X_SPARSE is valid here" in r for r in reasons)


def test_flag_with_a_refused_config_raises_latte_reason(cuda_platform, model_dirs):
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    reload_plugin().register()
    cuda_platform.set((12, 0))
    with set_current_vllm_config(vllm_config(model_dirs, "glm-5", tp=8)):
        chosen = cuda_platform.cls.get_attn_backend_cls(
            AttentionBackendEnum["LATTE_MLA_SPARSE"], _selector_config("fp8_ds_mla"),
            num_heads=8)
        assert chosen == LATTE
        with pytest.raises(ValueError, match="--kv-cache-dtype fp8_ds_mla"):
            cuda_platform.cls.get_attn_backend_cls(
                AttentionBackendEnum["LATTE_MLA_SPARSE"], _selector_config("fp8"), num_heads=8)


def test_a_failing_evaluation_is_a_reason_not_a_crash(latte_backend, model_dirs, monkeypatch):
    from latte.integrations.vllm import backend

    def broken(vllm_config):
        raise KeyError("num_attention_heads")

    monkeypatch.setattr(backend, "_model_config_dict", broken)
    with set_current_vllm_config(vllm_config(model_dirs, "glm-5", tp=8)):
        reasons = _validate(latte_backend, (8, 9))
    assert any("latte could not evaluate this configuration (KeyError" in r for r in reasons)
