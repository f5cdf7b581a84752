// Sparse MLA over the fp8_ds_mla cache for at most 16 heads per call (GLM-5 at TP8 / TP4,
// DeepSeek-V3.2 at TP16 / TP8): the heads are the mma's N dimension (one or two n8 tiles) and the
// KV tokens its M dimension, so no mma lane computes a padded head beyond the n8 tile and every
// e4m3 byte is converted once per CTA for QK and once for PV, whatever the head count (with 16
// heads each converted fragment feeds two mma). sm_80 ... sm_120 (mma.sync, ldmatrix,
// cp.async; the e4m3 -> f16 conversion instruction on sm_89+). Design notes:
// docs/kernels/sparse_mla.md, "Few heads".
//
// One CTA = 4 warps = one query token x one split of its slot list, in tiles of 64 tokens
// (cp.async into 2 stages of 64 x 656 bytes: the tile being computed and the next one; each
// copy instruction reads 128 contiguous bytes of four rows). Measured against this layout and
// slower on the H200 (docs/kernels/sparse_mla.md): 32-token tiles with 4 stages (more bytes in
// flight), 8 warps on 64-token tiles, an L2 prefetch of the tile after next. Per tile:
//   QK  warp w: S^T[16 tokens x NH heads] for tokens 16w .. 16w+15 over all 576 dims; the e4m3
//       rows are the A operand (plain ldmatrix), Q^T the B operand: 8 heads, held in registers
//       for the whole CTA; 16 heads (144 registers would not fit), in shared memory and read
//       by ldmatrix per k step. One accumulator per scale group, then times the token's group
//       scale.
//   SM  per head, the online softmax in the log2 domain with lazy rescaling (the reference max
//       moves only when a tile's max exceeds it by more than 8), speculatively: each warp
//       computes P with the current reference and publishes its tile maxima; only when one
//       exceeds its reference (the first tiles) do the warps recompute P with the new one.
//   PV  warp w: O^T[128 dims (scale group w) x NH heads] += V^T P'^T, V^T by ldmatrix.trans on
//       the e4m3 rows; P' = P x the token's group-w scale / 2^e_ref, e_ref a power of two that
//       moves (rescaling O exactly) only when a tile's largest scale reaches 2^(e_ref + 7), so P'
//       stays below 2^15 and fits f16.
// sm_89+: the e4m3 bytes become f16 by the hardware conversion (exact) and meet f16 Q / P' in
// f16 mma.sync; sm_80 / sm_86 widen them to bf16 by bit moves (value x 2^-120) and use bf16.
// Every sum has a fixed order and nothing depends on the other tokens of the call, so results
// are bitwise deterministic and batch invariant (the kernel is chosen by format, heads, the
// kernel's size and the device only, mla_plan_launch.cu).
// ROPE = false (rope_dim 0): 528-byte rows (512 e4m3 + 4 f32 scales: the first 528 bytes of a
// 528- or 656-byte cache row, nothing past them read), QK over the 512 latent dims, no rope
// loads or mma.sync. topk_lens: a token's list ends at its own length; splits past it exit at
// once.
#include <cuda_bf16.h>

#include <atomic>
#include <cstdint>

#include "kernels/sparse_mla/smxx/mla_fwd_dispatch.hpp"
#include "kernels/sparse_mla/smxx/mla_kv_slots.cuh"
#include "kernels/sparse_mla/smxx/mla_split_combine.cuh"
#include "kernels/common/cp_async.cuh"
#include "kernels/common/cuda_check.cuh"
#include "kernels/common/e4m3_bf16_bits.cuh"
#include "kernels/common/mma_sync.cuh"
#include "kernels/common/ldmatrix.cuh"
#include "kernels/common/smem_limit.hpp"

namespace latte::cuda_sparse_mla {
namespace {

// NH: heads per CTA, 8 (one n8 tile) or 16 (two).
template <bool ROPE, int NH>
struct FewHeadsCfg {
  static_assert(NH == 8 || NH == 16, "one or two n8 tiles of heads");
  static constexpr int NT = NH / 8;
  static constexpr bool kQInSmem = NH > 8;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 128;
  static constexpr int BN = 64;             // tokens per tile (16 per warp in QK)
  // bytes per token: 512 e4m3, 4 f32 scales, 64 bf16 rope (without rope: the first 528)
  static constexpr int ROWB = ROPE ? 656 : 528;
  static constexpr int FULL = ROWB / 128;   // 128-byte column blocks of a row; then one 16-byte chunk
  static constexpr int NSTAGE = 2;
  static constexpr int PSTRIDE = BN + 8;    // floats per head row of P (conflict-free PV loads)
  // 16 bit values per head row of Q^T (16 heads): the latent dims (in the fragments' order), the
  // rope; an odd number of 16-byte chunks, so the eight rows of an ldmatrix hit eight bank groups
  static constexpr int QSTRIDE = (ROPE ? 576 : 512) + 8;
  static constexpr int ST_OFF = 0;
  static constexpr int P_OFF = ST_OFF + NSTAGE * BN * ROWB;
  static constexpr int Q_OFF = P_OFF + NH * PSTRIDE * 4;
  static constexpr int VALID_OFF = Q_OFF + (kQInSmem ? NH * QSTRIDE * 2 : 0);
  static constexpr int MAX_OFF = VALID_OFF + NSTAGE * BN * 4;   // [warp][head] tile maxima
  static constexpr int LSUM_OFF = MAX_OFF + kWarps * NH * 4;    // [warp][head] softmax sums
  static constexpr int FACTOR_OFF = LSUM_OFF + kWarps * NH * 4; // [head] latent factors (16 heads)
  static constexpr int FLAG_OFF = FACTOR_OFF + NH * 4;
  static constexpr int SMEM = FLAG_OFF + 16;
  // 8 heads fit the 100 KB parts (sm_86 / sm_89 / sm_120); both fit two CTAs per SM on sm_90
  // (228 KB per SM, 1 KB reserved per block)
  static_assert(NH > 8 || SMEM <= 101376, "shared memory over the sm_86/sm_89/sm_120 limit");
  static_assert(2 * (SMEM + 1024) <= 233472, "two CTAs per SM on sm_90");
  static_assert(P_OFF % 16 == 0 && Q_OFF % 16 == 0 && VALID_OFF % 16 == 0, "alignment");
  static_assert(QSTRIDE % 16 == 8, "Q^T rows an odd number of 16-byte chunks apart");
};

template <bool ROPE, int NH>
__global__ void __launch_bounds__(FewHeadsCfg<ROPE, NH>::kThreads, 2)
    mla_sparse_fp8_fewheads_kernel(const MlaParams p, const LaunchArgs la) {
  using C = FewHeadsCfg<ROPE, NH>;
  using namespace latte::cuda::sm80;
  using latte::cuda::e4m3x2_hi_to_f16x2;
  using latte::cuda::e4m3x2_to_f16x2;
  using latte::cuda::e4m3x4_even_to_bf16x2;
  using latte::cuda::e4m3x4_odd_to_bf16x2;
  using latte::cuda::mma_bf16_m16n8k16;
  using latte::cuda::mma_f16_m16n8k16;
  constexpr int BN = C::BN, ROWB = C::ROWB, NSTAGE = C::NSTAGE, PSTRIDE = C::PSTRIDE, NT = C::NT;
  constexpr bool kQInSmem = C::kQInSmem;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  constexpr bool kF16 = true;
#else
  constexpr bool kF16 = false;
#endif
  // Q's latent part is stored times 2^(kQExp - E_head) (its largest |value| below 2^(kQExp+1):
  // inside f16's range; bf16: meets the 2^-120 widened bytes); the K side is value x 2^-kKExp.
  constexpr int kQExp = kF16 ? 14 : 120;
  constexpr int kKExp = kF16 ? 0 : 120;
  // bf16 PV: P' carries 2^96 against V's 2^-120, so the products sit near 1 in f32.
  constexpr float kPvScale = kF16 ? 1.f : 0x1p96f;
  constexpr float kOutFactor = kF16 ? 1.f : 0x1p24f;
  constexpr float kLazyRescale = 8.f;
  constexpr int kScaleHeadroom = 7;  // P' < 2^8 x 2^7 = 2^15 < 65504

  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* const sST = smem + C::ST_OFF;
  float* const sP = reinterpret_cast<float*>(smem + C::P_OFF);
  int* const sValid = reinterpret_cast<int*>(smem + C::VALID_OFF);
  float* const sMax = reinterpret_cast<float*>(smem + C::MAX_OFF);
  float* const sLsum = reinterpret_cast<float*>(smem + C::LSUM_OFF);
  int* const sFlag = reinterpret_cast<int*>(smem + C::FLAG_OFF);
  uint32_t* const sQ32 = reinterpret_cast<uint32_t*>(smem + C::Q_OFF);  // 16 heads: Q^T, pairs of dims
  float* const sFactor = reinterpret_cast<float*>(smem + C::FACTOR_OFF);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, c = lane & 3;

  const int split = static_cast<int>(blockIdx.x % static_cast<unsigned>(la.nsplit));
  const int64_t g_local = blockIdx.x / static_cast<unsigned>(la.nsplit);
  const int64_t grp = la.group_begin + g_local;
  const int heads = p.heads;  // sparse: s_q = 1, rows = heads
  const int n_items = sparse_list_len(p, grp);  // topk, or the row's own length (topk_lens)
  const int nsplit_g = sparse_nsplit(p, n_items, la.chunk, la.nsplit);
  if (split >= nsplit_g) return;  // past the row's length: no loads, not in the combine
  const int k_begin = split * la.chunk;
  const int k_end = min(n_items, k_begin + la.chunk);
  const int n_tiles = k_end > k_begin ? (k_end - k_begin + BN - 1) / BN : 0;
  const int64_t num_slots = p.num_blocks * static_cast<int64_t>(p.block_size);
  const int bs_mask = p.block_size - 1;
  const int bs_shift = (p.block_size & bs_mask) == 0 ? __ffs(p.block_size) - 1 : -1;
  const bool linear_slots = p.kv_sblock == static_cast<int64_t>(p.block_size) * p.kv_stok;

  // ---- gather: warp w copies tokens 16w .. 16w+15, four per instruction: lane (tq, sub) takes
  // tokens 16w + tq + 4r (r = 0..3), 16-byte chunks sub + 8i of each row (and chunk 40, 32
  // without rope, when sub = 0): every copy instruction reads 128 contiguous bytes of four rows. Lane l < 16
  // fetches the slot index of token 16w + l one tile ahead; the issue shuffles them out. ----
  const int sub = lane & 7, tq = lane >> 3;
  const int32_t* const idx_warp = p.indices + grp * p.idx_s + k_begin + 16 * warp + (lane & 15);
  auto fetch_index = [&](int tile) -> int {
    const int k = k_begin + tile * BN + 16 * warp + (lane & 15);
    return tile < n_tiles && k < k_end ? idx_warp[tile * BN] : -1;
  };
  auto issue_tile = [&](int tile, int stage, int raw_lane) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int tok = 16 * warp + tq + 4 * r;
      const int raw = __shfl_sync(0xffffffffu, raw_lane, tq + 4 * r);
      const int k = k_begin + tile * BN + tok;
      const bool valid = k < k_end && raw >= 0 && raw < num_slots;
      const int64_t row_off = valid ? slot_row_offset(p, raw, linear_slots, bs_shift, bs_mask) : 0;
      const uint8_t* const src = p.kv + row_off + 16 * sub;
      const uint32_t dst = cuda::smem_addr(sST) + (stage * BN + tok) * ROWB + 16 * sub;
#pragma unroll
      for (int i = 0; i < C::FULL; ++i) cuda::cp_async_16_s(dst + 128 * i, src + 128 * i, valid);
      static_assert(ROWB == 128 * C::FULL + 16, "a row: 128-byte blocks and one 16-byte chunk");
      if (sub == 0) {
        cuda::cp_async_16_s(dst + 128 * C::FULL, src + 128 * C::FULL, valid);
        sValid[stage * BN + tok] = valid ? 1 : 0;
      }
    }
  };
  const int raw0 = fetch_index(0);
  int raw_next = fetch_index(1);

  // ---- Q^T as B fragments. The loads are issued before tile 0's gather, which waits for its
  // slot indices, so both round trips overlap; the conversion runs while tile 0 is in flight.
  // Lane (g, c) takes head qh's dims 4c .. 4c+3 of every 16-dim latent segment (the order in
  // which the A fragments take the e4m3 bytes: f16 dims (4c, 4c+1) / (4c+2, 4c+3), bf16 (4c,
  // 4c+2) / (4c+1, 4c+3)) and rope dims 2c, 2c+1 and 2c+8, 2c+9 of every 16-dim rope step: 8
  // heads, every warp holds them in registers (qh = g); 16 heads, warps 0 and 1 store heads g
  // and 8 + g to shared memory, each pair of values at the position of its B fragment in the
  // k16 step (2c; 8 + 2c), so that ldmatrix hands every lane its fragments of both n8 tiles.
  // Heads past `heads` are zero. ----
  uint32_t qlat[kQInSmem ? 1 : 32][2], qrope[kQInSmem ? 1 : 4][2];
  float head_factor[NT][2];  // heads 8nt + 2c, +1: 2^(E_head - kQExp + kKExp), the latent partial's factor
  {
    const int qh = (kQInSmem ? 8 * warp : 0) + g;
    const bool stager = !kQInSmem || warp < NT;
    const bool live = stager && qh < heads;
    const __nv_bfloat16* const src = p.q + grp * p.q_sg + (live ? qh : 0) * p.q_sh;
    const __nv_bfloat16* const rope_src = ROPE ? p.q_rope + grp * p.qr_sg + (live ? qh : 0) * p.qr_sh : nullptr;
    uint2 raw[32];
#pragma unroll
    for (int s = 0; s < 32; ++s) raw[s] = live ? *reinterpret_cast<const uint2*>(src + 16 * s + 4 * c) : make_uint2(0, 0);
    uint32_t rope_raw[ROPE ? 4 : 1][2];
#pragma unroll
    for (int r = 0; r < (ROPE ? 4 : 0); ++r) {
      rope_raw[r][0] = live ? *reinterpret_cast<const uint32_t*>(rope_src + 16 * r + 2 * c) : 0u;
      rope_raw[r][1] = live ? *reinterpret_cast<const uint32_t*>(rope_src + 16 * r + 8 + 2 * c) : 0u;
    }
    if (n_tiles > 0) issue_tile(0, 0, raw0);
    cuda::cp_async_commit();
    float mx = 0.f;
#pragma unroll
    for (int s = 0; s < 32; ++s) {
      const uint32_t w[2] = {raw[s].x, raw[s].y};
#pragma unroll
      for (int i = 0; i < 2; ++i)
        mx = fmaxf(mx, fmaxf(fabsf(__uint_as_float(w[i] << 16)), fabsf(__uint_as_float(w[i] & 0xFFFF0000u))));
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const int ebits = static_cast<int>((__float_as_uint(mx) >> 23) & 0xFF);
    const int E = ebits == 0 ? -126 : (ebits > 254 ? 127 : ebits - 127);
    // q * 2^(kQExp - E) as two exact power-of-two products (each factor a normal float)
    const int k2 = kQExp - E, k1 = k2 / 2;
    const float s1 = __uint_as_float(static_cast<uint32_t>(127 + k1) << 23);
    const float s2 = __uint_as_float(static_cast<uint32_t>(127 + k2 - k1) << 23);
    // 16 heads: head qh's row of Q^T, as 32-bit pairs of 16-bit values
    uint32_t* const q_row = sQ32 + qh * (C::QSTRIDE / 2);
#pragma unroll
    for (int s = 0; s < 32; ++s) {
      const float d0 = __uint_as_float(raw[s].x << 16) * s1 * s2;
      const float d1 = __uint_as_float(raw[s].x & 0xFFFF0000u) * s1 * s2;
      const float d2 = __uint_as_float(raw[s].y << 16) * s1 * s2;
      const float d3 = __uint_as_float(raw[s].y & 0xFFFF0000u) * s1 * s2;
      const uint32_t lo = kF16 ? pack_f16x2(d0, d1) : pack_bf16x2(d0, d2);
      const uint32_t hi = kF16 ? pack_f16x2(d2, d3) : pack_bf16x2(d1, d3);
      if constexpr (kQInSmem) {
        if (stager) {
          q_row[8 * s + c] = lo;
          q_row[8 * s + 4 + c] = hi;
        }
      } else {
        qlat[s][0] = lo;
        qlat[s][1] = hi;
      }
    }
#pragma unroll
    for (int r = 0; r < (ROPE ? 4 : 0); ++r) {
      if constexpr (kQInSmem) {
        if (stager) {
          q_row[256 + 8 * r + c] = rope_raw[r][0];
          q_row[256 + 8 * r + 4 + c] = rope_raw[r][1];
        }
      } else {
        qrope[r][0] = rope_raw[r][0];
        qrope[r][1] = rope_raw[r][1];
      }
    }
    const float f = ldexpf(1.f, E - kQExp + kKExp);
    if constexpr (kQInSmem) {
      // every head's factor through shared memory, to the lanes that hold heads 8nt + 2c, +1
      if (stager && c == 0) sFactor[qh] = f;
      __syncthreads();
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) head_factor[nt][e] = sFactor[8 * nt + 2 * c + e];
    } else {
      // the factor of head g, handed to the lanes that hold heads 2c and 2c+1 in S^T
      head_factor[0][0] = __shfl_sync(0xffffffffu, f, (2 * c) * 4);
      head_factor[0][1] = __shfl_sync(0xffffffffu, f, (2 * c + 1) * 4);
    }
  }
  // 16 heads: this lane's ldmatrix row of Q^T: matrix lane / 8 = (heads 0-7 | 8-15) x (k 0-7 |
  // 8-15) of a k16 step, i.e. the B fragments (b0, b1) of n tile 0, then of n tile 1
  const uint32_t q_ld = cuda::smem_addr(sQ32) + ((lane & 7) + 8 * (lane >> 4)) * (C::QSTRIDE * 2) + ((lane >> 3) & 1) * 16;

  // Softmax state: the reference max of head lane % NH (the same in every warp), the lane's
  // partial sums of heads 8nt + 2c, +1 over its tokens.
  float m_ref = -INFINITY;
  float l_part[NT][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) l_part[nt][0] = l_part[nt][1] = 0.f;
  int e_ref = -1000;  // scale exponent reference of group `warp` (unset)
  const float scale_log2 = p.scale * 1.4426950408889634f;
  // n tile nt, m tiles 2jb (even dims) / 2jb+1 (odd dims) of 32-dim block jb; cols heads 8nt + 2c, +1
  float O[NT][8][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int m = 0; m < 8; ++m)
#pragma unroll
      for (int e = 0; e < 4; ++e) O[nt][m][e] = 0.f;

  for (int j = 0; j < n_tiles; ++j) {
    cuda::cp_async_wait<0>();
    __syncthreads();  // tile j landed; every warp is done with tile j-1 (its stage, P, maxima)
    if (j + 1 < n_tiles) issue_tile(j + 1, (j + 1) % NSTAGE, raw_next);
    cuda::cp_async_commit();
    raw_next = fetch_index(j + 2);
    const int stage = j % NSTAGE;
    const uint8_t* const st = sST + stage * BN * ROWB;
    const uint32_t st_u32 = cuda::smem_addr(st);

    // ---------------- QK: S^T for tokens 16w .. 16w+15 ----------------
    float acc[NT][5][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int a = 0; a < 5; ++a)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[nt][a][e] = 0.f;
    // A rows: token 16w + (lane & 15), bytes + 16 (lane >> 4): matrices (tokens 0-7, bytes
    // 0-15), (8-15, 0-15), (0-7, 16-31), (8-15, 16-31) of a 32-byte block
    const uint32_t a_base = st_u32 + (16 * warp + (lane & 15)) * ROWB + (lane >> 4) * 16;
#pragma unroll
    for (int b = 0; b < 4; ++b) {  // block b of each scale group: four independent accumulators
#pragma unroll
      for (int sg = 0; sg < 4; ++sg) {
        const int blk = 4 * sg + b;  // 32-byte block of the latent part: segments 2 blk, 2 blk + 1
        uint32_t r[4];
        ldmatrix_x4(r, a_base + 32 * blk);
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // segment 2 blk + h: matrices (2h, 2h+1)
          const int seg = 2 * blk + h;
          uint32_t qb[2 * NT];
          if constexpr (kQInSmem) {
            ldmatrix_x4(reinterpret_cast<uint32_t(&)[4]>(qb), q_ld + 32 * seg);
          } else {
            qb[0] = qlat[seg][0];
            qb[1] = qlat[seg][1];
          }
          uint32_t a[4];
          if constexpr (kF16) {
            a[0] = e4m3x2_to_f16x2(r[2 * h]);
            a[1] = e4m3x2_to_f16x2(r[2 * h + 1]);
            a[2] = e4m3x2_hi_to_f16x2(r[2 * h]);
            a[3] = e4m3x2_hi_to_f16x2(r[2 * h + 1]);
          } else {
            a[0] = e4m3x4_even_to_bf16x2(r[2 * h]);
            a[1] = e4m3x4_even_to_bf16x2(r[2 * h + 1]);
            a[2] = e4m3x4_odd_to_bf16x2(r[2 * h]);
            a[3] = e4m3x4_odd_to_bf16x2(r[2 * h + 1]);
          }
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            if constexpr (kF16) {
              mma_f16_m16n8k16(acc[nt][sg], a, qb[2 * nt], qb[2 * nt + 1]);
            } else {
              mma_bf16_m16n8k16(acc[nt][sg], a, qb[2 * nt], qb[2 * nt + 1]);
            }
          }
        }
      }
    }
#pragma unroll
    for (int r4 = 0; r4 < (ROPE ? 4 : 0); ++r4) {  // rope: bf16 at byte 528, 16 dims (32 bytes) per k16 step
      uint32_t a[4];
      ldmatrix_x4(a, a_base + 528 + 32 * r4);
      uint32_t qb[2 * NT];
      if constexpr (kQInSmem) {
        ldmatrix_x4(reinterpret_cast<uint32_t(&)[4]>(qb), q_ld + 1024 + 32 * r4);
      } else {
        qb[0] = qrope[r4][0];
        qb[1] = qrope[r4][1];
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mma_bf16_m16n8k16(acc[nt][4], a, qb[2 * nt], qb[2 * nt + 1]);
    }
    // S (log2 units) = (sum over groups of acc x token scale) x head factor + rope; -inf where
    // the slot is invalid. x[nt][2 hr + e]: token 16w + g + 8 hr, head 8nt + 2c + e.
    float x[NT][4];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int tok = 16 * warp + g + 8 * hr;
      const float4 s = *reinterpret_cast<const float4*>(st + tok * ROWB + 512);
      const bool ok = sValid[stage * BN + tok] != 0;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int i = 2 * hr + e;
          float lat = acc[nt][0][i] * s.x;
          lat = fmaf(acc[nt][1][i], s.y, lat);
          lat = fmaf(acc[nt][2][i], s.z, lat);
          lat = fmaf(acc[nt][3][i], s.w, lat);
          const float v = ROPE ? fmaf(lat, head_factor[nt][e], acc[nt][4][i]) : lat * head_factor[nt][e];
          x[nt][i] = ok ? v * scale_log2 : -INFINITY;
        }
    }

    // ---------------- softmax, speculative lazy rescaling ----------------
    float mx[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      mx[nt][0] = fmaxf(x[nt][0], x[nt][2]);
      mx[nt][1] = fmaxf(x[nt][1], x[nt][3]);
#pragma unroll
      for (int off = 4; off < 32; off <<= 1) {
        mx[nt][0] = fmaxf(mx[nt][0], __shfl_xor_sync(0xffffffffu, mx[nt][0], off));
        mx[nt][1] = fmaxf(mx[nt][1], __shfl_xor_sync(0xffffffffu, mx[nt][1], off));
      }
    }
    auto write_p = [&](const float (&mu)[NT][2]) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        float pv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) pv[i] = fast_exp2(x[nt][i] - mu[nt][i & 1]);
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int tok = 16 * warp + g + 8 * hr;
          sP[(8 * nt + 2 * c) * PSTRIDE + tok] = pv[2 * hr];
          sP[(8 * nt + 2 * c + 1) * PSTRIDE + tok] = pv[2 * hr + 1];
        }
        l_part[nt][0] += pv[0] + pv[2];
        l_part[nt][1] += pv[1] + pv[3];
      }
    };
    // this lane's heads' references (held by lanes 8nt + 2c, +1)
    float mu[NT][2], l_save[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float m = __shfl_sync(0xffffffffu, m_ref, 8 * nt + 2 * c + e);
        mu[nt][e] = m == -INFINITY ? 0.f : m;
        l_save[nt][e] = l_part[nt][e];
      }
    write_p(mu);
    if (g == 0) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        sMax[warp * NH + 8 * nt + 2 * c] = mx[nt][0];
        sMax[warp * NH + 8 * nt + 2 * c + 1] = mx[nt][1];
      }
    }
    __syncthreads();  // P (speculative) and every warp's tile maxima
    // lane l checks entries l (and l + 32) of the [warp][head] maxima: head l % NH, whose
    // reference it holds
    bool over = sMax[lane] > m_ref + kLazyRescale;
    if constexpr (NH == 16) over = over || sMax[32 + lane] > m_ref + kLazyRescale;
    const unsigned bump = __ballot_sync(0xffffffffu, over);
    float alpha[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) alpha[nt][0] = alpha[nt][1] = 1.f;
    if (bump != 0) {
      // A head's reference moves to its tile max over all warps (the same in every warp); the
      // warps recompute their P with it. Rare: the first tiles of a split.
      const int h = lane % NH;
      constexpr unsigned kHeadLanes = NH == 8 ? 0x01010101u : 0x00010001u;  // the lanes of head 0
      float a = 1.f;
      if ((bump & (kHeadLanes << h)) != 0) {
        const float t = fmaxf(fmaxf(sMax[h], sMax[NH + h]), fmaxf(sMax[2 * NH + h], sMax[3 * NH + h]));
        a = fast_exp2(m_ref - t);  // 0 when the reference was -inf
        m_ref = t;
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          alpha[nt][e] = __shfl_sync(0xffffffffu, a, 8 * nt + 2 * c + e);
          const float m = __shfl_sync(0xffffffffu, m_ref, 8 * nt + 2 * c + e);
          mu[nt][e] = m == -INFINITY ? 0.f : m;  // a head with no finite score yet (non-finite inputs)
          l_part[nt][e] = l_save[nt][e] * alpha[nt][e];
        }
      write_p(mu);
      __syncthreads();  // the recomputed P
    }

    // ---------------- PV: O^T[dims of group w] += V^T P'^T ----------------
    // the tile's largest group-w scale decides whether e_ref moves (rescaling O exactly)
    float smax = fmaxf(*reinterpret_cast<const float*>(st + lane * ROWB + 512 + 4 * warp),
                       *reinterpret_cast<const float*>(st + (lane + 32) * ROWB + 512 + 4 * warp));
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) smax = fmaxf(smax, __shfl_xor_sync(0xffffffffu, smax, off));
    float sigma = 1.f;  // O's factor when e_ref moves
    if (smax > 0.f && smax >= ldexpf(1.f, e_ref + kScaleHeadroom)) {
      const int e_new = static_cast<int>((__float_as_uint(smax) >> 23) & 0xFF) - 127;
      sigma = e_ref == -1000 ? 1.f : ldexpf(1.f, e_ref - e_new);
      e_ref = e_new;
    }
    bool unit = sigma == 1.f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) unit = unit && alpha[nt][0] == 1.f && alpha[nt][1] == 1.f;
    if (!__all_sync(0xffffffffu, unit)) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int m = 0; m < 8; ++m) {
          O[nt][m][0] *= alpha[nt][0] * sigma;
          O[nt][m][1] *= alpha[nt][1] * sigma;
          O[nt][m][2] *= alpha[nt][0] * sigma;
          O[nt][m][3] *= alpha[nt][1] * sigma;
        }
    }
    const float inv_ref = e_ref == -1000 ? 0.f : ldexpf(kPvScale, -e_ref);  // unset: every scale so far is 0
    // V^T rows: token 16kk + (lane & 7) + 8 (lane >> 4), bytes + 16 ((lane >> 3) & 1):
    // matrices (tokens 0-7, bytes 0-15), (0-7, 16-31), (8-15, 0-15), (8-15, 16-31)
    const uint32_t v_base =
        st_u32 + ((lane & 7) + ((lane >> 4) << 3)) * ROWB + 128 * warp + ((lane >> 3) & 1) * 16;
    const float* const sc_w = reinterpret_cast<const float*>(st + 512 + 4 * warp);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      // B = P'^T: tokens 16kk + 2c, +1, +8, +9 of head 8nt + g
      const int t0 = 16 * kk + 2 * c;
      const float r0 = sc_w[t0 * (ROWB / 4)] * inv_ref, r1 = sc_w[(t0 + 1) * (ROWB / 4)] * inv_ref;
      const float r2 = sc_w[(t0 + 8) * (ROWB / 4)] * inv_ref, r3 = sc_w[(t0 + 9) * (ROWB / 4)] * inv_ref;
      uint32_t b0[NT], b1[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const float2 p0 = *reinterpret_cast<const float2*>(&sP[(8 * nt + g) * PSTRIDE + t0]);
        const float2 p1 = *reinterpret_cast<const float2*>(&sP[(8 * nt + g) * PSTRIDE + t0 + 8]);
        b0[nt] = kF16 ? pack_f16x2(p0.x * r0, p0.y * r1) : pack_bf16x2(p0.x * r0, p0.y * r1);
        b1[nt] = kF16 ? pack_f16x2(p1.x * r2, p1.y * r3) : pack_bf16x2(p1.x * r2, p1.y * r3);
      }
#pragma unroll
      for (int jb = 0; jb < 4; ++jb) {  // 32-dim block jb of the warp's 128 dims
        uint32_t r[4];
        ldmatrix_x4_trans(r, v_base + 16 * kk * ROWB + 32 * jb);
        // lane (g, c) holds tokens 2c, 2c+1 (r[0], r[1]; +8: r[2], r[3]) at bytes 2g, 2g+1 of
        // a 16-byte segment: even bytes = dim 2g, odd bytes = dim 2g + 1
        uint32_t ae[4], ao[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if constexpr (kF16) {
            const uint32_t pr = byte_perm(r[i], 0, 0x3120);  // bytes 0, 2 | 1, 3
            ae[i] = e4m3x2_to_f16x2(pr);
            ao[i] = e4m3x2_hi_to_f16x2(pr);
          } else {
            ae[i] = e4m3x4_even_to_bf16x2(r[i]);
            ao[i] = e4m3x4_odd_to_bf16x2(r[i]);
          }
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          if constexpr (kF16) {
            mma_f16_m16n8k16(O[nt][2 * jb], ae, b0[nt], b1[nt]);
            mma_f16_m16n8k16(O[nt][2 * jb + 1], ao, b0[nt], b1[nt]);
          } else {
            mma_bf16_m16n8k16(O[nt][2 * jb], ae, b0[nt], b1[nt]);
            mma_bf16_m16n8k16(O[nt][2 * jb + 1], ao, b0[nt], b1[nt]);
          }
        }
      }
    }
  }
  cuda::cp_async_wait<0>();

  // ---------------- epilogue ----------------
  // each head's sum: the lanes' partials over g, then the warps' in warp order
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
      l_part[nt][0] += __shfl_xor_sync(0xffffffffu, l_part[nt][0], off);
      l_part[nt][1] += __shfl_xor_sync(0xffffffffu, l_part[nt][1], off);
    }
  if (g == 0) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      sLsum[warp * NH + 8 * nt + 2 * c] = l_part[nt][0];
      sLsum[warp * NH + 8 * nt + 2 * c + 1] = l_part[nt][1];
    }
  }
  __syncthreads();
  const bool direct = nsplit_g == 1;
  const float out_factor = ldexpf(kOutFactor, e_ref == -1000 ? 0 : e_ref);
  float m_head[NT][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) m_head[nt][e] = __shfl_sync(0xffffffffu, m_ref, 8 * nt + 2 * c + e);
#pragma unroll
  for (int ne = 0; ne < 2 * NT; ++ne) {
    const int nt = ne >> 1, e = ne & 1;
    const int h = 8 * nt + 2 * c + e;
    if (h >= heads) continue;
    const float l = ((sLsum[h] + sLsum[NH + h]) + sLsum[2 * NH + h]) + sLsum[3 * NH + h];
    const float mm = m_head[nt][e];
    const float inv = l > 0.f ? out_factor / l : 0.f;
    __nv_bfloat16* const dst =
        direct ? p.out + grp * p.o_sg + h * p.o_sh : la.part_o + ((g_local * heads + h) * la.nsplit + split) * 512;
#pragma unroll
    for (int jb = 0; jb < 4; ++jb) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        // rows g (+8 for hr = 1) of the even / odd m tiles: dims d, d + 1
        const int d = 128 * warp + 32 * jb + 16 * hr + 2 * g;
        *reinterpret_cast<uint32_t*>(dst + d) =
            pack_bf16x2(O[nt][2 * jb][2 * hr + e] * inv, O[nt][2 * jb + 1][2 * hr + e] * inv);
      }
    }
    if (warp == 0 && g == 0) {
      const float lse2 = l > 0.f ? mm + __log2f(l) : -INFINITY;
      if (direct) {
        if (p.lse != nullptr) p.lse[grp * p.l_sg + h * p.l_sh] = lse2 * 0.6931471805599453f;
      } else {
        la.part_lse[(g_local * heads + h) * la.nsplit + split] = lse2;
      }
    }
  }
  if (direct) return;
  if (!last_to_arrive(la.counters + g_local, nsplit_g, sFlag)) return;
  // per n8 tile of heads: two rows per warp, whose splits' loads are in flight together (four
  // rows per warp would load one split at a time)
#pragma unroll 1
  for (int nt = 0; nt < NT; ++nt) combine_splits<C::kWarps, 8 / C::kWarps, false>(p, la, g_local, grp, 8 * nt, heads, nsplit_g);
}

template <bool ROPE, int NH>
void launch_fewheads(int device, int64_t grid, const MlaParams& p, const LaunchArgs& la, cudaStream_t stream) {
  using C = FewHeadsCfg<ROPE, NH>;
  auto* kernel = &mla_sparse_fp8_fewheads_kernel<ROPE, NH>;
  static std::atomic<uint64_t> done{0};
  cuda::allow_dynamic_smem(kernel, C::SMEM, device, done);
  kernel<<<static_cast<unsigned>(grid), C::kThreads, C::SMEM, stream>>>(p, la);
  LATTE_CUDA_CHECK_LAUNCH(NH == 8 ? (ROPE ? "mla_sparse_fp8_fewheads_kernel<8 heads>"
                                         : "mla_sparse_fp8_fewheads_kernel<8 heads, no rope>")
                                  : (ROPE ? "mla_sparse_fp8_fewheads_kernel<16 heads>"
                                          : "mla_sparse_fp8_fewheads_kernel<16 heads, no rope>"));
}

}  // namespace

// The configuration with rope (the larger one: the plan's choice holds for both).
std::size_t sparse_fp8_fewheads_smem_bytes(int heads) {
  return heads <= 8 ? FewHeadsCfg<true, 8>::SMEM : FewHeadsCfg<true, 16>::SMEM;
}

void launch_sparse_fp8_fewheads(int device, int64_t grid, const MlaParams& p, const LaunchArgs& la,
                                cudaStream_t stream) {
  if (p.heads <= 8) {
    (p.rope ? launch_fewheads<true, 8> : launch_fewheads<false, 8>)(device, grid, p, la, stream);
  } else {
    (p.rope ? launch_fewheads<true, 16> : launch_fewheads<false, 16>)(device, grid, p, la, stream);
  }
}

}  // namespace latte::cuda_sparse_mla
