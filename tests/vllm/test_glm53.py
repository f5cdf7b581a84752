"""GLM-5.3-Flash (``glm5_next``: MLA without rope, the pooled indexer) through the plugin, on the
CPU against the real vLLM.

latte serves the sparse attention (its pooled indexer op, which replaces vLLM's
``SparseAttnIndexerKpool`` where DeepGEMM is missing, is test_glm53_indexer.py's):
``q`` of 512 latent values (vLLM hands ``(ql_nope, q_pe)`` with an empty ``q_pe``), cache rows
of 512 bf16 values or vLLM's 656-byte ``fp8_ds_mla`` rows of which the first 528 hold the row,
and vLLM's 2176-wide top-k buffer laid out by vLLM's own expansion functions (kept pools in
columns 0..2047, the incomplete pool at 2048..2050, -1 elsewhere).
"""

from __future__ import annotations

import pytest
import torch

import latte
from conftest import latte_impl, paged_batch, reload_plugin, vllm_config
from pooled_reference import hadamard, pool_key, pool_row, pow2_scale

from vllm.config import set_current_vllm_config
from vllm.platforms.interface import DeviceCapability

BLOCK = 64
H = 8  # 64 heads at TP8
SCALE = 256 ** -0.5  # qk_head_dim 256
TOPK, KPOOL = 2048, 4
WIDTH = 2176  # index_topk + index_kpool - 1, rounded up to 128 (vLLM's buffer)
POOLS = TOPK // KPOOL
# (query tokens, tokens in the cache after this step) per request: a short decode (vLLM fills
# every causal position), a long decode whose context is a whole number of pools, a prefill
# chunk of 6 tokens whose rows end with 0..3 tail tokens, and a short decode.
REQUESTS = [(1, 40), (1, 2300), (6, 2100), (1, 130)]
ARCHS = [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)]


def _positions():
    return [(r, p) for r, (q, s) in enumerate(REQUESTS) for p in range(s - q, s)]


def _padded_cache(num_blocks, row, dtype, gen, pad_rows=3):
    # vLLM's per-layer view of a shared allocation, other layers' pages between blocks; random
    # bytes everywhere, so a byte latte must not read cannot pass for a zero.
    raw = torch.randint(0, 256, (num_blocks, (BLOCK + pad_rows) * row * dtype.itemsize),
                        generator=gen, dtype=torch.uint8)
    if dtype == torch.bfloat16:
        raw = torch.randn(num_blocks, (BLOCK + pad_rows) * row, generator=gen).bfloat16()
    return raw[:, :BLOCK * row].view(num_blocks, BLOCK, row)


def _common_metadata(qsl, seq_lens, table):
    from vllm.v1.attention.backend import CommonAttentionMetadata

    slots = [int(table[r, p // BLOCK]) * BLOCK + p % BLOCK for r, p in _positions()]
    return CommonAttentionMetadata(
        query_start_loc=qsl, query_start_loc_cpu=qsl.clone(), seq_lens=seq_lens,
        num_reqs=len(REQUESTS), num_actual_tokens=int(qsl[-1]),
        max_query_len=max(q for q, _ in REQUESTS), max_seq_len=max(s for _, s in REQUESTS),
        block_table_tensor=table, slot_mapping=torch.tensor(slots, dtype=torch.int32),
        seq_lens_cpu_upper_bound=seq_lens.clone())


def _fill_cache(gen, table, kv_cache, scale_kind):
    """Every position of every request holds a token (latte's kv_store with rope_dim 0)."""
    slots = [int(table[r, p // BLOCK]) * BLOCK + p % BLOCK
             for r, (_, s) in enumerate(REQUESTS) for p in range(s)]
    latent = torch.randn(len(slots), 512, generator=gen).bfloat16()
    latte.kv_store(latent, None, torch.tensor(slots, dtype=torch.int32), kv_cache,
                   scale_kind=scale_kind, rope_dim=0)


def _decode_rows(kv_cache):
    """float64 [nb, BLOCK, 512]: the latent values a cache row holds (first 528 bytes of an fp8
    row: 512 e4m3 codes, 4 float32 group scales)."""
    if kv_cache.dtype == torch.bfloat16:
        return kv_cache.double()
    b = kv_cache.contiguous()
    codes = b[..., :512].view(torch.float8_e4m3fn).double()
    scales = b[..., 512:528].contiguous().view(torch.float32).double()
    return (codes.view(*codes.shape[:-1], 4, 128) * scales[..., None]).reshape(*codes.shape)


def _vllm_topk_buffer(gen, max_tokens):
    """vLLM's top-k buffer for this step, made by vLLM's own functions: the causal fill of a
    short row, and for a long one the kept pools expanded to tokens with the incomplete pool
    appended (the torch form of vLLM's fused expansion kernel)."""
    from vllm.models.glm5next.common.sparse_indexer import _fill_causal_indices
    from vllm.models.glm5next.nvidia.ops.kpool_compress import (append_tail_to_topk,
                                                               expand_pools_to_tokens)

    buffer = torch.full((max_tokens, WIDTH), -7, dtype=torch.int32)
    tokens = len(_positions())
    buffer[:tokens] = -1  # vLLM's indexer clears the step's rows first
    for t, (_, p) in enumerate(_positions()):
        visible = p + 1
        if visible <= TOPK:
            _fill_causal_indices(buffer[t:t + 1], torch.tensor([p]))
            continue
        pools = torch.randperm(visible // KPOOL, generator=gen)[:POOLS].to(torch.int32)
        if t == 4:
            pools[-100:] = -1  # fewer kept pools than 512: -1 gaps before the tail
        expanded = expand_pools_to_tokens(pools[None], pools[None] >= 0, TOPK, KPOOL)
        row = append_tail_to_topk(expanded, torch.tensor([visible]),
                                  torch.tensor([visible // KPOOL]), KPOOL)
        buffer[t, :row.shape[1]] = row[0]
    return buffer


def _queries(gen, kv_cache, table):
    """Random queries, except that a token whose own position is in the incomplete pool (a long
    context, position mod 4 != 3) looks at itself with half its heads, so the tail decides its
    answer."""
    rows = _decode_rows(kv_cache)
    q = torch.randn(len(_positions()), H, 512, generator=gen)
    for t, (r, p) in enumerate(_positions()):
        if p + 1 > TOPK and (p + 1) % KPOOL:
            q[t, :H // 2] = 0.5 * rows[int(table[r, p // BLOCK]), p % BLOCK].float()
    return q.bfloat16()


def _reference(q, rows, buffer, table, columns=WIDTH):
    out = torch.zeros(q.shape[0], H, 512, dtype=torch.float64)
    for t, (r, _) in enumerate(_positions()):
        pos = [int(s) for s in buffer[t, :columns] if s >= 0]
        kv = torch.stack([rows[int(table[r, s // BLOCK]), s % BLOCK] for s in pos])
        out[t] = torch.softmax(SCALE * (q[t].double() @ kv.T), dim=-1) @ kv
    return out


def _impl(topk_buffer, kv_cache_dtype, monkeypatch, rope=0):
    return latte_impl(monkeypatch, topk_buffer, kv_cache_dtype, num_heads=H, scale=SCALE, rope=rope,
                      qk_nope_head_dim=256, q_lora_rank=1536)


@pytest.mark.parametrize("kv_cache_dtype,scale_kind", [("auto", "amax"), ("fp8_ds_mla", "amax"),
                                                       ("fp8_ds_mla", "pow2")])
def test_glm53_forward_matches_float64(model_dirs, monkeypatch, kv_cache_dtype, scale_kind):
    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    from latte.integrations.vllm.backend import LatteMLASparseMetadataBuilder

    reload_plugin()
    gen = torch.Generator().manual_seed(11)
    qsl, seq_lens, table, num_blocks = paged_batch(REQUESTS, BLOCK, gen)
    fp8 = kv_cache_dtype == "fp8_ds_mla"
    # vLLM sizes every fp8_ds_mla row at 656 bytes, a model without rope too.
    kv_cache = _padded_cache(num_blocks, 656 if fp8 else 512,
                             torch.uint8 if fp8 else torch.bfloat16, gen)
    before = kv_cache.clone()
    _fill_cache(gen, table, kv_cache, scale_kind)
    if fp8:  # latte writes the first 528 bytes of a row and leaves the rest as it was
        assert torch.equal(kv_cache[..., 528:], before[..., 528:])
    cm = _common_metadata(qsl, seq_lens, table)
    tokens = cm.num_actual_tokens
    config = vllm_config(model_dirs, "glm-5.3-flash", tp=8, kv_cache_dtype=kv_cache_dtype)

    with set_current_vllm_config(config):
        spec = MLAAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=512,
                                dtype=torch.bfloat16, topk_buffer_width=WIDTH)
        builder = LatteMLASparseMetadataBuilder(spec, ["layer.attn"], config, torch.device("cpu"))
        assert builder.topk_tokens == TOPK and builder.slots.shape[1] == WIDTH
        md = builder.build(0, cm)
        buffer = _vllm_topk_buffer(gen, config.scheduler_config.max_num_batched_tokens)
        snapshot = buffer.clone()
        impl = _impl(buffer, kv_cache_dtype, monkeypatch)
        assert impl.rope_dim == 0

        q = _queries(gen, kv_cache, table)
        q_pe = q.new_empty((tokens, H, 0))  # what vLLM hands for a model without rope
        out, lse = impl.forward_mqa((q, q_pe), kv_cache, md, layer=None)
        assert lse is None and out.shape == (tokens, H, 512) and out.dtype == torch.bfloat16
        assert torch.equal(buffer, snapshot)  # the top-k buffer is vLLM's: read, not written

    ref = _reference(q, _decode_rows(kv_cache), buffer, table)
    err = (out.double() - ref).norm() / ref.norm()
    assert err < 8e-3, err
    # The tail columns (2048..2050) carry the incomplete pool, which these queries look at:
    # leaving them out would change the answer by far more than the tolerance.
    no_tail = _reference(q, _decode_rows(kv_cache), buffer, table, columns=TOPK)
    assert (no_tail - ref).norm() / ref.norm() > 0.2
    out2, _ = impl.forward_mqa(q, kv_cache, md, layer=None)  # one [T, H, 512] tensor alike
    assert torch.equal(out, out2)


@pytest.mark.parametrize("cap", ARCHS, ids=lambda c: f"sm_{c[0]}{c[1]}")
@pytest.mark.parametrize("tp", [1, 8])
@pytest.mark.parametrize("kv", ["auto", "fp8_ds_mla"])
def test_glm53_accepted_on_every_arch(model_dirs, cap, tp, kv):
    from test_selection import _validate

    plugin = reload_plugin()
    plugin.register()
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    backend = AttentionBackendEnum["LATTE_MLA_SPARSE"].get_class()
    with set_current_vllm_config(vllm_config(model_dirs, "glm-5.3-flash", tp=tp,
                                             kv_cache_dtype=kv)):
        assert _validate(backend, cap, kv, head_size=512) == []
        # 576 is the head of a model with rope: not this one's.
        assert any("head size 576 does not fit this model" in r
                   for r in _validate(backend, cap, kv, head_size=576))
        assert any("--kv-cache-dtype fp8_ds_mla" in r
                   for r in _validate(backend, cap, "fp8", head_size=512))


def test_glm53_choice_names_the_pooled_indexer_ops(model_dirs):
    from latte.integrations.vllm import backend, choice

    with set_current_vllm_config(vllm_config(model_dirs, "glm-5.3-flash", tp=8,
                                             kv_cache_dtype="fp8_ds_mla")):
        result = backend.layer_choice("fp8_ds_mla", 64, DeviceCapability(8, 9))
    assert result.ok, result.reasons
    assert result.pooled and list(result.selections) == list(choice.POOLED_LAYER_OPS)
    text = result.explain()
    for op in choice.POOLED_LAYER_OPS:
        assert f"[{op}]" in text
    assert "kpool=4" in text  # the pooled indexer's spec
    with set_current_vllm_config(vllm_config(model_dirs, "glm-5", tp=8)):
        glm5 = backend.layer_choice("auto", 64, DeviceCapability(8, 9))
    assert not glm5.pooled and list(glm5.selections) == list(choice.LAYER_OPS)


def test_impl_refuses_other_rope_widths(model_dirs, monkeypatch):
    config = vllm_config(model_dirs, "glm-5.3-flash", tp=8)
    with set_current_vllm_config(config):
        with pytest.raises(NotImplementedError, match="qk_rope_head_dim=32"):
            _impl(torch.zeros(16, WIDTH, dtype=torch.int32), "auto", monkeypatch, rope=32)


MODEL_ARCHS = ("Glm5NextForConditionalGeneration", "Glm5NextForCausalLM", "Glm5NextMTPModel")


@pytest.mark.parametrize("mode, deep_gemm, cap, latte_op", [
    ("auto", False, (8, 9), True), ("auto", False, (12, 0), True), ("auto", True, (9, 0), False),
    ("prefer", True, (9, 0), True), ("prefer", False, (10, 0), False),
    ("auto", False, (8, 0), True)])
def test_glm53_pooled_indexer_through_latte(monkeypatch, mode, deep_gemm, cap, latte_op):
    import vllm.utils.deep_gemm as dg
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.model_executor.models.registry import ModelRegistry

    plugin = reload_plugin()
    monkeypatch.setattr(dg, "has_deep_gemm", lambda: deep_gemm)
    op_registry_oot.pop("SparseAttnIndexerKpool", None)
    vllms = {arch: ModelRegistry.models[arch] for arch in MODEL_ARCHS}
    try:
        text = plugin._pooled_indexer(mode, DeviceCapability(*cap))
        assert "GLM-5.3-Flash (Glm5NextForConditionalGeneration" in text
        assert ("its pooled indexer (pool keys, the tail cache, scores, top-k over pools) runs "
                "through latte" in text) is latte_op
        assert ("SparseAttnIndexerKpool" in op_registry_oot) is latte_op
        if latte_op:
            from latte.integrations.vllm.pooled import LatteSparseAttnIndexerKpool

            assert op_registry_oot["SparseAttnIndexerKpool"] is LatteSparseAttnIndexerKpool
        elif cap[0] == 10:
            assert "packed UE8M0 scales" in text
        else:
            assert "DeepGEMM is installed: the pooled indexer stays vLLM's" in text
        # The op is swapped where vLLM builds it; below sm_89 the model classes are latte's
        # too (their indexer layers rotate the index query with latte's torch code).
        below = latte_op and cap < (8, 9)
        assert ("latte computes it too" in text) is below
        for arch in MODEL_ARCHS:
            module = ModelRegistry.models[arch].module_name
            assert module == ("latte.integrations.vllm.pooled" if below else vllms[arch].module_name)
    finally:
        op_registry_oot.pop("SparseAttnIndexerKpool", None)
        for arch, model in vllms.items():
            ModelRegistry.models[arch] = model


def test_vllm_builds_latte_pooled_indexer_op(monkeypatch):
    """Once registered, vLLM's own constructor call ``SparseAttnIndexerKpool(...)`` (as its
    GLM-5.3-Flash indexer makes it) builds latte's op, which vLLM then calls as its own."""
    import types

    import vllm.utils.deep_gemm as dg
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.models.glm5next.nvidia.sparse_indexer import SparseAttnIndexerKpool

    from latte.integrations.vllm.pooled import LatteSparseAttnIndexerKpool

    plugin = reload_plugin()
    monkeypatch.setattr(dg, "has_deep_gemm", lambda: False)
    op_registry_oot.pop("SparseAttnIndexerKpool", None)
    try:
        plugin._pooled_indexer("auto", DeviceCapability(12, 0))
        cache = types.SimpleNamespace(prefix="p", kv_cache=None)
        op = SparseAttnIndexerKpool(cache, 128, "ue8m0", 2048, 128, 1024, 4096,
                                    torch.zeros(4, WIDTH, dtype=torch.int32), tail_cache=cache)
        assert type(op) is LatteSparseAttnIndexerKpool
        assert op._forward_method == op.forward_latte
    finally:
        op_registry_oot.pop("SparseAttnIndexerKpool", None)


# On sm_8x latte fills vLLM's empty slot with no flag. On sm_90 vLLM's list for head size 512
# starts with FlashInfer's sparse backend, not the 576 list's first: LATTE_VLLM=prefer takes
# that slot too.
@pytest.mark.parametrize("cap, mode, path", [((8, 0), "auto", "HOLE_FILL_PATH"),
                                             ((8, 9), "auto", "HOLE_FILL_PATH"),
                                             ((9, 0), "prefer", "BACKEND_PATH")],
                         ids=["sm_80", "sm_89", "sm_90-prefer"])
@pytest.mark.parametrize("kv", ["auto", "fp8_ds_mla"])
def test_vllm_selects_latte_for_glm53(model_dirs, monkeypatch, clean_overrides, cap, mode, path, kv):
    import vllm.platforms.cuda as cuda
    from vllm.v1.attention.selector import AttentionSelectorConfig

    plugin = reload_plugin()
    monkeypatch.setattr(cuda.CudaPlatform, "get_device_capability",
                        classmethod(lambda cls, device_id=0: DeviceCapability(*cap)))
    plugin._take_slots(mode, DeviceCapability(*cap))
    selector = AttentionSelectorConfig(head_size=512, dtype=torch.bfloat16, kv_cache_dtype=kv,
                                       block_size=64, use_mla=True, use_sparse=True)
    with set_current_vllm_config(vllm_config(model_dirs, "glm-5.3-flash", tp=8,
                                             kv_cache_dtype=kv)):
        chosen = cuda.CudaPlatform.get_attn_backend_cls(None, selector, num_heads=8)
    assert chosen == getattr(plugin, path)


# ---- The pooled indexer cache: vLLM's own pool-key writer against latte's layout ----------

@pytest.fixture(scope="module")
def pool_written(tmp_path_factory):
    """What vLLM's GLM-5.3-Flash pool-key writer and index-query rotation wrote, run on the CPU
    through Triton's interpreter in a process of its own (vllm_pool_writer.py)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path_factory.mktemp("pools") / "pools.pt"
    subprocess.run([sys.executable, str(Path(__file__).with_name("vllm_pool_writer.py")),
                    str(out), "5"], check=True, env=dict(os.environ), capture_output=True,
                   timeout=600)
    return torch.load(out, weights_only=False)


def _pool_key(data, p, rotate=True):
    return pool_key(data["slot_k"][p], data["slot_score"][p], data["ape"], rotate)


def _pool_row(cache, rows, slot):
    codes, scale = pool_row(cache, rows, slot)
    return codes.double(), scale


def test_vllm_pool_pages_are_latte_layout(pool_written):
    d = pool_written
    rotated = unrotated = 0.0
    for p in range(d["loc"].shape[0]):
        codes, scale = _pool_row(d["cache"], d["rows"], d["loc"][p])
        key = codes * scale
        ref = _pool_key(d, p)
        # One power-of-two scale per pool: the smallest with amax / scale <= 448.
        assert scale == pow2_scale(ref)
        rotated = max(rotated, 1 - float(torch.nn.functional.cosine_similarity(key, ref, dim=0)))
        unrotated = max(unrotated, 1 - float(torch.nn.functional.cosine_similarity(
            key, _pool_key(d, p, rotate=False), dim=0)))
    # The rows hold the rotated keys, e4m3-rounded (and some values converted off their nearest
    # code by the interpreter, see the last test).
    assert rotated < 3e-2, rotated
    assert unrotated > 0.3, unrotated  # and not the unrotated ones


def test_latte_pooled_scores_on_vllm_pool_pages(pool_written):
    d = pool_written
    rows, kpool = d["rows"], d["kpool"]
    pools = d["loc"].shape[0]
    tokens, heads = 6, 32
    q = d["q_fp8"].view(tokens, heads, 128)
    gen = torch.Generator().manual_seed(2)
    # vLLM folds the query's scale into the head weights; latte then takes q_scale = 1.
    weights = torch.rand(tokens, heads, generator=gen) * d["q_scale"].view(tokens, heads)
    block_table = d["blocks"][None, :]
    visible = torch.tensor([pools * kpool, pools * kpool - 1, 100, 37, 3, 150], dtype=torch.int32)
    logits = latte.indexer_logits(
        q, weights, d["cache"], block_table, visible, q_scale=torch.ones(tokens, heads),
        token_request=torch.zeros(tokens, dtype=torch.int32), kpool=kpool,
        backend="cpu.reference")
    assert logits.shape == (tokens, block_table.shape[1] * rows)
    keys = torch.stack([_pool_row(d["cache"], rows, d["loc"][p])[0] *
                        _pool_row(d["cache"], rows, d["loc"][p])[1] for p in range(pools)])
    for t in range(tokens):
        complete = int(visible[t]) // kpool
        ref = (torch.relu(q[t].double() @ keys[:complete].T) *
               weights[t].double()[:, None]).sum(0)
        assert torch.allclose(logits[t, :complete].double(), ref, rtol=1e-5, atol=1e-4), t
        assert torch.isinf(logits[t, complete:]).all() and (logits[t, complete:] < 0).all()


def test_latte_pool_store_writes_vllms_pool_pages(pool_written):
    """latte's indexer_pool_store (hadamard, pow2) on the same tokens writes every scale byte as
    vLLM's writer does, and every code alike except where vLLM's kernel, run by Triton's CPU
    interpreter, converts a value to e4m3 off its nearest code: there latte's code is the
    nearer one (the interpreter's conversion is not the GPU's round-to-nearest)."""
    d = pool_written
    rows, kpool = d["rows"], d["kpool"]
    pools = d["loc"].shape[0]
    tokens = pools * kpool
    mine = torch.zeros_like(d["cache"])
    latte.indexer_pool_store(
        d["slot_k"].reshape(tokens, 128), d["slot_score"].reshape(tokens, 128), d["ape"],
        torch.arange(tokens, dtype=torch.int32), d["blocks"][None, :], mine,
        torch.zeros(1, kpool - 1, 2, 128), kpool=kpool,
        token_request=torch.zeros(tokens, dtype=torch.int32), scale_kind="pow2",
        hadamard=True, backend="cpu.reference")
    same = 0
    for p in range(pools):
        theirs, scale = _pool_row(d["cache"], rows, d["loc"][p])
        ours, our_scale = _pool_row(mine, rows, d["loc"][p])
        assert our_scale == scale, p
        exact = _pool_key(d, p) / scale
        differ = ours != theirs
        same += int((~differ).sum())
        assert ((ours - exact).abs() <= (theirs - exact).abs())[differ].all(), p
    assert same >= 0.8 * pools * 128, same


def test_latte_query_rotation_is_vllms(pool_written):
    """latte's ``fwht128_quant_fp8`` (below sm_89) on the queries vLLM's Triton kernel rotated and
    quantized. Triton's CPU interpreter rounds float32 to bf16 by truncation where the GPU rounds
    to nearest, so a row whose bf16 maximum lands on either side of a power-of-two boundary gets
    a scale twice vLLM's: every other row has vLLM's scale, and its codes equal vLLM's save where
    the interpreter's e4m3 conversion is off the nearest code (there latte's is the nearer)."""
    from latte.integrations.vllm import prep

    d = pool_written
    codes, scale = prep.fwht128_quant_fp8(d["queries"])
    assert codes.dtype == torch.float8_e4m3fn and codes.shape == d["q_fp8"].shape
    rotated = (d["queries"].double() @ hadamard()).float() * prep.HADAMARD_128_NORM
    truncated = (rotated.view(torch.int32) & -65536).view(torch.float32)  # the interpreter's bf16

    def pow2(x):
        return torch.exp2(torch.ceil(torch.log2(x.abs().amax(-1, keepdim=True) / 448)))

    assert torch.equal(d["q_scale"], pow2(truncated))  # what the interpreter computed
    same = pow2(rotated.bfloat16().float()) == pow2(truncated)
    assert torch.equal(scale[same], d["q_scale"][same]) and int(same.sum()) >= 0.9 * len(same)
    exact = rotated.bfloat16().double() / scale.double()
    rows = same.squeeze(-1)
    ours, theirs, exact = codes[rows].double(), d["q_fp8"][rows].double(), exact[rows]
    differ = ours != theirs
    assert ((ours - exact).abs() <= (theirs - exact).abs())[differ].all()
    assert int(differ.sum()) <= 0.2 * ours.numel()


def test_prep_indexer_is_vllms_with_latte_rotation():
    from vllm.models.glm5next.common.attention import Indexer

    from latte.integrations.vllm import pooled, prep

    forward = pooled.LattePrepGlm5NextIndexer.forward
    assert forward.__code__ is Indexer.forward.__code__
    assert forward.__globals__["fwht128_quant_fp8"] is prep.fwht128_quant_fp8
    assert Indexer.forward.__globals__["fwht128_quant_fp8"] is not prep.fwht128_quant_fp8
    for cls in pooled.PREP_MODEL_CLASSES.values():
        model = getattr(pooled, cls)
        assert model.__mro__[1].__module__.startswith("vllm.models.glm5next")
