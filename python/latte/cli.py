"""``python -m latte``: the same commands, options, output and exit codes as the C++ ``latte``
command line (tools/latte/), through the same library functions. Only parsing and printing
live here.

Exit codes: 0 ok, 1 a check failed or nothing is valid, 2 bad input (a usage error too), 3
internal or CUDA error.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List, Optional, Sequence

from . import _latte, errors, selection

_BAD_INPUT = (errors.InvalidArgumentError, errors.ArgumentTypeError, errors.NotFoundError,
              errors.ConfigError, errors.PolicyError, errors.PluginError,
              errors.UnsupportedError, errors.OutOfMemoryError)


class _CheckFailed(Exception):
    """A command that ran but whose answer is "no" (nothing valid, a failed check): exit 1."""


def _dump(value: Any) -> str:
    # `latte ... --json` prints nlohmann::json, whose objects have sorted keys.
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def _load_plugins(paths: Optional[List[str]]) -> None:
    for path in paths or []:
        selection.load_plugin(path)


def _plugin_path_failures() -> List[str]:
    # As tools/latte: a plugin on LATTE_PLUGIN_PATH that did not load is skipped, never silently.
    return [r["error"] for r in selection.plugin_load_results() if not r["loaded"]]


def _warn_plugin_path_failures() -> None:
    for failure in _plugin_path_failures():
        print(f"latte: LATTE_PLUGIN_PATH: {failure}", file=sys.stderr)


def _split(values: Optional[List[str]]) -> List[str]:
    return [part for value in values or [] for part in value.split(",") if part]


# ---- devices -------------------------------------------------------------------------------

def _device_row(d: Dict[str, Any]) -> str:
    if d["kind"] == "cpu":
        handle, arch = "cpu", "-"
    else:
        handle = f"cuda:{d['index']}" if d["probed"] else f"sm_{d['arch']}"
        arch = f"sm_{d['arch']}"
    smem = f"{d['max_smem_per_block']} B" if d["max_smem_per_block"] else "-"
    memory = f"{d['memory_bytes'] / (1 << 30):.1f} GiB" if d["memory_bytes"] else "-"
    return f"  {handle:<8} {d['name']:<28} {arch:>7} {d['sm_count']:>6} {smem:>14} {memory:>12}"


def _print_device_table(devices: List[Dict[str, Any]], title: str) -> None:
    print(title)
    print(f"  {'device':<8} {'name':<28} {'arch':>7} {'SMs':>6} {'smem/block':>14} {'memory':>12}")
    for d in devices:
        print(_device_row(d))


def _cmd_devices(a: argparse.Namespace) -> None:
    probed = selection.devices()
    described = selection.devices(described=True)
    if a.json:
        print(_dump({"devices": probed, "described": described,
                     "built_with_cuda": selection.built_with_cuda()}))
        return
    _print_device_table(probed, "devices on this machine:")
    if not selection.built_with_cuda():
        print("  (this latte was built without CUDA)")
    elif selection.cuda_device_count() == 0:
        print("  (no CUDA device found)")
    print()
    _print_device_table(described, "architectures for --device sm_XY (what-if questions):")


# ---- backends ------------------------------------------------------------------------------

def _names(caps: Dict[str, Any], key: str) -> str:
    return ",".join(caps.get(key) or []) or "any"


def _cmd_backends(a: argparse.Namespace) -> None:
    _load_plugins(a.plugin)
    backends = selection.backends()
    if a.json:
        _warn_plugin_path_failures()  # stdout stays the JSON array
        print(_dump([{k: b[k] for k in ("id", "description", "source", "capabilities")}
                     for b in backends]))
        return
    if not backends:
        print("no backends registered")
    else:
        print(f"{len(backends)} backends\n")
    for b in backends:
        caps, limits = b["capabilities"], b["limits"]
        print(f"{b['id']}  ({b['source']})\n  {b['description']}")
        print(f"  ops: {_names(caps, 'ops')}\n  devices: {_names(caps, 'devices')}   "
              f"arch: {limits['arch']}")
        print(f"  heads: {limits['heads']}   head_dim: {limits['head_dim']}   "
              f"q dtypes: {_names(caps, 'q_dtypes')}   kv caches: {_names(caps, 'kv_caches')}")
        print(f"  block size: {limits['block_size']}   topk: {limits['topk']}   "
              f"s_q: {limits['s_q']}   tokens: {limits['tokens']}")
        if caps.get("workspace"):
            print(f"  workspace: {caps['workspace']}")
        if caps.get("notes"):
            print(f"  notes: {caps['notes']}")
        print()
    failures = _plugin_path_failures()
    if failures:
        print("not loaded from LATTE_PLUGIN_PATH:")
    for failure in failures:
        print(f"  {failure}")


# ---- select --------------------------------------------------------------------------------

def _ops_to_select(op: Optional[str], model: Dict[str, Any]) -> List[Optional[str]]:
    # As tools/latte/cmd_select.cpp: "all" is the ops one layer of the model runs through latte.
    return list(model["layer_ops"]) if op == "all" else [op]


def _cmd_select(a: argparse.Namespace) -> None:
    _warn_plugin_path_failures()
    _load_plugins(a.plugin)
    model = selection.model_spec(a.model, tp=a.tp, kv_cache=a.kv_cache, block_size=a.block_size)
    coverage = model["coverage"]
    if coverage and not a.json:
        print(f"model: {coverage}\n")
    results = []
    for op in _ops_to_select(a.op, model):
        results.append(_latte.select(
            a.model, tp=a.tp, kv_cache=a.kv_cache, block_size=a.block_size, device=a.device,
            op=op, tokens=a.tokens, force=_split(a.force), exclude=_split(a.exclude),
            policy_path=a.policy, strict=False))
    if a.json:
        dicts = [dict(s.to_dict(), kernel=s.describe_kernel(), **({"coverage": coverage} if coverage else {}))
                 for s in results]
        print(_dump(dicts[0] if len(dicts) == 1 else dicts))
    else:
        for s in results:
            print(s.explain())
            kernel = s.describe_kernel()
            if kernel:
                print(f"kernel: {kernel}\n")
    if not all(s.ok for s in results):
        raise _CheckFailed()


# ---- policy --------------------------------------------------------------------------------

def _cmd_policy_show(a: argparse.Namespace) -> None:
    _warn_plugin_path_failures()
    _load_plugins(a.plugin)
    if a.json:
        layers = _latte.policies_json(policy_path=a.policy)
        print("[" + "".join(("\n" if i == 0 else ",\n") + p for i, p in enumerate(layers)) + "\n]")
        return
    for n, rule in enumerate(selection.policy_rules(a.policy), start=1):
        when = ", ".join(rule["when"]) or "always"
        print(f"{n:>2}. {rule['label']}\n    when: {when}\n    order: {' > '.join(rule['order'])}")
    print("\nlayers (highest first): force/exclude (--force, LATTE_BACKEND, LATTE_EXCLUDE) > user "
          "(--policy, LATTE_POLICY) > plugin > defaults")


def _cmd_policy_check(a: argparse.Namespace) -> None:
    count = selection.check_policy(a.file)
    print(f"{a.file}: ok, {count} rule{'' if count == 1 else 's'}")


# ---- run -----------------------------------------------------------------------------------

def _cmd_run(a: argparse.Namespace) -> None:
    _warn_plugin_path_failures()
    _load_plugins(a.plugin)

    def progress(line: str) -> None:
        print(f"... {line}", file=sys.stderr, flush=True)

    report = selection.run_dsa_step(
        a.model, tp=a.tp, kv_cache=a.kv_cache, block_size=a.block_size, batch=a.batch,
        context=a.context, device=a.device, seed=a.seed, repeats=a.repeats, force=a.force,
        exclude=a.exclude, policy=a.policy, progress=None if a.quiet else progress)
    print(report.to_json() if a.json else report.to_text())
    if not report.passed:
        raise _CheckFailed()


# ---- parsing -------------------------------------------------------------------------------

def _add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True,
                   help="Preset (glm-5, glm-5.3-flash, deepseek-v3.2, deepseek-v3, kimi-k2) or a config.json path")
    p.add_argument("--tp", type=int, default=1,
                   help="Tensor-parallel size (must divide the attention heads)")
    p.add_argument("--kv-cache", default="bf16", help="KV-cache format: bf16 or fp8_ds_mla")
    p.add_argument("--block-size", type=int, default=64, help="KV-cache page size in tokens")


def _add_choice_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="append",
                   help="Force a backend: [op=]ID-GLOB (repeatable, or comma-separated)")
    p.add_argument("--exclude", action="append", help="Exclude backends: [op=]ID-GLOB,...")
    p.add_argument("--policy", help="A policy file for the user layer (as LATTE_POLICY)")
    _add_plugin_option(p)


def _add_plugin_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plugin", action="append",
                   help="Load a plugin .so first (repeatable; see also LATTE_PLUGIN_PATH)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m latte",
        description="latte: the attention layer for MLA and DeepSeek-Sparse-Attention models")
    parser.add_argument("--version", action="version", version=_latte.__version__)
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("devices", help="List this machine's devices and the architectures "
                                            "latte can describe")
    p.add_argument("--json", action="store_true", help="Print JSON")
    p.set_defaults(run=_cmd_devices)

    p = commands.add_parser("backends", help="List the registered backends and what each "
                                             "declares it supports")
    p.add_argument("--json", action="store_true", help="Print JSON")
    _add_plugin_option(p)
    p.set_defaults(run=_cmd_backends)

    p = commands.add_parser("select", help="Choose a backend for a model's operation and "
                                           "explain the choice")
    _add_model_options(p)
    p.add_argument("--device", default="cpu",
                   help="cpu, cuda:N, or an architecture sm_80 ... sm_120")
    p.add_argument("--op", help="Operation (default: sparse_mla for DSA models, mla_decode for "
                                "dense), or all")
    p.add_argument("--tokens", type=int, default=0,
                   help="Tokens per call (matches policy 'tokens' conditions)")
    _add_choice_options(p)
    p.add_argument("--json", action="store_true", help="Print JSON")
    p.set_defaults(run=_cmd_select)

    policy = commands.add_parser("policy", help="Show the policy in force or check a policy file")
    policy_commands = policy.add_subparsers(dest="policy_command", required=True)
    p = policy_commands.add_parser("show", help="Print every rule in force, highest precedence "
                                                "first")
    p.add_argument("--json", action="store_true", help="Print the layers as JSON")
    p.add_argument("--policy", help="Add a user policy file first")
    _add_plugin_option(p)
    p.set_defaults(run=_cmd_policy_show)
    p = policy_commands.add_parser("check", help="Parse a policy file and report its first error")
    p.add_argument("file", help="Policy JSON file")
    p.set_defaults(run=_cmd_policy_check)

    p = commands.add_parser("run", help="Run one DSA decode step of a model's shape on random "
                                        "data through the selected backends, verified")
    _add_model_options(p)
    p.add_argument("--batch", type=int, default=4, help="Requests (one decode token each)")
    p.add_argument("--context", type=int, default=2048, help="Tokens of KV per request")
    p.add_argument("--device", default="cpu", help="cpu or cuda:N")
    p.add_argument("--seed", type=int, default=1, help="Random seed")
    p.add_argument("--repeats", type=int, default=0,
                   help="Timed runs per stage (default 1 on the CPU, 20 on CUDA)")
    _add_choice_options(p)
    p.add_argument("--json", action="store_true", help="Print JSON")
    p.add_argument("--quiet", action="store_true", help="No progress lines")
    p.set_defaults(run=_cmd_run)
    return parser


def _commands_of(parser: argparse.ArgumentParser) -> Dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # pylint: disable=protected-access
        if isinstance(action, argparse._SubParsersAction):  # pylint: disable=protected-access
            return dict(action.choices)
    return {}


def _command_error(parser: argparse.ArgumentParser, argv: Sequence[str]) -> Optional[str]:
    """As tools/latte/main.cpp: an unknown or missing command, named with the commands there
    are (argparse would say "invalid choice" or "arguments are required: command")."""
    level, option_seen = "", False
    for token in argv:
        commands = _commands_of(parser)
        if not commands:
            return None
        if token.startswith("-"):
            option_seen = True
            continue
        if token not in commands:
            return (f"unknown {level}command '{token}'; the {level}commands are: "
                    f"{', '.join(commands)}")
        parser, level, option_seen = commands[token], f"{level}{token} ", False
    commands = _commands_of(parser)
    if not commands or option_seen:
        return None
    return f"no {level}command given; the {level}commands are: {', '.join(commands)}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    if not {"-h", "--help", "--version"} & set(argv):
        why = _command_error(parser, argv)
        if why:
            print(f"latte: {why}", file=sys.stderr)
            return 2
    args = parser.parse_args(argv)  # a usage error exits 2
    try:
        args.run(args)
    except _CheckFailed:
        return 1
    except errors.NoValidBackendError as e:
        print(f"latte: {e}", file=sys.stderr)
        return 1
    except _BAD_INPUT as e:
        print(f"latte: {e}", file=sys.stderr)
        return 2
    except errors.LatteError as e:  # CudaError, InternalError
        print(f"latte: {e}", file=sys.stderr)
        return 3
    except MemoryError:  # as the C++ CLI's std::bad_alloc
        print("latte: out of memory: an allocation failed (std::bad_alloc); free memory, or ask "
              "for less (latte run: lower --batch or --context)", file=sys.stderr)
        return 2
    return 0
