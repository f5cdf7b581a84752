"""latte.select and what the process has: the same decisions and texts as the C++ API."""

import pytest

import latte

MINE = {"latte_policy": 1,
        "rules": [{"name": "mine", "when": {"device": "cpu"}, "order": ["cpu.*"]}]}


def test_select_chooses_and_explains():
    s = latte.select("glm-5", tp=8)
    assert s.ok and s.backend == "cpu.reference"
    assert s.rule.startswith("defaults:")
    text = s.explain()
    assert "chosen: cpu.reference" in text and "H=8 (tp 8)" in text
    d = s.to_dict()
    assert d["chosen"] == "cpu.reference"
    assert d["spec"]["num_heads"] == 8 and d["spec"]["op"] == "sparse_mla"
    assert str(s) == text


def test_describe_kernel_names_what_the_chosen_backend_runs():
    # cpu.reference has nothing to add; with a CUDA build, cuda.sparse_mla names its variant on a
    # described sm_90 (no GPU needed to make the kernel).
    assert latte.select("glm-5").describe_kernel() == ""
    try:
        s = latte.select("glm-5", device="sm_90", tokens=128)
    except latte.NoValidBackendError:
        pytest.skip("skipped: this latte build has no CUDA backends")
    assert s.describe_kernel().startswith("row-group kernel: 64 rows per CTA")
    assert "a call of 128 tokens" in s.describe_kernel()


def test_select_default_op_follows_the_model():
    assert latte.select("glm-5").to_dict()["spec"]["op"] == "sparse_mla"
    assert latte.select("deepseek-v3").to_dict()["spec"]["op"] == "mla_decode"
    assert latte.select("glm-5", op="indexer_topk").to_dict()["spec"]["num_heads"] == 32


def test_select_raises_with_the_explanation_when_nothing_is_valid():
    # cuda.* excluded in a CUDA build (a CPU build has no cuda.* ids, and excluding an unknown id
    # is an error): nothing is left for an sm_120 device.
    exclude = "cuda.*" if latte.built_with_cuda() else ()
    with pytest.raises(latte.NoValidBackendError) as info:
        latte.select("glm-5", tp=8, device="sm_120", kv_cache="fp8_ds_mla", exclude=exclude)
    e = info.value
    assert isinstance(e, ValueError) and e.code == "no_valid_backend"
    assert not e.selection.ok and e.selection.backend is None
    # The message is Context::select's: the summary line, then the table explain() prints.
    assert str(e).startswith("no valid attention backend for sparse_mla H=8 (tp 8)")
    assert e.selection.explain() in str(e)
    assert "what would work" in str(e)


def test_force_and_exclude():
    assert latte.select("glm-5", force="cpu.reference").backend == "cpu.reference"
    with pytest.raises(latte.NoValidBackendError) as info:
        latte.select("glm-5", exclude=["cpu.*"])
    assert "excluded" in info.value.selection.explain()
    with pytest.raises(latte.NotFoundError, match="nothing.here"):
        latte.select("glm-5", force="nothing.here")
    # A typo in an exclude list is an error too, never ignored.
    with pytest.raises(latte.NotFoundError, match="excluded backend 'cpu.refrence'"):
        latte.select("glm-5", exclude="cpu.refrence")


def test_policy_applies_to_one_call_only():
    assert latte.select("glm-5", policy=MINE).rule == "user:<policy dict>#mine"
    assert latte.select("glm-5").rule.startswith("defaults:")


def test_policy_from_a_file(tmp_path):
    import json

    path = tmp_path / "policy.json"
    path.write_text(json.dumps(MINE))
    assert latte.select("glm-5", policy=path).rule == f"user:{path}#mine"
    assert latte.check_policy(path) == 1


def test_set_policy_changes_the_global_layer():
    try:
        latte.set_policy(MINE)
        assert latte.select("glm-5").rule == "user:<policy dict>#mine"
        assert latte.policy_rules()[0]["label"] == "user:<policy dict>#mine"
    finally:
        latte.set_policy(None)
    assert latte.select("glm-5").rule.startswith("defaults:")


def test_model_spec():
    m = latte.model_spec("glm-5", tp=8)
    assert m["heads_per_rank"] == 8 and m["softmax_scale"] == 0.0625
    assert m["indexer"] == {"num_heads": 32, "head_dim": 128, "topk": 2048, "kpool": 0,
                            "kpool_compress": False, "kpool_always_select_tail": False,
                            "attended_tokens": 2048}
    assert m["layer_ops"] == ["kv_store", "indexer_k_store", "indexer_topk", "sparse_mla"]
    assert m["mla_layers"] == list(range(78)) and not m["nope"] and m["rope_dim"] == 64
    assert latte.model_spec("deepseek-v3")["indexer"] is None
    assert "glm-5" in latte.model_presets()


def test_devices_and_backends():
    devices = latte.devices()
    assert devices[0]["kind"] == "cpu" and devices[0]["probed"]
    described = {d["label"]: d for d in latte.devices(described=True)}
    sm120 = next(d for d in described.values() if d["arch"] == 120)
    assert sm120["max_smem_per_block"] == 101376 and not sm120["probed"]
    backends = {b["id"]: b for b in latte.backends()}
    ref = backends["cpu.reference"]
    assert ref["source"] == "built-in" and "sparse_mla" in ref["capabilities"]["ops"]
    assert ref["limits"]["heads"] == "1..128"
    assert latte.built_with_cuda() == any(b.startswith("cuda.") for b in backends)


def test_run_dsa_step_passes_and_reports_progress():
    lines = []
    report = latte.run_dsa_step("glm-5", batch=1, context=96, progress=lines.append)
    assert report.passed, report.to_text()
    stages = [s["stage"] for s in report.to_dict()["stages"]]
    assert stages == ["kv_store", "indexer_k_store", "indexer_topk", "sparse_mla"]
    # cpu.reference describes no kernel; a CUDA backend names its variant here
    assert all(isinstance(s["kernel"], str) for s in report.to_dict()["stages"])
    assert lines and "PASSED" in report.to_text()
