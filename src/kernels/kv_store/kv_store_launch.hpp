// The CUDA cache-write launchers: raw device pointers, strides in elements, launched on a
// stream (plain C++17, for .cu files too; kv_store_run.hpp takes latte's problems). slot_mapping
// entries that are -1, negative or past the cache skip the token (check mode reports them instead).
#pragma once

#include <cstddef>
#include <cstdint>

namespace latte::cuda_kv_store {

struct KvStoreParams {
  const void* latent = nullptr;  // [T, 512] bf16
  int64_t lat_st = 0;
  const void* rope = nullptr;    // [T, 64] bf16; null: rows without rope (512 bf16 / 528 bytes)
  int64_t rope_st = 0;
  const int32_t* slot_mapping = nullptr;  // [T]
  int64_t sm_s = 0;
  void* cache = nullptr;  // bf16 [nb, bs, 576 | 512] (elements) or u8 [nb, bs, 656 | 528] (bytes)
  int64_t cache_sb = 0, cache_st = 0;  // block and token strides in elements
  int num_blocks = 0, block_size = 0;
  int64_t tokens = 0;
  bool fp8 = false;  // fp8_ds_mla
  int pow2 = 0;      // Fp8ScaleKind::pow2
  bool vec = false;  // every row 16-byte aligned: vector loads and stores
};

struct IndexerKStoreParams {
  const void* k = nullptr;  // [T, 128] bf16
  int64_t k_st = 0;
  const int32_t* slot_mapping = nullptr;
  int64_t sm_s = 0;
  uint8_t* k_cache = nullptr;  // pages, 16-byte aligned
  int64_t page_stride = 0;     // bytes
  int num_blocks = 0, block_size = 0;
  int64_t tokens = 0;
  int pow2 = 0;
};

struct LogicalToSlotsParams {
  const int32_t* positions = nullptr;  // [T, K]
  int64_t pos_st = 0, pos_sc = 0;
  const int32_t* block_table = nullptr;  // [B, max_blocks]
  int64_t bt_sr = 0, bt_sc = 0;
  int batch = 0, max_blocks = 0;
  const int32_t* token_request = nullptr;  // [T] or null
  int64_t tr_s = 0;
  int32_t* slots = nullptr;  // [T, K]
  int64_t out_st = 0, out_sc = 0;
  int64_t tokens = 0, width = 0;
  int block_size = 0;
};

// indexer_pool_store (docs/operations.md): strides in elements of each tensor's dtype (k_cache in
// bytes). Tokens are live when pos >= 0, 0 <= row < batch, pos < max_blocks * block size and the
// block is in 0..num_blocks-1.
struct IndexerPoolStoreParams {
  const void* k = nullptr;  // [T, 128] bf16
  int64_t k_st = 0;
  const void* gate = nullptr;  // [T, 128] bf16 or f32
  int64_t gate_st = 0;
  bool gate_f32 = false;
  const void* ape = nullptr;  // [kpool, 128] f32 or bf16
  int64_t ape_st = 0;
  bool ape_f32 = false;
  const int32_t* positions = nullptr;  // [T]
  int64_t pos_s = 0;
  const int32_t* token_request = nullptr;  // [T] or null (row t)
  int64_t tr_s = 0;
  const int32_t* block_table = nullptr;  // [B, max_blocks]
  int64_t bt_sr = 0, bt_sc = 0;
  uint8_t* k_cache = nullptr;  // [nb, pool_rows, 132] pages, 16-byte aligned
  int64_t page_stride = 0;     // bytes
  float* pool_state = nullptr;  // [B, kpool - 1, 2, 128] f32
  int64_t ps_sr = 0, ps_ss = 0, ps_sk = 0;  // row, slot, k/gate strides
  int64_t tokens = 0, batch = 0, max_blocks = 0, num_blocks = 0;
  int kpool = 0, pool_rows = 0;  // block size = kpool * pool_rows tokens
  int pow2 = 0;
  bool hadamard = false;
  void* workspace = nullptr;  // pool_store_workspace_bytes(tokens) bytes, 16-byte aligned
};

// The workspace indexer_pool_store needs for a call of `tokens` tokens: two open-addressing hash
// tables of 16-byte entries, each of capacity bit_ceil(2 * tokens) (0 for tokens <= 0).
std::size_t pool_store_workspace_bytes(int64_t tokens);

void launch_kv_store(const KvStoreParams& p, void* stream);
void launch_indexer_k_store(const IndexerKStoreParams& p, void* stream);
void launch_logical_to_slots(const LogicalToSlotsParams& p, void* stream);
// Four launches on `stream` (clear the tables, insert the live tokens, the pool keys, the state):
// no host synchronization, capturable in a CUDA graph.
void launch_indexer_pool_store(const IndexerPoolStoreParams& p, void* stream);

}  // namespace latte::cuda_kv_store
