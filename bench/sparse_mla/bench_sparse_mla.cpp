// Sparse-MLA benchmark (host side): sparse MLA decode / prefill and dense MLA decode through each
// attention backend of the build (Registry -> make -> run; cuda.sparse_mla, and hopper.mla on
// sm_90 for the shapes it takes), on the same inputs in the same process, plus the two ceilings
// measured in the same process: a 4 GiB device-to-device copy and a cuBLAS bf16 GEMM. Prints one
// JSON object per line and backend; bench/sparse_mla/run_bench.py times the PyTorch peer and
// prints the table. LATTE_BENCH_BACKEND=id[,id...]: only these backends (a shape one of them
// refuses is listed as skipped, with the reason).
//
// Each row carries "baseline_us" / "vs_baseline" (cuda.sparse_mla's time in this process, and
// that time over the row's: > 1 is faster) and, for the rows of issue #29's table,
// "flashmla_ref_us" / "vs_flashmla_ref": FlashMLA's time on the H200 for that shape as measured
// for the issue (HEAD 9241ae3, sm_90a build, same dims, L2 flushed, do_bench median; another
// process, so a reference, not a same-run peer) and that time over the row's, and
// "sm90_target_us", the issue's target.
//
// Method (docs/performance.md, "Method"): random data (never zeros), warm-up, median of many calls,
// inputs rotated over several copies so that the working set of consecutive calls is several times
// the L2. Three figures per shape (docs/kernels/sparse_mla.md, "Benchmark method"):
//   time_us   steady state, the way triton.testing.do_bench (FlashMLA's benchmark) measures:
//             the calls are queued back to back with an event pair around each call and one
//             synchronization at the end; median of the per-call GPU times. The host-side
//             run() of the next calls overlaps the GPU work, so it is not counted unless the
//             host is slower than the GPU.
//   sync_us   the previous figure: events around each call and a synchronization after each,
//             so the GPU idles while the host runs run() (validation, plan, launches); median.
//   graph_us  the calls (one per rotated input set) captured once in a CUDA graph and the
//             graph replayed; total GPU time / calls (no host work at all).
//   host_us   the host time of one run() call (validation, plan, launches), median.
// --rope-dim 64 (default) | 0 | both: sparse shapes with rope, without rope (MLA without rope,
// GLM-5.3-Flash's rope_dim 0: fp8 rows of 528 and 656 bytes, bf16 rows of 512 values), or each
// shape with rope followed by its variants without rope, in one process (NoPE against 576 at
// the same shape). Dense decode has rope only.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "bench_fill.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "latte/backend.hpp"
#include "latte/device.hpp"
#include "latte/ops.hpp"
#include "latte/registry.hpp"
#include "latte/spec.hpp"

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

namespace {

struct Ceilings {
  double copy_gbs = 0, mm_tflops = 0;
};

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Ceilings measure_ceilings(cudaStream_t s) {
  Ceilings c;
  const std::size_t bytes = std::size_t{2} << 30;  // 2 GiB read + 2 GiB written
  void *a = nullptr, *b = nullptr;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  bench_fill_bf16(a, bytes / 2, 1, 1.f, s);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ts;
  for (int i = 0; i < 12; ++i) {
    CK(cudaEventRecord(e0, s));
    CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 2) ts.push_back(ms);
  }
  c.copy_gbs = 2.0 * bytes / (median(ts) * 1e-3) / 1e9;
  CK(cudaFree(b));
  // bf16 GEMM 8192^3 through cuBLAS on random data
  const int n = 8192;
  __nv_bfloat16* m = static_cast<__nv_bfloat16*>(a);  // reuse: 3 * 128 MiB < 2 GiB
  bench_fill_bf16(m, int64_t{3} * n * n, 2, 1.f, s);
  cublasHandle_t h;
  cublasCreate(&h);
  cublasSetStream(h, s);
  const float alpha = 1.f, beta = 0.f;
  ts.clear();
  for (int i = 0; i < 14; ++i) {
    CK(cudaEventRecord(e0, s));
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, m, CUDA_R_16BF, n,
                 m + int64_t{n} * n, CUDA_R_16BF, n, &beta, m + 2 * int64_t{n} * n, CUDA_R_16BF, n,
                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 4) ts.push_back(ms);
  }
  c.mm_tflops = 2.0 * n * n * double(n) / (median(ts) * 1e-3) / 1e12;
  cublasDestroy(h);
  CK(cudaFree(a));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return c;
}

// Issue #29's rows: FlashMLA on the H200 (fewer than 64 heads padded to 64) and the issue's
// target, µs.
struct Issue29Row {
  const char* name;
  double flashmla_us, target_us;
};

const Issue29Row* issue29_row(const std::string& name) {
  static const Issue29Row kRows[] = {
      {"glm5-tp8 decode fp8 T=1", 21.9, 15},        {"glm5-tp4 decode fp8 T=1", 21.9, 15},
      {"glm5-tp1 decode fp8 T=1", 22.0, 15},        {"dsv32 decode fp8 T=1", 21.8, 15},
      {"glm5-tp1 decode fp8 T=32", 52.3, 47},       {"dsv32 decode fp8 T=32", 67.6, 61},
      {"glm5-tp1 decode fp8 T=128", 120.9, 110},    {"dsv32 decode fp8 T=128", 189.0, 172},
      {"glm5-tp8 decode fp8 T=128", 120.5, 50},     {"glm5-tp4 decode fp8 T=128", 120.9, 55},
      {"dsv32 decode bf16 T=32", 68.9, 62},         {"glm5-tp1 decode bf16 T=128", 97.0, 88},
      {"dsv32 decode bf16 T=128", 148.7, 135},      {"glm5-tp1 prefill bf16 T=4096", 2143.0, 1950},
      {"dsv32 prefill bf16 T=4096", 4126.0, 3750},  {"dsv3 dense decode bf16 ctx4096 B=32", 75.3, 68},
      {"dsv3 dense decode bf16 ctx4096 B=128", 255.0, 232}, {"dsv3-tp8 dense decode bf16 ctx4096 B=128", 166.9, 152},
  };
  for (const Issue29Row& r : kRows)
    if (name == r.name) return &r;
  return nullptr;
}

// The backends measured: LATTE_BENCH_BACKEND's list (explicit: refusals are printed), else every
// attention backend of the build that takes the shape.
std::vector<std::string> bench_backends(bool* explicit_list) {
  std::vector<std::string> ids;
  const char* env = std::getenv("LATTE_BENCH_BACKEND");
  *explicit_list = env != nullptr && *env != '\0';
  if (!*explicit_list) return {"cuda.sparse_mla", "hopper.mla"};
  for (std::string rest = env; !rest.empty();) {
    const std::size_t comma = rest.find(',');
    ids.push_back(rest.substr(0, comma));
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
  }
  return ids;
}

struct Shape {
  std::string name;
  bool decode;  // dense mla_decode (else sparse_mla)
  latte::CacheFormat fmt;
  int H, T, topk, ctx;
  float scale;
  // 0: rows with rope; else a sparse shape without rope whose cache rows are this many bytes
  // (fp8 528 or 656, of which 528 are read; bf16 1024)
  int nope_row_bytes = 0;
  int s_q = 1;  // dense decode: query tokens per request (causal over the request's last s_q positions)
};

constexpr int kBlock = 64;

// kernel_groups: the groups per call the kernel is made for (spec.max_tokens), 0 = the shape's own.
void run_shape(const Shape& sh, const Ceilings& ceil, cudaStream_t s, int iters, int kernel_groups) {
  using namespace latte;
  const bool nope = sh.nope_row_bytes > 0;
  const std::size_t tb = nope ? sh.nope_row_bytes : sh.fmt == CacheFormat::bf16 ? 1152 : 656;
  const std::size_t tb_read = nope && sh.fmt == CacheFormat::fp8_ds_mla ? 528 : tb;  // bytes a row's gather reads
  const int qd = nope ? 512 : 576;  // query dims
  const std::size_t l2 = 60u << 20;
  // One context per request (decode) or one shared context (prefill); rotated copies so that
  // consecutive calls touch more than 4x the L2.
  const bool prefill = !sh.decode && sh.T > 256;
  const int64_t ctx_tokens = prefill ? sh.ctx : static_cast<int64_t>(sh.T) * sh.ctx;
  const std::size_t set_bytes = static_cast<std::size_t>(ctx_tokens) * tb;
  int nrot = static_cast<int>(std::min<std::size_t>(8, std::max<std::size_t>(1, 4 * l2 / set_bytes + 1)));
  if (prefill) nrot = 2;
  const int64_t blocks_per_set = (ctx_tokens + kBlock - 1) / kBlock;
  const int64_t nblocks = blocks_per_set * nrot;
  const std::size_t cache_bytes = static_cast<std::size_t>(nblocks) * kBlock * tb;
  void* cache = nullptr;
  CK(cudaMalloc(&cache, cache_bytes));
  if (sh.fmt == CacheFormat::bf16) {
    bench_fill_bf16(cache, cache_bytes / 2, 3, 1.f, s);
  } else {
    bench_fill_fp8_cache(cache, nblocks * kBlock, 3, s, static_cast<int>(tb));
  }
  const int rows_per_group = sh.s_q * sh.H;
  const int64_t groups = sh.T;
  const std::size_t q_elems = static_cast<std::size_t>(groups) * rows_per_group * qd;
  std::vector<void*> qs(nrot), idxs(nrot), tables(nrot);
  for (int r = 0; r < nrot; ++r) {
    CK(cudaMalloc(&qs[r], q_elems * 2));
    bench_fill_bf16(qs[r], q_elems, 10 + r, 2.f, s);
  }
  std::mt19937 rng(5);
  // physical block permutation per rotation set
  void* lens_d = nullptr;
  int max_blocks = 0;
  if (sh.decode) {
    max_blocks = (sh.ctx + kBlock - 1) / kBlock;
    std::vector<int32_t> lens(static_cast<std::size_t>(groups), sh.ctx);
    CK(cudaMalloc(&lens_d, lens.size() * 4));
    CK(cudaMemcpy(lens_d, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
    for (int r = 0; r < nrot; ++r) {
      std::vector<int32_t> perm(static_cast<std::size_t>(blocks_per_set));
      for (int64_t i = 0; i < blocks_per_set; ++i) perm[i] = static_cast<int32_t>(r * blocks_per_set + i);
      std::shuffle(perm.begin(), perm.end(), rng);
      std::vector<int32_t> table(static_cast<std::size_t>(groups) * max_blocks);
      for (int64_t g = 0; g < groups; ++g)
        for (int j = 0; j < max_blocks; ++j) table[g * max_blocks + j] = perm[g * max_blocks + j];
      CK(cudaMalloc(&tables[r], table.size() * 4));
      CK(cudaMemcpy(tables[r], table.data(), table.size() * 4, cudaMemcpyHostToDevice));
    }
  } else {
    for (int r = 0; r < nrot; ++r) {
      std::vector<int32_t> perm(static_cast<std::size_t>(blocks_per_set));
      for (int64_t i = 0; i < blocks_per_set; ++i) perm[i] = static_cast<int32_t>(r * blocks_per_set + i);
      std::shuffle(perm.begin(), perm.end(), rng);
      std::vector<int32_t> idx(static_cast<std::size_t>(groups) * sh.topk);
      std::vector<int32_t> pos(static_cast<std::size_t>(sh.ctx));
      for (int64_t t = 0; t < groups; ++t) {
        // token t sees its context (decode: its own request; prefill: the causal prefix)
        const int64_t base = prefill ? 0 : t * sh.ctx;
        const int visible = prefill ? sh.ctx - sh.T + static_cast<int>(t) + 1 : sh.ctx;
        for (int i = 0; i < visible; ++i) pos[i] = i;
        const int k = std::min(sh.topk, visible);
        for (int i = 0; i < k; ++i) {  // partial Fisher-Yates: k distinct positions
          std::uniform_int_distribution<int> d(i, visible - 1);
          std::swap(pos[i], pos[d(rng)]);
          const int64_t logical = base + pos[i];
          idx[t * sh.topk + i] = static_cast<int32_t>(perm[logical / kBlock] * kBlock + logical % kBlock);
        }
        for (int i = k; i < sh.topk; ++i) idx[t * sh.topk + i] = -1;
      }
      CK(cudaMalloc(&idxs[r], idx.size() * 4));
      CK(cudaMemcpy(idxs[r], idx.data(), idx.size() * 4, cudaMemcpyHostToDevice));
    }
  }
  const std::size_t out_elems = static_cast<std::size_t>(groups) * rows_per_group * 512;
  void *out = nullptr, *lse = nullptr;
  CK(cudaMalloc(&out, out_elems * 2));
  CK(cudaMalloc(&lse, out_elems / 512 * 4));

  AttentionSpec spec;
  spec.op = sh.decode ? Op::mla_decode : Op::sparse_mla;
  spec.num_heads = sh.H;
  spec.kv_cache = sh.fmt;
  spec.block_size = kBlock;
  spec.topk = sh.decode ? 0 : sh.topk;
  spec.s_q = sh.decode ? sh.s_q : 1;
  spec.max_tokens = std::max<int64_t>(groups, kernel_groups) * spec.s_q;
  spec.scale = sh.scale;
  if (nope) spec.head_dim = latte::kLatentDim;
  const DeviceInfo dev = describe_device("cuda:0");
  // The rotated argument sets, the same for every backend.
  const Device d{DeviceKind::cuda, 0};
  auto args_for = [&](int r) -> OpArgs {
    TensorView kv = sh.fmt == CacheFormat::bf16
                        ? TensorView::contiguous(cache, DType::bf16, {nblocks, kBlock, static_cast<int64_t>(tb / 2)}, d)
                        : TensorView::contiguous(cache, DType::u8, {nblocks, kBlock, static_cast<int64_t>(tb)}, d);
    if (sh.decode) {
      MlaDecodeArgs a;
      a.q = TensorView::contiguous(qs[r], DType::bf16, {groups, sh.s_q, sh.H, 576}, d);
      a.kv_cache = kv;
      a.block_table = TensorView::contiguous(tables[r], DType::i32, {groups, max_blocks}, d);
      a.seq_lens = TensorView::contiguous(lens_d, DType::i32, {groups}, d);
      a.out = TensorView::contiguous(out, DType::bf16, {groups, sh.s_q, sh.H, 512}, d);
      a.lse = TensorView::contiguous(lse, DType::f32, {groups, sh.s_q, sh.H}, d);
      a.scale = sh.scale;
      return a;
    }
    SparseMlaArgs a;
    a.q = TensorView::contiguous(qs[r], DType::bf16, {groups, sh.H, qd}, d);
    a.kv_cache = kv;
    if (nope) a.rope_dim = latte::kNoRopeDim;
    a.indices = TensorView::contiguous(idxs[r], DType::i32, {groups, sh.topk}, d);
    a.out = TensorView::contiguous(out, DType::bf16, {groups, sh.H, 512}, d);
    a.lse = TensorView::contiguous(lse, DType::f32, {groups, sh.H}, d);
    a.scale = sh.scale;
    return a;
  };
  std::vector<OpArgs> args;
  for (int r = 0; r < nrot; ++r) args.push_back(args_for(r));
  // valid tokens per query
  double kv_tokens = 0;
  if (sh.decode) {
    kv_tokens = static_cast<double>(groups) * sh.ctx;  // per query (s_q - 1 fewer per request, ignored)
  } else if (prefill) {
    for (int64_t t = 0; t < groups; ++t) kv_tokens += std::min<int64_t>(sh.topk, sh.ctx - sh.T + t + 1);
  } else {
    kv_tokens = static_cast<double>(groups) * std::min(sh.topk, sh.ctx);
  }
  const double flops = 2.0 * sh.s_q * sh.H * kv_tokens * (qd + 512);
  const double bytes = static_cast<double>(q_elems) * 2 + kv_tokens * tb_read + out_elems * 2.0 +
                       out_elems / 512 * 4.0;
  const double roof_us = std::max(flops / (ceil.mm_tflops * 1e12), bytes / (ceil.copy_gbs * 1e9)) * 1e6;
  const Issue29Row* row29 = issue29_row(sh.name);
  const double ref_us = row29 ? row29->flashmla_us : 0.0, target_us = row29 ? row29->target_us : 0.0;
  bool explicit_list = false;
  double baseline_us = 0;  // cuda.sparse_mla's time_us in this process
  for (const std::string& backend_id : bench_backends(&explicit_list)) {
    const auto be = Registry::global().find(backend_id);
    if (be == nullptr) {
      if (explicit_list)
        std::printf("{\"name\":\"%s\",\"backend\":\"%s\",\"skipped\":\"not in this build\"}\n", sh.name.c_str(),
                    backend_id.c_str());
      continue;
    }
    if (const auto refused = check(*be, spec, dev); !refused.empty()) {
      if (explicit_list)
        std::printf("{\"name\":\"%s\",\"backend\":\"%s\",\"skipped\":\"%s\"}\n", sh.name.c_str(), backend_id.c_str(),
                    refused[0].text.c_str());
      continue;
    }
    auto kernel = be->make(spec, dev);
    void* ws = nullptr;
    if (kernel->workspace_bytes()) CK(cudaMalloc(&ws, kernel->workspace_bytes()));
    RunContext rc;
    rc.stream = s;
    rc.workspace = ws;
    rc.workspace_bytes = kernel->workspace_bytes();
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; ++i) kernel->run(args[i % nrot], rc);
    CK(cudaStreamSynchronize(s));
    // sync_us: synchronize after every call (host-side run() counted while the GPU idles)
    std::vector<float> ts;
    for (int i = 0; i < iters; ++i) {
      CK(cudaEventRecord(e0, s));
      kernel->run(args[i % nrot], rc);
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      ts.push_back(ms);
    }
    CK(cudaGetLastError());
    const double sync_us = median(ts) * 1e3;
    // time_us: queued back to back, an event pair per call, one synchronization at the end
    // (triton.testing.do_bench). A few untimed calls first fill the queue.
    const int nq = std::max(iters, 2 * nrot);
    std::vector<cudaEvent_t> qa(static_cast<std::size_t>(nq)), qb(static_cast<std::size_t>(nq));
    for (int i = 0; i < nq; ++i) {
      CK(cudaEventCreate(&qa[i]));
      CK(cudaEventCreate(&qb[i]));
    }
    for (int i = 0; i < 4; ++i) kernel->run(args[i % nrot], rc);
    std::vector<float> host;  // host time of run() itself (validation, plan, launches), µs
    for (int i = 0; i < nq; ++i) {
      CK(cudaEventRecord(qa[i], s));
      const auto h0 = std::chrono::steady_clock::now();
      kernel->run(args[i % nrot], rc);
      const auto h1 = std::chrono::steady_clock::now();
      host.push_back(std::chrono::duration<float, std::micro>(h1 - h0).count());
      CK(cudaEventRecord(qb[i], s));
    }
    CK(cudaStreamSynchronize(s));
    CK(cudaGetLastError());
    ts.clear();
    for (int i = 0; i < nq; ++i) {
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, qa[i], qb[i]));
      ts.push_back(ms);
      CK(cudaEventDestroy(qa[i]));
      CK(cudaEventDestroy(qb[i]));
    }
    const double t_us = median(ts) * 1e3;
    const double host_us = median(host);
    // graph_us: one call per rotated input set captured in a CUDA graph, replayed
    double graph_us = 0;
    {
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int r = 0; r < nrot; ++r) kernel->run(args[r], rc);
      CK(cudaStreamEndCapture(s, &graph));
      CK(cudaGraphInstantiate(&exec, graph, 0));
      CK(cudaGraphLaunch(exec, s));
      CK(cudaStreamSynchronize(s));
      const int reps = std::max(3, (iters + nrot - 1) / nrot);
      ts.clear();
      for (int k = 0; k < 3; ++k) {
        CK(cudaEventRecord(e0, s));
        for (int i = 0; i < reps; ++i) CK(cudaGraphLaunch(exec, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        ts.push_back(ms / (reps * nrot));
      }
      graph_us = median(ts) * 1e3;
      CK(cudaGraphExecDestroy(exec));
      CK(cudaGraphDestroy(graph));
    }
    if (backend_id == "cuda.sparse_mla") baseline_us = t_us;
    std::printf(
        "{\"name\":\"%s\",\"backend\":\"%s\",\"op\":\"%s\",\"fmt\":\"%s\",\"H\":%d,\"s_q\":%d,\"T\":%d,\"topk\":%d,"
        "\"ctx\":%d,\"time_us\":%.2f,\"sync_us\":%.2f,\"graph_us\":%.2f,\"host_us\":%.2f,\"tflops\":%.2f,"
        "\"gbs\":%.1f,\"roof_pct\":%.1f,\"ws_bytes\":%zu,\"rot\":%d,\"kernel_tokens\":%lld,\"rope_dim\":%d,"
        "\"row_bytes\":%zu,\"baseline_us\":%.2f,\"vs_baseline\":%.3f,\"flashmla_ref_us\":%.1f,\"vs_flashmla_ref\":%.3f,"
        "\"sm90_target_us\":%.1f}\n",
        sh.name.c_str(), backend_id.c_str(), sh.decode ? "mla_decode" : "sparse_mla",
        sh.fmt == CacheFormat::bf16 ? "bf16" : "fp8_ds_mla", sh.H, sh.s_q, sh.T, sh.topk, sh.ctx, t_us, sync_us, graph_us,
        host_us, flops / (t_us * 1e-6) / 1e12, bytes / (t_us * 1e-6) / 1e9, 100.0 * roof_us / t_us,
        kernel->workspace_bytes(), nrot, static_cast<long long>(spec.max_tokens), nope ? 0 : 64, tb, baseline_us,
        baseline_us > 0 ? baseline_us / t_us : 0.0, ref_us, ref_us > 0 ? ref_us / t_us : 0.0, target_us);
    std::fflush(stdout);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    if (ws) CK(cudaFree(ws));
  }  // backends
  for (int r = 0; r < nrot; ++r) {
    cudaFree(qs[r]);
    if (idxs[r]) cudaFree(idxs[r]);
    if (tables[r]) cudaFree(tables[r]);
  }
  cudaFree(lens_d);
  cudaFree(cache);
  cudaFree(out);
  cudaFree(lse);
}

// Positive integers separated by commas from environment variable `name` into *out (left as it
// is when the variable is unset); false, with a message, when the value is anything else.
bool counts_from_env(const char* name, std::vector<int>* out) {
  const char* env = std::getenv(name);
  if (env == nullptr) return true;
  std::vector<int> counts;
  for (const char* at = env; *at != '\0';) {
    char* end = nullptr;
    const long t = std::strtol(at, &end, 10);
    if (end == at || t < 1 || (*end != ',' && *end != '\0')) {
      std::fprintf(stderr, "%s=%s: expected positive integers separated by commas\n", name, env);
      return false;
    }
    counts.push_back(static_cast<int>(t));
    at = *end == ',' ? end + 1 : end;
  }
  if (counts.empty()) {
    std::fprintf(stderr, "%s is empty: expected positive integers separated by commas\n", name);
    return false;
  }
  *out = counts;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using latte::CacheFormat;
  // [--rope-dim 64|0|both] [name filter] [iterations]
  bool with_rope = true, without_rope = false;
  std::vector<const char*> pos;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rope-dim") == 0 && i + 1 < argc) {
      const std::string v = argv[++i];
      if (v != "64" && v != "0" && v != "both") {
        std::fprintf(stderr, "--rope-dim %s: expected 64 (rows with rope), 0 (without) or both\n", v.c_str());
        return 2;
      }
      with_rope = v != "0";
      without_rope = v != "64";
    } else {
      pos.push_back(argv[i]);
    }
  }
  const char* only = pos.size() > 0 ? pos[0] : nullptr;  // substring filter on the shape name
  const int iters = pos.size() > 1 ? std::atoi(pos[1]) : 30;
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  // LATTE_BENCH_QUICK=1 (profiling runs): skip the ceilings, use the H200 figures of
  // docs/performance.md, "Method".
  Ceilings c;
  if (std::getenv("LATTE_BENCH_QUICK")) {
    c.copy_gbs = 4256;
    c.mm_tflops = 793;
  } else {
    c = measure_ceilings(s);
  }
  std::printf("{\"ceilings\":true,\"copy_gbs\":%.1f,\"mm_tflops\":%.1f}\n", c.copy_gbs, c.mm_tflops);
  std::fflush(stdout);
  const float glm = 0.0625f, ds = 0.13523f;
  // LATTE_BENCH_TOKENS=a,b,...: the sparse decode token counts (default 1,32,128);
  // LATTE_BENCH_DENSE_BATCHES=a,b,...: the dense decode batches of both formats (default bf16
  // 1,32,128 and fp8 32); LATTE_BENCH_KERNEL_TOKENS=n: every kernel made for n tokens (requests)
  // per call, as an engine makes one for its largest batch, while each call keeps its own count
  // (the plan's split and kernel follow the kernel's size). For plan sweeps.
  // LATTE_BENCH_TOPK=n: the sparse shapes' topk (default 2048; per-CTA fixed costs show as the
  // intercept of time against topk).
  std::vector<int> decode_tokens = {1, 32, 128}, dense_bf16 = {1, 32, 128}, dense_fp8 = {32}, kernel_tokens = {0};
  std::vector<int> topk_env = {2048};
  if (!counts_from_env("LATTE_BENCH_TOKENS", &decode_tokens)) return 2;
  if (!counts_from_env("LATTE_BENCH_TOPK", &topk_env)) return 2;
  if (topk_env.size() != 1 || topk_env.front() > 32768) {
    std::fprintf(stderr, "LATTE_BENCH_TOPK=%s: expected one topk from 1 to 32768 (run once per topk)\n",
                 std::getenv("LATTE_BENCH_TOPK"));
    return 2;
  }
  const int topk = topk_env.front();
  if (std::getenv("LATTE_BENCH_KERNEL_TOKENS") && !counts_from_env("LATTE_BENCH_KERNEL_TOKENS", &kernel_tokens)) return 2;
  if (std::getenv("LATTE_BENCH_DENSE_BATCHES")) {
    if (!counts_from_env("LATTE_BENCH_DENSE_BATCHES", &dense_bf16)) return 2;
    dense_fp8 = dense_bf16;
  }
  std::vector<Shape> shapes;
  // a sparse shape with rope and / or its variants without rope (" nope528" / " nope656" fp8
  // rows, " nope512" bf16 rows), adjacent
  const auto sparse = [&](const Shape& sh) {
    if (with_rope) shapes.push_back(sh);
    if (!without_rope) return;
    const std::vector<int> rows = sh.fmt == CacheFormat::bf16 ? std::vector<int>{1024} : std::vector<int>{528, 656};
    for (int rb : rows) {
      Shape n = sh;
      n.nope_row_bytes = rb;
      n.name += rb == 1024 ? " nope512" : " nope" + std::to_string(rb);
      shapes.push_back(n);
    }
  };
  for (CacheFormat f : {CacheFormat::fp8_ds_mla, CacheFormat::bf16}) {
    const std::string fs = f == CacheFormat::bf16 ? "bf16" : "fp8";
    for (int T : decode_tokens) {
      sparse({"glm5-tp8 decode " + fs + " T=" + std::to_string(T), false, f, 8, T, topk, 32768, glm});
      sparse({"glm5-tp4 decode " + fs + " T=" + std::to_string(T), false, f, 16, T, topk, 32768, glm});
      sparse({"glm5-tp1 decode " + fs + " T=" + std::to_string(T), false, f, 64, T, topk, 32768, glm});
      sparse({"dsv32 decode " + fs + " T=" + std::to_string(T), false, f, 128, T, topk, 32768, ds});
    }
    sparse({"glm5-tp1 prefill " + fs + " T=4096", false, f, 64, 4096, topk, 32768, glm});
    sparse({"glm5-tp8 prefill " + fs + " T=4096", false, f, 8, 4096, topk, 32768, glm});
  }
  sparse({"dsv32 prefill bf16 T=4096", false, CacheFormat::bf16, 128, 4096, topk, 32768, ds});
  if (with_rope) {
    for (int B : dense_bf16)
      shapes.push_back({"dsv3 dense decode bf16 B=" + std::to_string(B), true, CacheFormat::bf16, 128, B, 0, 32768, ds});
    for (int B : dense_fp8)
      shapes.push_back({"dsv3 dense decode fp8 B=" + std::to_string(B), true, CacheFormat::fp8_ds_mla, 128, B, 0, 32768, ds});
    // issue #29's dense rows: context 4096, 128 heads (TP1) and 16 (TP8)
    for (int B : {32, 128})
      shapes.push_back(
          {"dsv3 dense decode bf16 ctx4096 B=" + std::to_string(B), true, CacheFormat::bf16, 128, B, 0, 4096, ds});
    for (int B : {32, 128})
      shapes.push_back(
          {"dsv3-tp8 dense decode bf16 ctx4096 B=" + std::to_string(B), true, CacheFormat::bf16, 16, B, 0, 4096, ds});
    shapes.push_back({"dsv3-tp8 dense decode bf16 B=32", true, CacheFormat::bf16, 16, 32, 0, 32768, ds});
    // 64 heads (Kimi-K2 TP1, DeepSeek-V3 TP2) and two query tokens per request (MTP)
    for (int B : {32, 128})
      shapes.push_back(
          {"kimi-k2 dense decode bf16 ctx4096 B=" + std::to_string(B), true, CacheFormat::bf16, 64, B, 0, 4096, ds});
    shapes.push_back({"kimi-k2 dense decode fp8 ctx4096 B=128", true, CacheFormat::fp8_ds_mla, 64, 128, 0, 4096, ds});
    Shape mtp{"dsv3 dense decode bf16 ctx4096 s_q=2 B=64", true, CacheFormat::bf16, 128, 64, 0, 4096, ds};
    mtp.s_q = 2;
    shapes.push_back(mtp);
  }
  for (const Shape& sh : shapes) {
    if (only && sh.name.find(only) == std::string::npos) continue;
    run_shape(sh, c, s, iters, kernel_tokens.front());
  }
  CK(cudaStreamDestroy(s));
  return 0;
}
