"""The adapter's step on the CPU (latte's ``cpu.reference``), through vLLM's own objects: the
metadata builder fed a real ``CommonAttentionMetadata``, the indexer step under a real forward
context, and the impl's ``forward_mqa``, over a mixed batch (decodes + a prefill chunk with
context) on caches laid out as vLLM binds them (padded block stride), for both cache formats,
against a float64 reference written here."""

from __future__ import annotations

import types

import pytest
import torch

import latte
from conftest import latte_impl, paged_batch, reload_plugin, vllm_config

from vllm.config import set_current_vllm_config

BLOCK = 64
H, H_I, TOPK = 8, 32, 2048  # GLM-5 at TP8
SCALE = 0.0625
# (query tokens, tokens in the cache after this step) per request: two decodes (one longer than
# topk, so the top-k really selects), a prefill chunk of 6 tokens after 2094 cached ones, and one
# more decode.
REQUESTS = [(1, 40), (1, 2300), (6, 2100), (1, 130)]


def _padded_cache(num_blocks, row, dtype, pad_rows=3):
    # vLLM's per-layer view of a shared allocation: other layers' pages between blocks.
    raw = torch.zeros(num_blocks, (BLOCK + pad_rows) * row, dtype=dtype)
    return raw[:, :BLOCK * row].view(num_blocks, BLOCK, row)


def _common_metadata(qsl, seq_lens, table):
    from vllm.v1.attention.backend import CommonAttentionMetadata

    num_tokens = int(qsl[-1])
    # The new tokens' slots (what vLLM's slot_mapping holds).
    slots = []
    for r, (q, s) in enumerate(REQUESTS):
        for p in range(s - q, s):
            slots.append(int(table[r, p // BLOCK]) * BLOCK + p % BLOCK)
    return CommonAttentionMetadata(
        query_start_loc=qsl, query_start_loc_cpu=qsl.clone(), seq_lens=seq_lens,
        num_reqs=len(REQUESTS), num_actual_tokens=num_tokens,
        max_query_len=max(q for q, _ in REQUESTS), max_seq_len=max(s for _, s in REQUESTS),
        block_table_tensor=table, slot_mapping=torch.tensor(slots, dtype=torch.int32),
        seq_lens_cpu_upper_bound=seq_lens.clone())


def _fill_caches(gen, table, kv_cache, k_cache, scale_kind):
    # Every position of every request holds a token: latte's own cache writers put them there.
    latent, rope, idx_k, slots = [], [], [], []
    for r, (_, s) in enumerate(REQUESTS):
        for p in range(s):
            slots.append(int(table[r, p // BLOCK]) * BLOCK + p % BLOCK)
    n = len(slots)
    latent = torch.randn(n, 512, generator=gen).bfloat16()
    rope = torch.randn(n, 64, generator=gen).bfloat16()
    idx_k = torch.randn(n, 128, generator=gen).bfloat16()
    slot_t = torch.tensor(slots, dtype=torch.int32)
    latte.kv_store(latent, rope, slot_t, kv_cache, scale_kind=scale_kind)
    latte.indexer_k_store(idx_k, slot_t, k_cache, scale_kind="pow2")


def _decode_rows(kv_cache):
    """float64 [nb, BLOCK, 576] of what the cache holds (the reference's own decoding)."""
    if kv_cache.dtype == torch.bfloat16:
        return kv_cache.double()
    b = kv_cache.contiguous()
    codes = b[..., :512].view(torch.float8_e4m3fn).double()
    scales = b[..., 512:528].contiguous().view(torch.float32).double()  # [nb, BLOCK, 4]
    latent = (codes.view(*codes.shape[:-1], 4, 128) * scales[..., None]).reshape(*codes.shape)
    rope = b[..., 528:656].contiguous().view(torch.bfloat16).double()
    return torch.cat([latent, rope], dim=-1)


def _decode_index_keys(k_cache):
    nb = k_cache.shape[0]
    page = k_cache.reshape(nb, -1) if k_cache.is_contiguous() else \
        torch.stack([k_cache[b].reshape(-1) for b in range(nb)])
    codes = page[:, :BLOCK * 128].contiguous().view(torch.float8_e4m3fn).double()
    scales = page[:, BLOCK * 128:BLOCK * 132].contiguous().view(torch.float32).double()
    return codes.view(nb, BLOCK, 128) * scales[..., None]


def _positions():
    return [(r, p) for r, (q, s) in enumerate(REQUESTS) for p in range(s - q, s)]


def _reference_topk(q_fp8, weights, keys, table):
    q = q_fp8.double()
    out = torch.full((len(_positions()), TOPK), -1, dtype=torch.int64)
    for t, (r, p) in enumerate(_positions()):
        rows = torch.stack([keys[int(table[r, s // BLOCK]), s % BLOCK] for s in range(p + 1)])
        scores = (torch.relu(q[t] @ rows.T) * weights[t].double()[:, None]).sum(0)
        order = sorted(range(p + 1), key=lambda s: (-float(scores[s]), s))[:TOPK]
        out[t, :len(order)] = torch.tensor(order)
    return out


def _reference_attention(q, rows, topk, table):
    out = torch.zeros(q.shape[0], H, 512, dtype=torch.float64)
    for t, (r, _) in enumerate(_positions()):
        pos = [int(s) for s in topk[t] if s >= 0]
        kv = torch.stack([rows[int(table[r, s // BLOCK]), s % BLOCK] for s in pos])
        scores = SCALE * (q[t].double() @ kv.T)
        out[t] = torch.softmax(scores, dim=-1) @ kv[:, :512]
    return out


def _impl(topk_buffer, kv_cache_dtype, monkeypatch):
    return latte_impl(monkeypatch, topk_buffer, kv_cache_dtype, num_heads=H, scale=SCALE, rope=64,
                      qk_nope_head_dim=192, q_lora_rank=2048)


@pytest.mark.parametrize("kv_cache_dtype,scale_kind", [("auto", "amax"), ("fp8_ds_mla", "amax"),
                                                       ("fp8_ds_mla", "pow2")])
def test_mixed_batch_step_matches_float64(model_dirs, monkeypatch, kv_cache_dtype, scale_kind):
    from vllm.forward_context import set_forward_context
    from vllm.v1.attention.backends.mla.indexer import DeepseekV32IndexerMetadata
    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    from latte.integrations.vllm import indexer
    from latte.integrations.vllm.backend import LatteMLASparseMetadataBuilder

    reload_plugin()
    gen = torch.Generator().manual_seed(7)
    qsl, seq_lens, table, num_blocks = paged_batch(REQUESTS, BLOCK, gen)
    fp8 = kv_cache_dtype == "fp8_ds_mla"
    kv_cache = _padded_cache(num_blocks, 656 if fp8 else 576, torch.uint8 if fp8 else torch.bfloat16)
    k_cache = _padded_cache(num_blocks, 132, torch.uint8, pad_rows=4)
    _fill_caches(gen, table, kv_cache, k_cache, scale_kind)
    cm = _common_metadata(qsl, seq_lens, table)
    tokens = cm.num_actual_tokens
    config = vllm_config(model_dirs, "glm-5", tp=8, kv_cache_dtype=kv_cache_dtype)

    with set_current_vllm_config(config):
        spec = MLAAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=576,
                                dtype=torch.bfloat16)
        builder = LatteMLASparseMetadataBuilder(spec, ["layer.attn"], config, torch.device("cpu"))
        md = builder.build(0, cm)
        # The builder's per-token tables.
        expect_req = [r for r, _ in _positions()]
        assert md.req_id_per_token.tolist() == expect_req
        assert md.visible_lens[:tokens].tolist() == [p + 1 for _, p in _positions()]
        assert (md.num_decodes, md.num_prefills, md.num_decode_tokens) == (2, 2, 2)

        topk_buffer = torch.full((config.scheduler_config.max_num_batched_tokens, TOPK), -7,
                                 dtype=torch.int32)
        impl = _impl(topk_buffer, kv_cache_dtype, monkeypatch)

        # The indexer step, as LatteDeepseekV32Attention runs it under vLLM's forward context.
        q_fp8 = (torch.randn(tokens, H_I, 128, generator=gen) * 2).to(torch.float8_e4m3fn)
        weights = torch.rand(tokens, H_I, generator=gen)
        index_md = DeepseekV32IndexerMetadata(
            seq_lens=seq_lens, max_seq_len=int(seq_lens.max()), slot_mapping=cm.slot_mapping,
            num_decodes=2, num_decode_tokens=2, num_prefills=2, num_prefill_tokens=tokens - 2,
            block_table=table)
        layer = types.SimpleNamespace(
            layer_name="layer.attn", topk_indices_buffer=topk_buffer,
            indexer=types.SimpleNamespace(
                topk_tokens=TOPK,
                k_cache=types.SimpleNamespace(prefix="layer.indexer.k_cache", kv_cache=k_cache)))
        positions = torch.tensor([p for _, p in _positions()], dtype=torch.int64)
        with set_forward_context({"layer.attn": md, "layer.indexer.k_cache": index_md}, config):
            assert indexer.run_indexer(layer, q_fp8, weights, positions)
        with set_forward_context(None, config):  # vLLM's profiling run: nothing to do
            assert not indexer.run_indexer(layer, q_fp8, weights, positions)

        ref_topk = _reference_topk(q_fp8, weights, _decode_index_keys(k_cache), table)
        assert torch.equal(topk_buffer[:tokens].long(), ref_topk)
        assert (topk_buffer[tokens:] == -7).all()  # rows past the step untouched

        # Attention: vLLM hands (ql_nope, q_pe) on the bf16 path.
        q = torch.randn(tokens, H, 576, generator=gen).bfloat16()
        out, lse = impl.forward_mqa((q[..., :512], q[..., 512:]), kv_cache, md, layer=None)
        assert lse is None and out.shape == (tokens, H, 512) and out.dtype == torch.bfloat16
        ref = _reference_attention(q, _decode_rows(kv_cache), ref_topk, table)
        err = (out.double() - ref).norm() / ref.norm()
        assert err < 8e-3, err
        out2, _ = impl.forward_mqa(q, kv_cache, md, layer=None)  # one [T, H, 576] tensor alike
        assert torch.equal(out, out2)


def test_impl_refuses_what_it_cannot_serve(model_dirs, monkeypatch):
    from latte.integrations.vllm.backend import LatteMLASparseImpl

    config = vllm_config(model_dirs, "glm-5", tp=8)
    buffer = torch.zeros(16, TOPK, dtype=torch.int32)
    with set_current_vllm_config(config):
        with pytest.raises(NotImplementedError, match="--kv-cache-dtype fp8_ds_mla"):
            _impl(buffer, "fp8", monkeypatch)
        with pytest.raises(NotImplementedError, match="sliding"):
            LatteMLASparseImpl(num_heads=H, head_size=576, scale=SCALE, num_kv_heads=1,
                               alibi_slopes=None, sliding_window=128, kv_cache_dtype="auto",
                               logits_soft_cap=None, attn_type="decoder",
                               kv_sharing_target_layer_name=None)
        with pytest.raises(NotImplementedError, match="top-k buffer"):
            _impl(None, "auto", monkeypatch)
