// Sparse MLA and dense paged MLA decode over the bf16 cache for many heads (GLM-5 and Kimi-K2 at
// TP1: 64, DeepSeek-V3 / V3.2: 128): warp pairs own whole 16-row groups, so a KV tile needs one
// block barrier and one barrier per warp pair, and Q stays in registers for the whole CTA.
// sm_80 ... sm_120 (mma.sync, ldmatrix, cp.async; 90 KB of shared memory). Design notes: docs/kernels/sparse_mla.md, "Row groups".
//
// One CTA = 8 warps = 64 rows of one group (a query token's heads; decode: a request's (query,
// head) pairs) x one split of its token list, or several consecutive splits one after another
// when a call's split CTAs would overflow one wave (LaunchArgs::chunks_per_cta), in tiles
// of 32 tokens (cp.async into 2 stages of 32 x 1152 bytes: the tile being computed and the next;
// 16-byte chunks XOR-swizzled by the token so that ldmatrix reads 8 tokens without bank
// conflicts). Warp w = (row group rg = w / 2, half dh = w % 2). Per tile:
//   QK  S_part[16 rows x 32 tokens] over dims [288 dh, 288 dh + 288) (18 k16 steps), Q as A
//       fragments held in registers (72), the tokens the B operand (ldmatrix). The two warps of
//       a row group exchange their partials through shared memory (a 64-thread barrier) and both
//       hold S = S_0 + S_1 (the same bits in both: addition commutes).
//   SM  the online softmax of the group's rows in the log2 domain with lazy rescaling (the
//       reference max moves only when a tile's max exceeds it by more than 8), computed
//       identically by both warps; P goes from the S accumulators straight into the A fragments
//       of PV (no shared memory).
//   PV  O[16 rows x 256 dims (half dh)] += P V, V by ldmatrix.trans (128 f32 accumulators).
// A row group past the call's heads computes on zero Q and writes nothing (the default rule uses
// the kernel only when the heads fill whole CTAs; with warps skipping the math, racecheck
// reported hazards between the gather and the PV reads). Every sum has a fixed order and
// nothing depends on the other tokens of the call: bitwise deterministic and batch invariant
// (the kernel is chosen by format, rows and the kernel's size only, mla_plan_launch.cu).
// The fp8_ds_mla cache keeps the row-tile kernel: widening each tile into a bf16 copy here
// measured slower and rounds K to bf16 (docs/kernels/sparse_mla.md).
// ROPE = false (sparse rope_dim 0): 1024-byte rows, each warp's QK half 256 dims (16 k16 steps,
// 64 Q registers). topk_lens: a token's list ends at its own length; splits past it exit at once.
#include <cuda_bf16.h>

#include <atomic>
#include <cstdint>

#include "kernels/sparse_mla/smxx/mla_fwd_dispatch.hpp"
#include "kernels/sparse_mla/smxx/mla_kv_slots.cuh"
#include "kernels/sparse_mla/smxx/mla_split_combine.cuh"
#include "kernels/common/cp_async.cuh"
#include "kernels/common/cuda_check.cuh"
#include "kernels/common/mma_sync.cuh"
#include "kernels/common/ldmatrix.cuh"
#include "kernels/common/smem_limit.hpp"

namespace latte::cuda_sparse_mla {
namespace {

template <bool ROPE>
struct RowGroupsCfg {
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int R = kRowGroupsRows;  // rows per CTA: 4 groups of 16
  static constexpr int BN = 32;             // tokens per tile
  static constexpr int ROWB = ROPE ? 1152 : 1024;  // bytes per token: 576 bf16 (512 without rope)
  static constexpr int CHUNKS = ROWB / 16;  // 16-byte chunks per token
  static constexpr int NSTAGE = 2;
  static constexpr int HALF = ROWB / 4;     // dims of a warp's QK half: 288 (256 without rope)
  static constexpr int KSTEPS = HALF / 16;  // its k16 steps: 18 (16)
  static constexpr int ST_OFF = 0;
  static constexpr int X_OFF = ST_OFF + NSTAGE * BN * ROWB;
  static constexpr int VALID_OFF = X_OFF + kWarps * 4 * 32 * 16;  // [stage][token] int
  static constexpr int FLAG_OFF = VALID_OFF + NSTAGE * BN * 4;
  static constexpr int SMEM = FLAG_OFF + 16;
  static_assert(SMEM <= 101376, "shared memory over the sm_86/sm_89/sm_120 limit");
  static_assert(X_OFF % 16 == 0 && VALID_OFF % 16 == 0, "alignment");
};

// Byte offset of 16-byte chunk j of token t inside a stage: chunks XOR-swizzled by t within
// each group of 8 (128 bytes), so 8 consecutive tokens' chunk j sit in 8 different bank groups.
// The swizzle changes only the low 3 bits of j, so chunk_at(t, j + 8 q) = chunk_at(t, j) + 128 q
// and chunk_at(t + 16, j) = chunk_at(t, j) + 16 ROWB: a lane's ldmatrix and cp.async addresses are
// a few bases computed once plus immediates (recomputing each swizzle cost 3 instructions per
// ldmatrix).
template <int ROWB>
__device__ __forceinline__ uint32_t chunk_at(int t, int j) {
  return static_cast<uint32_t>(t * ROWB + 16 * ((j & ~7) | ((j ^ t) & 7)));
}

// The barrier of row group rg's two warps (ids 1-4; 0 is __syncthreads).
__device__ __forceinline__ void pair_barrier(int rg) { asm volatile("bar.sync %0, 64;\n" ::"r"(1 + rg) : "memory"); }

// DECODE: dense paged decode (mla_decode): group = request, rows = (query i, head h) pairs
// i * heads + h, the token list the request's positions 0 .. seq_len - 1 through its block table,
// row (i, h) seeing positions up to seq_len - s_q + i. Else sparse: rows = heads, the token list
// the group's slot indices. ROPE = false: sparse rows without rope (512 dims).
template <bool DECODE, bool ROPE>
__global__ void __launch_bounds__(RowGroupsCfg<ROPE>::kThreads, 1)
    mla_bf16_rowgroups_kernel(const MlaParams p, const LaunchArgs la) {
  static_assert(ROPE || !DECODE, "dense decode has rope only");
  using C = RowGroupsCfg<ROPE>;
  using namespace latte::cuda::sm80;
  using latte::cuda::mma_bf16_m16n8k16;
  constexpr int BN = C::BN, NSTAGE = C::NSTAGE, KSTEPS = C::KSTEPS;
  constexpr float kLazyRescale = 8.f;

  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* const sST = smem + C::ST_OFF;
  float4* const sX = reinterpret_cast<float4*>(smem + C::X_OFF);
  int* const sValid = reinterpret_cast<int*>(smem + C::VALID_OFF);
  int* const sFlag = reinterpret_cast<int*>(smem + C::FLAG_OFF);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, c = lane & 3;
  const int rg = warp >> 1, dh = warp & 1;

  int64_t bid = blockIdx.x;
  // la.nsplit splits (chunks of la.chunk tokens) per group, la.chunks_per_cta consecutive ones per
  // CTA: each chunk's partial is written and combined the same way whoever runs it
  const int cpc = la.chunks_per_cta;
  const int ctas = (la.nsplit + cpc - 1) / cpc;
  const int part = static_cast<int>(bid % ctas);
  bid /= ctas;
  const int rt = static_cast<int>(bid % la.row_tiles);
  const int64_t g_local = bid / la.row_tiles;
  const int64_t grp = la.group_begin + g_local;
  const int rows = p.s_q * p.heads;  // sparse: s_q = 1
  const int row0 = rt * C::R;
  int n_items;
  int nsplit_g;
  if constexpr (DECODE) {
    n_items = decode_seq_len(p, grp);
    nsplit_g = list_nsplit(n_items, la.chunk);
  } else {
    n_items = sparse_list_len(p, grp);  // topk, or the row's own length (topk_lens)
    nsplit_g = sparse_nsplit(p, n_items, la.chunk, la.nsplit);
  }
  const int ctas_g = (nsplit_g + cpc - 1) / cpc;
  if (part >= ctas_g) return;  // the whole block leaves together
  const int split_end = min(nsplit_g, (part + 1) * cpc);
  const int64_t num_slots = p.num_blocks * static_cast<int64_t>(p.block_size);
  const int bs_mask = p.block_size - 1;
  const int bs_shift = (p.block_size & bs_mask) == 0 ? __ffs(p.block_size) - 1 : -1;
  const bool linear_slots = p.kv_sblock == static_cast<int64_t>(p.block_size) * p.kv_stok;

  // ---- Q as A fragments of rows 16 rg + (g, g + 8), dims HALF dh + 16 ks + (2c, 2c+1, 2c+8,
  // 2c+9); rows past the call's rows are zero. Loaded once, for every chunk of the CTA. ----
  // Row r = i * heads + h: query i, head h (sparse: i = 0).
  auto row_query = [&](int r) { return r / p.heads; };
  uint32_t qa[KSTEPS][4];
  {
    const int r0 = row0 + 16 * rg + g, r1 = r0 + 8;
    // Row r's latent dims from q, its rope dims (512..575) from q_rope (q + 512 unless the
    // query's rope part is a tensor of its own). A 16-dim step never straddles dim 512.
    struct QRow { const __nv_bfloat16* latent; const __nv_bfloat16* rope; };
    auto q_row = [&](int r) {
      const int i = r < rows ? row_query(r) : 0, h = r < rows ? r - i * p.heads : 0;
      return QRow{p.q + grp * p.q_sg + i * p.q_si + h * p.q_sh,
                  ROPE ? p.q_rope + grp * p.qr_sg + i * p.qr_si + h * p.qr_sh : nullptr};
    };
    auto q_pair = [](const QRow& q, int d) {  // dims d, d + 1
      return *reinterpret_cast<const uint32_t*>(d < 512 ? q.latent + d : q.rope + (d - 512));
    };
    const QRow q0 = q_row(r0), q1 = q_row(r1);
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      const int d = C::HALF * dh + 16 * ks + 2 * c;
      qa[ks][0] = r0 < rows ? q_pair(q0, d) : 0u;
      qa[ks][1] = r1 < rows ? q_pair(q1, d) : 0u;
      qa[ks][2] = r0 < rows ? q_pair(q0, d + 8) : 0u;
      qa[ks][3] = r1 < rows ? q_pair(q1, d + 8) : 0u;
    }
  }
  // decode: the last position rows g and g + 8 see (causal among the request's s_q queries)
  int vis_lim[2] = {0x7fffffff, 0x7fffffff};
  if constexpr (DECODE) {
    const int window_end = decode_window_end(p, grp);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 16 * rg + g + 8 * r;
      vis_lim[r] = window_end - p.s_q + (row < rows ? row_query(row) : 0);
    }
  }
  // Softmax state of rows g, g + 8 (the same in the quad and in both warps of the pair), reset per
  // chunk.
  float m_ref[2];
  float l_part[2];  // this lane's tokens only; reduced over the quad at the end
  const float scale_log2 = p.scale * 1.4426950408889634f;
  float O[32][4];  // n tile n: dims 256 dh + 8n + (2c, 2c+1); rows g (0, 1) and g + 8 (2, 3)
  // ldmatrix lane addresses (bytes inside a stage, before the chunk index):
  // QK (non-transposed): matrices (tokens 0-7, chunk j), (0-7, j+1), (8-15, j), (8-15, j+1)
  const int qk_tok = (lane & 7) + ((lane >> 4) << 3), qk_dj = (lane >> 3) & 1;
  // PV (transposed): matrices (tokens 0-7, chunk j), (8-15, j), (0-7, j+1), (8-15, j+1)
  const int pv_tok = (lane & 7) + (((lane >> 3) & 1) << 3), pv_dj = lane >> 4;
  // k16 step ks = 4 q + m of QK reads chunk 2 KSTEPS dh + 2 ks + qk_dj: qk_at[m] + 128 q; PV's dims
  // 16 np, np = 4 q + m, chunk 32 dh + 2 np + pv_dj: pv_at[m] + 128 q
  uint32_t qk_at[4], pv_at[4];
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    qk_at[m] = chunk_at<C::ROWB>(qk_tok, 2 * KSTEPS * dh + 2 * m + qk_dj);
    pv_at[m] = chunk_at<C::ROWB>(pv_tok, 32 * dh + 2 * m + pv_dj);
  }

  const bool direct = nsplit_g == 1;
  for (int split = part * cpc; split < split_end; ++split) {
    const int k_begin = split * la.chunk;
    const int k_end = min(n_items, k_begin + la.chunk);
    const int n_tiles = k_end > k_begin ? (k_end - k_begin + BN - 1) / BN : 0;
    // ---- gather: thread (token tt = tid / 8, sub = tid % 8) copies chunks sub + 8 i of its token's
    // row, so each copy instruction reads 128 contiguous bytes of four rows. Every thread of a
    // token fetches the token's slot index one tile ahead. ----
    const int tt = tid >> 3, sub = tid & 7;
    const int32_t* const idx_thread = DECODE ? nullptr : p.indices + grp * p.idx_s + k_begin + tt;
    // sparse: the token's slot; decode: the block of its position
    auto fetch_index = [&](int tile) -> int {
      const int k = k_begin + tile * BN + tt;
      if (tile >= n_tiles || k >= k_end) return -1;
      if constexpr (DECODE) {
        return p.block_table[grp * p.bt_s + (bs_shift >= 0 ? (k >> bs_shift) : k / p.block_size)];
      } else {
        return idx_thread[tile * BN];
      }
    };
    auto issue_tile = [&](int tile, int stage, int raw) {
      const int k = k_begin + tile * BN + tt;
      bool valid;
      int64_t row_off;
      if constexpr (DECODE) {
        valid = k < k_end && raw >= 0 && raw < p.num_blocks;
        row_off = valid ? raw * p.kv_sblock + (bs_shift >= 0 ? (k & bs_mask) : k % p.block_size) * p.kv_stok : 0;
      } else {
        valid = k < k_end && raw >= 0 && raw < num_slots;
        row_off = valid ? slot_row_offset(p, raw, linear_slots, bs_shift, bs_mask) : 0;
      }
      const uint8_t* const src = p.kv + row_off + 16 * sub;
      const uint32_t dst = cuda::smem_addr(sST) + stage * BN * C::ROWB + chunk_at<C::ROWB>(tt, sub);
#pragma unroll
      for (int i = 0; i < C::CHUNKS / 8; ++i) cuda::cp_async_16_s(dst + 128 * i, src + 128 * i, valid);  // chunk sub + 8 i
      if (sub == 0) sValid[stage * BN + tt] = valid ? 1 : 0;
    };
    const int raw0 = fetch_index(0);
    int raw_next = fetch_index(1);
    if (n_tiles > 0) issue_tile(0, 0, raw0);
    cuda::cp_async_commit();
    m_ref[0] = m_ref[1] = -INFINITY;
    l_part[0] = l_part[1] = 0.f;
#pragma unroll
    for (int n = 0; n < 32; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) O[n][e] = 0.f;
    for (int j = 0; j < n_tiles; ++j) {
      cuda::cp_async_wait<0>();
      __syncthreads();  // tile j landed; every warp is done with tile j-1 (its stage, partials)
      if (j + 1 < n_tiles) issue_tile(j + 1, (j + 1) % NSTAGE, raw_next);
      cuda::cp_async_commit();
      raw_next = fetch_index(j + 2);
      const int stage = j % NSTAGE;
      const uint32_t st_u32 = cuda::smem_addr(sST) + stage * BN * C::ROWB;

      // ---------------- QK: this half's partial S ----------------
      float acc[4][4];
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[n][e] = 0.f;
#pragma unroll
      for (int ks = 0; ks < KSTEPS; ++ks) {
#pragma unroll
        for (int n2 = 0; n2 < 2; ++n2) {  // tokens 16 n2 .. 16 n2 + 15, dims HALF dh + 16 ks (+8)
          uint32_t b[4];
          ldmatrix_x4(b, st_u32 + qk_at[ks & 3] + 128 * (ks >> 2) + 16 * n2 * C::ROWB);
          mma_bf16_m16n8k16(acc[2 * n2], qa[ks], b[0], b[1]);
          mma_bf16_m16n8k16(acc[2 * n2 + 1], qa[ks], b[2], b[3]);
        }
      }
      // ---------------- exchange with the other half ----------------
#pragma unroll
      for (int n = 0; n < 4; ++n) sX[(warp * 4 + n) * 32 + lane] = make_float4(acc[n][0], acc[n][1], acc[n][2], acc[n][3]);
      pair_barrier(rg);
      float x[4][4];  // log2 units; -inf where the slot is invalid
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        const float4 o = sX[((warp ^ 1) * 4 + n) * 32 + lane];
        const int2 ok = *reinterpret_cast<const int2*>(sValid + stage * BN + 8 * n + 2 * c);
        bool v[4] = {ok.x != 0, ok.y != 0, ok.x != 0, ok.y != 0};  // (row g | g + 8) x (token, token + 1)
        if constexpr (DECODE) {
          const int pos = k_begin + j * BN + 8 * n + 2 * c;
#pragma unroll
          for (int e = 0; e < 4; ++e) v[e] = v[e] && pos + (e & 1) <= vis_lim[e >> 1];
        }
        x[n][0] = v[0] ? (acc[n][0] + o.x) * scale_log2 : -INFINITY;
        x[n][1] = v[1] ? (acc[n][1] + o.y) * scale_log2 : -INFINITY;
        x[n][2] = v[2] ? (acc[n][2] + o.z) * scale_log2 : -INFINITY;
        x[n][3] = v[3] ? (acc[n][3] + o.w) * scale_log2 : -INFINITY;
      }

      // ---------------- online softmax, lazy rescaling ----------------
      float mx[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(fmaxf(fmaxf(x[0][2 * r], x[0][2 * r + 1]), fmaxf(x[1][2 * r], x[1][2 * r + 1])),
                      fmaxf(fmaxf(x[2][2 * r], x[2][2 * r + 1]), fmaxf(x[3][2 * r], x[3][2 * r + 1])));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      }
      float alpha[2] = {1.f, 1.f};
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (mx[r] > m_ref[r] + kLazyRescale) {
          alpha[r] = fast_exp2(m_ref[r] - mx[r]);  // 0 when the reference was -inf
          m_ref[r] = mx[r];
          l_part[r] *= alpha[r];
        }
      }
      if (!__all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f)) {
#pragma unroll
        for (int n = 0; n < 32; ++n) {
          O[n][0] *= alpha[0];
          O[n][1] *= alpha[0];
          O[n][2] *= alpha[1];
          O[n][3] *= alpha[1];
        }
      }
      const float mu[2] = {m_ref[0] == -INFINITY ? 0.f : m_ref[0], m_ref[1] == -INFINITY ? 0.f : m_ref[1]};
      uint32_t pa[2][4];  // P as the A fragments of tokens 16 kk .. 16 kk + 15
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        const float p0 = fast_exp2(x[n][0] - mu[0]), p1 = fast_exp2(x[n][1] - mu[0]);
        const float p2 = fast_exp2(x[n][2] - mu[1]), p3 = fast_exp2(x[n][3] - mu[1]);
        l_part[0] += p0 + p1;
        l_part[1] += p2 + p3;
        pa[n >> 1][2 * (n & 1)] = pack_bf16x2(p0, p1);
        pa[n >> 1][2 * (n & 1) + 1] = pack_bf16x2(p2, p3);
      }

      // ---------------- PV: O[16 rows x 256 dims] += P V ----------------
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
#pragma unroll
        for (int np = 0; np < 16; ++np) {  // dims 256 dh + 16 np .. + 15
          uint32_t b[4];
          ldmatrix_x4_trans(b, st_u32 + pv_at[np & 3] + 128 * (np >> 2) + 16 * kk * C::ROWB);
          mma_bf16_m16n8k16(O[2 * np], pa[kk], b[0], b[1]);
          mma_bf16_m16n8k16(O[2 * np + 1], pa[kk], b[2], b[3]);
        }
      }
    }
    cuda::cp_async_wait<0>();

    // ---------------- epilogue ----------------
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l_part[r] += __shfl_xor_sync(0xffffffffu, l_part[r], 1);
      l_part[r] += __shfl_xor_sync(0xffffffffu, l_part[r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 16 * rg + g + 8 * r;
      if (row >= rows) continue;
      const int i = row_query(row), h = row - i * p.heads;
      const float l = l_part[r];
      const float inv = l > 0.f ? 1.f / l : 0.f;
      __nv_bfloat16* const dst = direct ? p.out + grp * p.o_sg + i * p.o_si + h * p.o_sh
                                        : la.part_o + ((g_local * rows + row) * la.nsplit + split) * 512;
#pragma unroll
      for (int n = 0; n < 32; ++n) {
        const int d = 256 * dh + 8 * n + 2 * c;
        *reinterpret_cast<uint32_t*>(dst + d) = pack_bf16x2(O[n][2 * r] * inv, O[n][2 * r + 1] * inv);
      }
      if (dh == 0 && c == 0) {
        const float lse2 = l > 0.f ? m_ref[r] + __log2f(l) : -INFINITY;
        if (direct) {
          if (p.lse != nullptr) p.lse[grp * p.l_sg + i * p.l_si + h * p.l_sh] = lse2 * 0.6931471805599453f;
        } else {
          la.part_lse[(g_local * rows + row) * la.nsplit + split] = lse2;
        }
      }
    }
    __syncthreads();  // every warp is done with the stages before the next chunk's gather
  }
  if (direct) return;
  if (ctas_g > 1 && !last_to_arrive(la.counters + g_local * la.row_tiles + rt, ctas_g, sFlag)) return;
  // ctas_g == 1: this CTA wrote every partial (the barrier above makes them visible to it)
  combine_splits<C::kWarps, C::R / C::kWarps, false>(p, la, g_local, grp, row0, rows, nsplit_g);
}

template <bool DECODE, bool ROPE>
void launch_rowgroups(int device, int64_t grid, const MlaParams& p, const LaunchArgs& la, cudaStream_t stream) {
  using C = RowGroupsCfg<ROPE>;
  auto* kernel = &mla_bf16_rowgroups_kernel<DECODE, ROPE>;
  static std::atomic<uint64_t> done{0};
  cuda::allow_dynamic_smem(kernel, C::SMEM, device, done);
  kernel<<<static_cast<unsigned>(grid), C::kThreads, C::SMEM, stream>>>(p, la);
  LATTE_CUDA_CHECK_LAUNCH(DECODE ? "mla_bf16_rowgroups_kernel<decode>" : "mla_bf16_rowgroups_kernel<sparse>");
}

}  // namespace

// The configuration with rope (the larger one).
std::size_t bf16_rowgroups_smem_bytes() { return RowGroupsCfg<true>::SMEM; }

void launch_bf16_rowgroups(int device, int64_t grid, const MlaParams& p, const LaunchArgs& la, cudaStream_t stream) {
  if (p.decode) {
    launch_rowgroups<true, true>(device, grid, p, la, stream);
  } else if (p.rope) {
    launch_rowgroups<false, true>(device, grid, p, la, stream);
  } else {
    launch_rowgroups<false, false>(device, grid, p, la, stream);  // without rope: sparse only
  }
}

}  // namespace latte::cuda_sparse_mla
