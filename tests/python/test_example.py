"""examples/dsa_layer_glm5.py runs on the CPU and matches its torch-only layer (needs torch)."""

import importlib.util
import pathlib
import sys

import pytest

pytest.importorskip("torch")

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "dsa_layer_glm5.py"


def test_glm5_dsa_layer_on_cpu(capsys):
    spec = importlib.util.spec_from_file_location("dsa_layer_glm5", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = example  # dataclasses look their module up there
    spec.loader.exec_module(example)
    assert example.main(["--device", "cpu", "--batch", "2", "--context", "96", "--topk", "32"]) == 0
    printed = capsys.readouterr().out
    assert "prefill" in printed and "decode" in printed and printed.rstrip().endswith("PASSED")
