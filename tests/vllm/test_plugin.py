"""latte's plugin as vLLM finds and loads it: the entry point, the enum member, the version
check, idempotence, the slots it takes and the indexer it replaces."""

from __future__ import annotations

import importlib.metadata

import pytest

from conftest import reload_plugin

from vllm.platforms.interface import DeviceCapability


def test_entry_point_is_installed():
    eps = importlib.metadata.entry_points(group="vllm.general_plugins")
    latte_eps = [ep for ep in eps if ep.name == "latte"]
    assert len(latte_eps) == 1
    assert latte_eps[0].value == "latte.integrations.vllm:register"
    loaded = latte_eps[0].load()
    assert (loaded.__module__, loaded.__name__) == ("latte.integrations.vllm", "register")


def test_vllm_loads_the_plugin_and_the_enum_names_latte(monkeypatch):
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    from vllm.plugins import load_general_plugins
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    load_general_plugins()  # the real discovery: entry points of vllm.general_plugins
    member = AttentionBackendEnum["LATTE_MLA_SPARSE"]
    cls = member.get_class()
    assert cls.__module__ == "latte.integrations.vllm.backend"
    assert cls.get_name() == "LATTE_MLA_SPARSE"
    assert cls.is_mla() and cls.is_sparse()


def test_register_is_idempotent():
    plugin = reload_plugin()
    plugin.register()
    first = plugin.decisions()
    plugin.register()  # vLLM may load plugins more than once per process
    assert plugin.decisions() == first
    assert any("LATTE_MLA_SPARSE registered" in d for d in first)
    plugin = reload_plugin()
    plugin.register()  # a fresh module finds the member already there: no ValueError
    assert any("LATTE_MLA_SPARSE registered" in d for d in plugin.decisions())


@pytest.mark.parametrize("version,ok", [("0.33.0", True), ("0.33.2", True), ("0.33.0+cu130", True),
                                        ("0.32.1", False), ("0.34.0", False), ("1.0.0", False),
                                        (None, False), ("garbage", False)])
def test_version_range(version, ok):
    assert reload_plugin().version_supported(version) is ok


def test_untested_vllm_registers_nothing_and_says_why(monkeypatch):
    plugin = reload_plugin()
    monkeypatch.setattr(plugin, "_vllm_version", lambda: "0.35.0")
    monkeypatch.delenv(plugin.ALLOW_UNTESTED_ENV, raising=False)
    plugin.register()  # never raises
    (said,) = plugin.decisions()
    assert "vLLM 0.35.0 is outside the range" in said and "vllm==0.33.0" in said
    assert plugin.ALLOW_UNTESTED_ENV in said


def test_register_failure_is_logged_not_raised(monkeypatch):
    plugin = reload_plugin()

    def broken(logger):
        raise RuntimeError("simulated")

    monkeypatch.setattr(plugin, "_register", broken)
    plugin.register()
    assert plugin.decisions() == ["not registered: RuntimeError: simulated"]


@pytest.mark.parametrize("cap", [(8, 0), (8, 6), (8, 9)])
def test_auto_fills_the_hole_on_sm8x(cap, clean_overrides, monkeypatch):
    monkeypatch.delenv("LATTE_VLLM", raising=False)
    plugin = reload_plugin()
    text = plugin._take_slots("auto", DeviceCapability(*cap))
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    taken = [m for m in AttentionBackendEnum if m.is_overridden() and m.name != "LATTE_MLA_SPARSE"]
    assert len(taken) == 1, text
    assert "SPARSE" in taken[0].name
    assert taken[0].get_path() == plugin.HOLE_FILL_PATH
    assert f"on sm_{cap[0]}{cap[1]} vLLM's {taken[0].name} cannot run: latte fills its slot" in text


@pytest.mark.parametrize("cap", [(9, 0), (10, 0), (12, 0)])
def test_auto_takes_no_slot_where_vllm_has_sparse_backends(cap, clean_overrides):
    plugin = reload_plugin()
    text = plugin._take_slots("auto", DeviceCapability(*cap))
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    assert not [m for m in AttentionBackendEnum
                if m.is_overridden() and m.name != "LATTE_MLA_SPARSE"]
    assert "latte takes no slot" in text


@pytest.mark.parametrize("cap", [(9, 0), (10, 0), (12, 0), (8, 0)])
def test_prefer_takes_the_first_sparse_slot(cap, clean_overrides):
    plugin = reload_plugin()
    text = plugin._take_slots("prefer", DeviceCapability(*cap))
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    taken = [m for m in AttentionBackendEnum if m.is_overridden() and m.name != "LATTE_MLA_SPARSE"]
    assert taken, text
    assert all(m.get_path() == plugin.BACKEND_PATH for m in taken)
    assert "LATTE_VLLM=prefer" in text


def test_off_takes_nothing(monkeypatch, clean_overrides):
    monkeypatch.setenv("LATTE_VLLM", "off")
    plugin = reload_plugin()
    plugin.register()
    assert any("LATTE_VLLM=off" in d for d in plugin.decisions())


def test_indexer_replaced_without_deepgemm(monkeypatch):
    plugin = reload_plugin()
    import vllm.utils.deep_gemm as dg
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.model_executor.models.registry import ModelRegistry

    monkeypatch.setattr(dg, "has_deep_gemm", lambda: False)
    text = plugin._take_indexer("auto", DeviceCapability(8, 9))
    assert "DeepGEMM is not installed" in text
    assert op_registry_oot["SparseAttnIndexer"].__name__ == "LatteSparseAttnIndexer"
    for arch in ("DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM"):
        assert ModelRegistry.models[arch].module_name == "latte.integrations.vllm.indexer"
    # Again (another plugin load in the same process): no duplicate-registration assert.
    plugin._take_indexer("auto", DeviceCapability(12, 0))


def test_indexer_kept_on_sm100(monkeypatch):
    # vLLM writes that family's indexer cache with packed UE8M0 scales latte does not read.
    import vllm.utils.deep_gemm as dg

    monkeypatch.setattr(dg, "has_deep_gemm", lambda: False)
    text = reload_plugin()._take_indexer("prefer", DeviceCapability(10, 0))
    assert "packed UE8M0 scales" in text


def test_indexer_kept_with_deepgemm(monkeypatch):
    plugin = reload_plugin()
    import vllm.utils.deep_gemm as dg

    monkeypatch.setattr(dg, "has_deep_gemm", lambda: True)
    assert plugin._take_indexer("auto", DeviceCapability(9, 0)) == \
        "DeepGEMM is installed: the DSA indexer stays vLLM's"
