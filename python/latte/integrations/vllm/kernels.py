"""What latte computes for vLLM, on tensors laid out as vLLM lays them out, with no vLLM import.

The vLLM classes in :mod:`latte.integrations.vllm.backend` are thin shells over these
functions, so the same code runs under vLLM (tests/vllm) and on a GPU where vLLM cannot be
installed (tests/python/test_vllm_layout_gpu.py).

vLLM's layouts (vLLM 0.33):

- MLA cache of one layer: ``[num_blocks, block_size, 576]`` bfloat16, or ``[num_blocks,
  block_size, 656]`` uint8 for ``fp8_ds_mla``. A model without rope (GLM-5.3-Flash,
  ``qk_rope_head_dim`` 0): ``[num_blocks, block_size, 512]`` bfloat16, or the same 656-byte
  ``fp8_ds_mla`` rows (vLLM sizes every ``fp8_ds_mla`` row at 656 bytes; its writer fills
  the rope's 128 bytes with zeros), of which latte reads the first 528 (``rope_dim=0``). The block stride may exceed ``block_size`` rows
  (other layers' pages sit between blocks); latte reads the strides, so the cache is passed
  as vLLM binds it.
- Indexer K cache of one layer: ``[num_blocks, block_size, 132]`` uint8, a page being
  ``block_size * 128`` e4m3 codes then ``block_size`` float32 scales (latte's own indexer
  page layout, docs/operations.md).
- The shared top-k buffer: ``[max_tokens, index_topk]`` int32 of *logical* positions in each
  token's request, -1 for none. Attention turns them into cache slots through the block table.
  GLM-5.3-Flash's is wider, ``index_topk + index_kpool - 1`` rounded up to 128 (2176): vLLM's
  pooled indexer writes the kept pools' positions in columns 0..2047 (-1 where fewer pools
  exist), the incomplete pool's positions in 2048..2050 (-1 past them) and leaves -1 after;
  no row length comes with it, so every column is read.
- ``query_start_loc`` ``[num_reqs + 1]`` and ``seq_lens`` ``[num_reqs]`` int32: a request's
  tokens are consecutive, and the last of them sits at position ``seq_lens[r] - 1``.
"""

from __future__ import annotations

from typing import Any, Tuple, Union

from ... import ops

Tensor = Any  # torch.Tensor

KV_LORA_RANK = 512  # the latent part of q and of a cache row


def step_token_tables(query_start_loc: Tensor, seq_lens: Tensor, num_reqs: int, num_tokens: int,
                      token_request: Tensor, visible_lens: Tensor) -> Tuple[Tensor, Tensor]:
    """Per token of a step, the request it belongs to and how many positions it sees.

    Writes ``token_request[:num_tokens]`` (the token's row of the block table) and
    ``visible_lens[:num_tokens]`` (its position in the request plus one: the causal window the
    indexer scores), both int32, with tensor ops only (capturable, no host sync). Returns the
    two ``[:num_tokens]`` views.
    """
    import torch

    req = token_request[:num_tokens]
    vis = visible_lens[:num_tokens]
    if num_tokens == 0:
        return req, vis
    tokens = torch.arange(num_tokens, device=query_start_loc.device, dtype=torch.int32)
    ends = query_start_loc[1:num_reqs + 1]
    # right=True: the first request whose end lies past the token.
    torch.searchsorted(ends, tokens, right=True, out_int32=True, out=req)
    req.clamp_(max=max(num_reqs - 1, 0))  # padding tokens past the last request stay in range
    req_long = req.long()
    # position = seq_len - (end - token): the request's last token is at seq_len - 1.
    torch.add(seq_lens[req_long] - ends[req_long], tokens + 1, out=vis)
    return req, vis


def mqa_query(q: Union[Tensor, Tuple[Tensor, Tensor]]) -> Tuple[Tensor, Tensor]:
    """The query as latte takes it: vLLM hands either one ``[T, H, 576]`` tensor or the pair
    ``(ql_nope [T, H, 512], q_pe [T, H, 64])``, which latte reads as q and q_rope in place
    (no concatenation). A model without rope gets ``(ql_nope [T, H, 512], q_pe [T, H, 0])``
    (or one ``[T, H, 512]`` tensor): the empty rope part is dropped. Returns (q, q_rope or
    None)."""
    if isinstance(q, tuple):
        q_rope = q[1]
        if q_rope is not None and q_rope.shape[-1] == 0:
            q_rope = None
        return q[0], q_rope
    return q, None


def sparse_mla_forward(q: Union[Tensor, Tuple[Tensor, Tensor]], kv_cache: Tensor,
                       topk_logical: Tensor, block_table: Tensor, token_request: Tensor,
                       scale: float, *, slots: Tensor, out: Tensor = None,
                       backend: str = None, rope_dim: int = 64,
                       topk_lens: Tensor = None) -> Tensor:
    """Sparse MLA over vLLM's cache for the first ``T`` tokens (``T`` = q's rows), in one latte
    call: the logical positions of ``topk_logical`` (vLLM's top-k buffer, ``[>=T, topk]``)
    become cache slots in ``slots`` (an int32 ``[>=T, topk]`` buffer the caller keeps) through
    ``block_table`` and ``token_request`` (``[>=T]``), then attention reads those slots.
    ``rope_dim`` is the model's (64, or 0 for GLM-5.3-Flash: q ``[T, H, 512]``, cache rows of 512
    bf16 values or 656-byte fp8_ds_mla rows read as 528). ``topk_lens`` (``[>=T]`` int32,
    optional): row t uses its first ``topk_lens[t]`` columns only.
    Returns ``[T, H, 512]`` bfloat16 (``out`` when given, else allocated like q)."""
    q, q_rope = mqa_query(q)
    if out is None:
        out = q.new_empty((q.shape[0], q.shape[1], KV_LORA_RANK))
    if topk_lens is not None:
        topk_lens = rows(topk_lens, q.shape[0])
    return ops.sparse_mla(q, kv_cache, topk_logical, scale, out=out, backend=backend,
                          block_table=block_table, token_request=token_request, slots=slots,
                          q_rope=q_rope, rope_dim=rope_dim, topk_lens=topk_lens)


def rows(t: Tensor, n: int) -> Tensor:
    """The first ``n`` rows of a persistent buffer (no new view when it has exactly ``n``: on a
    slow host a slice costs as much as a kernel launch)."""
    return t if t.shape[0] == n else t[:n]


def indexer_topk_logical(q_fp8: Tensor, weights: Tensor, k_cache: Tensor, block_table: Tensor,
                         token_request: Tensor, visible_lens: Tensor, *, q_scale: Tensor,
                         topk_out: Tensor, backend: str = None) -> Tensor:
    """The lightning indexer's exact top-k for the ``T`` tokens of ``q_fp8``, as logical positions.

    ``q_fp8`` ``[T, H_i, 128]`` float8_e4m3fn and ``weights`` ``[T, H_i]`` float32 are what vLLM's
    DSA layer hands its indexer (the query's per-token scale is already folded into the
    weights, so ``q_scale`` is ones, ``[>=T, H_i]``); ``k_cache`` is the layer's indexer cache;
    ``token_request`` and ``visible_lens`` are ``[>=T]``. Writes the first ``T`` rows of
    ``topk_out`` (vLLM's top-k buffer, ``[>=T, topk]`` int32) and returns them.
    """
    tokens = q_fp8.shape[0]
    return ops.indexer_topk(q_fp8, weights, k_cache, block_table, rows(visible_lens, tokens),
                            q_scale=rows(q_scale, tokens), token_request=rows(token_request, tokens),
                            kind="logical", indices=rows(topk_out, tokens), backend=backend)


def pooled_indexer_step(q_fp8: Tensor, weights: Tensor, k: Tensor, gate: Tensor, ape: Tensor,
                        positions: Tensor, tail_slots: Tensor, block_table: Tensor,
                        k_cache: Tensor, tail_cache: Tensor, *, kpool: int, pool_topk: int,
                        q_scale: Tensor, topk_out: Tensor, write: bool = True,
                        backend: str = None) -> Tensor:
    """GLM-5.3-Flash's pooled indexer for the ``T`` tokens of ``tail_slots``, on vLLM's caches:
    what vLLM's ``SparseAttnIndexerKpool`` computes, in latte's ops.

    - ``tail_cache`` ``[blocks, 2, ring, 128]`` bfloat16 is vLLM's tail cache: one block per
      request, slot ``pos % ring`` holding a token's raw key (``[:, 0]``) and gate (``[:, 1]``);
      ``tail_slots[t]`` = ``block * ring + pos % ring`` of token t's request (-1: the token has
      no request, as in vLLM's padding requests, and is skipped). Tokens of one request are
      consecutive, so a new block in ``tail_slots`` starts the next request (row of
      ``block_table``, the indexer's token block table).
    - ``write``: the pools this step completes are written to ``k_cache`` (latte's
      ``indexer_pool_store``, Hadamard rotation and power-of-two scales, as vLLM writes them),
      the earlier tokens of a pool coming from the tail cache, and each request's last ``ring``
      tokens are stashed in its tail block for the steps after. The state is read before
      anything is stashed, so a call may complete pools and start new ones.
    - Then ``indexer_topk`` over the pools: the best ``pool_topk`` complete pools expanded to
      their tokens, then the incomplete pool's tokens, -1 after (logical positions), into the
      first ``T`` rows of ``topk_out``.

    ``q_fp8`` ``[>=T, H, 128]`` e4m3 (rotated like the keys; its scale folded into ``weights``,
    so ``q_scale`` is ones), ``k`` / ``gate`` ``[>=T, 128]`` bfloat16, ``ape`` ``[kpool, 128]``,
    ``positions`` ``[>=T]``. Tensor ops only: no host sync. Returns the ``T`` rows written."""
    import torch

    tokens = tail_slots.shape[0]
    rows_out = rows(topk_out, tokens)
    if tokens == 0:
        return rows_out
    ring = tail_cache.shape[2]
    slots = tail_slots.long()
    live = slots >= 0
    tail_block = torch.div(slots, ring, rounding_mode="floor")
    new_request = torch.ones_like(live)
    new_request[1:] = tail_block[1:] != tail_block[:-1]
    token_request = (torch.cumsum(new_request, 0, dtype=torch.int32) - 1)
    k, gate = rows(k, tokens), rows(gate, tokens)
    pos = rows(positions, tokens).to(torch.int32)
    pos = torch.where(live, pos, torch.full_like(pos, -1))  # no request: skipped by every op
    if write:
        requests = block_table.shape[0]
        req = token_request.long()
        # Each request's state: the slots of the pool its first token falls in, from its ring.
        first = torch.zeros(requests, dtype=torch.int32, device=pos.device).scatter_reduce_(
            0, req, pos, "amin", include_self=False)
        block = torch.zeros(requests, dtype=torch.int64, device=pos.device).scatter_reduce_(
            0, req, tail_block.clamp(min=0), "amax", include_self=False)
        state_pos = (torch.div(first.clamp(min=0), kpool, rounding_mode="floor") * kpool)[:, None] \
            + torch.arange(kpool - 1, device=pos.device)
        pool_state = tail_cache[block[:, None], :, state_pos % ring].float()  # [B, kpool-1, 2, 128]
        ops.indexer_pool_store(k, gate, ape, pos, block_table,
                               k_cache, pool_state, kpool=kpool, token_request=token_request,
                               scale_kind="pow2", hadamard=True, backend=backend)
        # Stash each request's last `ring` tokens (one per ring slot, so no two writes collide).
        # A skipped token rewrites slot 0 of block 0 with its own bytes: vLLM's null block,
        # which no live request owns, is left as it was, with no host-side filtering.
        ahead = torch.full_like(tail_block, -1)
        ahead[:-ring] = tail_block[ring:]
        stash = live & (ahead != tail_block)
        values = torch.stack((k, gate), 1).to(tail_cache.dtype)
        dst_block = torch.where(stash, tail_block, torch.zeros_like(tail_block))
        dst_slot = torch.where(stash, slots % ring, torch.zeros_like(slots))
        keep = tail_cache[dst_block, :, dst_slot]
        tail_cache[dst_block, :, dst_slot] = torch.where(stash[:, None, None], values, keep)
    return ops.indexer_topk(
        rows(q_fp8, tokens), rows(weights, tokens), k_cache, block_table, pos + 1,
        q_scale=rows(q_scale, tokens), token_request=token_request, kind="logical",
        indices=rows_out, kpool=kpool, pool_topk=pool_topk, select_tail=True, backend=backend)
