// Host side of cuda.sparse_mla: the split rule, the launch plan (row tile, splits, slabs) and
// the launch sequence (counter reset + forward kernel, which combines splits itself).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "kernels/sparse_mla/smxx/mla_fwd_dispatch.hpp"
#include "kernels/sparse_mla/smxx/mla_fwd_mma_sync_cpasync.cuh"
#include "kernels/common/cuda_check.cuh"
#include "kernels/common/env_knob.hpp"
#include "latte/error.hpp"

namespace latte::cuda_sparse_mla {
namespace {

std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

// Per group: bf16 partial rows, their lse, one counter per row tile (16 rows: the most).
std::size_t part_bytes(int rows, int nsplit) {
  if (nsplit <= 1) return 0;
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(nsplit);
  const std::size_t tiles = static_cast<std::size_t>((rows + 15) / 16);
  return align_up(n * 1024, 256) + align_up(n * 4, 256) + align_up(tiles * 4, 256);
}

}  // namespace

std::size_t smem_bytes(CacheFormat format, int row_tile, int ctas_per_sm) {
  const bool lean = row_tile == 16 && ctas_per_sm == 3;
  if (format == CacheFormat::fp8_ds_mla) {
    return row_tile == 32 ? KCfg<true, 32>::SMEM : lean ? KCfg<true, 16, 8, 3>::SMEM : KCfg<true, 16>::SMEM;
  }
  return row_tile == 32 ? KCfg<false, 32>::SMEM : lean ? KCfg<false, 16, 8, 3>::SMEM : KCfg<false, 16>::SMEM;
}

namespace {

int tuning_var(const char* name, bool (*accepts)(int), const char* accepted) {
  return cuda::env_knob_int("cuda.sparse_mla", name, accepts, accepted);
}

}  // namespace

Tuning tuning_from_env() {
  Tuning t;
  // The chunk changes every group's split the same way, so results stay batch invariant; the
  // others never change a result bit (the tests use them to cover every configuration).
  t.chunk = tuning_var("LATTE_CUDA_SPARSE_MLA_CHUNK", [](int v) { return v >= 32 && v % 32 == 0; },
                       "a positive multiple of 32");
  t.row_tile = tuning_var("LATTE_CUDA_SPARSE_MLA_ROW_TILE", [](int v) { return v == 16 || v == 32; },
                          "16 or 32");
  t.warps = tuning_var("LATTE_CUDA_SPARSE_MLA_WARPS", [](int v) { return v == 4 || v == 8; }, "4 or 8");
  t.ctas = tuning_var("LATTE_CUDA_SPARSE_MLA_CTAS", [](int v) { return v == 2 || v == 3; }, "2 or 3");
  t.dim_split = tuning_var("LATTE_CUDA_SPARSE_MLA_DIM_SPLIT", [](int v) { return v == 1 || v == 2; }, "1 or 2");
  t.row_tile_only = tuning_var("LATTE_CUDA_SPARSE_MLA_ROW_TILE_ONLY", [](int v) { return v == 1; }, "1");
  t.row_groups = tuning_var("LATTE_CUDA_SPARSE_MLA_ROW_GROUPS", [](int v) { return v == 1; }, "1");
  return t;
}

bool row_groups_kernel(CacheFormat format, int rows, int64_t max_groups, const Tuning& tuning) {
  if (tuning.row_tile_only != 0 || format != CacheFormat::bf16) return false;
  if (tuning.row_groups != 0) return true;
  return rows % kRowGroupsRows == 0 && (max_groups == 0 || max_groups > kSmallCallGroups);
}

bool few_heads_kernel(bool decode, CacheFormat format, int rows, int64_t max_groups, const Tuning& tuning,
                      const PlanDevice& device) {
  if (tuning.row_tile_only != 0 || decode || format != CacheFormat::fp8_ds_mla || rows > kFewHeadsMax) return false;
  // 9-16 heads (two n8 tiles) in kernels for at most 16 groups: the row-tile kernel is faster
  // (H200, 16 heads, T = 1 / 8 / 16: 19.6 / 21.0 / 25.2 against 22.9 / 23.2 / 25.7 us)
  if (rows > 8 && max_groups > 0 && max_groups <= 2 * kSmallCallGroups) return false;
  return 2 * static_cast<int64_t>(sparse_fp8_fewheads_smem_bytes(rows) + 1024) <= device.smem_per_sm;
}

// KV tokens per split. A function of the op, the rows per group and the kernel's largest call
// only, never of a call's group count: every group of every call of one kernel is cut the same
// way. Smaller chunks give small calls more CTAs and large calls more partials to combine.
// Measured on the H200 (docs/kernels/sparse_mla.md, "Splits, determinism, batch invariance"):
// GLM-5 TP1 fp8, chunk 128 / 256 / 512: T=1 21.3 /
// 23.8 / 35.2 us, T=4 32.5 / 26.2 / 36.2, T=8 45.5 / 35.2 / 39.1; T=32 256 / 512: 93 / 76,
// T=128 294 / 268. TP8 (16 rows) 128 / 256: T=1 16.6 / 20.9, T=8 18.1 / 21.6. Dense decode
// 1024 / 2048: B=1 120 / 157, B=32 2034 / 1934. Prefill T=4096 (chunk 512 / 1024
// / 2048): GLM-5 TP1 bf16 7089 / 6530 / 6117 us, fp8 7151 / 6737 / 6365, DeepSeek-V3.2 bf16
// 14177 / 13061 / 12064, GLM-5 TP8 bf16 (256: 2098) 2021 / 2030; decode T=128
// (512 / 1024): GLM-5 TP1 fp8 250 / 235, bf16 253 / 226, DeepSeek-V3.2 fp8 486 / 461, bf16 471 /
// 435 (2048: 222 / 199 / 439 / 386); dense decode B=128 (2048 / 4096,
// two rounds): 6773 / 6644, 6711 / 6594. So the chunk follows the kernel's largest call
// (spec.max_tokens): single-token kernels, kernels for at most kSmallCallGroups groups, for at
// most kMediumCallGroups (and kernels of unknown size, max_groups 0), for more (at <= 16 rows:
// fewer than kPrefillCallGroups, and prefill chunks); dense decode with at most 16 rows: not
// measured, one size.
// The split size by rows, kernel size and kernel variant. The table and the measurements behind
// every threshold: docs/kernels/sparse_mla.md, "Splits, determinism, batch invariance" (the
// row-group and few-heads kernels: their own sections there).
int chunk_tokens(bool decode, CacheFormat format, int rows, int64_t max_groups, const Tuning& tuning,
                 const PlanDevice& device) {
  if (tuning.chunk > 0) return tuning.chunk;
  const bool small_calls = max_groups > 0 && max_groups <= kSmallCallGroups;
  const bool prefill_calls = max_groups >= kPrefillCallGroups;
  const bool row_groups = row_groups_kernel(format, rows, max_groups, tuning);
  // Dense decode: few requests keep short splits (latency); more take long ones (fewer partials).
  // One 16-row tile (<= 16 rows): 2048 only beyond 64 requests, since a request's length is not
  // known when the kernel is made (H200, DeepSeek-V3 TP8, 2 CTAs per SM, chunk 1024 / 2048 /
  // 4096: context 4096 B = 128 182.3 / 166.9 / 237.6 us, B = 32 73.8 / 113.5 / 205.1; context
  // 32 768 B = 32 351.3 / 330.4 / 318.9).
  if (decode) {
    if (small_calls) return 1024;
    if (rows <= 16) return max_groups > kMediumCallGroups ? 2048 : 1024;
    return row_groups ? 2048 : 4096;
  }
  if (few_heads_kernel(decode, format, rows, max_groups, tuning, device)) {
    // about one wave of 2 CTAs per SM (H200, kernels for 64 tokens, chunk 256 / 512: 8 heads T =
    // 64 50.9 / 41.1 us, 16 heads 65.9 / 46.7; T = 32 through kernels for 32 tokens: 256)
    if (max_groups > kMediumCallGroups) return 1024;
    if (max_groups > kMediumCallGroups / 2) return 512;
  }
  if (rows <= 16) return prefill_calls ? 1024 : small_calls ? 128 : 256;
  // Large calls: a topk-2048 list in one split (no partials), except row-group decode batches.
  if (max_groups > kMediumCallGroups) return row_groups && !prefill_calls ? 1024 : 2048;
  if (max_groups == 1) return 128;
  if (small_calls) return 256;
  // 9-64 groups: about one wave of 2 CTAs per SM.
  return max_groups > 0 && rows > 64 ? 1024 : 512;
}

std::size_t workspace_bytes_for(bool decode, CacheFormat format, int rows, int topk_or_len,
                                int64_t max_groups, const Tuning& tuning, const PlanDevice& device) {
  const int chunk = chunk_tokens(decode, format, rows, max_groups, tuning, device);
  const int nsplit = std::max(1, (topk_or_len + chunk - 1) / chunk);
  const std::size_t per = part_bytes(rows, nsplit);
  if (per == 0) return 0;
  constexpr std::size_t kCap = std::size_t{256} << 20;
  const std::size_t want = per * static_cast<std::size_t>(max_groups > 0 ? max_groups : kUnknownCallGroups);
  return std::max(per, std::min(want, kCap));
}

namespace {

// CTAs of a configuration (built for `ctas` per SM) that the device's shared memory holds per
// SM (1 KB per CTA reserved by the driver); `ctas` when the device's figure is not known.
int resident_ctas(CacheFormat format, int row_tile, int ctas, const PlanDevice& device) {
  if (device.smem_per_sm <= 0) return ctas;
  const int64_t fit = device.smem_per_sm / static_cast<int64_t>(smem_bytes(format, row_tile, ctas) + 1024);
  return static_cast<int>(std::clamp<int64_t>(fit, 1, ctas));
}

}  // namespace

MlaPlan make_plan(const MlaParams& p, const PlanDevice& device, std::size_t workspace_bytes,
                  const Tuning& tuning, int64_t max_groups) {
  const int sm_count = std::max(1, device.sm_count);
  MlaPlan plan;
  plan.rows = p.s_q * p.heads;
  plan.chunk = chunk_tokens(p.decode, p.format, plan.rows, max_groups, tuning, device);
  plan.warps = tuning.warps;
  int64_t items = p.decode ? static_cast<int64_t>(p.max_blocks) * p.block_size : p.topk;
  plan.nsplit = static_cast<int>(std::max<int64_t>(1, (items + plan.chunk - 1) / plan.chunk));
  // Row tile (either gives bitwise the same rows). 16-row tiles give twice the CTAs, each with
  // a shorter chain of phases per KV tile; 32-row tiles reuse each gathered (and, fp8, widened)
  // KV byte twice as often. H200 sweep over T = 1..128 (docs/kernels/sparse_mla.md, "Work
  // decomposition"): 16 rows win while their grid has at most one CTA per SM; beyond that 32 rows
  // win for fp8, and for bf16 when they need fewer waves (a bf16 wave of 32-row tiles at 2 CTAs per
  // SM does about as much work per microsecond as one of 16-row tiles at 3, so waves decide).
  const bool three_fit = static_cast<int64_t>(3 * (smem_bytes(p.format, 16, 3) + 1024)) <= device.smem_per_sm;
  plan.row_tile = 16;
  if (plan.rows > 16) {
    const int64_t sms = sm_count;
    const int64_t grid16 = static_cast<int64_t>(p.groups) * ((plan.rows + 15) / 16) * plan.nsplit;
    const int64_t grid32 = static_cast<int64_t>(p.groups) * ((plan.rows + 31) / 32) * plan.nsplit;
    if (grid16 > sms) {
      if (p.format == CacheFormat::fp8_ds_mla) {
        plan.row_tile = 32;
      } else {
        const int per_sm16 = resident_ctas(p.format, 16, three_fit && grid16 > 2 * sms ? 3 : 2, device);
        const int per_sm32 = resident_ctas(p.format, 32, 2, device);
        const auto waves = [&](int64_t grid, int per_sm) { return (grid + per_sm * sms - 1) / (per_sm * sms); };
        if (waves(grid32, per_sm32) < waves(grid16, per_sm16)) plan.row_tile = 32;
      }
    }
  }
  // Test hook (Tuning::row_tile): force the row tile.
  if (tuning.row_tile == 16 || (tuning.row_tile == 32 && plan.rows > 16)) {
    plan.row_tile = tuning.row_tile;
  }
  plan.row_tiles = (plan.rows + plan.row_tile - 1) / plan.row_tile;
  // At most 16 heads over the fp8 cache: the few-heads kernel (heads on the mma's N dimension,
  // one row tile; 2 CTAs per SM and no dim split, below). A function of format, heads, the
  // kernel's size and the device only, like the split, so batch invariant.
  plan.few_heads = few_heads_kernel(p.decode, p.format, plan.rows, max_groups, tuning, device);
  if (plan.few_heads) plan.row_tiles = 1;
  // bf16 calls of 64 / 128 rows: the row-group kernel (64-row tiles, one CTA per SM, no dim
  // split, below). A function of format, rows and the kernel's size, like the split, so batch
  // invariant. (LATTE_CUDA_SPARSE_MLA_ROW_TILE and _CTAS tune the row-tile kernel only.)
  plan.row_groups = row_groups_kernel(p.format, plan.rows, max_groups, tuning);
  if (plan.row_groups) {
    plan.row_tile = kRowGroupsRows;
    plan.row_tiles = (plan.rows + kRowGroupsRows - 1) / kRowGroupsRows;
  }
  // Occupancy of 16-row tiles: 3 CTAs per SM (2 pipeline stages, registers capped) when the
  // grid is more than one wave of 2 per SM; a single wave keeps the deeper pipeline. H200,
  // queued us: GLM-5 TP8 T=128 fp8 110.3 -> 104.6, bf16 114.6 -> 105.1; with 3 CTAs per SM
  // at T=1 (one wave): fp8 H=64 38.9 -> 42.2. Dense decode of <= 16 rows keeps 2 (DeepSeek-V3
  // TP8, context 4096, B = 128, 1024 / 2048-token splits: 182.3 / 166.9 us at 2, 204.2 / 172.1
  // at 3; context 32 768, B = 32, 1024: 351.3 against 355.7).
  const int64_t grid_ctas = static_cast<int64_t>(p.groups) * plan.row_tiles * plan.nsplit;
  const bool row_tiles16 = plan.row_tile == 16 && !plan.few_heads && !plan.row_groups;
  const bool decode_one_tile = p.decode && plan.rows <= 16;
  plan.ctas_per_sm =
      row_tiles16 && !decode_one_tile && three_fit && grid_ctas > 2 * static_cast<int64_t>(sm_count) ? 3 : 2;
  if (tuning.ctas != 0) plan.ctas_per_sm = row_tiles16 ? tuning.ctas : 2;  // test hook
  if (plan.row_groups) plan.ctas_per_sm = 1;
  // Row groups: a call whose split CTAs would overflow one wave runs consecutive splits in one
  // CTA (the fewest per CTA that fit one wave, else all of a group's), so a full batch needs no
  // second wave while a small call keeps a CTA per split; the arithmetic is the split's either
  // way (docs/kernels/sparse_mla.md, "Row groups"). Sparse only: a dense-decode request's splits
  // follow its own length.
  if (plan.row_groups && !p.decode && plan.nsplit > 1) {
    const int64_t per_split = static_cast<int64_t>(p.groups) * plan.row_tiles;
    int cpc = 1;
    while (cpc < plan.nsplit && per_split * ((plan.nsplit + cpc - 1) / cpc) > sm_count) ++cpc;
    plan.chunks_per_cta = cpc;
  }
  // Far below one wave, a lone CTA per SM runs a chain of dependent phases per KV tile; two
  // CTAs per (group, row tile, split), each writing half of the output dims, halve its PV
  // phase (both compute every score) when the doubled grid still has one CTA per SM or fewer.
  const bool can_split_dims = row_tiles16 && plan.ctas_per_sm == 2;
  plan.dim_split = can_split_dims && 2 * grid_ctas <= static_cast<int64_t>(sm_count) ? 2 : 1;
  if (tuning.dim_split != 0) plan.dim_split = can_split_dims ? tuning.dim_split : 1;  // test hook
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
  const int64_t per_group_ctas = static_cast<int64_t>(plan.row_tiles) * plan.split_ctas();
  plan.slab = std::max<int64_t>(1, std::min(plan.slab, max_grid / per_group_ctas));
  return plan;
}

void launch_mla(const MlaParams& p, const MlaPlan& plan, void* workspace, cudaStream_t stream,
                int device) {
  if (p.groups <= 0) return;
  const bool fp8 = p.format == CacheFormat::fp8_ds_mla;
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
      const std::size_t lse_off = align_up(nparts * 1024, 256);
      la.part_lse = reinterpret_cast<float*>(base + lse_off);
      const std::size_t cnt_off = lse_off + align_up(nparts * 4, 256);
      la.counters = reinterpret_cast<int*>(base + cnt_off);
      const std::size_t ncnt = static_cast<std::size_t>(n) * plan.row_tiles;
      LATTE_CUDA_TRY(cudaMemsetAsync(la.counters, 0, ncnt * sizeof(int), stream));
    }
    la.chunks_per_cta = plan.chunks_per_cta;
    const int64_t grid = n * plan.row_tiles * plan.split_ctas();
    const FwdConfig config{plan.row_tile, plan.warps, plan.ctas_per_sm, plan.dim_split, p.decode};
    if (plan.few_heads) {
      launch_sparse_fp8_fewheads(device, grid, p, la, stream);
    } else if (plan.row_groups) {
      launch_bf16_rowgroups(device, grid, p, la, stream);
    } else if (fp8) {
      (p.rope ? launch_fwd_fp8 : launch_fwd_fp8_nope)(device, config, grid, p, la, stream);
    } else {
      (p.rope ? launch_fwd_bf16 : launch_fwd_bf16_nope)(device, config, grid, p, la, stream);
    }
  }
}

}  // namespace latte::cuda_sparse_mla
