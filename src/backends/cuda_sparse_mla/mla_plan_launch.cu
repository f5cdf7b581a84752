// Split combine kernel and the host-side plan / launch sequence of cuda.sparse_mla.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "backends/cuda_sparse_mla/mla_fwd_dispatch.hpp"
#include "backends/cuda_sparse_mla/mla_fwd_sm80.cuh"
#include "cuda/check.cuh"
#include "latte/error.hpp"

namespace latte::cuda_sparse_mla {
namespace {

// One warp per (group, row): out = sum_s w_s O_s / sum_s w_s, w_s = 2^(lse2_s - max), in split
// order (deterministic, independent of which CTA finished first).
template <bool DECODE>
__global__ void __launch_bounds__(128) mla_combine_kernel(const MlaParams p, const LaunchArgs la,
                                                          const int64_t groups_in_slab) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rows = p.s_q * p.heads;
  const int64_t gw = static_cast<int64_t>(blockIdx.x) * 4 + warp;
  if (gw >= groups_in_slab * rows) return;
  const int64_t g_local = gw / rows;
  const int row = static_cast<int>(gw - g_local * rows);
  const int64_t grp = la.group_begin + g_local;
  int ns = la.nsplit;
  if constexpr (DECODE) {
    const int64_t cap = static_cast<int64_t>(p.max_blocks) * p.block_size;
    int64_t len = p.seq_lens[grp * p.sl_s];
    len = len < 0 ? 0 : (len > cap ? cap : len);
    ns = len > 0 ? static_cast<int>((len + la.chunk - 1) / la.chunk) : 1;
    if (ns == 1) return;  // the main kernel wrote this row directly
  }
  const int64_t base = (g_local * rows + row) * la.nsplit;
  float mx = -INFINITY;
  for (int s = 0; s < ns; ++s) mx = fmaxf(mx, la.part_lse[base + s]);
  float acc[16];
#pragma unroll
  for (int d = 0; d < 16; ++d) acc[d] = 0.f;
  float wsum = 0.f;
  if (mx != -INFINITY) {
    for (int s = 0; s < ns; ++s) {
      const float w = exp2f(la.part_lse[base + s] - mx);
      wsum += w;
      const uint4* src = reinterpret_cast<const uint4*>(la.part_o + (base + s) * 512 + lane * 16);
      const uint4 v0 = src[0], v1 = src[1];
      const uint32_t u[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
      for (int d = 0; d < 8; ++d) {
        acc[2 * d] += w * __uint_as_float(u[d] << 16);
        acc[2 * d + 1] += w * __uint_as_float(u[d] & 0xFFFF0000u);
      }
    }
  }
  const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
  const int i = row / p.heads, h = row - (row / p.heads) * p.heads;
  __nv_bfloat16* const dst = p.out + grp * p.o_sg + i * p.o_si + h * p.o_sh + lane * 16;
  uint32_t o[8];
#pragma unroll
  for (int d = 0; d < 8; ++d)
    o[d] = latte::cuda::sm80::pack_bf16x2(acc[2 * d] * inv, acc[2 * d + 1] * inv);
  reinterpret_cast<uint4*>(dst)[0] = make_uint4(o[0], o[1], o[2], o[3]);
  reinterpret_cast<uint4*>(dst)[1] = make_uint4(o[4], o[5], o[6], o[7]);
  if (lane == 0 && p.lse != nullptr) {
    p.lse[grp * p.l_sg + i * p.l_si + h * p.l_sh] =
        mx == -INFINITY ? -INFINITY : (mx + log2f(wsum)) * 0.6931471805599453f;
  }
}

std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

std::size_t part_bytes(int rows, int nsplit) {
  if (nsplit <= 1) return 0;
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(nsplit);
  return align_up(n * 1024, 256) + align_up(n * 4, 256);
}

}  // namespace

void launch_combine(bool decode, int64_t groups_in_slab, const MlaParams& p, const LaunchArgs& la,
                    cudaStream_t stream) {
  const int rows = p.s_q * p.heads;
  const int64_t warps = groups_in_slab * rows;
  const auto blocks = static_cast<unsigned>((warps + 3) / 4);
  if (decode) {
    mla_combine_kernel<true><<<blocks, 128, 0, stream>>>(p, la, groups_in_slab);
  } else {
    mla_combine_kernel<false><<<blocks, 128, 0, stream>>>(p, la, groups_in_slab);
  }
  LATTE_CUDA_CHECK_LAUNCH("mla_combine_kernel");
}

std::size_t fwd_smem_bytes(bool fp8, int row_tile) {
  if (fp8) return row_tile == 16 ? KCfg<true, 16>::SMEM : KCfg<true, 32>::SMEM;
  return row_tile == 16 ? KCfg<false, 16>::SMEM : KCfg<false, 32>::SMEM;
}

std::size_t smem_bytes(KvFormat format, int row_tile) {
  return fwd_smem_bytes(format == KvFormat::fp8_ds_mla, row_tile);
}

// KV tokens per split. A function of the op and the rows per group only: every group of a
// call (and of any other call with the same heads) is cut the same way.
int chunk_tokens(bool decode, int rows) {
  if (decode) return rows <= 16 ? 1024 : 2048;
  return rows <= 16 ? 256 : 512;
}

std::size_t workspace_bytes_for(bool decode, KvFormat /*format*/, int rows, int topk_or_len,
                                int64_t max_groups) {
  const int chunk = chunk_tokens(decode, rows);
  const int nsplit = std::max(1, (topk_or_len + chunk - 1) / chunk);
  const std::size_t per = part_bytes(rows, nsplit);
  if (per == 0) return 0;
  constexpr std::size_t kCap = std::size_t{256} << 20;
  const std::size_t want = per * static_cast<std::size_t>(std::max<int64_t>(1, max_groups));
  return std::max(per, std::min(want, kCap));
}

MlaPlan make_plan(const MlaParams& p, int sm_count, std::size_t workspace_bytes) {
  MlaPlan plan;
  plan.rows = p.s_q * p.heads;
  plan.chunk = chunk_tokens(p.decode, plan.rows);
  int64_t items = p.decode ? static_cast<int64_t>(p.max_blocks) * p.block_size : p.topk;
  plan.nsplit = static_cast<int>(std::max<int64_t>(1, (items + plan.chunk - 1) / plan.chunk));
  // Row tile: 32 rows reuse each gathered tile twice as often; 16 gives twice the CTAs when a
  // call is too small to fill the device. Either gives bitwise the same rows.
  plan.row_tile = plan.rows <= 16 ? 16 : 32;
  if (plan.row_tile == 32) {
    const int64_t ctas = static_cast<int64_t>(p.groups) * ((plan.rows + 31) / 32) * plan.nsplit;
    if (ctas < 2 * static_cast<int64_t>(sm_count)) plan.row_tile = 16;
  }
  // Test hook: LATTE_CUDA_SPARSE_MLA_ROW_TILE=16|32 forces the row tile (results are bitwise
  // the same either way; the tests use it to cover both paths on small problems).
  if (const char* env = std::getenv("LATTE_CUDA_SPARSE_MLA_ROW_TILE")) {
    const int forced = std::atoi(env);
    if (forced == 16 || (forced == 32 && plan.rows > 16)) plan.row_tile = forced;
  }
  plan.row_tiles = (plan.rows + plan.row_tile - 1) / plan.row_tile;
  plan.part_bytes_per_group = part_bytes(plan.rows, plan.nsplit);
  if (plan.nsplit > 1) {
    const auto fit = static_cast<int64_t>(workspace_bytes / plan.part_bytes_per_group);
    if (fit < 1) {
      throw Error(ErrorCode::invalid_argument,
                  "cuda.sparse_mla: workspace of " + std::to_string(workspace_bytes) +
                      " bytes is smaller than one group's split partials (" +
                      std::to_string(plan.part_bytes_per_group) +
                      " bytes); pass ctx.workspace of at least Kernel::workspace_bytes()");
    }
    plan.slab = std::min<int64_t>(p.groups, fit);
  } else {
    plan.slab = p.groups;
  }
  const int64_t max_grid = (int64_t{1} << 31) - 1;
  const int64_t per_group_ctas = static_cast<int64_t>(plan.row_tiles) * plan.nsplit;
  plan.slab = std::max<int64_t>(1, std::min(plan.slab, max_grid / per_group_ctas));
  return plan;
}

void launch_mla(const MlaParams& p, const MlaPlan& plan, void* workspace, cudaStream_t stream) {
  if (p.groups <= 0) return;
  const bool fp8 = p.format == KvFormat::fp8_ds_mla;
  for (int64_t g0 = 0; g0 < p.groups; g0 += plan.slab) {
    const int64_t n = std::min<int64_t>(plan.slab, p.groups - g0);
    LaunchArgs la{};
    la.row_tiles = plan.row_tiles;
    la.nsplit = plan.nsplit;
    la.chunk = plan.chunk;
    la.group_begin = g0;
    if (plan.nsplit > 1) {
      const std::size_t nparts = static_cast<std::size_t>(n) * plan.rows * plan.nsplit;
      auto* base = static_cast<uint8_t*>(workspace);
      la.part_o = reinterpret_cast<__nv_bfloat16*>(base);
      la.part_lse = reinterpret_cast<float*>(base + align_up(nparts * 1024, 256));
    }
    const int64_t grid = n * plan.row_tiles * plan.nsplit;
    if (fp8) {
      launch_fwd_fp8(plan.row_tile, p.decode, grid, p, la, stream);
    } else {
      launch_fwd_bf16(plan.row_tile, p.decode, grid, p, la, stream);
    }
    if (plan.nsplit > 1) launch_combine(p.decode, n, p, la, stream);
  }
}

}  // namespace latte::cuda_sparse_mla
