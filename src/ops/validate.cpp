// The one validation layer every backend runs before computing (docs/operations.md, "Tensor
// rules"). It checks what can be checked without reading tensor data: ranks, dtypes, sizes
// against each other, strides, alignment, formats and API limits. Index *values* are checked
// only in check mode (check_indices.cpp).
#include "latte/validate.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <type_traits>
#include <limits>

#include "ops/arg_check.hpp"
#include "latte/formats.hpp"

namespace latte {
namespace {

using detail::ArgCheck;
using detail::check_outputs_apart;
using detail::fail_argument;
using detail::LayoutText;

constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxSlots = int64_t{1} << 31;  // slots are int32 indices

struct CacheLayout {
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  CacheFormat format = CacheFormat::bf16;
};

void check_paging(std::string_view op, std::string_view name, ArgCheck& c) {
  c.size_in(0, 1, kMaxSize, "num_blocks", "A cache needs at least one block.");
  c.size_in(1, 1, kMaxSize, "block_size", "A block holds at least one token.");
  const int64_t slots = c.tensor().size(0) * c.tensor().size(1);
  if (slots > kMaxSlots) {
    fail_argument(op, fmt::format("{} has {} x {} = {} slots, more than int32 slot indices can "
                                  "address ({}). Split the cache or use fewer blocks.",
                                  name, c.tensor().size(0), c.tensor().size(1), slots, kMaxSlots));
  }
}

// The MLA cache of a call with `rope_dim` (already checked to be 64 or 0): its format follows
// from the dtype and the last dimension. Rows without rope are 512 bf16 values, or the 528
// bytes of an fp8 row stored compact or inside a 656-byte row (its last 128 bytes reserved).
CacheLayout check_mla_cache(std::string_view op, const TensorView& t, int rope_dim) {
  const bool nope = rope_dim == kNoRopeDim;
  ArgCheck c(op, "kv_cache", t,
             nope ? "(rope_dim 0) [num_blocks, block_size, 512] bf16, or [num_blocks, block_size, "
                    "528] or [num_blocks, block_size, 656] u8 (fp8 rows without rope)"
                  : "[num_blocks, block_size, 576] bf16 (bf16 cache) or [num_blocks, block_size, 656] u8 "
                    "(fp8_ds_mla cache)");
  c.required().rank(3);
  if (t.dtype == DType::e4m3) {
    c.fail("has dtype e4m3",
           "An fp8_ds_mla cache mixes e4m3, f32 and bf16 fields: pass it as u8 bytes "
           "(e.g. cache.view(torch.uint8)).");
  }
  c.dtype_in({DType::bf16, DType::u8}).memory();
  CacheLayout layout;
  const bool bf16 = t.dtype == DType::bf16;
  const int64_t width = t.size(2);
  if (!nope && bf16 && width == kQkDim) {
    layout.format = CacheFormat::bf16;
  } else if (!nope && !bf16 && width == kFp8DsMlaBytes) {
    layout.format = CacheFormat::fp8_ds_mla;
  } else if (nope && bf16 && width == kLatentDim) {
    layout.format = CacheFormat::bf16;
  } else if (nope && !bf16 && (width == kFp8NopeBytes || width == kFp8DsMlaBytes)) {
    layout.format = CacheFormat::fp8_ds_mla;
  } else if (!nope && (bf16 ? width == kLatentDim : width == kFp8NopeBytes)) {
    c.fail(fmt::format("has {} {} values per token, a row without rope, but rope_dim is 64", width,
                       to_string(t.dtype)),
           "For a model without rope (GLM-5.3-Flash) set rope_dim=0; for a model with rope pass "
           "576 bf16 or 656 u8 values per token.");
  } else if (nope && bf16 && width == kQkDim) {
    c.fail("has 576 bf16 values per token, a row with rope, but rope_dim is 0",
           "Rows without rope hold the 512 latent values: pass a [num_blocks, block_size, 512] bf16 "
           "cache, or set rope_dim=64 for a model with rope.");
  } else if (nope) {
    c.fail(fmt::format("has {} {} values per token, which is no cache format without rope", width,
                       to_string(t.dtype)),
           "Without rope use 512 bf16 values per token, or 528 u8 bytes (512 e4m3 + 4 f32 "
           "scales), or 656 u8 bytes (the same 528, then 128 reserved bytes).");
  } else {
    c.fail(fmt::format("has {} {} values per token, which is no cache format", width,
                       to_string(t.dtype)),
           "Use 576 bf16 values per token (bf16 cache) or 656 u8 bytes per token (fp8_ds_mla: "
           "512 e4m3 + 4 f32 scales + 64 bf16 rope).");
  }
  check_paging(op, "kv_cache", c);
  c.vector_rows().non_overlapping();
  layout.num_blocks = t.size(0);
  layout.block_size = t.size(1);
  return layout;
}

// rope_dim is stated by the caller, never inferred from shapes: 64 (MLA with rope) or 0.
void check_rope_dim(std::string_view op, int rope_dim) {
  if (rope_dim == kRopeDim || rope_dim == kNoRopeDim) return;
  fail_argument(op, fmt::format("rope_dim is {}; expected 64 (MLA with rope: GLM-5, DeepSeek-V3.2) "
                                "or 0 (MLA without rope: GLM-5.3-Flash). Set it from the model's "
                                "qk_rope_head_dim.",
                                rope_dim));
}

// The indexer K cache: a page of block_size tokens is block_size*128 e4m3 codes followed by
// block_size f32 scales; the [.., block_size, 132] shape only sizes the page, so a page must
// be one contiguous run of bytes.
CacheLayout check_indexer_cache(std::string_view op, const TensorView& t, bool pooled = false) {
  ArgCheck c(op, "k_cache", t,
             pooled ? "[num_blocks, block_size / kpool, 132] u8 pool pages (one row per pool: rows*128 e4m3 "
                      "codes, then rows f32 scales)"
                    : "[num_blocks, block_size, 132] u8 pages (block_size*128 e4m3 codes, then "
                      "block_size f32 scales)");
  c.required().rank(3).dtype(DType::u8).memory().size(2, kIndexBytesPerToken,
                                                       "128 e4m3 codes + one f32 scale per token");
  check_paging(op, "k_cache", c);
  if (t.size(1) > 1 && t.stride(1) != kIndexBytesPerToken) {
    c.fail(fmt::format("has token stride {}, not 132", t.stride(1)),
           "A page is one contiguous run of bytes: the token dimension must have stride 132.");
  }
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) {
    c.fail(fmt::format("data pointer {} is not 16-byte aligned", t.data),
           "Kernels load pages with 16-byte vectors: allocate the cache 16-byte aligned.");
  }
  if (t.size(0) > 1 && t.stride(0) % 16 != 0) {
    c.fail(fmt::format("page stride {} bytes is not a multiple of 16", t.stride(0)),
           pooled ? "Use a block_size whose pool rows (block_size / kpool) are a multiple of 4 (a page is "
                    "rows*132 bytes; GLM-5.3-Flash's 64-token blocks have 16) or pad pages to a multiple of 16 bytes."
                  : "Use a block_size that is a multiple of 4 (a page is block_size*132 bytes) or pad "
                    "pages to a multiple of 16 bytes.");
  }
  c.non_overlapping();
  return {t.size(0), t.size(1), CacheFormat::bf16};
}

// Fix texts that quote a limit, formatted once.
const std::string& decode_sq_fix() {
  static const std::string text = fmt::format(
      "mla_decode takes 1..{} new tokens per request; run longer chunks as prefill (sparse_mla "
      "over all their positions).",
      kMaxDecodeSq);
  return text;
}

const std::string& topk_fix() {
  static const std::string text = fmt::format("topk must be 1..{}.", kMaxTopk);
  return text;
}

void check_scale(std::string_view op, float scale) {
  if (!std::isfinite(scale) || scale == 0.0f) {
    fail_argument(op, fmt::format("scale is {}; expected a finite, non-zero softmax scale. Set "
                                  "it from the model (GLM-5: 0.0625; DeepSeek-V3.2: about "
                                  "0.13523, see docs/design.md, section 2.1).",
                                  scale));
  }
}

// block_table [B, max_blocks] i32: the per-request page lists.
void check_block_table_arg(std::string_view op, const TensorView& t) {
  ArgCheck c(op, "block_table", t, "[B, max_blocks] i32");
  c.required().rank(2).dtype(DType::i32).memory();
  c.size_in(1, 1, kMaxSize, "max_blocks", "Give each request at least one block column.");
}

// An optional (or required) [n] i32 vector.
void check_i32_vector(std::string_view op, std::string_view name, const TensorView& t, int64_t n,
                      std::string_view source, bool required) {
  ArgCheck c(op, name, t, LayoutText("[{}] i32", n));
  if (!required && !c.present()) return;
  c.required().rank(1).dtype(DType::i32).memory().size(0, n, source);
}

}  // namespace

static SparseMlaShape shape_of(const SparseMlaArgs& a) {
  constexpr std::string_view op = "sparse_mla";
  SparseMlaShape s;
  check_rope_dim(op, a.rope_dim);
  s.rope_dim = a.rope_dim;
  const bool nope = a.rope_dim == kNoRopeDim;
  const bool split = a.q_rope.defined();
  if (nope && split) {
    fail_argument(op, fmt::format("q_rope is given but rope_dim is 0 (no rope): got q_rope = {}. Drop "
                                  "q_rope for a model without rope, or set rope_dim=64.",
                                  a.q_rope.describe()));
  }
  ArgCheck q(op, "q", a.q,
             nope    ? "[T, H, 512] bf16 (the absorbed latent; rope_dim 0: no rope dims)"
             : split ? "[T, H, 512] bf16 (the absorbed latent; the rope part is q_rope)"
                     : "[T, H, 576] bf16 (512 absorbed latent + 64 rope per head)");
  q.required().rank(3).dtype(DType::bf16).memory();
  if (nope) {
    if (a.q.size(2) == kQkDim) {
      q.fail("has 576 in dimension 2 but rope_dim is 0",
             "A query without rope is the 512-dim absorbed latent: pass q[..., :512] for a model "
             "without rope, or set rope_dim=64 for a model with rope.");
    }
    q.size(2, kLatentDim, "the latent dim; rope_dim 0: no rope dims");
  } else if (split) {
    q.size(2, kLatentDim, "the latent dim (q_rope holds the 64 rope dims)");
  } else if (a.q.size(2) == kLatentDim) {
    q.fail("has 512 in dimension 2, not 576 (rope_dim is 64 and q_rope is absent)",
           "Pass the joined [T, H, 576] query, or its 64 rope dims as q_rope; for a model without "
           "rope (GLM-5.3-Flash) set rope_dim=0.");
  } else {
    q.size(2, kQkDim, "the MLA query dim: 512 latent + 64 rope");
  }
  q.size_in(1, 1, kMaxSize, "H (heads)", "Pass at least one head.");
  q.vector_rows();
  s.tokens = a.q.size(0);
  s.heads = a.q.size(1);
  if (split) {
    ArgCheck rope(op, "q_rope", a.q_rope, LayoutText("[T, H, 64] = [{}, {}, 64] bf16", s.tokens, s.heads));
    rope.rank(3).dtype(DType::bf16).memory();
    rope.size(0, s.tokens, "T, the tokens of q").size(1, s.heads, "H, the heads of q");
    rope.size(2, kRopeDim, "the rope dim");
    rope.vector_rows();
  }

  const CacheLayout cache = check_mla_cache(op, a.kv_cache, a.rope_dim);
  s.num_blocks = cache.num_blocks;
  s.block_size = cache.block_size;
  s.format = cache.format;

  ArgCheck idx(op, "indices", a.indices, LayoutText("[T, topk] = [{}, topk] i32 slots", s.tokens));
  idx.required().rank(2).dtype(DType::i32).memory();
  idx.size(0, s.tokens, "T, the tokens of q");
  idx.size_in(1, 1, kMaxTopk, "topk", topk_fix());
  s.topk = a.indices.size(1);
  check_i32_vector(op, "topk_lens", a.topk_lens, s.tokens, "T, the tokens of q", false);

  ArgCheck out(op, "out", a.out, LayoutText("[T, H, 512] = [{}, {}, 512] bf16", s.tokens, s.heads));
  out.required().rank(3).dtype(DType::bf16).memory();
  out.size(0, s.tokens, "T, the tokens of q").size(1, s.heads, "H, the heads of q");
  out.size(2, kLatentDim, "the latent dim");
  out.vector_rows().non_overlapping();

  ArgCheck lse(op, "lse", a.lse, LayoutText("absent or [T, H] = [{}, {}] f32", s.tokens, s.heads));
  if (lse.present()) {
    lse.rank(2).dtype(DType::f32).memory();
    lse.size(0, s.tokens, "T, the tokens of q").size(1, s.heads, "H, the heads of q");
    lse.non_overlapping();
  }
  check_scale(op, a.scale);
  check_outputs_apart(op, {{"out", a.out}, {"lse", a.lse}},
                      {{"q", a.q}, {"q_rope", a.q_rope}, {"kv_cache", a.kv_cache}, {"indices", a.indices},
                       {"topk_lens", a.topk_lens}});
  return s;
}

static MlaDecodeShape shape_of(const MlaDecodeArgs& a) {
  constexpr std::string_view op = "mla_decode";
  MlaDecodeShape s;
  ArgCheck q(op, "q", a.q, "[B, s_q, H, 576] bf16 with s_q in 1..4");
  q.required().rank(4).dtype(DType::bf16).memory();
  q.size(3, kQkDim, "the MLA query dim: 512 latent + 64 rope");
  q.size_in(1, 1, kMaxDecodeSq, "s_q (query tokens per request)",
            decode_sq_fix());
  q.size_in(2, 1, kMaxSize, "H (heads)", "Pass at least one head.");
  q.vector_rows();
  s.batch = a.q.size(0);
  s.s_q = a.q.size(1);
  s.heads = a.q.size(2);

  const CacheLayout cache = check_mla_cache(op, a.kv_cache, kRopeDim);
  s.num_blocks = cache.num_blocks;
  s.block_size = cache.block_size;
  s.format = cache.format;

  check_block_table_arg(op, a.block_table);
  ArgCheck(op, "block_table", a.block_table, "[B, max_blocks] i32")
      .size(0, s.batch, "B, the requests of q");
  s.max_blocks = a.block_table.size(1);
  check_i32_vector(op, "seq_lens", a.seq_lens, s.batch, "B, the requests of q", true);

  ArgCheck out(op, "out", a.out, LayoutText("[B, s_q, H, 512] = [{}, {}, {}, 512] bf16", s.batch, s.s_q, s.heads));
  out.required().rank(4).dtype(DType::bf16).memory();
  out.size(0, s.batch, "B, the requests of q").size(1, s.s_q, "s_q of q");
  out.size(2, s.heads, "H, the heads of q").size(3, kLatentDim, "the latent dim");
  out.vector_rows().non_overlapping();

  ArgCheck lse(op, "lse", a.lse, LayoutText("absent or [B, s_q, H] = [{}, {}, {}] f32", s.batch, s.s_q, s.heads));
  if (lse.present()) {
    lse.rank(3).dtype(DType::f32).memory();
    lse.size(0, s.batch, "B, the requests of q").size(1, s.s_q, "s_q of q");
    lse.size(2, s.heads, "H, the heads of q").non_overlapping();
  }
  check_scale(op, a.scale);
  check_outputs_apart(op, {{"out", a.out}, {"lse", a.lse}},
                      {{"q", a.q}, {"kv_cache", a.kv_cache}, {"block_table", a.block_table},
                       {"seq_lens", a.seq_lens}});
  return s;
}

namespace {

// kpool of the pooled indexer: 2..16 (GLM-5.3-Flash: 4). `zero_ok`: 0 selects the per-token indexer.
void check_kpool(std::string_view op, int kpool, bool zero_ok) {
  if ((zero_ok && kpool == 0) || (kpool >= kMinKpool && kpool <= kMaxKpool)) return;
  fail_argument(op, fmt::format("kpool is {}; expected {}{}..{} tokens per pool (GLM-5.3-Flash: 4, its "
                                "index_kpool). Set it from the model's index_kpool{}.",
                                kpool, zero_ok ? "0 (the per-token indexer) or " : "", kMinKpool, kMaxKpool,
                                zero_ok ? ", or 0 for a model without a pooled indexer" : ""));
}

IndexerShape validate_indexer_inputs(std::string_view op, const IndexerInputs& in) {
  IndexerShape s;
  check_kpool(op, in.kpool, true);
  ArgCheck q(op, "q", in.q, "[T, H_i, 128] e4m3 (with q_scale) or bf16");
  q.required().rank(3).dtype_in({DType::e4m3, DType::bf16}).memory();
  q.size(2, kIndexDim, "the index head dim");
  q.size_in(1, 1, kMaxSize, "H_i (index heads)", "Pass at least one index head.");
  q.vector_rows();
  s.tokens = in.q.size(0);
  s.heads = in.q.size(1);
  s.q_dtype = in.q.dtype;

  const LayoutText th("[T, H_i] = [{}, {}] f32", s.tokens, s.heads);
  ArgCheck qs(op, "q_scale", in.q_scale, s.q_dtype == DType::e4m3 ? th : LayoutText("absent (q is bf16)"));
  if (s.q_dtype == DType::e4m3) {
    qs.required().rank(2).dtype(DType::f32).memory();
    qs.size(0, s.tokens, "T, the tokens of q").size(1, s.heads, "H_i, the index heads of q");
  } else if (qs.present()) {
    qs.fail("is given with a bf16 q",
            "q_scale dequantizes e4m3 queries: drop it, or pass q as e4m3.");
  }

  ArgCheck w(op, "weights", in.weights, th);
  w.required().rank(2).dtype(DType::f32).memory();
  w.size(0, s.tokens, "T, the tokens of q").size(1, s.heads, "H_i, the index heads of q");

  const CacheLayout cache = check_indexer_cache(op, in.k_cache, in.kpool > 0);
  s.num_blocks = cache.num_blocks;
  s.kpool = in.kpool;
  s.pool_rows = cache.block_size;
  // Pooled: a block of the (token) block table holds kpool tokens per pool row.
  s.block_size = in.kpool > 0 ? in.kpool * cache.block_size : cache.block_size;
  if (s.block_size > kMaxSize) {
    fail_argument(op, fmt::format("k_cache has {} pool rows per block and kpool is {}: {} tokens per block, "
                                  "more than int32 positions address. Use smaller blocks.",
                                  cache.block_size, in.kpool, s.block_size));
  }

  check_block_table_arg(op, in.block_table);
  s.batch = in.block_table.size(0);
  s.max_blocks = in.block_table.size(1);
  check_i32_vector(op, "token_request", in.token_request, s.tokens, "T, the tokens of q", false);
  if (!in.token_request.defined() && s.batch < s.tokens) {
    fail_argument(op, fmt::format("block_table has {} rows but token_request is absent, so token "
                                  "t reads row t and {} rows are needed. Pass token_request "
                                  "(the block_table row of each token) or one row per token.",
                                  s.batch, s.tokens));
  }
  check_i32_vector(op, "visible_lens", in.visible_lens, s.tokens, "T, the tokens of q", true);
  return s;
}

void check_indexer_output_apart(std::string_view op, std::string_view name, const TensorView& out,
                                const IndexerInputs& in, const TensorView& out_lens = {}) {
  check_outputs_apart(op, {{name, out}, {"out_lens", out_lens}},
                      {{"q", in.q}, {"q_scale", in.q_scale}, {"weights", in.weights},
                       {"k_cache", in.k_cache}, {"block_table", in.block_table},
                       {"token_request", in.token_request}, {"visible_lens", in.visible_lens}});
}

}  // namespace

static IndexerShape shape_of(const IndexerTopkArgs& a) {
  constexpr std::string_view op = "indexer_topk";
  IndexerShape s = validate_indexer_inputs(op, a.in);
  ArgCheck idx(op, "indices", a.indices, LayoutText("[T, topk] = [{}, topk] i32", s.tokens));
  idx.required().rank(2).dtype(DType::i32).memory();
  idx.size(0, s.tokens, "T, the tokens of q");
  idx.size_in(1, 1, kMaxTopk, "topk", topk_fix());
  idx.non_overlapping();
  s.topk = a.indices.size(1);
  if (a.kind != IndexKind::logical && a.kind != IndexKind::physical) {
    fail_argument(op, fmt::format("kind is {}; expected IndexKind::logical or "
                                  "IndexKind::physical.",
                                  static_cast<int>(a.kind)));
  }
  if (!s.pooled()) {
    // The pool arguments mean nothing to the per-token indexer: refuse them rather than ignore them.
    if (a.pool_topk != 0 || a.select_tail || a.out_lens.defined()) {
      fail_argument(op, fmt::format("pool_topk = {}, select_tail = {}{} are arguments of the pooled indexer, "
                                    "but kpool is 0 (the per-token indexer). Set kpool (GLM-5.3-Flash: 4) for "
                                    "a pooled indexer, or drop them: the per-token indexer lists its valid "
                                    "entries first, so a row's length is its count of entries >= 0.",
                                    a.pool_topk, a.select_tail, a.out_lens.defined() ? ", out_lens given" : ""));
    }
  } else {
    if (a.pool_topk < 1 || a.pool_topk > kMaxTopk / s.kpool) {
      fail_argument(op, fmt::format("pool_topk is {}; expected 1..{} pools per query (topk / kpool; "
                                    "GLM-5.3-Flash: 512 = index_topk 2048 / kpool 4).",
                                    a.pool_topk, kMaxTopk / s.kpool));
    }
    s.pool_topk = a.pool_topk;
    s.select_tail = a.select_tail;
    const int64_t need = s.kpool * s.pool_topk + (s.select_tail ? s.kpool - 1 : 0);
    if (s.topk < need) {
      idx.fail(fmt::format("has {} columns, fewer than the {} positions a query may get (kpool {} x pool_topk "
                           "{}{})",
                           s.topk, need, s.kpool, s.pool_topk, s.select_tail ? fmt::format(" + {} tail", s.kpool - 1) : ""),
               fmt::format("Make indices at least {} columns wide (unused columns are -1; vLLM's 2176 are fine), "
                           "or lower pool_topk.",
                           need));
    }
    check_i32_vector(op, "out_lens", a.out_lens, s.tokens, "T, the tokens of q", false);
  }
  check_indexer_output_apart(op, "indices", a.indices, a.in, a.out_lens);
  return s;
}

static IndexerShape shape_of(const IndexerLogitsArgs& a) {
  constexpr std::string_view op = "indexer_logits";
  IndexerShape s = validate_indexer_inputs(op, a.in);
  ArgCheck lg(op, "logits", a.logits, LayoutText("[T, L] = [{}, L] f32", s.tokens));
  lg.required().rank(2).dtype(DType::f32).memory();
  lg.size(0, s.tokens, "T, the tokens of q").non_overlapping();
  s.logits_len = a.logits.size(1);
  check_indexer_output_apart(op, "logits", a.logits, a.in);
  return s;
}

namespace {

void check_scale_kind(std::string_view op, Fp8ScaleKind kind) {
  if (kind != Fp8ScaleKind::amax && kind != Fp8ScaleKind::pow2) {
    fail_argument(op, fmt::format("scale_kind is {}; expected Fp8ScaleKind::amax or "
                                  "Fp8ScaleKind::pow2.",
                                  static_cast<int>(kind)));
  }
}

}  // namespace

static KvStoreShape shape_of(const KvStoreArgs& a) {
  constexpr std::string_view op = "kv_store";
  KvStoreShape s;
  check_rope_dim(op, a.rope_dim);
  s.rope_dim = a.rope_dim;
  ArgCheck latent(op, "latent", a.latent, "[T, 512] bf16");
  latent.required().rank(2).dtype(DType::bf16).memory().size(1, kLatentDim, "the latent dim");
  latent.vector_rows();
  s.tokens = a.latent.size(0);
  if (a.rope_dim == kNoRopeDim) {
    if (a.rope.defined()) {
      fail_argument(op, fmt::format("rope is given but rope_dim is 0 (rows without rope): got rope = {}. "
                                    "Drop rope, or set rope_dim=64 to write rows with rope.",
                                    a.rope.describe()));
    }
  } else {
    ArgCheck rope(op, "rope", a.rope,
                  LayoutText("[T, 64] = [{}, 64] bf16 (absent only with rope_dim 0, a model without rope)",
                             s.tokens));
    rope.required().rank(2).dtype(DType::bf16).memory().size(0, s.tokens, "T, the tokens of latent");
    rope.size(1, kRopeDim, "the rope dim").vector_rows();
  }
  check_i32_vector(op, "slot_mapping", a.slot_mapping, s.tokens, "T, the tokens of latent", true);
  const CacheLayout cache = check_mla_cache(op, a.kv_cache, a.rope_dim);
  s.num_blocks = cache.num_blocks;
  s.block_size = cache.block_size;
  s.format = cache.format;
  check_scale_kind(op, a.scale_kind);
  // The cache is this op's output (written in place).
  check_outputs_apart(op, {{"kv_cache", a.kv_cache}},
                      {{"latent", a.latent}, {"rope", a.rope}, {"slot_mapping", a.slot_mapping}});
  return s;
}

static KvStoreShape shape_of(const IndexerKStoreArgs& a) {
  constexpr std::string_view op = "indexer_k_store";
  KvStoreShape s;
  ArgCheck k(op, "k", a.k, "[T, 128] bf16");
  k.required().rank(2).dtype(DType::bf16).memory().size(1, kIndexDim, "the index head dim");
  k.vector_rows();
  s.tokens = a.k.size(0);
  check_i32_vector(op, "slot_mapping", a.slot_mapping, s.tokens, "T, the tokens of k", true);
  const CacheLayout cache = check_indexer_cache(op, a.k_cache);
  s.num_blocks = cache.num_blocks;
  s.block_size = cache.block_size;
  check_scale_kind(op, a.scale_kind);
  check_outputs_apart(op, {{"k_cache", a.k_cache}}, {{"k", a.k}, {"slot_mapping", a.slot_mapping}});
  return s;
}

static PoolStoreShape shape_of(const IndexerPoolStoreArgs& a) {
  constexpr std::string_view op = "indexer_pool_store";
  PoolStoreShape s;
  check_kpool(op, a.kpool, false);
  s.kpool = a.kpool;
  ArgCheck k(op, "k", a.k, "[T, 128] bf16");
  k.required().rank(2).dtype(DType::bf16).memory().size(1, kIndexDim, "the index head dim");
  k.vector_rows();
  s.tokens = a.k.size(0);
  ArgCheck gate(op, "gate", a.gate, LayoutText("[T, 128] = [{}, 128] bf16 or f32", s.tokens));
  gate.required().rank(2).dtype_in({DType::bf16, DType::f32}).memory();
  gate.size(0, s.tokens, "T, the tokens of k").size(1, kIndexDim, "the index head dim");
  ArgCheck ape(op, "ape", a.ape, LayoutText("[kpool, 128] = [{}, 128] f32 or bf16", s.kpool));
  ape.required().rank(2).dtype_in({DType::f32, DType::bf16}).memory();
  ape.size(0, s.kpool, "kpool, the tokens per pool").size(1, kIndexDim, "the index head dim");
  check_i32_vector(op, "positions", a.positions, s.tokens, "T, the tokens of k", true);
  check_i32_vector(op, "token_request", a.token_request, s.tokens, "T, the tokens of k", false);
  check_block_table_arg(op, a.block_table);
  s.batch = a.block_table.size(0);
  s.max_blocks = a.block_table.size(1);
  if (!a.token_request.defined() && s.batch < s.tokens) {
    fail_argument(op, fmt::format("block_table has {} rows but token_request is absent, so token t is of "
                                  "request t and {} rows are needed. Pass token_request (the block_table "
                                  "and pool_state row of each token) or one row per token.",
                                  s.batch, s.tokens));
  }
  const CacheLayout cache = check_indexer_cache(op, a.k_cache, true);
  s.num_blocks = cache.num_blocks;
  s.pool_rows = cache.block_size;
  if (s.block_size() > kMaxSize) {
    fail_argument(op, fmt::format("k_cache has {} pool rows per block and kpool is {}: {} tokens per block, "
                                  "more than int32 positions address. Use smaller blocks.",
                                  s.pool_rows, s.kpool, s.block_size()));
  }
  ArgCheck st(op, "pool_state", a.pool_state,
              LayoutText("[B, kpool - 1, 2, 128] = [{}, {}, 2, 128] f32 (the k and gate of each request's "
                         "incomplete pool)",
                         s.batch, s.kpool - 1));
  st.required().rank(4).dtype(DType::f32).memory();
  st.size(0, s.batch, "B, the rows of block_table").size(1, s.kpool - 1, "kpool - 1, the slots before a pool's last");
  st.size(2, 2, "k and gate").size(3, kIndexDim, "the index head dim");
  st.non_overlapping();
  check_scale_kind(op, a.scale_kind);
  // Both the pages and the state are written in place.
  check_outputs_apart(op, {{"k_cache", a.k_cache}, {"pool_state", a.pool_state}},
                      {{"k", a.k}, {"gate", a.gate}, {"ape", a.ape}, {"positions", a.positions},
                       {"token_request", a.token_request}, {"block_table", a.block_table}});
  return s;
}

static LogicalToSlotsShape shape_of(const LogicalToSlotsArgs& a) {
  constexpr std::string_view op = "logical_to_slots";
  LogicalToSlotsShape s;
  ArgCheck pos(op, "positions", a.positions, "[T, K] i32 logical positions");
  pos.required().rank(2).dtype(DType::i32).memory();
  s.tokens = a.positions.size(0);
  s.width = a.positions.size(1);
  check_block_table_arg(op, a.block_table);
  s.batch = a.block_table.size(0);
  s.max_blocks = a.block_table.size(1);
  check_i32_vector(op, "token_request", a.token_request, s.tokens, "T, the rows of positions",
                   false);
  if (!a.token_request.defined() && s.batch < s.tokens) {
    fail_argument(op, fmt::format("block_table has {} rows but token_request is absent, so row t "
                                  "of positions reads row t and {} rows are needed. Pass "
                                  "token_request or one block_table row per token.",
                                  s.batch, s.tokens));
  }
  ArgCheck slots(op, "slots", a.slots, LayoutText("[T, K] = [{}, {}] i32", s.tokens, s.width));
  slots.required().rank(2).dtype(DType::i32).memory();
  slots.size(0, s.tokens, "T, the rows of positions").size(1, s.width, "K, the columns of positions");
  slots.non_overlapping();
  if (a.block_size < 1) {
    fail_argument(op, fmt::format("block_size is {}; expected >= 1: the tokens per cache block "
                                  "(the kv_cache's dimension 1).",
                                  a.block_size));
  }
  check_outputs_apart(op, {{"slots", a.slots}},
                      {{"positions", a.positions}, {"block_table", a.block_table},
                       {"token_request", a.token_request}});
  return s;
}

void check_topk(std::string_view op, int64_t topk, std::string_view as_written) {
  if (as_written.empty() && topk >= 1 && topk <= kMaxTopk) return;
  fail_argument(op, fmt::format("topk is {} (the columns of indices). {}",
                                as_written.empty() ? fmt::format("{}", topk) : std::string(as_written),
                                topk_fix()));
}

void check_logical_sparse_mla(const LogicalToSlotsArgs& l, const SparseMlaArgs& a) {
  check_outputs_apart("sparse_mla", {{"out", a.out}, {"lse", a.lse}, {"slots", l.slots}},
                      {{"q", a.q}, {"q_rope", a.q_rope}, {"kv_cache", a.kv_cache},
                       {"indices", l.positions}, {"block_table", l.block_table},
                       {"token_request", l.token_request}, {"topk_lens", a.topk_lens}});
}

namespace {

std::atomic<uint64_t> validations{0};

// The problem of a call: its shape, its arguments and their one device.
template <class Args>
auto problem_of(std::string_view op, const Args& a) {
  const auto shape = shape_of(a);
  ProblemOf<Args, std::remove_const_t<decltype(shape)>> p;
  static_cast<std::remove_const_t<decltype(shape)>&>(p) = shape;
  p.args = &a;
  p.device = detail::common_device_of(op, a);
  validations.fetch_add(1, std::memory_order_relaxed);
  return p;
}

}  // namespace

SparseMlaProblem validate(const SparseMlaArgs& a) { return problem_of("sparse_mla", a); }
MlaDecodeProblem validate(const MlaDecodeArgs& a) { return problem_of("mla_decode", a); }
IndexerTopkProblem validate(const IndexerTopkArgs& a) { return problem_of("indexer_topk", a); }
IndexerLogitsProblem validate(const IndexerLogitsArgs& a) { return problem_of("indexer_logits", a); }
KvStoreProblem validate(const KvStoreArgs& a) { return problem_of("kv_store", a); }
IndexerKStoreProblem validate(const IndexerKStoreArgs& a) { return problem_of("indexer_k_store", a); }
LogicalToSlotsProblem validate(const LogicalToSlotsArgs& a) { return problem_of("logical_to_slots", a); }
IndexerPoolStoreProblem validate(const IndexerPoolStoreArgs& a) { return problem_of("indexer_pool_store", a); }

Problem make_problem(const OpArgs& args) {
  return std::visit([](const auto& a) -> Problem { return validate(a); }, args);
}

uint64_t detail::validation_count() { return validations.load(std::memory_order_relaxed); }

}  // namespace latte
