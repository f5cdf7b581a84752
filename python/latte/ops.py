"""latte's operations on caller-owned tensors (include/latte/ops.hpp; docs/operations.md).

Every op takes any DLPack tensor (torch CPU/CUDA tensors, numpy arrays; numpy bfloat16 and
float8 through ml_dtypes) without copying it, selects a backend for the call's shape and device
through the global context (or runs the one ``backend=`` forces), and returns its outputs.

- Outputs are written into the tensors given (``out=``, ``lse=``, ``indices=``, ``logits=``,
  ``slots=``) or allocated like the first input: a torch tensor on the same device, or a numpy
  array.
- CUDA tensors run on their device, on ``stream`` (an int cudaStream_t, a torch.cuda.Stream or
  any object with ``cuda_stream``) or by default torch's current stream of that device. Nothing
  synchronizes the host unless ``check_indices=True`` (which reads the indices first).
- Failures raise the classes of :mod:`latte.errors` with the C++ message.
"""

from __future__ import annotations

import numbers
import operator
from typing import Any, Optional, Tuple, Union

from . import _latte
from ._tensors import empty_like_input, lead_shape
from .errors import ArgumentTypeError, InvalidArgumentError

__all__ = [
    "sparse_mla",
    "mla_decode",
    "indexer_topk",
    "indexer_logits",
    "kv_store",
    "indexer_k_store",
    "logical_to_slots",
    "indexer_pool_store",
]

Tensor = Any  # torch.Tensor, numpy.ndarray or another DLPack producer
Stream = Any  # int cudaStream_t, torch.cuda.Stream, or an object with .cuda_stream / .ptr


# Each op passes the caller's objects straight to the extension, which reads torch tensors
# from their descriptors and everything else through DLPack (_tensors.arg), picks the stream
# and validates in C++: the Python layer only allocates missing outputs (docs/python.md, "Host
# cost of a call").


def _required(op: str, **tensors: Any) -> None:
    # A required tensor given as None is named here, before the extension sees it.
    for name, value in tensors.items():
        if value is None:
            raise ArgumentTypeError(f"{op}: {name} is required (a tensor); got None")


def _real(op: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{op}: {name} must be a real number; got {type(value).__name__} "
                                f"{value!r}")
    try:
        return float(value)
    except OverflowError:
        raise InvalidArgumentError(f"{op}: {name} = {value!r} is beyond a float; pass a value "
                                   f"of float range") from None


# The range of a C int: what the extension's int arguments hold (a larger Python int would reach
# nanobind and fail there with a TypeError instead of latte's error).
_C_INT_MIN, _C_INT_MAX = -2**31, 2**31 - 1


def _int(op: str, name: str, value: Any, low: int, high: int) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError
        v = operator.index(value)
    except TypeError:
        raise ArgumentTypeError(f"{op}: {name} must be an int; got {type(value).__name__} "
                                f"{value!r}") from None
    if not low <= v <= high:
        raise InvalidArgumentError(f"{op}: {name} = {v} is out of range; allowed {low}..{high}")
    return v


def _text(op: str, name: str, value: Any, optional: bool = True) -> Optional[str]:
    if (value is None and optional) or isinstance(value, str):
        return value
    raise ArgumentTypeError(f"{op}: {name} must be a string{' or None' if optional else ''}; got "
                            f"{type(value).__name__} {value!r}")


def _texts(op: str, **values: Any) -> None:
    # backend= / kv_format= / kind= / scale_kind=: strings (or None where optional).
    for name, value in values.items():
        if value is not None and type(value) is not str:
            _text(op, name, value)


def _attention_outputs(q: Tensor, op: str, lead_dims: int, out: Optional[Tensor],
                       lse: Optional[Tensor], return_lse: bool):
    # out [*lead, 512] bf16 and (when asked for) lse [*lead] f32, allocated like q when absent;
    # lead = q's first lead_dims sizes.
    want_lse = return_lse or lse is not None
    if out is None or (want_lse and lse is None):
        lead = lead_shape(q, "q", op, lead_dims)
        if out is None:
            out = empty_like_input(q, (*lead, 512), "bf16", "out")
        if want_lse and lse is None:
            lse = empty_like_input(q, lead, "f32", "lse")
    return out, lse, want_lse


def sparse_mla(
    q: Tensor,
    kv_cache: Tensor,
    indices: Tensor,
    scale: float,
    *,
    kv_format: Optional[str] = None,
    out: Optional[Tensor] = None,
    lse: Optional[Tensor] = None,
    return_lse: bool = False,
    backend: Optional[str] = None,
    stream: Stream = None,
    check_indices: bool = False,
    block_table: Optional[Tensor] = None,
    token_request: Optional[Tensor] = None,
    slots: Optional[Tensor] = None,
    q_rope: Optional[Tensor] = None,
    rope_dim: int = 64,
    topk_lens: Optional[Tensor] = None,
) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Sparse MLA attention over a per-token list of physical cache slots.

    score[t,h,s] = scale * q[t,h] . kv[s] for the slots s in indices[t] (-1 = none);
    out[t,h] = softmax-weighted sum of kv[s][:512]; lse[t,h] = ln sum exp(score) (natural log).
    A row with no valid slot gives out = 0 and lse = -inf (docs/design.md, section 2).

    Args:
        q: [T, H, 576] bfloat16: the absorbed latent query (512) and the rope part (64).
        kv_cache: [num_blocks, block_size, 576] bfloat16, or [num_blocks, block_size, 656]
            uint8 (the fp8_ds_mla layout).
        indices: [T, topk] int32 physical slots (block * block_size + offset), -1 = none.
        scale: the softmax scale (GLM-5: 0.0625).
        kv_format: "bf16" or "fp8_ds_mla"; the cache's dtype and last dim already say which,
            so this only checks that the cache is the one the caller meant. None: no check.
        out: [T, H, 512] bfloat16 to write into; allocated like q when None.
        lse: [T, H] float32 to write the log-sum-exp into (implies return_lse).
        return_lse: also return lse (allocated like q when lse is None).
        backend: force a backend id or glob ("cpu.reference", "cuda.*"); None = the selector.
        stream: the CUDA stream; None = torch's current stream on q's device.
        check_indices: validate every index first (costs a pass and a host sync on CUDA).
        block_table: [B, max_blocks] int32. When given, ``indices`` hold *logical* positions in
            each token's request (what an indexer's top-k gives, -1 = none); latte turns them
            into slots first (:func:`logical_to_slots`, block size = kv_cache's), in the same
            call. ``indices``, ``token_request`` and ``slots`` may then have more rows than q (an
            engine's persistent buffers): their first T rows are used.
        token_request: [T] int32: the block_table row of each token (default: row t); with
            block_table only.
        slots: [T, topk] int32 the slots are written into; with block_table only; allocated like
            indices when None.
        q_rope: [T, H, 64] bfloat16: the query's rope part as a tensor of its own; q is then
            [T, H, 512] (the latent part). Engines that keep the two apart (vLLM's
            ``(ql_nope, q_pe)``) pass both and skip concatenating them.
        rope_dim: 64 (MLA with rope) or 0 (MLA without rope, GLM-5.3-Flash): q is then
            [T, H, 512] with no q_rope, and kv_cache [num_blocks, block_size, 512] bfloat16, or
            uint8 rows of 528 bytes (512 e4m3 + 4 float32 scales) or 656 bytes (the same, then 128
            reserved bytes that are never read). Stated, never inferred from the shapes.
        topk_lens: [T] int32: row t attends to indices[t, :topk_lens[t]] only; the columns past
            it are ignored whatever they hold.

    Returns:
        out, or (out, lse) when return_lse or lse is given.
    """
    if q is None or kv_cache is None or indices is None:
        _required("sparse_mla", q=q, kv_cache=kv_cache, indices=indices)
    if type(scale) is not float:
        scale = _real("sparse_mla", "scale", scale)
    if type(rope_dim) is not int or not _C_INT_MIN <= rope_dim <= _C_INT_MAX:
        rope_dim = _int("sparse_mla", "rope_dim", rope_dim, _C_INT_MIN, _C_INT_MAX)
    if kv_format is not None or backend is not None:
        _texts("sparse_mla", kv_format=kv_format, backend=backend)
    if block_table is None and (token_request is not None or slots is not None):
        raise InvalidArgumentError(
            "sparse_mla: token_request= and slots= go with block_table= (logical positions in "
            "indices); without block_table, indices are cache slots: drop them or pass "
            "block_table")
    if block_table is not None and slots is None:
        lead = lead_shape(q, "q", "sparse_mla", 1)
        topk = lead_shape(indices, "indices", "sparse_mla", 2)[1]
        slots = empty_like_input(indices, (lead[0], topk), "i32", "slots")
    out, lse, want_lse = _attention_outputs(q, "sparse_mla", 2, out, lse, return_lse)
    _latte.sparse_mla(q, kv_cache, indices, out, lse, scale, kv_format, backend or None,
                      stream, check_indices, block_table, token_request, slots, q_rope, rope_dim,
                      topk_lens)
    return (out, lse) if want_lse else out


def mla_decode(
    q: Tensor,
    kv_cache: Tensor,
    block_table: Tensor,
    seq_lens: Tensor,
    scale: float,
    *,
    kv_format: Optional[str] = None,
    out: Optional[Tensor] = None,
    lse: Optional[Tensor] = None,
    return_lse: bool = False,
    backend: Optional[str] = None,
    stream: Stream = None,
    check_indices: bool = False,
) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Dense MLA decode over each request's paged cache, causal, 1..4 query tokens per request.

    Query i of request b sees cache positions 0 .. seq_lens[b] - s_q + i.

    Args:
        q: [B, s_q, H, 576] bfloat16, s_q in 1..4.
        kv_cache: as for :func:`sparse_mla`.
        block_table: [B, max_blocks] int32: the cache blocks of each request, in order.
        seq_lens: [B] int32: tokens in the cache per request, the s_q new ones included.
        scale, kv_format, backend, stream, check_indices: as for :func:`sparse_mla`.
        out: [B, s_q, H, 512] bfloat16; allocated like q when None.
        lse: [B, s_q, H] float32 (implies return_lse).
        return_lse: also return lse.

    Returns:
        out, or (out, lse) when return_lse or lse is given.
    """
    if q is None or kv_cache is None or block_table is None or seq_lens is None:
        _required("mla_decode", q=q, kv_cache=kv_cache, block_table=block_table, seq_lens=seq_lens)
    if type(scale) is not float:
        scale = _real("mla_decode", "scale", scale)
    _texts("mla_decode", kv_format=kv_format, backend=backend)
    out, lse, want_lse = _attention_outputs(q, "mla_decode", 3, out, lse, return_lse)
    _latte.mla_decode(q, kv_cache, block_table, seq_lens, out, lse, scale, kv_format,
                      backend or None, stream, check_indices)
    return (out, lse) if want_lse else out


def indexer_topk(
    q: Tensor,
    weights: Tensor,
    k_cache: Tensor,
    block_table: Tensor,
    visible_lens: Tensor,
    topk: Optional[int] = None,
    *,
    q_scale: Optional[Tensor] = None,
    token_request: Optional[Tensor] = None,
    kind: str = "physical",
    indices: Optional[Tensor] = None,
    backend: Optional[str] = None,
    stream: Stream = None,
    check_indices: bool = False,
    kpool: int = 0,
    pool_topk: int = 0,
    select_tail: bool = False,
    out_lens: Optional[Tensor] = None,
    return_lens: bool = False,
) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """The DSA lightning indexer and exact top-k (docs/design.md, section 4).

    I[t,s] = sum_j weights[t,j] * relu(q[t,j] . k[s]) over the visible positions
    s < visible_lens[t]; returns the topk best per token (ties: the smaller position wins),
    padded with -1 when fewer are visible.

    The pooled indexer (GLM-5.3-Flash, ``kpool`` 4; docs/operations.md, "The pooled indexer"):
    k_cache holds one key per pool of kpool tokens (written by :func:`indexer_pool_store`), only
    complete visible pools are scored, the best ``pool_topk`` pools expand to their kpool tokens
    each (each pool's tokens in order; the order of the pools is the backend's: cpu.reference by
    descending score, the CUDA indexers by ascending pool), then with ``select_tail`` the
    up to kpool - 1 tokens of the incomplete pool follow; the rest of the row is -1.

    Args:
        q: [T, H_i, 128] float8_e4m3fn (with q_scale) or bfloat16.
        weights: [T, H_i] float32 head weights (the softmax scale folded in, not q_scale, which
            latte applies inside the dot: weights that already fold it go with q_scale = ones).
        k_cache: [num_blocks, block_size, 132] uint8 indexer K pages (written by
            :func:`indexer_k_store`); pooled: [num_blocks, block_size / kpool, 132].
        block_table: [B, max_blocks] int32 (the token block table, also when pooled).
        visible_lens: [T] int32: token t sees logical positions 0 .. visible_lens[t]-1.
        topk: columns of the result, an int within the topk limit of docs/operations.md
            (checked before the result is allocated); may be omitted when ``indices`` is given,
            and when pooled (then kpool * pool_topk, + kpool - 1 with select_tail).
        q_scale: [T, H_i] float32, required with an e4m3 q, absent with a bfloat16 q.
        token_request: [T] int32: the block_table row of each token (default: row t).
        kind: "physical" (cache slots, what :func:`sparse_mla` takes) or "logical" (positions).
        indices: [T, topk] int32 to write into; allocated like q when None.
        backend, stream, check_indices: as for :func:`sparse_mla`.
        kpool: tokens per pool, 0 (the per-token indexer) or 2..16.
        pool_topk: pooled: the pools kept per query (GLM-5.3-Flash: 512).
        select_tail: pooled: append the incomplete pool's tokens.
        out_lens: pooled: [T] int32 to write each row's count of valid entries into (what
            :func:`sparse_mla` takes as topk_lens); implies return_lens.
        return_lens: pooled: also return out_lens (allocated like q when None).

    Returns:
        indices [T, topk] int32, or (indices, out_lens) when return_lens or out_lens is given.
    """
    if q is None or weights is None or k_cache is None or block_table is None or visible_lens is None:
        _required("indexer_topk", q=q, weights=weights, k_cache=k_cache, block_table=block_table,
                  visible_lens=visible_lens)
    if type(kind) is not str or backend is not None:
        _texts("indexer_topk", backend=backend)
        _text("indexer_topk", "kind", kind, optional=False)
    if (type(kpool) is not int or type(pool_topk) is not int or not _C_INT_MIN <= kpool <= _C_INT_MAX
            or not _C_INT_MIN <= pool_topk <= _C_INT_MAX):
        kpool = _int("indexer_topk", "kpool", kpool, _C_INT_MIN, _C_INT_MAX)
        pool_topk = _int("indexer_topk", "pool_topk", pool_topk, _C_INT_MIN, _C_INT_MAX)
    if topk is None and indices is None and kpool > 0 and pool_topk > 0:
        topk = kpool * pool_topk + (kpool - 1 if select_tail else 0)
    if topk is not None:
        topk = _latte.check_topk("indexer_topk", topk)  # before it sizes an allocation
    if indices is None:
        if topk is None:
            raise ArgumentTypeError("indexer_topk: pass topk (the columns of the result) or indices=")
        (t,) = lead_shape(q, "q", "indexer_topk", 1)
        indices = empty_like_input(q, (t, topk), "i32", "indices")
    want_lens = return_lens or out_lens is not None
    if want_lens and out_lens is None:
        (t,) = lead_shape(q, "q", "indexer_topk", 1)
        out_lens = empty_like_input(q, (t,), "i32", "out_lens")
    _latte.indexer_topk(q, q_scale, weights, k_cache, block_table, token_request, visible_lens,
                        indices, topk, kind, backend or None, stream, check_indices, kpool, pool_topk,
                        bool(select_tail), out_lens)
    return (indices, out_lens) if want_lens else indices


def indexer_logits(
    q: Tensor,
    weights: Tensor,
    k_cache: Tensor,
    block_table: Tensor,
    visible_lens: Tensor,
    *,
    q_scale: Optional[Tensor] = None,
    token_request: Optional[Tensor] = None,
    logits: Optional[Tensor] = None,
    backend: Optional[str] = None,
    stream: Stream = None,
    check_indices: bool = False,
    kpool: int = 0,
) -> Tensor:
    """The indexer scores themselves: logits[t, s] = I[t, s], -inf where s >= visible_lens[t].

    Arguments as for :func:`indexer_topk`. ``logits``: [T, L] float32 to write into; when None,
    allocated like q with L = max_blocks * block_size (every position the block table maps).
    Pooled (``kpool`` > 0): column p is pool p's score (-inf for incomplete, invisible or missing
    pools), and the default L is max_blocks * k_cache.shape[1] (every pool of the block table).

    Returns:
        logits [T, L] float32.
    """
    if q is None or weights is None or k_cache is None or block_table is None or visible_lens is None:
        _required("indexer_logits", q=q, weights=weights, k_cache=k_cache,
                  block_table=block_table, visible_lens=visible_lens)
    _texts("indexer_logits", backend=backend)
    if type(kpool) is not int or not _C_INT_MIN <= kpool <= _C_INT_MAX:
        kpool = _int("indexer_logits", "kpool", kpool, _C_INT_MIN, _C_INT_MAX)
    if logits is None:
        op = "indexer_logits"
        (t,) = lead_shape(q, "q", op, 1)
        _, max_blocks = lead_shape(block_table, "block_table", op, 2)
        _, block_size = lead_shape(k_cache, "k_cache", op, 2)
        logits = empty_like_input(q, (t, max_blocks * block_size), "f32", "logits")
    _latte.indexer_logits(q, q_scale, weights, k_cache, block_table, token_request, visible_lens,
                          logits, backend or None, stream, check_indices, kpool)
    return logits


def kv_store(
    latent: Tensor,
    rope: Optional[Tensor],
    slot_mapping: Tensor,
    kv_cache: Tensor,
    *,
    scale_kind: str = "amax",
    kv_format: Optional[str] = None,
    backend: Optional[str] = None,
    stream: Stream = None,
    check_indices: bool = False,
    rope_dim: int = 64,
) -> None:
    """Writes each token's latent and rope into the MLA cache at its slot (in place).

    Args:
        latent: [T, 512] bfloat16 (the normalized kv_a latent).
        rope: [T, 64] bfloat16 (the roped k_pe); None with rope_dim=0.
        slot_mapping: [T] int32 physical slots, -1 = skip the token.
        kv_cache: the cache to write: [num_blocks, block_size, 576] bfloat16, or
            [num_blocks, block_size, 656] uint8 (fp8_ds_mla: latent as e4m3 in 4 groups of 128
            with float32 scales, rope as bfloat16).
        scale_kind: fp8_ds_mla group scales: "amax" (amax / 448) or "pow2" (the next power of
            two).
        kv_format, backend, stream, check_indices: as for :func:`sparse_mla`.
        rope_dim: 64, or 0 to write rows without rope (rope None): 512 bfloat16 values, or the
            528 fp8 bytes of a uint8 [.., 528] or [.., 656] cache (a 656-byte row's last 128 bytes
            are left as they are).
    """
    if latent is None or slot_mapping is None or kv_cache is None:
        _required("kv_store", latent=latent, slot_mapping=slot_mapping, kv_cache=kv_cache)
    _text("kv_store", "scale_kind", scale_kind, optional=False)
    _texts("kv_store", kv_format=kv_format, backend=backend)
    if type(rope_dim) is not int or not _C_INT_MIN <= rope_dim <= _C_INT_MAX:
        rope_dim = _int("kv_store", "rope_dim", rope_dim, _C_INT_MIN, _C_INT_MAX)
    _latte.kv_store(latent, rope, slot_mapping, kv_cache, scale_kind, kv_format, backend or None,
                    stream, check_indices, rope_dim)


def indexer_k_store(
    k: Tensor,
    slot_mapping: Tensor,
    k_cache: Tensor,
    *,
    scale_kind: str = "amax",
    backend: Optional[str] = None,
    stream: Stream = None,
    check_indices: bool = False,
) -> None:
    """Quantizes each token's indexer key to e4m3 with one float32 scale and writes it into its
    page of the indexer K cache (in place; docs/design.md, section 6.3 gives the page layout).

    Args:
        k: [T, 128] bfloat16 indexer keys (after rope and the Hadamard rotation).
        slot_mapping: [T] int32 physical slots, -1 = skip.
        k_cache: [num_blocks, block_size, 132] uint8 pages.
        scale_kind, backend, stream, check_indices: as for :func:`kv_store`.
    """
    if k is None or slot_mapping is None or k_cache is None:
        _required("indexer_k_store", k=k, slot_mapping=slot_mapping, k_cache=k_cache)
    _text("indexer_k_store", "scale_kind", scale_kind, optional=False)
    _texts("indexer_k_store", backend=backend)
    _latte.indexer_k_store(k, slot_mapping, k_cache, scale_kind, backend or None, stream,
                           check_indices)


def indexer_pool_store(
    k: Tensor,
    gate: Tensor,
    ape: Tensor,
    positions: Tensor,
    block_table: Tensor,
    k_cache: Tensor,
    pool_state: Tensor,
    *,
    kpool: int,
    token_request: Optional[Tensor] = None,
    scale_kind: str = "amax",
    hadamard: bool = False,
    backend: Optional[str] = None,
    stream: Stream = None,
    check_indices: bool = False,
) -> None:
    """The pooled indexer's keys (GLM-5.3-Flash; docs/operations.md, "indexer_pool_store"), in place.

    Token t at position p = positions[t] of request r = token_request[t] is slot p % kpool of pool
    p // kpool. A token of slot kpool - 1 completes its pool: per dimension d, the key is
    sum_s softmax_s(gate[s, d] + ape[s, d]) * k[s, d] over the pool's tokens (from this call, or
    from pool_state for positions an earlier call held), rounded to bfloat16, optionally rotated
    by the normalized Hadamard-128 matrix, then quantized like an :func:`indexer_k_store` row into
    row (p % bs) // kpool of block block_table[r, p // bs] (bs = kpool * k_cache.shape[1]).
    pool_state keeps each request's (k, gate) by slot for the pools later calls complete.

    Args:
        k: [T, 128] bfloat16 indexer keys as the model gives them (normalized, roped).
        gate: [T, 128] bfloat16 or float32 pooling gates.
        ape: [kpool, 128] float32 or bfloat16 per-slot bias.
        positions: [T] int32 logical positions; negative = skip the token.
        block_table: [B, max_blocks] int32 token block table.
        k_cache: [num_blocks, block_size / kpool, 132] uint8 pool pages, written in place.
        pool_state: [B, kpool - 1, 2, 128] float32 (k and gate of slots 0 .. kpool-2), read and
            written in place; zeros for a new request.
        kpool: tokens per pool, 2..16 (GLM-5.3-Flash: 4).
        token_request: [T] int32 row of block_table and pool_state of each token (default t).
        scale_kind: "amax" or "pow2", as for :func:`indexer_k_store`.
        hadamard: rotate each pool key before quantizing (the caller rotates q alike).
        backend, stream, check_indices: as for :func:`sparse_mla`.
    """
    if (k is None or gate is None or ape is None or positions is None or block_table is None
            or k_cache is None or pool_state is None):
        _required("indexer_pool_store", k=k, gate=gate, ape=ape, positions=positions,
                  block_table=block_table, k_cache=k_cache, pool_state=pool_state)
    _text("indexer_pool_store", "scale_kind", scale_kind, optional=False)
    _texts("indexer_pool_store", backend=backend)
    if type(kpool) is not int or not _C_INT_MIN <= kpool <= _C_INT_MAX:
        kpool = _int("indexer_pool_store", "kpool", kpool, _C_INT_MIN, _C_INT_MAX)
    _latte.indexer_pool_store(k, gate, ape, positions, token_request, block_table, k_cache, pool_state,
                              kpool, scale_kind, bool(hadamard), backend or None, stream, check_indices)


def logical_to_slots(
    positions: Tensor,
    block_table: Tensor,
    block_size: int,
    *,
    token_request: Optional[Tensor] = None,
    slots: Optional[Tensor] = None,
    backend: Optional[str] = None,
    stream: Stream = None,
    check_indices: bool = False,
) -> Tensor:
    """Maps per-request logical positions to physical cache slots through the block table:
    slot = block_table[r, p // block_size] * block_size + p % block_size; -1 stays -1.

    Args:
        positions: [T, K] int32 logical positions, -1 = none.
        block_table: [B, max_blocks] int32.
        block_size: tokens per cache block.
        token_request: [T] int32: the block_table row of each row of positions (default: row t).
        slots: [T, K] int32 to write into; allocated like positions when None.
        backend, stream, check_indices: as for :func:`sparse_mla`.

    Returns:
        slots [T, K] int32.
    """
    if positions is None or block_table is None:
        _required("logical_to_slots", positions=positions, block_table=block_table)
    block_size = _int("logical_to_slots", "block_size", block_size, 1, 2**31 - 1)
    _texts("logical_to_slots", backend=backend)
    if slots is None:
        lead = lead_shape(positions, "positions", "logical_to_slots", 2)
        slots = empty_like_input(positions, lead, "i32", "slots")
    _latte.logical_to_slots(positions, block_table, token_request, slots, block_size,
                            backend or None, stream, check_indices)
    return slots
