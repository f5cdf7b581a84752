// cuda.indexer's launchers: raw device pointers in, kernels launched on a stream, no host
// synchronization. The Backend (backend.cpp) maps latte's TensorViews onto these; tests and
// bench/indexer call them directly to pick a path (fused or unfused) explicitly.
//
// Semantics (DESIGN.md 2.2, cpu.reference's indexer.cpp):
//   I[t, p] = sum_j w[t, j] * ReLU(dot(q[t, j] * q_scale[t, j], k[p] * k_scale[p]))
// for visible positions p < visible_lens[t] whose block_table entry is a valid block; the
// kernels compute sum_j w[t, j] * ReLU(q_scale[t, j] * dot(q, k)) * k_scale[p], which is the
// same value for k_scale >= 0 (indexer_k_store writes amax/448 or a power of two, never < 0).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/indexer_problem.hpp"

namespace latte::cuda_indexer {

// The raw view of the inputs (shared with hopper.indexer: src/cuda/indexer_problem.hpp).
using IndexerProblem = cuda::IndexerProblem;

struct DeviceTraits {
  int arch = 90;       // compute capability * 10
  int sm_count = 132;
  bool force_bf16_math = false;  // tests: run the sm_80 path (bf16 mma.sync) on any GPU
};

// The architecture (compute capability * 10) the indexer's kernels were compiled for on the
// current device: their __CUDA_ARCH__ / 10, which is below the device's when a build for lower
// architectures runs by binary compatibility or PTX JIT. 0 when it cannot be queried.
[[nodiscard]] int kernel_arch();
// The architecture the launchers choose the matrix path and programmatic dependent launch for:
// min(dev.arch, kernel_arch()), or dev.arch when kernel_arch() is unknown.
[[nodiscard]] int path_arch(const DeviceTraits& dev);

enum class TopkPath { automatic, fused, unfused };

// Kernel::describe() of cuda.indexer for `op` (indexer_topk or indexer_logits): the score
// kernel's matrix path on architecture `arch` (the one the launchers use: path_arch for a
// probed device, the described arch otherwise), the top-k and the per-call path rule, with the
// tuning variables that override them. Reads LATTE_CUDA_INDEXER_MATH / _PATH (throws on a bad value).
[[nodiscard]] std::string describe_indexer(bool topk_op, bool q_fp8, int arch, int topk);

// indexer_logits: logits [T, L] f32 with strides (ld_t, ld_s); -inf where not visible.
void launch_indexer_logits(const IndexerProblem& p, float* logits, int64_t ld_t, int64_t ld_s,
                           int64_t logits_len, const DeviceTraits& dev, void* stream);

struct TopkOutput {
  int32_t* indices = nullptr;  // [T, topk]
  int64_t st = 0, sc = 1;
  int topk = 0;
  bool physical = true;  // physical slots (block * block_size + offset) or logical positions
};

// Device workspace the path needs for this problem (0 when nothing is needed).
[[nodiscard]] std::size_t topk_workspace_bytes(const IndexerProblem& p, int topk, TopkPath path,
                                               const DeviceTraits& dev);
// Upper bound of the fused path's workspace for any context length, given T and topk.
[[nodiscard]] std::size_t fused_workspace_bound(int64_t tokens, int topk, int heads, bool q_fp8,
                                                const DeviceTraits& dev);
// The path `automatic` resolves to for this problem and workspace.
[[nodiscard]] TopkPath choose_topk_path(const IndexerProblem& p, int topk,
                                        std::size_t workspace_bytes, const DeviceTraits& dev);
// indexer_topk: indices in ascending position order, -1 padded. Throws latte::Error when the
// workspace is too small for the path.
void launch_indexer_topk(const IndexerProblem& p, const TopkOutput& out, TopkPath path,
                         void* workspace, std::size_t workspace_bytes, const DeviceTraits& dev,
                         void* stream);

// Plain exact top-k of f32 rows (scores [rows, n] with row stride ld): out[r, 0..topk) gets the
// positions of the topk largest (ties to the smaller position, NaN last), ascending, -1 padded.
// For benchmarks and tests of the selection alone.
void launch_rows_topk(const float* scores, int rows, int64_t n, int64_t ld, int topk,
                      int32_t* out, int64_t out_ld, void* stream);
// The same with a workspace: few long rows (8 * rows <= SMs, n >= 65536) are each split over
// several CTAs when the workspace holds rows_topk_workspace_bytes (else one CTA per row).
[[nodiscard]] std::size_t rows_topk_workspace_bytes(int rows, int64_t n, int topk, const DeviceTraits& dev);
void launch_rows_topk(const float* scores, int rows, int64_t n, int64_t ld, int topk,
                      int32_t* out, int64_t out_ld, void* workspace, std::size_t workspace_bytes,
                      const DeviceTraits& dev, void* stream);
// Workspace the unfused path adds to its keys to split `tokens` rows of up to max_len positions
// over several CTAs (0 when it would not split them).
[[nodiscard]] std::size_t split_workspace_bound(int64_t tokens, int64_t max_len, int topk,
                                                const DeviceTraits& dev);

// The fused path's final selection alone (tests): row r holds n (key, position) candidates at
// keys/pos + r * n (key 0 = empty), positions < visible_lens[r] <= max_len count; out[r] gets
// the topk best positions, ascending, -1 padded.
void launch_candidates_topk(const uint32_t* keys, const int32_t* pos, int rows, int64_t n,
                            const int32_t* visible_lens, int64_t max_len, int topk, int32_t* out,
                            void* stream);

}  // namespace latte::cuda_indexer
