// Indexer and top-k benchmark on one GPU (bench/indexer/run.sh runs it with the PyTorch peers).
// Prints one JSON object per measurement on stdout and a table on stderr.
//   decode: B in {1, 32, 128} x context {8K, 32K, 128K} x H_i in {32 (GLM-5), 64 (DeepSeek-V3.2)}
//   prefill: 4096 tokens at 32K context
//   top-k alone: 2048 of 131072 for 8 rows, and each decode shape's rows
// Timing: calls queued back to back between two CUDA events (time_us; the per-call synchronous
// median is reported as sync_us where noted); small problems rotate over block tables that point
// at different pages so the K bytes do not sit in L2.
// Flags: --quick, --prefill-only, --decode32, --topk-only, --shape B,ctx,H (one decode shape).
// Environment: LATTE_BENCH_ZERO_K=1 zeroes the K cache (all scores tie: the fused paths' worst case).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/indexer/smxx/indexer_launch.hpp"
#if LATTE_BENCH_HOPPER
#include "kernels/indexer/sm90a/logits_launch_sm90a.hpp"
#include "kernels/indexer/sm90a/indexer_topk_sm90a.hpp"
#endif

using namespace latte::cuda_indexer;

#define CK(x)                                                                            \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s failed: %s (%s:%d)\n", #x, cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

namespace {

__device__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// Random e4m3 codes (never NaN) everywhere, then valid positive scales in each page's tail.
__global__ void fill_pages(uint8_t* k, int64_t pages, int bs, uint64_t seed) {
  const int64_t page_bytes = static_cast<int64_t>(bs) * 132;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < pages * page_bytes;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t in_page = i % page_bytes;
    const uint32_t h = hash32(seed * 0x9E3779B97F4A7C15ULL + i);
    if (in_page < static_cast<int64_t>(bs) * 128) {
      uint8_t c = static_cast<uint8_t>(h & 0xFF);
      if ((c & 0x7F) == 0x7F) c ^= 1;
      k[i] = c;
    } else if ((in_page - static_cast<int64_t>(bs) * 128) % 4 == 0) {
      const float s = 1e-3f * (1.0f + (h % 1000) / 1000.0f);
      std::memcpy(k + i, &s, 4);
    }
  }
}

__global__ void fill_f32(float* x, int64_t n, float lo, float hi, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // Box-Muller-free: sum of uniforms (approximately normal), scaled into [lo, hi] region.
    float u = 0;
    for (int j = 0; j < 4; ++j) u += (hash32(seed * 131 + i * 4 + j) & 0xFFFFFF) / 16777216.0f;
    x[i] = lo + (hi - lo) * (u / 4.0f);
  }
}

__global__ void fill_normalish(float* x, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float u = 0;
    for (int j = 0; j < 12; ++j) u += (hash32(seed * 977 + i * 12 + j) & 0xFFFFFF) / 16777216.0f;
    x[i] = u - 6.0f;
  }
}

__global__ void fill_q(uint8_t* q, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint8_t c = static_cast<uint8_t>(hash32(seed + i) & 0xFF);
    if ((c & 0x7F) == 0x7F) c ^= 1;
    q[i] = c;
  }
}

template <typename T>
T* dalloc(std::size_t count) {
  void* p = nullptr;
  CK(cudaMalloc(&p, std::max<std::size_t>(count, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

// hopper.indexer's logits (built with 90 in the CUDA architectures, run on sm_90); false when
// there is none to time.
bool hopper_logits(const IndexerParams& p, float* logits, int64_t ctx, const DeviceTraits& dev) {
#if LATTE_BENCH_HOPPER
  if (dev.arch != 90) return false;
  latte::hopper_indexer::launch_logits_sm90a(p, logits, ctx, 1, ctx, dev.sm_count, nullptr);
  return true;
#else
  (void)p;
  (void)logits;
  (void)ctx;
  (void)dev;
  return false;
#endif
}

// hopper.indexer's indexer_topk workspace for p, both paths (0: none to time: not built, or
// not sm_90), and its call by one path.
std::size_t hopper_topk_bytes(const IndexerParams& p, int k, const DeviceTraits& dev) {
#if LATTE_BENCH_HOPPER
  // Both paths run (the automatic rule's workspace may hold only the one it picks).
  using latte::hopper_indexer::TopkPath;
  return dev.arch == 90 ? std::max(latte::hopper_indexer::topk_workspace_bytes(p, k, TopkPath::unfused, dev.sm_count),
                                   latte::hopper_indexer::topk_workspace_bytes(p, k, TopkPath::fused, dev.sm_count))
                        : 0;
#else
  (void)p;
  (void)k;
  (void)dev;
  return 0;
#endif
}

void hopper_topk(const IndexerParams& p, const TopkOutput& o, void* ws, std::size_t ws_bytes, const DeviceTraits& dev,
                 bool fused) {
#if LATTE_BENCH_HOPPER
  using latte::hopper_indexer::TopkPath;
  latte::hopper_indexer::launch_topk_sm90a(p, o, fused ? TopkPath::fused : TopkPath::unfused, ws, ws_bytes,
                                           dev.sm_count, nullptr);
#else
  (void)p;
  (void)o;
  (void)ws;
  (void)ws_bytes;
  (void)dev;
  (void)fused;
#endif
}

// GPU time in microseconds between two events recorded around `body` (default stream).
double event_us(const std::function<void()>& body) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a));
  body();
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaGetLastError());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return ms * 1000.0;
}

void warm_up(const std::function<void(int)>& f, int warm) {
  for (int i = 0; i < warm; ++i) f(i);
  CK(cudaDeviceSynchronize());
}

// Time per call in steady state: `reps` calls of f(i) (i = rep index, for rotation) queued
// back to back between two events, after `warm` calls, divided by reps. Launches are queued
// ahead of the GPU, so host-side work overlaps the previous call (as in an engine's decode
// loop or triton's do_bench); sync_time_us below counts it.
double time_us(const std::function<void(int)>& f, int reps = 20, int warm = 3) {
  warm_up(f, warm);
  return event_us([&] {
           for (int i = 0; i < reps; ++i) f(i);
         }) / reps;
}

// Two functions timed in alternating blocks (A B, B A, A B, ...): the median per-call time of
// each over `rounds` blocks of `block` calls (an empty function: 0). Cancels clock drift that
// separate back-to-back timings of A then B would attribute to B.
std::pair<double, double> interleaved_us(const std::function<void(int)>& a, const std::function<void(int)>& b,
                                         int rounds = 6, int block = 10) {
  if (a) warm_up(a, 2);
  if (b) warm_up(b, 2);
  std::vector<double> ta, tb;
  auto run = [&](const std::function<void(int)>& f, std::vector<double>& t) {
    if (f) t.push_back(event_us([&] { for (int i = 0; i < block; ++i) f(i); }) / block);
  };
  for (int r = 0; r < rounds; ++r) {
    if (r % 2 == 0) { run(a, ta); run(b, tb); }
    else { run(b, tb); run(a, ta); }
  }
  auto median = [](std::vector<double>& t) {
    if (t.empty()) return 0.0;
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  return {median(ta), median(tb)};
}

// Median of `reps` calls each timed alone (events around one call, then a wait): includes the
// host-side launch work, which the GPU waits for.
double sync_time_us(const std::function<void(int)>& f, int reps = 20, int warm = 3) {
  warm_up(f, warm);
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) t.push_back(event_us([&] { f(i); }));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Setup {
  int T = 0, H = 0, B = 0, bs = 64;
  int64_t ctx = 0;
  int rot = 1;  // block tables rotating over disjoint pages
  uint8_t* k = nullptr;
  int64_t pages = 0;
  std::vector<int32_t*> tables;
  int32_t* tr = nullptr;
  int32_t* vl = nullptr;
  uint8_t* q = nullptr;
  float* qs = nullptr;
  float* w = nullptr;
  IndexerParams problem(int r) const {
    IndexerParams p;
    p.q = q;
    p.q_fp8 = true;
    p.q_st = static_cast<int64_t>(H) * 128;
    p.q_sh = 128;
    p.q_scale = qs;
    p.qs_st = H;
    p.qs_sh = 1;
    p.weights = w;
    p.w_st = H;
    p.w_sh = 1;
    p.k_cache = k;
    p.page_stride = static_cast<int64_t>(bs) * 132;
    p.num_blocks = static_cast<int>(pages);
    p.block_size = bs;
    p.block_table = tables[static_cast<std::size_t>(r % rot)];
    p.max_blocks = static_cast<int>(ctx / bs);
    p.bt_sr = p.max_blocks;
    p.bt_sc = 1;
    p.batch = B;
    p.token_request = tr;
    p.tr_s = 1;
    p.visible_lens = vl;
    p.vl_s = 1;
    p.tokens = T;
    p.heads = H;
    return p;
  }
  void free_all() {
    cudaFree(k);
    for (auto* t : tables) cudaFree(t);
    cudaFree(tr);
    cudaFree(vl);
    cudaFree(q);
    cudaFree(qs);
    cudaFree(w);
  }
};

// B requests of ctx tokens; T query tokens (decode: T = B, token t -> row t, sees all ctx;
// prefill: B = 1, T tokens at the end of the context, causal).
Setup make_setup(int B, int64_t ctx, int H, int T, bool prefill) {
  Setup s;
  s.T = T;
  s.H = H;
  s.B = B;
  s.ctx = ctx;
  const int64_t blocks_per = ctx / s.bs;
  const int64_t need_pages = B * blocks_per;
  const int64_t min_bytes = int64_t{768} << 20;  // >> 50 MB of L2
  const int64_t page_bytes = static_cast<int64_t>(s.bs) * 132;
  s.rot = static_cast<int>(std::clamp<int64_t>(min_bytes / (need_pages * page_bytes), 1, 16));
  s.pages = need_pages * s.rot;
  s.k = dalloc<uint8_t>(static_cast<std::size_t>(s.pages * page_bytes));
  fill_pages<<<1024, 256>>>(s.k, s.pages, s.bs, 7);
  // LATTE_BENCH_ZERO_K=1: every K byte and scale zero, so every score ties (a zeroed cache, as in
  // an engine's warm-up): the fused paths' admissions all overflow and every token is repaired.
  if (std::getenv("LATTE_BENCH_ZERO_K") != nullptr) CK(cudaMemset(s.k, 0, static_cast<std::size_t>(s.pages * page_bytes)));
  std::vector<int32_t> perm(static_cast<std::size_t>(s.pages));
  for (int64_t i = 0; i < s.pages; ++i) perm[static_cast<std::size_t>(i)] = static_cast<int32_t>(i);
  uint64_t st = 12345;
  const bool sequential = std::getenv("LATTE_BENCH_SEQ") != nullptr;  // A/B: pages in order
  for (int64_t i = s.pages - 1; i > 0 && !sequential; --i) {  // shuffle pages (paged, not contiguous)
    st = st * 6364136223846793005ULL + 1442695040888963407ULL;
    std::swap(perm[static_cast<std::size_t>(i)], perm[static_cast<std::size_t>((st >> 33) % (i + 1))]);
  }
  for (int r = 0; r < s.rot; ++r) {
    int32_t* t = dalloc<int32_t>(static_cast<std::size_t>(need_pages));
    CK(cudaMemcpy(t, perm.data() + r * need_pages, need_pages * 4, cudaMemcpyHostToDevice));
    s.tables.push_back(t);
  }
  std::vector<int32_t> tr(static_cast<std::size_t>(T)), vl(static_cast<std::size_t>(T));
  for (int t = 0; t < T; ++t) {
    tr[static_cast<std::size_t>(t)] = prefill ? 0 : t;
    vl[static_cast<std::size_t>(t)] = prefill ? static_cast<int32_t>(ctx - T + t + 1) : static_cast<int32_t>(ctx);
  }
  s.tr = dalloc<int32_t>(static_cast<std::size_t>(T));
  s.vl = dalloc<int32_t>(static_cast<std::size_t>(T));
  CK(cudaMemcpy(s.tr, tr.data(), T * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(s.vl, vl.data(), T * 4, cudaMemcpyHostToDevice));
  s.q = dalloc<uint8_t>(static_cast<std::size_t>(T) * H * 128);
  fill_q<<<256, 256>>>(s.q, static_cast<int64_t>(T) * H * 128, 3);
  s.qs = dalloc<float>(static_cast<std::size_t>(T) * H);
  s.w = dalloc<float>(static_cast<std::size_t>(T) * H);
  fill_f32<<<64, 256>>>(s.qs, static_cast<int64_t>(T) * H, 0.005f, 0.02f, 5);
  fill_f32<<<64, 256>>>(s.w, static_cast<int64_t>(T) * H, -0.05f, 0.1f, 9);
  CK(cudaDeviceSynchronize());
  return s;
}

void emit(const char* kind, const std::string& fields) { std::printf("{\"kind\": \"%s\", %s}\n", kind, fields.c_str()); }

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  // --prefill-only: one call of each prefill path (for compute-sanitizer); --decode32: only
  // B = 32 x 32K decode (A/B runs of the pipeline settings).
  const bool prefill_only = argc > 1 && std::strcmp(argv[1], "--prefill-only") == 0;
  const bool decode32 = argc > 1 && std::strcmp(argv[1], "--decode32") == 0;
  // --topk-only: the top-k alone (one CTA per row and rows split over CTAs), no indexer.
  const bool topk_only = argc > 1 && std::strcmp(argv[1], "--topk-only") == 0;
  // LATTE_BENCH_ONLY=fused|unfused: the decode shapes run that top-k path alone (profiling its
  // kernels with ncu).
  const char* only = std::getenv("LATTE_BENCH_ONLY");
  const bool fused_only = only && std::strcmp(only, "fused") == 0;
  const bool unfused_only = only && std::strcmp(only, "unfused") == 0;
  // --shape B,ctx,H: one decode shape only (profiling, A/B runs).
  int shape_b = 0, shape_h = 0;
  long long shape_ctx = 0;
  const bool one_shape = argc > 2 && std::strcmp(argv[1], "--shape") == 0 &&
                         std::sscanf(argv[2], "%d,%lld,%d", &shape_b, &shape_ctx, &shape_h) == 3;
  if (argc > 1 && std::strcmp(argv[1], "--shape") == 0 && !one_shape) {
    std::fprintf(stderr, "--shape needs B,ctx,H (e.g. --shape 32,131072,32)\n");
    return 2;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  DeviceTraits dev;
  dev.arch = prop.major * 10 + prop.minor;
  dev.sm_count = prop.multiProcessorCount;
  std::fprintf(stderr, "device: %s (sm_%d, %d SMs)\n", prop.name, dev.arch, dev.sm_count);

  // Copy bandwidth ceiling: 1 GiB device-to-device (2 GiB moved).
  if (!prefill_only) {
    const std::size_t bytes = std::size_t{1} << 30;
    uint8_t* a = dalloc<uint8_t>(bytes);
    uint8_t* b = dalloc<uint8_t>(bytes);
    CK(cudaMemset(a, 1, bytes));
    const double us = time_us([&](int) { CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); }, 10, 2);
    const double gbs = 2.0 * bytes / (us * 1e3);
    emit("copy", "\"bytes\": " + std::to_string(2 * bytes) + ", \"us\": " + std::to_string(us) +
                     ", \"gbs\": " + std::to_string(gbs));
    std::fprintf(stderr, "copy 1 GiB D2D: %.1f us = %.0f GB/s (read + write)\n", us, gbs);
    cudaFree(a);
    cudaFree(b);
  }

  // Top-k alone: 2048 of 131072 for 8 rows (the issue's target), fresh random rows; one CTA
  // per row ("single") and rows split over several CTAs ("split", the default with a workspace).
  if (!prefill_only && !decode32 && !one_shape) {
    std::vector<std::pair<int, int64_t>> shapes = {{8, 131072}};
    if (topk_only) shapes = {{8, 131072}, {1, 131072}, {8, 32768}, {32, 131072}, {32, 32768}, {4, 262144}, {64, 65536}, {128, 131072}};
    for (const auto& shape : shapes) {
      const int rows = shape.first;
      const int64_t n = shape.second;
      const int k = 2048;
      const int sets = std::max<int>(1, static_cast<int>(std::min<int64_t>(8, (int64_t{256} << 20) / (rows * n * 4))));
      float* x = dalloc<float>(static_cast<std::size_t>(rows * n * sets));
      fill_normalish<<<1024, 256>>>(x, rows * n * sets, 11);
      int32_t* out = dalloc<int32_t>(static_cast<std::size_t>(rows) * k);
      const std::size_t wsb = latte::cuda::rows_topk_workspace_bytes(rows, n, k, dev.sm_count);
      uint8_t* ws = dalloc<uint8_t>(wsb);
      const double us = time_us([&](int i) {
        latte::cuda::launch_rows_topk(x + (i % sets) * rows * n, rows, n, n, k, out, k, nullptr);
      }, 50, 5);
      const double us_split = time_us([&](int i) {
        latte::cuda::launch_rows_topk(x + (i % sets) * rows * n, rows, n, n, k, out, k, ws, wsb, dev.sm_count,
                                      path_arch(dev) >= 90 && latte::cuda::topk_pdl_enabled(), nullptr);
      }, 50, 5);
      const double sync_split = sync_time_us([&](int i) {
        latte::cuda::launch_rows_topk(x + (i % sets) * rows * n, rows, n, n, k, out, k, ws, wsb, dev.sm_count,
                                      path_arch(dev) >= 90 && latte::cuda::topk_pdl_enabled(), nullptr);
      }, 50, 5);
      emit("rows_topk", "\"rows\": " + std::to_string(rows) + ", \"n\": " + std::to_string(n) +
                            ", \"k\": 2048, \"us\": " + std::to_string(us_split) + ", \"single_us\": " +
                            std::to_string(us) + ", \"sync_us\": " + std::to_string(sync_split) +
                            ", \"ws_bytes\": " + std::to_string(wsb));
      std::fprintf(stderr, "top-k 2048 of %lld, %d rows: single CTA %.1f us, split %.1f us (%.1f us synchronous, ws %zu B)\n",
                   static_cast<long long>(n), rows, us, us_split, sync_split, wsb);
      cudaFree(x);
      cudaFree(out);
      cudaFree(ws);
    }
  }
  if (topk_only) return 0;

  std::vector<int> batches = quick ? std::vector<int>{1, 32} : std::vector<int>{1, 32, 128};
  std::vector<int64_t> ctxs = quick ? std::vector<int64_t>{32768} : std::vector<int64_t>{8192, 32768, 131072};
  if (prefill_only) batches.clear();
  std::vector<int> heads = {32, 64};
  if (decode32) {
    batches = {32};
    ctxs = {32768};
    heads = {32};
  }
  if (one_shape) {
    batches = {shape_b};
    ctxs = {shape_ctx};
    heads = {shape_h};
  }
  std::fprintf(stderr, "\n%-8s %4s %5s %7s | %9s %7s | %9s %7s | %9s %9s %9s | %9s | %9s\n", "shape", "H", "B", "ctx",
               "logits", "GB/s", "hopper", "GB/s", "unfused", "fused", "topk", "rowtopk", "hop-topk");
  for (int H : heads) {
    for (int B : batches) {
      for (int64_t ctx : ctxs) {
        Setup s = make_setup(B, ctx, H, B, false);
        const int k = 2048;
        float* logits = dalloc<float>(static_cast<std::size_t>(B) * ctx);
        int32_t* idx = dalloc<int32_t>(static_cast<std::size_t>(B) * k);
        const IndexerParams p0 = s.problem(0);
        const std::size_t ws_u = topk_workspace_bytes(p0, k, TopkPath::unfused, dev);
        const std::size_t ws_f = topk_workspace_bytes(p0, k, TopkPath::fused, dev);
        const std::size_t ws_h = hopper_topk_bytes(p0, k, dev);
        uint8_t* ws = dalloc<uint8_t>(std::max({ws_u, ws_f, ws_h}));
        TopkOutput o;
        o.indices = idx;
        o.st = k;
        o.sc = 1;
        o.topk = k;
        o.physical = true;
        const double t_logits = fused_only || unfused_only ? 0.0 : time_us([&](int i) {
          launch_indexer_logits(s.problem(i), logits, ctx, 1, ctx, dev, nullptr);
        });
        const double sync_logits = fused_only || unfused_only ? 0.0 : sync_time_us([&](int i) {
          launch_indexer_logits(s.problem(i), logits, ctx, 1, ctx, dev, nullptr);
        });
        const bool has_hopper = hopper_logits(p0, logits, ctx, dev);
        const double t_hopper = fused_only || unfused_only || !has_hopper ? 0.0 : time_us([&](int i) {
          hopper_logits(s.problem(i), logits, ctx, dev);
        });
        // Unfused and fused in alternating blocks of 10 calls (6 rounds, the order swapped every
        // round), each path's figure the median block: the B = 128 shapes hold the GPU at its
        // power limit (its clock fell to 1.7-1.9 GHz) and the same kernel's time drifted by up
        // to 10 % within one process; timing one path then the other measured that drift. (Blocks
        // of 4 calls counted each block's first host-side launch work too.)
        const auto unfused_call = [&](int i) { launch_indexer_topk(s.problem(i), o, TopkPath::unfused, ws, ws_u, dev, nullptr); };
        const auto fused_call = [&](int i) { launch_indexer_topk(s.problem(i), o, TopkPath::fused, ws, ws_f, dev, nullptr); };
        using Call = std::function<void(int)>;
        const std::pair<double, double> uf =
            interleaved_us(fused_only ? Call{} : Call{unfused_call}, unfused_only ? Call{} : Call{fused_call});
        const double t_unfused = uf.first, t_fused = uf.second;
        // hopper.indexer's two top-k paths (wgmma scores), alternating in the same way.
        std::pair<double, double> huf{0.0, 0.0};
        if (!fused_only && !unfused_only && ws_h > 0) {
          huf = interleaved_us(Call{[&](int i) { hopper_topk(s.problem(i), o, ws, ws_h, dev, false); }},
                               Call{[&](int i) { hopper_topk(s.problem(i), o, ws, ws_h, dev, true); }});
        }
        const double t_hopper_topk = huf.first, t_hopper_fused = huf.second;
        // LATTE_BENCH_HOPPER_SYNC=1: hopper.indexer's two paths also timed one call at a time
        // (median of events around one call and a wait) and as the host's enqueue time of 10
        // calls (no wait): whether back-to-back calls cost more than one call alone.
        if (std::getenv("LATTE_BENCH_HOPPER_SYNC") != nullptr && ws_h > 0) {
          for (const bool fused : {false, true}) {
            const auto call = [&](int i) { hopper_topk(s.problem(i), o, ws, ws_h, dev, fused); };
            const double sync_us = sync_time_us(call);
            CK(cudaDeviceSynchronize());
            const auto h0 = std::chrono::steady_clock::now();
            for (int i = 0; i < 10; ++i) call(i);
            const double host_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count() / 10;
            CK(cudaDeviceSynchronize());
            std::fprintf(stderr, "hopper %s: one call alone %.1f us, host enqueue %.1f us per call\n",
                         fused ? "fused" : "unfused", sync_us, host_us);
          }
        }
        // LATTE_BENCH_AB=VAR=VALUE: a path against itself with VAR=VALUE set (a measurement
        // switch read on every call), interleaved in the same way. The path: LATTE_BENCH_AB_PATH=
        // fused (default), unfused, or hopper (hopper.indexer's unfused path).
        if (const char* ab = std::getenv("LATTE_BENCH_AB")) {
          const char* ab_path_env = std::getenv("LATTE_BENCH_AB_PATH");
          const std::string ab_path = ab_path_env ? ab_path_env : "fused";
          const Call base_call = ab_path == "unfused" ? Call{unfused_call}
                                 : ab_path == "hopper" ? Call{[&](int i) { hopper_topk(s.problem(i), o, ws, ws_h, dev, false); }}
                                                       : Call{fused_call};
          const std::string spec(ab);
          const std::size_t eq = spec.find('=');
          if (eq == std::string::npos || eq == 0) {
            std::fprintf(stderr, "LATTE_BENCH_AB=%s: expected VAR=VALUE (e.g. LATTE_CUDA_INDEXER_MATH=fp8)\n", ab);
            return 2;
          }
          const std::string var = spec.substr(0, eq), val = spec.substr(eq + 1);
          const Call variant = [&](int i) {
            setenv(var.c_str(), val.c_str(), 1);
            base_call(i);
            unsetenv(var.c_str());
          };
          const std::pair<double, double> ab_us = interleaved_us(base_call, variant);
          std::fprintf(stderr, "ab %s (%s path): %.1f us, variant %.1f us (%.3f)\n", ab, ab_path.c_str(), ab_us.first,
                       ab_us.second, ab_us.second / ab_us.first);
        }
        const std::size_t ws_r = latte::cuda::rows_topk_workspace_bytes(B, ctx, k, dev.sm_count);
        uint8_t* wsr = dalloc<uint8_t>(ws_r);
        const bool pdl = path_arch(dev) >= 90 && latte::cuda::topk_pdl_enabled();
        const double t_rows = time_us([&](int) {
          latte::cuda::launch_rows_topk(logits, B, ctx, ctx, k, idx, k, wsr, ws_r, dev.sm_count, pdl, nullptr);
        });
        cudaFree(wsr);
        const double kbytes = static_cast<double>(B) * ctx * 132;
        const double gbs = kbytes / (t_logits * 1e3);
        const double hopper_gbs = t_hopper > 0 ? kbytes / (t_hopper * 1e3) : 0.0;
        const TopkPath autop = choose_topk_path(p0, k, std::max(ws_u, ws_f), dev);
        emit("decode", "\"H\": " + std::to_string(H) + ", \"B\": " + std::to_string(B) + ", \"ctx\": " +
                           std::to_string(ctx) + ", \"k\": 2048, \"logits_us\": " + std::to_string(t_logits) +
                           ", \"logits_gbs\": " + std::to_string(gbs) + ", \"hopper_logits_us\": " +
                           std::to_string(t_hopper) + ", \"hopper_logits_gbs\": " + std::to_string(hopper_gbs) +
                           ", \"logits_sync_us\": " +
                           std::to_string(sync_logits) + ", \"unfused_us\": " +
                           std::to_string(t_unfused) + ", \"fused_us\": " + std::to_string(t_fused) +
                           ", \"hopper_topk_us\": " + std::to_string(t_hopper_topk) +
                           ", \"hopper_fused_us\": " + std::to_string(t_hopper_fused) +
                           ", \"rows_topk_us\": " + std::to_string(t_rows) + ", \"auto\": \"" +
                           (autop == TopkPath::fused ? "fused" : "unfused") + "\", \"rot\": " + std::to_string(s.rot));
        std::fprintf(stderr, "%-8s %4d %5d %7lld | %7.1fus %7.0f | %7.1fus %7.0f | %7.1fus %7.1fus %7s | %7.1fus | %7.1fus\n",
                     "decode", H, B, static_cast<long long>(ctx), t_logits, gbs, t_hopper, hopper_gbs, t_unfused, t_fused,
                     autop == TopkPath::fused ? "->fused" : "->unfus", t_rows, t_hopper_topk);
        if (t_hopper_fused > 0) std::fprintf(stderr, "%53s hopper unfused %7.1fus fused %7.1fus (%.2f)\n", "",
                                             t_hopper_topk, t_hopper_fused, t_hopper_fused / t_hopper_topk);
        cudaFree(logits);
        cudaFree(idx);
        cudaFree(ws);
        s.free_all();
      }
    }
  }

  // Prefill: a 4096-token chunk at 32K context (causal), both head counts.
  for (int H : {32, 64}) {
    if (decode32 || one_shape) break;
    if (prefill_only && H == 64) break;
    const int T = 4096;
    const int64_t ctx = 32768;
    const int k = 2048;
    Setup s = make_setup(1, ctx, H, T, true);
    float* logits = dalloc<float>(static_cast<std::size_t>(T) * ctx);
    int32_t* idx = dalloc<int32_t>(static_cast<std::size_t>(T) * k);
    const IndexerParams p0 = s.problem(0);
    const std::size_t ws_u = topk_workspace_bytes(p0, k, TopkPath::unfused, dev);
    const std::size_t ws_f = topk_workspace_bytes(p0, k, TopkPath::fused, dev);
    const std::size_t ws_h = hopper_topk_bytes(p0, k, dev);
    uint8_t* ws = dalloc<uint8_t>(std::max({ws_u, ws_f, ws_h}));
    TopkOutput o;
    o.indices = idx;
    o.st = k;
    o.sc = 1;
    o.topk = k;
    const int reps = prefill_only ? 1 : (quick ? 3 : 5);
    const int warm = prefill_only ? 0 : 1;
    std::fprintf(stderr, "prefill H=%d: logits\n", H);
    const double t_logits = time_us([&](int) { launch_indexer_logits(p0, logits, ctx, 1, ctx, dev, nullptr); }, reps, warm);
    const double t_hopper = hopper_logits(p0, logits, ctx, dev) ? time_us([&](int) {
      hopper_logits(p0, logits, ctx, dev);
    }, reps, warm) : 0.0;
    std::fprintf(stderr, "prefill H=%d: unfused\n", H);
    const double t_unfused = time_us([&](int) { launch_indexer_topk(p0, o, TopkPath::unfused, ws, ws_u, dev, nullptr); }, reps, warm);
    std::fprintf(stderr, "prefill H=%d: fused\n", H);
    const double t_fused = time_us([&](int) { launch_indexer_topk(p0, o, TopkPath::fused, ws, ws_f, dev, nullptr); }, reps, warm);
    const double t_hopper_topk =
        ws_h > 0 ? time_us([&](int) { hopper_topk(p0, o, ws, ws_h, dev, false); }, reps, warm) : 0.0;
    const double t_hopper_fused =
        ws_h > 0 ? time_us([&](int) { hopper_topk(p0, o, ws, ws_h, dev, true); }, reps, warm) : 0.0;
    double pairs = 0;
    for (int t = 0; t < T; ++t) pairs += static_cast<double>(ctx - T + t + 1);
    const double tflops = pairs * H * 128 * 2 / (t_logits * 1e6);
    const double hopper_tflops = t_hopper > 0 ? pairs * H * 128 * 2 / (t_hopper * 1e6) : 0.0;
    emit("prefill", "\"H\": " + std::to_string(H) + ", \"T\": 4096, \"ctx\": 32768, \"k\": 2048, \"logits_us\": " +
                        std::to_string(t_logits) + ", \"logits_tflops\": " + std::to_string(tflops) +
                        ", \"hopper_logits_us\": " + std::to_string(t_hopper) + ", \"hopper_logits_tflops\": " +
                        std::to_string(hopper_tflops) +
                        ", \"unfused_us\": " + std::to_string(t_unfused) + ", \"fused_us\": " + std::to_string(t_fused) +
                        ", \"hopper_topk_us\": " + std::to_string(t_hopper_topk) +
                        ", \"hopper_fused_us\": " + std::to_string(t_hopper_fused) + ", \"unfused_ws_bytes\": " + std::to_string(ws_u) + ", \"fused_ws_bytes\": " + std::to_string(ws_f));
    std::fprintf(stderr, "%-8s %4d %5d %7lld | %7.1fus %5.0fTF | hopper %7.1fus %5.0fTF | %7.1fus %7.1fus | hopper top-k %7.1fus fused %7.1fus\n",
                 "prefill", H, T, static_cast<long long>(ctx), t_logits, tflops, t_hopper, hopper_tflops, t_unfused,
                 t_fused, t_hopper_topk, t_hopper_fused);
    cudaFree(logits);
    cudaFree(idx);
    cudaFree(ws);
    s.free_all();
  }
  return 0;
}
