// Exact top-k launchers (topk_launch.hpp): shared-memory plans, the one-CTA-per-row kernel, the
// split kernels for few long rows, the fused path's final selection.
#include "kernels/topk/topk_launch.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>

#include "kernels/common/cuda_check.cuh"
#include "kernels/common/env_knob.hpp"
#include "kernels/common/launch.hpp"
#include "kernels/common/smem_limit.hpp"
#include "kernels/topk/topk_kernel.cuh"
#include "kernels/topk/topk_spread_grid_barrier.cuh"
#include "latte/error.hpp"

namespace latte::cuda {
namespace {

constexpr std::size_t kAlign = 256;

std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Sets the dynamic shared memory limit of a kernel (kPortableSmemBytes) once per device.
template <typename Kernel>
void allow_smem(Kernel kernel, std::atomic<uint64_t>& done_mask) {
  int device = 0;
  LATTE_CUDA_TRY(cudaGetDevice(&device));
  allow_dynamic_smem(kernel, kPortableSmemBytes, device, done_mask);
}

// Histograms of the top-k selects: without match.any (default) or with it
// (LATTE_CUDA_TOPK_HIST=match, measurements).
bool topk_direct_hist() {
  return env_knob_choice("cuda top-k", "LATTE_CUDA_TOPK_HIST", {"direct", "match"}) != 1;
}

// Few long rows: each row split over S CTAs (topk_kernel.cuh, "Rows split over several CTAs").
struct SplitPlan {
  int slices = 0, slice_len = 0, list_cap = 0;
  std::size_t hist = 0, keys = 0, pos = 0, count = 0, total = 0;
  [[nodiscard]] bool on() const { return slices > 1; }
};

// Few rows, each spread over S CTAs with grid barriers (topk_spread_grid_barrier.cuh). The
// workspace starts with what must be zero when the kernel starts (`clear` bytes: the first
// pass's histograms and the counters).
struct SpreadPlan {
  int slices = 0, slice_len = 0;
  std::size_t state = 0, hist = 0, clear = 0, counts = 0, list = 0, total = 0;
  [[nodiscard]] bool on() const { return slices > 0; }
};

// LATTE_CUDA_TOPK_PROF=1 (measurements only: synchronizes): phase marks of row 0 (32 entries)
// and the kernel spans behind them (kernels/common/kernel_span.cuh), printed to stderr every 20th
// indexer_topk or top-k call.
constexpr int kProfWords = kTopkProfSpans + 5 * kSpanSlots;
}  // namespace

unsigned long long* topk_prof_buffer() {
  if (env_knob_choice("cuda top-k", "LATTE_CUDA_TOPK_PROF", {"0", "1"}) != 1) return nullptr;
  // Allocated the first time a call asks for the marks, kept for the process (measurements only).
  static unsigned long long* buf = [] {
    unsigned long long* b = nullptr;
    if (cudaMalloc(&b, kProfWords * sizeof(unsigned long long)) != cudaSuccess) b = nullptr;
    return b;
  }();
  return buf;
}

unsigned long long* topk_prof_spans() {
  unsigned long long* b = topk_prof_buffer();
  return b ? b + kTopkProfSpans : nullptr;
}

namespace {
// Calls nest (indexer_topk around its top-k launch): the outermost pair clears and prints.
int prof_depth = 0;
}  // namespace

void topk_prof_begin(cudaStream_t stream) {
  if (!topk_prof_buffer() || prof_depth++ > 0) return;
  LATTE_CUDA_TRY(cudaMemsetAsync(topk_prof_buffer(), 0, kProfWords * sizeof(unsigned long long), stream));
  LATTE_CUDA_TRY(cudaMemsetAsync(topk_prof_spans(), 0xFF, kSpanSlots * sizeof(unsigned long long), stream));
  LATTE_CUDA_TRY(cudaMemsetAsync(topk_prof_buffer() + 14, 0xFF, sizeof(unsigned long long), stream));  // spread: min arrival
}

void topk_prof_end(const char* what, cudaStream_t stream) {
  if (!topk_prof_buffer() || --prof_depth > 0) return;
  static int calls = 0;
  if (++calls % 20 != 0) return;
  unsigned long long h[kProfWords];
  LATTE_CUDA_TRY(cudaStreamSynchronize(stream));
  LATTE_CUDA_TRY(cudaMemcpy(h, topk_prof_buffer(), sizeof(h), cudaMemcpyDeviceToHost));
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
  if (h[15] != 0) {  // the spread kernel's barriers and final mode (slots 6, 7)
    char buf[64];
    std::snprintf(buf, sizeof(buf), " [barriers %llu, mode %llu, first barrier arrivals %.2f-%.2f]", h[12], h[13],
                  (h[14] - t0) / 1000.0, (h[15] - t0) / 1000.0);
    line += buf;
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
  const unsigned long long* start = h + kTopkProfSpans;
  const unsigned long long* end = start + kSpanSlots;
  const unsigned long long* last_start = end + kSpanSlots;
  const unsigned long long* longest = last_start + kSpanSlots;
  const unsigned long long* longest_cycles = longest + kSpanSlots;
  unsigned long long s0 = ~0ull;
  for (int k = 0; k < kSpanSlots; ++k) s0 = std::min(s0, start[k]);
  line += "\n  spans (us: first start-last end [last start, longest CTA @ its SM clock]):";
  const char* span_names[] = {"score", "", "admit", "repair", "topk", "collect", "final", ""};
  for (int k = 0; k < kSpanSlots; ++k) {
    if (start[k] == ~0ull) continue;
    char buf[160];
    std::snprintf(buf, sizeof(buf), " %s %.2f-%.2f [%.2f, %.2f @ %.2f GHz]", span_names[k], (start[k] - s0) / 1000.0,
                  end[k] ? (end[k] - s0) / 1000.0 : -1.0, (last_start[k] - s0) / 1000.0, longest[k] / 1000.0,
                  longest[k] ? static_cast<double>(longest_cycles[k]) / static_cast<double>(longest[k]) : 0.0);
    line += buf;
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

namespace {

template <int SRC, bool DH>
void launch_topk_rows_l(const TopkArgs& a, const TopkPlan& t, cudaStream_t stream) {
  static std::atomic<uint64_t> done{0};
  allow_smem(topk_rows_kernel<SRC, DH>, done);
  TopkArgs b = a;
  b.prof = topk_prof_buffer();
  topk_prof_begin(stream);
  topk_rows_kernel<SRC, DH><<<static_cast<unsigned>(a.rows), kTopkThreads, t.smem, stream>>>(b);
  LATTE_CUDA_CHECK_LAUNCH("topk_rows_kernel");
  topk_prof_end("single", stream);
}

template <int SRC>
void launch_topk_rows(const TopkArgs& a, const TopkPlan& t, cudaStream_t stream) {
  if (a.rows <= 0) return;
  if (topk_direct_hist()) launch_topk_rows_l<SRC, true>(a, t, stream);
  else launch_topk_rows_l<SRC, false>(a, t, stream);
}

// Measured on the H200 (2048 of n): split 8 x 131072 40.7 vs one CTA per row 51.8 us, 1 x 131072
// 37.3 vs 48.7, 4 x 262144 47.0 vs 73.3; but 8 x 32768 33.6 vs 31.2, 32 x 131072 68.8 vs 55.5,
// 64 x 65536 67.5 vs 42.2. So only rows of >= 65536 positions, at most SMs / 8 of them.
constexpr int64_t kSplitMinLen = 65536;
constexpr int kSplitRowsPerSm = 8;  // split when rows * 8 <= SMs
constexpr int kSplitMaxSlices = 32;

// The spread path (measured on the H200: docs/kernels/indexer.md, "Batch 1"): up to
// kSpreadMaxRows rows and kSpreadMaxKeys keys per call (8 x 128K ran slower than the split
// kernels), at least kSpreadMinSlice positions per CTA, S CTAs per row with rows * S <= SMs
// (one wave: the CTAs wait for each other). LATTE_CUDA_TOPK_SPREAD=0 turns it off.
constexpr int64_t kSpreadMaxRows = 8;
constexpr int64_t kSpreadMaxKeys = 262144;
constexpr int64_t kSpreadMinSlice = 512;
// The keys' pass counts the first digit for rows of up to kKeyHistMaxLen positions (longer rows
// slowed hopper.indexer's keys kernel by the atomics on their few hot bins: 1 x 128K 29.5 against
// 27.3 us, 8 x 128K 89.9 against 76.6).
constexpr int64_t kKeyHistMaxLen = 32768;
// The unfused path with the spread top-k against the fused paths, up to 131072 keys per call
// (1 x 8K-128K, 2 and 4 x 32K): 0.86-0.97 of the fused time in hopper.indexer, 0.80-1.03 in
// cuda.indexer; beyond (8 x 32K, 2 x 128K) hopper.indexer's fused path was 4-6 % faster.
constexpr int64_t kSpreadBeatsFusedKeys = 131072;

bool spread_enabled() {
  return env_knob_choice("cuda top-k", "LATTE_CUDA_TOPK_SPREAD", {"0", "1"}) != 0;
}

SpreadPlan spread_layout(int64_t rows, int slices, int slice_len) {
  SpreadPlan sp;
  sp.slices = slices;
  sp.slice_len = slice_len;
  const auto R = static_cast<std::size_t>(rows);
  sp.state = 0;
  sp.hist = align_up(R * kSpreadStateWords * 4, 16);
  sp.clear = sp.hist + 2 * R * kSpreadBins * 4;  // the state and the first two passes' histograms
  std::size_t off = align_up(sp.hist + kSpreadPasses * R * kSpreadBins * 4, kAlign);
  sp.counts = off;
  off = align_up(off + R * static_cast<std::size_t>(slices) * 2 * 4, kAlign);
  sp.list = off;
  off = align_up(off + R * kSpreadListCap * 8, kAlign);
  sp.total = off;
  return sp;
}

SpreadPlan plan_spread(int64_t rows, int64_t n, int sm_count) {
  if (!spread_enabled() || rows <= 0 || rows > kSpreadMaxRows || n <= 0) return {};
  // More keys: the split or one-CTA kernels, unless the rows are too long for them (at any topk
  // up to kSamples, which covers both indexers' limits).
  if (rows * n > kSpreadMaxKeys && !topk_rows_too_long(n, kSamples)) return {};
  int64_t S = std::min<int64_t>(sm_count / rows, ceil_div(n, kSpreadMinSlice));
  S = std::max<int64_t>(S, 1);
  const int64_t L = ceil_div(ceil_div(n, S), 4) * 4;
  S = ceil_div(n, L);
  if (L > kSpreadMaxSlice || rows * S > sm_count) return {};
  return spread_layout(rows, static_cast<int>(S), static_cast<int>(L));
}

// The spread kernel's arguments over workspace `ws` laid out by sp.
SpreadArgs spread_args(const SpreadPlan& sp, int64_t rows, uint8_t* ws, bool first_ready) {
  SpreadArgs g{};
  g.slices = sp.slices;
  g.slice_len = sp.slice_len;
  g.rows = static_cast<int>(rows);
  g.first_ready = first_ready ? 1 : 0;
  g.state = reinterpret_cast<unsigned*>(ws + sp.state);
  g.hist = reinterpret_cast<int*>(ws + sp.hist);
  g.counts = reinterpret_cast<int*>(ws + sp.counts);
  g.list = reinterpret_cast<uint64_t*>(ws + sp.list);
  return g;
}

bool split_enabled() {
  return env_knob_choice("cuda top-k", "LATTE_CUDA_TOPK_SPLIT", {"0", "1"}) != 0;
}

// rows of up to n positions; list_cap = the final kernel's candidate capacity.
SplitPlan plan_split(int64_t rows, int64_t n, int list_cap, int sm_count) {
  SplitPlan sp;
  if (!split_enabled() || rows <= 0 || n < kSplitMinLen || rows * kSplitRowsPerSm > sm_count) return sp;
  int64_t S = std::min<int64_t>(kSplitMaxSlices, std::max<int64_t>(1, sm_count / rows));
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

}  // namespace

bool topk_pdl_enabled() {
  return env_knob_choice("cuda top-k", "LATTE_CUDA_TOPK_PDL", {"0", "1"}) != 0;
}

namespace {

template <int SRC, bool DH>
void launch_split_final(const TopkArgs& a, const TopkArgs& c, const TopkPlan& t, bool pdl, cudaStream_t stream) {
  static std::atomic<uint64_t> done{0};
  allow_smem(topk_split_final_kernel<SRC, DH>, done);
  launch_ex(topk_split_final_kernel<SRC, DH>, static_cast<unsigned>(a.rows), kTopkThreads,
            static_cast<std::size_t>(t.smem), pdl, stream, a, c);
}

}  // namespace

void launch_fused_final(const TopkArgs& list, const TopkArgs& repair, const TopkPlan& t, bool pdl, cudaStream_t stream) {
  static std::atomic<uint64_t> done_direct{0}, done_match{0};
  const auto grid = static_cast<unsigned>(list.rows);
  const auto smem = static_cast<std::size_t>(t.smem);
  TopkArgs l = list, r = repair;  // the caller's prof_begin / prof_end bracket this launch
  l.prof = r.prof = topk_prof_buffer();
  if (topk_direct_hist()) {
    allow_smem(topk_fused_final_kernel<true>, done_direct);
    launch_ex(topk_fused_final_kernel<true>, grid, kTopkThreads, smem, pdl, stream, l, r);
  } else {
    allow_smem(topk_fused_final_kernel<false>, done_match);
    launch_ex(topk_fused_final_kernel<false>, grid, kTopkThreads, smem, pdl, stream, l, r);
  }
}

namespace {

// The three split kernels over workspace `ws` (sp.total bytes). The collect and final kernels
// start early (programmatic dependent launch) on sm_90+.
template <int SRC>
void launch_topk_split(const TopkArgs& a, const TopkPlan& t, const SplitPlan& sp, uint8_t* ws, bool pdl,
                       cudaStream_t stream) {
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
  topk_prof_begin(stream);
  TopkArgs b = a;
  b.prof = topk_prof_buffer();
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
  topk_prof_end("split", stream);
}

}  // namespace

namespace {

// The spread kernel over workspace `ws` (sp.total bytes), its first sp.clear bytes zero or, with
// `first_ready`, the first pass counted into them (key_histogram.cuh).
template <int SRC>
void launch_topk_spread(const TopkArgs& a, const SpreadPlan& sp, uint8_t* ws, bool first_ready, bool pdl,
                        cudaStream_t stream) {
  if (a.rows <= 0) return;
  static std::atomic<uint64_t> done{0};
  allow_smem(topk_spread_kernel<SRC>, done);
  const SpreadArgs g = spread_args(sp, a.rows, ws, first_ready);
  TopkArgs b = a;
  b.prof = topk_prof_buffer();
  topk_prof_begin(stream);
  launch_kernel(topk_spread_kernel<SRC>, static_cast<unsigned>(static_cast<int64_t>(a.rows) * sp.slices),
                kSpreadThreads, static_cast<std::size_t>(sp.slice_len) * 4, pdl, true, stream, b, g);
  topk_prof_end("spread", stream);
}

}  // namespace

namespace {

// The plan of rows of up to `max_positions`, or cap 0 when the shared memory cannot hold it: the
// candidate buffer must hold the samples and topk, and, as the second bitmap of the exact select,
// the row's bitmap words twice over.
TopkPlan try_plan_topk(int64_t max_positions, int topk) {
  TopkPlan t;
  t.bitmap_words = static_cast<int>(std::max<int64_t>(1, ceil_div(max_positions, 32)));
  const int fixed = static_cast<int>(align_up(sizeof(TopkShared), 16)) +
                    static_cast<int>(align_up(static_cast<std::size_t>(t.bitmap_words), 4)) * 4;
  int cap = (kPortableSmemBytes - fixed) / 8 / 256 * 256;
  cap = std::min(cap, 8192);
  if (cap < std::max(kSamples, topk) || 2 * cap < t.bitmap_words) return t;
  t.cap = cap;
  t.smem = fixed + cap * 8;
  return t;
}

}  // namespace

namespace {

// The plan shrinks as rows grow (the bitmap takes the candidates' room): the longest row, in
// units of 32 positions, that still has one.
int64_t search_max_positions(int topk) {
  int64_t lo = 0, hi = int64_t{kPortableSmemBytes} * 8 / 32;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (try_plan_topk(mid * 32, topk).cap > 0) lo = mid;
    else hi = mid - 1;
  }
  return lo * 32;
}

}  // namespace

int64_t topk_max_positions(int topk) {
  // Every topk up to kSamples plans alike (the candidate buffer holds kSamples anyway): one
  // search for all of them, since the indexers' path rules ask on every call.
  if (topk <= kSamples) {
    static const int64_t most = search_max_positions(kSamples);
    return most;
  }
  return search_max_positions(topk);
}

TopkPlan plan_topk(int64_t max_positions, int topk) {
  const TopkPlan t = try_plan_topk(max_positions, topk);
  if (t.cap == 0) {
    const int64_t most = topk_max_positions(topk);
    throw Error(ErrorCode::unsupported,
                "top-k: rows of " + std::to_string(max_positions) +
                    " positions (max_blocks * block_size) need more shared memory than the top-k "
                    "kernel has: it takes rows of at most " + std::to_string(most) +
                    " positions at topk " + std::to_string(topk) +
                    "; pass a block_table of at most that many positions per row (split the "
                    "longest requests' tables), or select cpu.reference");
  }
  return t;
}

TopkArgs topk_args(const IndexerParams& p, const TopkOutput& out, const TopkPlan& t) {
  TopkArgs a{};
  a.rows = p.tokens;
  a.topk = out.topk;
  a.vl = p.visible_lens;
  a.vl_s = p.vl_s;
  a.vl_div = p.vl_div;
  a.tr = p.token_request;
  a.tr_s = p.tr_s;
  a.batch = p.batch;
  a.max_len = p.max_len();
  a.out = out.indices;
  a.out_sr = out.st;
  a.out_sc = out.sc;
  a.physical = out.physical ? 1 : 0;
  a.expand = out.expand;
  a.exp_tail = out.tail ? 1 : 0;
  a.exp_width = out.width;
  a.exp_lens = out.lens;
  a.exp_lens_s = out.lens_s;
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

std::size_t split_workspace_bytes(int64_t rows, int64_t max_len, int topk, int sm_count) {
  if (rows <= 0) return 0;
  const SpreadPlan spread = plan_spread(rows, max_len, sm_count);
  if (spread.on()) return spread.total;
  if (max_len < kSplitMinLen) return 0;
  try {
    const TopkPlan tp = plan_topk(max_len, std::max(1, topk));
    return plan_split(rows, max_len, tp.cap, sm_count).total;
  } catch (const Error&) {
    return 0;  // rows too long for the top-k kernel: the launch reports it
  }
}


std::size_t split_workspace_bound(int64_t rows, int64_t max_len, int topk, int sm_count) {
  // The most any row length up to max_len needs (the slice count and list capacity vary).
  std::size_t b = rows <= kSpreadMaxRows ? spread_layout(rows, std::max(1, sm_count), 4).total : 0;
  for (int64_t n = kSplitMinLen; n < 2 * max_len; n *= 2) b = std::max(b, split_workspace_bytes(rows, std::min(n, max_len), topk, sm_count));
  return b;
}


bool topk_spreads(int64_t rows, int64_t n, int sm_count) { return plan_spread(rows, n, sm_count).on(); }

bool spread_beats_fused(int64_t rows, int64_t n, int sm_count) {
  return rows * n <= kSpreadBeatsFusedKeys && topk_spreads(rows, n, sm_count);
}

bool topk_rows_too_long(int64_t n, int topk) { return n > topk_max_positions(std::max(1, topk)); }

int64_t spread_max_positions(int sm_count) { return int64_t{kSpreadMaxSlice} * std::max(1, sm_count); }

std::size_t long_row_workspace_bytes(int topk, int sm_count) {
  const int64_t n = spread_max_positions(sm_count);
  return align_up(static_cast<std::size_t>(n) * 4, kAlign) + split_workspace_bytes(1, n, std::max(1, topk), sm_count);
}

int64_t keys_tokens_per_pass(int64_t tokens, int64_t max_len, int topk, std::size_t row_bytes,
                             std::size_t workspace_bytes, int sm_count) {
  if (tokens <= 0 || row_bytes == 0) return 0;
  int64_t n = std::min<int64_t>(tokens, static_cast<int64_t>(workspace_bytes / row_bytes));
  if (!topk_rows_too_long(max_len, topk)) return n;
  for (n = std::min(n, kSpreadMaxRows); n > 0; --n) {
    if (!topk_spreads(n, max_len, sm_count)) continue;
    const std::size_t need = align_up(static_cast<std::size_t>(n) * row_bytes, kAlign) +
                             split_workspace_bytes(n, max_len, topk, sm_count);
    if (need <= workspace_bytes) return n;
  }
  return 0;
}

void refuse_long_rows(const char* owner, int64_t max_len, std::size_t workspace_bytes, int sm_count) {
  const std::string rows = std::string(owner) + ": indexer_topk over rows of " + std::to_string(max_len) + " positions";
  if (!topk_spreads(1, max_len, sm_count)) {
    throw Error(ErrorCode::unsupported,
                rows + ": its top-k takes rows of at most " + std::to_string(spread_max_positions(sm_count)) +
                    " on this GPU; pass a block_table of at most that many positions per row, or select cpu.reference");
  }
  throw Error(ErrorCode::invalid_argument,
              rows + " needs the spread top-k and more workspace than the " + std::to_string(workspace_bytes) +
                  " bytes given (one token's keys and its top-k state); give the kernel's workspace_bytes()");
}

// Whether the keys' pass counts the spread path's first pass (measurements: 
// LATTE_CUDA_TOPK_KEY_HIST=0|1 forces it off or on).
bool keys_count_first_pass(int64_t rows, int64_t n) {
  switch (env_knob_choice("cuda top-k", "LATTE_CUDA_TOPK_KEY_HIST", {"0", "1"})) {
    case 0: return false;
    case 1: return true;
    default: break;
  }
  return n <= kKeyHistMaxLen;
}

SpreadShape spread_shape(int64_t rows, int64_t n, int sm_count) {
  const SpreadPlan sp = plan_spread(rows, n, sm_count);
  return sp.on() ? SpreadShape{sp.slices, sp.slice_len, sp.total} : SpreadShape{};
}

SpreadArgs prepare_spread(const IndexerParams& p, void* workspace, std::size_t workspace_bytes, int sm_count,
                          cudaStream_t stream) {
  const SpreadPlan sp = plan_spread(p.tokens, p.max_len(), sm_count);
  if (!sp.on() || workspace == nullptr || sp.total > workspace_bytes) return SpreadArgs{};
  LATTE_CUDA_TRY(cudaMemsetAsync(workspace, 0, sp.clear, stream));
  return spread_args(sp, p.tokens, static_cast<uint8_t*>(workspace), false);
}

int* prepare_keys_topk(const IndexerParams& p, int topk, void* workspace, std::size_t workspace_bytes, int sm_count,
                       cudaStream_t stream) {
  if (p.tokens <= 0 || topk <= 0) return nullptr;
  const SpreadArgs g = prepare_spread(p, workspace, workspace_bytes, sm_count, stream);
  if (g.slices == 0 || !keys_count_first_pass(p.tokens, p.max_len())) return nullptr;
  return g.hist;
}

void launch_keys_topk(const IndexerParams& p, const TopkOutput& out, const uint32_t* keys, int64_t keys_ld,
                      void* workspace, std::size_t workspace_bytes, int sm_count, bool pdl, cudaStream_t stream) {
  if (p.tokens <= 0 || out.topk <= 0) return;
  const SpreadPlan spread = plan_spread(p.tokens, p.max_len(), sm_count);
  if (spread.on() && workspace != nullptr && spread.total <= workspace_bytes) {
    TopkArgs t = topk_args(p, out, TopkPlan{});
    t.keys = keys;
    t.ld = keys_ld;
    t.vec = 1;
    launch_topk_spread<kSrcKeys>(t, spread, static_cast<uint8_t*>(workspace),
                                 keys_count_first_pass(p.tokens, p.max_len()), pdl, stream);
    return;
  }
  const TopkPlan tp = plan_topk(p.max_len(), out.topk);
  TopkArgs t = topk_args(p, out, tp);
  t.keys = keys;
  t.ld = keys_ld;
  t.vec = 1;
  const SplitPlan sp = plan_split(p.tokens, p.max_len(), tp.cap, sm_count);
  if (sp.on() && workspace != nullptr && sp.total <= workspace_bytes) {
    launch_topk_split<kSrcKeys>(t, tp, sp, static_cast<uint8_t*>(workspace), pdl, stream);
  } else {
    launch_topk_rows<kSrcKeys>(t, tp, stream);
  }
}

std::size_t rows_topk_workspace_bytes(int rows, int64_t n, int topk, int sm_count) {
  if (rows <= 0 || n <= 0 || topk <= 0) return 0;
  const SpreadPlan spread = plan_spread(rows, n, sm_count);
  if (spread.on()) return spread.total;
  const TopkPlan tp = plan_topk(n, topk);
  return plan_split(rows, n, tp.cap, sm_count).total;
}

void launch_rows_topk(const float* scores, int rows, int64_t n, int64_t ld, int topk, int32_t* out,
                      int64_t out_ld, cudaStream_t stream) {
  launch_rows_topk(scores, rows, n, ld, topk, out, out_ld, nullptr, 0, 0, false, stream);
}

void launch_rows_topk(const float* scores, int rows, int64_t n, int64_t ld, int topk, int32_t* out,
                      int64_t out_ld, void* workspace, std::size_t workspace_bytes, int sm_count, bool pdl,
                      cudaStream_t stream) {
  if (rows <= 0 || topk <= 0) return;
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
  const SpreadPlan spread = workspace ? plan_spread(rows, n, sm_count) : SpreadPlan{};
  if (spread.on() && spread.total <= workspace_bytes) {
    LATTE_CUDA_TRY(cudaMemsetAsync(workspace, 0, spread.clear, stream));
    launch_topk_spread<kSrcF32>(a, spread, static_cast<uint8_t*>(workspace), false, pdl, stream);
    return;
  }
  const TopkPlan tp = plan_topk(n, topk);
  a.cap = tp.cap;
  a.bitmap_words = tp.bitmap_words;
  const SplitPlan sp = workspace ? plan_split(rows, n, tp.cap, sm_count) : SplitPlan{};
  if (sp.on() && sp.total <= workspace_bytes) {
    launch_topk_split<kSrcF32>(a, tp, sp, static_cast<uint8_t*>(workspace), pdl, stream);
  } else {
    launch_topk_rows<kSrcF32>(a, tp, stream);
  }
}

void launch_candidates_topk(const uint32_t* keys, const int32_t* pos, int rows, int64_t n,
                            const int32_t* visible_lens, int64_t max_len, int topk, int32_t* out,
                            cudaStream_t stream) {
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
  launch_topk_rows<kSrcCands>(a, tp, stream);
}

}  // namespace latte::cuda
