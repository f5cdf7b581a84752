#!/usr/bin/env python3
"""One DSA layer's decode step through latte's Python API, timed as a user feels it.

Per step, for B decode tokens (one request each, every request with its own block-table row
over the whole context), the four calls of a GLM-5 layer's sparse-attention step:

1. ``latte.kv_store``: the step's B latents [B, 512] and ropes [B, 64] (bfloat16) into the MLA
   cache at each request's last position (slot_mapping);
2. ``latte.indexer_k_store``: the step's B index keys [B, 128] into the 132-byte index cache;
3. ``latte.indexer_topk``: e4m3 queries [B, 32, 128] with q_scale and weights [B, 32] over each
   request's paged index cache, visible_lens = context, topk 2048, physical slots, into a
   preallocated ``indices=``;
4. ``latte.sparse_mla``: q [B, H, 576] bfloat16 over the MLA cache at those slots, into a
   preallocated ``out=`` (scale: GLM-5's softmax scale, from ``latte.model_spec``).

Only the step's own tokens are written per step; the context is written once before timing
(random valid data, through the same two store calls). Block tables are shuffled pages, so no
request reads its cache contiguously. Every figure is the median over ``--steps`` steps; before
every step (and before every lone stage) a buffer of at least twice the L2 size (256 MiB
unless the L2 is larger) is written with a torch op on the same stream, outside the timed
region, so each step finds its caches cold, as a real model's layer does.

Modes (one table each):

- queued: the four calls back to back from Python with the GPU idle when the step is issued
  (synchronized after the flush): eager decode on a host-bound engine. CUDA events are
  recorded right before and right after each call: stage = end_i - start_i, gap_i =
  start_{i+1} - end_i, step = first to last event; host = time.perf_counter around the four
  calls, in as many steps again without the events (whose records cost host time of their
  own). With the GPU waiting on the host, a stage includes its call's host launch work (the
  start event runs before the call has launched anything) and a gap the event records.
- queued-ahead: the same calls issued while the GPU is held busy (a spin kernel after the
  flush, long enough that the host has queued the whole step before the GPU reaches it): the
  stages run as fast as the GPU allows, so a stage is its GPU time and a gap the GPU's
  launch-to-launch time. queued - queued-ahead is the time the step loses to the host.
- graph: the four calls captured once in a torch.cuda.CUDAGraph (after warm-up, so kernels and
  workspaces exist) and replayed per step, held like queued-ahead; events around the replay
  (outside the graph) give the step; host = perf_counter around ``replay()``.
- alone: each stage by itself (its own event pair, L2 flushed before it, held likewise): its
  cost without neighbours; the step column is the sum of the four.

A correctness guard runs after the first step of each shape and after the first graph replay
(outputs poisoned first): every index is -1 or a distinct slot of that token's own request,
exactly min(context, topk) of them valid, and out is finite; anything else raises.

    python3 bench/python/dsa_step.py --device cuda
    python3 bench/python/dsa_step.py --device cpu --contexts 256 --batches 1,2 --heads 8 \\
        --steps 2 --no-graph

``--device cpu`` runs the same code on cpu.reference (float64 compute: tiny shapes only),
timed with perf_counter only (no events, no hold, no graph). A measurement, not a test: nothing
here passes or fails on a timing.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

import latte

MODEL = "glm-5"
PAGE = 64
STAGES = ("kv_store", "indexer_k_store", "indexer_topk", "sparse_mla")
FILL_CHUNK = 65536  # context tokens written per setup call


def int_list(text: str) -> List[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


class Timer:
    """Puts the step's timestamps on the stream (CUDA events) or takes them on the host."""

    def __init__(self, cuda: bool, flush_bytes: int, hold_us: float):
        self.cuda = cuda
        self.flush_buf = torch.empty(flush_bytes // 4, dtype=torch.int32,
                                     device="cuda" if cuda else "cpu")
        self.hold_cycles = 0
        if cuda and hold_us > 0 and hasattr(torch.cuda, "_sleep"):
            self.hold_cycles = int(hold_us * self._spin_cycles_per_us())
        self.late = 0  # held steps where the GPU may have reached the step before it was queued
        self.hold_event = self.events(1)[0]

    @staticmethod
    def _spin_cycles_per_us() -> float:
        cycles = 1_000_000
        torch.cuda._sleep(cycles)  # first launch outside the measurement
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.cuda._sleep(cycles)
        b.record()
        b.synchronize()
        return cycles / (a.elapsed_time(b) * 1e3)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def events(self, n: int) -> list:
        """n timing events, each recorded once so that no CUDA event is created inside a timed
        step (None on the CPU, where stamp() takes the host time)."""
        if not self.cuda:
            return [None] * n
        evs = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for e in evs:
            e.record()
        torch.cuda.synchronize()
        return evs

    def stamp(self, event):
        """Records event on the stream and returns it, or returns the host time on the CPU."""
        if event is None:
            return time.perf_counter()
        event.record()
        return event

    @staticmethod
    def us(a, b) -> float:
        if isinstance(a, float):
            return (b - a) * 1e6
        return a.elapsed_time(b) * 1e3

    def before(self, held: bool):
        """Flushes the L2, then either leaves the GPU idle (held=False: the host issues onto an
        empty queue) or holds it busy so everything issued next is queued before it runs.
        Returns what after() needs to tell whether the hold was long enough."""
        self.flush_buf.zero_()
        if not self.cuda or not held or not self.hold_cycles:
            self.sync()
            return None
        t = time.perf_counter()
        e = self.stamp(self.hold_event)
        torch.cuda._sleep(self.hold_cycles)
        return t, e

    def after(self, hold, first_stamp) -> None:
        """Counts a held step as late when the host finished queuing it after the GPU could have
        reached its first event (host queuing time >= the spin's GPU time)."""
        t_end = time.perf_counter()
        self.sync()
        if hold is not None:
            t, e = hold
            if (t_end - t) * 1e6 >= self.us(e, first_stamp):
                self.late += 1


class Shape:
    """One (heads, batch, context) step over caches shared by every shape of that context."""

    def __init__(self, pool: "Pool", heads: int, batch: int, scale: float, gen: torch.Generator):
        dev, b = pool.device, batch
        self.pool, self.heads, self.batch = pool, heads, batch
        ih, d = pool.index_heads, pool.index_dim
        self.latent = torch.randn(b, 512, generator=gen, device=dev, dtype=torch.bfloat16)
        self.rope = torch.randn(b, 64, generator=gen, device=dev, dtype=torch.bfloat16)
        self.index_k = torch.randn(b, d, generator=gen, device=dev, dtype=torch.bfloat16)
        self.slot_mapping = pool.step_slots[:b]
        self.block_table = pool.block_table[:b]
        self.q_index = torch.randn(b, ih, d, generator=gen, device=dev).to(torch.float8_e4m3fn)
        self.q_scale = torch.rand(b, ih, generator=gen, device=dev) + 0.5
        self.weights = torch.randn(b, ih, generator=gen, device=dev) / math.sqrt(ih * d)
        self.visible = torch.full((b,), pool.context, dtype=torch.int32, device=dev)
        self.indices = torch.empty(b, pool.topk, dtype=torch.int32, device=dev)
        self.q = torch.randn(b, heads, 576, generator=gen, device=dev, dtype=torch.bfloat16)
        self.out = torch.empty(b, heads, 512, dtype=torch.bfloat16, device=dev)
        self.scale = scale
        kv_format = pool.kv_format

        def kv_store():
            latte.kv_store(self.latent, self.rope, self.slot_mapping, pool.kv_cache,
                           kv_format=kv_format)

        def indexer_k_store():
            latte.indexer_k_store(self.index_k, self.slot_mapping, pool.k_cache)

        def indexer_topk():
            latte.indexer_topk(self.q_index, self.weights, pool.k_cache, self.block_table,
                               self.visible, pool.topk, q_scale=self.q_scale,
                               indices=self.indices)

        def sparse_mla():
            latte.sparse_mla(self.q, pool.kv_cache, self.indices, self.scale, out=self.out)

        self.calls: List[Tuple[str, Callable[[], None]]] = list(
            zip(STAGES, (kv_store, indexer_k_store, indexer_topk, sparse_mla)))

    def run(self) -> None:
        for _, call in self.calls:
            call()

    def poison(self) -> None:
        self.indices.fill_(-7)
        self.out.fill_(float("nan"))

    def check(self, what: str) -> None:
        """Raises unless the step's indices are -1 or distinct slots of each token's own
        request, min(context, topk) of them valid per token, and out is finite."""
        pool = self.pool
        idx = self.indices.cpu().long()
        where = (f"{what}: H={self.heads} B={self.batch} context={pool.context} "
                 f"kv_cache={pool.kv_format}")
        bad = (idx < -1) | (idx >= pool.owner.numel())
        if bad.any():
            raise RuntimeError(f"{where}: index {int(idx[bad][0])} is outside -1 .. "
                               f"{pool.owner.numel() - 1} (the cache's slots): the step's top-k "
                               "is garbage; do not time it")
        want = min(pool.context, pool.topk)
        for row in range(self.batch):
            valid = idx[row][idx[row] >= 0]
            owners = pool.owner[valid]
            if (owners != row).any():
                slot = int(valid[owners != row][0])
                owner = int(pool.owner[slot])
                what_slot = "no visible position" if owner < 0 else f"a slot of request {owner}"
                raise RuntimeError(f"{where}: token {row} selected slot {slot}, which is "
                                   f"{what_slot} (its own request is {row})")
            if valid.numel() != want:
                raise RuntimeError(f"{where}: token {row} has {valid.numel()} valid indices; "
                                   f"min(context, topk) = {want} positions are visible")
            if valid.unique().numel() != valid.numel():
                raise RuntimeError(f"{where}: token {row} selected a slot twice")
        if not torch.isfinite(self.out.float()).all():
            raise RuntimeError(f"{where}: sparse_mla's out is not finite")


class Pool:
    """The MLA and index caches for up to max_batch requests of one context, filled once."""

    def __init__(self, device: str, kv_format: str, context: int, max_batch: int, topk: int,
                 index_heads: int, index_dim: int, gen: torch.Generator):
        self.device, self.kv_format, self.context = device, kv_format, context
        self.topk, self.index_heads, self.index_dim = topk, index_heads, index_dim
        pages = -(-context // PAGE)
        blocks = pages * max_batch
        if kv_format == "bf16":
            self.kv_cache = torch.zeros(blocks, PAGE, 576, dtype=torch.bfloat16, device=device)
        else:
            self.kv_cache = torch.zeros(blocks, PAGE, 656, dtype=torch.uint8, device=device)
        self.k_cache = torch.zeros(blocks, PAGE, 132, dtype=torch.uint8, device=device)
        perm = torch.randperm(blocks, generator=gen, device=device)
        self.block_table = perm.to(torch.int32).view(max_batch, pages)
        pos = torch.arange(context, device=device)
        slots = (self.block_table[:, pos // PAGE].long() * PAGE + pos % PAGE).to(torch.int32)
        self.step_slots = slots[:, context - 1].contiguous()  # each request's newest token
        flat = slots.reshape(-1)
        for i in range(0, flat.numel(), FILL_CHUNK):
            s = flat[i:i + FILL_CHUNK]
            n = s.numel()
            latte.kv_store(torch.randn(n, 512, generator=gen, device=device, dtype=torch.bfloat16),
                           torch.randn(n, 64, generator=gen, device=device, dtype=torch.bfloat16),
                           s, self.kv_cache, kv_format=kv_format)
            latte.indexer_k_store(torch.randn(n, index_dim, generator=gen, device=device,
                                              dtype=torch.bfloat16), s, self.k_cache)
        # owner[slot] = the request whose visible position the slot holds, -1 for none
        owner = torch.full((blocks * PAGE,), -1, dtype=torch.int64)
        owner[flat.cpu().long()] = torch.arange(max_batch).repeat_interleave(context)
        self.owner = owner


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def time_steps(timer: Timer, shape: Shape, steps: int, held: bool) -> Dict[str, object]:
    """The step with an event before and after each call, then (for the host column) the same
    steps without events, whose records would add their own host time."""
    step, host, stages, gaps = [], [], {s: [] for s in STAGES}, [[] for _ in STAGES[1:]]
    evs = timer.events(2 * len(STAGES))
    for _ in range(steps):
        hold = timer.before(held)
        marks = []
        for i, (_, call) in enumerate(shape.calls):
            marks.append(timer.stamp(evs[2 * i]))
            call()
            marks.append(timer.stamp(evs[2 * i + 1]))
        timer.after(hold, marks[0])
        step.append(timer.us(marks[0], marks[-1]))
        for i, name in enumerate(STAGES):
            stages[name].append(timer.us(marks[2 * i], marks[2 * i + 1]))
            if i + 1 < len(STAGES):
                gaps[i].append(timer.us(marks[2 * i + 1], marks[2 * i + 2]))
    for _ in range(steps):
        timer.before(held)
        t0 = time.perf_counter()
        for _, call in shape.calls:
            call()
        host.append((time.perf_counter() - t0) * 1e6)
        timer.after(None, None)
    return {"step_us": median(step), "stages_us": {k: median(v) for k, v in stages.items()},
            "gaps_us": [median(g) for g in gaps], "host_us": median(host)}


def time_alone(timer: Timer, shape: Shape, steps: int) -> Dict[str, object]:
    stages = {}
    ea, eb = timer.events(2)
    for name, call in shape.calls:
        times = []
        for _ in range(steps):
            hold = timer.before(True)
            a = timer.stamp(ea)
            call()
            b = timer.stamp(eb)
            timer.after(hold, a)
            times.append(timer.us(a, b))
        stages[name] = median(times)
    return {"step_us": sum(stages.values()), "stages_us": stages, "gaps_us": None,
            "host_us": None}


def time_graph(timer: Timer, shape: Shape, steps: int) -> Dict[str, object]:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # kernels made, selections cached, workspaces sized before capture
            shape.run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        shape.run()
    torch.cuda.synchronize()
    shape.poison()
    graph.replay()
    torch.cuda.synchronize()
    shape.check("first graph replay")
    step, host = [], []
    ea, eb = timer.events(2)
    for _ in range(steps):
        hold = timer.before(True)
        a = timer.stamp(ea)
        t0 = time.perf_counter()
        graph.replay()
        host.append((time.perf_counter() - t0) * 1e6)
        b = timer.stamp(eb)
        timer.after(hold, a)
        step.append(timer.us(a, b))
    del graph
    return {"step_us": median(step), "stages_us": None, "gaps_us": None, "host_us": median(host)}


def backends_for(device: str, tp: Optional[int], kv_format: str, batch: int) -> Dict[str, object]:
    """What latte.select names for each op of this shape (its spec has no context length)."""
    found: Dict[str, object] = {}
    if tp is None:
        return found
    for op in STAGES:
        try:
            sel = latte.select(MODEL, tp=tp, kv_cache=kv_format, device=device, op=op,
                               block_size=PAGE, tokens=batch)
            entry = {"backend": sel.backend}
            kernel = sel.describe_kernel()
            if kernel:
                entry["kernel"] = kernel
            found[op] = entry
        except Exception as e:  # naming the backend is informative only
            found[op] = {"backend": None, "error": str(e).splitlines()[0]}
    return found


def fmt(v: Optional[float]) -> str:
    return "—" if v is None else f"{v:.1f}"


def print_table(title: str, rows: List[Dict[str, object]], note: str) -> None:
    print(f"\n### {title}\n")
    if note:
        print(note + "\n")
    head = ["shape", "B", "context", "step µs", *STAGES, "gaps µs", "host µs"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        st = r["stages_us"] or {}
        gaps = "/".join(fmt(g) for g in r["gaps_us"]) if r["gaps_us"] else "—"
        cells = [r["shape"], str(r["batch"]), str(r["context"]), fmt(r["step_us"]),
                 *[fmt(st.get(s)) for s in STAGES], gaps, fmt(r["host_us"])]
        print("| " + " | ".join(cells) + " |")


MODE_NOTES = {
    "queued": "GPU idle when the step is issued (host-bound eager decode); a stage includes its "
              "call's host launch work, gaps (kv→ik / ik→topk / topk→mla) the event records.",
    "queued-ahead": "the step queued while the GPU is held busy: stages are GPU time, gaps the "
                    "GPU's launch-to-launch time.",
    "graph": "one CUDA-graph replay of the four calls, held like queued-ahead; events around the "
             "replay; host = replay() call.",
    "alone": "each stage by itself, L2 flushed before it; step = the sum of the four.",
}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--contexts", type=int_list, default=[8192, 32768, 131072])
    parser.add_argument("--batches", type=int_list, default=[1, 2, 4, 8])
    parser.add_argument("--heads", type=int_list, default=[8, 64],
                        help="attention heads per rank (GLM-5: 8 at TP8, 64 at TP1)")
    parser.add_argument("--steps", type=int, default=50, help="timed steps (the median is printed)")
    parser.add_argument("--kv-cache", choices=("bf16", "fp8_ds_mla"), default="fp8_ds_mla")
    parser.add_argument("--json", metavar="PATH", help="write one JSON object per row (JSON lines)")
    parser.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph mode")
    parser.add_argument("--flush-mib", type=int, default=256,
                        help="L2 flush buffer (raised to twice the L2 when that is larger)")
    parser.add_argument("--hold-us", type=float, default=1000.0,
                        help="GPU spin before held steps, long enough to queue a whole step")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("no CUDA device visible to torch: use --device cpu", file=sys.stderr)
        return 2

    spec = latte.model_spec(MODEL, tp=1, kv_cache=args.kv_cache, block_size=PAGE)
    total_heads = spec["num_heads"]
    index_heads = spec["indexer"]["num_heads"]
    index_dim = spec["indexer"]["head_dim"]
    topk = spec["indexer"]["topk"]
    scale = float(spec["softmax_scale"])

    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size if cuda else 0
    flush_bytes = max(args.flush_mib << 20, 2 * l2)
    dev_name = torch.cuda.get_device_name() if cuda else "cpu"
    select_device = f"cuda:{torch.cuda.current_device()}" if cuda else "cpu"
    timer = Timer(cuda, flush_bytes, args.hold_us)
    if cuda and not timer.hold_cycles:
        print("warning: no GPU hold (--hold-us 0 or no torch.cuda._sleep): queued-ahead, graph "
              "and alone steps start on an idle GPU, so they include launch latency",
              file=sys.stderr)

    print(f"# DSA decode step: {MODEL}, page {PAGE}, index heads {index_heads}, topk {topk}, "
          f"scale {scale}, kv cache {args.kv_cache}")
    print(f"device {dev_name}; torch {torch.__version__}; latte {latte.__version__}; "
          f"L2 {l2 >> 20 if l2 else '?'} MiB, flush {flush_bytes >> 20} MiB before every step; "
          f"median of {args.steps} steps"
          + (f"; hold {args.hold_us:.0f} µs" if timer.hold_cycles else ""))
    if not cuda:
        print("(CPU: perf_counter timing; the queued-ahead and graph modes need CUDA)")

    modes = ["queued"] + (["queued-ahead"] if cuda else []) + \
            (["graph"] if cuda and not args.no_graph else []) + ["alone"]
    rows: List[Dict[str, object]] = []
    backend_lines: Dict[Tuple[int, int], Dict[str, object]] = {}
    gen = torch.Generator(device=args.device)
    gen.manual_seed(args.seed)
    max_batch = max(args.batches)
    for context in args.contexts:
        pool = Pool(args.device, args.kv_cache, context, max_batch, topk, index_heads,
                    index_dim, gen)
        timer.sync()
        for heads in args.heads:
            tp = total_heads // heads if total_heads % heads == 0 else None
            name = f"GLM-5 TP{tp} H={heads}" if tp else f"GLM-5 H={heads}"
            for batch in args.batches:
                if (heads, batch) not in backend_lines:
                    backend_lines[(heads, batch)] = backends_for(select_device, tp,
                                                                 args.kv_cache, batch)
                shape = Shape(pool, heads, batch, scale, gen)
                shape.poison()
                shape.run()  # the first step, checked before anything is timed
                timer.sync()
                shape.check("first step")
                for _ in range(3 if cuda else 1):  # warm-up
                    shape.run()
                timer.sync()
                for mode in modes:
                    late = timer.late
                    if mode == "queued":
                        r = time_steps(timer, shape, args.steps, held=False)
                    elif mode == "queued-ahead":
                        r = time_steps(timer, shape, args.steps, held=True)
                    elif mode == "graph":
                        r = time_graph(timer, shape, args.steps)
                    else:
                        r = time_alone(timer, shape, args.steps)
                    r.update(mode=mode, shape=name, model=MODEL, heads=heads, tp=tp,
                             index_heads=index_heads, batch=batch, context=context,
                             kv_cache=args.kv_cache, topk=topk, page=PAGE, steps=args.steps,
                             device=dev_name, flush_bytes=flush_bytes,
                             late_holds=timer.late - late,
                             backends=backend_lines[(heads, batch)])
                    rows.append(r)
                    print(f"  {mode:<12} {name} B={batch} context={context}: "
                          f"{r['step_us']:.1f} µs", file=sys.stderr, flush=True)
                del shape
        del pool
        if cuda:
            torch.cuda.empty_cache()

    print("\nbackends (latte.select for the op's spec; the spec has no context length):")
    for (heads, batch), found in sorted(backend_lines.items()):
        names = ", ".join(f"{op}={v.get('backend') or '?'}" for op, v in found.items())
        print(f"  H={heads} B={batch}: {names or 'n/a (heads do not divide the model)'}")
    key = lambda r: (-(r["tp"] or 0), r["heads"], r["batch"], r["context"])
    for mode in modes:
        print_table(mode, sorted((r for r in rows if r["mode"] == mode), key=key),
                    MODE_NOTES[mode])
    late = sum(r["late_holds"] for r in rows)
    if late:
        print(f"\nwarning: {late} held steps may have started before the host had queued them "
              "(raise --hold-us); their rows carry late_holds > 0 in the JSON", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        print(f"\n{len(rows)} rows written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
