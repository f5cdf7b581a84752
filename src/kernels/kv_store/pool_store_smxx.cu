// cuda.kv_store: indexer_pool_store (docs/operations.md, "indexer_pool_store"), the pooled
// indexer's keys of GLM-5.3-Flash, byte for byte as cpu.reference (reference_pool_store.cpp).
//
// The op's rules are order free, so the tokens are handled in parallel through two hash tables
// in the workspace (open addressing, linear probing, capacity bit_ceil(2 T): at most half full):
//   positions: key (row << 32) | pos  -> the highest t of the call's live tokens there;
//   slots:     key (row << 32) | slot -> the highest t of the live tokens of slot < kpool - 1.
// Four launches in stream order, no host synchronization (CUDA-graph capturable):
//   1. clear both tables (key all ones = empty, t = -1);
//   2. one thread per live token: insert its (row, pos) and, below the last slot, its
//      (row, slot), each with atomicCAS on the key then atomicMax on t: the result is the
//      highest t whatever the order;
//   3. one warp per live token of slot kpool - 1 that is its position's last token (so a
//      position the call holds twice lands the later token's key, as cpu.reference, and two
//      warps never write one row): the pool's slots from the call (positions table) or from
//      pool_state as before the call; the softmax mix in float64 with the maximum subtracted
//      first, the sums in cpu.reference's order without contraction (explicit _rn operations);
//      bf16 through float; the Hadamard rotation in float64 (each output summed in j order,
//      then times 1 / sqrt(128)), bf16 again; quantized by indexer_k_row.cuh, the row code
//      shared with indexer_k_store;
//   4. after 3 (which reads the old state): one warp per live token that is its (row, slot)'s
//      winner writes its (k, gate) as f32 into pool_state.
// exp is CUDA's double exp (at most 1 ulp from the correctly rounded value) where cpu.reference
// calls the host's std::exp: a pool value could round differently only when its float64 value
// lies within a few ulps of a float rounding boundary that also decides the bf16 rounding
// (tests/cuda_kv_store counts differing rows over a large random run).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/conversions.cuh"
#include "kernels/common/cuda_check.cuh"
#include "kernels/kv_store/indexer_k_row.cuh"
#include "kernels/kv_store/kv_store_launch.hpp"

namespace latte::cuda_kv_store {
namespace {

constexpr int kDim = 128;
constexpr int kMaxPool = 16;
constexpr int kWarps = 4;  // warps per CTA of the pool and state kernels
constexpr unsigned long long kEmpty = ~0ull;

struct alignas(16) Entry {
  unsigned long long key;
  int t;
  int pad;
};

__host__ __device__ inline uint64_t capacity_for(int64_t tokens) {
  uint64_t c = 2;
  while (c < static_cast<uint64_t>(2 * tokens)) c <<= 1;
  return c;
}

__device__ __forceinline__ uint64_t mix(uint64_t k) {  // murmur3 fmix64
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

__device__ __forceinline__ unsigned long long key_of(int64_t row, int64_t v) {
  return (static_cast<unsigned long long>(row) << 32) | static_cast<unsigned long long>(v);
}

__device__ void insert(Entry* table, uint64_t mask, unsigned long long key, int t) {
  uint64_t h = mix(key) & mask;
  while (true) {
    const unsigned long long prev = atomicCAS(&table[h].key, kEmpty, key);
    if (prev == kEmpty || prev == key) {
      atomicMax(&table[h].t, t);
      return;
    }
    h = (h + 1) & mask;
  }
}

// The highest t inserted under `key`, or -1. (Read in a later kernel than the inserts.)
__device__ int lookup(const Entry* table, uint64_t mask, unsigned long long key) {
  uint64_t h = mix(key) & mask;
  while (true) {
    const unsigned long long k = table[h].key;
    if (k == key) return table[h].t;
    if (k == kEmpty) return -1;
    h = (h + 1) & mask;
  }
}

struct Live {
  int64_t row, pos, block;
};

// Token t's request row, position and block when it is live (docs: pos >= 0, 0 <= row < B,
// pos < max_blocks * bs, block in 0..nb-1).
__device__ __forceinline__ bool live_of(const IndexerPoolStoreParams& p, int64_t t, Live& l) {
  const int64_t bs = static_cast<int64_t>(p.kpool) * p.pool_rows;
  l.row = p.token_request ? static_cast<int64_t>(p.token_request[t * p.tr_s]) : t;
  l.pos = p.positions[t * p.pos_s];
  if (l.row < 0 || l.row >= p.batch || l.pos < 0 || l.pos >= p.max_blocks * bs) return false;
  l.block = p.block_table[l.row * p.bt_sr + (l.pos / bs) * p.bt_sc];
  return l.block >= 0 && l.block < p.num_blocks;
}

__device__ __forceinline__ double read_value(const void* base, bool f32, int64_t index) {
  return f32 ? static_cast<double>(static_cast<const float*>(base)[index])
             : static_cast<double>(cuda::bf16_bits_to_float(static_cast<const uint16_t*>(base)[index]));
}

// formats.hpp bf16 rounding through float, as cpu.reference's bf16(float(x)).
__device__ __forceinline__ double bf16_value(double x) {
  return static_cast<double>(cuda::bf16_bits_to_float(cuda::float_to_bf16_bits(__double2float_rn(x))));
}

__global__ void clear_tables_kernel(Entry* tables, uint64_t entries) {
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < entries;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    tables[i].key = kEmpty;
    tables[i].t = -1;
    tables[i].pad = 0;
  }
}

__global__ void insert_tokens_kernel(IndexerPoolStoreParams p, Entry* positions, Entry* slots, uint64_t mask) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= p.tokens) return;
  Live l;
  if (!live_of(p, t, l)) return;
  insert(positions, mask, key_of(l.row, l.pos), static_cast<int>(t));
  const int64_t slot = l.pos % p.kpool;
  if (slot != p.kpool - 1) insert(slots, mask, key_of(l.row, slot), static_cast<int>(t));
}

__global__ void __launch_bounds__(32 * kWarps) pool_keys_kernel(IndexerPoolStoreParams p, const Entry* positions,
                                                                 uint64_t mask) {
  __shared__ int source[kWarps][kMaxPool];  // per slot: the call's token, or -1 = pool_state
  __shared__ double rotate_in[kWarps][kDim];
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (t >= p.tokens) return;
  Live l;
  const int kpool = p.kpool;
  // Warp-uniform exits: every lane reads the same token.
  if (!live_of(p, t, l) || l.pos % kpool != kpool - 1) return;
  if (lookup(positions, mask, key_of(l.row, l.pos)) != static_cast<int>(t)) return;  // a later t lands
  const int64_t first = l.pos - (kpool - 1);
  if (lane < kpool - 1) source[warp][lane] = lookup(positions, mask, key_of(l.row, first + lane));
  if (lane == kpool - 1) source[warp][lane] = static_cast<int>(t);
  __syncwarp();

  const float* state = p.pool_state + l.row * p.ps_sr;
  double key[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int d = 4 * lane + i;
    // Slot s's (gate + ape) and k at dimension d.
    const auto gate_plus_ape = [&](int s) {
      const int src = source[warp][s];
      const double g = src >= 0 ? read_value(p.gate, p.gate_f32, src * p.gate_st + d)
                                : static_cast<double>(state[s * p.ps_ss + p.ps_sk + d]);
      return __dadd_rn(g, read_value(p.ape, p.ape_f32, s * p.ape_st + d));
    };
    const auto k_at = [&](int s) {
      const int src = source[warp][s];
      return src >= 0 ? read_value(p.k, false, src * p.k_st + d) : static_cast<double>(state[s * p.ps_ss + d]);
    };
    double top = -INFINITY;
    for (int s = 0; s < kpool; ++s) {
      const double v = gate_plus_ape(s);
      top = top < v ? v : top;  // std::max(top, v)
    }
    double num = 0.0, den = 0.0;
    for (int s = 0; s < kpool; ++s) {
      const double e = exp(__dadd_rn(gate_plus_ape(s), -top));
      num = __dadd_rn(num, __dmul_rn(e, k_at(s)));
      den = __dadd_rn(den, e);
    }
    key[i] = bf16_value(__ddiv_rn(num, den));
  }
  if (p.hadamard) {
#pragma unroll
    for (int i = 0; i < 4; ++i) rotate_in[warp][4 * lane + i] = key[i];
    __syncwarp();
    const double norm = __ddiv_rn(1.0, __dsqrt_rn(static_cast<double>(kDim)));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int d = 4 * lane + i;
      double sum = 0.0;
      for (int j = 0; j < kDim; ++j) {
        const double x = rotate_in[warp][j];
        sum = __dadd_rn(sum, (__popc(d & j) & 1) ? -x : x);
      }
      key[i] = bf16_value(__dmul_rn(sum, norm));
    }
  }
  float x[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) x[i] = static_cast<float>(key[i]);  // bf16 values: exact
  const int64_t bs = static_cast<int64_t>(kpool) * p.pool_rows;
  store_indexer_k_row(x, p.k_cache + l.block * p.page_stride, p.pool_rows, (l.pos % bs) / kpool, p.pow2);
}

__global__ void __launch_bounds__(32 * kWarps) state_kernel(IndexerPoolStoreParams p, const Entry* slots,
                                                             uint64_t mask) {
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (t >= p.tokens) return;
  Live l;
  if (!live_of(p, t, l)) return;
  const int64_t slot = l.pos % p.kpool;
  if (slot == p.kpool - 1 || lookup(slots, mask, key_of(l.row, slot)) != static_cast<int>(t)) return;
  float* k_out = p.pool_state + l.row * p.ps_sr + slot * p.ps_ss;
  float* gate_out = k_out + p.ps_sk;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int d = 4 * lane + i;
    k_out[d] = static_cast<float>(read_value(p.k, false, t * p.k_st + d));
    gate_out[d] = static_cast<float>(read_value(p.gate, p.gate_f32, t * p.gate_st + d));
  }
}

unsigned grid_for(int64_t items, int64_t per_block) {
  return static_cast<unsigned>((items + per_block - 1) / per_block);
}

}  // namespace

std::size_t pool_store_workspace_bytes(int64_t tokens) {
  if (tokens <= 0) return 0;
  return static_cast<std::size_t>(2 * capacity_for(tokens) * sizeof(Entry));
}

void launch_indexer_pool_store(const IndexerPoolStoreParams& p, void* stream) {
  if (p.tokens <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const uint64_t capacity = capacity_for(p.tokens), mask = capacity - 1;
  auto* positions = static_cast<Entry*>(p.workspace);
  Entry* slots = positions + capacity;
  const uint64_t entries = 2 * capacity;
  const uint64_t clear_blocks = (entries + 255) / 256;
  clear_tables_kernel<<<static_cast<unsigned>(clear_blocks < 4096 ? clear_blocks : 4096), 256, 0, s>>>(positions,
                                                                                                       entries);
  LATTE_CUDA_CHECK_LAUNCH("indexer_pool_store (clear)");
  insert_tokens_kernel<<<grid_for(p.tokens, 256), 256, 0, s>>>(p, positions, slots, mask);
  LATTE_CUDA_CHECK_LAUNCH("indexer_pool_store (insert)");
  pool_keys_kernel<<<grid_for(p.tokens, kWarps), 32 * kWarps, 0, s>>>(p, positions, mask);
  LATTE_CUDA_CHECK_LAUNCH("indexer_pool_store (pool keys)");
  state_kernel<<<grid_for(p.tokens, kWarps), 32 * kWarps, 0, s>>>(p, slots, mask);
  LATTE_CUDA_CHECK_LAUNCH("indexer_pool_store (state)");
}

}  // namespace latte::cuda_kv_store
