// hopper.indexer's score launchers (sm_90a): the DSA indexer score I[t, p] by wgmma e4m3, as
// f32 logits (indexer_logits) or as u32 score keys for the exact top-k (indexer_topk,
// indexer_topk_sm90a.cpp). Two kernels: logits_wgmma_tma_warpspecialized.cuh (warp-specialized, TMA copies; block sizes 8,
// 16, 32 and multiples of 64) and logits_wgmma_cpasync.cuh (any block size); shared parts in
// logits_wgmma_common.cuh.
//
// Why a separate backend: e4m3 mma.sync is not native on sm_90 (its fp8 matrix units are
// wgmma's), and the portable kernel's f16 mma.sync path computes the 64-head logits at about
// half the copy bandwidth; fp8 wgmma has several times the needed rate (docs/kernels/indexer.md).
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "kernels/common/cuda_check.cuh"
#include "kernels/common/env_knob.hpp"
#include "kernels/topk/topk_launch.hpp"
#include "latte/error.hpp"
#include "kernels/indexer/sm90a/logits_wgmma_cpasync.cuh"
#include "kernels/indexer/sm90a/logits_launch_sm90a.hpp"
#include "kernels/indexer/sm90a/logits_wgmma_tma_warpspecialized.cuh"

namespace latte::hopper_indexer {
namespace {

static_assert(kMaxSamples == cuda::kFusedSamples, "the sample rows sampled_threshold reads");

// TMA pipeline stages: 6 (3 CTAs per SM by shared memory) and 4 (5 CTAs per SM) measured
// within 1.5 % of each other (H200, B = 32 / 128 x 32K, 8 x 128K, H_i 32 / 64); 6 the faster at
// the B = 32 shapes.
constexpr int kTmaStages = 6;

int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }

// Block sizes whose 64-position stages split into whole-page pieces of min(bs, 64) rows that
// start on 1024-byte boundaries of the swizzled tile.
bool tma_block_size(int bs) { return bs == 8 || bs == 16 || bs == 32 || (bs > 0 && bs % 64 == 0); }

// LATTE_HOPPER_INDEXER_KERNEL=cpasync (read per call): the cp.async kernel for every block
// size (tests, measurements).
bool cpasync_forced() {
  return cuda::env_knob_choice("hopper.indexer", "LATTE_HOPPER_INDEXER_KERNEL", {"auto", "cpasync"}) == 1;
}

// Calls f.template run<NI, NR>() for `columns` wgmma columns (the padded heads: 8 ... 128).
template <typename F>
void with_columns(int columns, F&& f) {
  switch (columns) {
    case 8: f.template run<8, 1>(); break;
    case 16: f.template run<16, 1>(); break;
    case 32: f.template run<32, 1>(); break;
    case 64: f.template run<64, 1>(); break;
    default: f.template run<64, 2>(); break;
  }
}

// The kernel instance of a plan: its function pointer, threads and shared memory (smem_max: the
// most any call of it takes, the repair pass's depending on topk).
struct KernelRef {
  const void* fn = nullptr;
  int threads = 0;
  int smem = 0;
  int smem_max = 0;
};

template <int OUT, int S>
struct TmaRef {
  KernelRef* out;
  template <int NI, int NR>
  void run() const {
    const int smem = tma_smem_bytes(NI * NR, S, OUT);
    *out = KernelRef{reinterpret_cast<const void*>(&logits_tma_kernel<OUT, NI, NR, S>), kTmaThreads, smem, smem};
  }
};

template <int OUT>
struct CpAsyncRef {
  KernelRef* out;
  int topk;  // kOutRepair: sizes the running buffer
  template <int NI, int NR>
  void run() const {
    const bool repair = OUT == kOutRepair;
    *out = KernelRef{reinterpret_cast<const void*>(&logits_cpasync_kernel<OUT, NI, NR>), kCpAsyncThreads,
                     cpasync_smem_bytes(NI * NR, repair ? repair_cap(topk) : 0),
                     cpasync_smem_bytes(NI * NR, repair ? repair_cap(kMaxTopk) : 0)};
  }
};

// The kernel writing `out` (ScoreOut): the TMA kernel (logits, keys, admission) or the cp.async
// kernel (logits, keys, samples, repair).
KernelRef kernel_of(bool tma, int padded_heads, int out, int topk) {
  KernelRef k;
  if (tma) {
    if (out == kOutKeys) with_columns(padded_heads, TmaRef<kOutKeys, kTmaStages>{&k});
    else if (out == kOutAdmit) with_columns(padded_heads, TmaRef<kOutAdmit, kTmaStages>{&k});
    else with_columns(padded_heads, TmaRef<kOutLogits, kTmaStages>{&k});
  } else {
    if (out == kOutKeys) with_columns(padded_heads, CpAsyncRef<kOutKeys>{&k, topk});
    else if (out == kOutSample) with_columns(padded_heads, CpAsyncRef<kOutSample>{&k, topk});
    else if (out == kOutRepair) with_columns(padded_heads, CpAsyncRef<kOutRepair>{&k, topk});
    else with_columns(padded_heads, CpAsyncRef<kOutLogits>{&k, topk});
  }
  return k;
}

// Raises the kernel's shared-memory limit to its most once per (kernel, device) and returns its
// resident CTAs per SM at k.smem, cached (the occupancy query costs microseconds of host time
// per launch).
int prepare(const KernelRef& k) {
  int device = 0;
  LATTE_CUDA_TRY(cudaGetDevice(&device));
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int>, int> cache;
  const std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(k.fn, device, k.smem);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  // Every cached entry of (fn, device) raised the limit already; setting it again is harmless.
  LATTE_CUDA_TRY(cudaFuncSetAttribute(k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, k.smem_max));
  int n = 0;
  LATTE_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k.fn, k.threads, k.smem));
  n = std::max(1, n);
  cache[key] = n;
  return n;
}

// The K pages as a 3-D tensor map (128 bytes, block_size rows, num_blocks pages), boxes of
// piece_rows rows written in the 128-byte swizzle. The driver's encoder, found through the
// runtime once.
CUtensorMap k_pages_map(const cuda::IndexerParams& p, int piece_rows) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    LATTE_CUDA_TRY(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    if (fn == nullptr || found != cudaDriverEntryPointSuccess) {
      throw Error(ErrorCode::unsupported,
                  "hopper.indexer: the CUDA driver has no cuTensorMapEncodeTiled (needs a CUDA 12+ driver); "
                  "use cuda.indexer");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  CUtensorMap map{};
  const cuuint64_t dims[3] = {128, static_cast<cuuint64_t>(p.block_size), static_cast<cuuint64_t>(p.num_blocks)};
  const cuuint64_t strides[2] = {128, static_cast<cuuint64_t>(p.page_stride)};
  const cuuint32_t box[3] = {128, static_cast<cuuint32_t>(piece_rows), 1};
  const cuuint32_t elem[3] = {1, 1, 1};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<uint8_t*>(p.k_cache), dims, strides, box,
                            elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    throw Error(ErrorCode::invalid_argument,
                "hopper.indexer: cuTensorMapEncodeTiled refused the K cache (error " + std::to_string(static_cast<int>(r)) +
                    ", block size " + std::to_string(p.block_size) + ", page stride " + std::to_string(p.page_stride) +
                    " bytes): the pages must be 16-byte aligned with a stride below 2^40; or set "
                    "LATTE_HOPPER_INDEXER_KERNEL=cpasync");
  }
  return map;
}

// How a problem is cut: index heads padded to a power of two >= 8 (the wgmma columns of a CTA),
// the kernel, and chunks of positions per query token (one token per CTA).
struct LogitsPlan {
  int padded_heads = 8;
  int chunk_len = 0;
  bool tma = false;     // the TMA kernel (block sizes 8, 16, 32, multiples of 64), else cp.async
  int piece_rows = 0;   // TMA: rows per copy, min(block_size, 64)
  int stages = 0;
  int num_chunks = 0;
  KernelRef kernel;
  int ctas_per_sm = 0;
};

LogitsPlan plan_logits(const cuda::IndexerParams& p, int64_t logits_len, int sm_count, int out, int topk = 0) {
  LogitsPlan pl;
  while (pl.padded_heads < p.heads) pl.padded_heads *= 2;
  // The sample pass gathers scattered positions and the repair pass needs every thread at each
  // stage's barrier: the cp.async kernel; the admission pass: the TMA kernel.
  pl.tma = out == kOutAdmit ||
           (out != kOutSample && out != kOutRepair && tma_block_size(p.block_size) && !cpasync_forced());
  pl.piece_rows = pl.tma ? std::min(p.block_size, kTileTokens) : 0;
  pl.stages = pl.tma ? kTmaStages : kCpAsyncStages;
  pl.kernel = kernel_of(pl.tma, pl.padded_heads, out, topk);
  pl.ctas_per_sm = sm_count > 0 ? prepare(pl.kernel) : 0;
  if (out == kOutRepair) {
    const RepairSplit r = repair_split(p.tokens, logits_len, topk, sm_count);
    pl.chunk_len = r.chunk_len;
    pl.num_chunks = r.chunks;
    return pl;
  }
  // Chunks of positions: one full wave when the tokens are fewer than the CTA slots (decode),
  // about four waves otherwise (prefill).
  const int64_t slots = static_cast<int64_t>(std::max(1, sm_count)) * std::max(1, pl.ctas_per_sm);
  const int64_t cover = std::max<int64_t>(1, logits_len);
  const int64_t tokens = std::max(1, p.tokens);
  int64_t chunks = tokens <= slots ? slots / tokens : (4 * slots + tokens / 2) / tokens;
  chunks = std::clamp<int64_t>(chunks, 1, ceil_div(cover, kTileTokens));
  pl.chunk_len = static_cast<int>(ceil_div(ceil_div(cover, chunks), kTileTokens) * kTileTokens);
  pl.num_chunks = static_cast<int>(ceil_div(cover, pl.chunk_len));
  return pl;
}

// The checks both outputs share.
void require_problem(const cuda::IndexerParams& p, int64_t row_len) {
  if (!p.q_fp8) {
    throw Error(ErrorCode::unsupported,
                "hopper.indexer: indexer queries in bf16; this backend takes e4m3 queries "
                "(wgmma e4m3). Use cuda.indexer for bf16 queries.");
  }
  if (p.heads < 1 || p.heads > kMaxHeads) {
    throw Error(ErrorCode::unsupported, "hopper.indexer: " + std::to_string(p.heads) +
                                            " index heads; this backend takes 1..128. Use cuda.indexer or "
                                            "cpu.reference.");
  }
  if (row_len >= (int64_t{1} << 31)) {
    throw Error(ErrorCode::unsupported, "hopper.indexer: rows of " + std::to_string(row_len) +
                                            " positions; this backend takes fewer than 2^31. Use cuda.indexer");
  }
}

// The score kernel writing `out` over positions [0, row_len) of every token (of its samples for
// kOutSample); `pdl`: launched dependent on the previous kernel in the stream (the fused path).
void launch_scores(const cuda::IndexerParams& p, LogitsArgs a, int out, int64_t row_len, int sm_count, bool pdl,
                   void* stream) {
  const LogitsPlan pl = plan_logits(p, row_len, sm_count, out, a.topk);
  const int64_t grid = static_cast<int64_t>(p.tokens) * pl.num_chunks;
  if (grid >= (int64_t{1} << 31)) {
    throw Error(ErrorCode::unsupported, "hopper.indexer: the problem needs more than 2^31 CTAs; split the batch");
  }
  a.p = p;
  a.logits_len = static_cast<int>(row_len);
  a.vis_cap = static_cast<int>(out == kOutSample ? p.max_len() : std::min<int64_t>(p.max_len(), row_len));
  a.chunk_len = pl.chunk_len;
  a.q_vec = (reinterpret_cast<uintptr_t>(p.q) % 16 == 0 && p.q_st % 16 == 0 && p.q_sh % 16 == 0) ? 1 : 0;
  a.piece_rows = pl.piece_rows;
  const KernelRef& k = pl.kernel;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(k.threads);
  cfg.dynamicSmemBytes = k.smem;
  cfg.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = pdl ? attr : nullptr;
  cfg.numAttrs = pdl ? 1 : 0;
  if (pl.tma) {
    CUtensorMap map = k_pages_map(p, pl.piece_rows);
    void* args[] = {&a, &map};
    LATTE_CUDA_TRY(cudaLaunchKernelExC(&cfg, k.fn, args));
  } else {
    void* args[] = {&a};
    LATTE_CUDA_TRY(cudaLaunchKernelExC(&cfg, k.fn, args));
  }
}

}  // namespace

RepairSplit repair_split(int64_t tokens, int64_t max_len, int topk, int sm_count) {
  const int64_t len = std::max<int64_t>(1, max_len);
  const int64_t by_ctas = repair_chunks_bound(tokens, sm_count);
  const int64_t by_len = std::max<int64_t>(1, len / (2 * static_cast<int64_t>(std::max(1, topk))));
  const int64_t chunks = std::min(by_ctas, by_len);
  RepairSplit r;
  r.chunk_len = static_cast<int>(ceil_div(ceil_div(len, chunks), kTileTokens) * kTileTokens);
  r.chunks = static_cast<int>(ceil_div(len, r.chunk_len));
  return r;
}

void launch_logits_sm90a(const cuda::IndexerParams& p, float* logits, int64_t ld_t, int64_t ld_s,
                         int64_t logits_len, int sm_count, void* stream) {
  require_problem(p, logits_len);
  if (p.tokens == 0 || logits_len == 0) return;
  LogitsArgs a{};
  a.logits = logits;
  a.lg_st = ld_t;
  a.lg_ss = ld_s;
  launch_scores(p, a, kOutLogits, logits_len, sm_count, false, stream);
}

void launch_keys_sm90a(const cuda::IndexerParams& p, uint32_t* keys, int64_t keys_ld, int* key_hist, int sm_count,
                       void* stream) {
  require_problem(p, p.max_len());
  if (p.tokens == 0 || p.max_len() == 0) return;
  if (keys_ld < p.max_len()) {
    throw Error(ErrorCode::invalid_argument, "hopper.indexer: keys rows of " + std::to_string(keys_ld) +
                                                 " entries for " + std::to_string(p.max_len()) +
                                                 " positions; give rows of at least max_blocks * block_size");
  }
  LogitsArgs a{};
  a.keys = keys;
  a.key_hist = key_hist;
  a.lg_st = keys_ld;
  a.lg_ss = 1;
  a.spans = cuda::topk_prof_spans();
  launch_scores(p, a, kOutKeys, p.max_len(), sm_count, false, stream);
}

namespace {

// The fused passes' shared arguments; `span`: the pass's span slot (kernels/topk/topk_launch.hpp).
LogitsArgs fused_args(const FusedBuffers& f, int span) {
  LogitsArgs a{};
  a.lg_ss = 1;
  a.spans = cuda::topk_prof_spans();
  a.span = span;
  a.samples = f.samples;
  a.topk = f.topk;
  a.debug = f.debug;
  a.sample_keys = f.sample_keys;
  a.row_tau = f.tau;
  a.row_count = f.count;
  a.list_keys = f.list_keys;
  a.list_pos = f.list_pos;
  a.list_cap = f.list_cap;
  a.repair_cap = repair_cap(f.topk);
  a.cand_keys = f.cand_keys;
  a.cand_pos = f.cand_pos;
  return a;
}

}  // namespace

bool fused_block_size(int block_size) { return tma_block_size(block_size) && !cpasync_forced(); }

SampleGrid sample_grid(const cuda::IndexerParams& p, int samples, int sm_count) {
  const LogitsPlan pl = plan_logits(p, samples, sm_count, kOutSample);
  return SampleGrid{static_cast<int64_t>(std::max(0, p.tokens)) * pl.num_chunks, pl.chunk_len / kTileTokens};
}

void launch_sample_sm90a(const cuda::IndexerParams& p, const FusedBuffers& f, int sm_count, void* stream) {
  require_problem(p, p.max_len());
  if (p.tokens == 0) return;
  LogitsArgs a = fused_args(f, cuda::kSpanScore);
  a.keys = f.sample_keys;
  a.lg_st = f.samples;
  launch_scores(p, a, kOutSample, f.samples, sm_count, false, stream);
}

void launch_admit_sm90a(const cuda::IndexerParams& p, const FusedBuffers& f, int sm_count, void* stream) {
  if (p.tokens == 0) return;
  if (!fused_block_size(p.block_size)) {
    throw Error(ErrorCode::invalid_argument, "hopper.indexer: the fused path's admission pass takes block sizes 8, 16, "
                                             "32 and multiples of 64 (the TMA kernel), not " +
                                                 std::to_string(p.block_size) + "; use the unfused path");
  }
  launch_scores(p, fused_args(f, cuda::kSpanAdmit), kOutAdmit, p.max_len(), sm_count, f.pdl_admit, stream);
}

void launch_repair_sm90a(const cuda::IndexerParams& p, const FusedBuffers& f, int sm_count, void* stream) {
  if (p.tokens == 0) return;
  if (f.topk < 1 || f.topk > kMaxTopk) {
    throw Error(ErrorCode::invalid_argument, "hopper.indexer: the fused repair pass takes topk 1.." +
                                                 std::to_string(kMaxTopk) + ", not " + std::to_string(f.topk));
  }
  launch_scores(p, fused_args(f, cuda::kSpanRepair), kOutRepair, p.max_len(), sm_count, f.pdl, stream);
}

std::string describe_scores(int heads, int block_size, bool keys) {
  cuda::IndexerParams p;
  p.heads = std::clamp(heads, 1, kMaxHeads);
  p.block_size = std::max(1, block_size);
  p.tokens = 1;
  p.batch = 1;
  const LogitsPlan pl = plan_logits(p, 1, 0, keys ? kOutKeys : kOutLogits);
  const std::string copies =
      pl.tma ? "TMA copies of " + std::to_string(pl.piece_rows) + "-row page pieces by a producer warp, " +
                   std::to_string(pl.stages) + " stages"
             : "cp.async by the consumer threads (block size " + std::to_string(p.block_size) +
                   " is not 8, 16, 32 or a multiple of 64), " + std::to_string(pl.stages) + " stages";
  return std::string(keys ? "indexer_topk: scores by wgmma m64n" : "indexer_logits: wgmma m64n") + std::to_string(std::min(pl.padded_heads, 64)) +
         "k32 e4m3 (sm_90a), K the A operand in 64-position tiles in the 128-byte swizzle (" + copies +
         "); one query token per CTA, its heads as the columns (padded to " + std::to_string(pl.padded_heads) +
         "); ReLU, head weights and k_scale in registers; " +
         (keys ? "u32 score keys into the workspace" : "f32 logits");
}

}  // namespace latte::hopper_indexer
