// Host side of cuda.sparse_mla: the split rule, the launch plan (row tile, splits, slabs) and
// the launch sequence (counter reset + forward kernel, which combines splits itself).
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

std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

// Per group: `nparts` bf16 partial rows of 512 and their lse per row, one counter per row
// tile (16 rows: the most). Nothing when every CTA writes the output itself.
std::size_t part_bytes(int rows, int nparts) {
  if (nparts <= 1) return 0;
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(nparts);
  const std::size_t tiles = static_cast<std::size_t>((rows + 15) / 16);
  return align_up(n * 1024, 256) + align_up(n * 4, 256) + align_up(tiles * 4, 256);
}

// Sparse: KV tokens per block (a block is folded by one CTA when the call is large enough).
constexpr int kBlockTokens = 1024;

// How a group's list is cut: math chunks and blocks. Depends on the op, the rows per group,
// the list length (topk, or for decode the longest request) and the tuning hooks only.
struct Cut {
  int chunk = 0, chunks = 1, block = 1, blocks = 1;
};
Cut cut_for(bool decode, int rows, int64_t items, const Tuning& tuning) {
  Cut c;
  c.chunk = chunk_tokens(decode, rows, tuning);
  c.chunks = static_cast<int>(std::max<int64_t>(1, (items + c.chunk - 1) / c.chunk));
  if (decode) {
    c.block = 1;
  } else {
    const int bt = tuning.block > 0 ? tuning.block : kBlockTokens;
    c.block = std::max(1, bt / c.chunk);
  }
  c.block = std::min(c.block, c.chunks);
  c.blocks = (c.chunks + c.block - 1) / c.block;
  return c;
}

// CTAs one wave holds (2 per SM).
int64_t wave_ctas(int sm_count) { return 2 * static_cast<int64_t>(std::max(1, sm_count)); }

// Largest chunks-per-CTA below a block (a proper divisor of it); 0 when the block is 1 chunk.
int largest_leaf_cta_chunks(int block) {
  for (int c = block / 2; c >= 1; --c)
    if (block % c == 0) return c;
  return 0;
}

}  // namespace

std::size_t fwd_smem_bytes(bool fp8, int row_tile) {
  if (fp8) return row_tile == 16 ? KCfg<true, 16>::SMEM : KCfg<true, 32>::SMEM;
  return row_tile == 16 ? KCfg<false, 16>::SMEM : KCfg<false, 32>::SMEM;
}

std::size_t smem_bytes(KvFormat format, int row_tile) {
  return fwd_smem_bytes(format == KvFormat::fp8_ds_mla, row_tile);
}

Tuning tuning_from_env() {
  Tuning t;
  // LATTE_CUDA_SPARSE_MLA_CHUNK=<multiple of 32> overrides the split size (it changes every
  // group's split the same way, so results stay batch invariant).
  if (const char* env = std::getenv("LATTE_CUDA_SPARSE_MLA_CHUNK")) {
    const int c = std::atoi(env);
    if (c >= 32 && c % 32 == 0) t.chunk = c;
  }
  // LATTE_CUDA_SPARSE_MLA_BLOCK=<tokens, a multiple of the chunk> overrides the block (changes
  // result bits the same way for every group).
  if (const char* env = std::getenv("LATTE_CUDA_SPARSE_MLA_BLOCK")) {
    const int c = std::atoi(env);
    if (c >= 32) t.block = c;
  }
  // LATTE_CUDA_SPARSE_MLA_CTA_CHUNKS=<n> forces the chunks per CTA (a divisor of the block; a
  // larger value or a non-divisor means the whole block). Never changes a result bit.
  if (const char* env = std::getenv("LATTE_CUDA_SPARSE_MLA_CTA_CHUNKS")) {
    const int c = std::atoi(env);
    if (c >= 1) t.cta_chunks = c;
  }
  // LATTE_CUDA_SPARSE_MLA_ROW_TILE=16|32 forces the row tile (results are bitwise the same
  // either way; the tests use it to cover both paths on small problems).
  if (const char* env = std::getenv("LATTE_CUDA_SPARSE_MLA_ROW_TILE")) {
    const int v = std::atoi(env);
    if (v == 16 || v == 32) t.row_tile = v;
  }
  // LATTE_CUDA_SPARSE_MLA_WARPS=4|8 (bitwise the same result either way).
  if (const char* env = std::getenv("LATTE_CUDA_SPARSE_MLA_WARPS")) {
    const int v = std::atoi(env);
    if (v == 4 || v == 8) t.warps = v;
  }
  return t;
}

// KV tokens per math chunk. A function of the op and the rows per group only: every group
// of a call (and of any other call with the same heads) is cut the same way. Sparse: 128
// (small calls get many CTAs; large calls fold 8 chunks per CTA). Decode keeps its coarse
// split (one chunk per CTA, blocks of one chunk).
int chunk_tokens(bool decode, int rows, const Tuning& tuning) {
  if (tuning.chunk > 0) return tuning.chunk;
  if (decode) return rows <= 16 ? 1024 : 2048;
  return 128;
}

std::size_t workspace_bytes_for(bool decode, KvFormat /*format*/, int rows, int topk_or_len,
                                int64_t max_groups, int sm_count, const Tuning& tuning) {
  const Cut c = cut_for(decode, rows, topk_or_len, tuning);
  const int64_t groups = std::max<int64_t>(1, max_groups);
  // one CTA per block: the block results
  const std::size_t fold_per = part_bytes(rows, c.blocks);
  // calls small enough for several CTAs per block (make_plan: at most one wave of CTAs with
  // at least ceil(chunks / largest proper divisor of the block) CTAs per row tile): a slot
  // per chunk
  std::size_t leaf_per = 0;
  int64_t leaf_groups = 0;
  if (const int cmax = largest_leaf_cta_chunks(c.block); cmax > 0) {
    leaf_per = part_bytes(rows, c.chunks);
    const int64_t per_group_ctas =
        static_cast<int64_t>((rows + 15) / 16) * ((c.chunks + cmax - 1) / cmax);
    leaf_groups = std::min(groups, std::max<int64_t>(1, wave_ctas(sm_count) / per_group_ctas));
  }
  const std::size_t want = std::max(fold_per * static_cast<std::size_t>(groups),
                                    leaf_per * static_cast<std::size_t>(leaf_groups));
  if (want == 0) return 0;
  constexpr std::size_t kCap = std::size_t{256} << 20;
  return std::max(std::max(fold_per, leaf_per), std::min(want, kCap));
}

MlaPlan make_plan(const MlaParams& p, int sm_count, std::size_t workspace_bytes,
                  const Tuning& tuning) {
  MlaPlan plan;
  plan.rows = p.s_q * p.heads;
  plan.warps = tuning.warps;
  const int64_t items = p.decode ? static_cast<int64_t>(p.max_blocks) * p.block_size : p.topk;
  const Cut cut = cut_for(p.decode, plan.rows, items, tuning);
  plan.chunk = cut.chunk;
  plan.chunks = cut.chunks;
  plan.block = cut.block;
  const int64_t groups = std::max<int64_t>(1, p.groups);
  const int64_t fill = wave_ctas(sm_count);
  const int64_t rt16 = (plan.rows + 15) / 16;
  auto slots = [&](int cpc) { return cpc == cut.block ? cut.blocks : cut.chunks; };
  // Chunks per CTA: the fewest (most CTAs) that still fit in one wave; a call too large for
  // that gives each CTA a whole block (no leaf partials, the block folded in registers).
  int cpc = cut.block;
  if (tuning.cta_chunks > 0) {
    if (tuning.cta_chunks < cut.block && cut.block % tuning.cta_chunks == 0) cpc = tuning.cta_chunks;
  } else {
    for (int c = 1; c < cut.block; ++c) {
      if (cut.block % c != 0) continue;
      if (groups * rt16 * ((cut.chunks + c - 1) / c) <= fill) {
        cpc = c;
        break;
      }
    }
    // chunk slots for the whole call must fit the workspace (else: fold, fewer slots)
    if (cpc != cut.block &&
        part_bytes(plan.rows, slots(cpc)) * static_cast<std::size_t>(groups) > workspace_bytes)
      cpc = cut.block;
  }
  plan.cta_chunks = cpc;
  plan.nsplit = (cut.chunks + cpc - 1) / cpc;
  const bool fold = cpc == cut.block && cut.block > 1;
  const int nparts = slots(cpc);
  plan.parts = nparts > 1 ? nparts : 0;
  // Row tile: 32 rows reuse each gathered tile twice as often; 16 gives twice the CTAs when a
  // call is too small to fill the device, and is the only tile that folds (registers). Either
  // gives bitwise the same rows.
  plan.row_tile = plan.rows <= 16 ? 16 : 32;
  if (plan.row_tile == 32) {
    const int64_t ctas = groups * ((plan.rows + 31) / 32) * plan.nsplit;
    if (fold || ctas < fill) plan.row_tile = 16;
  }
  // Test hook (Tuning::row_tile): force the row tile (a folding CTA keeps 16).
  if (tuning.row_tile == 16 || (tuning.row_tile == 32 && plan.rows > 16 && !fold)) {
    plan.row_tile = tuning.row_tile;
  }
  plan.row_tiles = (plan.rows + plan.row_tile - 1) / plan.row_tile;
  plan.part_bytes_per_group = part_bytes(plan.rows, plan.parts);
  if (plan.part_bytes_per_group > 0) {
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

void launch_mla(const MlaParams& p, const MlaPlan& plan, void* workspace, cudaStream_t stream,
                int device) {
  if (p.groups <= 0) return;
  const bool fp8 = p.format == KvFormat::fp8_ds_mla;
  for (int64_t g0 = 0; g0 < p.groups; g0 += plan.slab) {
    const int64_t n = std::min<int64_t>(plan.slab, p.groups - g0);
    LaunchArgs la{};
    la.row_tiles = plan.row_tiles;
    la.nsplit = plan.nsplit;
    la.chunk = plan.chunk;
    la.cta_chunks = plan.cta_chunks;
    la.block = plan.block;
    la.nparts = std::max(1, plan.parts);
    la.group_begin = g0;
    if (plan.part_bytes_per_group > 0) {
      const std::size_t nparts = static_cast<std::size_t>(n) * plan.rows * plan.parts;
      auto* base = static_cast<uint8_t*>(workspace);
      la.part_o = reinterpret_cast<__nv_bfloat16*>(base);
      const std::size_t lse_off = align_up(nparts * 1024, 256);
      la.part_lse = reinterpret_cast<float*>(base + lse_off);
      const std::size_t cnt_off = lse_off + align_up(nparts * 4, 256);
      la.counters = reinterpret_cast<int*>(base + cnt_off);
      const std::size_t ncnt = static_cast<std::size_t>(n) * plan.row_tiles;
      LATTE_CUDA_TRY(cudaMemsetAsync(la.counters, 0, ncnt * sizeof(int), stream));
    }
    const int64_t grid = n * plan.row_tiles * plan.nsplit;
    if (fp8) {
      launch_fwd_fp8(device, plan.row_tile, plan.warps, p.decode, grid, p, la, stream);
    } else {
      launch_fwd_bf16(device, plan.row_tile, plan.warps, p.decode, grid, p, la, stream);
    }
  }
}

}  // namespace latte::cuda_sparse_mla
