"""latte on CUDA torch tensors (run on the H200; skipped without torch.cuda): results against a
torch float64 reference, stream ordering, no host synchronization, no copies."""

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch", allow_module_level=True)

import latte  # noqa: E402
import torch_reference as ref  # noqa: E402
from latte import _tensors  # noqa: E402

if not latte.built_with_cuda():
    pytest.skip("this latte was built without CUDA (LATTE_CUDA=OFF)", allow_module_level=True)

DEV = torch.device("cuda", 0)
SCALE = 0.0625  # GLM-5
BS = 64         # GLM-5's page size


def cuda_backend_for(op):
    """The backend latte picks for `op` on cuda:0, or skip when this build has none."""
    try:
        return latte.select("glm-5", tp=8, op=op, device="cuda:0").backend
    except latte.NoValidBackendError:
        pytest.skip(f"no CUDA backend for {op} in this build")


def random_slots(t, topk, num_slots, g):
    return torch.stack([torch.randperm(num_slots, generator=g, device=DEV)[:topk]
                        for _ in range(t)]).int()


def fp8_cache(num_blocks, g):
    """An fp8_ds_mla cache written by latte.kv_store (on the GPU when a backend exists, else on
    the CPU and copied)."""
    n = num_blocks * BS
    latent = torch.randn(n, 512, generator=g, device=DEV).bfloat16()
    rope = torch.randn(n, 64, generator=g, device=DEV).bfloat16()
    slots = torch.arange(n, dtype=torch.int32, device=DEV)
    try:
        cache = torch.zeros(num_blocks, BS, 656, dtype=torch.uint8, device=DEV)
        latte.kv_store(latent, rope, slots, cache)
    except latte.NoValidBackendError:
        cache = torch.zeros(num_blocks, BS, 656, dtype=torch.uint8)
        latte.kv_store(latent.cpu(), rope.cpu(), slots.cpu(), cache)
        cache = cache.to(DEV)
    return cache


def test_cuda_backends_are_chosen():
    assert cuda_backend_for("sparse_mla").split(".")[0] in ("cuda", "hopper")
    assert latte.select("glm-5", tp=8, device="cuda:0").device.startswith("cuda:0")


@pytest.mark.parametrize("kv_format", ["bf16", "fp8_ds_mla"])
def test_sparse_mla_matches_torch_float64(kv_format):
    cuda_backend_for("sparse_mla")
    g = torch.Generator(device=DEV).manual_seed(0)
    t, h, nb, topk = 16, 8, 8, 256  # GLM-5 at TP8: 8 heads
    q = (torch.randn(t, h, 576, generator=g, device=DEV) * 0.5).bfloat16()
    cache = (torch.randn(nb, BS, 576, generator=g, device=DEV).bfloat16() if kv_format == "bf16"
             else fp8_cache(nb, g))
    indices = random_slots(t, topk, nb * BS, g)
    indices[3, 100:] = -1
    indices[5] = -1
    out, lse = latte.sparse_mla(q, cache, indices, SCALE, kv_format=kv_format, return_lse=True)
    assert out.device == DEV and out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    want, want_lse = ref.sparse_mla(q, cache, indices, SCALE)
    torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-3, atol=1e-3)
    assert torch.all(out[5] == 0) and torch.all(torch.isneginf(lse[5]))


@pytest.mark.parametrize("s_q", [1, 2])
def test_mla_decode_matches_torch_float64(s_q):
    cuda_backend_for("mla_decode")
    g = torch.Generator(device=DEV).manual_seed(1)
    b, h, nb, max_blocks = 4, 16, 24, 5
    q = (torch.randn(b, s_q, h, 576, generator=g, device=DEV) * 0.5).bfloat16()
    cache = torch.randn(nb, BS, 576, generator=g, device=DEV).bfloat16()
    table = torch.randperm(nb, generator=g, device=DEV)[:b * max_blocks].reshape(b, max_blocks).int()
    seq_lens = torch.tensor([300, 2, 64, 129], dtype=torch.int32, device=DEV)
    out, lse = latte.mla_decode(q, cache, table, seq_lens, SCALE, return_lse=True)
    want, want_lse = ref.mla_decode(q, cache, table, seq_lens, SCALE)
    torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-3, atol=1e-3)


def test_indexer_on_cuda_matches_torch_float64():
    cuda_backend_for("indexer_k_store")
    cuda_backend_for("indexer_topk")
    g = torch.Generator(device=DEV).manual_seed(2)
    t, heads, nb, max_blocks, topk = 4, 32, 16, 4, 64
    table = torch.randperm(nb, generator=g, device=DEV)[:t * max_blocks].reshape(t, max_blocks).int()
    lens = torch.tensor([256, 33, 200, 64], dtype=torch.int32, device=DEV)
    k_cache = torch.zeros(nb, BS, 132, dtype=torch.uint8, device=DEV)
    slots = table.long().repeat_interleave(BS, dim=1) * BS + torch.arange(max_blocks * BS, device=DEV) % BS
    keys = torch.randn(nb * BS, 128, generator=g, device=DEV).bfloat16()
    latte.indexer_k_store(keys[: t * max_blocks * BS], slots.reshape(-1).int(), k_cache)
    q = torch.randn(t, heads, 128, generator=g, device=DEV).to(torch.float8_e4m3fn)
    q_scale = torch.rand(t, heads, generator=g, device=DEV) + 0.5
    weights = torch.randn(t, heads, generator=g, device=DEV) / heads
    want = ref.indexer_logits(q, weights, k_cache, table, lens, q_scale=q_scale)
    logits = latte.indexer_logits(q, weights, k_cache, table, lens, q_scale=q_scale)
    torch.testing.assert_close(logits.double(), want, rtol=1e-3, atol=1e-3)
    got = latte.indexer_topk(q, weights, k_cache, table, lens, topk, q_scale=q_scale, kind="logical")
    # Compare the chosen scores (index sets only differ where scores tie within float error).
    best = torch.topk(want, topk, dim=1).values
    chosen = torch.where(got >= 0, want.gather(1, got.long().clamp_min(0)), torch.full_like(best, float("-inf")))
    torch.testing.assert_close(chosen.sort(dim=1, descending=True).values, best, rtol=1e-3, atol=1e-3)
    assert torch.all(got[1, 33:] == -1)


def produce_on(stream, q_src, cycles=200_000_000):
    """q, written on `stream` only after a long sleep: work that reads q on another stream (or
    before the sleep ends) sees zeros."""
    q = torch.zeros_like(q_src)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.cuda._sleep(cycles)
        q.copy_(q_src)
    return q


def stream_case():
    g = torch.Generator(device=DEV).manual_seed(3)
    q_src = torch.randn(8, 8, 576, generator=g, device=DEV).bfloat16()
    cache = torch.randn(4, BS, 576, generator=g, device=DEV).bfloat16()
    indices = random_slots(8, 128, 4 * BS, g)
    want, _ = ref.sparse_mla(q_src, cache, indices, SCALE)
    latte.sparse_mla(q_src, cache, indices, SCALE)  # warm: selection and kernel made once
    torch.cuda.synchronize()
    return q_src, cache, indices, want


@pytest.mark.parametrize("how", ["torch.cuda.Stream", "int handle"])
def test_explicit_side_stream_orders_after_its_producer(how):
    cuda_backend_for("sparse_mla")
    q_src, cache, indices, want = stream_case()
    side = torch.cuda.Stream()
    q = produce_on(side, q_src)
    with torch.cuda.stream(side):
        out = torch.empty(8, 8, 512, dtype=torch.bfloat16, device=DEV)
    handle = side if how == "torch.cuda.Stream" else side.cuda_stream
    latte.sparse_mla(q, cache, indices, SCALE, out=out, stream=handle)
    # No host synchronization: the call returned while the producer is still asleep.
    assert not side.query()
    with torch.cuda.stream(side):
        consumed = out.double() * 1.0  # consumed on the same stream, after latte
    side.synchronize()
    torch.testing.assert_close(consumed, want, rtol=2e-2, atol=2e-2)


def test_current_stream_is_the_default():
    cuda_backend_for("sparse_mla")
    q_src, cache, indices, want = stream_case()
    side = torch.cuda.Stream()
    q = produce_on(side, q_src)
    with torch.cuda.stream(side):
        out = latte.sparse_mla(q, cache, indices, SCALE)  # torch's current stream: side
        assert not side.query()
        consumed = out.double() * 1.0
    side.synchronize()
    torch.testing.assert_close(consumed, want, rtol=2e-2, atol=2e-2)


def test_no_copies_on_cuda():
    cuda_backend_for("sparse_mla")
    q_src, cache, indices, want = stream_case()
    big = torch.zeros(8, 16, 576, dtype=torch.bfloat16, device=DEV)
    big[:, ::2] = q_src
    q = big[:, ::2]  # a strided view
    assert _tensors.arg(q, "q", "test").data_ptr == q.data_ptr()
    out = torch.empty(8, 8, 512, dtype=torch.bfloat16, device=DEV)
    ptr = out.data_ptr()
    assert latte.sparse_mla(q, cache, indices, SCALE, out=out) is out and out.data_ptr() == ptr
    torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2)


def test_cuda_errors_carry_the_message():
    q = torch.zeros(1, 8, 576, dtype=torch.bfloat16, device=DEV)
    cache = torch.zeros(1, BS, 576, dtype=torch.bfloat16, device=DEV)
    idx = torch.zeros(1, 4, dtype=torch.int32, device=DEV)
    with pytest.raises(latte.NoValidBackendError, match="cpu.reference"):
        latte.sparse_mla(q, cache, idx, SCALE, backend="cpu.reference")
    with pytest.raises(latte.InvalidArgumentError, match="different devices"):
        latte.sparse_mla(q, cache.cpu(), idx, SCALE)


def test_workspace_per_stream_under_threads_and_growth():
    # The workspace is cached per (device, stream) and grows when a call needs more: two
    # threads on two streams, each alternating a small and a large indexer call (the large one
    # grows its stream's buffer while the other stream's kernels may be running), give the
    # results of the same calls run alone on the default stream.
    import threading

    g = torch.Generator(device=DEV).manual_seed(11)
    cases = []
    for blocks in (16, 512):  # 1K and 32K positions: workspaces of very different sizes
        q = torch.randn(4, 32, 128, generator=g, device=DEV).to(torch.float8_e4m3fn)
        k_cache = torch.zeros(blocks, BS, 132, dtype=torch.uint8, device=DEV)
        latte.indexer_k_store(torch.randn(blocks * BS, 128, generator=g, device=DEV).bfloat16(),
                              torch.arange(blocks * BS, dtype=torch.int32, device=DEV), k_cache)
        args = (q, torch.rand(4, 32, generator=g, device=DEV), k_cache,
                torch.arange(blocks, dtype=torch.int32, device=DEV).view(1, blocks),
                torch.full((4,), blocks * BS, dtype=torch.int32, device=DEV))
        kw = dict(q_scale=torch.ones(4, 32, device=DEV),
                  token_request=torch.zeros(4, dtype=torch.int32, device=DEV))
        cases.append((args, kw))
    alone = [latte.indexer_topk(*a, 512, **kw).sort(dim=1).values for a, kw in cases]
    torch.cuda.synchronize()
    errors = []

    def worker(order):
        stream = torch.cuda.Stream()
        try:
            with torch.cuda.stream(stream):
                for _ in range(20):
                    for i in order:
                        got = latte.indexer_topk(*cases[i][0], 512, **cases[i][1])
                        if not torch.equal(got.sort(dim=1).values, alone[i]):
                            errors.append(i)
            stream.synchronize()
        except Exception as e:  # reported below: a thread's exception would be lost
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(order,)) for order in ([0, 1], [1, 0])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
