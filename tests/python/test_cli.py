"""`python -m latte` mirrors the C++ `latte` command line: same output, same exit codes."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

import latte

REPO = pathlib.Path(__file__).resolve().parents[2]


def matching_cpp_cli():
    """The C++ CLI to compare with: LATTE_CLI, the one built beside the package
    (build-python/*/bin, scripts/test-python builds it), or scripts/build's build/bin; the first
    whose build has the same backends as this package (a CUDA build lists more)."""
    candidates = [os.environ.get("LATTE_CLI", "")]
    candidates += sorted(str(p) for p in REPO.glob("build-python/*/bin/latte"))
    candidates.append(str(REPO / "build" / "bin" / "latte"))
    ours = [b["id"] for b in latte.backends()]
    for path in filter(None, candidates):
        if not pathlib.Path(path).exists():
            continue
        r = subprocess.run([path, "backends", "--json"], capture_output=True, text=True, timeout=60)
        if r.returncode == 0 and [b["id"] for b in json.loads(r.stdout)] == ours:
            return pathlib.Path(path)
    return None


CPP_CLI = matching_cpp_cli()


def python_cli(*args):
    return subprocess.run([sys.executable, "-m", "latte", *args], capture_output=True, text=True,
                          timeout=120)


def test_select_prints_the_explanation():
    r = python_cli("select", "--model", "glm-5", "--tp", "8")
    assert r.returncode == 0, r.stderr
    assert r.stdout == latte.select("glm-5", tp=8).explain() + "\n"


def test_nothing_valid_exits_1_with_the_table():
    r = python_cli("select", "--model", "glm-5", "--tp", "8", "--device", "sm_120", "--op", "all",
                   "--exclude", "cuda.*")
    assert r.returncode == 1
    assert r.stdout.count("chosen: none") == 4  # kv_store, indexer_k_store, indexer_topk, sparse_mla


def test_select_json():
    r = python_cli("select", "--model", "glm-5", "--json")
    assert json.loads(r.stdout)["chosen"] == "cpu.reference"


def test_bad_input_exits_2_with_the_message():
    r = python_cli("select", "--model", "glm-5", "--tp", "3")
    assert r.returncode == 2
    assert r.stderr.startswith("latte: tensor-parallel size 3 does not divide")


def test_devices_backends_policy():
    assert python_cli("devices").stdout.startswith("devices on this machine:")
    backends = json.loads(python_cli("backends", "--json").stdout)
    assert [b["id"] for b in backends] == [b["id"] for b in latte.backends()]
    assert "order:" in python_cli("policy", "show").stdout


def test_run_passes():
    r = python_cli("run", "--model", "glm-5", "--batch", "1", "--context", "64", "--quiet", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["passed"] is True


SAME_AS_CPP = [
    ["devices"],
    ["devices", "--json"],
    ["backends"],
    ["backends", "--json"],
    ["select", "--model", "glm-5", "--tp", "8"],
    ["select", "--model", "glm-5", "--tp", "8", "--device", "sm_120", "--op", "all"],
    ["select", "--model", "deepseek-v3.2", "--kv-cache", "fp8_ds_mla", "--device", "sm_90", "--json"],
    ["select", "--model", "glm-5", "--exclude", "cpu.*"],
    ["select", "--model", "kimi-k2", "--tp", "5"],
    ["select", "--model", "no-such-model"],
    ["policy", "show"],
    ["policy", "show", "--json"],
]


@pytest.mark.skipif(CPP_CLI is None, reason="no C++ latte CLI with this package's backends (set "
                                            "LATTE_CLI, or build with LATTE_BUILD_TOOLS=ON)")
@pytest.mark.parametrize("args", SAME_AS_CPP, ids=" ".join)
def test_same_output_as_the_cpp_cli(args):
    cpp = subprocess.run([str(CPP_CLI), *args], capture_output=True, text=True, timeout=120)
    py = python_cli(*args)
    assert (py.returncode, py.stdout, py.stderr) == (cpp.returncode, cpp.stdout, cpp.stderr)
