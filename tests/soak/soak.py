#!/usr/bin/env python3
"""Soak test of latte's ops: many randomly shaped valid and invalid calls of every op, across
the backends of the device, checked against the cpu.reference oracle on a sample.

    python3 tests/soak/soak.py --device cuda --calls 100000 --report soak.md   # the H200
    python3 tests/soak/soak.py --device cpu --calls 300                        # here, small
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 \\
        --report-api-errors no python3 tests/soak/soak.py --device cuda --calls 2000 \\
        --memory-margin-mib -1                                                  # under memcheck

(docs/gpu-check.md, "The soak test", says why those options.)

Each call picks an op (every op of ``latte.ops.__all__``), a random shape (heads 1..128, topk
1..4096 mostly small, T 0..300, block sizes 1/13/16/64, both MLA cache formats, s_q 1..4, bf16
and e4m3 index queries, given or allocated outputs, padded rows and pages, split queries, logical
positions, check mode, side streams) and a backend (the selector, or one the device has forced
by id); random index values include out-of-range ones, which without check mode are valid
calls (docs/operations.md, "Out-of-range index values and check mode"). GLM-5.3-Flash's
features are among them: 25 % of sparse_mla and kv_store calls are without rope (rope_dim 0:
q [T, H, 512], caches bf16 [.., 512], u8 [.., 528] or u8 [.., 656] whose bytes 528..655 are
reserved), 20 % of sparse_mla calls pass topk_lens (lengths < 0 and > topk too, garbage in the
columns past them), 20 % of indexer_topk / indexer_logits calls are pooled (kpool 2, 3, 4 or 16
dividing the block size, block size 48 added for kpool 3; pool_topk, select_tail, out_lens /
return_lens), and indexer_pool_store is called with random positions (negative, out of range,
repeated), token_request, missing blocks, pool_state, hadamard, both scale kinds, gate bf16 /
f32 and ape f32 / bf16. About 30 % of the calls
are then corrupted into an invalid call of one kind (``--list-kinds``: wrong dtype, rank or
size, strides, alignment, an output sharing memory with an input, mixed devices, a missing or
non-tensor argument, bad scalars, an out-of-range index in check mode, an output too large to
allocate, the rope given to a call without rope, pooled arguments without kpool, ...).

Checked, each a violation that makes the exit code non-zero:
- a valid call succeeds; an invalid call raises a ``latte.errors`` exception (never another
  exception type, never success), and a refused call leaves the caches it would write as they
  were (sampled);
- a sample of valid calls (``--oracle-every``) agrees with cpu.reference run on CPU copies of the
  same inputs: exactly on the CPU device (the same backend), and on CUDA within per-op bounds
  (bf16 outputs 2e-2 of the row's largest value, lse and logits 1e-3, top-k compared as the
  selected scores since ties may resolve differently, pooled top-k rows as the scores of the
  pools they expand, their tail and out_lens exactly, cache writes, slots and indexer_pool_store's
  pages and pool_state exactly);
- no hang: a watchdog prints the running call and ends the process (exit 3) when a call makes no
  progress for ``--hang-timeout`` seconds; CUDA is synchronized every ``--sync-every`` calls;
- device memory flat: on CUDA the device memory outside torch's allocator (latte's workspaces,
  kernels, the CUDA context) and torch's allocated bytes, measured after a warm-up and at the
  end, may grow by at most ``--memory-margin-mib``. latte keeps one workspace buffer per
  (device, stream) used, the size of the largest workspace needed on it (docs/python.md,
  "Workspace"); the soak uses the current stream and two side streams, so that is bounded.

Every violation is printed with a reproducer: ``soak.py --seed S --device D --replay I``
regenerates call I alone (the shapes, data and corruption come from the seed and I).
Exit codes: 0 clean, 1 violations or memory growth, 2 bad usage, 3 hang.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import math
import os
import resource
import sys
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import ml_dtypes
import numpy as np

import latte
from latte.errors import LatteError, NoValidBackendError

BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn
OPS = ("sparse_mla", "mla_decode", "indexer_topk", "indexer_logits", "kv_store",
       "indexer_k_store", "logical_to_slots", "indexer_pool_store")
# Ops the soak does not generate yet, with why (none now).
NOT_SOAKED: dict = {}
BLOCK_SIZES = (1, 13, 16, 64)
# The pooled indexer (GLM-5.3-Flash): kpool tokens per pool, kpool dividing the (token) block size,
# so the pool pages have bs / kpool rows. 48 (3 x 16), for pooled calls only, makes kpool 3 occur.
KPOOLS = (2, 3, 4, 16)
POOLED_EXTRA_BLOCK_SIZE = 48
# MLA caches without rope (rope_dim 0): bf16 rows of 512, u8 rows of 528, or of 656 whose bytes
# 528..655 are reserved (here they hold the rope of the pool they come from: never read).
NOPE_LAYOUTS = ("bf16", "fp8_528", "fp8_656")
POOL_TOKENS = 13 * 1024   # divisible by every block size above
NUMPY_DTYPES = {"bf16": BF16, "e4m3": E4M3, "f32": np.float32, "f16": np.float16,
                "f64": np.float64, "i32": np.int32, "i64": np.int64, "i16": np.int16,
                "u8": np.uint8, "i8": np.int8, "bool": np.bool_}
SIZES = {"bf16": 2, "e4m3": 1, "f32": 4, "f16": 2, "f64": 8, "i32": 4, "i64": 8, "i16": 2,
         "u8": 1, "i8": 1, "bool": 1}
# Wrong dtypes to try for an argument of each dtype (every one refused there).
WRONG_DTYPES = {"bf16": ("f32", "f16", "i32", "u8", "e4m3"), "f32": ("f64", "bf16", "i32", "f16"),
                "i32": ("i64", "f32", "u8", "i16"), "u8": ("i8", "bf16", "e4m3", "f32"),
                "e4m3": ("f32", "f16", "u8", "i8")}
OUT_OF_RANGE = (-2, -7, 10**6, 2**31 - 1, -2**31)  # index values every rule treats as "none"
# Invalid calls latte does not refuse with a latte error yet, (op, scalar, kind) -> what happens:
# not generated unless --known-gaps (which then reports them as violations); take an entry off
# when it is fixed. None today.
KNOWN_GAPS: dict = {}
SKIPPED_GAPS = set(KNOWN_GAPS)   # emptied by --known-gaps
SCALES = (0.0625, 0.13523, 1 / 24, -0.05)


def skew(rng: np.random.Generator, lo: int, hi: int) -> int:
    """An int in lo..hi, log-uniformly distributed: mostly small, sometimes near hi."""
    if hi <= lo:
        return lo
    return min(hi, lo + int(math.expm1(rng.uniform(0.0, math.log1p(hi - lo + 1)))))


def pick(rng: np.random.Generator, items):
    return items[int(rng.integers(len(items)))]


def round16(n: int) -> int:
    return (n + 15) // 16 * 16


# ---- tensors: numpy arrays or torch tensors on one device -------------------------------------

class Tensors:
    """Makes and inspects the tensors of a call on one device, as numpy arrays or torch tensors.
    Every tensor can be carved out of a raw byte buffer with chosen strides and offset, which is
    how padded rows and pages, misaligned views and outputs over inputs are made."""

    def __init__(self, kind: str, device: str):
        self.kind, self.device = kind, device
        self.torch = None
        if kind == "torch":
            import torch
            self.torch = torch
            self.tdev = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
            t = torch
            self.tdtypes = {"bf16": t.bfloat16, "e4m3": t.float8_e4m3fn, "f32": t.float32,
                            "f16": t.float16, "f64": t.float64, "i32": t.int32, "i64": t.int64,
                            "i16": t.int16, "u8": t.uint8, "i8": t.int8, "bool": t.bool}
        self.rng = np.random.default_rng(0)
        self.gen = None

    def seed(self, rng: np.random.Generator):
        self.rng = rng
        if self.torch is not None:
            self.gen = self.torch.Generator(device=self.tdev)
            self.gen.manual_seed(int(rng.integers(2**62)))

    def dtype_of(self, t) -> str:
        if self.torch is not None and isinstance(t, self.torch.Tensor):
            return next(k for k, v in self.tdtypes.items() if v == t.dtype)
        return next(k for k, v in NUMPY_DTYPES.items() if np.dtype(v) == t.dtype)

    def is_tensor(self, x) -> bool:
        return isinstance(x, np.ndarray) or (self.torch is not None and
                                             isinstance(x, self.torch.Tensor))

    @staticmethod
    def numel(t) -> int:
        return int(np.prod([int(s) for s in t.shape], dtype=np.int64))

    def strides(self, t) -> tuple:
        if isinstance(t, np.ndarray):
            return tuple(s // t.itemsize for s in t.strides)
        return tuple(t.stride())

    # -- making
    def raw(self, nbytes: int):
        """A zeroed, 16-byte aligned byte buffer (a multiple of 16 bytes long)."""
        nbytes = round16(max(nbytes, 16))
        if self.torch is None:
            buf = np.zeros(nbytes + 16, np.uint8)
            start = (-buf.ctypes.data) % 16
            return buf[start:start + nbytes]
        return self.torch.zeros(nbytes, dtype=self.torch.uint8, device=self.tdev)

    def carve(self, raw, offset: int, shape, dtype: str, strides=None):
        """A view of `raw` at byte `offset` (a multiple of the element size, except on numpy)
        with element `strides` (row-major when None)."""
        shape = tuple(int(s) for s in shape)
        size = SIZES[dtype]
        if strides is None:
            strides, acc = [], 1
            for s in reversed(shape):
                strides.insert(0, acc)
                acc *= max(s, 1)
        if self.torch is None:
            return np.ndarray(shape, dtype=NUMPY_DTYPES[dtype], buffer=raw, offset=offset,
                              strides=tuple(s * size for s in strides))
        typed = raw[: raw.numel() // size * size].view(self.tdtypes[dtype])
        return typed.as_strided(shape, tuple(strides), offset // size)

    def empty(self, shape, dtype: str, pad: int = 0):
        """A tensor of `shape`, its rows (last dim) padded by `pad` elements."""
        shape = tuple(int(s) for s in shape)
        if pad == 0 and self.torch is None:
            return np.zeros(shape, NUMPY_DTYPES[dtype])
        if pad == 0:
            return self.torch.zeros(shape, dtype=self.tdtypes[dtype], device=self.tdev)
        row = shape[-1] + pad
        strides, acc = [1], row
        for s in reversed(shape[:-1]):
            strides.insert(0, acc)
            acc *= max(s, 1)
        return self.carve(self.raw(acc * SIZES[dtype]), 0, shape, dtype, strides)

    def normal(self, shape, dtype: str, scale: float = 1.0, pad: int = 0):
        t = self.empty(shape, dtype, pad)
        self.fill_normal(t, scale)
        return t

    def fill_normal(self, t, scale: float = 1.0):
        if self.numel(t) == 0:
            return
        if self.torch is None:
            t[...] = (self.rng.standard_normal(t.shape, np.float32) * scale).astype(t.dtype)
        else:
            x = self.torch.randn(tuple(t.shape), generator=self.gen, device=self.tdev) * scale
            t.copy_(x.to(t.dtype))

    def uniform(self, shape, lo: float, hi: float):
        t = self.empty(shape, "f32")
        if self.numel(t):
            if self.torch is None:
                t[...] = self.rng.uniform(lo, hi, t.shape)
            else:
                t.uniform_(lo, hi, generator=self.gen)
        return t

    def put(self, a: np.ndarray, pad: int = 0):
        """A device copy of a host array (int32 index data, mostly)."""
        dtype = next(k for k, v in NUMPY_DTYPES.items() if np.dtype(v) == a.dtype)
        t = self.empty(a.shape, dtype, pad)
        if self.numel(t) == 0:
            return t
        if self.torch is None:
            t[...] = a
        else:
            host = np.ascontiguousarray(a)
            if dtype in ("bf16", "e4m3"):   # torch has no numpy bf16 / e4m3: pass the bits
                host = host.view(np.int16 if dtype == "bf16" else np.uint8)
            t.copy_(self.torch.from_numpy(host).view(self.tdtypes[dtype]).to(self.tdev))
        return t

    def to_numpy(self, t) -> np.ndarray:
        """A contiguous host copy with the same dtype (bf16 / e4m3 as ml_dtypes)."""
        if self.torch is None or isinstance(t, np.ndarray):
            return np.array(t, copy=True, order="C")
        dtype = self.dtype_of(t)
        c = t.detach().contiguous().cpu()
        if dtype == "bf16":
            return c.view(self.torch.int16).numpy().view(BF16).copy()
        if dtype == "e4m3":
            return c.view(self.torch.uint8).numpy().view(E4M3).copy()
        return c.numpy().copy()

    def copy_into(self, dst, src):
        if self.torch is None:
            dst[...] = src
        else:
            dst.copy_(src)

    def on_host(self, t):
        """The same values on the other device (wrong-device calls)."""
        if self.torch is not None and isinstance(t, self.torch.Tensor):
            return t.cpu() if t.is_cuda else t.to("cuda")
        return t

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()


def describe(x) -> str:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        kind = "np" if isinstance(x, np.ndarray) else str(getattr(x, "device", "?"))
        strides = (tuple(s // x.itemsize for s in x.strides) if isinstance(x, np.ndarray)
                   else tuple(x.stride()))
        dt = str(x.dtype).replace("torch.", "")
        return f"{dt}{list(x.shape)} strides {list(strides)} ({kind})"
    text = repr(x)
    return text if len(text) < 60 else text[:57] + "..."


# ---- the calls --------------------------------------------------------------------------------

@dataclass
class Call:
    op: str
    args: dict
    work: int                     # (query-head, key) pairs or elements touched: the cost
    outputs: tuple = ()           # names of the results compared with the oracle
    inplace: tuple = ()           # caches the op writes in place
    roles: dict = field(default_factory=dict)      # tensor name -> "in" | "out" | "cache"
    vector16: tuple = ()          # tensors under the 16-byte rules (8, 9)
    required: tuple = ()          # tensors that may not be absent
    size_bad: list = field(default_factory=list)   # (name, dim, sizes refused there)
    check_bad: list = field(default_factory=list)  # (name, index, value) refused in check mode
    scalar_bad: list = field(default_factory=list)  # (kind, name, values refused)
    facts: dict = field(default_factory=dict)      # shape facts for the comparison
    kind: str = "valid"           # "valid" or the corruption kind
    oracle_ok: bool = True        # False for garbage caches (NaN scales compare loosely)
    tensors_at_generation: dict = field(default_factory=dict)

    def summary(self) -> str:
        parts = [f"{k}={describe(v)}" for k, v in self.args.items() if v is not None]
        return f"{self.op}({', '.join(parts)})"


class Pools:
    """Read-only caches on the device, built once per process: a call takes a random run of
    their blocks, so big caches cost no data generation per call. Written caches are copies."""

    _made: dict = {}

    @classmethod
    def get(cls, dev: Tensors, seed: int) -> "Pools":
        key = (dev.kind, dev.device, seed)
        if key not in cls._made:
            cls._made[key] = cls(dev, seed)
        return cls._made[key]

    def __init__(self, dev: Tensors, seed: int):
        self.dev = dev
        rng = np.random.default_rng([seed, 7])
        tokens = POOL_TOKENS
        latent = (rng.standard_normal((tokens, 512), np.float32)).astype(BF16)
        rope = (rng.standard_normal((tokens, 64), np.float32)).astype(BF16)
        keys = (rng.standard_normal((tokens, 128), np.float32)).astype(BF16)
        slots = np.arange(tokens, dtype=np.int32)
        bf16 = np.concatenate([latent, rope], axis=1)
        fp8 = np.zeros((tokens, 1, 656), np.uint8)
        latte.kv_store(latent, rope, slots, fp8, backend="cpu.reference")
        self.mla = {}
        self.index = {}
        self.keys = keys
        # Rows without rope: the latent alone (bf16), and the first 528 bytes of the fp8 rows
        # (512 e4m3 codes and 4 f32 scales: the same bytes as an fp8 row without rope).
        nope_bf16 = dev.put(latent)
        nope_528 = dev.put(np.ascontiguousarray(fp8[:, 0, :528]))
        self.nope = {}
        for bs in BLOCK_SIZES:
            nb = tokens // bs
            self.mla[("bf16", bs)] = dev.put(bf16.reshape(nb, bs, 576))
            self.mla[("fp8_ds_mla", bs)] = dev.put(fp8.reshape(nb, bs, 656))
            self.nope[("bf16", bs)] = nope_bf16.reshape(nb, bs, 512)
            self.nope[("fp8_528", bs)] = nope_528.reshape(nb, bs, 528)
            self.index[bs] = self.make_index(bs)
        garbage = rng.integers(0, 256, (tokens, 656), dtype=np.uint8)
        self.garbage_mla = dev.put(garbage.reshape(tokens // 64, 64, 656))
        self.garbage_index = (dev.put(rng.integers(0, 256, (tokens // 64, 64 * 132), np.uint8)),
                              64 * 132)
        self.dev = dev

    def make_index(self, bs: int):
        """Indexer pages of `bs` rows (tokens, or pools of a pooled cache: the same layout),
        padded to 16 bytes (and by 16 more for 16 and 4 rows, a padded layout of a size that
        needs none)."""
        nb = POOL_TOKENS // bs
        page = round16(bs * 132) + (16 if bs in (4, 16) else 0)
        host = np.zeros((nb, page), np.uint8)
        view = np.ndarray((nb, bs, 132), np.uint8, buffer=host, strides=(page, 132, 1))
        latte.indexer_k_store(self.keys[:nb * bs], np.arange(nb * bs, dtype=np.int32), view,
                              backend="cpu.reference")
        return (self.dev.put(host), page)

    @staticmethod
    def blocks(bs: int) -> int:
        return POOL_TOKENS // bs

    def mla_cache(self, fmt: str, bs: int, nb: int, rng, garbage=False):
        pool = self.garbage_mla if garbage else self.mla[(fmt, bs)]
        b0 = int(rng.integers(0, pool.shape[0] - nb + 1))
        return pool[b0:b0 + nb]

    def nope_cache(self, layout: str, bs: int, nb: int, rng, garbage=False):
        """A cache without rope (NOPE_LAYOUTS): compact rows, or (sometimes) a view of the first
        512 / 528 of the rope cache's rows, rows padded to 1152 / 656 bytes."""
        if garbage:
            pool = self.garbage_mla
        elif layout == "fp8_656" or (layout == "fp8_528" and rng.random() < 0.3):
            pool = self.mla[("fp8_ds_mla", bs)]
        elif layout == "bf16" and rng.random() < 0.3:
            pool = self.mla[("bf16", bs)]
        else:
            pool = self.nope[(layout, bs)]
        b0 = int(rng.integers(0, pool.shape[0] - nb + 1))
        width = {"bf16": 512, "fp8_528": 528, "fp8_656": 656}[layout]
        return pool[b0:b0 + nb, :, :width]

    def index_cache(self, bs: int, nb: int, rng, garbage=False):
        """Indexer pages of `bs` rows: tokens, or pools of a pooled cache (made when first
        asked for)."""
        if garbage:
            buf, page = self.garbage_index
        else:
            if bs not in self.index:
                self.index[bs] = self.make_index(bs)
            buf, page = self.index[bs]
        b0 = int(rng.integers(0, buf.shape[0] - nb + 1))
        return self.index_view(buf, b0, nb, bs, page)

    def index_view(self, buf, b0, nb, bs, page):
        if isinstance(buf, np.ndarray):
            return np.ndarray((nb, bs, 132), np.uint8, buffer=buf, offset=b0 * page,
                              strides=(page, 132, 1))
        return buf.as_strided((nb, bs, 132), (page, 132, 1), buf.storage_offset() + b0 * page)

    def index_copy(self, cache):
        """A written copy of an indexer cache view, keeping its page stride."""
        nb, bs, _ = (int(s) for s in cache.shape)
        page = self.dev.strides(cache)[0] if nb > 1 else round16(bs * 132)
        buf = self.dev.raw(nb * page)
        view = self.dev.carve(buf, 0, (nb, bs, 132), "u8", (page, 132, 1))
        self.dev.copy_into(view, cache)
        return view


class Generator:
    """The valid calls of each op, with what their corruptions may change."""

    def __init__(self, dev: Tensors, pools: Pools, budget: int, device: str):
        self.dev, self.pools, self.budget, self.device = dev, pools, budget, device
        self.rng = np.random.default_rng(0)

    # -- shapes and index data
    def tokens(self, hi: int = 300) -> int:
        return 0 if self.rng.random() < 0.05 else skew(self.rng, 1, hi)

    def heads(self) -> int:
        r = self.rng
        return pick(r, (1, 2, 8, 16, 32, 64, 128)) if r.random() < 0.5 else skew(r, 1, 128)

    def fit(self, dims: list, work: Callable[[list], int], floor=None) -> list:
        """Halves the largest dims until the call's work fits the budget."""
        floor = floor or [1] * len(dims)
        while work(dims) > self.budget:
            i = max(range(len(dims)), key=lambda k: dims[k] if dims[k] > floor[k] else -1)
            if dims[i] <= floor[i]:
                break
            dims[i] = max(floor[i], dims[i] // 2)
        return dims

    def sprinkle(self, a: np.ndarray, rate: float, values) -> None:
        """Replaces a fraction of the entries with values from `values`."""
        if a.size == 0:
            return
        mask = self.rng.random(a.shape) < rate
        a[mask] = self.rng.choice(np.array(values, np.int64), int(mask.sum())).astype(a.dtype)

    def index_matrix(self, rows: int, cols: int, n: int, check: bool) -> np.ndarray:
        """[rows, cols] indices into 0..n-1 with -1 padding, empty rows and (without check mode)
        out-of-range values."""
        r = self.rng
        a = r.integers(0, max(n, 1), (rows, cols), dtype=np.int64).astype(np.int32)
        if rows and r.random() < 0.5:
            keep = r.integers(0, cols + 1, rows)
            a[np.arange(cols)[None, :] >= keep[:, None]] = -1
        if rows and r.random() < 0.2:
            a[r.integers(0, rows)] = -1
        if not check and r.random() < 0.3:
            self.sprinkle(a, 0.05, OUT_OF_RANGE + (n, n + 1))
        return a

    def block_table(self, rows: int, max_blocks: int, nb: int, check: bool) -> np.ndarray:
        a = self.rng.integers(0, nb, (rows, max_blocks), dtype=np.int64).astype(np.int32)
        if not check and self.rng.random() < 0.3:
            self.sprinkle(a, 0.1, (-1, -7, nb, 10**6, 2**31 - 1, -2**31))
        return a

    def vector(self, n: int, lo: int, hi: int, check: bool, bad=()) -> np.ndarray:
        a = self.rng.integers(lo, hi + 1, n, dtype=np.int64).astype(np.int32)
        if not check and self.rng.random() < 0.3:
            self.sprinkle(a, 0.2, bad)
        return a

    def scale(self) -> float:
        r = self.rng
        return float(pick(r, SCALES)) if r.random() < 0.8 else float(r.uniform(0.01, 0.3))

    def backend_and_stream(self, call: Call, backends: list) -> None:
        r = self.rng
        u = r.random()
        if u < 0.55 or not backends:
            call.args["backend"] = None
        elif u < 0.65:
            call.args["backend"] = f"{self.device}.*" if self.device == "cpu" else "cuda.*"
        else:
            call.args["backend"] = pick(r, backends)
        if self.device == "cuda" and r.random() < 0.25:
            call.facts["side_stream"] = int(r.integers(2))
            call.facts["stream_as_int"] = bool(r.random() < 0.5)

    def t_rows(self, call: Call, names, t: int) -> None:
        """These tensors' dim 0 must be T (a different count is refused)."""
        for name in names:
            if call.args.get(name) is not None:
                call.size_bad.append((name, 0, [t + 1] + ([t - 1] if t > 0 else [])))

    # -- ops
    def sparse_mla(self, check: bool) -> Call:
        r, dev = self.rng, self.dev
        t, h, topk = self.tokens(), self.heads(), skew(r, 1, 4096)
        bs, fmt = pick(r, BLOCK_SIZES), pick(r, ("bf16", "fp8_ds_mla"))
        nb = skew(r, 1, min(Pools.blocks(bs), 8192 // bs + 1))
        t, h, topk = self.fit([t, h, topk], lambda d: d[0] * d[1] * d[2], [0, 1, 1])
        garbage = fmt == "fp8_ds_mla" and bs == 64 and r.random() < 0.05
        nope = r.random() < 0.25   # MLA without rope (GLM-5.3-Flash): rope_dim 0
        if nope:
            layout = "bf16" if fmt == "bf16" else pick(r, NOPE_LAYOUTS[1:])
            cache = self.pools.nope_cache(layout, bs, nb, r, garbage)
        else:
            cache = self.pools.mla_cache(fmt, bs, nb, r, garbage)
        split = not nope and r.random() < 0.2
        pad = 8 if r.random() < 0.2 else 0
        if nope:
            q, q_rope = dev.normal((t, h, 512), "bf16", pad=pad), None
        elif split:
            if r.random() < 0.5:   # two views of one [T, H, 576] tensor: inputs may share memory
                whole = dev.normal((t, h, 576), "bf16", pad=pad)
                q, q_rope = whole[..., :512], whole[..., 512:]
            else:
                q, q_rope = dev.normal((t, h, 512), "bf16"), dev.normal((t, h, 64), "bf16")
        else:
            q, q_rope = dev.normal((t, h, 576), "bf16", pad=pad), None
        call = Call("sparse_mla", dict(q=q, kv_cache=cache), t * h * topk,
                    outputs=("out", "lse"), roles=dict(q="in", q_rope="in", kv_cache="in",
                                                       indices="in", out="out", lse="out"),
                    vector16=("q", "q_rope", "kv_cache", "out"),
                    required=("q", "kv_cache", "indices"), oracle_ok=not garbage)
        nslots = nb * bs
        logical = r.random() < 0.2
        if logical:
            max_blocks = skew(r, 1, 64)
            extra = int(r.integers(0, 4)) if r.random() < 0.3 else 0
            use_tr = r.random() < 0.5
            rows = skew(r, 1, 64) if use_tr else t + extra + int(r.integers(0, 3))
            positions = self.index_matrix(t + extra, topk, max_blocks * bs, check)
            bt = self.block_table(rows, max_blocks, nb, check)
            call.args.update(indices=dev.put(positions), block_table=dev.put(bt))
            tr = None
            if use_tr:
                tr = self.vector(t + extra, 0, rows - 1, check, (-1, rows, 10**6))
                call.args["token_request"] = dev.put(tr)
            if r.random() < 0.5:
                call.args["slots"] = dev.empty((t + extra + int(r.integers(0, 2)), topk), "i32")
                call.outputs += ("slots",)
                call.roles["slots"] = "out"
            call.roles.update(block_table="in", token_request="in")
            call.facts["used_rows"] = dict(indices=t, token_request=t, slots=t)
            call.size_bad += [("block_table", 1, [0])]
            if t > 0:
                call.size_bad += [("indices", 0, [t - 1])]
            if check and t > 0:
                row = int(r.integers(t))
                call.check_bad += [("indices", (row, int(r.integers(topk))),
                                    pick(r, (-2, max_blocks * bs)))]
                if tr is not None:
                    call.check_bad += [("token_request", (row,), pick(r, (-1, rows)))]
                p = int(positions[row].max())
                if p >= 0:
                    br = int(tr[row]) if tr is not None else row
                    call.check_bad += [("block_table", (br, p // bs), pick(r, (-1, nb)))]
        else:
            idx = self.index_matrix(t, topk, nslots, check)
            call.args["indices"] = dev.put(idx)
            self.t_rows(call, ["indices"], t)
            if check and t > 0:
                call.check_bad += [("indices", (int(r.integers(t)), int(r.integers(topk))),
                                    pick(r, (-2, nslots, 2**31 - 1)))]
        call.args["scale"] = self.scale()
        if split:
            call.args["q_rope"] = q_rope
            call.size_bad += [("q_rope", 2, [63, 65]), ("q_rope", 1, [h + 1])]
            self.t_rows(call, ["q_rope"], t)
        if r.random() < 0.2:
            self.topk_lens(call, t, topk, check, logical)
        width = int(cache.shape[2])
        call.size_bad += [("q", 2, [576, 511, 513] if nope else [575, 577] if split
                           else [512, 575, 577]), ("q", 1, [0]),
                          ("indices", 1, [0, 65537]), ("kv_cache", 0, [0]), ("kv_cache", 1, [0]),
                          ("kv_cache", 2, [width + 1, width - 1] + ([576] if nope else []))]
        self.attention_outputs(call, (t, h), check)
        call.facts.update(tokens=t, lead=(t, h), nope=nope)
        self.scale_and_format_bad(call, fmt)
        self.rope_dim(call, nope)
        if r.random() < 0.3:
            call.args["kv_format"] = fmt
        return call

    def rope_dim(self, call: Call, nope: bool) -> None:
        """rope_dim 0 for a call without rope (stated, never inferred), 64 said or left out for
        one with rope; the other value, or one that is neither, is refused."""
        if nope or self.rng.random() < 0.1:
            call.args["rope_dim"] = 0 if nope else 64
        call.scalar_bad += [("scalar", "rope_dim", [64 if nope else 0, 32, 1, -1, 576]),
                            ("scalar_type", "rope_dim", [None, "0", 0.5]),
                            ("scalar_range", "rope_dim", [2**31, -2**40])]

    def topk_lens(self, call: Call, t: int, topk: int, check: bool, logical: bool) -> None:
        """sparse_mla's row lengths: row t reads indices[t, :topk_lens[t]] only. Without check
        mode lengths < 0 or > topk are clamped; the columns past a length hold garbage, never
        read nor checked (except logical positions in check mode: logical_to_slots, the call's
        first step, checks every column)."""
        r, dev = self.rng, self.dev
        lens = r.integers(0, topk + 1, t, dtype=np.int64).astype(np.int32)
        if t and r.random() < 0.3:
            lens[r.random(t) < 0.3] = topk
        if not check and t and r.random() < 0.4:
            self.sprinkle(lens, 0.2, (-1, -5, topk + 1, topk + 100, 2**31 - 1, -2**31))
        if not (logical and check):
            idx = call.args["indices"]
            host = dev.to_numpy(idx)
            cols = np.arange(host.shape[1])[None, :]
            past = cols >= np.clip(lens.astype(np.int64), 0, topk)[:, None]
            if host.shape[0] > t:   # an engine buffer with more rows than T: only T rows used
                past = np.concatenate([past, np.zeros((host.shape[0] - t, host.shape[1]), bool)])
            garbage = r.choice(np.array(OUT_OF_RANGE + (2**30, 7, 0), np.int64), host.shape)
            host[past] = garbage[past].astype(np.int32)
            dev.copy_into(idx, dev.put(host))
        if not logical:   # check mode reads only the columns before a row's length
            call.check_bad = [c for c in call.check_bad if c[0] != "indices"]
            rows = np.nonzero(lens > 0)[0]
            if check and len(rows):
                row = int(pick(r, rows))
                call.check_bad += [("indices", (row, int(r.integers(lens[row]))),
                                    pick(r, (-2, 2**31 - 1)))]
        call.args["topk_lens"] = dev.put(lens)
        call.roles["topk_lens"] = "in"
        self.t_rows(call, ["topk_lens"], t)
        if check and t > 0:
            call.check_bad += [("topk_lens", (int(r.integers(t)),), pick(r, (-1, topk + 1)))]

    @staticmethod
    def scale_and_format_bad(call: Call, fmt: str) -> None:
        call.scalar_bad += [
            ("scalar", "scale", [0.0, float("nan"), float("inf"), -float("inf"), 1e39, 1e-50]),
            ("scalar", "kv_format", ["bogus", "fp8_ds_mla" if fmt == "bf16" else "bf16"]),
            ("scalar_type", "scale", ["x", None]), ("scalar_type", "kv_format", [7]),
            ("scalar_range", "scale", [2**2000])]

    def attention_outputs(self, call: Call, lead: tuple, check: bool) -> None:
        r, dev = self.rng, self.dev
        if r.random() < 0.5:
            call.args["out"] = dev.empty((*lead, 512), "bf16", pad=8 if r.random() < 0.3 else 0)
            call.size_bad += [("out", len(lead), [511, 513]), ("out", 1, [lead[1] + 1])]
            self.t_rows(call, ["out"], lead[0])
        u = r.random()
        if u < 0.3:
            call.args["lse"] = dev.empty(lead, "f32", pad=3 if r.random() < 0.3 else 0)
            call.size_bad += [("lse", len(lead) - 1, [lead[-1] + 1])]
            self.t_rows(call, ["lse"], lead[0])
        elif u < 0.6:
            call.args["return_lse"] = True
        call.args["check_indices"] = check

    def mla_decode(self, check: bool) -> Call:
        r, dev = self.rng, self.dev
        b = 0 if r.random() < 0.05 else skew(r, 1, 64)
        s_q, h = int(r.integers(1, 5)), self.heads()
        bs, fmt = pick(r, BLOCK_SIZES), pick(r, ("bf16", "fp8_ds_mla"))
        max_blocks = skew(r, 1, max(1, 2048 // bs))
        b, h, max_blocks = self.fit([b, h, max_blocks], lambda d: d[0] * s_q * d[1] * d[2] * bs,
                                    [0, 1, 1])
        max_blocks = max(max_blocks, -(-s_q // bs))   # room for the s_q new tokens
        nb = skew(r, 1, Pools.blocks(bs))
        garbage = fmt == "fp8_ds_mla" and bs == 64 and r.random() < 0.05
        cache = self.pools.mla_cache(fmt, bs, nb, r, garbage)
        length = max_blocks * bs
        bt = self.block_table(b, max_blocks, nb, check)
        lens = self.vector(b, s_q, max(s_q, length), check,
                           (-5, 0, s_q - 1, length + 1, length + 100, 2**31 - 1))
        if check:
            lens = np.minimum(lens, length).astype(np.int32)
        q = dev.normal((b, s_q, h, 576), "bf16", pad=8 if r.random() < 0.2 else 0)
        call = Call("mla_decode", dict(q=q, kv_cache=cache, block_table=dev.put(bt),
                                       seq_lens=dev.put(lens), scale=self.scale()),
                    b * s_q * h * length, outputs=("out", "lse"),
                    roles=dict(q="in", kv_cache="in", block_table="in", seq_lens="in",
                               out="out", lse="out"),
                    vector16=("q", "kv_cache", "out"),
                    required=("q", "kv_cache", "block_table", "seq_lens"), oracle_ok=not garbage)
        self.t_rows(call, ["block_table", "seq_lens"], b)
        call.size_bad += [("q", 3, [575, 577, 512]), ("q", 1, [0, 5]), ("q", 2, [0]),
                          ("block_table", 1, [0]), ("kv_cache", 0, [0]),
                          ("kv_cache", 2, [int(cache.shape[2]) + 1])]
        self.attention_outputs(call, (b, s_q, h), check)
        if call.args.get("out") is not None:
            call.size_bad += [("out", 2, [h + 1])]
        if check and b > 0:
            row = int(r.integers(b))
            call.check_bad += [("seq_lens", (row,), pick(r, (s_q - 1, length + 1, -1)))]
            if lens[row] > 0:
                used = int(r.integers(0, (lens[row] - 1) // bs + 1))   # a block the window reads
                call.check_bad += [("block_table", (row, used), pick(r, (-1, nb, 10**6)))]
        self.scale_and_format_bad(call, fmt)
        if r.random() < 0.3:
            call.args["kv_format"] = fmt
        call.facts.update(tokens=b, lead=(b, s_q, h))
        return call

    def indexer(self, op: str, check: bool) -> Call:
        r, dev = self.rng, self.dev
        t = self.tokens()
        heads = pick(r, (32, 64)) if r.random() < 0.7 else skew(r, 1, 128)
        bs = pick(r, BLOCK_SIZES)
        kpool = 0
        if r.random() < 0.2:   # the pooled indexer: kpool divides the block size
            if r.random() < 0.25:
                bs = POOLED_EXTRA_BLOCK_SIZE
            elif bs % 2:   # 1 and 13: no kpool divides them, so one that some kpool does
                bs = pick(r, (16, 64))
            kpool = pick(r, [k for k in KPOOLS if bs % k == 0])
        rows = bs // kpool if kpool else bs   # rows of a page: tokens, or pools
        max_blocks = skew(r, 1, max(1, 4096 // bs))
        t, heads, max_blocks = self.fit([t, heads, max_blocks],
                                        lambda d: d[0] * d[1] * d[2] * rows, [0, 1, 1])
        nb = skew(r, 1, Pools.blocks(rows))
        garbage = bs == 64 and not kpool and r.random() < 0.05
        k_cache = self.pools.index_cache(rows, nb, r, garbage)
        fp8 = r.random() < 0.6
        q = dev.normal((t, heads, 128), "e4m3" if fp8 else "bf16",
                       pad=16 if r.random() < 0.2 else 0)
        use_tr = r.random() < 0.5
        rows = skew(r, 1, 64) if use_tr else t + int(r.integers(0, 3))
        length = max_blocks * bs
        bt = self.block_table(max(rows, 1) if use_tr else rows, max_blocks, nb, check)
        rows = bt.shape[0]
        lens = self.vector(t, 0, length, check, (-3, length + 1, 2**31 - 1, -2**31))
        args = dict(q=q, weights=dev.normal((t, heads), "f32", 1 / math.sqrt(heads)),
                    k_cache=k_cache, block_table=dev.put(bt), visible_lens=dev.put(lens))
        tr = None
        if use_tr:
            tr = self.vector(t, 0, rows - 1, check, (-1, rows, 10**6))
            args["token_request"] = dev.put(tr)
        if fp8:
            args["q_scale"] = dev.uniform((t, heads), 0.5, 1.5)
        call = Call(op, args, t * heads * max_blocks * rows,
                    roles=dict(q="in", q_scale="in", weights="in", k_cache="in", block_table="in",
                               token_request="in", visible_lens="in"),
                    vector16=("q", "k_cache"),
                    required=("q", "weights", "k_cache", "block_table", "visible_lens"),
                    oracle_ok=not garbage)
        self.t_rows(call, ["weights", "visible_lens", "token_request", "q_scale"], t)
        call.size_bad += [("q", 2, [127, 129]), ("q", 1, [0]), ("weights", 1, [heads + 1]),
                          ("block_table", 1, [0]), ("k_cache", 2, [131, 133]),
                          ("k_cache", 0, [0]), ("k_cache", 1, [0])]
        if fp8:
            call.size_bad += [("q_scale", 1, [heads + 1])]
        if not use_tr and t > 0:
            call.size_bad += [("block_table", 0, [t - 1])]
        if kpool:
            call.args["kpool"] = kpool
            call.scalar_bad += [("scalar", "kpool", [1, 17, -2, 2**31 - 1] +
                                 ([0] if op == "indexer_topk" else []))]
            if op == "indexer_logits":
                call.scalar_bad += [("scalar_type", "kpool", [4.0, "4", None]),
                                    ("scalar_range", "kpool", [2**31, 2**40])]
        if op == "indexer_topk" and kpool:
            self.pooled_topk(call, t, kpool)
        elif op == "indexer_topk":
            topk = skew(r, 1, 4096)
            call.args["kind"] = pick(r, ("physical", "logical"))
            if r.random() < 0.5:
                call.args["indices"] = dev.empty((t, topk), "i32")
                call.size_bad += [("indices", 1, [0, 65537])]
                self.t_rows(call, ["indices"], t)
                if r.random() < 0.5:
                    call.args["topk"] = topk
            else:
                call.args["topk"] = topk
                call.scalar_bad += [("scalar", "topk", [0, -3, 65537, 2**31, 2**70]),
                                    ("scalar_type", "topk", [8.5, "8"])]
            call.scalar_bad += [("scalar", "kind", ["bogus", ""]),
                                ("scalar_type", "kind", [None, 3])]
            call.outputs, call.roles["indices"] = ("indices",), "out"
            call.facts["topk"] = topk
        else:
            if r.random() < 0.5:
                columns = max_blocks * rows   # positions, or pools when pooled
                width = columns if r.random() < 0.5 else skew(r, 0, columns + 50)
                call.args["logits"] = dev.empty((t, width), "f32", pad=4 if r.random() < 0.2 else 0)
                self.t_rows(call, ["logits"], t)
            call.outputs, call.roles["logits"] = ("logits",), "out"
        call.args["check_indices"] = check
        if check and t > 0:
            row = int(r.integers(t))
            call.check_bad += [("visible_lens", (row,), pick(r, (-1, length + 1)))]
            if tr is not None:
                call.check_bad += [("token_request", (row,), pick(r, (-1, rows)))]
            if lens[row] > 0:
                br = int(tr[row]) if tr is not None else row
                used = int(r.integers(0, (lens[row] - 1) // bs + 1))   # a block the token sees
                call.check_bad += [("block_table", (br, used), pick(r, (-1, nb)))]
        call.facts.update(tokens=t, fp8=fp8, block_size=bs, num_blocks=nb, kpool=kpool)
        return call

    def pooled_topk(self, call: Call, t: int, kpool: int) -> None:
        """indexer_topk with kpool: the best pool_topk pools, each expanded to its kpool
        positions, then (select_tail) the incomplete pool's tokens; out_lens given, asked for
        (return_lens) or not; the width given as indices=, as topk, or left to latte
        (kpool * pool_topk + the tail)."""
        r, dev = self.rng, self.dev
        tail = r.random() < 0.5
        pool_topk = skew(r, 1, 1024) if r.random() < 0.9 else skew(r, 1, (65536 - kpool + 1) // kpool)
        need = kpool * pool_topk + (kpool - 1 if tail else 0)
        call.args.update(kind=pick(r, ("physical", "logical")), pool_topk=pool_topk)
        if tail or r.random() < 0.3:
            call.args["select_tail"] = tail
        width = need if r.random() < 0.5 else min(65536, need + skew(r, 1, 200))
        u = r.random()
        if u < 0.4:
            call.args["indices"] = dev.empty((t, width), "i32")
            call.size_bad += [("indices", 1, [0, need - 1, 65537])]
            self.t_rows(call, ["indices"], t)
        elif u < 0.7:
            call.args["topk"] = width
            call.scalar_bad += [("scalar", "topk", [need - 1, 0, 65537])]
        else:
            width = need
        u = r.random()
        if u < 0.35:
            call.args["out_lens"] = dev.empty((t,), "i32")
            call.roles["out_lens"] = "out"
            self.t_rows(call, ["out_lens"], t)
        elif u < 0.7:
            call.args["return_lens"] = True
        call.scalar_bad += [("scalar", "kind", ["bogus"]),
                            ("scalar", "pool_topk", [0, -1, 65536 // kpool + 1]),
                            ("scalar_type", "pool_topk", [1.5, "2", None]),
                            ("scalar_type", "kpool", [4.0, "4", None]),
                            ("scalar_range", "pool_topk", [2**31, -2**40]),
                            ("scalar_range", "kpool", [2**31, 2**40])]
        call.outputs, call.roles["indices"] = ("indices", "out_lens"), "out"
        call.facts.update(topk=width, pool_topk=pool_topk, select_tail=tail)

    def kv_store(self, check: bool) -> Call:
        r, dev = self.rng, self.dev
        t, bs, fmt = self.tokens(), pick(r, BLOCK_SIZES), pick(r, ("bf16", "fp8_ds_mla"))
        nb = skew(r, 1, min(Pools.blocks(bs), 4096 // bs + 1))
        nope = r.random() < 0.25   # rows without rope (GLM-5.3-Flash): rope_dim 0, rope None
        if nope:
            layout = "bf16" if fmt == "bf16" else pick(r, NOPE_LAYOUTS[1:])
            src = self.pools.nope_cache(layout, bs, nb, r)
        else:
            src = self.pools.mla_cache(fmt, bs, nb, r)
        cache = dev.empty(src.shape, dev.dtype_of(src))
        dev.copy_into(cache, src)
        if nope:
            latent = dev.normal((t, 512), "bf16", pad=8 if r.random() < 0.2 else 0)
            rope = None
        elif r.random() < 0.3:   # latent and rope as two views of one row: inputs may share memory
            whole = dev.normal((t, 576), "bf16", pad=8 if r.random() < 0.5 else 0)
            latent, rope = whole[:, :512], whole[:, 512:]
        else:
            latent, rope = dev.normal((t, 512), "bf16"), dev.normal((t, 64), "bf16")
        slots = self.slot_mapping(t, nb * bs, check)
        call = Call("kv_store", dict(latent=latent, rope=rope, slot_mapping=dev.put(slots),
                                     kv_cache=cache), t * 576 + nb * bs,
                    outputs=("kv_cache",), inplace=("kv_cache",),
                    roles=dict(latent="in", rope="in", slot_mapping="in", kv_cache="cache"),
                    vector16=("latent", "rope", "kv_cache"),
                    required=("latent", "slot_mapping", "kv_cache") + (() if nope else ("rope",)))
        call.args["scale_kind"] = pick(r, ("amax", "pow2"))
        if r.random() < 0.3:
            call.args["kv_format"] = fmt
        call.args["check_indices"] = check
        self.t_rows(call, ["rope", "slot_mapping"], t)
        width = int(cache.shape[2])
        call.size_bad += [("latent", 1, [511, 576]), ("rope", 1, [63, 65]), ("kv_cache", 0, [0]),
                          ("kv_cache", 2, [width - 1] + ([576] if nope else []))]
        self.rope_dim(call, nope)
        call.facts["nope"] = nope
        call.scalar_bad += [("scalar", "scale_kind", ["bogus"]), ("scalar", "kv_format", ["bogus"]),
                            ("scalar_type", "scale_kind", [None, 3])]
        if check and t > 0:
            call.check_bad += [("slot_mapping", (int(r.integers(t)),), pick(r, (-2, nb * bs)))]
        call.facts.update(tokens=t, slots=slots, block_size=bs)
        return call

    def slot_mapping(self, t: int, nslots: int, check: bool) -> np.ndarray:
        r = self.rng
        if t <= nslots and r.random() < 0.8:
            a = r.permutation(nslots)[:t].astype(np.int32)
        else:
            a = r.integers(0, nslots, t, dtype=np.int64).astype(np.int32)
        if t and r.random() < 0.3:
            a[r.random(t) < 0.2] = -1
        if not check and r.random() < 0.3:
            self.sprinkle(a, 0.1, OUT_OF_RANGE + (nslots, nslots + 1))
        return a

    def indexer_k_store(self, check: bool) -> Call:
        r, dev = self.rng, self.dev
        t, bs = self.tokens(), pick(r, BLOCK_SIZES)
        nb = skew(r, 1, min(Pools.blocks(bs), 4096 // bs + 1))
        cache = self.pools.index_copy(self.pools.index_cache(bs, nb, r))
        slots = self.slot_mapping(t, nb * bs, check)
        call = Call("indexer_k_store", dict(k=dev.normal((t, 128), "bf16",
                                                         pad=8 if r.random() < 0.2 else 0),
                                            slot_mapping=dev.put(slots), k_cache=cache),
                    t * 128 + nb * bs, outputs=("k_cache",), inplace=("k_cache",),
                    roles=dict(k="in", slot_mapping="in", k_cache="cache"),
                    vector16=("k", "k_cache"), required=("k", "slot_mapping", "k_cache"))
        call.args["scale_kind"] = pick(r, ("amax", "pow2"))
        call.args["check_indices"] = check
        self.t_rows(call, ["slot_mapping"], t)
        call.size_bad += [("k", 1, [127, 129]), ("k_cache", 2, [131]), ("k_cache", 1, [0])]
        call.scalar_bad += [("scalar", "scale_kind", ["bogus", "AMAX"]),
                            ("scalar_type", "scale_kind", [None])]
        if check and t > 0:
            call.check_bad += [("slot_mapping", (int(r.integers(t)),), pick(r, (-2, nb * bs)))]
        call.facts.update(tokens=t, slots=slots, block_size=bs)
        return call

    def indexer_pool_store(self, check: bool) -> Call:
        """The pooled indexer's key store: tokens of a few requests at positions that mostly
        run in order per request (a prefill chunk, decodes), some anywhere; without check mode
        also negative and out-of-range positions, out-of-range token_request rows and missing
        blocks (skipped tokens); repeated (request, position) pairs; a random pool_state (what
        earlier calls left); gate bf16 / f32, ape f32 / bf16, both scale kinds, hadamard."""
        r, dev = self.rng, self.dev
        if r.random() < 0.9:
            bs = pick(r, (16, 64, POOLED_EXTRA_BLOCK_SIZE))
            kpool = pick(r, [k for k in KPOOLS if bs % k == 0])
        else:   # any kpool of 2..16
            kpool = int(r.integers(2, 17))
            bs = kpool * pick(r, (1, 2, 4, 5))
        rows = bs // kpool
        t = self.tokens()
        use_tr = r.random() < 0.7
        batch = skew(r, 1, 16) if use_tr else t + int(r.integers(0, 3))
        max_blocks = skew(r, 1, max(1, 1024 // bs))
        nb = skew(r, 1, min(Pools.blocks(rows), 4096 // rows + 1))
        cache = self.pools.index_copy(self.pools.index_cache(rows, nb, r))
        length = max_blocks * bs
        bt = self.block_table(batch, max_blocks, nb, check)
        tr = (np.sort(r.integers(0, batch, t)) if use_tr else np.arange(t)).astype(np.int32)
        if r.random() < 0.7:   # each request's tokens at consecutive positions from a start
            starts = np.array([skew(r, 0, length + 8) for _ in range(max(batch, 1))], np.int64)
            first = np.searchsorted(tr, tr, side="left") if t else np.zeros(0, np.int64)
            pos = starts[tr] + (np.arange(t) - first)
        else:
            pos = r.integers(-2, length + 3, t, dtype=np.int64)
        if t and r.random() < 0.2:   # repeated (request, position) pairs
            a, b = r.integers(0, t, (2, max(1, t // 8)))
            pos[a], tr[a] = pos[b], tr[b]
        pos = np.clip(pos, -2**31, 2**31 - 1).astype(np.int32)
        if t and r.random() < 0.3:
            pos[r.random(t) < 0.1] = -1
        if check:
            pos[(pos < -1) | (pos >= length)] = -1
        elif r.random() < 0.3:
            self.sprinkle(pos, 0.1, (-2, -7, length, length + 5, 2**31 - 1, -2**31))
        if use_tr and not check and r.random() < 0.3:
            self.sprinkle(tr, 0.1, (-1, batch, 10**6))
        state = dev.normal((batch, kpool - 1, 2, 128), "f32", pad=4 if r.random() < 0.2 else 0)
        args = dict(k=dev.normal((t, 128), "bf16", pad=8 if r.random() < 0.2 else 0),
                    gate=dev.normal((t, 128), pick(r, ("bf16", "f32"))),
                    ape=dev.normal((kpool, 128), pick(r, ("f32", "bf16")), 0.5),
                    positions=dev.put(pos), block_table=dev.put(bt), k_cache=cache,
                    pool_state=state, kpool=kpool)
        if use_tr:
            args["token_request"] = dev.put(tr)
        call = Call("indexer_pool_store", args, t * 128 * kpool + nb * rows,
                    outputs=("k_cache", "pool_state"), inplace=("k_cache", "pool_state"),
                    roles=dict(k="in", gate="in", ape="in", positions="in", token_request="in",
                               block_table="in", k_cache="cache", pool_state="cache"),
                    vector16=("k", "k_cache"),
                    required=("k", "gate", "ape", "positions", "block_table", "k_cache",
                              "pool_state"))
        call.args["scale_kind"] = pick(r, ("amax", "pow2"))
        if r.random() < 0.5:
            call.args["hadamard"] = bool(r.random() < 0.5)
        call.args["check_indices"] = check
        self.t_rows(call, ["gate", "positions", "token_request"], t)
        call.size_bad += [("k", 1, [127, 129]), ("gate", 1, [127, 129]),
                          ("ape", 0, [kpool - 1, kpool + 1]), ("ape", 1, [127]),
                          ("block_table", 1, [0]), ("k_cache", 2, [131, 133]),
                          ("k_cache", 0, [0]), ("k_cache", 1, [0]),
                          ("pool_state", 0, [batch + 1] + ([batch - 1] if batch > 0 else [])),
                          ("pool_state", 1, [kpool, kpool - 2]), ("pool_state", 2, [1, 3]),
                          ("pool_state", 3, [127])]
        if not use_tr and t > 0:
            call.size_bad += [("block_table", 0, [t - 1])]
        call.scalar_bad += [("scalar", "kpool", [0, 1, 17, -3] + ([kpool + 1] if kpool < 16 else [])),
                            ("scalar_range", "kpool", [2**31, 2**40]),
                            ("scalar_type", "kpool", [None, 4.0, "4"]),
                            ("scalar", "scale_kind", ["bogus", "AMAX"]),
                            ("scalar_type", "scale_kind", [None, 3])]
        if check and t > 0:
            row = int(r.integers(t))
            call.check_bad += [("positions", (row,), pick(r, (-2, length)))]
            if use_tr:
                call.check_bad += [("token_request", (row,), pick(r, (-1, batch)))]
            live = np.nonzero(pos >= 0)[0]
            if len(live):
                u = int(pick(r, live))
                call.check_bad += [("block_table", (int(tr[u]), int(pos[u]) // bs),
                                    pick(r, (-1, nb)))]
        call.facts.update(tokens=t, block_size=bs, kpool=kpool, num_blocks=nb)
        return call

    def logical_to_slots(self, check: bool) -> Call:
        r, dev = self.rng, self.dev
        t, width = self.tokens(), skew(r, 0, 4096)
        t, width = self.fit([t, width], lambda d: d[0] * d[1], [0, 0])
        bs = pick(r, BLOCK_SIZES) if check or r.random() < 0.8 else skew(r, 1, 2**31 - 1)
        max_blocks = skew(r, 1, 256)
        use_tr = r.random() < 0.5
        rows = skew(r, 1, 64) if use_tr else t + int(r.integers(0, 3))
        nb = skew(r, 1, 1 << 20)
        bt = self.block_table(max(rows, 1) if use_tr else rows, max_blocks, nb, check)
        rows = bt.shape[0]
        length = max_blocks * bs
        positions = self.index_matrix(t, width, min(length, 2**31 - 1), check)
        args = dict(positions=dev.put(positions), block_table=dev.put(bt), block_size=bs)
        tr = None
        if use_tr:
            tr = self.vector(t, 0, rows - 1, check, (-1, rows, 10**6))
            args["token_request"] = dev.put(tr)
        call = Call("logical_to_slots", args, t * width, outputs=("slots",),
                    roles=dict(positions="in", block_table="in", token_request="in", slots="out"),
                    required=("positions", "block_table"))
        if r.random() < 0.5:
            call.args["slots"] = dev.empty((t, width), "i32")
            call.size_bad += [("slots", 1, [width + 1])]
            self.t_rows(call, ["slots"], t)
        call.args["check_indices"] = check
        self.t_rows(call, ["token_request"], t)
        call.size_bad += [("block_table", 1, [0])]
        if not use_tr and t > 0:
            call.size_bad += [("block_table", 0, [t - 1])]
        call.scalar_bad += [("scalar", "block_size", [0, -1]),
                            ("scalar_range", "block_size", [2**31, 2**40, -2**63]),
                            ("scalar_type", "block_size", [None, 1.5, "four"])]
        if check and t > 0 and width > 0:
            row = int(r.integers(t))
            call.check_bad += [("positions", (row, int(r.integers(width))),
                                pick(r, (-2, min(length, 2**31 - 1))))]
            if tr is not None:
                call.check_bad += [("token_request", (row,), pick(r, (-1, rows)))]
            p = int(positions[row].max())
            if p >= 0:
                br = int(tr[row]) if tr is not None else row
                call.check_bad += [("block_table", (br, p // bs), -3)]
        call.facts.update(tokens=t)
        return call

    def make(self, op: str, check: bool) -> Call:
        if op in ("indexer_topk", "indexer_logits"):
            return self.indexer(op, check)
        return getattr(self, op)(check)


# ---- corruptions: one invalid change to a valid call -------------------------------------------

def _tensor_names(call: Call, dev: Tensors, roles=None, with_elements=True):
    """The call's tensors (of these roles), those with elements in the part the op reads (an
    engine buffer with more rows than T is read for its first T rows only)."""
    names = []
    for name, x in call.args.items():
        if not dev.is_tensor(x) or (roles and call.roles.get(name) not in roles):
            continue
        rows = call.facts.get("used_rows", {}).get(name)
        if with_elements and (Tensors.numel(x) == 0 or rows == 0):
            continue
        names.append(name)
    return names


def _used_shape(call: Call, name: str, x) -> tuple:
    """The shape of the part of `x` the op reads (the first T rows of an engine buffer)."""
    shape = [int(s) for s in x.shape]
    rows = call.facts.get("used_rows", {}).get(name)
    if rows is not None and shape:
        shape[0] = min(shape[0], rows)
    return tuple(shape)


def _replace_shape(call: Call, dev: Tensors, name: str, shape) -> None:
    x = call.args[name]
    dtype = dev.dtype_of(x)
    nbytes = int(np.prod(shape, dtype=np.int64)) * SIZES[dtype]
    if nbytes > (32 << 20) and call.roles.get(name) == "in":  # big: a broadcast input
        strides = [0] + [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(1, len(shape))]
        inner = int(np.prod(shape[1:], dtype=np.int64)) * SIZES[dtype]
        call.args[name] = dev.carve(dev.raw(inner), 0, shape, dtype, strides)
    else:
        call.args[name] = dev.empty(shape, dtype)


def c_dtype(call, dev, rng):
    """A tensor of a dtype its argument does not take (rule 2)."""
    names = [n for n in _tensor_names(call, dev, with_elements=False)
             if dev.dtype_of(call.args[n]) in WRONG_DTYPES]
    if not names:
        return False
    name = pick(rng, names)
    x = call.args[name]
    wrong = pick(rng, WRONG_DTYPES[dev.dtype_of(x)])
    if call.op.startswith("indexer_") and name == "q" and wrong in ("e4m3", "bf16"):
        wrong = "f32"
    if name in ("gate", "ape") and wrong in ("bf16", "f32"):   # both taken there
        wrong = "f16"
    call.args[name] = dev.empty(tuple(x.shape), wrong)
    return f"dtype:{name}"


def c_rank(call, dev, rng):
    """A tensor with one dimension more or fewer (rule 2)."""
    names = _tensor_names(call, dev, with_elements=False)
    if not names:
        return False
    name = pick(rng, names)
    x = call.args[name]
    call.args[name] = x[None] if (len(x.shape) == 1 or rng.random() < 0.5) else x[0:1].reshape(-1)
    return f"rank:{name}"


def c_size(call, dev, rng):
    """A size that disagrees with the other arguments or its limit: T, H, the head dim, topk 0
    or 65537, an empty cache, max_blocks 0, ... (rule 7)."""
    rules = [rule for rule in call.size_bad if call.args.get(rule[0]) is not None]
    if not rules:
        return False
    name, dim, bad = pick(rng, rules)
    shape = list(call.args[name].shape)
    shape[dim] = int(pick(rng, bad))
    if shape[dim] < 0:
        return False
    _replace_shape(call, dev, name, tuple(shape))
    return f"size:{name}[{dim}]"


def c_last_stride(call, dev, rng):
    """A tensor whose last dimension has stride 2 (rule 6)."""
    names = [n for n in _tensor_names(call, dev) if int(call.args[n].shape[-1]) > 1]
    if not names:
        return False
    name = pick(rng, names)
    x = call.args[name]
    dtype, shape = dev.dtype_of(x), tuple(int(s) for s in x.shape)
    strides, acc = [2], 2 * shape[-1]
    for s in reversed(shape[:-1]):
        strides.insert(0, acc)
        acc *= s
    view = dev.carve(dev.raw(acc * SIZES[dtype]), 0, shape, dtype, strides)
    return _with_copy(call, dev, name, view, "last_stride")


def _with_copy(call, dev, name, view, kind):
    try:
        dev.copy_into(view, call.args[name])
    except Exception:  # noqa: BLE001 - the values do not matter for a refused call
        pass
    call.args[name] = view
    return f"{kind}:{name}"


def c_misaligned(call, dev, rng):
    """A view starting one element (or byte) past a 16-byte boundary: rule 8 for the vector
    tensors, the element alignment (rule 5) for the others (numpy only: torch views are always
    element-aligned)."""
    names = [n for n in _tensor_names(call, dev)
             if n in call.vector16 or (dev.torch is None and dev.dtype_of(call.args[n]) != "u8")]
    if not names:
        return False
    name = pick(rng, names)
    x = call.args[name]
    dtype = dev.dtype_of(x)
    shape, strides = tuple(int(s) for s in x.shape), dev.strides(x)
    offset = SIZES[dtype] if name in call.vector16 else 1
    extent = 1 + sum((s - 1) * st for s, st in zip(shape, strides))
    view = dev.carve(dev.raw(extent * SIZES[dtype] + 16), offset, shape, dtype, strides)
    return _with_copy(call, dev, name, view, "misaligned")


def c_row_stride(call, dev, rng):
    """A 16-byte-rule tensor whose rows are padded by one element, so a stride is no multiple
    of 16 bytes (rule 9), or an indexer cache whose token or page stride breaks its layout."""
    names = [n for n in _tensor_names(call, dev) if n in call.vector16 and
             any(int(s) > 1 for s in call.args[n].shape[:-1])]
    if not names:
        return False
    name = pick(rng, names)
    x = call.args[name]
    dtype, shape = dev.dtype_of(x), tuple(int(s) for s in x.shape)
    size = SIZES[dtype]
    if name == "k_cache":
        nb, bs = shape[0], shape[1]
        if bs > 1 and (nb == 1 or rng.random() < 0.5):
            strides = [bs * 133, 133, 1]
        else:
            page = bs * 132
            strides = [page + 4 if page % 16 == 0 else page, 132, 1]
    else:
        strides, acc = [1], shape[-1] + 1
        for s in reversed(shape[:-1]):
            strides.insert(0, acc)
            acc *= s
        if not any(shape[d] > 1 and (strides[d] * size) % 16 for d in range(len(shape) - 1)):
            return False
    extent = 1 + sum((s - 1) * st for s, st in zip(shape, strides))
    view = dev.carve(dev.raw(extent * size), 0, shape, dtype, strides)
    return _with_copy(call, dev, name, view, "row_stride")


def c_negative_stride(call, dev, rng):
    """A reversed view (numpy only; rule 3)."""
    if dev.torch is not None:
        return False
    names = [n for n in _tensor_names(call, dev) if any(int(s) > 1 for s in call.args[n].shape)]
    if not names:
        return False
    name = pick(rng, names)
    x = call.args[name]
    d = pick(rng, [i for i, s in enumerate(x.shape) if s > 1])
    call.args[name] = np.flip(x, axis=d)
    return f"negative_stride:{name}"


def c_broadcast_output(call, dev, rng):
    """An output (or written cache) with stride 0 in a dimension of size > 1 (rule 10)."""
    names = [n for n in _tensor_names(call, dev, roles=("out", "cache"))
             if any(s > 1 for s in _used_shape(call, n, call.args[n])[:-1])]
    if not names:
        return False
    name = pick(rng, names)
    x = call.args[name]
    dtype, shape, strides = dev.dtype_of(x), tuple(int(s) for s in x.shape), list(dev.strides(x))
    used = _used_shape(call, name, x)
    d = pick(rng, [i for i in range(len(shape) - 1) if used[i] > 1])
    strides[d] = 0
    extent = 1 + sum((s - 1) * st for s, st in zip(shape, strides))
    call.args[name] = dev.carve(dev.raw(extent * SIZES[dtype]), 0, shape, dtype, strides)
    return f"broadcast_output:{name}"


def c_self_overlap(call, dev, rng):
    """An output whose outer stride is smaller than the elements inside it (rule 10)."""
    def inner(shape, d):
        return int(np.prod(shape[d + 1:], dtype=np.int64))
    names = [n for n in _tensor_names(call, dev, roles=("out",))
             if any(s > 1 and inner(call.args[n].shape, d) > 1
                    for d, s in enumerate(_used_shape(call, n, call.args[n])[:-1]))]
    if not names:
        return False
    name = pick(rng, names)
    x = call.args[name]
    dtype, shape = dev.dtype_of(x), tuple(int(s) for s in x.shape)
    used = _used_shape(call, name, x)
    strides = [inner(shape, d) for d in range(len(shape))]
    d = pick(rng, [d for d in range(len(shape) - 1) if used[d] > 1 and inner(shape, d) > 1])
    strides[d] = max(1, strides[d] // 2)
    extent = 1 + sum((s - 1) * st for s, st in zip(shape, strides))
    call.args[name] = dev.carve(dev.raw(extent * SIZES[dtype]), 0, shape, dtype, strides)
    return f"self_overlap:{name}"


def _bytes(dev, x, shape=None) -> int:
    """Bytes from the first element to the end of the last (of `shape`, default x's)."""
    shape, strides = shape or [int(s) for s in x.shape], dev.strides(x)
    return (1 + sum((s - 1) * st for s, st in zip(shape, strides))) * SIZES[dev.dtype_of(x)]


def _ensure_output(call, dev, name) -> bool:
    """Gives an output the op would otherwise allocate, so it can be placed over an input."""
    if call.args.get(name) is not None:
        return True
    lead = call.facts.get("lead")
    if name == "out" and lead is not None:
        call.args["out"] = dev.empty((*lead, 512), "bf16")
    elif name == "lse" and lead is not None:
        call.args["lse"] = dev.empty(lead, "f32")
    else:
        return False
    return True


def _cross_halves(call: Call, out: str, other: str) -> bool:
    """sparse_mla with block_table= runs logical_to_slots (positions, block_table,
    token_request -> slots) then attention (q, q_rope, kv_cache, slots -> out, lse): whether an
    output of one half and an input of the other are meant."""
    if call.op != "sparse_mla" or call.args.get("block_table") is None:
        return False
    first = ("indices", "block_table", "token_request")
    return ((out in ("out", "lse") and other in first) or
            (out == "slots" and other in ("q", "q_rope", "kv_cache")))


def _alias(call, dev, rng, cross: bool):
    if call.facts.get("lead") is not None:
        for n in ("out", "lse"):
            _ensure_output(call, dev, n)
    pairs = [(o, v) for o in _tensor_names(call, dev, roles=("out", "cache"))
             for v in _tensor_names(call, dev) if v != o and _cross_halves(call, o, v) == cross]
    if not pairs:
        return False
    out, other = pick(rng, pairs)
    o, v = call.args[out], call.args[other]
    used = _bytes(dev, v, _used_shape(call, other, v))   # overlap the part the op reads
    obytes = _bytes(dev, o)
    offset = int(rng.integers(0, max(1, used // 16))) * 16
    raw = dev.raw(max(_bytes(dev, v), offset + obytes) + 16)
    vnew = dev.carve(raw, 0, tuple(v.shape), dev.dtype_of(v), dev.strides(v))
    dev.copy_into(vnew, v)
    onew = dev.carve(raw, offset, tuple(o.shape), dev.dtype_of(o), dev.strides(o))
    call.args[other], call.args[out] = vnew, onew
    return f"{'alias_logical' if cross else 'alias'}:{out}/{other}"


def c_alias(call, dev, rng):
    """An output (or the written cache) sharing bytes with an input or with another output
    (rule 11): both rebuilt inside one buffer, overlapping."""
    return _alias(call, dev, rng, cross=False)


def c_alias_logical(call, dev, rng):
    """sparse_mla with block_table=: out or lse over the positions, block_table or
    token_request, or slots= over q or the cache (rule 11 across the op's two steps)."""
    return _alias(call, dev, rng, cross=True)


def c_missing(call, dev, rng):
    """A required tensor passed as None."""
    names = [n for n in call.required if call.args.get(n) is not None]
    if not names:
        return False
    name = pick(rng, names)
    call.args[name] = None
    return f"missing:{name}"


def c_not_tensor(call, dev, rng):
    """A required tensor passed as a list, a str, a float or another object."""
    names = [n for n in call.required if call.args.get(n) is not None]
    if not names:
        return False
    name = pick(rng, names)
    call.args[name] = pick(rng, ([[0, 1], [2, 3]], "tensor", 3.5, object()))
    return f"not_tensor:{name}"


def c_wrong_device(call, dev, rng):
    """One tensor on the host while the others are on the GPU (CUDA only)."""
    if dev.device != "cuda" or dev.torch is None:
        return False
    names = _tensor_names(call, dev)
    if not names:
        return False
    name = pick(rng, names)
    x = call.args[name]
    call.args[name] = dev.on_host(x) if rng.random() < 0.7 else dev.to_numpy(x)
    return f"wrong_device:{name}"


def _scalar(kind):
    def corrupt(call, dev, rng):
        choices = [(name, values) for k, name, values in call.scalar_bad
                   if k == kind and (call.op, name, kind) not in SKIPPED_GAPS]
        if not choices:
            return False
        name, values = pick(rng, choices)
        value = pick(rng, values)
        call.args[name] = value
        return f"{kind}:{name}={value!r}"[:60]
    corrupt.__doc__ = {
        "scalar": "A scalar argument with a value the op refuses (scale 0 / nan / inf, topk "
                  "0 / 65537 / 2^70, block_size 0, an unknown kind, scale_kind or kv_format).",
        "scalar_type": "A scalar argument of the wrong Python type (None, a str, a float "
                       "block_size or topk).",
        "scalar_range": "An int scalar beyond its C type (block_size 2^31, 2^40, -2^63; scale "
                        "2^2000).",
    }[kind]
    return corrupt


def c_backend(call, dev, rng):
    """A forced backend id that matches nothing, or cpu.reference for CUDA tensors."""
    choices = ["nope.none", "nope.*"]
    if dev.device == "cuda":
        choices.append("cpu.reference")
    call.args["backend"] = pick(rng, choices)
    return f"backend:{call.args['backend']}"


def c_stream(call, dev, rng):
    """A stream that is neither a handle nor a stream object."""
    call.args["stream"] = pick(rng, ("stream", 1.5, object()))
    return "stream:type"


def c_check_index(call, dev, rng):
    """Check mode with one index value out of range where the op reads it."""
    if not call.args.get("check_indices") or not call.check_bad:
        return False
    name, index, value = pick(rng, call.check_bad)
    x = call.args[name]
    if dev.torch is not None:
        x[index] = int(value)
    else:
        x[index] = value
    return f"check_index:{name}"


def c_q_scale(call, dev, rng):
    """Indexer: an e4m3 q without q_scale, or a bf16 q with one."""
    if not call.op.startswith("indexer_") or "weights" not in call.args:
        return False
    if call.args.get("q_scale") is not None:
        call.args["q_scale"] = None
        return "q_scale:missing"
    t, h = (int(s) for s in call.args["weights"].shape)
    call.args["q_scale"] = dev.empty((t, h), "f32")
    return "q_scale:with_bf16"


def c_rows(call, dev, rng):
    """indexer / logical_to_slots / indexer_pool_store: fewer block_table rows than tokens and
    no token_request."""
    if call.op not in ("indexer_topk", "indexer_logits", "logical_to_slots", "indexer_pool_store"):
        return False
    t = call.facts.get("tokens", 0)
    if t < 1:
        return False
    call.args["token_request"] = None
    bt = call.args["block_table"]
    call.args["block_table"] = bt[: t - 1] if t - 1 > 0 else dev.empty((0, bt.shape[1]), "i32")
    return "rows:block_table<T"


def c_sparse_mla_logical(call, dev, rng):
    """sparse_mla: token_request= or slots= without block_table=."""
    if call.op != "sparse_mla" or call.args.get("block_table") is not None:
        return False
    t, topk = (int(s) for s in call.args["indices"].shape)
    if rng.random() < 0.5:
        call.args["token_request"] = dev.empty((t,), "i32")
    else:
        call.args["slots"] = dev.empty((t, topk), "i32")
    return "logical_without_block_table"


def c_rope_without_rope(call, dev, rng):
    """A call without rope (rope_dim 0) given the rope anyway: sparse_mla's q_rope or
    kv_store's rope."""
    if not call.facts.get("nope") or call.op not in ("sparse_mla", "kv_store"):
        return False
    if call.op == "sparse_mla":
        t, h = (int(s) for s in call.args["q"].shape[:2])
        call.args["q_rope"] = dev.normal((t, h, 64), "bf16")
        return "rope_without_rope:q_rope"
    call.args["rope"] = dev.normal((int(call.args["latent"].shape[0]), 64), "bf16")
    return "rope_without_rope:rope"


def c_pool_args(call, dev, rng):
    """indexer_topk: an argument of the pooled indexer (pool_topk, select_tail, out_lens,
    return_lens) with kpool 0, or kpool 0 with the pooled arguments."""
    if call.op != "indexer_topk":
        return False
    if call.args.get("kpool"):
        call.args["kpool"] = 0
        return "pool_args:kpool=0"
    t = int(call.args["q"].shape[0])
    name = pick(rng, ("pool_topk", "select_tail", "out_lens", "return_lens"))
    call.args[name] = {"pool_topk": int(rng.integers(1, 8)), "select_tail": True,
                       "out_lens": dev.empty((t,), "i32"), "return_lens": True}[name]
    return f"pool_args:{name}"


def c_e4m3_cache(call, dev, rng):
    """An fp8_ds_mla cache passed as e4m3 instead of its u8 bytes."""
    cache = call.args.get("kv_cache")
    if cache is None or not dev.is_tensor(cache) or dev.dtype_of(cache) != "u8":
        return False
    if dev.torch is not None:
        call.args["kv_cache"] = cache.view(dev.torch.float8_e4m3fn)
    else:
        call.args["kv_cache"] = cache.view(E4M3)
    return "e4m3_cache"


def c_topk_mismatch(call, dev, rng):
    """indexer_topk: topk and indices= that disagree."""
    if call.op != "indexer_topk" or call.args.get("indices") is None:
        return False
    call.args["topk"] = int(call.args["indices"].shape[1]) + 1
    return "topk_mismatch"


def c_huge_output(call, dev, rng):
    """An input whose token dimension is a broadcast 2^40 rows, so the output latte allocates
    for it cannot exist: refused as a latte error (too large, or out of memory)."""
    first = {"sparse_mla": "q", "mla_decode": "q", "indexer_topk": "q", "indexer_logits": "q",
             "logical_to_slots": "positions"}.get(call.op)
    out = {"sparse_mla": "out", "mla_decode": "out", "indexer_topk": "indices",
           "indexer_logits": "logits", "logical_to_slots": "slots"}.get(call.op)
    if first is None or call.args.get(out) is not None:
        return False
    if call.op == "indexer_topk" and call.args.get("topk") is None:
        return False
    x = call.args[first]
    dtype = dev.dtype_of(x)
    shape = (1 << 40,) + tuple(int(s) for s in x.shape[1:])
    if any(s == 0 for s in shape) or (call.op == "logical_to_slots" and shape[1] < 256):
        return False   # keep the output far beyond any memory (2^40 x 256 x 4 bytes at least)
    inner = int(np.prod(shape[1:], dtype=np.int64))
    strides = [0] + [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(1, len(shape))]
    call.args[first] = dev.carve(dev.raw(inner * SIZES[dtype]), 0, shape, dtype, strides)
    return f"huge_output:{first}"


CORRUPTIONS = {
    "dtype": c_dtype, "rank": c_rank, "size": c_size, "last_stride": c_last_stride,
    "misaligned": c_misaligned, "row_stride": c_row_stride, "negative_stride": c_negative_stride,
    "broadcast_output": c_broadcast_output, "self_overlap": c_self_overlap, "alias": c_alias,
    "alias_logical": c_alias_logical,
    "missing": c_missing, "not_tensor": c_not_tensor, "wrong_device": c_wrong_device,
    "scalar": _scalar("scalar"), "scalar_type": _scalar("scalar_type"),
    "scalar_range": _scalar("scalar_range"), "backend": c_backend, "stream": c_stream,
    "check_index": c_check_index,
    "q_scale": c_q_scale, "rows": c_rows, "logical_without_block_table": c_sparse_mla_logical,
    "e4m3_cache": c_e4m3_cache, "topk_mismatch": c_topk_mismatch, "huge_output": c_huge_output,
    "rope_without_rope": c_rope_without_rope, "pool_args": c_pool_args,
}


# ---- backends: which ones the device has, and what each declares -------------------------------

def _rule_ok(rule, value) -> bool:
    if rule is None or rule == "any":
        return True
    if isinstance(rule, int):
        return value == rule
    if isinstance(rule, list):
        return value in rule
    if "min" in rule and value < rule["min"]:
        return False
    if "max" in rule and value > rule["max"]:
        return False
    if "multiple_of" in rule and value % rule["multiple_of"]:
        return False
    if "one_of" in rule and value not in rule["one_of"]:
        return False
    return True


class Backends:
    def __init__(self, device: str):
        self.device = device
        self.all = latte.backends()
        self.arch = None
        if device == "cuda":
            import torch
            major, minor = torch.cuda.get_device_capability(0)
            self.arch = major * 10 + minor

    def for_op(self, op: str) -> list:
        return [b["id"] for b in self.all if op in b["capabilities"].get("ops", [])
                and self.device in b["capabilities"].get("devices", [])]

    def declares(self, backend_id: Optional[str], call: Call, dev: Tensors) -> bool:
        """Whether `backend_id` (None: any backend of the device) declares this valid call."""
        ids = [backend_id] if backend_id and "*" not in backend_id else self.for_op(call.op)
        if backend_id and "*" in backend_id:
            prefix = backend_id.split("*")[0]
            ids = [i for i in ids if i.startswith(prefix)]
        spec = spec_of(call, dev)
        for b in self.all:
            if b["id"] not in ids:
                continue
            caps = b["capabilities"]
            if call.op not in caps.get("ops", []) or self.device not in caps.get("devices", []):
                continue
            if self.arch is not None and not _rule_ok(caps.get("arch"), self.arch):
                continue
            ok = all(key not in spec or _rule_ok(caps.get(key), spec[key])
                     for key in ("heads", "block_size", "topk", "s_q", "max_tokens", "head_dim"))
            for key, listed in (("q_dtype", "q_dtypes"), ("kv_cache", "kv_caches")):
                if key in spec and caps.get(listed) and spec[key] not in caps[listed]:
                    ok = False
            if ok:
                return True
        return False


def spec_of(call: Call, dev: Tensors) -> dict:
    """The spec fields the selector matches, as latte derives them from the call's tensors."""
    a, op = call.args, call.op
    tokens = call.facts.get("tokens", 0)
    spec = {}
    if op in ("sparse_mla", "mla_decode"):
        cache = a["kv_cache"]
        spec.update(kv_cache="bf16" if dev.dtype_of(cache) == "bf16" else "fp8_ds_mla",
                    block_size=int(cache.shape[1]), q_dtype="bf16",
                    head_dim=512 if call.facts.get("nope") else 576)
        if op == "sparse_mla":
            spec.update(heads=int(a["q"].shape[1]), topk=int(a["indices"].shape[1]))
        else:
            spec.update(heads=int(a["q"].shape[2]), s_q=int(a["q"].shape[1]))
            tokens = tokens * int(a["q"].shape[1])
    elif op in ("indexer_topk", "indexer_logits"):
        # pooled: the block size stays tokens per block (kpool x the pool rows)
        spec.update(heads=int(a["q"].shape[1]), block_size=call.facts["block_size"],
                    q_dtype=dev.dtype_of(a["q"]), head_dim=128)
        if op == "indexer_topk":
            spec["topk"] = call.facts["topk"]
    elif op == "kv_store":
        cache = a["kv_cache"]
        spec.update(kv_cache="bf16" if dev.dtype_of(cache) == "bf16" else "fp8_ds_mla",
                    block_size=int(cache.shape[1]),
                    head_dim=512 if call.facts.get("nope") else 576)
    elif op == "indexer_k_store":
        spec.update(block_size=int(a["k_cache"].shape[1]), head_dim=128)
    elif op == "indexer_pool_store":
        spec.update(block_size=call.facts["block_size"], head_dim=128)
    else:
        spec.update(block_size=int(a["block_size"]))
    spec["max_tokens"] = 1 if tokens <= 1 else 1 << (tokens - 1).bit_length()
    return spec


# ---- the oracle ---------------------------------------------------------------------------------

def _host_args(call: Call, dev: Tensors, before: dict) -> dict:
    out = {}
    for name, x in call.args.items():
        if name in ("backend", "stream", "check_indices"):
            continue
        if name in before:
            out[name] = before[name]
        elif dev.is_tensor(x):
            out[name] = dev.to_numpy(x)
        else:
            out[name] = x
    if call.op in ("indexer_topk", "indexer_logits", "indexer_k_store", "indexer_pool_store"):
        out["k_cache"] = repage(out["k_cache"])
    return out


def repage(cache: np.ndarray) -> np.ndarray:
    """An indexer cache copy laid out as pages of 16-byte multiples (a contiguous copy of a
    block size that is no multiple of 4 is not a valid cache)."""
    nb, bs, _ = cache.shape
    page = round16(bs * 132)
    buf = np.zeros(nb * page + 16, np.uint8)
    start = (-buf.ctypes.data) % 16
    view = np.ndarray((nb, bs, 132), np.uint8, buffer=buf, offset=start, strides=(page, 132, 1))
    view[...] = cache
    return view


def _results(call: Call, value, a: dict) -> dict:
    """The op's results by name (outputs it returned or wrote); `a` holds the call's tensors."""
    if call.op in ("sparse_mla", "mla_decode"):
        out, lse = value if isinstance(value, tuple) else (value, None)
        res = {"out": out, "lse": lse}
        if a.get("slots") is not None:
            res["slots"] = a["slots"]
        return res
    if call.op in ("kv_store", "indexer_k_store", "indexer_pool_store"):
        return {name: a[name] for name in call.inplace}
    if call.op == "indexer_topk" and isinstance(value, tuple):   # (indices, out_lens)
        return {"indices": value[0], "out_lens": value[1]}
    return {call.outputs[0]: value}


def _norm_err(got: np.ndarray, want: np.ndarray, axis=None) -> float:
    """max |got - want| over the largest |want| of the row (the whole tensor for axis None);
    -inf must match -inf exactly."""
    got, want = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(want)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    if np.any(~finite & ~same) or np.any(finite & ~np.isfinite(got)):
        return math.inf
    diff = np.where(finite, np.abs(np.where(finite, got, 0.0) - np.where(finite, want, 0.0)), 0.0)
    if diff.size == 0:
        return 0.0
    scale = np.where(finite, np.abs(want), 0.0)
    if axis is None:
        return float(diff.max() / max(scale.max(), 1e-30)) if diff.max() > 0 else 0.0
    d = diff.reshape(-1, diff.shape[-1]).max(axis=1)
    s = scale.reshape(-1, scale.shape[-1]).max(axis=1)
    rel = np.where(d > 0, d / np.maximum(s, 1e-30), 0.0)
    return float(rel.max()) if rel.size else 0.0


def _lse_err(got: np.ndarray, want: np.ndarray) -> float:
    got, want = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(want)
    if np.any(~finite & (got != want)) or np.any(finite & ~np.isfinite(got)):
        return math.inf
    if not finite.any():
        return 0.0
    return float((np.abs(got[finite] - want[finite]) / np.maximum(1.0, np.abs(want[finite]))).max())


def _exact_err(got: np.ndarray, want: np.ndarray) -> float:
    if got.shape != want.shape:
        return math.inf
    g = np.ascontiguousarray(got).view(np.uint8)
    w = np.ascontiguousarray(want).view(np.uint8)
    return float(np.count_nonzero(g != w))


TOLERANCE = {"out": 2e-2, "lse": 1e-3, "logits": 1e-3, "indices": 1e-3, "slots": 0.0,
             "kv_cache": 0.0, "k_cache": 0.0, "out_lens": 0.0, "pool_state": 0.0}


class Oracle:
    def __init__(self, dev: Tensors, exact: bool):
        self.dev, self.exact = dev, exact

    def check(self, call: Call, value, before: dict) -> dict:
        """{result name: error}: 0 means equal; compared with TOLERANCE (0 on the CPU)."""
        dev = self.dev
        host = _host_args(call, dev, before)
        got = {k: dev.to_numpy(v) for k, v in _results(call, value, call.args).items()
               if v is not None}
        ref_value = getattr(latte, call.op)(**host, backend="cpu.reference")
        ref = {k: v for k, v in _results(call, ref_value, host).items() if v is not None}
        errors = {}
        for name, g in got.items():
            w = ref.get(name)
            if w is None:
                continue
            if call.op == "indexer_pool_store" and name == "k_cache":
                errors[name] = self._pool_rows_err(host, g, w)
            elif self.exact or name in ("slots", "out_lens", "pool_state") or (
                    call.op == "indexer_pool_store"):   # byte-identical on every backend
                errors[name] = _exact_err(g, w)
            elif name in ("kv_cache", "k_cache"):
                errors[name] = self._cache_err(call, g, w)
            elif name == "out":
                errors[name] = _norm_err(g, w, axis=-1)
            elif name == "lse":
                errors[name] = _lse_err(g, w)
            elif name == "logits":
                errors[name] = _norm_err(g, w)
            elif name == "indices" and call.args.get("kpool"):
                errors[name] = self._pooled_topk_err(call, host, g, w, ref.get("out_lens"))
            elif name == "indices":
                errors[name] = self._topk_err(call, host, g)
        return errors

    @staticmethod
    def _cache_err(call: Call, got: np.ndarray, want: np.ndarray) -> float:
        """Bytes that differ, except at slots two tokens write (backend-defined which lands)."""
        slots = call.facts["slots"]
        valid = slots[(slots >= 0)]
        counts = np.bincount(valid[valid < got.shape[0] * got.shape[1]].astype(np.int64),
                             minlength=1)
        dup = np.nonzero(counts > 1)[0]
        if call.op == "kv_store":
            g = got.reshape(-1, got.shape[-1]).copy()
            w = want.reshape(-1, want.shape[-1]).copy()
            g[dup] = 0
            w[dup] = 0
            return _exact_err(g, w)
        bs = got.shape[1]
        g, w = np.ascontiguousarray(got).copy(), np.ascontiguousarray(want).copy()
        for s in dup:
            for arr in (g, w):
                page = arr[s // bs].reshape(-1)
                page[(s % bs) * 128:(s % bs + 1) * 128] = 0
                page[bs * 128 + (s % bs) * 4: bs * 128 + (s % bs) * 4 + 4] = 0
        return _exact_err(g, w)

    @staticmethod
    def _pool_rows_err(host: dict, got: np.ndarray, want: np.ndarray) -> float:
        """indexer_pool_store's pages: bytes that differ, except in page rows two different pools
        complete (a block the block table lists twice: backend-defined which lands, as for two
        tokens naming one slot)."""
        kpool, pos = int(host["kpool"]), host["positions"].astype(np.int64)
        bt, (nb, rows, _) = host["block_table"], got.shape
        bs = kpool * rows
        tr = host.get("token_request")
        req = tr.astype(np.int64) if tr is not None else np.arange(len(pos))
        writers: dict = {}
        for r, p in zip(req, pos):
            if p < 0 or p % kpool != kpool - 1 or not 0 <= r < bt.shape[0] or p >= bt.shape[1] * bs:
                continue
            block = int(bt[r, p // bs])
            if 0 <= block < nb:
                writers.setdefault((block, int(p % bs) // kpool), set()).add((int(r), int(p)))
        g, w = np.ascontiguousarray(got).copy(), np.ascontiguousarray(want).copy()
        for (block, row), pools in writers.items():
            if len(pools) > 1:
                for arr in (g, w):
                    page = arr[block].reshape(-1)
                    page[row * 128:(row + 1) * 128] = 0
                    page[rows * 128 + row * 4: rows * 128 + row * 4 + 4] = 0
        return _exact_err(g, w)

    def _pooled_topk_err(self, call: Call, host: dict, got: np.ndarray, want: np.ndarray,
                         want_lens: Optional[np.ndarray]) -> float:
        """Pooled top-k rows: each row is g = min(pool_topk, candidate pools) groups of kpool
        entries, each the expansion of one candidate pool (its positions in order, or their
        slots), in any order of the pools; then the tail, exactly as cpu.reference's; then -1.
        The error is that of the chosen pools' scores (cpu.reference's pooled logits) against
        the best g scores, as for tokens; inf when the structure, the tail or a row's length
        differs."""
        h = {k: v for k, v in host.items()
             if k not in ("topk", "kind", "indices", "pool_topk", "select_tail", "out_lens",
                          "return_lens")}
        kpool, pool_topk = int(h["kpool"]), int(call.args["pool_topk"])
        bt, rows = h["block_table"], h["k_cache"].shape[1]
        bs = kpool * rows
        if want_lens is None:   # the reference's lengths, asked for here when the call did not
            _, want_lens = latte.indexer_topk(**{k: v for k, v in host.items()
                                                 if k not in ("topk", "return_lens", "indices")},
                                              topk=got.shape[1],
                                              out_lens=np.empty(got.shape[0], np.int32),
                                              backend="cpu.reference")
        logits = latte.indexer_logits(**h, logits=np.empty((got.shape[0], bt.shape[1] * rows),
                                                           np.float32),
                                      backend="cpu.reference")
        physical = call.args.get("kind", "physical") == "physical"
        tr = h.get("token_request")
        worst = 0.0
        for t in range(got.shape[0]):
            row = logits[t].astype(np.float64)
            cand = np.nonzero(np.isfinite(row))[0]
            g = min(pool_topk, len(cand))
            n = int(want_lens[t])
            chosen = got[t]
            if np.any(chosen[:n] == -1) or np.any(chosen[n:] != -1):
                return math.inf
            if n < g * kpool or np.any(chosen[g * kpool:n] != want[t, g * kpool:n]):
                return math.inf   # the tail, exactly
            r = int(tr[t]) if tr is not None else t
            if not 0 <= r < bt.shape[0]:   # a token of no request sees nothing
                if len(cand) or n:
                    return math.inf
                continue
            expansion = {}   # the entries of each candidate pool -> its score
            for p in cand:
                first = kpool * int(p)
                if physical:
                    first = int(bt[r, first // bs]) * bs + first % bs
                expansion.setdefault(tuple(range(first, first + kpool)), []).append(row[p])
            taken = Counter(tuple(int(x) for x in chosen[j * kpool:(j + 1) * kpool])
                            for j in range(g))
            if any(c > len(expansion.get(key, ())) for key, c in taken.items()):
                return math.inf
            picked = np.sort([expansion[key][0] for key, c in taken.items()
                              for _ in range(c)])[::-1]
            best = np.sort(row[cand])[::-1][:g]
            if g:
                scale = max(np.abs(best).max(), 1e-30)
                worst = max(worst, float(np.abs(picked - best).max() / scale))
        return worst

    def _topk_err(self, call: Call, host: dict, got: np.ndarray) -> float:
        """The selected scores against the best scores (ties may pick other positions):
        inf when an entry is not a candidate, repeats a position, or the count differs."""
        h = dict(host)
        for name in ("topk", "kind", "indices"):
            h.pop(name, None)
        bt, bs = h["block_table"], h["k_cache"].shape[1]
        width = bt.shape[1] * bs
        logits = latte.indexer_logits(**h, logits=np.empty((got.shape[0], width), np.float32),
                                      backend="cpu.reference")
        physical = call.args.get("kind", "physical") == "physical"
        tr = h.get("token_request")
        worst = 0.0
        for t in range(got.shape[0]):
            row = logits[t].astype(np.float64)
            cand = np.nonzero(np.isfinite(row))[0]
            chosen = got[t]
            n_valid = int(np.count_nonzero(chosen != -1))
            if n_valid != min(len(cand), got.shape[1]) or np.any(chosen[n_valid:] != -1):
                return math.inf
            chosen = chosen[:n_valid].astype(np.int64)
            if physical:
                r = int(tr[t]) if tr is not None else t
                if not 0 <= r < bt.shape[0]:   # a token of no request sees nothing (n_valid 0)
                    continue
                slot_of = bt[r].astype(np.int64)[cand // bs] * bs + cand % bs
                # a slot holds one key, so all its positions score the same; a block listed
                # twice in the row makes a slot stand for several positions
                score = {int(s): row[p] for p, s in zip(cand, slot_of)}
                available = Counter(int(s) for s in slot_of)
                taken = Counter(int(c) for c in chosen)
                if any(n > available.get(c, 0) for c, n in taken.items()):
                    return math.inf
                picked = np.array([score[int(c)] for c in chosen])
            else:
                if np.any(~np.isin(chosen, cand)) or len(np.unique(chosen)) != len(chosen):
                    return math.inf
                picked = row[chosen]
            best = np.sort(row[cand])[::-1][:n_valid]
            picked = np.sort(picked)[::-1]
            if n_valid:
                scale = max(np.abs(best).max(), 1e-30)
                worst = max(worst, float(np.abs(picked - best).max() / scale))
        return worst


# ---- the run ------------------------------------------------------------------------------------

@dataclass
class OpStats:
    valid: int = 0
    valid_ok: int = 0
    invalid: int = 0
    refused: int = 0
    declined: int = 0          # a forced backend that does not declare the call refused it
    oracle: int = 0
    max_err: dict = field(default_factory=dict)
    violations: int = 0
    seconds: float = 0.0


class Soak:
    def __init__(self, args, ops: Optional[dict] = None, out=sys.stdout):
        self.args, self.out = args, out
        self.device = args.device
        kind = args.tensors
        if kind == "auto":
            kind = "torch" if args.device == "cuda" else "numpy"
        self.dev = Tensors(kind, args.device)
        self.ops = {op: getattr(latte, op) for op in OPS}
        self.ops.update(ops or {})
        self.stats = {op: OpStats() for op in OPS}
        self.kinds: dict[str, list] = {}     # kind -> [count, refused]
        self.errors: dict[str, int] = {}     # exception class -> count
        self.violations: list[dict] = []     # the first 2000, with their details
        self.violation_counts: Counter = Counter()   # every one, by op / kind / what
        self.memory: dict[str, Any] = {}
        self.notes: list[str] = []
        if SKIPPED_GAPS:
            self.notes.append(f"not made (KNOWN_GAPS: latte does not refuse them with a latte "
                              f"error yet; --known-gaps makes them): {len(SKIPPED_GAPS)} kinds of "
                              "invalid scalar, " + ", ".join(f"{op} {name} {kind}" for op, name, kind
                                                            in sorted(SKIPPED_GAPS)))
        self.current = ""
        self.progress = time.monotonic()
        self.calls_done = 0
        self.stopped = ""
        self.side_streams = []
        self.flat: Optional[bool] = None

    def log(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    # -- one call
    def make_call(self, i: int) -> Call:
        seed = self.args.seed
        rng = np.random.default_rng([seed, i])
        self.dev.seed(rng)
        self.gen.rng = rng
        op = pick(rng, self.op_list)
        check = bool(rng.random() < 0.1)
        call = self.gen.make(op, check)
        self.gen.backend_and_stream(call, self.backends.for_op(op))
        if rng.random() < self.args.invalid_rate:
            kinds = [k for k in self.kind_list]
            rng.shuffle(kinds)
            for kind in kinds:
                label = CORRUPTIONS[kind](call, self.dev, rng)
                if label:
                    call.kind = label
                    break
        return call

    def run_call(self, i: int, call: Call, oracle_due: bool) -> None:
        st = self.stats[call.op]
        valid = call.kind == "valid"
        forced = call.args.get("backend")
        declared = (not valid) or self.backends.declares(forced, call, self.dev)
        check_oracle = (valid and oracle_due and call.oracle_ok and declared and
                        call.work <= self.args.oracle_budget)
        before = {}
        if check_oracle or (not valid and call.inplace):
            before = {n: self.dev.to_numpy(call.args[n]) for n in call.inplace
                      if self.dev.is_tensor(call.args.get(n))}
        kwargs = dict(call.args)
        stream = self.stream_for(call)
        if stream is not None and "stream" not in kwargs:   # (a corrupted stream stays)
            kwargs["stream"] = stream
        self.current = f"#{i} {call.kind} {call.summary()}"
        start = time.perf_counter()
        try:
            if stream is not None:
                self.side_streams[call.facts["side_stream"]].wait_stream(
                    self.dev.torch.cuda.current_stream())
            value = self.ops[call.op](**kwargs)
            error = None
        except Exception as e:  # noqa: BLE001 - every exception is judged below
            value, error = None, e
        finally:
            if stream is not None:
                self.dev.torch.cuda.current_stream().wait_stream(
                    self.side_streams[call.facts["side_stream"]])
        st.seconds += time.perf_counter() - start
        if error is not None:
            name = type(error).__name__
            if not isinstance(error, LatteError):
                name = f"{type(error).__module__}.{name}".replace("builtins.", "")
            self.errors[name] = self.errors.get(name, 0) + 1
        if valid:
            st.valid += 1
            if error is None:
                st.valid_ok += 1
                if not declared:
                    self.violation(i, call, "a backend that does not declare the call ran it",
                                   f"backend={forced!r}")
                elif check_oracle:
                    self.compare(i, call, value, before)
            elif isinstance(error, NoValidBackendError) and not declared:
                st.declined += 1
            else:
                self.violation(i, call, "valid call raised", error)
        else:
            st.invalid += 1
            counts = self.kinds.setdefault(call.kind.split(":")[0], [0, 0, ""])
            counts[0] += 1
            if isinstance(error, LatteError):
                st.refused += 1
                counts[1] += 1
                if not counts[2]:
                    counts[2] = f"{type(error).__name__}: {error}"[:160]
                for name, was in before.items():
                    now = self.dev.to_numpy(call.args[name])
                    if _exact_err(now, was):
                        self.violation(i, call, f"refused call changed {name}", error)
            elif error is None:
                self.violation(i, call, "invalid call accepted", "no exception")
            else:
                self.violation(i, call, "invalid call raised a non-latte exception", error)
        del value, error

    def stream_for(self, call: Call):
        if "side_stream" not in call.facts or not self.side_streams:
            return None
        s = self.side_streams[call.facts["side_stream"]]
        return s.cuda_stream if call.facts.get("stream_as_int") else s

    def compare(self, i: int, call: Call, value, before: dict) -> None:
        st = self.stats[call.op]
        try:
            errors = Oracle(self.dev, self.device == "cpu").check(call, value, before)
        except Exception as e:  # noqa: BLE001
            self.violation(i, call, "oracle call failed", e)
            return
        st.oracle += 1
        for name, err in errors.items():
            st.max_err[name] = max(st.max_err.get(name, 0.0), err)
            limit = 0.0 if self.device == "cpu" else TOLERANCE[name]
            if err > limit:
                self.violation(i, call, f"{name} differs from cpu.reference",
                               f"error {err:.3g} > {limit:g}")

    def violation(self, i: int, call: Call, what: str, detail) -> None:
        self.stats[call.op].violations += 1
        if isinstance(detail, BaseException):
            detail = f"{type(detail).__name__}: {detail}"
        self.violation_counts[f"{call.op} / {call.kind.split(':')[0]}: {what}: "
                              f"{str(detail).splitlines()[0][:70]}"] += 1
        if len(self.violations) >= 2000:
            return
        entry = dict(call=i, op=call.op, kind=call.kind, what=what, detail=str(detail)[:600],
                     args=call.summary()[:3000], replay=self.replay_command(i),
                     backend=call.args.get("backend"), spec=spec_of(call, self.dev)
                     if call.kind == "valid" else None)
        self.violations.append(entry)
        if len(self.violations) <= self.args.max_print:
            self.log(f"VIOLATION call #{i} [{call.op} / {call.kind}] {what}: {entry['detail']}\n"
                     f"  {entry['args']}\n  reproduce: {entry['replay']}")

    def replay_command(self, i: int) -> str:
        a = self.args
        return (f"python3 tests/soak/soak.py --device {a.device} --tensors {self.dev.kind} "
                f"--seed {a.seed} --replay {i}")

    # -- memory
    def memory_sample(self) -> dict:
        rss = _rss_bytes()
        sample = {"host_rss": rss}
        if self.device == "cuda":
            torch = self.dev.torch
            torch.cuda.synchronize()
            free, total = torch.cuda.mem_get_info()
            sample.update(allocated=torch.cuda.memory_allocated(),
                          reserved=torch.cuda.memory_reserved(), used=total - free,
                          outside_torch=total - free - torch.cuda.memory_reserved())
        return sample

    def settle(self) -> dict:
        gc.collect()
        if self.device == "cuda":
            self.dev.torch.cuda.synchronize()
            self.dev.torch.cuda.empty_cache()
        return self.memory_sample()

    # -- watchdog
    def watchdog(self, stop: threading.Event) -> None:
        while not stop.wait(1.0):
            idle = time.monotonic() - self.progress
            if idle > self.args.hang_timeout:
                self.log(f"HANG: no progress for {idle:.0f} s in {self.current[:2000]}")
                self.stopped = f"hang in {self.current[:300]}"
                self.violations.append(dict(call=-1, op="?", kind="hang", what="hang",
                                            detail=self.current[:600], args="", replay=""))
                try:
                    self.write_report(time.monotonic() - self.t0)
                finally:
                    os._exit(3)

    # -- main loop
    def run(self) -> int:
        a = self.args
        self.t0 = time.monotonic()
        self.op_list = [op for op in OPS if op in a.ops]
        self.kind_list = [k for k in CORRUPTIONS if k not in a.exclude_kinds and
                          (not a.kinds or k in a.kinds)]
        self.backends = Backends(self.device)
        self.pools = Pools.get(self.dev, a.seed)
        self.gen = Generator(self.dev, self.pools, a.budget, self.device)
        if self.device == "cuda":
            torch = self.dev.torch
            self.side_streams = [torch.cuda.Stream(), torch.cuda.Stream()]
        if a.replay is not None:
            call = self.make_call(a.replay)
            self.log(f"call #{a.replay} [{call.kind}] {call.summary()}")
            self.run_call(a.replay, call, oracle_due=True)
            self.dev.sync()
            self.log("violations: %d" % len(self.violations))
            return 1 if self.violations else 0
        stop = threading.Event()
        self.progress = time.monotonic()
        threading.Thread(target=self.watchdog, args=(stop,), daemon=True).start()
        warmup = min(a.warmup, a.calls // 5)
        oracle_pending = False
        self.memory["samples"] = 0
        i = 0
        try:
            for i in range(a.start, a.calls):
                if a.time_limit and time.monotonic() - self.t0 > a.time_limit:
                    self.stopped = f"--time-limit {a.time_limit:g} s reached after {i} calls"
                    self.log(self.stopped)
                    break
                if i == a.start + warmup:
                    self.memory["start"] = self.settle()
                    self.memory["max"] = dict(self.memory["start"])
                # the last resort, should a hang hold the GIL and stop the watchdog thread
                faulthandler.dump_traceback_later(a.hang_timeout + 60, exit=True)
                try:
                    call = self.make_call(i)
                except Exception as e:  # noqa: BLE001 - a soak bug, unless CUDA has failed
                    self.dev.sync()
                    self.violations.append(dict(
                        call=i, op="?", kind="generator", what="soak.py failed to make the call",
                        detail=f"{type(e).__name__}: {e}"[:600],
                        args=traceback.format_exc()[-1500:],
                        replay=self.replay_command(i)))
                    continue
                if i % a.oracle_every == 0:
                    oracle_pending = True
                due = oracle_pending and call.kind == "valid"
                self.run_call(i, call, due)
                if due and call.work <= a.oracle_budget and call.oracle_ok:
                    oracle_pending = False
                del call
                self.calls_done += 1
                self.progress = time.monotonic()
                if (i + 1) % a.sync_every == 0:
                    self.sync_point(i)
                if (i + 1) % a.progress_every == 0:
                    self.log(f"{i + 1} calls, {sum(self.violation_counts.values())} violations, "
                             f"{time.monotonic() - self.t0:.0f} s, host RSS "
                             f"{_rss_bytes() / 2**20:.0f} MiB")
            self.dev.sync()
        except Exception as e:  # noqa: BLE001 - e.g. a CUDA fault surfacing at a sync
            self.violations.append(dict(call=i, op="?", kind="fault", what="the run stopped",
                                        detail=f"{type(e).__name__}: {e}"[:600],
                                        args=self.current[:1500], replay=self.replay_command(i)))
            self.log(f"STOPPED at call #{i}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
            last_sync = i - i % a.sync_every
            self.stopped = (f"exception at call #{i} (a CUDA fault comes from calls {last_sync} .. "
                            f"{i}: rerun them with --start {last_sync} --calls {i + 1} "
                            f"--sync-every 1)")
        finally:
            stop.set()
            faulthandler.cancel_dump_traceback_later()
        elapsed = time.monotonic() - self.t0
        if "start" in self.memory and not self.stopped.startswith("exception"):
            self.memory["end"] = self.settle()
            self.flat = self.memory_flat()
        self.write_report(elapsed)
        return 1 if self.violations or self.flat is False else 0

    def sync_point(self, i: int) -> None:
        if "start" not in self.memory:
            self.dev.sync()
            return
        sample = self.memory_sample()
        self.memory["samples"] += 1
        if "outside_torch" in sample:
            series = self.memory.setdefault("series", [])
            series.append((i + 1, round(sample["outside_torch"] / 2**20, 1),
                           round(sample["allocated"] / 2**20, 1)))
            if len(series) > 200:   # keep every other sample
                del series[1::2]
        peak = self.memory["max"]
        for k, v in sample.items():
            peak[k] = max(peak.get(k, 0), v)

    def memory_flat(self) -> Optional[bool]:
        """Device memory within the margin from the start sample to the end (None on the CPU);
        host memory growth is noted, not failed."""
        margin = self.args.memory_margin_mib << 20
        s, e = self.memory["start"], self.memory["end"]
        grown = e["host_rss"] - s["host_rss"]
        if grown > (256 << 20):
            self.notes.append(f"host memory (RSS) grew by {grown / 2**20:.0f} MiB")
        if "allocated" not in s or margin < 0:
            return None
        flat = True
        for key in ("allocated", "outside_torch"):
            if e[key] - s[key] > margin:
                flat = False
                self.notes.append(f"device memory grew: {key} {s[key] / 2**20:.1f} MiB -> "
                                  f"{e[key] / 2**20:.1f} MiB "
                                  f"(margin {self.args.memory_margin_mib} MiB)")
        return flat

    # -- report
    def totals(self) -> dict:
        t = {"valid": 0, "valid_ok": 0, "invalid": 0, "refused": 0, "declined": 0, "oracle": 0}
        for st in self.stats.values():
            for k in t:
                t[k] += getattr(st, k)
        return t

    def summary(self, elapsed: float) -> dict:
        return {
            "device": self.device, "tensors": self.dev.kind, "seed": self.args.seed,
            "calls": self.calls_done, "requested": self.args.calls, "seconds": round(elapsed, 1),
            "stopped": self.stopped, "totals": self.totals(),
            "ops": {op: {**{k: v for k, v in vars(st).items() if k != "max_err"},
                         "max_err": st.max_err, "seconds": round(st.seconds, 2)}
                    for op, st in self.stats.items()},
            "invalid_kinds": {k: {"calls": v[0], "refused": v[1], "example": v[2]}
                              for k, v in sorted(self.kinds.items())},
            "exceptions": dict(sorted(self.errors.items())),
            "violations": sum(self.violation_counts.values()) + sum(
                1 for v in self.violations if v["kind"] in ("hang", "fault", "generator")),
            "violation_counts": dict(self.violation_counts.most_common()),
            "violation_list": self.violations[:200],
            "memory": self.memory, "memory_flat": self.flat,
            "notes": self.notes,
            "backends": {op: self.backends.for_op(op) for op in OPS},
            "latte_revision": _revision(),
        }

    def write_report(self, elapsed: float) -> None:
        s = self.summary(elapsed)
        text = markdown(s)
        self.log(text)
        if self.args.report:
            path = Path(self.args.report)
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.suffix == ".json":
                path.write_text(json.dumps(s, indent=1, default=str))
            else:
                path.write_text(text)


def _mib(v) -> str:
    return f"{v / 2**20:.1f}" if isinstance(v, (int, float)) else "-"


def markdown(s: dict) -> str:
    t = s["totals"]
    lines = [
        f"## latte soak: {s['calls']} calls on {s['device']} ({s['tensors']} tensors), "
        f"seed {s['seed']}, {s['seconds']} s",
        "",
        f"- valid calls: {t['valid']} (succeeded {t['valid_ok']}, declined by a forced backend "
        f"that does not declare them {t['declined']}); oracle checks: {t['oracle']}",
        f"- invalid calls: {t['invalid']}, refused with a latte error: {t['refused']}",
        f"- violations: {s['violations']}" + (f"; stopped: {s['stopped']}" if s["stopped"] else ""),
        "- backends: " + ", ".join(f"{op} {'/'.join(ids) or '-'}"
                                    for op, ids in s["backends"].items()),
        "",
        "| op | valid | ok | invalid | refused | oracle | max error | violations | s in calls |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for op, st in s["ops"].items():
        errs = ", ".join(f"{k} {v:.2g}" for k, v in sorted(st["max_err"].items())) or "-"
        lines.append(f"| {op} | {st['valid']} | {st['valid_ok']} | {st['invalid']} | "
                     f"{st['refused']} | {st['oracle']} | {errs} | {st['violations']} | "
                     f"{st['seconds']} |")
    lines += ["", "| invalid kind | calls | refused | a refusal |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['calls']} | {v['refused']} | {v['example'][:100].replace('|', '/')} |"
              for k, v in s["invalid_kinds"].items()]
    lines += ["", "Exceptions raised: " + (", ".join(f"{k} {v}" for k, v in
                                                     s["exceptions"].items()) or "none")]
    mem = s["memory"]
    if "start" in mem:
        keys = [k for k in ("allocated", "outside_torch", "used", "host_rss") if k in mem["start"]]
        lines += ["", "| memory (MiB) | start (after warm-up) | end | max |", "|---|---|---|---|"]
        for k in keys:
            lines.append(f"| {k} | {_mib(mem['start'][k])} | {_mib(mem.get('end', {}).get(k))} | "
                         f"{_mib(mem.get('max', {}).get(k))} |")
        lines.append("")
        lines.append("Device memory: `allocated` is torch's; `outside_torch` is the device's used "
                     "memory less torch's reserved pool (latte's per-stream workspaces, kernels, "
                     "the CUDA context). latte keeps one workspace per stream used, the size of "
                     "its largest; the soak uses three streams. Flat: "
                     f"{s['memory_flat']}.")
    for note in s["notes"]:
        lines.append(f"- {note}")
    if s["violation_counts"]:
        lines += ["", "| violations by op / kind | count |", "|---|---|"]
        lines += [f"| {k.replace('|', '/')} | {n} |"
                  for k, n in list(s["violation_counts"].items())[:60]]
    if s["violation_list"]:
        lines += ["", "### Violations (first 20)", ""]
        for v in s["violation_list"][:20]:
            lines.append(f"- call #{v['call']} `{v['op']}` [{v['kind']}] {v['what']}: "
                         f"{v['detail'][:300]}  \n  `{v['args'][:400]}`  \n  `{v['replay']}`")
    return "\n".join(lines)


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _revision() -> str:
    try:
        import subprocess
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=Path(__file__).parent, timeout=5).stdout.strip()
    except Exception:  # noqa: BLE001
        return "unknown"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--tensors", choices=("auto", "numpy", "torch"), default="auto",
                   help="auto: torch on cuda, numpy on cpu")
    p.add_argument("--oracle-every", type=int, default=None,
                   help="check the next cheap valid call every K calls (default 100 on cuda, "
                        "10 on cpu)")
    p.add_argument("--oracle-budget", type=int, default=None,
                   help="largest work (query-head x key pairs) the oracle recomputes")
    p.add_argument("--budget", type=int, default=None,
                   help="largest work per call (default 2^25 on cuda, 20000 on cpu)")
    p.add_argument("--invalid-rate", type=float, default=0.3)
    p.add_argument("--ops", default=",".join(OPS), help="comma-separated ops to call")
    p.add_argument("--kinds", default="", help="comma-separated invalid kinds to make (all)")
    p.add_argument("--exclude-kinds", default="", help="comma-separated invalid kinds to skip")
    p.add_argument("--time-limit", type=float, default=0,
                   help="stop starting calls after this many seconds (reported, not a failure)")
    p.add_argument("--hang-timeout", type=float, default=120.0)
    p.add_argument("--sync-every", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5000,
                   help="calls before the start memory sample (at most a fifth of the calls): "
                        "kernels load and workspaces grow to their size meanwhile")
    p.add_argument("--memory-margin-mib", type=int, default=64,
                   help="device memory growth allowed from the warm-up to the end; < 0: report "
                        "only (under a sanitizer, which keeps freed memory)")
    p.add_argument("--progress-every", type=int, default=10_000)
    p.add_argument("--max-print", type=int, default=20)
    p.add_argument("--report", help="write the summary: FILE.json as JSON, else markdown")
    p.add_argument("--replay", type=int, help="run call I of this seed alone, with the oracle")
    p.add_argument("--start", type=int, default=0,
                   help="begin at call I (calls I .. --calls - 1 of this seed; with --sync-every 1 "
                        "a CUDA fault is pinned to its call)")
    p.add_argument("--list-kinds", action="store_true", help="list the invalid kinds and exit")
    p.add_argument("--known-gaps", action="store_true",
                   help="also make the invalid calls of KNOWN_GAPS (latte does not refuse them "
                        "with a latte error yet: they are reported as violations)")
    a = p.parse_args(argv)
    cuda = a.device == "cuda"
    a.oracle_every = a.oracle_every or (100 if cuda else 10)
    a.oracle_budget = a.oracle_budget or (200_000 if cuda else 20_000)
    a.budget = a.budget or ((1 << 25) if cuda else 20_000)
    a.ops = [o for o in a.ops.split(",") if o]
    a.kinds = [k for k in a.kinds.split(",") if k]
    a.exclude_kinds = [k for k in a.exclude_kinds.split(",") if k]
    unknown = [o for o in a.ops if o not in OPS] + [k for k in a.kinds + a.exclude_kinds
                                                   if k not in CORRUPTIONS]
    if unknown:
        p.error(f"unknown ops or kinds: {unknown}")
    return a


def main(argv=None, ops: Optional[dict] = None, out=sys.stdout) -> int:
    args = parse_args(argv)
    SKIPPED_GAPS.clear()
    if not args.known_gaps:
        SKIPPED_GAPS.update(KNOWN_GAPS)
    if args.list_kinds:
        for name, fn in CORRUPTIONS.items():
            print(f"{name:28s} {' '.join((fn.__doc__ or '').split())}", file=out)
        return 0
    missing = sorted(set(latte.ops.__all__) - set(OPS) - set(NOT_SOAKED))
    if missing:
        print(f"soak.py does not call {missing}: add them to OPS and the generator", file=out)
        return 2
    if args.device == "cuda":
        try:
            import torch
        except ImportError:
            print("--device cuda needs torch", file=out)
            return 2
        if not torch.cuda.is_available() or not latte.built_with_cuda():
            print("--device cuda needs torch.cuda and a latte built with CUDA", file=out)
            return 2
    return Soak(args, ops, out).run()


if __name__ == "__main__":
    sys.exit(main())
