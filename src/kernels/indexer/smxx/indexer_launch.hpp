// cuda.indexer's launchers: raw device pointers in, kernels launched on a stream, no host
// synchronization. The Backend (backend.cpp) maps latte's TensorViews onto these; tests and
// bench/indexer call them directly to pick a path (fused or unfused) explicitly.
//
// Semantics (docs/design.md, section 4.1, cpu.reference's indexer.cpp):
//   I[t, p] = sum_j w[t, j] * ReLU(dot(q[t, j] * q_scale[t, j], k[p] * k_scale[p]))
// for visible positions p < visible_lens[t] whose block_table entry is a valid block; the
// kernels compute sum_j w[t, j] * ReLU(q_scale[t, j] * dot(q, k)) * k_scale[p], which is the
// same value for k_scale >= 0 (indexer_k_store writes amax/448 or a power of two, never < 0).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/indexer/indexer_params.hpp"
#include "kernels/topk/topk_launch.hpp"

namespace latte::cuda_indexer {

// The launchers' limits, declared as cuda.indexer's capabilities: index heads per call and
// indexer_topk's topk (the top-k kernel's candidate buffer).
inline constexpr int kMaxHeads = 128;
inline constexpr int kMaxTopk = 4096;

// The raw view of the inputs (shared with hopper.indexer: src/kernels/indexer/indexer_params.hpp).
using IndexerParams = cuda::IndexerParams;

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

using cuda::TopkPath;

// Kernel::describe() of cuda.indexer for `op` (indexer_topk or indexer_logits): the score
// kernel's matrix path on architecture `arch` (the one the launchers use: path_arch for a
// probed device, the described arch otherwise), the top-k and the per-call path rule, with the
// tuning variables that override them. Reads LATTE_CUDA_INDEXER_MATH / _PATH (throws on a bad value).
[[nodiscard]] std::string describe_indexer(bool topk_op, bool q_fp8, int arch, int topk);

// indexer_logits: logits [T, L] f32 with strides (ld_t, ld_s); -inf where not visible.
void launch_indexer_logits(const IndexerParams& p, float* logits, int64_t ld_t, int64_t ld_s,
                           int64_t logits_len, const DeviceTraits& dev, void* stream);

// Indices [T, topk] (kernels/topk/topk_launch.hpp, shared with hopper.indexer).
using TopkOutput = cuda::TopkOutput;

// Device workspace the path needs for this problem (0 when nothing is needed).
[[nodiscard]] std::size_t topk_workspace_bytes(const IndexerParams& p, int topk, TopkPath path,
                                               const DeviceTraits& dev);
// Upper bound of the fused path's workspace for any context length, given T and topk.
[[nodiscard]] std::size_t fused_workspace_bound(int64_t tokens, int topk, int heads, bool q_fp8,
                                                const DeviceTraits& dev);
// The path `automatic` resolves to for this problem and workspace.
[[nodiscard]] TopkPath choose_topk_path(const IndexerParams& p, int topk,
                                        std::size_t workspace_bytes, const DeviceTraits& dev);
// indexer_topk: indices in ascending position order, -1 padded. Throws latte::Error when the
// workspace is too small for the path.
void launch_indexer_topk(const IndexerParams& p, const TopkOutput& out, TopkPath path,
                         void* workspace, std::size_t workspace_bytes, const DeviceTraits& dev,
                         void* stream);

// The unfused path of up to 8 tokens whose rows the spread top-k takes: scores and the top-k in
// one cooperative kernel (indexer_topk_scored_spread_mma_sync.cuh) where that measured faster
// (at least 32768 keys per call, at most 1024 positions per CTA; LATTE_CUDA_TOPK_SCORED=0 / 1
// turns it off / on wherever it runs: up to 4096 positions per CTA). Whether it runs for this
// problem in `workspace_bytes`, and its launch (the workspace holds the spread top-k's state at
// its start; throws latte::Error where scored_spread_takes is false).
[[nodiscard]] bool scored_spread_takes(const IndexerParams& p, int topk, std::size_t workspace_bytes,
                                       const DeviceTraits& dev);
void launch_scored_spread_topk(const IndexerParams& p, const TopkOutput& out, void* workspace,
                               std::size_t workspace_bytes, const DeviceTraits& dev, void* stream);

}  // namespace latte::cuda_indexer
