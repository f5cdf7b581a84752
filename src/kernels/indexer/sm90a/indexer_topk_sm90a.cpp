// hopper.indexer's indexer_topk (topk_launch.hpp), two paths over the wgmma score kernels:
// unfused (every visible position's score key into the workspace, then the exact top-k shared
// with cuda.indexer) and fused (a sample pass, an admission pass that keeps each token's
// candidates at or above a threshold from its samples, a repair pass for the tokens where that
// failed, and the exact top-k of each token's candidates).
#include "kernels/indexer/sm90a/indexer_topk_sm90a.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/common/env_knob.hpp"
#include "latte/error.hpp"
#include "kernels/indexer/sm90a/logits_launch_sm90a.hpp"

namespace latte::hopper_indexer {
namespace {

constexpr std::size_t kAlign = 256;
constexpr int64_t kKeysLenHint = 131072;              // positions per token the bound assumes
constexpr std::size_t kKeysCap = std::size_t{256} << 20;  // at most 64M keys
constexpr std::size_t kOneLongRow = std::size_t{524288} * 4;
constexpr int64_t kFusedTokensBound = 512;  // the workspace bound holds the fused buffers of this many tokens
constexpr int kListCapBound = 8192;         // the top-k kernel's candidate capacity (cuda::plan_topk)

std::size_t align_up(std::size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// Keys row stride: the row length rounded to 64 (16-byte rows for the top-k's vector loads).
int64_t keys_ld(const cuda::IndexerParams& p) { return (std::max<int64_t>(1, p.max_len()) + 63) / 64 * 64; }

// Sampled positions per token: 1024 up to 128K positions, 2048 beyond (as cuda.indexer's fused
// path: at 256K, 1024 samples would expect about 6K candidates, too near the list capacity).
int fused_samples(const cuda::IndexerParams& p) { return p.max_len() <= 131072 ? 1024 : kMaxSamples; }

// The fused path's buffers of n tokens: samples, tau, counts, lists, and the repair pass's
// output ((key, position) pairs: n x repair_chunks x topk).
struct FusedLayout {
  std::size_t samples = 0, tau = 0, count = 0, list_keys = 0, list_pos = 0, cand_keys = 0, cand_pos = 0, total = 0;
  int64_t repair_chunks = 0;
};

FusedLayout fused_layout(int64_t n, int samples, int list_cap, int64_t repair_chunks, int topk) {
  FusedLayout f;
  f.repair_chunks = repair_chunks;
  const std::size_t cand_entries = static_cast<std::size_t>(n * repair_chunks) * topk;
  const auto N = static_cast<std::size_t>(n);
  std::size_t off = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t at = off;
    off = align_up(off + bytes);
    return at;
  };
  f.samples = take(N * samples * 4);
  f.tau = take(N * 4);
  f.count = take(N * 4);
  f.list_keys = take(N * list_cap * 4);
  f.list_pos = take(N * list_cap * 4);
  f.cand_keys = take(cand_entries * 4);
  f.cand_pos = take(cand_entries * 4);
  f.total = off;
  return f;
}

// LATTE_HOPPER_INDEXER_PATH (read per call): fused / unfused force a path (tests, benchmarks).
TopkPath env_path() {
  switch (cuda::env_knob_choice("hopper.indexer", "LATTE_HOPPER_INDEXER_PATH", {"automatic", "fused", "unfused"})) {
    case 1: return TopkPath::fused;
    case 2: return TopkPath::unfused;
    default: return TopkPath::automatic;
  }
}

int env_debug() {
  return cuda::env_knob_int("hopper.indexer", "LATTE_HOPPER_INDEXER_DEBUG", [](int v) { return v <= 15; },
                            "a sum of the flags 1, 2, 4, 8");
}

// The fused path's workspace for all of p's tokens at once: O(T * topk) plus the repair pass's
// O(SMs * topk), whatever the context length.
FusedLayout fused_layout_of(const cuda::IndexerParams& p, int topk, int sm_count) {
  return fused_layout(p.tokens, fused_samples(p), cuda::plan_topk(p.max_len(), topk).cap,
                      repair_split(p.tokens, p.max_len(), topk, sm_count).chunks, topk);
}

}  // namespace

// Whether the admission pass starts during the sample pass (programmatic dependent launch: its
// consumers wait for the samples, its producer copies K meanwhile). Measured on the H200
// (docs/kernels/indexer.md, hopper.indexer, "When the admission pass launches": 1 to 128 tokens at
// 32K-128K, both paths alternating): it saves 3-14 % of the fused time, except where the sample
// pass is more than three one-stage CTAs per SM (32 and 48 tokens there: 512 and 768 CTAs), where
// the fused path with it was 0.95-1.17 of the unfused time, varying between runs and machines, and
// 0.93-0.97 at 128K without it. LATTE_HOPPER_INDEXER_ADMIT_PDL=on|off (measurements) overrides.
bool admission_pdl(const cuda::IndexerParams& p, int sm_count) {
  switch (cuda::env_knob_choice("hopper.indexer", "LATTE_HOPPER_INDEXER_ADMIT_PDL", {"automatic", "on", "off"})) {
    case 1: return true;
    case 2: return false;
    default: break;
  }
  const SampleGrid g = sample_grid(p, fused_samples(p), sm_count);
  return !(g.stages == 1 && g.ctas > 3 * static_cast<int64_t>(std::max(1, sm_count)));
}

std::size_t topk_workspace_bound(int64_t tokens, int topk, int sm_count) {
  const int64_t t = std::max<int64_t>(1, tokens);
  const std::size_t keys = std::clamp(static_cast<std::size_t>(t) * kKeysLenHint * 4, kOneLongRow, kKeysCap);
  const std::size_t split = cuda::split_workspace_bound(t, 2 * kKeysLenHint, std::max(1, topk), sm_count);
  const int64_t tf = std::min(t, kFusedTokensBound);
  const std::size_t fused =
      fused_layout(tf, kMaxSamples, kListCapBound, repair_chunks_bound(tf, sm_count), std::max(1, topk)).total;
  return std::max({keys + split, fused, cuda::long_row_workspace_bytes(topk, sm_count)});
}

std::size_t topk_workspace_bytes(const cuda::IndexerParams& p, int topk, TopkPath path, int sm_count) {
  if (p.tokens <= 0) return 0;
  const std::size_t unfused = align_up(static_cast<std::size_t>(p.tokens) * keys_ld(p) * 4) +
                              cuda::split_workspace_bytes(p.tokens, p.max_len(), std::max(1, topk), sm_count);
  if (path == TopkPath::unfused ||
      (path == TopkPath::automatic && (cuda::spread_beats_fused(p.tokens, p.max_len(), sm_count) ||
                                       cuda::topk_rows_too_long(p.max_len(), topk))))
    return unfused;
  const std::size_t fused = fused_layout_of(p, std::max(1, topk), sm_count).total;
  return path == TopkPath::fused ? fused : std::max(unfused, fused);
}

TopkPath choose_topk_path(const cuda::IndexerParams& p, int topk, std::size_t workspace_bytes, int sm_count) {
  const TopkPath forced = env_path();
  if (forced != TopkPath::automatic) return forced;
  if (!fused_block_size(p.block_size)) return TopkPath::unfused;
  // Rows too long for the one-CTA top-k (the fused path's final select): the unfused path with
  // the spread top-k, a few tokens per pass.
  if (cuda::topk_rows_too_long(p.max_len(), topk)) return TopkPath::unfused;
  // Up to 8 tokens and 131072 keys, the unfused path with the spread top-k measured faster
  // (cuda::spread_beats_fused) when the workspace holds it.
  if (cuda::spread_beats_fused(p.tokens, p.max_len(), sm_count) &&
      topk_workspace_bytes(p, topk, TopkPath::unfused, sm_count) <= workspace_bytes)
    return TopkPath::unfused;
  // The fused path where it measured faster on the H200 (docs/kernels/indexer.md, hopper.indexer,
  // "Which path": 1-128 tokens x 32K / 64K / 128K, H_i 32 and 64, both paths alternating): at 128K
  // every token count (0.79-0.97 of the unfused time); at 64K up to 24 tokens (0.85-0.96; 32-128
  // tokens 0.97-1.03); at 32K up to 8 tokens (0.93-1.00; 16 and more 0.99-1.17); one token at 8K
  // was 1.04-1.05. Below that its fixed costs (sample pass, repair launch, the candidates' select)
  // exceed the unfused top-k's.
  const int64_t len = p.max_len();
  const bool fused_faster =
      len >= 131072 || (len >= 65536 && p.tokens <= 24) || (len >= 32768 && p.tokens <= 8);
  return fused_faster && fused_layout_of(p, topk, sm_count).total <= workspace_bytes ? TopkPath::fused
                                                                                    : TopkPath::unfused;
}

namespace {

void launch_unfused(const cuda::IndexerParams& p, const cuda::TopkOutput& out, uint8_t* ws, std::size_t ws_bytes,
                    int sm_count, cudaStream_t s) {
  const int64_t ld = keys_ld(p);
  const std::size_t row_bytes = static_cast<std::size_t>(ld) * 4;
  const bool pdl = cuda::topk_pdl_enabled();
  // As many tokens per pass as the workspace holds keys for; the rest of it to the split top-k
  // (rows too long for the one-CTA top-k: as many as the spread top-k takes).
  const int per_pass = static_cast<int>(cuda::keys_tokens_per_pass(p.tokens, p.max_len(), out.topk, row_bytes, ws_bytes,
                                                                   sm_count));
  if (per_pass == 0) cuda::refuse_long_rows("hopper.indexer", p.max_len(), ws_bytes, sm_count);
  for (int t0 = 0; t0 < p.tokens; t0 += per_pass) {
    const int n = std::min(per_pass, p.tokens - t0);
    const cuda::IndexerParams slice = per_pass < p.tokens ? p.token_slice(t0, n) : p;
    const cuda::TopkOutput o = out.from_row(t0);
    auto* keys = reinterpret_cast<uint32_t*>(ws);
    const std::size_t kb = std::min(ws_bytes, align_up(static_cast<std::size_t>(n) * row_bytes));
    int* key_hist = cuda::prepare_keys_topk(slice, out.topk, ws + kb, ws_bytes - kb, sm_count, s);
    launch_keys_sm90a(slice, keys, ld, key_hist, sm_count, s);
    cuda::launch_keys_topk(slice, o, keys, ld, ws + kb, ws_bytes - kb, sm_count, pdl, s);
  }
}

// `l`: fused_layout_of(p, out.topk, sm_count), which the workspace `ws` holds.
void launch_fused(const cuda::IndexerParams& p, const cuda::TopkOutput& out, const FusedLayout& l, uint8_t* ws,
                  int sm_count, cudaStream_t s) {
  const cuda::TopkPlan tp = cuda::plan_topk(p.max_len(), out.topk);
  FusedBuffers f;
  f.sample_keys = reinterpret_cast<uint32_t*>(ws + l.samples);
  f.samples = fused_samples(p);
  f.tau = reinterpret_cast<uint32_t*>(ws + l.tau);
  f.count = reinterpret_cast<int*>(ws + l.count);
  f.list_keys = reinterpret_cast<uint32_t*>(ws + l.list_keys);
  f.list_pos = reinterpret_cast<int32_t*>(ws + l.list_pos);
  f.list_cap = tp.cap;
  f.cand_keys = reinterpret_cast<uint32_t*>(ws + l.cand_keys);
  f.cand_pos = reinterpret_cast<int32_t*>(ws + l.cand_pos);
  f.topk = out.topk;
  f.debug = env_debug();
  f.pdl = cuda::topk_pdl_enabled();
  f.pdl_admit = f.pdl && admission_pdl(p, sm_count);
  launch_sample_sm90a(p, f, sm_count, s);
  launch_admit_sm90a(p, f, sm_count, s);
  launch_repair_sm90a(p, f, sm_count, s);
  cuda::TopkArgs list = cuda::topk_args(p, out, tp);
  list.keys = f.list_keys;
  list.cpos = f.list_pos;
  list.ld = tp.cap;
  list.n_fixed = tp.cap;
  list.cand_count = f.count;
  list.dense = 1;
  list.vec = tp.cap % 4 == 0 ? 1 : 0;
  cuda::TopkArgs repair = cuda::topk_args(p, out, tp);
  repair.keys = f.cand_keys;
  repair.cpos = f.cand_pos;
  repair.ld = l.repair_chunks * out.topk;
  repair.n_fixed = repair.ld;
  repair.vec = repair.ld % 4 == 0 ? 1 : 0;
  repair.repair_tau = f.tau;
  repair.repair_cap = tp.cap;
  cuda::launch_fused_final(list, repair, tp, f.pdl, s);
}

}  // namespace

void launch_topk_sm90a(const cuda::IndexerParams& p, const cuda::TopkOutput& out, TopkPath path, void* workspace,
                       std::size_t workspace_bytes, int sm_count, void* stream) {
  if (p.tokens <= 0 || out.topk <= 0) return;
  if (path == TopkPath::automatic) path = choose_topk_path(p, out.topk, workspace_bytes, sm_count);
  const std::size_t row_bytes = static_cast<std::size_t>(keys_ld(p)) * 4;
  if (path == TopkPath::unfused && (workspace == nullptr || workspace_bytes < row_bytes)) {
    throw Error(ErrorCode::invalid_argument,
                "hopper.indexer: indexer_topk's unfused path needs at least " + std::to_string(row_bytes) +
                    " bytes of workspace (one token's keys for " + std::to_string(p.max_len()) +
                    " positions), got " + std::to_string(workspace_bytes) +
                    ". Give the workspace the kernel's workspace_bytes() reports.");
  }
  FusedLayout fused;
  if (path == TopkPath::fused) {
    fused = fused_layout_of(p, out.topk, sm_count);
    const std::size_t need = fused.total;
    if (workspace == nullptr || need > workspace_bytes || !fused_block_size(p.block_size)) {
      throw Error(ErrorCode::invalid_argument,
                  "hopper.indexer: the fused indexer_topk path needs " + std::to_string(need) +
                      " bytes of workspace (got " + std::to_string(workspace_bytes) + ") and a block size of 8, 16, 32 "
                      "or a multiple of 64 (got " + std::to_string(p.block_size) + "); use the unfused or automatic path");
    }
  }
  const auto s = static_cast<cudaStream_t>(stream);
  auto* ws = static_cast<uint8_t*>(workspace);
  // Refusals come before the bracket: LATTE_CUDA_TOPK_PROF's begin / end must pair.
  cuda::topk_prof_begin(s);
  if (path == TopkPath::fused) {
    launch_fused(p, out, fused, ws, sm_count, s);
    cuda::topk_prof_end("hopper fused", s);
  } else {
    launch_unfused(p, out, ws, workspace_bytes, sm_count, s);
    cuda::topk_prof_end("hopper unfused", s);
  }
}

std::string describe_topk(int heads, int block_size, int topk) {
  return describe_scores(heads, block_size, true) + "; then the exact top-" + std::to_string(std::max(1, topk)) +
         " of each row (radix select: up to 8 rows each spread over the GPU's CTAs, which meet at grid barriers; "
         "else one CTA per row, few long rows split over CTAs), the top-k kernels shared with cuda.indexer; tokens "
         "in slices when their keys exceed the workspace. Unfused up to 8 tokens and 131072 keys; else fused at "
         "128K+ positions, "
         "at 64K+ for up to 24 query tokens and at 32K+ for up to 8, when the block size takes the TMA kernel "
         "and the workspace holds it: a sample pass, an admission pass "
         "keeping each token's scores at or above a threshold from its samples, a repair pass where that failed "
         "(each CTA's topk best in a running buffer: no [T, L] keys), the exact top-k of the candidates "
         "(LATTE_HOPPER_INDEXER_PATH=fused|unfused forces one)";
}

}  // namespace latte::hopper_indexer
