// Exact top-k launchers shared by the indexer backends (cuda.indexer, hopper.indexer): rows of
// f32 scores, of u32 score keys (an indexer's unfused path) or of (key, position) candidates
// (the fused path's lists) in, positions out in ascending order, -1 padded. Kernels:
// topk_kernel.cuh; design notes: docs/kernels/indexer.md, "Exact top-k". No host
// synchronization (except the LATTE_CUDA_TOPK_PROF=1 measurements).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/indexer/indexer_params.hpp"
#include "kernels/topk/topk_args.hpp"

namespace latte::cuda {

// How an indexer backend computes a call's top-k: fused (sample, admission, repair and the
// exact top-k of each token's candidates) or unfused (a key per visible position, then the exact
// top-k), or chosen per call by the backend's path rule (automatic).
enum class TopkPath { automatic, fused, unfused };

// Where an indexer's top-k goes: indices [T, topk] with strides (st, sc), physical slots
// (block * block_size + offset) or logical positions.
struct TopkOutput {
  int32_t* indices = nullptr;
  int64_t st = 0, sc = 1;
  int topk = 0;
  bool physical = true;
  // The pooled indexer (pooled_topk.hpp): the rows' positions are pools of `expand` tokens and
  // the output rows hold `width` token columns (TopkArgs::expand).
  int expand = 0;
  bool tail = false;
  int width = 0;
  int32_t* lens = nullptr;  // optional: each row's count of entries before the padding
  int64_t lens_s = 1;

  // The output of rows t0.. (a call run in token slices).
  [[nodiscard]] TopkOutput from_row(int64_t t0) const {
    TopkOutput o = *this;
    o.indices = indices + t0 * st;
    if (lens != nullptr) o.lens = lens + t0 * lens_s;
    return o;
  }
};

// Shared memory of the one-CTA-per-row kernel for rows of up to `max_positions` positions: its
// candidate buffer (cap entries) and position bitmap. Throws latte::Error (unsupported), naming
// topk_max_positions(topk), when the rows are too long.
struct TopkPlan {
  int cap = 0, bitmap_words = 0, smem = 0;
};
[[nodiscard]] TopkPlan plan_topk(int64_t max_positions, int topk);
// The longest rows (max_blocks * block_size, a multiple of 32) plan_topk takes at `topk`.
[[nodiscard]] int64_t topk_max_positions(int topk);

// The top-k arguments of an indexer problem's rows (one per query token: visible lengths,
// block_table rows for physical output); the caller sets the source.
[[nodiscard]] TopkArgs topk_args(const IndexerParams& p, const TopkOutput& out, const TopkPlan& t);

// Programmatic dependent launch of the later top-k kernels (sm_90+); LATTE_CUDA_TOPK_PDL=0
// turns it off (measurements). Callers pass `pdl` = this and an sm_90+ device.
[[nodiscard]] bool topk_pdl_enabled();

// Workspace to split `rows` rows of up to max_len positions over several CTAs each (0 when
// they would not be split), and the most any row length up to max_len needs.
[[nodiscard]] std::size_t split_workspace_bytes(int64_t rows, int64_t max_len, int topk, int sm_count);
[[nodiscard]] std::size_t split_workspace_bound(int64_t rows, int64_t max_len, int topk, int sm_count);

// Before the pass that writes an indexer's keys: clears what launch_keys_topk with the same
// arguments needs zero in `workspace` (the spread path's histograms and counters, a memset) and
// returns the histograms [T][2048] that pass must count its keys into (key_histogram.cuh
// key_hist_add, row t at t * 2048), or null when the spread path does not run. Every caller of
// launch_keys_topk calls it first, on the same stream.
[[nodiscard]] int* prepare_keys_topk(const IndexerParams& p, int topk, void* workspace, std::size_t workspace_bytes,
                                     int sm_count, cudaStream_t stream);

// The spread top-k's shape for `rows` rows of up to n positions: S CTAs per row of slice_len
// positions and the workspace its state takes (slices 0: the spread path does not run).
struct SpreadShape {
  int slices = 0, slice_len = 0;
  std::size_t bytes = 0;
};
[[nodiscard]] SpreadShape spread_shape(int64_t rows, int64_t n, int sm_count);
// For kernels that make the keys and select them in one launch (the indexers' scored spread
// kernel): the spread top-k's arguments for the problem's rows in `workspace`, its state cleared
// on `stream` (a memset), first pass not counted; slices 0 (and nothing cleared) when the spread
// path does not run or its state does not fit.
[[nodiscard]] SpreadArgs prepare_spread(const IndexerParams& p, void* workspace, std::size_t workspace_bytes,
                                        int sm_count, cudaStream_t stream);

// An indexer's unfused selection: keys [T, keys_ld] (u32 score keys, kernels/topk/radix_select.cuh
// score_key; 0 = excluded; row t read up to its visible length) into out. keys 16-byte aligned,
// keys_ld % 4 == 0. Few long rows are split over several CTAs when `workspace` holds
// split_workspace_bytes; up to 8 rows are each spread over many CTAs that meet at grid barriers
// (topk_spread_grid_barrier.cuh; prepare_keys_topk cleared their state).
void launch_keys_topk(const IndexerParams& p, const TopkOutput& out, const uint32_t* keys, int64_t keys_ld,
                      void* workspace, std::size_t workspace_bytes, int sm_count, bool pdl, cudaStream_t stream);

// The fused path's final selection: each row's candidate list (`list`, kSrcCands) or, for rows
// whose admission failed, its repair candidates (`repair`).
void launch_fused_final(const TopkArgs& list, const TopkArgs& repair, const TopkPlan& t, bool pdl,
                        cudaStream_t stream);

// Whether rows of up to n positions take the spread path (up to 8 rows, each over many CTAs
// that meet at grid barriers; LATTE_CUDA_TOPK_SPREAD=0 turns it off) when the workspace holds it.
[[nodiscard]] bool topk_spreads(int64_t rows, int64_t n, int sm_count);
// Whether an indexer's unfused path with the spread top-k is faster than its fused path for
// `rows` query tokens over rows of up to n positions (measured on the H200); both indexers'
// path rules ask it first.
[[nodiscard]] bool spread_beats_fused(int64_t rows, int64_t n, int sm_count);
// Rows of n positions past what the one-CTA top-k takes at topk (topk_max_positions): only the
// spread top-k selects them, a few tokens per pass (the fused path cannot run).
[[nodiscard]] bool topk_rows_too_long(int64_t n, int topk);
// The longest rows the spread top-k takes (one token per pass over every SM).
[[nodiscard]] int64_t spread_max_positions(int sm_count);
// The workspace of one token's keys over the longest such row and its spread top-k: the floor
// of both indexers' workspace bounds, so that any row length the spread top-k takes runs.
[[nodiscard]] std::size_t long_row_workspace_bytes(int topk, int sm_count);
// The most of `tokens` query tokens one pass of an indexer's unfused path takes: their keys
// (row_bytes each, the block 256-byte aligned) and the top-k's workspace fit in workspace_bytes;
// for rows too long for the one-CTA top-k, only as many as the spread top-k takes. 0: none.
[[nodiscard]] int64_t keys_tokens_per_pass(int64_t tokens, int64_t max_len, int topk, std::size_t row_bytes,
                                           std::size_t workspace_bytes, int sm_count);
// What an indexer (`owner`) raises when keys_tokens_per_pass gave 0: unsupported past the spread
// top-k's longest rows, else invalid_argument asking for the kernel's workspace.
[[noreturn]] void refuse_long_rows(const char* owner, int64_t max_len, std::size_t workspace_bytes, int sm_count);

// Plain exact top-k of f32 rows (scores [rows, n] with row stride ld): out[r, 0..topk) gets the
// positions of the topk largest (ties to the smaller position, NaN last), ascending, -1 padded.
// For benchmarks and tests of the selection alone. With a workspace of rows_topk_workspace_bytes,
// few long rows (8 * rows <= SMs, n >= 65536) are each split over several CTAs.
void launch_rows_topk(const float* scores, int rows, int64_t n, int64_t ld, int topk, int32_t* out, int64_t out_ld,
                      cudaStream_t stream);
[[nodiscard]] std::size_t rows_topk_workspace_bytes(int rows, int64_t n, int topk, int sm_count);
void launch_rows_topk(const float* scores, int rows, int64_t n, int64_t ld, int topk, int32_t* out, int64_t out_ld,
                      void* workspace, std::size_t workspace_bytes, int sm_count, bool pdl, cudaStream_t stream);

// The fused path's final selection alone (tests): row r holds n (key, position) candidates at
// keys/pos + r * n (key 0 = empty), positions < visible_lens[r] <= max_len count; out[r] gets
// the topk best positions, ascending, -1 padded.
void launch_candidates_topk(const uint32_t* keys, const int32_t* pos, int rows, int64_t n,
                            const int32_t* visible_lens, int64_t max_len, int topk, int32_t* out,
                            cudaStream_t stream);

// LATTE_CUDA_TOPK_PROF=1 (measurements only: synchronizes): phase marks and kernel spans
// (kernels/common/kernel_span.cuh slots from kTopkProfSpans on) of row 0, printed to stderr every 20th
// bracketed call; null buffer otherwise. Brackets nest: the outermost clears and prints.
constexpr int kTopkProfSpans = 32;
[[nodiscard]] unsigned long long* topk_prof_buffer();
// The kernel spans behind the phase marks (topk_prof_buffer() + kTopkProfSpans), else null.
[[nodiscard]] unsigned long long* topk_prof_spans();
// The score passes' span slots (the top-k kernels take slots 4-6, topk_kernel.cuh).
constexpr int kSpanScore = 0, kSpanAdmit = 2, kSpanRepair = 3;
void topk_prof_begin(cudaStream_t stream);
void topk_prof_end(const char* what, cudaStream_t stream);

}  // namespace latte::cuda
