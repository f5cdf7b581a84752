// cuda.indexer launchers: plans (grid, shared memory layout, workspace) and kernel launches.
// Design notes: docs/kernels/indexer.md.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/common/cuda_check.cuh"
#include "kernels/common/env_knob.hpp"
#include "kernels/common/launch.hpp"
#include "kernels/common/smem_limit.hpp"
#include "kernels/topk/topk_launch.hpp"
#include "kernels/indexer/smxx/indexer_launch.hpp"
#include "latte/error.hpp"
#include "kernels/indexer/smxx/indexer_score_mma_sync.cuh"
#include "kernels/indexer/smxx/indexer_topk_scored_spread_mma_sync.cuh"

namespace latte::cuda_indexer {
namespace {

constexpr int kMaxFusedChunks = 64;
constexpr std::size_t kAlign = 256;

std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

__global__ void arch_probe_kernel() {}

}  // namespace

int kernel_arch() {
  static std::atomic<int> cache[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  std::atomic<int>& slot = cache[device & 63];
  int v = slot.load(std::memory_order_relaxed);
  if (v == 0) {
    cudaFuncAttributes fa{};
    if (cudaFuncGetAttributes(&fa, arch_probe_kernel) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    v = fa.ptxVersion;
    slot.store(v, std::memory_order_relaxed);
  }
  return v;
}

// A build for 80 / 86 runs on an sm_89 / sm_90 GPU by binary compatibility or PTX JIT, and its
// kernels have neither the e4m3 conversions (those instantiations trap) nor griddepcontrol (a
// PDL-launched kernel would not wait for its predecessor: a race, seen on the H200 with a
// compute_80-only build).
int path_arch(const DeviceTraits& dev) {
  const int compiled = kernel_arch();
  return compiled > 0 ? std::min(dev.arch, compiled) : dev.arch;
}

namespace {

// Programmatic dependent launch of the passes after the first (sm_90+ kernels).
bool topk_pdl(const DeviceTraits& dev) { return path_arch(dev) >= 90 && cuda::topk_pdl_enabled(); }

// The score kernel's matrix path. e4m3 queries: mma.sync e4m3 where it is native (sm_89,
// sm_120), K and q widened to f16 by the hardware conversion on sm_90 / sm_100 (8-17 % faster
// than e4m3 mma.sync on the H200, docs/performance.md; sm_100 by analogy, not measured),
// bf16 widening below sm_89. bf16 queries: bf16. LATTE_CUDA_INDEXER_MATH=fp8|f16|bf16 forces a
// path where the device can run it (measurements, tests).
int math_on(bool q_fp8, int arch, bool force_bf16) {
  if (!q_fp8 || arch < 89 || force_bf16) return kMathBf16;
  switch (cuda::env_knob_choice("cuda.indexer", "LATTE_CUDA_INDEXER_MATH", {"fp8", "f16", "bf16"})) {
    case 0: return kMathFp8;
    case 1: return kMathF16;
    case 2: return kMathBf16;
    default: break;
  }
  return (arch == 90 || arch == 100) ? kMathF16 : kMathFp8;
}

int math_for(const IndexerParams& p, const DeviceTraits& dev) {
  return math_on(p.q_fp8, path_arch(dev), dev.force_bf16_math);
}

// Calls f.template run<MODE, MATH>() for a plan's mode and math (one kernel instantiation per
// pair; the .cu files are C++17, so functors rather than template lambdas).
template <int MODE, typename F>
void with_score_math(int math, const F& f) {
  if (math == kMathFp8) f.template run<MODE, kMathFp8>();
  else if (math == kMathF16) f.template run<MODE, kMathF16>();
  else f.template run<MODE, kMathBf16>();
}

template <typename F>
void with_score_kernel(int mode, int math, const F& f) {
  if (mode == kModeLogits) with_score_math<kModeLogits>(math, f);
  else if (mode == kModeKeys) with_score_math<kModeKeys>(math, f);
  else if (mode == kModeSample) with_score_math<kModeSample>(math, f);
  else if (mode == kModeAdmit) with_score_math<kModeAdmit>(math, f);
  else with_score_math<kModeFused>(math, f);
}

// Sets the dynamic shared memory limit of a kernel (kSmemLimit) once per device.
template <typename Kernel>
void allow_smem(Kernel kernel, std::atomic<uint64_t>& done_mask) {
  int device = 0;
  LATTE_CUDA_TRY(cudaGetDevice(&device));
  cuda::allow_dynamic_smem(kernel, kSmemLimit, device, done_mask);
}

template <int MODE, int MATH>
void ensure_score_smem() {
  static std::atomic<uint64_t> done{0};
  allow_smem(indexer_score_kernel<MODE, MATH>, done);
}

struct ScorePlan {
  int math = kMathFp8;
  int mode = kModeLogits;
  int hp = 8;
  int group = 1, num_groups = 0, chunk_len = kStageTokens, num_chunks = 0;
  int off_q = 0, off_coef = 0, off_tok = 0, off_misc = 0, off_buf = 0, smem = 0;
  int capb = 0;
  bool gbuf = false;
  [[nodiscard]] int64_t grid() const { return static_cast<int64_t>(num_groups) * num_chunks; }
};

void plan_layout(ScorePlan& pl, int topk) {
  const int nt = pl.group * pl.hp / 8;
  pl.off_q = kStages * kStageBytes;
  pl.off_coef = pl.off_q + nt * (pl.math == kMathFp8 ? 1024 : 2048);
  pl.off_tok = pl.off_coef + nt * 4 * static_cast<int>(sizeof(float2));
  pl.off_misc = pl.off_tok + 2 * kMaxGroup * 4;
  // admit mode: sampled_threshold's 2 x 4 ints
  const int misc = pl.mode == kModeFused ? static_cast<int>(align_up(sizeof(cuda::RunningTopk), 16)) : 32;
  pl.off_buf = pl.off_misc + misc;
  pl.smem = pl.off_buf;
  if (pl.mode == kModeAdmit) pl.smem += kAdmitBufBytes;  // warp buffers
  if (pl.mode == kModeFused) {
    // The running candidate buffers live in the workspace (L2-resident, a few KB per CTA), so
    // the CTA's shared memory stays that of the unfused kernel and as many CTAs fit per SM.
    pl.capb = static_cast<int>(align_up(static_cast<std::size_t>(2 * topk + 1024), 32));
    pl.gbuf = true;
  }
}

int env_debug() {
  return cuda::env_knob_int("cuda.indexer", "LATTE_CUDA_INDEXER_DEBUG", [](int v) { return v <= 15; },
                            "a sum of the flags 1, 2, 4, 8");
}

// Resident CTAs per SM of one score kernel instantiation.
struct ScoreOccupancy {
  int smem;
  int* n;
  cudaError_t* err;
  template <int MODE, int MATH>
  void run() const {
    ensure_score_smem<MODE, MATH>();
    *err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, indexer_score_kernel<MODE, MATH>, kThreads, smem);
  }
};

// Resident CTAs per SM of the score kernel for this plan (at least 1). Cached per device,
// mode, math and shared memory size: the occupancy query costs microseconds of host time per
// launch, which decode steps feel.
int score_ctas_per_sm(const ScorePlan& pl) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 1;
  }
  const auto key = std::make_tuple(device, pl.mode, pl.math, pl.smem);
  static std::mutex mu;
  static std::map<std::tuple<int, int, int, int>, int> cache;
  {
    const std::lock_guard<std::mutex> lock(mu);
    const auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  int n = 0;
  cudaError_t err = cudaSuccess;
  with_score_kernel(pl.mode, pl.math, ScoreOccupancy{pl.smem, &n, &err});
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return 1;
  }
  n = std::max(1, n);
  const std::lock_guard<std::mutex> lock(mu);
  cache[key] = n;
  return n;
}

// Grid for the logits / keys / admit modes: groups of query tokens (one token per group for
// admit) x chunks of `cover` positions, sized to the resident CTAs: one full wave when there
// are fewer groups than CTA slots (decode), about four waves otherwise (prefill).
ScorePlan plan_scores(const IndexerParams& p, int mode, int64_t cover, const DeviceTraits& dev) {
  ScorePlan pl;
  pl.math = math_for(p, dev);
  pl.mode = mode;
  pl.hp = (p.heads + 7) / 8 * 8;
  const int cmax = pl.math == kMathFp8 ? 256 : 128;
  const int gmax = std::max(1, std::min(kMaxGroup, cmax / pl.hp));
  int group = 1;
  if (p.token_request && mode != kModeAdmit) {
    const int64_t per = p.tokens / std::max(1, p.batch);
    while (group * 2 <= gmax && group * 2 <= per) group *= 2;
  }
  pl.group = group;
  pl.num_groups = static_cast<int>(ceil_div(p.tokens, group));
  plan_layout(pl, 0);
  const int64_t slots = static_cast<int64_t>(dev.sm_count) * score_ctas_per_sm(pl);
  const int64_t max_chunks = std::max<int64_t>(1, ceil_div(cover, kStageTokens));
  int64_t chunks = pl.num_groups <= slots ? slots / pl.num_groups : (4 * slots + pl.num_groups / 2) / pl.num_groups;
  chunks = std::clamp<int64_t>(chunks, 1, max_chunks);
  pl.chunk_len = static_cast<int>(ceil_div(ceil_div(cover, chunks), kStageTokens) * kStageTokens);
  pl.num_chunks = static_cast<int>(std::max<int64_t>(1, ceil_div(cover, pl.chunk_len)));
  return pl;
}

int64_t fused_chunk_bound(int64_t tokens, const DeviceTraits& dev) {
  const int64_t target = static_cast<int64_t>(dev.sm_count) * 4;
  return std::clamp<int64_t>(ceil_div(target, std::max<int64_t>(1, tokens)), 1, kMaxFusedChunks);
}

// A plan of one token per group (the fused path's passes), its chunks still to be set.
ScorePlan one_token_plan(const IndexerParams& p, int mode, int topk, const DeviceTraits& dev) {
  ScorePlan pl;
  pl.math = math_for(p, dev);
  pl.mode = mode;
  pl.hp = (p.heads + 7) / 8 * 8;
  pl.group = 1;
  pl.num_groups = p.tokens;
  plan_layout(pl, topk);
  return pl;
}

// The fused path's sample pass: each CTA scores a power-of-two share of a token's sampled
// positions, from cuda::kFusedSampleChunk (8 CTAs of 128 per token at 1024 samples) up to all of
// them, the most CTAs that fit in one wave of the device (its CTAs are latency-bound: a second
// wave doubled the pass; 16 CTAs of 128 at 32 tokens, two waves, took 14-15.6 us against 10-13
// for 8 CTAs of 256). Counts that are not powers of two (3 CTAs of 768 at 128 tokens) measured
// the same (interleaved A/B; docs/kernels/indexer.md, "Fused path").
ScorePlan plan_sample(const IndexerParams& p, int samples, const DeviceTraits& dev) {
  ScorePlan pl = one_token_plan(p, kModeSample, 0, dev);
  const int64_t slots = static_cast<int64_t>(dev.sm_count) * score_ctas_per_sm(pl);
  int per_token = samples / cuda::kFusedSampleChunk;
  while (per_token > 1 && per_token * static_cast<int64_t>(p.tokens) > slots) per_token /= 2;
  pl.chunk_len = samples / per_token;
  pl.num_chunks = per_token;
  return pl;
}

// Sampled positions per token: 1024 for rows of up to 131072 positions (the sample pass is
// 1.6-3.5 % of the admission pass's bytes at 2048; 1024 measured 0-1.7 % faster end to end,
// interleaved A/B on the H200); 2048 beyond, where 1024 would expect
// 24 / 1024 * 262144 = 6144 candidates, too near the list capacity (8192).
int fused_samples(const IndexerParams& p) { return p.max_len() <= 131072 ? 1024 : cuda::kFusedSamples; }

// The fused path's repair pass (the compaction kernel): chunks bounded so that each CTA's
// candidate buffer stays small.
ScorePlan plan_repair(const IndexerParams& p, int topk, const DeviceTraits& dev) {
  ScorePlan pl = one_token_plan(p, kModeFused, topk, dev);
  const int64_t max_len = std::max<int64_t>(1, p.max_len());
  const int64_t by_len = std::max<int64_t>(1, max_len / (2 * static_cast<int64_t>(topk)));
  const int64_t slots = static_cast<int64_t>(dev.sm_count) * score_ctas_per_sm(pl);
  const int64_t by_slots = std::max<int64_t>(1, slots / std::max(1, p.tokens));
  const int64_t chunks = std::min({fused_chunk_bound(p.tokens, dev), by_len, by_slots});
  pl.chunk_len = static_cast<int>(ceil_div(ceil_div(max_len, chunks), kStageTokens) * kStageTokens);
  pl.num_chunks = static_cast<int>(ceil_div(max_len, pl.chunk_len));
  return pl;
}

int64_t keys_ld(const IndexerParams& p) { return ceil_div(std::max<int64_t>(1, p.max_len()), kStageTokens) * kStageTokens; }

std::size_t unfused_bytes(const IndexerParams& p) {
  return align_up(static_cast<std::size_t>(p.tokens) * keys_ld(p) * 4, kAlign);
}

// The unfused path's keys plus its top-k's (split or spread) workspace.
std::size_t unfused_workspace_bytes(const IndexerParams& p, int topk, const DeviceTraits& dev) {
  return unfused_bytes(p) + cuda::split_workspace_bytes(p.tokens, p.max_len(), topk, dev.sm_count);
}

ScoreArgs score_args(const IndexerParams& p, const ScorePlan& pl) {
  ScoreArgs a{};
  a.q = static_cast<const uint8_t*>(p.q);
  a.q_fp8 = p.q_fp8 ? 1 : 0;
  const auto qptr = reinterpret_cast<std::uintptr_t>(p.q);
  if (pl.math == kMathFp8) {
    a.q_vec = (qptr % 16 == 0 && p.q_st % 16 == 0 && p.q_sh % 16 == 0) ? 1 : 0;
  } else if (p.q_fp8) {
    a.q_vec = (qptr % 8 == 0 && p.q_st % 8 == 0 && p.q_sh % 8 == 0) ? 1 : 0;
  } else {
    a.q_vec = (qptr % 16 == 0 && p.q_st % 8 == 0 && p.q_sh % 8 == 0) ? 1 : 0;
  }
  a.q_st = p.q_st;
  a.q_sh = p.q_sh;
  a.q_scale = p.q_fp8 ? p.q_scale : nullptr;
  a.qs_st = p.qs_st;
  a.qs_sh = p.qs_sh;
  a.w = p.weights;
  a.w_st = p.w_st;
  a.w_sh = p.w_sh;
  a.k_cache = p.k_cache;
  a.page_stride = p.page_stride;
  a.num_blocks = p.num_blocks;
  a.block_size = p.block_size;
  a.bt = p.block_table;
  a.bt_sr = p.bt_sr;
  a.bt_sc = p.bt_sc;
  a.batch = p.batch;
  a.max_blocks = p.max_blocks;
  a.tr = p.token_request;
  a.tr_s = p.tr_s;
  a.vl = p.visible_lens;
  a.vl_s = p.vl_s;
  a.vl_div = p.vl_div;
  a.tokens = p.tokens;
  a.heads = p.heads;
  a.hp = pl.hp;
  a.max_len = p.max_len();
  a.group = pl.group;
  a.num_groups = pl.num_groups;
  a.chunk_len = pl.chunk_len;
  a.num_chunks = pl.num_chunks;
  a.off_q = pl.off_q;
  a.off_coef = pl.off_coef;
  a.off_tok = pl.off_tok;
  a.off_misc = pl.off_misc;
  a.off_buf = pl.off_buf;
  a.smem_bytes = pl.smem;
  a.capb = pl.capb;
  a.debug = env_debug();
  return a;
}

// `pdl`: launched with programmatic stream serialization (the fused path's later passes).
template <int MODE, int MATH>
void launch_score(const ScoreArgs& a, const ScorePlan& pl, bool pdl, cudaStream_t stream) {
  ensure_score_smem<MODE, MATH>();
  cuda::launch_ex(indexer_score_kernel<MODE, MATH>, static_cast<unsigned>(pl.grid()), kThreads,
            static_cast<std::size_t>(pl.smem), pdl, stream, a);
}

struct ScoreLaunch {
  const ScoreArgs& a;
  const ScorePlan& pl;
  bool pdl;
  cudaStream_t stream;
  template <int MODE, int MATH>
  void run() const {
    launch_score<MODE, MATH>(a, pl, pdl, stream);
  }
};

// The span slot of a score pass (kernels/topk/topk_launch.hpp).
int span_slot(int mode) {
  return mode == kModeAdmit ? cuda::kSpanAdmit : mode == kModeFused ? cuda::kSpanRepair : cuda::kSpanScore;
}

void dispatch_score(const ScoreArgs& a, const ScorePlan& pl, cudaStream_t stream, bool pdl = false) {
  if (pl.grid() <= 0) return;
  if (pl.grid() > 0x7fffffff) {
    throw Error(ErrorCode::unsupported, "cuda.indexer: the problem needs more than 2^31 CTAs; split the batch");
  }
  ScoreArgs b = a;
  b.spans = cuda::topk_prof_spans();
  b.span = span_slot(pl.mode);
  with_score_kernel(pl.mode, pl.math, ScoreLaunch{b, pl, pdl, stream});
}


// The fused path: sample, admit and select passes, and the repair pass behind them.
struct FusedPlan {
  ScorePlan sample, admit, repair;
  int samples = cuda::kFusedSamples;  // sampled positions per token
  int list_cap = 0;  // candidates per token: what the top-k kernel selects from in shared memory
};

FusedPlan plan_fused(const IndexerParams& p, int topk, const DeviceTraits& dev) {
  FusedPlan f;
  f.samples = fused_samples(p);
  f.sample = plan_sample(p, f.samples, dev);
  f.admit = plan_scores(p, kModeAdmit, p.max_len(), dev);
  f.repair = plan_repair(p, topk, dev);
  f.list_cap = cuda::plan_topk(p.max_len(), topk).cap;
  return f;
}

struct FusedWorkspace {
  std::size_t samples = 0, tau = 0, count = 0, list_keys = 0, list_pos = 0;  // sample / admit
  std::size_t cand_keys = 0, cand_pos = 0, gbuf_keys = 0, gbuf_pos = 0;      // repair
  std::size_t total = 0;
};

FusedWorkspace fused_layout(const FusedPlan& f, int64_t tokens, int topk) {
  FusedWorkspace w;
  const auto T = static_cast<std::size_t>(tokens);
  std::size_t off = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t at = off;
    off = align_up(off + bytes, kAlign);
    return at;
  };
  w.samples = take(T * cuda::kFusedSamples * 4);
  w.tau = take(T * 4);
  w.count = take(T * 4);
  w.list_keys = take(T * static_cast<std::size_t>(f.list_cap) * 4);
  w.list_pos = take(T * static_cast<std::size_t>(f.list_cap) * 4);
  const std::size_t entries = T * f.repair.num_chunks * static_cast<std::size_t>(topk);
  w.cand_keys = take(entries * 4);
  w.cand_pos = take(entries * 4);
  if (f.repair.gbuf) {
    const std::size_t g = static_cast<std::size_t>(f.repair.grid()) * f.repair.capb;
    w.gbuf_keys = take(g * 4);
    w.gbuf_pos = take(g * 4);
  }
  w.total = off;
  return w;
}

std::size_t fused_bytes(const IndexerParams& p, int topk, const DeviceTraits& dev) {
  return fused_layout(plan_fused(p, topk, dev), p.tokens, topk).total;
}

TopkPath env_path() {
  switch (cuda::env_knob_choice("cuda.indexer", "LATTE_CUDA_INDEXER_PATH", {"automatic", "fused", "unfused"})) {
    case 1: return TopkPath::fused;
    case 2: return TopkPath::unfused;
    default: return TopkPath::automatic;
  }
}

}  // namespace

std::string describe_indexer(bool topk_op, bool q_fp8, int arch, int topk) {
  const int math = math_on(q_fp8, arch, false);
  std::string out = math == kMathFp8   ? "scores by mma.sync e4m3"
                    : math == kMathF16 ? "scores by f16 mma.sync (q and K widened from e4m3)"
                                       : std::string("scores by bf16 mma.sync (") + (q_fp8 ? "q and " : "") +
                                             "K widened exactly from e4m3)";
  out += " on sm_" + std::to_string(arch);
  if (!topk_op) return out + "; logits [T, L] written";
  out += "; exact radix top-" + std::to_string(topk);
  switch (env_path()) {
    case TopkPath::fused:
      return out + "; fused path (forced by LATTE_CUDA_INDEXER_PATH)";
    case TopkPath::unfused:
      return out + "; unfused path (forced by LATTE_CUDA_INDEXER_PATH)";
    case TopkPath::automatic:
      break;
  }
  return out + "; per call: unfused with the top-k spread over the GPU for up to 8 query tokens and 131072 "
               "keys (from 32768 keys scores and top-k in one cooperative kernel); else fused (no [T, L] scores) "
               "for 1 query token, or up to 32 at contexts of 128K+, or when the workspace holds no row of "
               "scores; else unfused";
}

namespace {

// The limits cuda.indexer declares (indexer_launch.hpp), for callers that bypass selection.
void require_limits(const IndexerParams& p, int topk) {
  if (p.heads > kMaxHeads) {
    throw Error(ErrorCode::unsupported,
                "cuda.indexer: " + std::to_string(p.heads) + " index heads; it takes 1.." +
                    std::to_string(kMaxHeads) + ". Split the heads into several calls and add the "
                    "logits, or use cpu.reference.");
  }
  if (topk > kMaxTopk) {
    throw Error(ErrorCode::unsupported,
                "cuda.indexer: indexer_topk with topk " + std::to_string(topk) + " > " +
                    std::to_string(kMaxTopk) + "; use cpu.reference for larger topk.");
  }
}

}  // namespace

void launch_indexer_logits(const IndexerParams& p, float* logits, int64_t ld_t, int64_t ld_s,
                           int64_t logits_len, const DeviceTraits& dev, void* stream) {
  require_limits(p, 1);
  if (p.tokens <= 0 || logits_len <= 0) return;
  const ScorePlan pl = plan_scores(p, kModeLogits, logits_len, dev);
  ScoreArgs a = score_args(p, pl);
  a.logits = logits;
  a.lg_st = ld_t;
  a.lg_ss = ld_s;
  a.logits_len = logits_len;
  dispatch_score(a, pl, static_cast<cudaStream_t>(stream));
}

std::size_t fused_workspace_bound(int64_t tokens, int topk, int heads, bool q_fp8, const DeviceTraits& dev) {
  IndexerParams p;
  p.tokens = static_cast<int>(std::max<int64_t>(1, tokens));
  p.heads = heads;
  p.q_fp8 = q_fp8;
  // A context long enough that the chunk count is bounded by the token count only, or the
  // longest rows the fused path runs (its final select is the one-CTA top-k; longer rows take
  // the unfused path): planning longer ones threw for topk past 2824, failing every call.
  p.block_size = 1;
  p.max_blocks = static_cast<int>(std::min(kMaxFusedChunks * 2 * static_cast<int64_t>(std::max(1, topk)) + kStageTokens,
                                           cuda::topk_max_positions(std::max(1, topk))));
  return fused_bytes(p, std::max(1, topk), dev);
}

std::size_t topk_workspace_bytes(const IndexerParams& p, int topk, TopkPath path, const DeviceTraits& dev) {
  if (p.tokens <= 0) return 0;
  const std::size_t unfused = unfused_workspace_bytes(p, topk, dev);
  if (path == TopkPath::unfused) return unfused;
  if (path == TopkPath::fused) return fused_bytes(p, topk, dev);
  if (cuda::spread_beats_fused(p.tokens, p.max_len(), dev.sm_count) || cuda::topk_rows_too_long(p.max_len(), topk))
    return unfused;
  return std::min(unfused, fused_bytes(p, topk, dev));
}

namespace {

// The automatic rule. When it sizes the fused path's plan, the plan is left in `fused` so that
// the launch does not plan it again.
TopkPath pick_topk_path(const IndexerParams& p, int topk, std::size_t workspace_bytes, const DeviceTraits& dev,
                        std::optional<FusedPlan>& fused) {
  const TopkPath forced = env_path();
  if (forced != TopkPath::automatic) return forced;
  // Rows too long for the one-CTA top-k (the fused path's final select): the unfused path with
  // the spread top-k, a few tokens per pass.
  if (cuda::topk_rows_too_long(p.max_len(), topk)) return TopkPath::unfused;
  // Up to 8 tokens and 131072 keys, the unfused path with the spread top-k measured faster
  // (cuda::spread_beats_fused) when the workspace holds it.
  if (cuda::spread_beats_fused(p.tokens, p.max_len(), dev.sm_count) &&
      unfused_workspace_bytes(p, topk, dev) <= workspace_bytes)
    return TopkPath::unfused;
  // Measured on the H200 (docs/kernels/indexer.md, "Fused path"; the two paths timed interleaved):
  // fused faster for one token at 8K, 32K and 128K (2-10 %) and for 1 to 32 tokens at 128K
  // (2-7 %); unfused faster for 32 tokens at 8K-32K (1-5 %), for 128 tokens (4 % at 128K)
  // and in prefill. Otherwise the unfused path runs, over as many tokens per pass as the
  // workspace holds keys for; fused also when not even one row of keys fits.
  const bool fused_faster = p.tokens == 1 || (p.tokens <= 32 && p.max_len() >= 131072);
  if (fused_faster) {
    fused = plan_fused(p, topk, dev);
    if (fused_layout(*fused, p.tokens, topk).total <= workspace_bytes) return TopkPath::fused;
  }
  if (keys_ld(p) * 4 <= static_cast<int64_t>(workspace_bytes)) return TopkPath::unfused;
  return TopkPath::fused;
}

}  // namespace

TopkPath choose_topk_path(const IndexerParams& p, int topk, std::size_t workspace_bytes, const DeviceTraits& dev) {
  std::optional<FusedPlan> unused;
  return pick_topk_path(p, topk, workspace_bytes, dev, unused);
}

namespace {

// The scored spread kernel against the keys pass followed by the spread top-k, measured on the
// H200 (docs/kernels/indexer.md, "Batch 1", the two alternating in one process, two processes):
// 0.91-0.98 of the time at 1 x 32K, 1 x 128K, 2 x 32K and 4 x 32K (slices of 512-996
// positions); 0.97-1.03 at 1 x 8K, where the keys are few; 0.95-1.05 at 8 x 32K (slices of 2048:
// four chunks per warp, only the first one's loads overlapped). LATTE_CUDA_TOPK_SCORED=0 turns it
// off, =1 on wherever it runs.
constexpr int64_t kScoredSpreadMinKeys = 32768;
constexpr int kScoredSpreadBestSlice = 1024;

template <int MATH>
void launch_scored_spread(const ScoreArgs& sa, const cuda::TopkArgs& t, const cuda::SpreadArgs& g, int smem, bool pdl,
                          cudaStream_t stream) {
  static std::atomic<uint64_t> done{0};
  allow_smem(indexer_topk_scored_spread_kernel<MATH>, done);
  cuda::launch_kernel(indexer_topk_scored_spread_kernel<MATH>, static_cast<unsigned>(static_cast<int64_t>(g.rows) * g.slices),
                      cuda::kSpreadThreads, static_cast<std::size_t>(smem), pdl, true, stream, sa, t, g);
}

}  // namespace

bool scored_spread_takes(const IndexerParams& p, int topk, std::size_t workspace_bytes, const DeviceTraits& dev) {
  const int knob = cuda::env_knob_choice("cuda.indexer", "LATTE_CUDA_TOPK_SCORED", {"0", "1"});
  if (p.tokens <= 0 || topk <= 0 || p.heads > kMaxHeads || knob == 0) return false;
  const cuda::SpreadShape sh = cuda::spread_shape(p.tokens, p.max_len(), dev.sm_count);
  if (sh.slices == 0 || sh.slice_len > kScoredSpreadMaxSlice || sh.bytes > workspace_bytes) return false;
  return knob == 1 || (p.tokens * p.max_len() >= kScoredSpreadMinKeys && sh.slice_len <= kScoredSpreadBestSlice);
}

void launch_scored_spread_topk(const IndexerParams& p, const TopkOutput& out, void* workspace,
                               std::size_t workspace_bytes, const DeviceTraits& dev, void* stream_ptr) {
  require_limits(p, out.topk);
  if (p.tokens <= 0 || out.topk <= 0) return;
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  const cuda::SpreadArgs g = cuda::prepare_spread(p, workspace, workspace_bytes, dev.sm_count, stream);
  if (g.slices == 0 || g.slice_len > kScoredSpreadMaxSlice) {
    throw Error(ErrorCode::invalid_argument,
                "indexer_topk: the scored spread top-k does not take " + std::to_string(p.tokens) + " tokens of " +
                    std::to_string(p.max_len()) + " positions with " + std::to_string(workspace_bytes) +
                    " bytes of workspace; ask scored_spread_takes() first");
  }
  // The matrix path of the keys pass, widened to 16 bits where that pass would use e4m3 mma.sync.
  ScorePlan pl = one_token_plan(p, kModeKeys, 0, dev);
  if (pl.math == kMathFp8) pl.math = kMathF16;
  const ScoreArgs sa = score_args(p, pl);
  cuda::TopkArgs t = cuda::topk_args(p, out, cuda::TopkPlan{});
  t.prof = cuda::topk_prof_buffer();
  const int smem = scored_spread_smem(g.slice_len, pl.hp);
  const bool pdl = topk_pdl(dev);
  cuda::topk_prof_begin(stream);
  if (pl.math == kMathF16) launch_scored_spread<kMathF16>(sa, t, g, smem, pdl, stream);
  else launch_scored_spread<kMathBf16>(sa, t, g, smem, pdl, stream);
  cuda::topk_prof_end("scored spread", stream);
}

void launch_indexer_topk(const IndexerParams& p, const TopkOutput& out, TopkPath path, void* workspace,
                         std::size_t workspace_bytes, const DeviceTraits& dev, void* stream_ptr) {
  require_limits(p, out.topk);
  if (p.tokens <= 0 || out.topk <= 0) return;
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  std::optional<FusedPlan> fused;  // planned once: it sizes the workspace and drives the launch
  if (path == TopkPath::automatic) path = pick_topk_path(p, out.topk, workspace_bytes, dev, fused);
  // The unfused path of a few tokens: scores and top-k in one cooperative kernel.
  if (path == TopkPath::unfused && scored_spread_takes(p, out.topk, workspace_bytes, dev)) {
    launch_scored_spread_topk(p, out, workspace, workspace_bytes, dev, stream_ptr);
    return;
  }
  if (path == TopkPath::fused && !fused) fused = plan_fused(p, out.topk, dev);
  const std::optional<FusedWorkspace> fw =
      fused ? std::optional<FusedWorkspace>(fused_layout(*fused, p.tokens, out.topk)) : std::nullopt;
  const std::size_t need = path == TopkPath::unfused
                               ? static_cast<std::size_t>(keys_ld(p) * 4)  // one token per pass at least
                               : fw->total;
  if (need > workspace_bytes || (need > 0 && workspace == nullptr)) {
    throw Error(ErrorCode::invalid_argument,
                "cuda.indexer: indexer_topk (" + std::string(path == TopkPath::fused ? "fused" : "unfused") +
                    " path) needs " + std::to_string(need) + " bytes of workspace for " +
                    std::to_string(p.tokens) + " tokens, got " + std::to_string(workspace_bytes) +
                    ". Make the kernel with spec.max_tokens >= the tokens of the call.");
  }
  auto* ws = static_cast<uint8_t*>(workspace);
  const int64_t per_pass64 =
      path == TopkPath::unfused ? cuda::keys_tokens_per_pass(p.tokens, p.max_len(), out.topk, keys_ld(p) * 4,
                                                             workspace_bytes, dev.sm_count)
                                : p.tokens;
  if (per_pass64 == 0) cuda::refuse_long_rows("cuda.indexer", p.max_len(), workspace_bytes, dev.sm_count);
  if (per_pass64 < p.tokens) {
    // Keys (and, for rows too long for the one-CTA top-k, the spread top-k's state) for all
    // tokens do not fit: run the tokens in slices that do.
    const int per_pass = static_cast<int>(per_pass64);
    for (int t0 = 0; t0 < p.tokens; t0 += per_pass) {
      const int n = std::min(per_pass, p.tokens - t0);
      const TopkOutput o = out.from_row(t0);
      launch_indexer_topk(p.token_slice(t0, n), o, TopkPath::unfused, workspace, workspace_bytes, dev, stream_ptr);
    }
    return;
  }
  if (path == TopkPath::unfused) {
    cuda::topk_prof_begin(stream);
    const ScorePlan pl = plan_scores(p, kModeKeys, p.max_len(), dev);
    ScoreArgs a = score_args(p, pl);
    a.keys = reinterpret_cast<uint32_t*>(ws);
    a.keys_ld = keys_ld(p);
    const std::size_t kb = unfused_bytes(p);
    a.key_hist = cuda::prepare_keys_topk(p, out.topk, ws + kb, workspace_bytes - kb, dev.sm_count, stream);
    dispatch_score(a, pl, stream);
    cuda::launch_keys_topk(p, out, a.keys, a.keys_ld, ws + kb, workspace_bytes - kb, dev.sm_count, topk_pdl(dev), stream);
    cuda::topk_prof_end("unfused", stream);
    return;
  }
  // Fused: sample pass, admission pass (tau per token from its samples, then candidates >= tau
  // into per-token lists), the repair pass, whose CTAs exit at once for every token whose list
  // is complete, and the top-k of each list or repair buffer (fused_threshold.cuh).
  const FusedPlan& fp = *fused;
  const cuda::TopkPlan tp = cuda::plan_topk(p.max_len(), out.topk);
  auto* samples = reinterpret_cast<uint32_t*>(ws + fw->samples);
  auto* tau = reinterpret_cast<uint32_t*>(ws + fw->tau);
  auto* count = reinterpret_cast<int*>(ws + fw->count);
  auto* list_keys = reinterpret_cast<uint32_t*>(ws + fw->list_keys);
  auto* list_pos = reinterpret_cast<int32_t*>(ws + fw->list_pos);

  cuda::topk_prof_begin(stream);
  ScoreArgs s = score_args(p, fp.sample);
  s.topk = out.topk;
  s.sample_keys = samples;
  s.samples = fp.samples;
  s.row_total = count;
  dispatch_score(s, fp.sample, stream);

  const bool pdl = topk_pdl(dev);

  ScoreArgs a = score_args(p, fp.admit);
  a.topk = out.topk;
  a.sample_keys = samples;
  a.samples = fp.samples;
  a.row_tau = tau;
  a.row_total = count;
  a.list_keys = list_keys;
  a.list_pos = list_pos;
  a.list_cap = fp.list_cap;
  dispatch_score(a, fp.admit, stream, pdl);

  ScoreArgs r = score_args(p, fp.repair);
  r.topk = out.topk;
  r.repair = 1;
  r.row_tau = tau;
  r.row_total = count;
  r.list_cap = fp.list_cap;
  r.cand_keys = reinterpret_cast<uint32_t*>(ws + fw->cand_keys);
  r.cand_pos = reinterpret_cast<int32_t*>(ws + fw->cand_pos);
  if (fp.repair.gbuf) {
    r.gbuf_keys = reinterpret_cast<uint32_t*>(ws + fw->gbuf_keys);
    r.gbuf_pos = reinterpret_cast<int32_t*>(ws + fw->gbuf_pos);
  }
  dispatch_score(r, fp.repair, stream, pdl);

  cuda::TopkArgs t = cuda::topk_args(p, out, tp);
  t.keys = list_keys;
  t.cpos = list_pos;
  t.ld = fp.list_cap;
  t.n_fixed = fp.list_cap;
  t.cand_count = count;
  t.dense = 1;
  t.vec = (fp.list_cap % 4 == 0) ? 1 : 0;
  cuda::TopkArgs u = cuda::topk_args(p, out, tp);
  u.keys = r.cand_keys;
  u.cpos = r.cand_pos;
  u.ld = static_cast<int64_t>(fp.repair.num_chunks) * out.topk;
  u.n_fixed = u.ld;
  u.vec = (u.ld % 4 == 0) ? 1 : 0;
  u.repair_tau = tau;
  u.repair_cap = fp.list_cap;
  cuda::launch_fused_final(t, u, tp, pdl, stream);
  cuda::topk_prof_end("fused path", stream);
}

}  // namespace latte::cuda_indexer
