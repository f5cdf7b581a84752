// The pooled indexer's expansion of kept pools into token positions (any arch). See
// pooled_topk.hpp.
#include "kernels/indexer/pooled_topk.hpp"

#include <string>

#include "kernels/common/cuda_check.cuh"
#include "kernels/common/launch.hpp"
#include "kernels/common/pdl.cuh"
#include "latte/error.hpp"

namespace latte::cuda {
namespace {

constexpr int kExpandThreads = 256;

__device__ __forceinline__ int64_t clamp_len(int64_t v, int64_t max_len) {
  return v < 0 ? 0 : v > max_len ? max_len : v;
}

// Block bi of the request's block table row, -1 where it is missing.
__device__ __forceinline__ int block_of(const IndexerParams& p, int row, int64_t bi) {
  if (row < 0 || row >= p.batch || bi < 0 || bi >= p.max_blocks) return -1;
  const int b = p.block_table[row * p.bt_sr + bi * p.bt_sc];
  return b < 0 || b >= p.num_blocks ? -1 : b;
}

// One CTA per query token.
__global__ void __launch_bounds__(kExpandThreads) pooled_expand_kernel(const IndexerParams p, const PooledExpand e) {
  const int t = blockIdx.x, tid = threadIdx.x;
  pdl_wait();  // the kept pools come from the top-k before this kernel
  const int row = p.token_request != nullptr ? p.token_request[t * p.tr_s] : t;
  const int64_t v = clamp_len(p.visible_lens[t * p.vl_s], static_cast<int64_t>(p.max_blocks) * p.block_size);
  const int32_t* pools = e.pools + t * e.pools_ld;
  int32_t* out = e.out + t * e.out_sr;
  // The kept pools come first in the per-token top-k's output: count them.
  int kept = 0;
  for (int i0 = 0; i0 < e.pool_topk; i0 += kExpandThreads) {
    const int i = i0 + tid;
    kept += __syncthreads_count(i < e.pool_topk && pools[i] >= 0);
  }
  const int bs = p.block_size;
  auto value = [&](int64_t pos) -> int32_t {
    const int blk = block_of(p, row, pos / bs);
    if (blk < 0) return -1;
    return e.physical ? static_cast<int32_t>(static_cast<int64_t>(blk) * bs + pos % bs) : static_cast<int32_t>(pos);
  };
  const int expanded = kept * e.kpool;
  for (int i = tid; i < expanded; i += kExpandThreads) {
    const int64_t pos = static_cast<int64_t>(pools[i / e.kpool]) * e.kpool + i % e.kpool;
    out[i * e.out_sc] = value(pos);
  }
  // The tail (at most kpool - 1 positions whose block exists), then the padding.
  __shared__ int tail;
  if (tid == 0) {
    int n = 0;
    if (e.select_tail && row >= 0 && row < p.batch) {
      for (int64_t pos = v / e.kpool * e.kpool; pos < v; ++pos) {
        const int32_t x = value(pos);
        if (x >= 0) out[(expanded + n++) * e.out_sc] = x;
      }
    }
    tail = n;
    if (e.out_lens != nullptr) e.out_lens[t * e.ol_s] = expanded + n;
  }
  __syncthreads();
  for (int i = expanded + tail + tid; i < e.width; i += kExpandThreads) out[i * e.out_sc] = -1;
}

std::size_t align256(std::size_t v) { return (v + 255) / 256 * 256; }

}  // namespace

IndexerParams pooled_problem(const IndexerParams& token_problem, int kpool) {
  IndexerParams q = token_problem;
  q.block_size = token_problem.block_size / kpool;
  q.vl_div = kpool;
  return q;
}

void launch_pooled_expand(const IndexerParams& p, const PooledExpand& e, cudaStream_t stream) {
  if (p.tokens <= 0) return;
  launch_ex(pooled_expand_kernel, static_cast<unsigned>(p.tokens), kExpandThreads, 0, e.pdl, stream, p, e);
}

void require_pooled_workspace(std::size_t need, std::size_t workspace_bytes, int64_t tokens) {
  if (workspace_bytes >= need) return;
  throw Error(ErrorCode::invalid_argument,
              "the pooled indexer needs " + std::to_string(need) + " bytes of workspace for " + std::to_string(tokens) +
                  " query tokens before its top-k's own, and the call gave " + std::to_string(workspace_bytes) +
                  "; make the kernel with max_tokens >= the call's tokens and give it workspace_bytes()");
}

std::size_t pooled_workspace_bytes(int64_t tokens, int pool_topk) {
  const auto t = static_cast<std::size_t>(tokens < 0 ? 0 : tokens);
  return align256(t * static_cast<std::size_t>(pool_topk < 0 ? 0 : pool_topk) * 4);
}

}  // namespace latte::cuda
