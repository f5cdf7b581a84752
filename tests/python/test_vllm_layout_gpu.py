"""The vLLM adapter's computation on a GPU, on tensors laid out as vLLM 0.33 lays them out.

vLLM cannot be installed on the GPU machine, so these tests call the adapter's vLLM-free
functions (latte.integrations.vllm.kernels) — the exact code the vLLM classes run — over CUDA
tensors shaped and strided as vLLM binds them: per-layer caches with padded block strides,
the shared [max_tokens, topk] top-k buffer of logical positions, a block table, and mixed
batches of decodes and prefill chunks. The reference is latte's float64 oracle
(``cpu.reference``) on CPU copies of the same bytes. tests/vllm runs the same functions inside
the real vLLM, on the CPU.
"""

from __future__ import annotations

import pytest
from gpu_only import cuda_torch

torch = cuda_torch()

import latte  # noqa: E402
from latte.integrations.vllm import kernels  # noqa: E402

DEV = torch.device("cuda")
BLOCK = 64
MAX_TOKENS = 64  # the rows of vLLM's persistent buffers (max_num_batched_tokens)

# (heads per rank, index heads, softmax scale): GLM-5 TP8 / TP1, DeepSeek-V3.2 TP8.
SHAPES = {"glm5-tp8": (8, 32, 0.0625), "glm5-tp1": (64, 32, 0.0625),
          "dsv32-tp8": (16, 64, 0.13523)}
# (query tokens, tokens in the cache after the step) per request: decodes longer and shorter
# than topk, a prefill chunk after cached context, a first prefill chunk.
REQUESTS = [(1, 3000), (1, 700), (12, 2600), (1, 2049), (9, 9)]
TOPK = 2048


def _padded(num_blocks, row, dtype, pad_rows):
    raw = torch.zeros(num_blocks, (BLOCK + pad_rows) * row, dtype=dtype, device=DEV)
    return raw[:, :BLOCK * row].view(num_blocks, BLOCK, row)


def _step(kv_format, index_heads, gen_seed=0):
    gen = torch.Generator(device="cpu").manual_seed(gen_seed)
    qsl = [0]
    for q, _ in REQUESTS:
        qsl.append(qsl[-1] + q)
    seq_lens = [s for _, s in REQUESTS]
    need = [(s + BLOCK - 1) // BLOCK for s in seq_lens]
    num_blocks = sum(need) + 3
    perm = torch.randperm(num_blocks, generator=gen)
    table = torch.full((len(REQUESTS), max(need) + 2), -1, dtype=torch.int32)
    used = 0
    for r, n in enumerate(need):
        table[r, :n] = perm[used:used + n].to(torch.int32)
        used += n
    fp8 = kv_format == "fp8_ds_mla"
    kv_cache = _padded(num_blocks, 656 if fp8 else 576, torch.uint8 if fp8 else torch.bfloat16, 5)
    k_cache = _padded(num_blocks, 132, torch.uint8, 4)
    slots = [int(table[r, p // BLOCK]) * BLOCK + p % BLOCK
             for r, s in enumerate(seq_lens) for p in range(s)]
    n = len(slots)
    slot_t = torch.tensor(slots, dtype=torch.int32, device=DEV)
    latte.kv_store(torch.randn(n, 512, generator=gen).bfloat16().to(DEV),
                   torch.randn(n, 64, generator=gen).bfloat16().to(DEV), slot_t, kv_cache,
                   scale_kind="pow2")
    latte.indexer_k_store(torch.randn(n, 128, generator=gen).bfloat16().to(DEV), slot_t, k_cache,
                          scale_kind="pow2")
    tokens = qsl[-1]
    return dict(
        qsl=torch.tensor(qsl, dtype=torch.int32, device=DEV),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=DEV),
        table=table.to(DEV), kv_cache=kv_cache, k_cache=k_cache, tokens=tokens,
        q_fp8=(torch.randn(tokens, index_heads, 128, generator=gen) * 2).to(torch.float8_e4m3fn)
        .to(DEV),
        weights=torch.rand(tokens, index_heads, generator=gen).to(DEV),
        gen=gen)


def _buffers(heads, index_heads):
    return dict(
        token_request=torch.zeros(MAX_TOKENS, dtype=torch.int32, device=DEV),
        visible=torch.zeros(MAX_TOKENS, dtype=torch.int32, device=DEV),
        topk=torch.full((MAX_TOKENS, TOPK), -7, dtype=torch.int32, device=DEV),
        slots=torch.full((MAX_TOKENS, TOPK), -1, dtype=torch.int32, device=DEV),
        ones=torch.ones(MAX_TOKENS, index_heads, dtype=torch.float32, device=DEV))


def _run(step, buf, q, scale):
    req, vis = kernels.step_token_tables(step["qsl"], step["seq_lens"], len(REQUESTS),
                                         step["tokens"], buf["token_request"], buf["visible"])
    kernels.indexer_topk_logical(step["q_fp8"], step["weights"], step["k_cache"], step["table"],
                                 req, vis, q_scale=buf["ones"], topk_out=buf["topk"])
    return kernels.sparse_mla_forward(q, step["kv_cache"], buf["topk"], step["table"], req, scale,
                                      slots=buf["slots"])


def _check_topk(step, buf):
    """The GPU's logical top-k per token is the oracle's set (its order is backend-defined), up
    to positions whose oracle scores sit at the set's boundary within the GPU's float32 score
    error (about 1e-4 relative here: 32-64 heads of 128-dim e4m3 products)."""
    tokens = step["tokens"]
    req = buf["token_request"][:tokens].cpu()
    vis = buf["visible"][:tokens].cpu()
    logits = latte.indexer_logits(
        step["q_fp8"].cpu(), step["weights"].cpu(), step["k_cache"].cpu(), step["table"].cpu(),
        vis, q_scale=buf["ones"][:tokens].cpu(), token_request=req, backend="cpu.reference")
    got = buf["topk"][:tokens].cpu()
    for t in range(tokens):
        n = min(TOPK, int(vis[t]))
        want = set(torch.topk(logits[t, :int(vis[t])].double(), n).indices.tolist())
        have = [p for p in got[t].tolist() if p >= 0]
        assert len(have) == n and len(set(have)) == n, (t, len(have), n)
        bound = min(float(logits[t, p]) for p in want)
        for p in want.symmetric_difference(have):
            assert abs(float(logits[t, p]) - bound) <= 1e-3 * max(abs(bound), 1e-30), (t, p)
        assert (got[t, n:] == -1).all()


def _reference_attention(step, buf, q, scale):
    # latte's float64 oracle on CPU copies of the same bytes and the GPU's own top-k.
    tokens = step["tokens"]
    req = buf["token_request"][:tokens].cpu()
    table = step["table"].cpu()
    slots = latte.logical_to_slots(buf["topk"][:tokens].cpu(), table, BLOCK, token_request=req,
                                   backend="cpu.reference")
    q_full = q.cpu()
    return latte.sparse_mla(q_full, step["kv_cache"].cpu(), slots, scale, backend="cpu.reference")


def _expected_tables():
    req, vis = [], []
    for r, (q, s) in enumerate(REQUESTS):
        for p in range(s - q, s):
            req.append(r)
            vis.append(p + 1)
    return req, vis


@pytest.mark.parametrize("kv_format", ["bf16", "fp8_ds_mla"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_step_matches_the_oracle(shape, kv_format):
    heads, index_heads, scale = SHAPES[shape]
    step = _step(kv_format, index_heads)
    buf = _buffers(heads, index_heads)
    tokens = step["tokens"]
    q = torch.randn(tokens, heads, 576, generator=step["gen"]).bfloat16().to(DEV)
    # vLLM's bf16 path hands (ql_nope, q_pe) as two tensors.
    out = _run(step, buf, (q[..., :512], q[..., 512:]), scale)
    torch.cuda.synchronize()
    req, vis = _expected_tables()
    assert buf["token_request"][:tokens].tolist() == req
    assert buf["visible"][:tokens].tolist() == vis
    assert (buf["topk"][tokens:] == -7).all()  # rows past the step untouched
    _check_topk(step, buf)
    out_ref = _reference_attention(step, buf, q, scale)
    err = ((out.cpu().double() - out_ref.double()).norm() / out_ref.double().norm()).item()
    assert err < 1e-2, err


@pytest.mark.parametrize("kv_format", ["bf16", "fp8_ds_mla"])
def test_cuda_graph_replay(kv_format):
    # vLLM's FULL graph mode captures the layer: the indexer and attention replay from the same
    # persistent buffers with new inputs.
    heads, index_heads, scale = SHAPES["glm5-tp8"]
    step = _step(kv_format, index_heads, gen_seed=1)
    buf = _buffers(heads, index_heads)
    tokens = step["tokens"]
    q = torch.randn(tokens, heads, 576, generator=step["gen"]).bfloat16().to(DEV)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm up outside the graph (kernels made, workspace sized)
            _run(step, buf, q, scale)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _run(step, buf, q, scale)
    for seed in (2, 3):
        g = torch.Generator(device="cpu").manual_seed(seed)
        q.copy_(torch.randn(tokens, heads, 576, generator=g).bfloat16())
        step["q_fp8"].copy_((torch.randn(tokens, index_heads, 128, generator=g) * 2)
                            .to(torch.float8_e4m3fn))
        buf["topk"].fill_(-7)
        graph.replay()
        torch.cuda.synchronize()
        eager = _run(step, _buffers(heads, index_heads), q, scale)
        torch.cuda.synchronize()
        assert torch.equal(out, eager)
        _check_topk(step, buf)
