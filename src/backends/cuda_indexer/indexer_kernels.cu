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

#include "cuda/check.cuh"
#include "cuda/smem_limit.hpp"
#include "indexer_launch.hpp"
#include "latte/error.hpp"
#include "score_kernel.cuh"
#include "topk_kernel.cuh"

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

// The score kernel's matrix path. e4m3 queries: mma.sync e4m3 where it is native (sm_89,
// sm_120), K and q widened to f16 by the hardware conversion on sm_90 / sm_100 (8-17 % faster
// than e4m3 mma.sync on the H200, docs/performance.md; sm_100 by analogy, not measured),
// bf16 widening below sm_89. bf16 queries: bf16. LATTE_CUDA_INDEXER_MATH=fp8|f16|bf16 forces a
// path where the device can run it (measurements, tests).
int math_on(bool q_fp8, int arch, bool force_bf16) {
  if (!q_fp8 || arch < 89 || force_bf16) return kMathBf16;
  const char* env = std::getenv("LATTE_CUDA_INDEXER_MATH");
  if (env && *env != '\0') {
    if (std::strcmp(env, "bf16") == 0) return kMathBf16;
    if (std::strcmp(env, "fp8") == 0) return kMathFp8;
    if (std::strcmp(env, "f16") == 0) return kMathF16;
    throw Error(ErrorCode::invalid_argument, std::string("cuda.indexer: LATTE_CUDA_INDEXER_MATH=") + env +
                                                 " is not a matrix path; use fp8, f16 or bf16 (or unset it)");
  }
  return (arch == 90 || arch == 100) ? kMathF16 : kMathFp8;
}

int math_for(const IndexerProblem& p, const DeviceTraits& dev) {
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
  const int misc = pl.mode == kModeFused ? static_cast<int>(align_up(sizeof(FusedMisc), 16)) : 32;
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

// Whether environment variable `name` is set to `value` (measurement switches).
bool env_is(const char* name, const char* value) {
  const char* e = std::getenv(name);
  return e != nullptr && std::strcmp(e, value) == 0;
}

int env_debug() {
  const char* v = std::getenv("LATTE_CUDA_INDEXER_DEBUG");
  return v ? std::atoi(v) : 0;
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
ScorePlan plan_scores(const IndexerProblem& p, int mode, int64_t cover, const DeviceTraits& dev) {
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
ScorePlan one_token_plan(const IndexerProblem& p, int mode, int topk, const DeviceTraits& dev) {
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
// positions, from kFusedSampleChunk (8 CTAs of 128 per token at 1024 samples) up to all of
// them, the most CTAs that fit in one wave of the device (its CTAs are latency-bound: a second
// wave doubled the pass; 16 CTAs of 128 at 32 tokens, two waves, took 14-15.6 us against 10-13
// for 8 CTAs of 256). Counts that are not powers of two (3 CTAs of 768 at 128 tokens) measured
// the same (interleaved A/B, session 5).
ScorePlan plan_sample(const IndexerProblem& p, int samples, const DeviceTraits& dev) {
  ScorePlan pl = one_token_plan(p, kModeSample, 0, dev);
  const int64_t slots = static_cast<int64_t>(dev.sm_count) * score_ctas_per_sm(pl);
  int per_token = samples / kFusedSampleChunk;
  while (per_token > 1 && per_token * static_cast<int64_t>(p.tokens) > slots) per_token /= 2;
  pl.chunk_len = samples / per_token;
  pl.num_chunks = per_token;
  return pl;
}

// Sampled positions per token: 1024 for rows of up to 131072 positions (the sample pass is
// 1.6-3.5 % of the admission pass's bytes at 2048; 1024 measured 0-1.7 % faster end to end,
// interleaved A/B on the H200, session 5); 2048 beyond, where 1024 would expect
// 24 / 1024 * 262144 = 6144 candidates, too near the list capacity (8192).
int fused_samples(const IndexerProblem& p) { return p.max_len() <= 131072 ? 1024 : kFusedSamples; }

// The fused path's repair pass (the compaction kernel): chunks bounded so that each CTA's
// candidate buffer stays small.
ScorePlan plan_repair(const IndexerProblem& p, int topk, const DeviceTraits& dev) {
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

int64_t keys_ld(const IndexerProblem& p) { return ceil_div(std::max<int64_t>(1, p.max_len()), kStageTokens) * kStageTokens; }

std::size_t unfused_bytes(const IndexerProblem& p) {
  return align_up(static_cast<std::size_t>(p.tokens) * keys_ld(p) * 4, kAlign);
}

ScoreArgs score_args(const IndexerProblem& p, const ScorePlan& pl) {
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

// kernel<<<grid, threads, smem, stream>>>(args...), with the programmatic stream
// serialization attribute when `pdl` (on the same stream, so stream capture keeps it).
template <typename... Params, typename... Args>
void launch_ex(void (*kernel)(Params...), unsigned grid, unsigned threads, std::size_t smem, bool pdl,
               cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = pdl ? attr : nullptr;
  cfg.numAttrs = pdl ? 1 : 0;
  LATTE_CUDA_TRY(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// `pdl`: launched with programmatic stream serialization (the fused path's later passes).
template <int MODE, int MATH>
void launch_score(const ScoreArgs& a, const ScorePlan& pl, bool pdl, cudaStream_t stream) {
  ensure_score_smem<MODE, MATH>();
  launch_ex(indexer_score_kernel<MODE, MATH>, static_cast<unsigned>(pl.grid()), kThreads,
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

unsigned long long* prof_buffer();

// The span slot of a score pass (topk_kernel.cuh, spans_of).
int span_slot(int mode) { return mode == kModeAdmit ? 2 : mode == kModeFused ? 3 : 0; }

void dispatch_score(const ScoreArgs& a, const ScorePlan& pl, cudaStream_t stream, bool pdl = false) {
  if (pl.grid() <= 0) return;
  if (pl.grid() > 0x7fffffff) {
    throw Error(ErrorCode::unsupported, "cuda.indexer: the problem needs more than 2^31 CTAs; split the batch");
  }
  ScoreArgs b = a;
  b.spans = prof_buffer() ? prof_buffer() + 32 : nullptr;
  b.span = span_slot(pl.mode);
  with_score_kernel(pl.mode, pl.math, ScoreLaunch{b, pl, pdl, stream});
}


// Shared memory of the top-k kernel for rows of up to `max_positions` positions.
struct TopkPlan {
  int cap = 0, bitmap_words = 0, smem = 0;
};

TopkPlan plan_topk(int64_t max_positions, int topk) {
  TopkPlan t;
  t.bitmap_words = static_cast<int>(std::max<int64_t>(1, ceil_div(max_positions, 32)));
  const int fixed = static_cast<int>(align_up(sizeof(TopkShared), 16)) +
                    static_cast<int>(align_up(static_cast<std::size_t>(t.bitmap_words), 4)) * 4;
  int cap = (kSmemLimit - fixed) / 8 / 256 * 256;
  cap = std::min(cap, 8192);
  if (cap < std::max(kSamples, topk) || 2 * cap < t.bitmap_words) {
    throw Error(ErrorCode::unsupported,
                "cuda.indexer: rows of " + std::to_string(max_positions) +
                    " positions need more shared memory than the top-k kernel has (at most about "
                    "524288 positions, i.e. max_blocks * block_size); use a narrower block_table");
  }
  t.cap = cap;
  t.smem = fixed + cap * 8;
  return t;
}

// Histograms of the top-k selects: without match.any (default) or with it
// (LATTE_CUDA_TOPK_HIST=match, measurements).
bool topk_direct_hist() {
  static const bool v = !env_is("LATTE_CUDA_TOPK_HIST", "match");
  return v;
}

// LATTE_CUDA_TOPK_PROF=1 (measurements only: synchronizes): phase marks of row 0 (32 entries)
// and the kernel spans behind them (cuda/kernel_span.cuh), printed to stderr every 20th
// indexer_topk or top-k call.
constexpr int kProfWords = 32 + 5 * cuda::kSpanSlots;
unsigned long long* prof_buffer() {
  static unsigned long long* buf = [] {
    unsigned long long* b = nullptr;
    if (env_is("LATTE_CUDA_TOPK_PROF", "1") && cudaMalloc(&b, kProfWords * sizeof(unsigned long long)) != cudaSuccess) b = nullptr;
    return b;
  }();
  return buf;
}

// Calls nest (indexer_topk around its top-k launch): the outermost pair clears and prints.
int prof_depth = 0;

void prof_begin(cudaStream_t stream) {
  if (!prof_buffer() || prof_depth++ > 0) return;
  LATTE_CUDA_TRY(cudaMemsetAsync(prof_buffer(), 0, kProfWords * sizeof(unsigned long long), stream));
  LATTE_CUDA_TRY(cudaMemsetAsync(prof_buffer() + 32, 0xFF, cuda::kSpanSlots * sizeof(unsigned long long), stream));
}

void prof_end(const char* what, cudaStream_t stream) {
  if (!prof_buffer() || --prof_depth > 0) return;
  static int calls = 0;
  if (++calls % 20 != 0) return;
  unsigned long long h[kProfWords];
  LATTE_CUDA_TRY(cudaStreamSynchronize(stream));
  LATTE_CUDA_TRY(cudaMemcpy(h, prof_buffer(), sizeof(h), cudaMemcpyDeviceToHost));
  const unsigned long long t0 = h[16] ? h[16] : h[0];
  std::string line = std::string("topk prof ") + what + " (us from start; cycles of phase):";
  const char* names[] = {"entry", "zero", "sample", "keep", "select", "rank", "", "", "k1in", "k1out", "k2in", "k2out"};
  for (int slot : {8, 9, 10, 11, 0, 1, 2, 3, 4, 5}) {
    if (!h[2 * slot]) continue;
    char buf[96];
    std::snprintf(buf, sizeof(buf), " %s %.2f", names[slot], (h[2 * slot] - t0) / 1000.0);
    line += buf;
    if (slot >= 1 && slot <= 5 && h[2 * (slot - 1) + 1]) {
      // cycles since the previous present mark of the same kernel
      for (int q = slot - 1; q >= 0; --q)
        if (h[2 * q]) {
          std::snprintf(buf, sizeof(buf), "(%llu)", h[2 * slot + 1] - h[2 * q + 1]);
          line += buf;
          break;
        }
    }
  }
  // The candidate select of row 0 (block_select_threshold's marks): cycles per phase.
  if (h[24] && h[25]) {
    char buf[200];
    auto d = [&](int i, int j) { return h[24 + i] && h[24 + j] ? static_cast<long long>(h[24 + j] - h[24 + i]) : -1ll; };
    std::snprintf(buf, sizeof(buf), "\n  select cycles: minmax %lld pass1 %lld passes %lld (%llu) gather %lld (bin %llu) rank %lld",
                  d(0, 1), d(1, 2), d(2, 3), h[30], d(3, 4), h[31], d(4, 5));
    line += buf;
  }
  // Kernel spans, us from the first kernel's start: first CTA start - last CTA end, then the
  // last CTA start and the longest CTA.
  const unsigned long long* start = h + 32;
  const unsigned long long* end = start + cuda::kSpanSlots;
  const unsigned long long* last_start = end + cuda::kSpanSlots;
  const unsigned long long* longest = last_start + cuda::kSpanSlots;
  const unsigned long long* longest_cycles = longest + cuda::kSpanSlots;
  unsigned long long s0 = ~0ull;
  for (int k = 0; k < cuda::kSpanSlots; ++k) s0 = std::min(s0, start[k]);
  line += "\n  spans (us: first start-last end [last start, longest CTA @ its SM clock]):";
  const char* span_names[] = {"score", "", "admit", "repair", "topk", "collect", "final", ""};
  for (int k = 0; k < cuda::kSpanSlots; ++k) {
    if (start[k] == ~0ull) continue;
    char buf[160];
    std::snprintf(buf, sizeof(buf), " %s %.2f-%.2f [%.2f, %.2f @ %.2f GHz]", span_names[k], (start[k] - s0) / 1000.0,
                  end[k] ? (end[k] - s0) / 1000.0 : -1.0, (last_start[k] - s0) / 1000.0, longest[k] / 1000.0,
                  longest[k] ? static_cast<double>(longest_cycles[k]) / static_cast<double>(longest[k]) : 0.0);
    line += buf;
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

template <int SRC, bool DH>
void launch_topk_kernel_l(const TopkArgs& a, const TopkPlan& t, cudaStream_t stream) {
  static std::atomic<uint64_t> done{0};
  allow_smem(topk_rows_kernel<SRC, DH>, done);
  TopkArgs b = a;
  b.prof = prof_buffer();
  prof_begin(stream);
  topk_rows_kernel<SRC, DH><<<static_cast<unsigned>(a.rows), kTopkThreads, t.smem, stream>>>(b);
  LATTE_CUDA_CHECK_LAUNCH("topk_rows_kernel");
  prof_end("single", stream);
}

template <int SRC>
void launch_topk_kernel(const TopkArgs& a, const TopkPlan& t, cudaStream_t stream) {
  if (a.rows <= 0) return;
  if (topk_direct_hist()) launch_topk_kernel_l<SRC, true>(a, t, stream);
  else launch_topk_kernel_l<SRC, false>(a, t, stream);
}

// Few long rows: each row split over S CTAs (topk_kernel.cuh, "Rows split over several CTAs").
struct SplitPlan {
  int slices = 0, slice_len = 0, list_cap = 0;
  std::size_t hist = 0, keys = 0, pos = 0, count = 0, total = 0;
  [[nodiscard]] bool on() const { return slices > 1; }
};

// Measured on the H200 (2048 of n): split 8 x 131072 40.7 vs one CTA per row 51.8 us, 1 x 131072
// 37.3 vs 48.7, 4 x 262144 47.0 vs 73.3; but 8 x 32768 33.6 vs 31.2, 32 x 131072 68.8 vs 55.5,
// 64 x 65536 67.5 vs 42.2. So only rows of >= 65536 positions, at most SMs / 8 of them.
constexpr int64_t kSplitMinLen = 65536;
constexpr int kSplitRowsPerSm = 8;  // split when rows * 8 <= SMs
constexpr int kSplitMaxSlices = 32;

bool split_enabled() {
  static const bool v = !env_is("LATTE_CUDA_TOPK_SPLIT", "0");
  return v;
}

// rows of up to n positions; list_cap = the final kernel's candidate capacity.
SplitPlan plan_split(int64_t rows, int64_t n, int list_cap, const DeviceTraits& dev) {
  SplitPlan sp;
  if (!split_enabled() || rows <= 0 || n < kSplitMinLen || rows * kSplitRowsPerSm > dev.sm_count) return sp;
  int64_t S = std::min<int64_t>(kSplitMaxSlices, std::max<int64_t>(1, dev.sm_count / rows));
  S = std::max(S, ceil_div(n, kSplitMaxLen));
  const int64_t L = std::min<int64_t>(kSplitMaxLen, ceil_div(ceil_div(n, S), kSplitChunk) * kSplitChunk);
  S = ceil_div(n, L);
  if (S < 2 || S * rows > 0x7fffffff) return sp;
  sp.slices = static_cast<int>(S);
  sp.slice_len = static_cast<int>(L);
  sp.list_cap = list_cap;
  std::size_t off = 0;
  sp.hist = off;
  off = align_up(off + static_cast<std::size_t>(rows * S) * kSplitBins * 4, kAlign);
  sp.keys = off;
  off = align_up(off + static_cast<std::size_t>(rows) * list_cap * 4, kAlign);
  sp.pos = off;
  off = align_up(off + static_cast<std::size_t>(rows) * list_cap * 4, kAlign);
  sp.count = off;
  off = align_up(off + static_cast<std::size_t>(rows) * 4, kAlign);
  sp.total = off;
  return sp;
}

// Programmatic dependent launch of the collect and final kernels (sm_90+, topk_kernel.cuh
// pdl_wait); LATTE_CUDA_TOPK_PDL=0 turns it off (measurements).
bool topk_pdl_enabled() {
  static const bool v = !env_is("LATTE_CUDA_TOPK_PDL", "0");
  return v;
}

template <int SRC, bool DH>
void launch_split_final(const TopkArgs& a, const TopkArgs& c, const TopkPlan& t, bool pdl, cudaStream_t stream) {
  static std::atomic<uint64_t> done{0};
  allow_smem(topk_split_final_kernel<SRC, DH>, done);
  launch_ex(topk_split_final_kernel<SRC, DH>, static_cast<unsigned>(a.rows), kTopkThreads,
            static_cast<std::size_t>(t.smem), pdl, stream, a, c);
}

void launch_fused_final(const TopkArgs& list, const TopkArgs& repair, const TopkPlan& t, bool pdl, cudaStream_t stream) {
  static std::atomic<uint64_t> done_direct{0}, done_match{0};
  const auto grid = static_cast<unsigned>(list.rows);
  const auto smem = static_cast<std::size_t>(t.smem);
  TopkArgs l = list, r = repair;  // the caller's prof_begin / prof_end bracket this launch
  l.prof = r.prof = prof_buffer();
  if (topk_direct_hist()) {
    allow_smem(topk_fused_final_kernel<true>, done_direct);
    launch_ex(topk_fused_final_kernel<true>, grid, kTopkThreads, smem, pdl, stream, l, r);
  } else {
    allow_smem(topk_fused_final_kernel<false>, done_match);
    launch_ex(topk_fused_final_kernel<false>, grid, kTopkThreads, smem, pdl, stream, l, r);
  }
}

// The three split kernels over workspace `ws` (sp.total bytes). The collect and final kernels
// start early (programmatic dependent launch) on sm_90+.
template <int SRC>
void launch_topk_split(const TopkArgs& a, const TopkPlan& t, const SplitPlan& sp, uint8_t* ws,
                       const DeviceTraits& dev, cudaStream_t stream) {
  if (a.rows <= 0) return;
  SplitArgs g{};
  g.slices = sp.slices;
  g.slice_len = sp.slice_len;
  g.list_cap = sp.list_cap;
  g.hist = reinterpret_cast<int*>(ws + sp.hist);
  g.list_keys = reinterpret_cast<uint32_t*>(ws + sp.keys);
  g.list_pos = reinterpret_cast<int32_t*>(ws + sp.pos);
  g.list_count = reinterpret_cast<int*>(ws + sp.count);
  const auto grid = static_cast<unsigned>(static_cast<int64_t>(a.rows) * sp.slices);
  const bool pdl = path_arch(dev) >= 90 && topk_pdl_enabled();
  prof_begin(stream);
  TopkArgs b = a;
  b.prof = prof_buffer();
  if (topk_direct_hist()) topk_split_hist_kernel<SRC, true><<<grid, kTopkThreads, 0, stream>>>(b, g);
  else topk_split_hist_kernel<SRC, false><<<grid, kTopkThreads, 0, stream>>>(b, g);
  LATTE_CUDA_CHECK_LAUNCH("topk_split_hist_kernel");
  launch_ex(topk_split_collect_kernel<SRC>, grid, kTopkThreads, 0, pdl, stream, b, g);
  TopkArgs c = b;
  c.f32 = nullptr;
  c.keys = g.list_keys;
  c.cpos = g.list_pos;
  c.ld = sp.list_cap;
  c.vec = 1;
  c.n_fixed = 0;
  c.cand_count = g.list_count;
  c.dense = 1;
  if (SRC == kSrcF32) c.batch = a.rows;  // token_request is null: row r is batch row r
  if (topk_direct_hist()) launch_split_final<SRC, true>(b, c, t, pdl, stream);
  else launch_split_final<SRC, false>(b, c, t, pdl, stream);
  prof_end("split", stream);
}

TopkArgs topk_args(const IndexerProblem& p, const TopkOutput& out, const TopkPlan& t) {
  TopkArgs a{};
  a.rows = p.tokens;
  a.topk = out.topk;
  a.vl = p.visible_lens;
  a.vl_s = p.vl_s;
  a.tr = p.token_request;
  a.tr_s = p.tr_s;
  a.batch = p.batch;
  a.max_len = p.max_len();
  a.out = out.indices;
  a.out_sr = out.st;
  a.out_sc = out.sc;
  a.physical = out.physical ? 1 : 0;
  a.bt = p.block_table;
  a.bt_sr = p.bt_sr;
  a.bt_sc = p.bt_sc;
  a.max_blocks = p.max_blocks;
  a.block_size = p.block_size;
  a.num_blocks = p.num_blocks;
  a.cap = t.cap;
  a.bitmap_words = t.bitmap_words;
  return a;
}

// The fused path: sample, admit and select passes, and the repair pass behind them.
struct FusedPlan {
  ScorePlan sample, admit, repair;
  int samples = kFusedSamples;  // sampled positions per token
  int list_cap = 0;  // candidates per token: what the top-k kernel selects from in shared memory
};

FusedPlan plan_fused(const IndexerProblem& p, int topk, const DeviceTraits& dev) {
  FusedPlan f;
  f.samples = fused_samples(p);
  f.sample = plan_sample(p, f.samples, dev);
  f.admit = plan_scores(p, kModeAdmit, p.max_len(), dev);
  f.repair = plan_repair(p, topk, dev);
  f.list_cap = plan_topk(p.max_len(), topk).cap;
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
  w.samples = take(T * kFusedSamples * 4);
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

std::size_t fused_bytes(const IndexerProblem& p, int topk, const DeviceTraits& dev) {
  return fused_layout(plan_fused(p, topk, dev), p.tokens, topk).total;
}

TopkPath env_path() {
  const char* v = std::getenv("LATTE_CUDA_INDEXER_PATH");
  if (!v || *v == '\0' || std::strcmp(v, "automatic") == 0) return TopkPath::automatic;
  if (std::strcmp(v, "fused") == 0) return TopkPath::fused;
  if (std::strcmp(v, "unfused") == 0) return TopkPath::unfused;
  throw Error(ErrorCode::invalid_argument, std::string("cuda.indexer: LATTE_CUDA_INDEXER_PATH=") + v +
                                               " is not a top-k path; use fused, unfused or automatic (or unset it)");
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
  return out + "; per call: fused (no [T, L] scores) for 1 query token, or up to 32 at contexts of 128K+, "
               "or when the workspace holds no row of scores; else unfused";
}

void launch_indexer_logits(const IndexerProblem& p, float* logits, int64_t ld_t, int64_t ld_s,
                           int64_t logits_len, const DeviceTraits& dev, void* stream) {
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
  IndexerProblem p;
  p.tokens = static_cast<int>(std::max<int64_t>(1, tokens));
  p.heads = heads;
  p.q_fp8 = q_fp8;
  // A context long enough that the chunk count is bounded by the token count only.
  p.block_size = 1;
  p.max_blocks = static_cast<int>(kMaxFusedChunks * 2 * static_cast<int64_t>(std::max(1, topk)) + kStageTokens);
  return fused_bytes(p, std::max(1, topk), dev);
}

// The unfused path's workspace with its rows split over several CTAs (0: no split).
namespace {

std::size_t split_bytes(int64_t rows, int64_t max_len, int topk, const DeviceTraits& dev) {
  if (rows <= 0 || max_len < kSplitMinLen) return 0;
  try {
    const TopkPlan tp = plan_topk(max_len, std::max(1, topk));
    return plan_split(rows, max_len, tp.cap, dev).total;
  } catch (const Error&) {
    return 0;  // rows too long for the top-k kernel: the launch reports it
  }
}

std::size_t unfused_split_bytes(const IndexerProblem& p, int topk, const DeviceTraits& dev) {
  return split_bytes(p.tokens, p.max_len(), topk, dev);
}

}  // namespace

std::size_t topk_workspace_bytes(const IndexerProblem& p, int topk, TopkPath path, const DeviceTraits& dev) {
  if (p.tokens <= 0) return 0;
  if (path == TopkPath::unfused) return unfused_bytes(p) + unfused_split_bytes(p, topk, dev);
  if (path == TopkPath::fused) return fused_bytes(p, topk, dev);
  return std::min(unfused_bytes(p) + unfused_split_bytes(p, topk, dev), fused_bytes(p, topk, dev));
}

std::size_t split_workspace_bound(int64_t tokens, int64_t max_len, int topk, const DeviceTraits& dev) {
  // The most any row length up to max_len needs (the slice count and list capacity vary).
  std::size_t b = 0;
  for (int64_t n = kSplitMinLen; n < 2 * max_len; n *= 2) b = std::max(b, split_bytes(tokens, std::min(n, max_len), topk, dev));
  return b;
}

namespace {

// The automatic rule. When it sizes the fused path's plan, the plan is left in `fused` so that
// the launch does not plan it again.
TopkPath pick_topk_path(const IndexerProblem& p, int topk, std::size_t workspace_bytes, const DeviceTraits& dev,
                        std::optional<FusedPlan>& fused) {
  const TopkPath forced = env_path();
  if (forced != TopkPath::automatic) return forced;
  // Measured on the H200 (docs/performance.md, session 5, the two paths timed interleaved):
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

TopkPath choose_topk_path(const IndexerProblem& p, int topk, std::size_t workspace_bytes, const DeviceTraits& dev) {
  std::optional<FusedPlan> unused;
  return pick_topk_path(p, topk, workspace_bytes, dev, unused);
}

namespace {

// Tokens [t0, t0 + n) of `p` as a problem of their own (pointers advanced by t0 rows).
IndexerProblem token_slice(const IndexerProblem& p, int t0, int n) {
  IndexerProblem s = p;
  const int64_t q_elem = p.q_fp8 ? 1 : 2;
  s.q = static_cast<const uint8_t*>(p.q) + t0 * p.q_st * q_elem;
  if (p.q_scale) s.q_scale = p.q_scale + t0 * p.qs_st;
  s.weights = p.weights + t0 * p.w_st;
  s.visible_lens = p.visible_lens + t0 * p.vl_s;
  if (p.token_request) {
    s.token_request = p.token_request + t0 * p.tr_s;
  } else {
    // Token t reads block_table row t: the slice starts at row t0.
    s.block_table = p.block_table + t0 * p.bt_sr;
    s.batch = std::max(0, p.batch - t0);
  }
  s.tokens = n;
  return s;
}

}  // namespace

void launch_indexer_topk(const IndexerProblem& p, const TopkOutput& out, TopkPath path, void* workspace,
                         std::size_t workspace_bytes, const DeviceTraits& dev, void* stream_ptr) {
  if (p.tokens <= 0 || out.topk <= 0) return;
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  std::optional<FusedPlan> fused;  // planned once: it sizes the workspace and drives the launch
  if (path == TopkPath::automatic) path = pick_topk_path(p, out.topk, workspace_bytes, dev, fused);
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
  if (path == TopkPath::unfused && unfused_bytes(p) > workspace_bytes) {
    // Keys for all tokens do not fit: run the tokens in slices that do.
    const int per_pass = static_cast<int>(std::min<int64_t>(p.tokens, static_cast<int64_t>(workspace_bytes) / (keys_ld(p) * 4)));
    for (int t0 = 0; t0 < p.tokens; t0 += per_pass) {
      const int n = std::min(per_pass, p.tokens - t0);
      TopkOutput o = out;
      o.indices = out.indices + static_cast<int64_t>(t0) * out.st;
      launch_indexer_topk(token_slice(p, t0, n), o, TopkPath::unfused, workspace, workspace_bytes, dev, stream_ptr);
    }
    return;
  }
  if (path == TopkPath::unfused) {
    prof_begin(stream);
    const ScorePlan pl = plan_scores(p, kModeKeys, p.max_len(), dev);
    const TopkPlan tp = plan_topk(p.max_len(), out.topk);
    ScoreArgs a = score_args(p, pl);
    a.keys = reinterpret_cast<uint32_t*>(ws);
    a.keys_ld = keys_ld(p);
    dispatch_score(a, pl, stream);
    TopkArgs t = topk_args(p, out, tp);
    t.keys = a.keys;
    t.ld = a.keys_ld;
    t.vec = 1;
    const std::size_t kb = unfused_bytes(p);
    const SplitPlan sp = plan_split(p.tokens, p.max_len(), tp.cap, dev);
    if (sp.on() && kb + sp.total <= workspace_bytes) launch_topk_split<kSrcKeys>(t, tp, sp, ws + kb, dev, stream);
    else launch_topk_kernel<kSrcKeys>(t, tp, stream);
    prof_end("unfused", stream);
    return;
  }
  // Fused: sample pass, admission pass (tau per token from its samples, then candidates >= tau
  // into per-token lists), the repair pass, whose CTAs exit at once for every token whose list
  // is complete, and the top-k of each list or repair buffer (fused_threshold.cuh).
  const FusedPlan& fp = *fused;
  const TopkPlan tp = plan_topk(p.max_len(), out.topk);
  auto* samples = reinterpret_cast<uint32_t*>(ws + fw->samples);
  auto* tau = reinterpret_cast<uint32_t*>(ws + fw->tau);
  auto* count = reinterpret_cast<int*>(ws + fw->count);
  auto* list_keys = reinterpret_cast<uint32_t*>(ws + fw->list_keys);
  auto* list_pos = reinterpret_cast<int32_t*>(ws + fw->list_pos);

  prof_begin(stream);
  ScoreArgs s = score_args(p, fp.sample);
  s.topk = out.topk;
  s.sample_keys = samples;
  s.samples = fp.samples;
  s.row_total = count;
  dispatch_score(s, fp.sample, stream);

  const bool pdl = path_arch(dev) >= 90 && topk_pdl_enabled();

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

  TopkArgs t = topk_args(p, out, tp);
  t.keys = list_keys;
  t.cpos = list_pos;
  t.ld = fp.list_cap;
  t.n_fixed = fp.list_cap;
  t.cand_count = count;
  t.dense = 1;
  t.vec = (fp.list_cap % 4 == 0) ? 1 : 0;
  TopkArgs u = topk_args(p, out, tp);
  u.keys = r.cand_keys;
  u.cpos = r.cand_pos;
  u.ld = static_cast<int64_t>(fp.repair.num_chunks) * out.topk;
  u.n_fixed = u.ld;
  u.vec = (u.ld % 4 == 0) ? 1 : 0;
  u.repair_tau = tau;
  u.repair_cap = fp.list_cap;
  launch_fused_final(t, u, tp, pdl, stream);
  prof_end("fused path", stream);
}

std::size_t rows_topk_workspace_bytes(int rows, int64_t n, int topk, const DeviceTraits& dev) {
  if (rows <= 0 || n <= 0 || topk <= 0) return 0;
  const TopkPlan tp = plan_topk(n, topk);
  return plan_split(rows, n, tp.cap, dev).total;
}

void launch_rows_topk(const float* scores, int rows, int64_t n, int64_t ld, int topk, int32_t* out,
                      int64_t out_ld, void* stream) {
  launch_rows_topk(scores, rows, n, ld, topk, out, out_ld, nullptr, 0, DeviceTraits{}, stream);
}

void launch_rows_topk(const float* scores, int rows, int64_t n, int64_t ld, int topk, int32_t* out,
                      int64_t out_ld, void* workspace, std::size_t workspace_bytes, const DeviceTraits& dev,
                      void* stream) {
  if (rows <= 0 || topk <= 0) return;
  const TopkPlan tp = plan_topk(n, topk);
  TopkArgs a{};
  a.rows = rows;
  a.topk = topk;
  a.f32 = scores;
  a.ld = ld;
  a.vec = (reinterpret_cast<std::uintptr_t>(scores) % 16 == 0 && ld % 4 == 0) ? 1 : 0;
  a.n_fixed = n;
  a.max_len = n;
  a.out = out;
  a.out_sr = out_ld;
  a.out_sc = 1;
  a.physical = 0;
  a.cap = tp.cap;
  a.bitmap_words = tp.bitmap_words;
  const SplitPlan sp = workspace ? plan_split(rows, n, tp.cap, dev) : SplitPlan{};
  if (sp.on() && sp.total <= workspace_bytes) {
    launch_topk_split<kSrcF32>(a, tp, sp, static_cast<uint8_t*>(workspace), dev, static_cast<cudaStream_t>(stream));
  } else {
    launch_topk_kernel<kSrcF32>(a, tp, static_cast<cudaStream_t>(stream));
  }
}

void launch_candidates_topk(const uint32_t* keys, const int32_t* pos, int rows, int64_t n,
                            const int32_t* visible_lens, int64_t max_len, int topk, int32_t* out,
                            void* stream) {
  if (rows <= 0 || topk <= 0) return;
  const TopkPlan tp = plan_topk(max_len, topk);
  TopkArgs a{};
  a.rows = rows;
  a.topk = topk;
  a.keys = keys;
  a.cpos = pos;
  a.ld = n;
  a.n_fixed = n;
  a.vec = (reinterpret_cast<std::uintptr_t>(keys) % 16 == 0 && n % 4 == 0) ? 1 : 0;
  a.vl = visible_lens;
  a.vl_s = 1;
  a.batch = rows;
  a.max_len = max_len;
  a.out = out;
  a.out_sr = topk;
  a.out_sc = 1;
  a.physical = 0;
  a.cap = tp.cap;
  a.bitmap_words = tp.bitmap_words;
  launch_topk_kernel<kSrcCands>(a, tp, static_cast<cudaStream_t>(stream));
}

}  // namespace latte::cuda_indexer
