"""The type stubs describe the compiled module as it is, and the package exports what it says."""

import ast
import inspect
import pathlib
import re

import latte
from latte import _latte

STUB = pathlib.Path(latte.__file__).with_name("_latte.pyi")


def stub_functions():
    tree = ast.parse(STUB.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            a = node.args
            out[node.name] = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
        elif isinstance(node, ast.ClassDef):
            out[node.name] = None
    return out


def signature_names(function):
    # nanobind functions carry "name(arg: type, *, kw: type = default) -> result" in __doc__.
    first_line = function.__doc__.splitlines()[0]
    params = first_line[first_line.index("(") + 1:first_line.rindex(") ->")]
    return re.findall(r"(?:^|, )(?:\*, )?(\w+):", params)


def test_stub_names_match_the_module():
    public = {n for n in dir(_latte) if not n.startswith("__")}
    assert set(stub_functions()) | {"__version__"} >= public - {"__version__"}
    assert set(stub_functions()) <= public


def test_stub_parameters_match_the_module():
    for name, params in stub_functions().items():
        if params is not None:
            assert signature_names(getattr(_latte, name)) == params, name


def test_package_exports():
    for name in latte.__all__:
        assert hasattr(latte, name), name
    for name in ("sparse_mla", "select", "devices", "backends", "load_plugin"):
        assert inspect.getdoc(getattr(latte, name))
    assert (pathlib.Path(latte.__file__).with_name("py.typed")).exists()
