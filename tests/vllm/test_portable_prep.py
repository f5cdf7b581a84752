"""latte's versions of vLLM's DSA step preparation (latte.integrations.vllm.prep), which take the
place of vLLM's Triton ``fused_norm_rope`` / ``fused_q`` below sm_89, against vLLM's own kernels
run on the same inputs (Triton's interpreter, the ``written`` fixture), and how the DSA model
class picks them.

Every output of vLLM's is matched: float values to one bf16 unit (the interpreter truncates
where the GPU rounds), e4m3 codes to one step, scales and the top-k reset exactly; the caches'
bytes outside the written slots stay untouched."""

from __future__ import annotations

import inspect

import pytest
import torch

from byte_checks import bf16_ulp_apart, ds_mla_rows_match, e4m3_step_apart, indexer_pages_match

from latte.integrations.vllm import prep


def _fresh(value):
    return value.clone() if torch.is_tensor(value) else value


def _rows(cache, slots, width):
    return cache.reshape(-1, width)[slots.long()]


def test_norm_rope_store_matches_vllm(written):
    args = [_fresh(a) for a in written["inputs"]["norm_args"]]
    kwargs = {k: _fresh(v) for k, v in written["inputs"]["norm_kwargs"].items()}
    q_c = prep.fused_norm_rope(*args, **kwargs)

    assert bf16_ulp_apart(q_c, written["q_c"])
    assert bf16_ulp_apart(kwargs["kv_c_out"], written["kv_c"])
    assert bf16_ulp_apart(kwargs["k_pe_out"], written["k_pe"])
    assert bf16_ulp_apart(kwargs["index_k_out"], written["index_k"])
    assert torch.equal(args[-1], written["topk"])  # the top-k buffer reset to -1
    assert (args[-1] == -1).all()

    slots, block = written["slots"], written["block"]
    mla, theirs_mla = kwargs["mla_kv_cache"], written["mla"]
    width = mla.shape[-1]
    ours, theirs = _rows(mla.contiguous(), slots, width), _rows(theirs_mla, slots, width)
    if written["mla_dtype"] == "auto":
        assert bf16_ulp_apart(ours, theirs)
    else:
        assert ds_mla_rows_match(ours, theirs, kwargs["kv_c_out"])
    untouched = torch.ones(mla.shape[0] * block, dtype=torch.bool)
    untouched[slots.long()] = False
    assert not mla.contiguous().reshape(-1, width)[untouched].view(torch.uint8).any()

    assert indexer_pages_match(kwargs["indexer_k_cache"], written["indexer"], block,
                               kwargs["index_k_out"], slots)


@pytest.mark.parametrize("quantize_mqa", [False, True])
def test_query_prep_matches_vllm(written, quantize_mqa):
    ours = prep.fused_q(*written["inputs"]["q_args"], **written["inputs"]["q_kwargs"],
                        quantize_mqa=quantize_mqa)
    theirs = written["q_results"][quantize_mqa]
    index_q, weights, mqa_q = ours
    assert index_q.dtype == torch.float8_e4m3fn and index_q.shape == theirs[0].shape
    assert e4m3_step_apart(index_q, theirs[0])
    # The weights carry the power-of-two scale of each (token, head) row: equal scales, so the
    # weights agree to float32 rounding.
    torch.testing.assert_close(weights, theirs[1], rtol=1e-6, atol=0)
    assert mqa_q.dtype == theirs[2].dtype and mqa_q.shape == theirs[2].shape
    if quantize_mqa:
        assert e4m3_step_apart(mqa_q, theirs[2])
    else:
        assert bf16_ulp_apart(mqa_q, theirs[2])


def test_one_graph_under_torch_compile(written):
    """vLLM compiles the layer's forward: the two steps trace as opaque ops in one graph (no
    graph break, no fp8 code generated for them), mutations of the caches and buffers kept."""
    def step(norm_args, norm_kwargs, q_args, q_kwargs):
        q_c = prep.fused_norm_rope(*norm_args, **norm_kwargs)
        return (q_c,) + prep.fused_q(*q_args, **q_kwargs, quantize_mqa=False)

    def call(fn):
        args = [_fresh(a) for a in written["inputs"]["norm_args"]]
        kwargs = {k: _fresh(v) for k, v in written["inputs"]["norm_kwargs"].items()}
        q_c, index_q, weights, mqa_q = fn(args, kwargs, written["inputs"]["q_args"],
                                          written["inputs"]["q_kwargs"])
        return [q_c, kwargs["mla_kv_cache"], kwargs["indexer_k_cache"], args[-1],
                index_q.view(torch.uint8), weights, mqa_q]

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    for got, want in zip(call(compiled), call(step)):
        assert torch.equal(got, want)


def test_layer_without_indexer():
    tokens = 3
    positions = torch.arange(tokens)
    cos_sin = torch.cat([torch.ones(8, 32), torch.zeros(8, 32)], dim=-1)  # rope = identity
    q_c = torch.randn(tokens, 64).bfloat16()
    kv_c = torch.randn(tokens, 512).bfloat16()
    k_pe = torch.randn(tokens, 64).bfloat16()
    topk = torch.full((tokens, 16), 7, dtype=torch.int32)
    out = prep.fused_norm_rope(positions, q_c, torch.ones(64), 1e-6, kv_c, torch.ones(512), 1e-6,
                               k_pe, cos_sin, None, None, None, 1e-6, None, topk,
                               has_indexer=False)
    ref = q_c.float() * torch.rsqrt(q_c.float().square().mean(-1, keepdim=True) + 1e-6)
    assert bf16_ulp_apart(out, ref)
    assert (topk == 7).all()  # a layer that reuses another layer's top-k leaves it alone
    index_q, weights, mqa_q = prep.fused_q(
        positions, torch.randn(tokens, 4, 64).bfloat16(), cos_sin, None, None,
        torch.randn(tokens, 4, 512).bfloat16(), torch.ones(1), None, 1.0, 1.0,
        has_indexer=False, quantize_mqa=False)
    assert mqa_q.shape == (tokens, 4, 64)


def test_refuses_what_it_does_not_write():
    t = torch.zeros(1, dtype=torch.int64)
    with pytest.raises(NotImplementedError, match="fp8_ds_mla or auto"):
        prep.fused_norm_rope(t, torch.zeros(1, 8), torch.ones(8), 1e-6, torch.zeros(1, 512),
                             torch.ones(512), 1e-6, torch.zeros(1, 64), torch.zeros(2, 64), None,
                             None, None, 1e-6, None, torch.zeros(1, 4, dtype=torch.int32),
                             slot_mapping=t, mla_kv_cache=torch.zeros(1, 1, 576, dtype=torch.uint8),
                             mla_kv_cache_dtype="fp8", has_indexer=False)


def test_signatures_take_vllms_keywords():
    """Every keyword vLLM's functions take is taken by latte's, with the same default, so the
    DSA layer's own calls bind unchanged."""
    from vllm.models.deepseek_v32.common import kernels as vllm_kernels

    for name in ("fused_norm_rope", "fused_q"):
        theirs = inspect.signature(getattr(vllm_kernels, name)).parameters
        ours = inspect.signature(getattr(prep, name)).parameters
        assert len(ours) == len(theirs), name
        for (their_name, their), (our_name, our) in zip(theirs.items(), ours.items()):
            if their.default is inspect.Parameter.empty:
                assert our.default is inspect.Parameter.empty, (name, our_name)
            else:  # keyword arguments: same name, same default
                assert (our_name, our.default) == (their_name, their.default), name


@pytest.mark.parametrize("capability,portable", [((8, 0), True), ((8, 6), True),
                                                 ((8, 9), False), ((9, 0), False),
                                                 ((12, 0), False)])
def test_model_layers_take_latte_prep_below_sm89(capability, portable):
    from vllm.models.deepseek_v32.attention import DeepseekV32Attention

    from latte.integrations.vllm import indexer

    assert prep.needs_portable_prep(capability) is portable
    cls = indexer.attention_class(capability)
    assert issubclass(cls, indexer.LatteDeepseekV32Attention)
    forward_globals = cls.forward.__globals__
    if portable:
        assert forward_globals["fused_norm_rope"] is prep.fused_norm_rope
        assert forward_globals["fused_q"] is prep.fused_q
        # vLLM's own forward, only its two Triton helpers bound to latte's.
        assert cls.forward.__code__ is DeepseekV32Attention.forward.__code__
    else:
        assert cls.forward is DeepseekV32Attention.forward
