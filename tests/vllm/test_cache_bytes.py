"""Byte compatibility with vLLM's own cache writer, run for real: vLLM's DSA cache-write kernel
(Triton, ``fused_norm_rope``) on the CPU through Triton's interpreter (vllm_cache_writer.py, in
a process of its own), then

- latte reads what vLLM wrote (sparse_mla over the MLA cache, the indexer's scores over the
  indexer cache) and matches float64 computed from the values vLLM stored;
- latte's writers (kv_store, indexer_k_store with power-of-two scales, as vLLM writes them)
  given the same values lay out the same bytes: the same scales and rope bytes, and e4m3 codes
  equal or one step apart (vLLM rounds the float32 value before its bf16 output, latte the bf16
  output), so vLLM's readers read latte's caches as their own.
"""

from __future__ import annotations

import torch

import latte

from byte_checks import ds_mla_rows_match, indexer_pages_match


def _rows(cache, slots, width):
    return cache.reshape(-1, width)[slots.long()]


def test_latte_writes_what_vllm_writes(written):
    slots, block = written["slots"], written["block"]
    mla = torch.zeros_like(written["mla"])
    latte.kv_store(written["kv_c"], written["k_pe"], slots, mla, scale_kind="pow2")
    vllm_mla = written["mla"]
    if written["mla_dtype"] == "auto":
        assert torch.equal(mla, vllm_mla)  # bf16 rows: the same bytes
    else:
        ours, theirs = _rows(mla, slots, 656), _rows(vllm_mla, slots, 656)
        assert ds_mla_rows_match(ours, theirs, written["kv_c"])
        assert (ours[:, :512] == theirs[:, :512]).float().mean() > 0.9
    # Nothing outside the written slots (padding rows between blocks included) was touched.
    untouched = torch.ones(mla.shape[0] * block, dtype=torch.bool)
    untouched[slots.long()] = False
    assert not mla.reshape(-1, mla.shape[-1])[untouched].any()

    idx = torch.zeros_like(written["indexer"])
    latte.indexer_k_store(written["index_k"], slots, idx, scale_kind="pow2")
    assert indexer_pages_match(idx, written["indexer"], block, written["index_k"], slots)


def _decoded_mla(written):
    """float64 [tokens, 576] of vLLM's MLA cache rows at the written slots, decoded by the
    layout as documented (docs/operations.md), independently of latte."""
    rows = _rows(written["mla"], written["slots"], written["mla"].shape[-1])
    if written["mla_dtype"] == "auto":
        return rows.double()
    codes = rows[:, :512].contiguous().view(torch.float8_e4m3fn).double().view(-1, 4, 128)
    scales = rows[:, 512:528].contiguous().view(torch.float32).double()
    rope = rows[:, 528:].contiguous().view(torch.bfloat16).double()
    return torch.cat([(codes * scales[:, :, None]).reshape(-1, 512), rope], dim=-1)


def _decoded_index_keys(written):
    block, slots = written["block"], written["slots"].long()
    pages = written["indexer"].reshape(written["indexer"].shape[0], -1)
    codes = pages[:, :block * 128].contiguous().view(torch.float8_e4m3fn).double()
    scales = pages[:, block * 128:block * 132].contiguous().view(torch.float32).double()
    keys = codes.view(-1, block, 128) * scales[:, :, None]
    return keys.reshape(-1, 128)[slots]


def test_latte_reads_what_vllm_wrote(written):
    gen = torch.Generator().manual_seed(5)
    slots = written["slots"]
    # The bytes hold what vLLM stored: its bf16 outputs, quantized (fp8_ds_mla) as documented.
    kv = _decoded_mla(written)
    stored = torch.cat([written["kv_c"], written["k_pe"]], dim=-1).double()
    assert ((kv - stored).norm() / stored.norm()).item() < (1e-12 if written["mla_dtype"] == "auto"
                                                            else 0.1)

    # Attention of 4 queries over every token vLLM wrote.
    q = torch.randn(4, 8, 576, generator=gen).bfloat16()
    indices = slots[None, :].repeat(4, 1).contiguous()
    out, lse = latte.sparse_mla(q, written["mla"], indices, 0.0625, return_lse=True)
    scores = 0.0625 * torch.einsum("thd,sd->ths", q.double(), kv)
    ref = torch.einsum("ths,sd->thd", torch.softmax(scores, dim=-1), kv[:, :512])
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < 8e-3, err
    assert (lse.double() - torch.logsumexp(scores, dim=-1)).abs().max() < 1e-4

    # The indexer's scores over vLLM's indexer cache: slot s sits at position s of a request
    # whose block table is every block in order.
    block, nb = written["block"], written["indexer"].shape[0]
    table = torch.arange(nb, dtype=torch.int32)[None, :]
    q_i = torch.randn(2, 32, 128, generator=gen).to(torch.float8_e4m3fn)
    weights = torch.rand(2, 32, generator=gen)
    logits = latte.indexer_logits(q_i, weights, written["indexer"], table,
                                  torch.full((2,), nb * block, dtype=torch.int32),
                                  q_scale=torch.ones(2, 32),
                                  token_request=torch.zeros(2, dtype=torch.int32))
    keys = _decoded_index_keys(written)
    ref_scores = (torch.relu(torch.einsum("tjd,sd->tjs", q_i.double(), keys))
                  * weights.double()[:, :, None]).sum(1)
    got = logits[:, slots.long()].double()
    assert ((got - ref_scores).norm() / ref_scores.norm()).item() < 1e-5
