// The indexer's inputs as raw device pointers and strides: the view the launchers of the CUDA
// indexer backends (cuda.indexer, hopper.indexer) take. Plain C++17, for .cu files too;
// kernels/indexer/indexer_params_from_args.hpp builds it from latte's IndexerInputs.
#pragma once

#include <cstdint>

namespace latte::cuda {

// All pointers are device pointers; strides are in elements of the tensor's dtype.
struct IndexerParams {
  const void* q = nullptr;   // [T, H, 128] e4m3 (q_fp8) or bf16; last dim contiguous
  bool q_fp8 = true;
  int64_t q_st = 0, q_sh = 0;
  const float* q_scale = nullptr;  // [T, H] with e4m3 q; null with bf16 q
  int64_t qs_st = 0, qs_sh = 0;
  const float* weights = nullptr;  // [T, H]
  int64_t w_st = 0, w_sh = 0;
  const uint8_t* k_cache = nullptr;  // pages: block_size*128 e4m3, then block_size f32
  int64_t page_stride = 0;           // bytes between pages (multiple of 16)
  int num_blocks = 0;
  int block_size = 0;
  const int32_t* block_table = nullptr;  // [batch, max_blocks]
  int64_t bt_sr = 0, bt_sc = 0;
  int batch = 0;
  int max_blocks = 0;
  const int32_t* token_request = nullptr;  // [T] or null (token t reads row t)
  int64_t tr_s = 0;
  const int32_t* visible_lens = nullptr;  // [T]
  int64_t vl_s = 0;
  // Units of visible_lens per position: token t sees floor(max(visible_lens[t], 0) / vl_div)
  // positions. 1 for tokens; kpool for the pooled indexer's pool rows (pooled_topk.hpp).
  int vl_div = 1;
  int tokens = 0;
  int heads = 0;
  [[nodiscard]] int64_t max_len() const { return static_cast<int64_t>(max_blocks) * block_size; }

  // Tokens [t0, t0 + n) as a problem of their own (pointers advanced by t0 rows): the unfused
  // paths run a batch in such slices when its scores do not fit the workspace at once.
  [[nodiscard]] IndexerParams token_slice(int t0, int n) const {
    IndexerParams s = *this;
    s.q = static_cast<const uint8_t*>(q) + t0 * q_st * (q_fp8 ? 1 : 2);
    if (q_scale) s.q_scale = q_scale + t0 * qs_st;
    s.weights = weights + t0 * w_st;
    s.visible_lens = visible_lens + t0 * vl_s;
    if (token_request) {
      s.token_request = token_request + t0 * tr_s;
    } else {
      // Token t reads block_table row t: the slice starts at row t0.
      s.block_table = block_table + t0 * bt_sr;
      s.batch = batch - t0 > 0 ? batch - t0 : 0;
    }
    s.tokens = n;
    return s;
  }
};

}  // namespace latte::cuda
