// The validation layer, table-driven: each case breaks one thing in an otherwise valid call and
// names the fragments its message must contain. Shape/dtype/stride/format cases must be caught
// by validate() itself (no data read); value cases only in check mode.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "latte/error.hpp"
#include "latte/validate.hpp"
#include "valid_calls.hpp"

namespace latte::testing {
namespace {

// Where a case's error must come from.
enum class Stage {
  validate,    // latte::validate / common_device, before any data is read
  kernel,      // cpu.reference's own rule (device kind)
  check_mode,  // only with RunContext::check_indices; without it the call runs
};

struct BadCase {
  std::string name;
  Stage stage;
  std::function<OpArgs(const ValidCalls&)> make;
  std::vector<std::string> fragments;
};

TensorView with_shape(TensorView t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(t.data, t.dtype, shape, t.device);
}

TensorView with_strides(TensorView t, std::initializer_list<int64_t> strides) {
  int d = 0;
  for (int64_t s : strides) t.strides[static_cast<std::size_t>(d++)] = s;
  return t;
}

TensorView with_dtype(TensorView t, DType dtype) {
  t.dtype = dtype;
  return t;
}

// `t`'s shape and strides over the memory of `memory` (an alias), `byte_offset` bytes in.
TensorView over(TensorView t, const TensorView& memory, int64_t byte_offset = 0) {
  t.data = static_cast<unsigned char*>(memory.data) + byte_offset;
  return t;
}

TensorView on_cuda(TensorView t) {
  t.device = Device{DeviceKind::cuda, 0};
  return t;
}

std::vector<BadCase> bad_cases() {
  using C = const ValidCalls&;
  std::vector<BadCase> cases = {
      // ---- sparse_mla ----
      {"q_absent", Stage::validate, [](C c) { auto a = c.sparse_mla(); a.q = {}; return OpArgs(a); },
       {"sparse_mla: q is absent", "Pass q"}},
      {"q_rank_2", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.q = with_shape(a.q, {8, 576}); return OpArgs(a); },
       {"sparse_mla: q has rank 2", "bf16[8, 576]", "expected [T, H, 576] bf16"}},
      {"q_dtype_f32", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.q = with_dtype(a.q, DType::f32); return OpArgs(a); },
       {"q has dtype f32", "Convert q to bf16"}},
      {"q_head_dim_512", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.q = with_shape(a.q, {4, 2, 512}); return OpArgs(a); },
       {"q has 512 in dimension 2, not 576"}},
      {"q_rope_with_576_q", Stage::validate,
       [](C c) {
         auto a = c.sparse_mla();
         a.q_rope = with_shape(a.q, {4, 2, 64});  // any [T, H, 64] bf16 memory
         return OpArgs(a);
       },
       {"q has 576 in dimension 2, not 512", "q_rope holds the 64 rope dims"}},
      {"q_rope_wrong_dim", Stage::validate,
       [](C c) {
         auto a = c.sparse_mla();
         a.q = with_shape(a.q, {4, 2, 512});
         a.q_rope = with_shape(c.q, {4, 2, 32});
         return OpArgs(a);
       },
       {"q_rope has 32 in dimension 2, not 64", "[T, H, 64] = [4, 2, 64] bf16"}},
      {"q_rope_wrong_heads", Stage::validate,
       [](C c) {
         auto a = c.sparse_mla();
         a.q = with_shape(a.q, {4, 2, 512});
         a.q_rope = with_shape(c.q, {4, 1, 64});
         return OpArgs(a);
       },
       {"q_rope has 1 in dimension 1, not 2"}},
      {"q_rope_on_another_device", Stage::validate,
       [](C c) {
         auto a = c.sparse_mla();
         a.q = with_shape(a.q, {4, 2, 512});
         a.q_rope = with_shape(c.q, {4, 2, 64});
         for (TensorView* t : {&a.q, &a.kv_cache, &a.indices, &a.out, &a.lse}) *t = on_cuda(*t);
         return OpArgs(a);
       },
       {"different devices", "q is on cuda:0 but q_rope is on cpu"}},
      {"q_last_stride_2", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.q = with_strides(a.q, {2304, 1152, 2}); return OpArgs(a); },
       {"q has stride 2 in its last dimension", "contiguous"}},
      {"q_unaligned", Stage::validate,
       [](C c) {
         auto a = c.sparse_mla();
         a.q.data = static_cast<uint16_t*>(a.q.data) + 1;
         return OpArgs(a);
       },
       {"q data pointer", "is not 16-byte aligned"}},
      {"q_row_stride_not_16_bytes", Stage::validate,
       [](C c) {
         auto a = c.sparse_mla();
         a.q = with_shape(a.q, {2, 2, 576});
         a.q = with_strides(a.q, {1156, 578, 1});
         a.indices = with_shape(a.indices, {2, 3});
         a.out = with_shape(a.out, {2, 2, 512});
         a.lse = with_shape(a.lse, {2, 2});
         return OpArgs(a);
       },
       {"q stride 1156 of dimension 0 is 2312 bytes, not a multiple of 16"}},
      {"q_null_data", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.q.data = nullptr; return OpArgs(a); },
       {"q has a null data pointer"}},
      {"q_negative_stride", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.q = with_strides(a.q, {-1152, 576, 1}); return OpArgs(a); },
       {"q has a negative stride in dimension 0"}},
      {"cache_dim_560", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.kv_cache = with_shape(a.kv_cache, {4, 4, 560}); return OpArgs(a); },
       {"kv_cache has 560 bf16 values per token, which is no cache format", "656 u8"}},
      {"cache_u8_576", Stage::validate,
       [](C c) {
         auto a = c.sparse_mla();
         a.kv_cache = with_shape(with_dtype(a.kv_cache, DType::u8), {4, 4, 576});
         return OpArgs(a);
       },
       {"kv_cache has 576 u8 values per token"}},
      {"cache_e4m3", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.kv_cache = with_dtype(c.fp8_cache, DType::e4m3); return OpArgs(a); },
       {"kv_cache has dtype e4m3", "as u8 bytes"}},
      {"cache_rank_2", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.kv_cache = with_shape(a.kv_cache, {16, 576}); return OpArgs(a); },
       {"kv_cache has rank 2", "[num_blocks, block_size, 576]"}},
      {"cache_too_many_slots", Stage::validate,
       [](C c) {
         auto a = c.sparse_mla();
         a.kv_cache = with_shape(a.kv_cache, {int64_t{1} << 22, 1024, 576});
         return OpArgs(a);
       },
       {"kv_cache has 4194304 x 1024", "more than int32 slot indices can address"}},
      {"q_sizes_overflow", Stage::validate,
       [](C c) {
         auto a = c.sparse_mla();
         a.q = with_shape(a.q, {int64_t{1} << 40, int64_t{1} << 20, 576});
         return OpArgs(a);
       },
       {"q is too large: its sizes and strides overflow 64-bit offsets"}},
      {"indices_dtype_f32", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.indices = with_dtype(a.indices, DType::f32); return OpArgs(a); },
       {"indices has dtype f32", "Convert indices to i32"}},
      {"indices_rows", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.indices = with_shape(a.indices, {3, 3}); return OpArgs(a); },
       {"indices has 3 in dimension 0, not 4 (T, the tokens of q)"}},
      {"topk_over_limit", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.indices = with_shape(a.indices, {4, 65537}); return OpArgs(a); },
       {"indices has topk = 65537 in dimension 1, outside 1..65536"}},
      {"topk_zero", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.indices = with_shape(a.indices, {4, 0}); return OpArgs(a); },
       {"topk = 0", "outside 1..65536"}},
      {"out_dim_576", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.out = with_shape(a.out, {4, 2, 576}); return OpArgs(a); },
       {"out has 576 in dimension 2, not 512"}},
      {"out_overlapping", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.out = with_strides(a.out, {512, 0, 1}); return OpArgs(a); },
       {"out overlaps itself", "stride 0 of dimension 1"}},
      {"lse_rank_1", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.lse = with_shape(a.lse, {8}); return OpArgs(a); },
       {"lse has rank 1", "absent or [T, H] = [4, 2] f32"}},
      {"scale_zero", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.scale = 0.0f; return OpArgs(a); },
       {"sparse_mla: scale is 0", "0.0625"}},
      {"mixed_devices", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.indices = on_cuda(a.indices); return OpArgs(a); },
       {"different devices", "q is on cpu but indices is on cuda:0"}},
      {"cuda_tensors_on_cpu_backend", Stage::kernel,
       [](C c) {
         auto a = c.sparse_mla();
         for (TensorView* t : {&a.q, &a.kv_cache, &a.indices, &a.out, &a.lse}) *t = on_cuda(*t);
         return OpArgs(a);
       },
       {"runs on cpu", "the tensors are on cuda:0", "Copy the tensors to the kernel's device"}},
      // An output that shares memory with an input or with the other output.
      {"out_aliases_kv_cache", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.out = over(a.out, c.bf16_cache); return OpArgs(a); },
       {"sparse_mla: out shares memory with kv_cache", "bf16[4, 2, 512]", "bf16[4, 4, 576]",
        "Pass as out a tensor that does not share memory with kv_cache."}},
      {"out_overlaps_end_of_q", Stage::validate,
       [](C c) {
         auto a = c.sparse_mla();
         a.out = over(a.out, c.q, c.q.view().nbytes() - 16);  // out's first 8 values are q's last 8
         return OpArgs(a);
       },
       {"sparse_mla: out shares memory with q"}},
      {"out_aliases_q_rope", Stage::validate,
       [](C c) {
         auto a = c.sparse_mla();
         a.q = with_strides(with_shape(a.q, {4, 2, 512}), {1152, 576, 1});
         a.q_rope = with_strides(over(with_shape(a.q, {4, 2, 64}), c.out, 0), {128, 64, 1});
         return OpArgs(a);
       },
       {"sparse_mla: out shares memory with q_rope"}},
      {"lse_aliases_indices", Stage::validate,
       [](C c) {
         auto a = c.sparse_mla();
         a.lse = over(with_shape(a.lse, {4, 2}), c.indices);
         return OpArgs(a);
       },
       {"sparse_mla: lse shares memory with indices"}},
      {"lse_aliases_out", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.lse = over(a.lse, c.out, 64); return OpArgs(a); },
       {"sparse_mla: out shares memory with lse", "Pass as out a tensor that does not share memory with lse"}},
      // ---- mla_decode ----
      {"decode_out_aliases_q", Stage::validate,
       [](C c) { auto a = c.mla_decode(); a.out = over(a.out, c.dq); return OpArgs(a); },
       {"mla_decode: out shares memory with q"}},
      {"decode_lse_aliases_seq_lens", Stage::validate,
       [](C c) { auto a = c.mla_decode(); a.lse = over(a.lse, c.seq_lens); return OpArgs(a); },
       {"mla_decode: lse shares memory with seq_lens"}},
      {"decode_out_aliases_kv_cache", Stage::validate,
       [](C c) { auto a = c.mla_decode(); a.out = over(a.out, c.fp8_cache, 1024); return OpArgs(a); },
       {"mla_decode: out shares memory with kv_cache"}},
      {"s_q_5", Stage::validate,
       [](C c) {
         auto a = c.mla_decode();
         a.q = with_shape(a.q, {2, 5, 2, 576});
         return OpArgs(a);
       },
       {"mla_decode: q has s_q (query tokens per request) = 5", "outside 1..4"}},
      {"decode_block_table_rows", Stage::validate,
       [](C c) { auto a = c.mla_decode(); a.block_table = with_shape(a.block_table, {1, 2}); return OpArgs(a); },
       {"block_table has 1 in dimension 0, not 2"}},
      {"decode_seq_lens_dtype", Stage::validate,
       [](C c) { auto a = c.mla_decode(); a.seq_lens = with_dtype(a.seq_lens, DType::f32); return OpArgs(a); },
       {"seq_lens has dtype f32"}},
      {"decode_out_s_q", Stage::validate,
       [](C c) { auto a = c.mla_decode(); a.out = with_shape(a.out, {2, 2, 2, 512}); return OpArgs(a); },
       {"out has 2 in dimension 1, not 1 (s_q of q)"}},
      // ---- indexer ----
      {"indexer_missing_q_scale", Stage::validate,
       [](C c) { auto a = c.indexer_topk(); a.in.q_scale = {}; return OpArgs(a); },
       {"indexer_topk: q_scale is absent"}},
      {"indexer_bf16_q_with_scale", Stage::validate,
       [](C c) {
         auto a = c.indexer_topk();
         a.in.q = with_shape(with_dtype(a.in.q, DType::bf16), {4, 2, 128});
         return OpArgs(a);
       },
       {"q_scale is given with a bf16 q"}},
      {"indexer_q_dtype_f32", Stage::validate,
       [](C c) { auto a = c.indexer_logits(); a.in.q = with_dtype(a.in.q, DType::f32); return OpArgs(a); },
       {"indexer_logits: q has dtype f32", "e4m3 or bf16"}},
      {"indexer_k_cache_128", Stage::validate,
       [](C c) { auto a = c.indexer_topk(); a.in.k_cache = with_shape(a.in.k_cache, {4, 4, 128}); return OpArgs(a); },
       {"k_cache has 128 in dimension 2, not 132"}},
      {"indexer_page_stride", Stage::validate,
       [](C c) { auto a = c.indexer_topk(); a.in.k_cache = with_shape(a.in.k_cache, {4, 3, 132}); return OpArgs(a); },
       {"k_cache page stride 396 bytes is not a multiple of 16", "multiple of 4"}},
      {"indexer_weights_heads", Stage::validate,
       [](C c) { auto a = c.indexer_topk(); a.in.weights = with_shape(a.in.weights, {4, 1}); return OpArgs(a); },
       {"weights has 1 in dimension 1, not 2"}},
      {"indexer_rows_without_token_request", Stage::validate,
       [](C c) { auto a = c.indexer_topk(); a.in.block_table = with_shape(a.in.block_table, {2, 2}); return OpArgs(a); },
       {"block_table has 2 rows but token_request is absent", "4 rows are needed"}},
      {"indexer_topk_cols_over_limit", Stage::validate,
       [](C c) { auto a = c.indexer_topk(); a.indices = with_shape(a.indices, {4, 70000}); return OpArgs(a); },
       {"indexer_topk: indices has topk = 70000"}},
      {"indices_aliases_block_table", Stage::validate,
       [](C c) {
         auto a = c.indexer_topk();
         a.indices = over(with_shape(a.indices, {4, 2}), c.iblock_table);
         return OpArgs(a);
       },
       {"indexer_topk: indices shares memory with block_table",
        "Pass as indices a tensor that does not share memory with block_table."}},
      {"logits_aliases_weights", Stage::validate,
       [](C c) {
         auto a = c.indexer_logits();
         a.logits = over(with_shape(a.logits, {4, 2}), c.iweights);
         return OpArgs(a);
       },
       {"indexer_logits: logits shares memory with weights"}},
      {"logits_aliases_q_scale", Stage::validate,
       [](C c) {
         auto a = c.indexer_logits();
         a.logits = over(with_shape(a.logits, {4, 2}), c.iq_scale);
         return OpArgs(a);
       },
       {"indexer_logits: logits shares memory with q_scale"}},
      // ---- cache writes and slots ----
      {"kv_store_latent_inside_cache", Stage::validate,
       [](C c) { auto a = c.kv_store(); a.latent = over(a.latent, c.fp8_cache, 656 * 4); return OpArgs(a); },
       {"kv_store: kv_cache shares memory with latent",
        "Pass as kv_cache a tensor that does not share memory with latent."}},
      {"kv_store_rope_inside_cache", Stage::validate,
       [](C c) { auto a = c.kv_store(); a.rope = over(a.rope, c.fp8_cache); return OpArgs(a); },
       {"kv_store: kv_cache shares memory with rope"}},
      {"indexer_k_store_k_inside_cache", Stage::validate,
       [](C c) { auto a = c.indexer_k_store(); a.k = over(a.k, c.k_cache, 528); return OpArgs(a); },
       {"indexer_k_store: k_cache shares memory with k"}},
      {"logical_to_slots_in_place", Stage::validate,
       [](C c) { auto a = c.logical_to_slots(); a.slots = a.positions; return OpArgs(a); },
       {"logical_to_slots: slots shares memory with positions"}},
      {"kv_store_latent_576", Stage::validate,
       [](C c) { auto a = c.kv_store(); a.latent = with_shape(a.latent, {4, 576}); return OpArgs(a); },
       {"kv_store: latent has 576 in dimension 1, not 512"}},
      {"kv_store_slot_mapping_length", Stage::validate,
       [](C c) { auto a = c.kv_store(); a.slot_mapping = with_shape(a.slot_mapping, {3}); return OpArgs(a); },
       {"slot_mapping has 3 in dimension 0, not 4"}},
      {"indexer_k_store_k_dtype", Stage::validate,
       [](C c) { auto a = c.indexer_k_store(); a.k = with_dtype(a.k, DType::f32); return OpArgs(a); },
       {"indexer_k_store: k has dtype f32"}},
      {"logical_to_slots_block_size", Stage::validate,
       [](C c) { auto a = c.logical_to_slots(); a.block_size = 0; return OpArgs(a); },
       {"logical_to_slots: block_size is 0"}},
      // ---- MLA without rope (rope_dim 0) and topk_lens ----
      {"rope_dim_32", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.rope_dim = 32; return OpArgs(a); },
       {"sparse_mla: rope_dim is 32; expected 64", "or 0 (MLA without rope", "qk_rope_head_dim"}},
      {"nope_with_q_rope", Stage::validate,
       [](C c) { auto a = c.sparse_mla_nope(); a.q_rope = with_shape(c.q, {4, 2, 64}); return OpArgs(a); },
       {"sparse_mla: q_rope is given but rope_dim is 0", "Drop q_rope", "or set rope_dim=64"}},
      {"nope_with_576_q", Stage::validate,
       [](C c) { auto a = c.sparse_mla_nope(); a.q = c.q; return OpArgs(a); },
       {"q has 576 in dimension 2 but rope_dim is 0", "pass q[..., :512]", "rope_dim=64"}},
      {"nope_with_bf16_576_cache", Stage::validate,
       [](C c) { auto a = c.sparse_mla_nope(); a.kv_cache = c.bf16_cache; return OpArgs(a); },
       {"kv_cache has 576 bf16 values per token, a row with rope, but rope_dim is 0",
        "[num_blocks, block_size, 512] bf16", "rope_dim=64"}},
      {"nope_with_u8_600_cache", Stage::validate,
       [](C c) {
         auto a = c.sparse_mla_nope();
         a.kv_cache = with_shape(c.fp8_cache, {4, 4, 600});
         return OpArgs(a);
       },
       {"kv_cache has 600 u8 values per token, which is no cache format without rope",
        "528 u8 bytes (512 e4m3 + 4 f32 scales), or 656 u8 bytes"}},
      {"rope_with_bf16_512_cache", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.kv_cache = c.nope_bf16_cache; return OpArgs(a); },
       {"kv_cache has 512 bf16 values per token, a row without rope, but rope_dim is 64",
        "set rope_dim=0"}},
      {"rope_with_u8_528_cache", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.kv_cache = c.nope_fp8_cache; return OpArgs(a); },
       {"kv_cache has 528 u8 values per token, a row without rope, but rope_dim is 64"}},
      {"rope_q_512_without_q_rope", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.q = c.nope_q; return OpArgs(a); },
       {"q has 512 in dimension 2, not 576 (rope_dim is 64 and q_rope is absent)", "as q_rope",
        "set rope_dim=0"}},
      {"topk_lens_length", Stage::validate,
       [](C c) { auto a = c.sparse_mla_nope(); a.topk_lens = with_shape(c.topk_lens, {3}); return OpArgs(a); },
       {"sparse_mla: topk_lens has 3 in dimension 0, not 4", "[4] i32"}},
      {"topk_lens_dtype", Stage::validate,
       [](C c) { auto a = c.sparse_mla(); a.topk_lens = with_dtype(c.topk_lens, DType::f32); return OpArgs(a); },
       {"sparse_mla: topk_lens has dtype f32"}},
      {"out_over_topk_lens", Stage::validate,
       [](C c) { auto a = c.sparse_mla_nope(); a.lse = over(a.lse, c.topk_lens); return OpArgs(a); },
       {"sparse_mla: lse shares memory with topk_lens"}},
      {"kv_store_nope_with_rope", Stage::validate,
       [](C c) { auto a = c.kv_store_nope(); a.rope = c.rope; return OpArgs(a); },
       {"kv_store: rope is given but rope_dim is 0", "Drop rope, or set rope_dim=64"}},
      {"kv_store_rope_absent", Stage::validate,
       [](C c) { auto a = c.kv_store(); a.rope = {}; return OpArgs(a); },
       {"kv_store: rope is absent", "absent only with rope_dim 0"}},
      {"kv_store_nope_into_576_bf16", Stage::validate,
       [](C c) { auto a = c.kv_store_nope(); a.kv_cache = c.bf16_cache; return OpArgs(a); },
       {"kv_store: kv_cache has 576 bf16 values per token, a row with rope, but rope_dim is 0"}},
      {"kv_store_rope_dim_minus_1", Stage::validate,
       [](C c) { auto a = c.kv_store(); a.rope_dim = -1; return OpArgs(a); },
       {"kv_store: rope_dim is -1; expected 64"}},
      // ---- values: check mode only ----
      {"slot_index_out_of_range", Stage::check_mode,
       [](C c) {
         auto a = c.sparse_mla();
         c.indices.at<int32_t>(1 * 3 + 2) = 1000;
         return OpArgs(a);
       },
       {"sparse_mla: indices[1, 2] = 1000 is out of range", "allowed -1 (none) or 0..15"}},
      {"slot_index_minus_2", Stage::check_mode,
       [](C c) {
         auto a = c.sparse_mla();
         c.indices.at<int32_t>(0) = -2;
         return OpArgs(a);
       },
       {"indices[0, 0] = -2"}},
      {"block_table_too_short", Stage::check_mode,
       [](C c) {
         auto a = c.mla_decode();
         c.seq_lens.at<int32_t>(1) = 9;
         return OpArgs(a);
       },
       {"mla_decode: seq_lens[1] = 9 is out of range; allowed 1..8", "max_blocks * block_size"}},
      {"seq_len_below_s_q", Stage::check_mode,
       [](C c) {
         auto a = c.mla_decode();
         c.seq_lens.at<int32_t>(0) = 0;
         return OpArgs(a);
       },
       {"seq_lens[0] = 0 is out of range; allowed 1..8"}},
      {"block_id_out_of_range", Stage::check_mode,
       [](C c) {
         auto a = c.mla_decode();
         c.block_table.at<int32_t>(1) = 99;
         return OpArgs(a);
       },
       {"mla_decode: block_table[0, 1] = 99 is out of range", "block ids 0..3"}},
      {"slot_mapping_out_of_range", Stage::check_mode,
       [](C c) {
         auto a = c.kv_store();
         c.slot_mapping.at<int32_t>(2) = 9999;
         return OpArgs(a);
       },
       {"kv_store: slot_mapping[2] = 9999 is out of range; allowed -1..15"}},
      {"visible_len_beyond_block_table", Stage::check_mode,
       [](C c) {
         auto a = c.indexer_logits();
         c.visible_lens.at<int32_t>(3) = 9;
         return OpArgs(a);
       },
       {"indexer_logits: visible_lens[3] = 9 is out of range; allowed 0..8"}},
      {"topk_len_above_topk", Stage::check_mode,
       [](C c) {
         auto a = c.sparse_mla_nope();
         c.topk_lens.at<int32_t>(1) = 4;
         return OpArgs(a);
       },
       {"sparse_mla: topk_lens[1] = 4 is out of range; allowed 0..3"}},
      {"topk_len_negative", Stage::check_mode,
       [](C c) {
         auto a = c.sparse_mla();
         a.topk_lens = c.topk_lens;
         c.topk_lens.at<int32_t>(0) = -1;
         return OpArgs(a);
       },
       {"sparse_mla: topk_lens[0] = -1 is out of range; allowed 0..3"}},
      {"slot_index_out_of_range_within_topk_len", Stage::check_mode,
       [](C c) {
         auto a = c.sparse_mla_nope();
         c.indices.at<int32_t>(3 * 3 + 1) = 16;  // row 3 uses 2 columns: column 1 is checked
         return OpArgs(a);
       },
       {"sparse_mla: indices[3, 1] = 16 is out of range"}},
      // ---- the pooled indexer ----
      {"pool_store_kpool_0", Stage::validate,
       [](C c) { auto a = c.pool_store(); a.kpool = 0; return OpArgs(a); },
       {"indexer_pool_store: kpool is 0; expected 2..16 tokens per pool", "index_kpool"}},
      {"pool_store_kpool_17", Stage::validate,
       [](C c) { auto a = c.pool_store(); a.kpool = 17; return OpArgs(a); },
       {"indexer_pool_store: kpool is 17; expected 2..16"}},
      {"pool_store_k_dtype", Stage::validate,
       [](C c) { auto a = c.pool_store(); a.k = with_dtype(a.k, DType::f32); return OpArgs(a); },
       {"indexer_pool_store: k has dtype f32"}},
      {"pool_store_gate_dtype", Stage::validate,
       [](C c) { auto a = c.pool_store(); a.gate = with_dtype(a.gate, DType::i32); return OpArgs(a); },
       {"indexer_pool_store: gate has dtype i32", "bf16 or f32"}},
      {"pool_store_gate_rows", Stage::validate,
       [](C c) { auto a = c.pool_store(); a.gate = with_shape(a.gate, {3, 128}); return OpArgs(a); },
       {"indexer_pool_store: gate has 3 in dimension 0, not 4 (T, the tokens of k)"}},
      {"pool_store_ape_rows", Stage::validate,
       [](C c) { auto a = c.pool_store(); a.ape = with_shape(a.ape, {1, 128}); return OpArgs(a); },
       {"indexer_pool_store: ape has 1 in dimension 0, not 2 (kpool, the tokens per pool)"}},
      {"pool_store_ape_dtype", Stage::validate,
       [](C c) { auto a = c.pool_store(); a.ape = with_dtype(a.ape, DType::e4m3); return OpArgs(a); },
       {"indexer_pool_store: ape has dtype e4m3", "f32 or bf16"}},
      {"pool_store_positions_absent", Stage::validate,
       [](C c) { auto a = c.pool_store(); a.positions = {}; return OpArgs(a); },
       {"indexer_pool_store: positions is absent"}},
      {"pool_store_token_request_length", Stage::validate,
       [](C c) { auto a = c.pool_store(); a.token_request = with_shape(c.slot_mapping, {3}); return OpArgs(a); },
       {"indexer_pool_store: token_request has 3 in dimension 0, not 4"}},
      {"pool_store_too_few_rows", Stage::validate,
       [](C c) {
         auto a = c.pool_store();
         a.block_table = with_shape(a.block_table, {2, 2});
         a.pool_state = with_shape(a.pool_state, {2, 1, 2, 128});
         return OpArgs(a);
       },
       {"indexer_pool_store: block_table has 2 rows but token_request is absent", "Pass token_request"}},
      {"pool_store_cache_width", Stage::validate,
       [](C c) { auto a = c.pool_store(); a.k_cache = with_shape(a.k_cache, {4, 4, 128}); return OpArgs(a); },
       {"indexer_pool_store: k_cache has 128 in dimension 2, not 132", "block_size / kpool"}},
      {"pool_store_page_stride", Stage::validate,
       [](C c) { auto a = c.pool_store(); a.k_cache = with_shape(a.k_cache, {4, 2, 132}); return OpArgs(a); },
       {"indexer_pool_store: k_cache page stride 264 bytes is not a multiple of 16",
        "pool rows (block_size / kpool) are a multiple of 4"}},
      {"pool_store_state_slots", Stage::validate,
       [](C c) { auto a = c.pool_store(); a.pool_state = with_shape(a.pool_state, {4, 3, 2, 128}); return OpArgs(a); },
       {"indexer_pool_store: pool_state has 3 in dimension 1, not 1 (kpool - 1", "[B, kpool - 1, 2, 128]"}},
      {"pool_store_state_rows", Stage::validate,
       [](C c) { auto a = c.pool_store(); a.pool_state = with_shape(a.pool_state, {2, 1, 2, 128}); return OpArgs(a); },
       {"indexer_pool_store: pool_state has 2 in dimension 0, not 4 (B, the rows of block_table)"}},
      {"pool_store_state_dtype", Stage::validate,
       [](C c) { auto a = c.pool_store(); a.pool_state = with_dtype(a.pool_state, DType::bf16); return OpArgs(a); },
       {"indexer_pool_store: pool_state has dtype bf16", "f32"}},
      {"pool_store_state_absent", Stage::validate,
       [](C c) { auto a = c.pool_store(); a.pool_state = {}; return OpArgs(a); },
       {"indexer_pool_store: pool_state is absent"}},
      {"pool_store_state_over_k", Stage::validate,
       [](C c) { auto a = c.pool_store(); a.pool_state = over(a.pool_state, c.gate); return OpArgs(a); },
       {"indexer_pool_store: pool_state shares memory with gate"}},
      {"pool_store_k_inside_cache", Stage::validate,
       [](C c) { auto a = c.pool_store(); a.k = over(a.k, c.pool_cache); return OpArgs(a); },
       {"indexer_pool_store: k_cache shares memory with k"}},
      {"pool_store_scale_kind", Stage::validate,
       [](C c) { auto a = c.pool_store(); a.scale_kind = static_cast<Fp8ScaleKind>(7); return OpArgs(a); },
       {"indexer_pool_store: scale_kind is 7"}},
      {"pool_store_on_cuda", Stage::validate,
       [](C c) { auto a = c.pool_store(); a.pool_state = on_cuda(a.pool_state); return OpArgs(a); },
       {"indexer_pool_store: tensors are on different devices", "pool_state is on cuda:0"}},
      {"pool_store_position_out_of_range", Stage::check_mode,
       [](C c) { auto a = c.pool_store(); c.token_positions.at<int32_t>(1) = 16; return OpArgs(a); },
       {"indexer_pool_store: positions[1] = 16 is out of range; allowed -1..15", "-1 (skip)"}},
      {"pool_store_position_below_minus_1", Stage::check_mode,
       [](C c) { auto a = c.pool_store(); c.token_positions.at<int32_t>(3) = -5; return OpArgs(a); },
       {"indexer_pool_store: positions[3] = -5 is out of range"}},
      {"pool_store_token_request_out_of_range", Stage::check_mode,
       [](C c) {
         auto a = c.pool_store();
         a.token_request = c.slot_mapping;  // {0, 5, 15, -1}
         return OpArgs(a);
       },
       {"indexer_pool_store: token_request[1] = 5 is out of range; allowed 0..3"}},
      {"pool_store_block_out_of_range", Stage::check_mode,
       [](C c) { auto a = c.pool_store(); c.iblock_table.at<int32_t>(2 * 2) = 9; return OpArgs(a); },
       {"indexer_pool_store: block_table[2, 0] = 9"}},
      {"pooled_topk_kpool_1", Stage::validate,
       [](C c) { auto a = c.pooled_topk(); a.in.kpool = 1; return OpArgs(a); },
       {"indexer_topk: kpool is 1; expected 0 (the per-token indexer) or 2..16", "index_kpool"}},
      {"pooled_logits_kpool_32", Stage::validate,
       [](C c) { auto a = c.pooled_logits(); a.in.kpool = 32; return OpArgs(a); },
       {"indexer_logits: kpool is 32; expected 0 (the per-token indexer) or 2..16"}},
      {"pooled_topk_pool_topk_0", Stage::validate,
       [](C c) { auto a = c.pooled_topk(); a.pool_topk = 0; return OpArgs(a); },
       {"indexer_topk: pool_topk is 0; expected 1..32768 pools per query", "512"}},
      {"pooled_topk_indices_too_narrow", Stage::validate,
       [](C c) { auto a = c.pooled_topk(); a.indices = with_shape(a.indices, {4, 4}); return OpArgs(a); },
       {"indexer_topk: indices has 4 columns, fewer than the 5 positions a query may get (kpool 2 x pool_topk 2 + 1 tail)",
        "at least 5 columns wide", "2176"}},
      {"pooled_topk_out_lens_length", Stage::validate,
       [](C c) { auto a = c.pooled_topk(); a.out_lens = with_shape(a.out_lens, {3}); return OpArgs(a); },
       {"indexer_topk: out_lens has 3 in dimension 0, not 4"}},
      {"pooled_topk_out_lens_over_indices", Stage::validate,
       [](C c) { auto a = c.pooled_topk(); a.out_lens = over(a.out_lens, c.pool_indices); return OpArgs(a); },
       {"indexer_topk: indices shares memory with out_lens"}},
      {"pooled_topk_out_lens_over_q", Stage::validate,
       [](C c) { auto a = c.pooled_topk(); a.out_lens = over(a.out_lens, c.iq_scale); return OpArgs(a); },
       {"indexer_topk: out_lens shares memory with q_scale"}},
      {"pooled_topk_page_stride", Stage::validate,
       [](C c) { auto a = c.pooled_topk(); a.in.k_cache = with_shape(a.in.k_cache, {4, 2, 132}); return OpArgs(a); },
       {"indexer_topk: k_cache page stride 264 bytes", "block_size / kpool"}},
      {"token_topk_with_pool_topk", Stage::validate,
       [](C c) { auto a = c.indexer_topk(); a.pool_topk = 512; return OpArgs(a); },
       {"indexer_topk: pool_topk = 512, select_tail = false are arguments of the pooled indexer, but kpool is 0",
        "Set kpool"}},
      {"token_topk_with_select_tail", Stage::validate,
       [](C c) { auto a = c.indexer_topk(); a.select_tail = true; return OpArgs(a); },
       {"select_tail = true are arguments of the pooled indexer"}},
      {"token_topk_with_out_lens", Stage::validate,
       [](C c) { auto a = c.indexer_topk(); a.out_lens = c.out_lens; return OpArgs(a); },
       {"out_lens given are arguments of the pooled indexer", "count of entries >= 0"}},
      {"pooled_topk_visible_out_of_range", Stage::check_mode,
       [](C c) { auto a = c.pooled_topk(); c.visible_lens.at<int32_t>(2) = 17; return OpArgs(a); },
       {"indexer_topk: visible_lens[2] = 17 is out of range; allowed 0..16"}},
      {"position_out_of_range", Stage::check_mode,
       [](C c) {
         auto a = c.logical_to_slots();
         c.positions.at<int32_t>(5) = 8;
         return OpArgs(a);
       },
       {"logical_to_slots: positions[1, 2] = 8 is out of range", "0..7"}},
  };
  return cases;
}

class BadInput : public ::testing::TestWithParam<BadCase> {};

void expect_error(const std::function<void()>& call, const std::vector<std::string>& fragments) {
  try {
    call();
    ADD_FAILURE() << "no error was thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    for (const std::string& f : fragments) EXPECT_THAT(e.what(), ::testing::HasSubstr(f));
  }
}

TEST_P(BadInput, IsRefusedWithItsMessage) {
  const BadCase& bad = GetParam();
  ValidCalls calls;
  const OpArgs args = bad.make(calls);
  switch (bad.stage) {
    case Stage::validate:
      expect_error([&] { (void)common_device(args); (void)make_problem(args); }, bad.fragments);
      break;
    case Stage::kernel:
      EXPECT_NO_THROW((void)make_problem(args));
      break;
    case Stage::check_mode:
      EXPECT_NO_THROW((void)make_problem(args));
      // Without check mode the bad value is treated as -1 / clamped: the call runs.
      EXPECT_NO_THROW(run_reference(args, false));
      break;
  }
  // Through the backend as an engine calls it (validation runs inside Kernel::run).
  if (!::testing::Test::HasFailure()) expect_error([&] { run_reference(args, true); }, bad.fragments);
}

INSTANTIATE_TEST_SUITE_P(Table, BadInput, ::testing::ValuesIn(bad_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(BadInputTable, HasAtLeast25Cases) { EXPECT_GE(bad_cases().size(), 25u); }

TEST(Validate, ValidCallsPassAndReportTheirSizes) {
  ValidCalls c;
  const SparseMlaShape s = validate(c.sparse_mla());
  EXPECT_EQ(s.tokens, 4);
  EXPECT_EQ(s.heads, 2);
  EXPECT_EQ(s.topk, 3);
  EXPECT_EQ(s.num_slots(), 16);
  EXPECT_EQ(s.format, CacheFormat::bf16);
  const MlaDecodeShape d = validate(c.mla_decode());
  EXPECT_EQ(d.batch, 2);
  EXPECT_EQ(d.s_q, 1);
  EXPECT_EQ(d.max_blocks, 2);
  EXPECT_EQ(d.format, CacheFormat::fp8_ds_mla);
  const IndexerShape i = validate(c.indexer_topk());
  EXPECT_EQ(i.q_dtype, DType::e4m3);
  EXPECT_EQ(i.topk, 3);
  EXPECT_EQ(i.max_len(), 8);
  EXPECT_EQ(validate(c.indexer_logits()).logits_len, 8);
  EXPECT_EQ(validate(c.kv_store()).format, CacheFormat::fp8_ds_mla);
  EXPECT_EQ(validate(c.indexer_k_store()).block_size, 4);
  EXPECT_EQ(validate(c.logical_to_slots()).width, 3);
  const SparseMlaShape n = validate(c.sparse_mla_nope());
  EXPECT_EQ(n.rope_dim, 0);
  EXPECT_EQ(n.qk_dim(), 512);
  EXPECT_EQ(n.format, CacheFormat::bf16);
  EXPECT_EQ(s.rope_dim, 64);
  auto fp8_nope = c.sparse_mla_nope();
  fp8_nope.kv_cache = c.nope_fp8_cache;
  EXPECT_EQ(validate(fp8_nope).format, CacheFormat::fp8_ds_mla);
  fp8_nope.kv_cache = c.fp8_cache;  // 656-byte rows, the last 128 bytes reserved
  EXPECT_EQ(validate(fp8_nope).format, CacheFormat::fp8_ds_mla);
  EXPECT_EQ(validate(c.kv_store_nope()).rope_dim, 0);
  const IndexerShape pooled = validate(c.pooled_topk());
  EXPECT_EQ(pooled.kpool, 2);
  EXPECT_EQ(pooled.pool_rows, 4);
  EXPECT_EQ(pooled.block_size, 8);  // tokens per block
  EXPECT_EQ(pooled.max_len(), 16);
  EXPECT_EQ(pooled.pool_topk, 2);
  EXPECT_TRUE(pooled.select_tail);
  const PoolStoreShape store = validate(c.pool_store());
  EXPECT_EQ(store.block_size(), 8);
  EXPECT_EQ(store.batch, 4);
  for (const OpArgs& args : {OpArgs(c.sparse_mla()), OpArgs(c.mla_decode()), OpArgs(c.indexer_topk()),
                             OpArgs(c.indexer_logits()), OpArgs(c.kv_store()),
                             OpArgs(c.indexer_k_store()), OpArgs(c.logical_to_slots()),
                             OpArgs(c.sparse_mla_nope()), OpArgs(fp8_nope), OpArgs(c.kv_store_nope()),
                             OpArgs(c.pooled_topk()), OpArgs(c.pooled_logits()), OpArgs(c.pool_store())}) {
    EXPECT_EQ(common_device(args), Device{});
    EXPECT_NO_THROW(run_reference(args, true)) << to_string(op_of(args));
  }
}

TEST(Validate, PaddedRowsAndEmptyCallsAreAccepted) {
  ValidCalls c;
  // q rows padded to 640 elements (1280 bytes, a multiple of 16) and lse absent.
  HostTensor padded(DType::bf16, {4, 2, 640});
  auto a = c.sparse_mla();
  a.q = padded.view();
  a.q.shape[2] = 576;
  a.lse = {};
  EXPECT_NO_THROW((void)validate(a));
  // Zero tokens: empty tensors may have null data.
  auto e = c.sparse_mla();
  e.q = TensorView::contiguous(nullptr, DType::bf16, {0, 2, 576});
  e.indices = TensorView::contiguous(nullptr, DType::i32, {0, 3});
  e.out = TensorView::contiguous(nullptr, DType::bf16, {0, 2, 512});
  e.lse = TensorView::contiguous(nullptr, DType::f32, {0, 2});
  EXPECT_EQ(validate(e).tokens, 0);
  EXPECT_NO_THROW(run_reference(e, true));
}

// sparse_mla over logical positions is two steps in one call: an output of either step may not
// overlap a tensor of the other (slots written over q, out over the block table, ...).
TEST(Validate, SparseMlaOverPositionsKeepsBothStepsApart) {
  ValidCalls c;
  const auto both = [&](const LogicalToSlotsArgs& l, const SparseMlaArgs& a) {
    return [=] { check_logical_sparse_mla(l, a); };
  };
  EXPECT_NO_THROW(both(c.logical_to_slots(), c.sparse_mla())());
  auto l = c.logical_to_slots();
  l.slots = over(l.slots, c.q);
  expect_error(both(l, c.sparse_mla()),
               {"sparse_mla: slots shares memory with q",
                "Pass as slots a tensor that does not share memory with q."});
  l = c.logical_to_slots();
  l.slots = over(l.slots, c.bf16_cache, 4096);
  expect_error(both(l, c.sparse_mla()), {"sparse_mla: slots shares memory with kv_cache"});
  auto a = c.sparse_mla();
  // A view small enough to lie inside the block table (8 KB of out would reach whatever the heap
  // put after it, slots say, and report that overlap first).
  a.out = over(with_shape(a.out, {1, 1, 8}), c.iblock_table);
  expect_error(both(c.logical_to_slots(), a), {"sparse_mla: out shares memory with block_table"});
  a = c.sparse_mla();
  a.lse = over(a.lse, c.positions);
  expect_error(both(c.logical_to_slots(), a), {"sparse_mla: lse shares memory with indices"});
  // A malformed tensor is left to its own step's validation.
  l = c.logical_to_slots();
  l.slots = with_strides(over(l.slots, c.q), {-3, 1});
  EXPECT_NO_THROW(both(l, c.sparse_mla())());
}

// topk as a number (what sizes a Python caller's indices) follows the rule of indices' columns.
TEST(Validate, TopkAsANumberFollowsTheIndicesRule) {
  EXPECT_NO_THROW(check_topk("indexer_topk", 1));
  EXPECT_NO_THROW(check_topk("indexer_topk", kMaxTopk));
  for (int64_t bad : {int64_t{-3}, int64_t{0}, int64_t{kMaxTopk} + 1, int64_t{1} << 31}) {
    expect_error([&] { check_topk("indexer_topk", bad); },
                 {"indexer_topk: topk is " + std::to_string(bad), "topk must be 1..65536."});
  }
  expect_error([&] { check_topk("indexer_topk", INT64_MAX, "1180591620717411303424"); },
               {"topk is 1180591620717411303424 ", "topk must be 1..65536."});
}

// A tensor with no elements as numpy 2 exports one: every stride 0.
TensorView empty_view(const TensorView& t, std::initializer_list<int64_t> shape) {
  TensorView v = with_shape(t, shape);
  v.strides.fill(0);
  return v;
}

// T = 0 (B = 0 for mla_decode) is a valid call of every op, whatever strides and pointer its
// empty tensors have; the caches keep their bytes.
TEST(Validate, EveryOpTakesZeroTokensWithAnyStrides) {
  ValidCalls c;
  auto sm = c.sparse_mla();
  sm.q = empty_view(sm.q, {0, 2, 576});
  sm.q.data = static_cast<unsigned char*>(sm.q.data) + 1;  // misaligned: nothing is read
  sm.indices = empty_view(sm.indices, {0, 3});
  sm.out = empty_view(sm.out, {0, 2, 512});
  sm.lse = empty_view(sm.lse, {0, 2});
  auto split = sm;
  split.q = empty_view(sm.q, {0, 2, 512});
  split.q_rope = empty_view(c.q, {0, 2, 64});
  auto md = c.mla_decode();
  md.q = empty_view(md.q, {0, 1, 2, 576});
  md.block_table = empty_view(md.block_table, {0, 2});
  md.seq_lens = empty_view(md.seq_lens, {0});
  md.out = empty_view(md.out, {0, 1, 2, 512});
  md.lse = empty_view(md.lse, {0, 1, 2});
  auto empty_inputs = [&](IndexerInputs in) {
    in.q = empty_view(in.q, {0, 2, 128});
    in.q_scale = empty_view(in.q_scale, {0, 2});
    in.weights = empty_view(in.weights, {0, 2});
    in.block_table = empty_view(in.block_table, {0, 2});
    in.visible_lens = empty_view(in.visible_lens, {0});
    return in;
  };
  auto topk = c.indexer_topk();
  topk.in = empty_inputs(topk.in);
  topk.indices = empty_view(topk.indices, {0, 3});
  auto logits = c.indexer_logits();
  logits.in = empty_inputs(logits.in);
  logits.logits = empty_view(logits.logits, {0, 8});
  logits.in.q.data = nullptr;
  auto store = c.kv_store();
  store.latent = empty_view(store.latent, {0, 512});
  store.rope = empty_view(store.rope, {0, 64});
  store.slot_mapping = empty_view(store.slot_mapping, {0});
  auto kstore = c.indexer_k_store();
  kstore.k = empty_view(kstore.k, {0, 128});
  kstore.slot_mapping = empty_view(kstore.slot_mapping, {0});
  auto l2s = c.logical_to_slots();
  l2s.positions = empty_view(l2s.positions, {0, 3});
  l2s.block_table = empty_view(l2s.block_table, {0, 2});
  l2s.slots = empty_view(l2s.slots, {0, 3});
  const std::vector<unsigned char> fp8_before(c.fp8_cache.data<unsigned char>(),
                                              c.fp8_cache.data<unsigned char>() + c.fp8_cache.view().nbytes());
  const std::vector<unsigned char> k_before(c.k_cache.data<unsigned char>(),
                                            c.k_cache.data<unsigned char>() + c.k_cache.view().nbytes());
  for (const OpArgs& args : {OpArgs(sm), OpArgs(split), OpArgs(md), OpArgs(topk), OpArgs(logits),
                             OpArgs(store), OpArgs(kstore), OpArgs(l2s)}) {
    EXPECT_NO_THROW((void)make_problem(args)) << to_string(op_of(args));
    EXPECT_NO_THROW(run_reference(args, true)) << to_string(op_of(args));
  }
  EXPECT_EQ(validate(sm).tokens, 0);
  EXPECT_EQ(validate(md).batch, 0);
  EXPECT_EQ(validate(topk).tokens, 0);
  EXPECT_EQ(validate(store).tokens, 0);
  EXPECT_EQ(validate(l2s).tokens, 0);
  EXPECT_TRUE(std::equal(fp8_before.begin(), fp8_before.end(), c.fp8_cache.data<unsigned char>()));
  EXPECT_TRUE(std::equal(k_before.begin(), k_before.end(), c.k_cache.data<unsigned char>()));
}

// Only overlapping bytes are refused: an output right after an input in one buffer, inputs
// that share memory with each other, an empty output pointing anywhere and a cache written in
// place all run.
TEST(Validate, OutputsApartFromInputsAreAccepted) {
  ValidCalls c;
  HostTensor buffer(DType::bf16, {4 * 2 * 576 + 4 * 2 * 512});
  auto a = c.sparse_mla();
  a.q = over(a.q, buffer);
  a.out = over(a.out, buffer, a.q.nbytes());
  EXPECT_NO_THROW(run_reference(a, true));
  // q's latent and rope parts as two views of one [T, H, 576] tensor.
  auto split = c.sparse_mla();
  split.q = with_strides(with_shape(split.q, {4, 2, 512}), {1152, 576, 1});
  split.q_rope = over(with_strides(with_shape(split.q, {4, 2, 64}), {1152, 576, 1}), c.q, 1024);
  EXPECT_NO_THROW(run_reference(split, true));
  // block_table and visible_lens, both inputs, in one i32 buffer.
  auto topk = c.indexer_topk();
  topk.in.visible_lens = over(topk.in.visible_lens, c.iblock_table);
  EXPECT_NO_THROW((void)validate(topk));
  // An output with no elements covers no bytes.
  auto e = c.sparse_mla();
  e.q = with_shape(e.q, {0, 2, 576});
  e.indices = with_shape(e.indices, {0, 3});
  e.out = over(with_shape(e.out, {0, 2, 512}), c.bf16_cache);
  e.lse = over(with_shape(e.lse, {0, 2}), c.bf16_cache);
  EXPECT_NO_THROW(run_reference(e, true));
  EXPECT_NO_THROW(run_reference(c.kv_store(), true));
  EXPECT_NO_THROW(run_reference(c.indexer_k_store(), true));
}

}  // namespace
}  // namespace latte::testing
