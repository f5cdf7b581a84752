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


def python_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "latte", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def cpp_cli(*args, env=None):
    return subprocess.run([str(CPP_CLI), *args], capture_output=True, text=True, timeout=120, env=env)


needs_cpp_cli = pytest.mark.skipif(
    CPP_CLI is None, reason="no C++ latte CLI with this package's backends (set LATTE_CLI, or "
                            "build with LATTE_BUILD_TOOLS=ON)")


@pytest.fixture
def broken_plugin_path(tmp_path):
    """LATTE_PLUGIN_PATH with a cut copy of a shared library, an empty one and a directory that
    does not exist: none loads, each for its reason."""
    library = pathlib.Path(latte.__file__).parent / "liblatte.so.0"
    (tmp_path / "libcut.so").write_bytes(library.read_bytes()[:1000])
    (tmp_path / "libempty.so").write_bytes(b"")
    env = dict(os.environ, LATTE_PLUGIN_PATH=f"{tmp_path}:{tmp_path}/missing")
    env.pop("LATTE_POLICY", None)
    return tmp_path, env


def test_select_prints_the_explanation():
    r = python_cli("select", "--model", "glm-5", "--tp", "8")
    assert r.returncode == 0, r.stderr
    assert r.stdout == latte.select("glm-5", tp=8).explain() + "\n"


def test_nothing_valid_exits_1_with_the_table():
    # cuda.* excluded in a CUDA build only: a CPU build has no cuda.* ids to exclude.
    exclude = ["--exclude", "cuda.*"] if latte.built_with_cuda() else []
    r = python_cli("select", "--model", "glm-5", "--tp", "8", "--device", "sm_120", "--op", "all",
                   *exclude)
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


RUN_GLM53 = ["run", "--model", "glm-5.3-flash", "--device", "cpu", "--batch", "1", "--context", "300",
             "--quiet", "--json"]


def test_run_glm53_flash_passes():
    """GLM-5.3-Flash's step: the pooled indexer's stages, MLA without rope."""
    r = python_cli(*RUN_GLM53)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["passed"] is True
    assert [s["stage"] for s in report["stages"]] == ["kv_store", "indexer_pool_store", "indexer_topk",
                                                      "sparse_mla"]


@needs_cpp_cli
def test_cpp_run_glm53_flash_passes():
    r = cpp_cli(*RUN_GLM53)
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
    # A hybrid model with a pooled indexer: what latte serves of it, in text and JSON.
    ["select", "--model", "glm-5.3-flash", "--tp", "8", "--device", "sm_120", "--op", "all"],
    ["select", "--model", "glm-5.3-flash", "--kv-cache", "fp8_ds_mla", "--op", "all", "--json"],
    ["select", "--model", "glm-5.3-flash", "--op", "indexer_topk"],
    # GLM-5.3-Flash's block holds whole pools of 4 tokens: a block size that does not is refused.
    ["run", "--model", "glm-5.3-flash", "--block-size", "30", "--quiet"],
    ["policy", "show"],
    ["policy", "show", "--json"],
]


@needs_cpp_cli
@pytest.mark.parametrize("args", SAME_AS_CPP, ids=" ".join)
def test_same_output_as_the_cpp_cli(args):
    cpp = cpp_cli(*args)
    py = python_cli(*args)
    assert (py.returncode, py.stdout, py.stderr) == (cpp.returncode, cpp.stdout, cpp.stderr)


COMMANDS = "devices, backends, select, policy, run"


@pytest.mark.parametrize("args, message", [
    ([], f"latte: no command given; the commands are: {COMMANDS}\n"),
    (["bogus"], f"latte: unknown command 'bogus'; the commands are: {COMMANDS}\n"),
    (["policy"], "latte: no policy command given; the policy commands are: show, check\n"),
    (["policy", "bogus"], "latte: unknown policy command 'bogus'; the policy commands are: show, check\n"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_an_unknown_or_missing_command_is_named(args, message):
    r = python_cli(*args)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", message)
    if CPP_CLI is not None:
        cpp = cpp_cli(*args)
        assert (cpp.returncode, cpp.stdout, cpp.stderr) == (2, "", message)


USAGE_ERRORS = [
    ["select"],                                        # --model missing
    ["select", "--model"],                             # its value missing
    ["select", "--model", "glm-5", "--tp", "abc"],     # not a number
    ["select", "--model", "glm-5", "--bogus"],         # no such option
    ["devices", "extra"],                              # no such argument
    ["policy", "check"],                               # the file missing
]


@pytest.mark.parametrize("args", USAGE_ERRORS, ids=" ".join)
def test_every_usage_error_exits_2(args):
    # The documented code for bad input, not CLI11's own codes (104, 106, 109, ...).
    py = python_cli(*args)
    assert py.returncode == 2 and py.stderr and not py.stdout
    if CPP_CLI is not None:
        cpp = cpp_cli(*args)
        assert cpp.returncode == 2 and cpp.stderr.startswith("latte: ") and not cpp.stdout, cpp


def test_help_and_version_exit_0():
    assert python_cli("--version").returncode == 0
    assert python_cli("select", "--help").returncode == 0
    if CPP_CLI is not None:
        assert cpp_cli("--version").returncode == 0
        assert cpp_cli("select", "--help").returncode == 0


def test_plugins_that_did_not_load_are_listed(broken_plugin_path):
    directory, env = broken_plugin_path
    r = python_cli("backends", env=env)
    assert r.returncode == 0, r.stderr
    listed = r.stdout.split("not loaded from LATTE_PLUGIN_PATH:\n", 1)[1]
    assert listed == (
        f"  plugin {directory}/libcut.so refused: it is truncated: its segment 0 (loadable) spans bytes "
        f"0..{listed.split('..', 1)[1].split(' ', 1)[0]} but the file has 1000 bytes (an interrupted copy or "
        f"build?); rebuild or reinstall the plugin\n"
        f"  plugin {directory}/libempty.so refused: the file is empty (0 bytes), not a shared library; "
        f"rebuild or reinstall the plugin\n"
        f"  plugin directory {directory}/missing does not exist (from the plugin path "
        f"'{directory}:{directory}/missing')\n")
    for args in (["backends", "--json"], ["select", "--model", "glm-5"], ["policy", "show"]):
        r = python_cli(*args, env=env)
        assert r.returncode == 0, r.stderr
        assert r.stderr.splitlines() == ["latte: LATTE_PLUGIN_PATH: " + line.strip()
                                         for line in listed.splitlines()], args


@needs_cpp_cli
@pytest.mark.parametrize("args", [["backends"], ["backends", "--json"], ["select", "--model", "glm-5"],
                                  ["policy", "show"]], ids=" ".join)
def test_plugins_that_did_not_load_are_listed_as_the_cpp_cli_does(broken_plugin_path, args):
    _, env = broken_plugin_path
    cpp = cpp_cli(*args, env=env)
    py = python_cli(*args, env=env)
    assert "libcut.so refused: it is truncated" in cpp.stdout + cpp.stderr
    assert (py.returncode, py.stdout, py.stderr) == (cpp.returncode, cpp.stdout, cpp.stderr)


def test_a_run_larger_than_the_memory_exits_2_with_the_estimate():
    args = ["run", "--model", "glm-5", "--batch", "4096", "--context", "200000"]
    for r in [python_cli(*args)] + ([cpp_cli(*args)] if CPP_CLI is not None else []):
        assert r.returncode == 2 and not r.stdout
        assert r.stderr.startswith("latte: --batch 4096 --context 200000 of glm-5 needs about "), r.stderr
        assert "lower --batch or --context" in r.stderr
