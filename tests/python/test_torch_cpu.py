"""torch CPU tensors in, torch tensors out, with no copies (skipped without torch; CI does not
install it)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import latte  # noqa: E402
import torch_reference as ref  # noqa: E402
from latte import _tensors  # noqa: E402

SCALE = 0.0625


def test_sparse_mla_torch_in_torch_out():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(4, 8, 576, generator=g).bfloat16()
    cache = torch.randn(3, 16, 576, generator=g).bfloat16()
    indices = torch.stack([torch.randperm(48, generator=g)[:20] for _ in range(4)]).int()
    indices[1, 5:] = -1
    out, lse = latte.sparse_mla(q, cache, indices, SCALE, return_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and out.device == q.device
    want, want_lse = ref.sparse_mla(q, cache, indices, SCALE)
    torch.testing.assert_close(out.double(), want, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-5, atol=1e-5)


def test_out_is_written_in_place_and_grad_inputs_are_fine():
    q = torch.randn(2, 4, 576).bfloat16().requires_grad_()
    cache = torch.randn(1, 8, 576).bfloat16()
    indices = torch.arange(8, dtype=torch.int32).repeat(2, 1)
    out = torch.empty(2, 4, 512, dtype=torch.bfloat16)
    ptr = out.data_ptr()
    assert latte.sparse_mla(q, cache, indices, SCALE, out=out) is out
    assert out.data_ptr() == ptr
    torch.testing.assert_close(out.double(), ref.sparse_mla(q.detach(), cache, indices, SCALE)[0],
                               rtol=1e-2, atol=1e-2)


def test_views_share_memory():
    x = torch.randn(3, 8, 576).bfloat16()[:, ::2]
    view = _tensors.arg(x, "x", "test")
    assert view.data_ptr == x.data_ptr() and view.dtype == "bf16"
    f8 = torch.randn(2, 4, 128).to(torch.float8_e4m3fn)
    assert _tensors.arg(f8, "q", "test").dtype == "e4m3"
    assert _tensors.arg(f8, "q", "test").data_ptr == f8.data_ptr()


def test_cache_writes_and_indexer_with_fp8_queries():
    g = torch.Generator().manual_seed(1)
    bs, nb, length = 16, 4, 50
    k_cache = torch.zeros(nb, bs, 132, dtype=torch.uint8)
    table = torch.randperm(nb, generator=g)[None].int()
    slots = (table[0].long()[torch.arange(length) // bs] * bs + torch.arange(length) % bs).int()
    latte.indexer_k_store(torch.randn(length, 128, generator=g).bfloat16(), slots, k_cache)
    q = torch.randn(1, 4, 128, generator=g).to(torch.float8_e4m3fn)
    q_scale = torch.rand(1, 4, generator=g) + 0.5
    weights = torch.randn(1, 4, generator=g)
    lens = torch.tensor([length], dtype=torch.int32)
    logits = latte.indexer_logits(q, weights, k_cache, table, lens, q_scale=q_scale)
    want = ref.indexer_logits(q, weights, k_cache, table, lens, q_scale=q_scale)
    torch.testing.assert_close(logits.double(), want, rtol=1e-5, atol=1e-5)
    top = latte.indexer_topk(q, weights, k_cache, table, lens, 8, q_scale=q_scale, kind="logical")
    assert top.dtype == torch.int32
    assert torch.equal(top[0].long(), torch.topk(want[0], 8).indices)

    cache = torch.zeros(nb, bs, 656, dtype=torch.uint8)
    latent, rope = torch.randn(length, 512).bfloat16(), torch.randn(length, 64).bfloat16()
    latte.kv_store(latent, rope, slots, cache, kv_format="fp8_ds_mla")
    back = ref.unpack_mla_cache(cache)[slots.long()]
    torch.testing.assert_close(back[:, 512:], rope.double())
    assert np.allclose(back[:, :512].numpy(), latent.double().numpy(), rtol=0.125, atol=0.05)


def test_a_bad_topk_is_a_latte_error_before_torch_allocates():
    args = (torch.zeros(2, 4, 128).bfloat16(), torch.ones(2, 4), torch.zeros(4, 16, 132, dtype=torch.uint8),
            torch.zeros(2, 1, dtype=torch.int32), torch.tensor([3, 16], dtype=torch.int32))
    for topk in (-3, 2 ** 31):
        with pytest.raises(latte.errors.InvalidArgumentError, match=f"topk is {topk} "):
            latte.indexer_topk(*args, topk)


def test_no_tokens_and_an_out_inside_the_cache():
    cache = torch.randn(4, 16, 576).bfloat16()
    empty = latte.sparse_mla(torch.zeros(0, 8, 576).bfloat16(), cache,
                             torch.zeros(0, 8, dtype=torch.int32), SCALE)
    assert empty.shape == (0, 8, 512) and empty.dtype == torch.bfloat16
    top = latte.indexer_topk(torch.zeros(0, 4, 128).bfloat16(), torch.zeros(0, 4),
                             torch.zeros(4, 16, 132, dtype=torch.uint8),
                             torch.zeros(0, 1, dtype=torch.int32), torch.zeros(0, dtype=torch.int32), 8)
    assert top.shape == (0, 8) and top.dtype == torch.int32
    with pytest.raises(latte.errors.InvalidArgumentError, match="out shares memory with kv_cache"):
        latte.sparse_mla(torch.randn(2, 8, 576).bfloat16(), cache, torch.zeros(2, 8, dtype=torch.int32),
                         SCALE, out=cache.view(-1)[:2 * 8 * 512].view(2, 8, 512))
