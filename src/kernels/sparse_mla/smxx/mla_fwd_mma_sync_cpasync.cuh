// The cuda.sparse_mla forward kernel (sm_80 ... sm_120, mma.sync + ldmatrix + cp.async):
// sparse MLA over per-token slot lists and dense paged MLA decode, bf16 or fp8_ds_mla cache.
// Design notes: docs/kernels/sparse_mla.md. Included by one .cu file per cache format.
//
// One CTA = NW (4 or 8) warps = one group (query token / request) x one tile of R rows (heads,
// or (query, head) pairs in decode) x one split (chunk) of the group's KV tokens. Per KV tile
// of BN gathered tokens (cp.async, NSTAGE-deep ring, slot indices prefetched ahead (R = 16:
// by cp.async into a ring, NSTAGE-1 tiles before the gather; R = 32: one tile ahead),
// -1 / out-of-range slots zero-filled and masked):
//   QK  warp w = (kq = w % 4, nh = w / 4) computes a partial S[R x BN*4/NW] (its token part)
//       over its quarter of the 576 dims (latent group kq, 128 dims, plus rope dims
//       16kq..16kq+15) and stores it to shared memory;
//   SM  warp w owns rows [w*R/NW, (w+1)*R/NW): sums the 4 partials in a fixed order, masks,
//       runs the online softmax (log2 domain), writes P and the row rescale factor;
//   PV  warp w owns output dims [w*512/NW, (w+1)*512/NW) for all R rows: O = O*alpha + P V
//       (with the output-dim split, CTA part d owns [256d, 256d + 256) and its warps 256/NW each).
// Split groups: each split CTA writes its normalized partial (bf16) and lse to the workspace;
// the last CTA of a (group, row tile) to finish (a counter, not part of any sum) combines the
// splits in split order and discards the partials from L2 without writing them back.
// fp8_ds_mla: the KV tile stays e4m3 in shared memory (656 B / token); ldmatrix (plain for QK,
// .trans for PV, which pairs two tokens' bytes the way the B fragment wants them) reads the
// e4m3 bytes; bit moves widen them to bf16 (e4m3_bf16_bits.cuh, value * 2^-120), except QK's
// latent part on sm_89+, which uses the hardware e4m3 -> f16 conversion and f16 mma.sync. The
// per-token group scale is applied to the QK partial (warp w's latent dims are exactly group w)
// and folded into P for PV (warp w's output dims are group w); Q's latent part is stored times
// 2^(120-E_row) (bf16) or 2^(14-E_row) (f16), E_row the exponent of the row's largest |q|, so
// all products stay in range.
// No atomics; every reduction has a fixed order, so results are bitwise deterministic and do
// not depend on the row tile (16 or 32), the CTAs per SM, the output-dim split (DS: two CTAs
// per split, each writing half of the dims, for calls far below one wave) or on the other
// groups of the call.
// ROPE = false (sparse MLA without rope, rope_dim 0): the QK dot runs over the 512 latent dims
// only; the cache rows gathered are 1024 bytes (bf16) or the first 528 bytes of an fp8 row (512
// e4m3 + 4 f32 scales; bytes 528.. of a 656-byte row are never read), and Q has no rope part.
// topk_lens (sparse): a group's list ends at its own length; splits past it exit at once.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/sparse_mla/smxx/mla_kv_slots.cuh"
#include "kernels/sparse_mla/mla_params.hpp"
#include "kernels/sparse_mla/smxx/mla_split_combine.cuh"
#include "kernels/common/cp_async.cuh"
#include "kernels/common/e4m3_bf16_bits.cuh"
#include "kernels/common/mma_sync.cuh"
#include "kernels/common/ldmatrix.cuh"

namespace latte::cuda_sparse_mla {

inline constexpr int kQRowBytes = 576 * 2;  // one Q row in shared memory (bf16, swizzled)
inline constexpr int kPartBytes = 512 * 2 + 4;  // one split's partial row: bf16 O/l + f32 lse2

// CTAS: the CTAs per SM the configuration is built for (the launch bound, which caps the
// registers); 3 (16-row tiles only) also takes the pipeline to 2 stages so that three fit in
// the H200's 228 KB per SM. DS: the CTAs sharing one (group, row tile, split), each computing
// all scores but only 512 / DS of the output dims (a call too small to fill the device: the
// PV phase of each tile, on the critical path, is DS times shorter; no arithmetic changes).
// ROPE = false: rows without rope (1024 / 528 bytes per token in a stage; the Q rows keep their
// 1152-byte layout, the rope chunks unused), so the same stages take less shared memory.
template <bool FP8, int R, int NW = 8, int CTAS = 2, int DS = 1, bool ROPE = true>
struct KCfg {
  static_assert(CTAS == 2 || (CTAS == 3 && R == 16), "3 CTAs per SM: 16-row tiles only");
  static_assert(DS == 1 || DS == 2, "output dims split in one or two");
  static constexpr int kWarps = NW;                  // 4 or 8 warps per CTA
  static constexpr int kThreads = NW * 32;
  static constexpr int BN = FP8 ? 32 : 16;           // KV tokens per tile
  static constexpr int ROWB = FP8 ? (ROPE ? 656 : 528) : (ROPE ? 1152 : 1024);  // bytes per token in a stage
  static constexpr int NSTAGE = CTAS == 3 ? 2 : FP8 ? (R == 32 ? 2 : 3) : (R == 32 ? 3 : 4);
  static constexpr int PAD = (FP8 || R == 16) ? 8 : 0;
  static constexpr int PS = BN + PAD;                // partial / P row stride, floats
  static constexpr int MT = R / 16;                  // m16 tiles of rows
  static constexpr int NT = BN / 8;                  // n8 tiles of tokens
  static constexpr int Q_OFF = 0;
  static constexpr int ST_OFF = Q_OFF + R * kQRowBytes;
  static constexpr int PART_OFF = ST_OFF + NSTAGE * BN * ROWB;
  static constexpr int VALID_OFF = PART_OFF + 4 * R * PS * 4;
  static constexpr bool IDX_RING = R == 16;          // slot indices by cp.async (see kernel)
  static constexpr int IDX_OFF = VALID_OFF + NSTAGE * BN * 4;
  static constexpr int ALPHA_OFF = IDX_OFF + (IDX_RING ? NSTAGE * BN * 4 : 0);
  static constexpr int ROWM_OFF = ALPHA_OFF + R * 4;
  static constexpr int FINM_OFF = ROWM_OFF + R * 4;
  static constexpr int FINL_OFF = FINM_OFF + R * 4;
  static constexpr int FLAG_OFF = FINL_OFF + R * 4;
  static constexpr int SMEM = FLAG_OFF + 16;
  // softmax layout: each warp owns RW rows, LPR lanes per row, CPL columns per lane
  static constexpr int NTW = NT / (NW / 4);          // n8 tiles per QK warp
  static constexpr int DPC = 512 / DS;               // output dims per CTA
  static constexpr int DPW = DPC / NW;               // output dims per PV warp
  static_assert(!FP8 || DPW % 32 == 0, "fp8 PV: 32 dims per V load");
  static constexpr int NPV = DPW / 8;                // n8 tiles per PV warp
  static constexpr int RW = R / kWarps;
  static constexpr int LPR = 32 / RW;
  static constexpr int CPL = BN / LPR;
  static_assert(SMEM <= 101376, "shared memory over the sm_86/sm_89/sm_120 limit");
  static_assert(ST_OFF % 16 == 0 && PART_OFF % 16 == 0 && VALID_OFF % 16 == 0, "alignment");
  static_assert(CPL >= 1 && (CPL & (CPL - 1)) == 0, "softmax layout");
};

// Zero mma accumulator fragments [M][N][4] (registers once unrolled).
template <int M, int N>
__device__ __forceinline__ void zero_fragments(float (&f)[M][N][4]) {
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) f[m][n][e] = 0.f;
}

// Pairwise sum of N values in index order (a complete binary tree), so that sums split
// across lanes combine to the same tree.
template <int N>
__device__ __forceinline__ float tree_sum(const float* v) {
  if constexpr (N == 1) {
    return v[0];
  } else {
    return tree_sum<N / 2>(v) + tree_sum<N / 2>(v + N / 2);
  }
}

template <bool FP8, int R, bool DECODE, int NW, int CTAS = 2, int DS = 1, bool ROPE = true>
__global__ void __launch_bounds__(NW * 32, CTAS)
    mla_fwd_sm80_kernel(const MlaParams p, const LaunchArgs la) {
  static_assert(ROPE || !DECODE, "dense decode has rope only");
  using C = KCfg<FP8, R, NW, CTAS, DS, ROPE>;
  constexpr int BN = C::BN, ROWB = C::ROWB, NSTAGE = C::NSTAGE, PS = C::PS, MT = C::MT,
                NTW = C::NTW, DPW = C::DPW, NPV = C::NPV;
  constexpr int kThreads = C::kThreads, kWarps = C::kWarps;
  // A warp's rows in the Q load and the split combine: warp, warp + kWarps, ...; handled in
  // batches of up to four whose global loads are in flight together.
  constexpr int kWarpRows = R / kWarps;
  constexpr int kRowBatch = kWarpRows < 4 ? kWarpRows : 4;
  // fp8 with one m16 tile (R = 16): the softmax writes P as bf16 per scale group (the PV warps
  // load it with ldmatrix). Measured on the H200: faster for R = 16, slower for R = 32 (the
  // longer softmax phase of 4 rows per warp outweighs the PV saving), so R = 32 keeps the
  // per-warp conversion. Both give bitwise the same P.
  constexpr bool kPCopies = FP8 && MT == 1;
  // fp8 QK on sm_89+: the latent e4m3 bytes become f16 by the hardware conversion (one
  // instruction per f16x2, exact) and meet an f16 Q in f16 mma.sync; sm_80 / sm_86 have no such
  // conversion and widen to bf16 by bit moves (e4m3_bf16_bits.cuh, about 2.5 instructions per
  // bf16x2). The rope part and PV stay bf16 on every architecture.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  constexpr bool kF16QK = FP8;
#else
  constexpr bool kF16QK = false;
#endif
  // Q's latent part is stored times 2^(kQExp - E_row): its largest |value| below 2^(kQExp+1),
  // inside f16's range (65504) for the f16 path; bf16 products with the 2^-120 widened bytes.
  constexpr int kQExp = kF16QK ? 14 : 120;
  constexpr int kKExp = kF16QK ? 0 : 120;  // the widened K bytes are the e4m3 values times 2^-kKExp
  // fp8 PV: P times the token's group scale times kPScale meets V widened to value * 2^-120;
  // with P < 2^kLazyRescale the product stays inside bf16's range for group scales below 2^15.
  constexpr float kPScale = 0x1p104f;
  constexpr float kLazyRescale = 8.f;
  using namespace latte::cuda::sm80;
  using latte::cuda::e4m3x4_even_to_bf16x2;
  using latte::cuda::e4m3x2_hi_to_f16x2;
  using latte::cuda::e4m3x2_to_f16x2;
  using latte::cuda::mma_bf16_m16n8k16;
  using latte::cuda::mma_f16_m16n8k16;
  using latte::cuda::e4m3x4_odd_to_bf16x2;

  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* const sQ = smem + C::Q_OFF;
  uint8_t* const sST = smem + C::ST_OFF;
  float* const sPart = reinterpret_cast<float*>(smem + C::PART_OFF);
  int* const sValid = reinterpret_cast<int*>(smem + C::VALID_OFF);
  int* const sIdx = reinterpret_cast<int*>(smem + C::IDX_OFF);
  float* const sAlpha = reinterpret_cast<float*>(smem + C::ALPHA_OFF);
  float* const sRowM = reinterpret_cast<float*>(smem + C::ROWM_OFF);
  float* const sFinM = reinterpret_cast<float*>(smem + C::FINM_OFF);
  float* const sFinL = reinterpret_cast<float*>(smem + C::FINL_OFF);
  int* const sFlag = reinterpret_cast<int*>(smem + C::FLAG_OFF);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int gq = lane >> 2, tq = lane & 3;

  int64_t bid = blockIdx.x;
  const int dim_part = DS == 1 ? 0 : static_cast<int>(bid % DS);  // adjacent: the same KV rows
  bid /= DS;
  const int split = static_cast<int>(bid % la.nsplit);
  bid /= la.nsplit;
  const int rt = static_cast<int>(bid % la.row_tiles);
  const int64_t g_local = bid / la.row_tiles;
  const int64_t grp = la.group_begin + g_local;
  const int rows = p.s_q * p.heads;
  const int row0 = rt * R;
  const int dim0 = C::DPC * dim_part + DPW * warp;  // this warp's first output dim (PV, epilogue)

  int n_items;
  int seq_len = 0;
  int nsplit_g = la.nsplit;
  if constexpr (DECODE) {
    seq_len = decode_seq_len(p, grp);
    n_items = seq_len;
    nsplit_g = list_nsplit(seq_len, la.chunk);
    if (split >= nsplit_g) return;  // the whole block leaves together
  } else {
    n_items = sparse_list_len(p, grp);  // topk, or the row's own length (topk_lens)
    nsplit_g = sparse_nsplit(p, n_items, la.chunk, la.nsplit);
    if (split >= nsplit_g) return;  // past the row's length: no loads, not in the combine
  }
  const int k_begin = split * la.chunk;
  const int k_end = min(n_items, k_begin + la.chunk);
  const int n_tiles = k_end > k_begin ? (k_end - k_begin + BN - 1) / BN : 0;
  const int64_t num_slots = p.num_blocks * static_cast<int64_t>(p.block_size);

  auto q_row_ptr = [&](int row) -> const __nv_bfloat16* {
    const int i = row / p.heads, h = row - (row / p.heads) * p.heads;
    return p.q + grp * p.q_sg + i * p.q_si + h * p.q_sh;
  };
  auto q_rope_ptr = [&](int row) -> const __nv_bfloat16* {  // the row's 64 rope dims
    const int i = row / p.heads, h = row - (row / p.heads) * p.heads;
    return p.q_rope + grp * p.qr_sg + i * p.qr_si + h * p.qr_sh;
  };

  // ---- KV tile gather: this thread's token of a tile, its raw index fetched a tile early ----
  constexpr int TPT = kThreads / BN;  // threads per token
  const int ld_tok = tid / TPT, ld_sub = tid & (TPT - 1);
  // sparse: this thread's entry of the group's slot list, tile by tile
  const int32_t* const idx_tok = DECODE ? nullptr : p.indices + grp * p.idx_s + k_begin + ld_tok;
  auto fetch_index = [&](int tile) -> int {
    const int k = k_begin + tile * BN + ld_tok;
    if (tile >= n_tiles || k >= k_end) return -1;
    if constexpr (DECODE) {
      return p.block_table[grp * p.bt_s + k / p.block_size];
    } else {
      return idx_tok[tile * BN];
    }
  };
  // block_size a power of two (the usual 1 / 16 / 64): shifts instead of a division
  const int bs_mask = p.block_size - 1;
  const int bs_shift = (p.block_size & bs_mask) == 0 ? __ffs(p.block_size) - 1 : -1;
  // R = 16 (C::IDX_RING): slot indices of tiles >= NSTAGE-1 travel by cp.async into a ring of
  // NSTAGE tiles (one thread per token), NSTAGE-1 tiles before the tile's own gather is
  // issued: no thread waits on an index load in a register, and the index latency overlaps
  // NSTAGE-1 tiles of math. R = 32 (measured: no gain, bf16 1-2 % slower) loads each index
  // into a register one tile before its gather is issued.
  constexpr bool kIdxRing = C::IDX_RING;
  auto prefetch_index = [&](int tile) {
    const int k = k_begin + tile * BN + ld_tok;
    if (ld_sub != 0 || tile >= n_tiles || k >= k_end) return;
    const int32_t* src;
    if constexpr (DECODE) {
      src = p.block_table + grp * p.bt_s + (bs_shift >= 0 ? (k >> bs_shift) : k / p.block_size);
    } else {
      src = idx_tok + tile * BN;
    }
    cuda::cp_async_4(sIdx + (tile % NSTAGE) * BN + ld_tok, src, true);  // completes with the tile copies' groups
  };
  constexpr int NCH = ROWB / 16;     // 16-byte chunks per token row
  constexpr int FULL = NCH / TPT;    // chunks every thread of a token copies
  constexpr int TAIL = NCH % TPT;    // threads ld_sub < TAIL copy one more
  static_assert((TPT & (TPT - 1)) == 0, "threads per token: a power of two");
  const uint32_t ld_dst0 =
      cuda::smem_addr(sST) + ld_tok * ROWB + (FP8 ? ld_sub : (ld_sub ^ (ld_tok & 7))) * 16;
  // A cache whose blocks are contiguous (block stride = block_size x token stride, as latte's
  // caches are) addresses a slot as slot x token stride: no block / offset split per token.
  const bool linear_slots = p.kv_sblock == static_cast<int64_t>(p.block_size) * p.kv_stok;
  // Every copy's source is this thread's chunk of its token row, or of the cache's first row
  // when the token is invalid (zero-filled, nothing read): one base pointer, immediate offsets.
  auto issue_tile = [&](int tile, int stage, int raw) {
    const int k = k_begin + tile * BN + ld_tok;
    bool valid = false;
    int64_t row_off = 0;
    if (k < k_end) {
      if constexpr (DECODE) {
        valid = raw >= 0 && raw < p.num_blocks;
        const int off = bs_shift >= 0 ? (k & bs_mask) : k % p.block_size;
        row_off = raw * p.kv_sblock + off * p.kv_stok;
      } else {
        valid = raw >= 0 && raw < num_slots;
        row_off = slot_row_offset(p, raw, linear_slots, bs_shift, bs_mask);
      }
    }
    const uint8_t* const src = p.kv + (valid ? row_off : 0) + ld_sub * 16;
    const uint32_t dst = ld_dst0 + stage * BN * ROWB;
#pragma unroll
    for (int i = 0; i < FULL; ++i) cuda::cp_async_16_s(dst + i * TPT * 16, src + i * TPT * 16, valid);
    if constexpr (TAIL != 0) {
      if (ld_sub < TAIL) cuda::cp_async_16_s(dst + FULL * TPT * 16, src + FULL * TPT * 16, valid);
    }
    if (ld_sub == 0) sValid[stage * BN + ld_tok] = valid ? 1 : 0;
  };

  // first indices in flight before the Q load: the prologue tiles' (and without the ring the
  // next tile's) in registers; with the ring the next NSTAGE-1 tiles' into the ring (they
  // complete with the first commit group)
  int raw_pro[NSTAGE];
#pragma unroll
  for (int st = 0; st < (kIdxRing ? NSTAGE - 1 : NSTAGE); ++st) raw_pro[st] = fetch_index(st);
  if constexpr (kIdxRing) {
#pragma unroll
    for (int st = NSTAGE - 1; st < 2 * NSTAGE - 2; ++st) prefetch_index(st);
  }

  // ---- Q -> shared memory (rows past `rows` are zero) ----
  // fp8: a warp's rows (kRowBatch at a time) are loaded into registers together, one round trip
  // instead of one per row, before the prologue tiles are issued, and converted while those
  // tiles are in flight.
  uint4 q_lat[kRowBatch][2], q_rope[kRowBatch];
  auto load_q = [&](int b) {
#pragma unroll
    for (int j = 0; j < kRowBatch; ++j) {
      const int row = row0 + warp + (b * kRowBatch + j) * kWarps;
      q_lat[j][0] = q_lat[j][1] = q_rope[j] = make_uint4(0, 0, 0, 0);
      if (row < rows) {
        const __nv_bfloat16* src = q_row_ptr(row);
        q_lat[j][0] = *reinterpret_cast<const uint4*>(src + lane * 16);
        q_lat[j][1] = *reinterpret_cast<const uint4*>(src + lane * 16 + 8);
        if (ROPE && lane < 8) q_rope[j] = *reinterpret_cast<const uint4*>(q_rope_ptr(row) + lane * 8);
      }
    }
  };
  auto convert_q = [&](int b) {
#pragma unroll
    for (int j = 0; j < kRowBatch; ++j) {
      const int r = warp + (b * kRowBatch + j) * kWarps;
      const int row = row0 + r;
      uint8_t* const qrow = sQ + r * kQRowBytes;
      uint4 ev = make_uint4(0, 0, 0, 0), od = make_uint4(0, 0, 0, 0);
      float rowm = 1.f;
      if (row < rows) {
        const uint4 v0 = q_lat[j][0], v1 = q_lat[j][1];
        const uint32_t w[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
        float f[16];
        float mx = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          f[2 * i] = __uint_as_float(w[i] << 16);
          f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
          mx = fmaxf(mx, fmaxf(fabsf(f[2 * i]), fabsf(f[2 * i + 1])));
        }
#pragma unroll
        for (int off = 16; off >= 1; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        const int ebits = static_cast<int>((__float_as_uint(mx) >> 23) & 0xFF);
        const int E = ebits == 0 ? -126 : (ebits > 254 ? 127 : ebits - 127);
        rowm = ldexpf(1.f, E - kQExp + kKExp);  // the partial's factor back to q * k
        // q * 2^(kQExp - E) as two exact power-of-two products (each factor a normal float; both
        // have the sign of kQExp - E, so the intermediate lies between q and the result)
        const int k2 = kQExp - E, k1 = k2 / 2;
        const float s1 = __uint_as_float(static_cast<uint32_t>(127 + k1) << 23);
        const float s2 = __uint_as_float(static_cast<uint32_t>(127 + k2 - k1) << 23);
        auto qs = [&](float v) { return (v * s1) * s2; };
        uint32_t e[4], o[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if constexpr (kF16QK) {
            // chunk 2*lane: dims 4i, 4i+1 (the low e4m3 pair of a 4-byte word); 2*lane+1: 4i+2, 4i+3
            e[i] = pack_f16x2(qs(f[4 * i]), qs(f[4 * i + 1]));
            o[i] = pack_f16x2(qs(f[4 * i + 2]), qs(f[4 * i + 3]));
          } else {
            // chunk 2*lane: even dims (even bytes of a word); 2*lane+1: odd dims
            e[i] = pack_bf16x2(qs(f[4 * i]), qs(f[4 * i + 2]));
            o[i] = pack_bf16x2(qs(f[4 * i + 1]), qs(f[4 * i + 3]));
          }
        }
        ev = make_uint4(e[0], e[1], e[2], e[3]);
        od = make_uint4(o[0], o[1], o[2], o[3]);
      }
      // latent block `lane` (dims 16*lane..): evens -> logical chunk 2*lane, odds -> 2*lane+1
      *reinterpret_cast<uint4*>(qrow + (((2 * lane) ^ (r & 7)) << 4)) = ev;
      *reinterpret_cast<uint4*>(qrow + (((2 * lane + 1) ^ (r & 7)) << 4)) = od;
      if (ROPE && lane < 8) *reinterpret_cast<uint4*>(qrow + (((64 + lane) ^ (r & 7)) << 4)) = q_rope[j];
      if (lane == 0) sRowM[r] = rowm;
    }
  };
  if constexpr (!FP8) {
    constexpr int kQChunks = ROPE ? 72 : 64;  // without rope: the latent chunks only
    for (int c = tid; c < R * kQChunks; c += kThreads) {
      const int r = c / kQChunks, ch = c - (c / kQChunks) * kQChunks;
      const int row = row0 + r;
      const bool ok = row < rows;
      // Chunks 0..63: the latent dims; 64..71: the rope dims.
      const void* src = !ok ? static_cast<const void*>(p.q)
                        : ch < 64 ? static_cast<const void*>(q_row_ptr(row) + ch * 8)
                                  : static_cast<const void*>(q_rope_ptr(row) + (ch - 64) * 8);
      cuda::cp_async_16_s(cuda::smem_addr(sQ + r * kQRowBytes + ((ch ^ (r & 7)) << 4)), src, ok);
    }
  } else {
    load_q(0);
  }

#pragma unroll
  for (int st = 0; st < NSTAGE - 1; ++st) {
    if (st < n_tiles) issue_tile(st, st, raw_pro[st]);
    cuda::cp_async_commit();
  }
  if constexpr (FP8) {
    convert_q(0);
#pragma unroll
    for (int b = 1; b < kWarpRows / kRowBatch; ++b) {
      load_q(b);
      convert_q(b);
    }
  }
  int raw_next = kIdxRing ? -1 : raw_pro[NSTAGE - 1];  // no ring: index of tile j + NSTAGE - 1

  // softmax-owner state (the lane's row)
  const int srow = warp * C::RW + lane / C::LPR;
  const int c0 = (lane % C::LPR) * C::CPL;
  float m_run = -INFINITY, l_run = 0.f;
  int vis_lim = 0x7fffffff;  // decode: last visible position of this row
  if constexpr (DECODE) {
    const int row = row0 + srow;
    const int i = row < rows ? row / p.heads : 0;
    vis_lim = decode_window_end(p, grp) - p.s_q + i;
  }
  const float scale_log2 = p.scale * 1.4426950408889634f;

  float O[MT][NPV][4];
  zero_fragments(O);

  const uint32_t q_base = cuda::smem_addr(sQ);
  const int kq = warp & 3, nh = warp >> 2;  // nh = 0 with 4 warps

  for (int j = 0; j < n_tiles; ++j) {
    cuda::cp_async_wait<NSTAGE - 2>();
    __syncthreads();
    {
      const int jn = j + NSTAGE - 1;
      if constexpr (kIdxRing) {
        if (jn < n_tiles) {
          // ring entry of tile jn: in a commit group that the wait above completed
          const int k = k_begin + jn * BN + ld_tok;
          issue_tile(jn, jn % NSTAGE, k < k_end ? sIdx[(jn % NSTAGE) * BN + ld_tok] : -1);
        }
        prefetch_index(jn + NSTAGE - 1);  // overwrites tile jn-1's entry, read before the barrier
        cuda::cp_async_commit();
      } else {
        if (jn < n_tiles) issue_tile(jn, jn % NSTAGE, raw_next);
        cuda::cp_async_commit();
        raw_next = fetch_index(jn + 1);  // consumed next tile: its latency overlaps this one
      }
    }
    const int stage = j % NSTAGE;
    const uint8_t* const st = sST + stage * BN * ROWB;
    const uint32_t st_u32 = cuda::smem_addr(st);

    // ---------------- QK: partial S over this warp's dims and token half ----------------
    {
      float acc[MT][NTW][4];
      zero_fragments(acc);

      auto load_a = [&](uint32_t (&a)[MT][4], int chunk_base) {
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          const int row = 16 * m + (lane & 15);
          const int c = chunk_base + (lane >> 4);
          ldmatrix_x4(a[m], q_base + row * kQRowBytes + ((c ^ (row & 7)) << 4));
        }
      };
      const int tok0 = nh * NTW * 8;  // first token of this warp's half

      if constexpr (FP8) {
        static_assert(NTW % 2 == 0, "fp8 QK loads two n8 tiles per ldmatrix");
        // B: 8 tokens x 16 e4m3 per 8x8 b16 matrix; lane (g, t) gets token g, bytes 4t..4t+3
        const uint32_t b_base = st_u32 + (tok0 + (lane & 7) + ((lane >> 4) << 3)) * ROWB +
                                kq * 128 + ((lane >> 3) & 1) * 16;
#pragma unroll 2
        for (int s = 0; s < 8; s += 2) {
          uint32_t a0[MT][4], a1[MT][4];
          load_a(a0, (kq * 8 + s) * 2);
          load_a(a1, (kq * 8 + s + 1) * 2);
#pragma unroll
          for (int np = 0; np < NTW / 2; ++np) {
            uint32_t b[4];  // (n0, s), (n0, s+1), (n1, s), (n1, s+1)
            ldmatrix_x4(b, b_base + np * 16 * ROWB + s * 16);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int n = 2 * np + h;
              if constexpr (kF16QK) {
                // the two B registers of a k16 step: bytes 0-1 and 2-3 of the lane's word
                const uint32_t e0 = e4m3x2_to_f16x2(b[2 * h]), o0 = e4m3x2_hi_to_f16x2(b[2 * h]);
                const uint32_t e1 = e4m3x2_to_f16x2(b[2 * h + 1]), o1 = e4m3x2_hi_to_f16x2(b[2 * h + 1]);
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                  mma_f16_m16n8k16(acc[m][n], a0[m], e0, o0);
                  mma_f16_m16n8k16(acc[m][n], a1[m], e1, o1);
                }
              } else {
                const uint32_t e0 = e4m3x4_even_to_bf16x2(b[2 * h]), o0 = e4m3x4_odd_to_bf16x2(b[2 * h]);
                const uint32_t e1 = e4m3x4_even_to_bf16x2(b[2 * h + 1]),
                               o1 = e4m3x4_odd_to_bf16x2(b[2 * h + 1]);
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                  mma_bf16_m16n8k16(acc[m][n], a0[m], e0, o0);
                  mma_bf16_m16n8k16(acc[m][n], a1[m], e1, o1);
                }
              }
            }
          }
        }
        // latent group kq: times the token's group scale and the row's 2^E
        float rm[MT][2];
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          rm[m][0] = sRowM[16 * m + gq];
          rm[m][1] = sRowM[16 * m + gq + 8];
        }
#pragma unroll
        for (int n = 0; n < NTW; ++n) {
          const int tk = tok0 + 8 * n + 2 * tq;
          const float s0 = *reinterpret_cast<const float*>(st + tk * ROWB + 512 + 4 * kq);
          const float s1 = *reinterpret_cast<const float*>(st + (tk + 1) * ROWB + 512 + 4 * kq);
#pragma unroll
          for (int m = 0; m < MT; ++m) {
            acc[m][n][0] *= s0 * rm[m][0];
            acc[m][n][1] *= s1 * rm[m][0];
            acc[m][n][2] *= s0 * rm[m][1];
            acc[m][n][3] *= s1 * rm[m][1];
          }
        }
        // rope dims 512 + 16kq .. : bf16 in the cache row at byte 528 (none without rope)
        if constexpr (ROPE) {
          uint32_t a[MT][4];
          load_a(a, 64 + 2 * kq);
          const int half = (lane >> 3) & 1;
#pragma unroll
          for (int np = 0; np < NTW / 2; ++np) {
            const int tok = tok0 + 16 * np + (lane & 7) + ((lane >> 4) << 3);
            uint32_t b[4];
            ldmatrix_x4(b, st_u32 + tok * ROWB + 528 + kq * 32 + half * 16);
#pragma unroll
            for (int m = 0; m < MT; ++m) {
              mma_bf16_m16n8k16(acc[m][2 * np], a[m], b[0], b[1]);
              mma_bf16_m16n8k16(acc[m][2 * np + 1], a[m], b[2], b[3]);
            }
          }
        }
      } else {
        static_assert(NTW == 1 || NTW == 2, "bf16 path: one or two n8 tiles per QK warp");
        // Even and odd 16-dim blocks accumulate apart (twice the independent mma chains: with
        // two warps per scheduler the chains' latency is what the loop waits on), then add:
        // the same order in every bf16 configuration, so they stay bitwise equal.
        float acc2[MT][NTW][4];
        zero_fragments(acc2);
        auto qk_step = [&](int s, float (&ac)[MT][NTW][4]) {
          const int blk16 = s < 8 ? kq * 8 + s : 32 + kq;
          uint32_t a[MT][4];
          load_a(a, blk16 * 2);
          if constexpr (NTW == 1) {
            const int tok = tok0 + (lane & 7);
            const int c = blk16 * 2 + ((lane >> 3) & 1);
            uint32_t b[2];
            ldmatrix_x2(b, st_u32 + tok * ROWB + ((c ^ (tok & 7)) << 4));
#pragma unroll
            for (int m = 0; m < MT; ++m) mma_bf16_m16n8k16(ac[m][0], a[m], b[0], b[1]);
          } else {
            const int tok = tok0 + (lane & 7) + ((lane >> 4) << 3);
            const int c = blk16 * 2 + ((lane >> 3) & 1);
            uint32_t b[4];
            ldmatrix_x4(b, st_u32 + tok * ROWB + ((c ^ (tok & 7)) << 4));
#pragma unroll
            for (int m = 0; m < MT; ++m) {
              mma_bf16_m16n8k16(ac[m][0], a[m], b[0], b[1]);
              mma_bf16_m16n8k16(ac[m][1], a[m], b[2], b[3]);
            }
          }
        };
#pragma unroll
        for (int s = 0; s < 8; s += 2) {
          qk_step(s, acc);
          qk_step(s + 1, acc2);
        }
        if constexpr (ROPE) qk_step(8, acc);  // the rope block
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int n = 0; n < NTW; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[m][n][e] += acc2[m][n][e];
      }
      // store the partial
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NTW; ++n) {
          const int row = 16 * m + gq, col = tok0 + 8 * n + 2 * tq;
          *reinterpret_cast<float2*>(&sPart[(kq * R + row) * PS + col]) =
              make_float2(acc[m][n][0], acc[m][n][1]);
          *reinterpret_cast<float2*>(&sPart[(kq * R + row + 8) * PS + col]) =
              make_float2(acc[m][n][2], acc[m][n][3]);
        }
    }
    __syncthreads();

    // ---------------- online softmax for this warp's rows ----------------
    {
      constexpr int CPL = C::CPL, LPR = C::LPR;
      float x[CPL];
      if constexpr (CPL >= 2) {
#pragma unroll
        for (int c = 0; c < CPL; c += 2) {
          float2 v = *reinterpret_cast<const float2*>(&sPart[(0 * R + srow) * PS + c0 + c]);
#pragma unroll
          for (int q4 = 1; q4 < 4; ++q4) {
            const float2 u = *reinterpret_cast<const float2*>(&sPart[(q4 * R + srow) * PS + c0 + c]);
            v.x += u.x;
            v.y += u.y;
          }
          x[c] = v.x;
          x[c + 1] = v.y;
        }
      } else {
        float v = sPart[(0 * R + srow) * PS + c0];
#pragma unroll
        for (int q4 = 1; q4 < 4; ++q4) v += sPart[(q4 * R + srow) * PS + c0];
        x[0] = v;
      }
      float tmax = -INFINITY;
#pragma unroll
      for (int c = 0; c < CPL; ++c) {
        const int tok = c0 + c;
        bool ok = sValid[stage * BN + tok] != 0;
        if constexpr (DECODE) ok = ok && (k_begin + j * BN + tok <= vis_lim);
        x[c] = ok ? x[c] * scale_log2 : -INFINITY;
        tmax = fmaxf(tmax, x[c]);
      }
#pragma unroll
      for (int off = 1; off < LPR; off <<= 1)
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, off));
      // Lazy rescaling: the row's reference max moves only when the tile's max exceeds it by
      // more than kLazyRescale (log2 units), so P stays below 2^kLazyRescale and most tiles need
      // no O rescale (alpha exactly 1, which the PV warps skip). The decision is the row's own,
      // from its own scores in tile order: deterministic and independent of the batch.
      const float m_new = fmaxf(m_run, tmax);
      const bool bump = m_run == -INFINITY || m_new > m_run + kLazyRescale;
      const float m_next = bump ? m_new : m_run;
      const float m_use = m_next == -INFINITY ? 0.f : m_next;
      const float alpha = bump ? fast_exp2(m_run - m_use) : 1.f;
#pragma unroll
      for (int c = 0; c < CPL; ++c) x[c] = fast_exp2(x[c] - m_use);
      float sum = tree_sum<CPL>(x);
#pragma unroll
      for (int off = 1; off < LPR; off <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      l_run = l_run * alpha + sum;
      m_run = m_next;
      if constexpr (kPCopies) {
        // P for PV, once per (row, token) instead of once per PV warp: four bf16 copies, copy g
        // times token scale g * kPScale (PV warp w's dims lie in scale group (512/NW * w) / 128),
        // in row r's own partial slot g (read above by this row's lanes only): sPart slot
        // (g*R + r), bf16 at byte 16*((r>>2)&1) + 2*token (ldmatrix without bank conflicts).
        // The same fp32 products and roundings as the per-warp conversion below, so both give
        // bitwise the same P.
        __syncwarp();
        uint8_t* const prow = reinterpret_cast<uint8_t*>(sPart) + srow * (PS * 4) +
                              16 * ((srow >> 2) & 1) + 2 * c0;
        static_assert(CPL % 2 == 0, "fp8 softmax: an even number of columns per lane");
        constexpr int kGroups = 4 / DS;  // the scale groups of this CTA's output dims
        const int g0 = kGroups * dim_part;
        uint32_t pk[kGroups][CPL / 2];
        // the kGroups scales of a token, in one 16- or 8-byte load
        auto group_scales = [&](int tok, float (&sc)[kGroups]) {
          const uint8_t* const at = st + tok * ROWB + 512 + 4 * g0;
          if constexpr (kGroups == 4) {
            const float4 v = *reinterpret_cast<const float4*>(at);
            sc[0] = v.x;
            sc[1] = v.y;
            sc[2] = v.z;
            sc[3] = v.w;
          } else {
            const float2 v = *reinterpret_cast<const float2*>(at);
            sc[0] = v.x;
            sc[1] = v.y;
          }
        };
#pragma unroll
        for (int c = 0; c < CPL; c += 2) {
          float s0[kGroups], s1[kGroups];
          group_scales(c0 + c, s0);
          group_scales(c0 + c + 1, s1);
#pragma unroll
          for (int g = 0; g < kGroups; ++g)
            pk[g][c / 2] = pack_bf16x2(x[c] * (s0[g] * kPScale), x[c + 1] * (s1[g] * kPScale));
        }
#pragma unroll
        for (int g = 0; g < kGroups; ++g) {
          uint8_t* const dst = prow + (g0 + g) * (R * PS * 4);
          if constexpr (CPL == 2) {
            *reinterpret_cast<uint32_t*>(dst) = pk[g][0];
          } else {
#pragma unroll
            for (int c = 0; c < CPL / 2; c += 2)
              *reinterpret_cast<uint2*>(dst + 4 * c) = make_uint2(pk[g][c], pk[g][c + 1]);
          }
        }
      } else if constexpr (CPL >= 2) {
#pragma unroll
        for (int c = 0; c < CPL; c += 2)
          *reinterpret_cast<float2*>(&sPart[srow * PS + c0 + c]) = make_float2(x[c], x[c + 1]);
      } else {
        sPart[srow * PS + c0] = x[0];
      }
      if ((lane % LPR) == 0) sAlpha[srow] = alpha;
    }
    __syncthreads();

    // ---------------- PV: O[:, 64w .. 64w+64) ----------------
    {
      float al[MT][2];
      bool need = false;
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        al[m][0] = sAlpha[16 * m + gq];
        al[m][1] = sAlpha[16 * m + gq + 8];
        need = need || al[m][0] != 1.f || al[m][1] != 1.f;
      }
      if (__any_sync(0xffffffffu, need)) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int n = 0; n < NPV; ++n) {
            O[m][n][0] *= al[m][0];
            O[m][n][1] *= al[m][0];
            O[m][n][2] *= al[m][1];
            O[m][n][3] *= al[m][1];
          }
      }
      const float* const sP = sPart;  // P aliases partial 0
      // kPCopies: this warp's bf16 copy of P (scale group dim0 >> 7), A via ldmatrix
      uint32_t pa_base = 0;
      if constexpr (kPCopies) {
        const int r = lane & 15;
        pa_base = cuda::smem_addr(sPart) + ((dim0 >> 7) * R + r) * (PS * 4) + 16 * ((r >> 2) & 1) +
                  (lane >> 4) * 16;
      }
#pragma unroll
      for (int i = 0; i < BN / 16; ++i) {
        uint32_t a[MT][4];
        if constexpr (kPCopies) {
#pragma unroll
          for (int m = 0; m < MT; ++m) ldmatrix_x4(a[m], pa_base + 16 * m * (PS * 4) + 32 * i);
        } else {
          const int ka = 16 * i + 2 * tq;  // tokens ka, ka+1, ka+8, ka+9
          float sc[4] = {1.f, 1.f, 1.f, 1.f};
          if constexpr (FP8) {
            const int so = 512 + 4 * (dim0 >> 7);  // the group of this warp's dims
            sc[0] = *reinterpret_cast<const float*>(st + ka * ROWB + so) * kPScale;
            sc[1] = *reinterpret_cast<const float*>(st + (ka + 1) * ROWB + so) * kPScale;
            sc[2] = *reinterpret_cast<const float*>(st + (ka + 8) * ROWB + so) * kPScale;
            sc[3] = *reinterpret_cast<const float*>(st + (ka + 9) * ROWB + so) * kPScale;
          }
#pragma unroll
          for (int m = 0; m < MT; ++m) {
            const int r0 = 16 * m + gq, r1 = r0 + 8;
            const float2 p00 = *reinterpret_cast<const float2*>(&sP[r0 * PS + ka]);
            const float2 p10 = *reinterpret_cast<const float2*>(&sP[r1 * PS + ka]);
            const float2 p01 = *reinterpret_cast<const float2*>(&sP[r0 * PS + ka + 8]);
            const float2 p11 = *reinterpret_cast<const float2*>(&sP[r1 * PS + ka + 8]);
            a[m][0] = pack_bf16x2(p00.x * sc[0], p00.y * sc[1]);
            a[m][1] = pack_bf16x2(p10.x * sc[0], p10.y * sc[1]);
            a[m][2] = pack_bf16x2(p01.x * sc[2], p01.y * sc[3]);
            a[m][3] = pack_bf16x2(p11.x * sc[2], p11.y * sc[3]);
          }
        }
        if constexpr (FP8) {
          // V^T via ldmatrix.trans of 8 tokens x 16 e4m3: lane (g, t) gets tokens 2t, 2t+1 at
          // bytes 2g, 2g+1 of a 16-byte segment, already paired for the B fragment.
          const uint32_t v_base = st_u32 + (16 * i + (lane & 7) + (((lane >> 3) & 1) << 3)) * ROWB +
                                  dim0 + (lane >> 4) * 16;
#pragma unroll
          for (int q2 = 0; q2 < DPW / 32; ++q2) {
            uint32_t r[4];  // (seg 2q2: tokens 0-7, 8-15), (seg 2q2+1: tokens 0-7, 8-15)
            ldmatrix_x4_trans(r, v_base + q2 * 32);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int seg = 2 * q2 + h;
              const uint32_t be = e4m3x4_even_to_bf16x2(r[2 * h]), bo = e4m3x4_odd_to_bf16x2(r[2 * h]);
              const uint32_t ce = e4m3x4_even_to_bf16x2(r[2 * h + 1]),
                             co = e4m3x4_odd_to_bf16x2(r[2 * h + 1]);
#pragma unroll
              for (int m = 0; m < MT; ++m) {
                mma_bf16_m16n8k16(O[m][2 * seg], a[m], be, ce);      // dims 16seg + 2g
                mma_bf16_m16n8k16(O[m][2 * seg + 1], a[m], bo, co);  // dims 16seg + 2g + 1
              }
            }
          }
        } else {
#pragma unroll
          for (int c = 0; c < NPV; c += 2) {
            const int tok = 16 * i + (lane & 7) + (((lane >> 3) & 1) << 3);
            const int chn = dim0 / 8 + c + (lane >> 4);
            uint32_t b[4];
            ldmatrix_x4_trans(b, st_u32 + tok * ROWB + ((chn ^ (tok & 7)) << 4));
#pragma unroll
            for (int m = 0; m < MT; ++m) {
              mma_bf16_m16n8k16(O[m][c], a[m], b[0], b[1]);
              mma_bf16_m16n8k16(O[m][c + 1], a[m], b[2], b[3]);
            }
          }
        }
      }
    }
  }

  // ---------------- epilogue ----------------
  if ((lane % C::LPR) == 0) {
    sFinM[srow] = m_run;
    sFinL[srow] = l_run;
  }
  __syncthreads();

  const bool direct = nsplit_g == 1;
  constexpr float kOutFactor = FP8 ? 1.f / (kPScale * 0x1p-120f) : 1.f;  // P carried kPScale, V 2^-120
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = 16 * m + gq + 8 * hr;
      const int row = row0 + r;
      if (row >= rows) continue;
      const float l = sFinL[r];
      const float mm = sFinM[r];
      const float inv = l > 0.f ? kOutFactor / l : 0.f;
      const float lse2 = l > 0.f ? mm + __log2f(l) : -INFINITY;
      const int i = row / p.heads, h = row - (row / p.heads) * p.heads;
      __nv_bfloat16* dst;
      if (direct) {
        dst = p.out + grp * p.o_sg + i * p.o_si + h * p.o_sh;
      } else {
        dst = la.part_o + ((g_local * rows + row) * la.nsplit + split) * 512;
      }
      if constexpr (FP8) {
        // n8 tile 2seg+par, acc col 2t+e  ->  dim 64w + 16seg + 4t + 2e + par
#pragma unroll
        for (int seg = 0; seg < DPW / 16; ++seg) {
          const uint32_t lo = pack_bf16x2(O[m][2 * seg][2 * hr] * inv, O[m][2 * seg + 1][2 * hr] * inv);
          const uint32_t hi =
              pack_bf16x2(O[m][2 * seg][2 * hr + 1] * inv, O[m][2 * seg + 1][2 * hr + 1] * inv);
          *reinterpret_cast<uint2*>(dst + dim0 + 16 * seg + 4 * tq) = make_uint2(lo, hi);
        }
      } else {
#pragma unroll
        for (int n = 0; n < NPV; ++n) {
          *reinterpret_cast<uint32_t*>(dst + dim0 + 8 * n + 2 * tq) =
              pack_bf16x2(O[m][n][2 * hr] * inv, O[m][n][2 * hr + 1] * inv);
        }
      }
      if (warp == 0 && tq == 0 && dim_part == 0) {
        if (direct) {
          if (p.lse != nullptr)
            p.lse[grp * p.l_sg + i * p.l_si + h * p.l_sh] = lse2 * 0.6931471805599453f;
        } else {
          la.part_lse[(g_local * rows + row) * la.nsplit + split] = lse2;
        }
      }
    }
  }
  if (direct) return;

  // ---------------- split combine by the last CTA of this (group, row tile) ----------------
  if (!last_to_arrive(la.counters + g_local * la.row_tiles + rt, nsplit_g * DS, sFlag)) return;
  combine_splits<kWarps, kWarpRows, CTAS == 3>(p, la, g_local, grp, row0, rows, nsplit_g);
}

}  // namespace latte::cuda_sparse_mla
