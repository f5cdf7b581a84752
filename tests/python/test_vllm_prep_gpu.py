"""latte's version of vLLM's DSA step preparation (latte.integrations.vllm.prep: what runs in
place of vLLM's Triton ``fused_norm_rope`` / ``fused_q`` below sm_89) on a GPU: the same
functions on CUDA tensors laid out as vLLM lays them out, against their own run on CPU copies
(the oracle's cache writers), and captured in a CUDA graph. tests/vllm checks them against
vLLM's own kernels, on the CPU.
"""

from __future__ import annotations

import pytest
from gpu_only import cuda_torch

torch = cuda_torch()

from latte.integrations.vllm import prep  # noqa: E402

BLOCK, NUM_BLOCKS, TOKENS, HEADS, INDEX_HEADS = 64, 5, 96, 16, 32


def _padded(row, dtype, device):
    raw = torch.zeros(NUM_BLOCKS, (BLOCK + 4) * row, dtype=dtype, device=device)
    return raw[:, :BLOCK * row].view(NUM_BLOCKS, BLOCK, row)


def _inputs(fp8: bool, interleave: bool, device):
    gen = torch.Generator().manual_seed(11)
    slots = torch.randperm(NUM_BLOCKS * BLOCK, generator=gen)[:TOKENS]
    slots[::7] = -1  # padding tokens: not written
    positions = torch.randint(0, 8000, (TOKENS,), generator=gen)
    mag = torch.exp2(torch.randint(-6, 6, (TOKENS, 1), generator=gen).float())
    angles = torch.rand(8192, 32, generator=gen) * 6
    cos_sin = torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)
    norm_args = [positions, torch.randn(TOKENS, 1536, generator=gen).bfloat16(),
                 (torch.rand(1536, generator=gen) + 0.5).bfloat16(), 1e-6,
                 (torch.randn(TOKENS, 512, generator=gen) * mag).bfloat16(),
                 (torch.rand(512, generator=gen) + 0.5).bfloat16(), 1e-6,
                 torch.randn(TOKENS, 64, generator=gen).bfloat16(), cos_sin,
                 (torch.randn(TOKENS, 128, generator=gen) * mag).bfloat16(),
                 torch.rand(128, generator=gen) + 0.5, torch.randn(128, generator=gen) * 0.1,
                 1e-6, cos_sin, torch.zeros(TOKENS + 8, 2048, dtype=torch.int32)]
    norm_kwargs = dict(slot_mapping=slots,
                       indexer_k_cache=_padded(132, torch.uint8, "cpu"),
                       mla_kv_cache=_padded(656 if fp8 else 576,
                                            torch.uint8 if fp8 else torch.bfloat16, "cpu"),
                       mla_kv_cache_dtype="fp8_ds_mla" if fp8 else "auto",
                       kv_c_out=torch.empty(TOKENS, 512).bfloat16(),
                       k_pe_out=torch.empty(TOKENS, 64).bfloat16(),
                       index_k_out=torch.empty(TOKENS, 128).bfloat16(),
                       index_rope_interleave=interleave)
    q_args = [positions, torch.randn(TOKENS, HEADS, 64, generator=gen).bfloat16(), cos_sin,
              (torch.randn(TOKENS, INDEX_HEADS, 128, generator=gen) * mag[:, :, None]).bfloat16(),
              cos_sin, torch.randn(TOKENS, HEADS, 512, generator=gen).bfloat16(),
              torch.tensor([0.5]), torch.randn(TOKENS, INDEX_HEADS, generator=gen).bfloat16(),
              128 ** -0.5, INDEX_HEADS ** -0.5]

    def move(v):
        if not torch.is_tensor(v):
            return v
        if v.dim() == 3 and v.stride(0) != v.shape[1] * v.shape[2]:  # keep the padded stride
            raw = torch.zeros(v.shape[0], v.stride(0), dtype=v.dtype, device=device)
            out = raw[:, :v.shape[1] * v.shape[2]].view(v.shape)
            out.copy_(v)
            return out
        return v.to(device)

    return ([move(a) for a in norm_args], {k: move(v) for k, v in norm_kwargs.items()},
            [move(a) for a in q_args], dict(has_indexer=True, index_rope_interleave=interleave))


def _run(inputs, quantize_mqa=False):
    norm_args, norm_kwargs, q_args, q_kwargs = inputs
    q_c = prep.fused_norm_rope(*norm_args, **norm_kwargs)
    index_q, weights, mqa_q = prep.fused_q(*q_args, **q_kwargs, quantize_mqa=quantize_mqa)
    return {"q_c": q_c, "kv_c": norm_kwargs["kv_c_out"], "k_pe": norm_kwargs["k_pe_out"],
            "index_k": norm_kwargs["index_k_out"], "topk": norm_args[-1],
            "mla": norm_kwargs["mla_kv_cache"], "indexer": norm_kwargs["indexer_k_cache"],
            "index_q": index_q, "weights": weights, "mqa_q": mqa_q}


def _decoded_mla(cache, fp8):
    rows = cache.reshape(-1, cache.shape[-1]).cpu()
    if not fp8:
        return rows.double()
    codes = rows[:, :512].contiguous().view(torch.float8_e4m3fn).double().view(-1, 4, 128)
    scales = rows[:, 512:528].contiguous().view(torch.float32).double()
    rope = rows[:, 528:].contiguous().view(torch.bfloat16).double()
    return torch.cat([(codes * scales[:, :, None]).reshape(-1, 512), rope], dim=-1)


def _decoded_indexer(cache):
    pages = cache.reshape(cache.shape[0], -1).cpu()
    codes = pages[:, :BLOCK * 128].contiguous().view(torch.float8_e4m3fn).double()
    scales = pages[:, BLOCK * 128:].contiguous().view(torch.float32).double()
    return (codes.view(-1, BLOCK, 128) * scales[:, :, None]).reshape(-1, 128)


def _rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("fp8,interleave", [(False, True), (True, False), (True, True)])
def test_prep_on_cuda_matches_the_cpu_run(fp8, interleave):
    got = _run(_inputs(fp8, interleave, "cuda"))
    want = _run(_inputs(fp8, interleave, "cpu"))
    for name in ("q_c", "kv_c", "k_pe", "index_k", "mqa_q"):
        assert _rel(got[name], want[name]) < 4e-3, name  # bf16 rounding of float32 sums
    assert torch.equal(got["topk"][:TOKENS].cpu(), torch.full((TOKENS, 2048), -1, dtype=torch.int32))
    assert (got["topk"][TOKENS:] == 0).all()  # rows past the step's tokens untouched
    # The caches decode to the same values (e4m3 steps where a value rounded differently).
    assert _rel(_decoded_mla(got["mla"], fp8), _decoded_mla(want["mla"], fp8)) < 2e-2
    assert _rel(_decoded_indexer(got["indexer"]), _decoded_indexer(want["indexer"])) < 2e-2
    # Only the slots of the written tokens hold anything (padding tokens and rows skipped).
    written = torch.zeros(NUM_BLOCKS * BLOCK, dtype=torch.bool)
    slots = _inputs(fp8, interleave, "cpu")[1]["slot_mapping"]
    written[slots[slots >= 0]] = True
    assert not _decoded_mla(got["mla"], fp8)[~written].any()
    assert (_decoded_mla(got["mla"], fp8)[written].abs().sum(-1) > 0).all()
    assert _rel(got["index_q"].float(), want["index_q"].float()) < 2e-2
    torch.testing.assert_close(got["weights"].cpu(), want["weights"], rtol=1e-5, atol=0)


def test_prep_in_a_cuda_graph():
    eager = _run(_inputs(True, True, "cuda"))
    inputs = _inputs(True, True, "cuda")
    _run(inputs)  # warm up outside the capture (the custom ops' first call)
    norm_args, norm_kwargs, _, _ = inputs
    for t in (norm_args[-1], norm_kwargs["mla_kv_cache"], norm_kwargs["indexer_k_cache"]):
        t.zero_()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            captured = _run(inputs)
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    for name, want in eager.items():
        assert torch.equal(captured[name].view(torch.uint8) if captured[name].dtype ==
                           torch.float8_e4m3fn else captured[name],
                           want.view(torch.uint8) if want.dtype == torch.float8_e4m3fn else want), name
