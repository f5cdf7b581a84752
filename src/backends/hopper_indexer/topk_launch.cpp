// hopper.indexer's indexer_topk (topk_launch.hpp): keys by the wgmma kernel, then the exact
// top-k shared with cuda.indexer. Always the unfused path: on the H200 the keys kernel plus the
// top-k measured faster than cuda.indexer's fused and unfused paths at every decode shape
// (docs/performance.md, session 17).
#include "topk_launch.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "latte/error.hpp"
#include "logits_launch.hpp"

namespace latte::hopper_indexer {
namespace {

constexpr std::size_t kAlign = 256;
constexpr int64_t kKeysLenHint = 131072;              // positions per token the bound assumes
constexpr std::size_t kKeysCap = std::size_t{256} << 20;  // at most 64M keys
constexpr std::size_t kOneLongRow = std::size_t{524288} * 4;

std::size_t align_up(std::size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// Keys row stride: the row length rounded to 64 (16-byte rows for the top-k's vector loads).
int64_t keys_ld(const cuda::IndexerProblem& p) { return (std::max<int64_t>(1, p.max_len()) + 63) / 64 * 64; }

}  // namespace

std::size_t topk_workspace_bound(int64_t tokens, int topk, int sm_count) {
  const std::size_t keys = std::clamp(static_cast<std::size_t>(std::max<int64_t>(1, tokens)) * kKeysLenHint * 4,
                                      kOneLongRow, kKeysCap);
  return keys + cuda::split_workspace_bound(std::max<int64_t>(1, tokens), 2 * kKeysLenHint, std::max(1, topk), sm_count);
}

std::size_t topk_workspace_bytes(const cuda::IndexerProblem& p, int topk, int sm_count) {
  if (p.tokens <= 0) return 0;
  return align_up(static_cast<std::size_t>(p.tokens) * keys_ld(p) * 4) +
         cuda::split_workspace_bytes(p.tokens, p.max_len(), std::max(1, topk), sm_count);
}

void launch_topk_sm90a(const cuda::IndexerProblem& p, const cuda::TopkOutput& out, void* workspace,
                       std::size_t workspace_bytes, int sm_count, void* stream) {
  if (p.tokens <= 0 || out.topk <= 0) return;
  const int64_t ld = keys_ld(p);
  const std::size_t row_bytes = static_cast<std::size_t>(ld) * 4;
  if (workspace == nullptr || workspace_bytes < row_bytes) {
    throw Error(ErrorCode::invalid_argument,
                "hopper.indexer: indexer_topk needs at least " + std::to_string(row_bytes) +
                    " bytes of workspace (one token's keys for " + std::to_string(p.max_len()) +
                    " positions), got " + std::to_string(workspace_bytes) +
                    ". Give the workspace the kernel's workspace_bytes() reports.");
  }
  const auto s = static_cast<cudaStream_t>(stream);
  const bool pdl = cuda::topk_pdl_enabled();
  auto* ws = static_cast<uint8_t*>(workspace);
  // As many tokens per pass as the workspace holds keys for; the rest of it to the split top-k.
  const int per_pass = static_cast<int>(std::min<int64_t>(p.tokens, static_cast<int64_t>(workspace_bytes / row_bytes)));
  cuda::topk_prof_begin(s);
  for (int t0 = 0; t0 < p.tokens; t0 += per_pass) {
    const int n = std::min(per_pass, p.tokens - t0);
    const cuda::IndexerProblem slice = per_pass < p.tokens ? p.token_slice(t0, n) : p;
    cuda::TopkOutput o = out;
    o.indices = out.indices + static_cast<int64_t>(t0) * out.st;
    auto* keys = reinterpret_cast<uint32_t*>(ws);
    const std::size_t kb = std::min(workspace_bytes, align_up(static_cast<std::size_t>(n) * row_bytes));
    launch_keys_sm90a(slice, keys, ld, sm_count, stream);
    cuda::launch_keys_topk(slice, o, keys, ld, ws + kb, workspace_bytes - kb, sm_count, pdl, s);
  }
  cuda::topk_prof_end("hopper keys", s);
}

std::string describe_topk(int heads, int block_size, int topk) {
  return describe_scores(heads, block_size, true) + "; then the exact top-" + std::to_string(std::max(1, topk)) +
         " of each row (radix select, one CTA per row; few long rows split over CTAs), the top-k kernels shared "
         "with cuda.indexer; tokens in slices when their keys exceed the workspace";
}

}  // namespace latte::hopper_indexer
