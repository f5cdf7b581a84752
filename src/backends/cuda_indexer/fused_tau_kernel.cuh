// The fused path's threshold pass, between the sample and admission passes: one CTA per token
// turns the token's kFusedSamples sampled keys into its admission threshold tau (the
// fused_sample_rank-th largest sampled key; 1 = admit everything). Done once per token here
// rather than in the prologue of every admission CTA: there the sampled keys' top digits,
// nearly all equal, serialized the histogram's shared atomics on the critical path of each CTA.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/pdl.cuh"
#include "cuda/radix_select.cuh"
#include "fused_threshold.cuh"
#include "score_kernel.cuh"

namespace latte::cuda_indexer {

constexpr int kTauThreads = 256;
constexpr int kTauDigit = 8;  // 256 bins: one per thread

__global__ void __launch_bounds__(kTauThreads) fused_tau_kernel(const ScoreArgs a) {
  __shared__ uint32_t keys[kFusedSamples];
  __shared__ int hist[1 << kTauDigit];
  __shared__ cuda::SelectScratch sc;
  const int t = blockIdx.x, tid = threadIdx.x;
  cuda::pdl_launch_dependents();  // the admission pass reads tau after its pdl_wait
  const int m = fused_sample_rank(token_visible(a, t, token_row(a, t), a.max_len), a.topk, a.debug);
  cuda::pdl_wait();  // the sample pass's keys
  uint32_t tau = 1;
  if (m > 0) {
    const uint32_t* src = a.sample_keys + static_cast<int64_t>(t) * kFusedSamples;
    for (int i = tid; i < kFusedSamples; i += kTauThreads) keys[i] = src[i];
    __syncthreads();
    // The m-th largest (key, index) composite; its key is the m-th largest key.
    const uint64_t thr = cuda::block_select_threshold<kTauThreads, kTauDigit, 64>(keys, nullptr, kFusedSamples, m, sc, hist);
    tau = static_cast<uint32_t>(thr >> 32);
    if (tau < 1u) tau = 1u;
  }
  if (tid == 0) a.row_tau[t] = tau;
}

}  // namespace latte::cuda_indexer
