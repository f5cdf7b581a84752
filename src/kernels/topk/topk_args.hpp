// The top-k kernels' arguments (topk_kernel.cuh, launched by topk_launch.cu): the row source
// (f32 scores, u32 score keys or (key, position) candidates), the rows' visible lengths and
// block_table rows, the output. Host and device code.
#pragma once

#include <cstdint>

namespace latte::cuda {

constexpr int kTopkThreads = 1024;
constexpr int kSamples = 4096;

enum TopkSource : int { kSrcF32 = 0, kSrcKeys = 1, kSrcCands = 2 };

struct TopkArgs {
  int rows, topk;
  const float* f32;          // kSrcF32
  const uint32_t* keys;      // kSrcKeys / kSrcCands
  const int32_t* cpos;       // kSrcCands
  int64_t ld;                // row stride of the source (elements)
  int vec;                   // rows are 16-byte aligned and ld % 4 == 0
  int64_t n_fixed;           // kSrcF32: row length; kSrcCands: pairs per row
  const int32_t* vl;         // kSrcKeys / kSrcCands: visible lengths
  int64_t vl_s;
  int vl_div;                // > 1: visible lengths count vl_div units per position (IndexerParams)
  const int32_t* tr;
  int64_t tr_s;
  int batch;
  int64_t max_len;
  int32_t* out;
  int64_t out_sr, out_sc;
  int physical;
  const int32_t* bt;
  int64_t bt_sr, bt_sc;
  int max_blocks, block_size, num_blocks;
  int cap;            // candidate buffer entries (>= kSamples, >= topk)
  int bitmap_words;   // words of the position bitmap
  const int* cand_count;  // kSrcCands: pairs in row r (at most ld; else n_fixed); null: n_fixed
  int dense;              // kSrcCands: no empty entries (key 0) among the n pairs
  unsigned long long* prof;  // measurements (LATTE_CUDA_TOPK_PROF=1): phase times of row 0, else null
  // The pooled indexer (topk_pooled_output.cuh), expand > 0: the row's positions are pools of
  // `expand` tokens; each selected one is written as its tokens, then (exp_tail) the incomplete
  // pool, then -1 up to exp_width columns; exp_lens (optional) gets each row's count.
  int expand, exp_tail, exp_width;
  int32_t* exp_lens;
  int64_t exp_lens_s;
  // Fused path (topk_fused_final_kernel's repair source): each row's admission threshold and
  // candidate list capacity, which tell whether the row was repaired.
  const uint32_t* repair_tau;
  int repair_cap;
};

// Rows split over several CTAs (topk_kernel.cuh, "Rows split over several CTAs"): the
// workspace of the histogram, collect and final kernels.
struct SplitArgs {
  int slices;           // S
  int slice_len;        // L, a multiple of kSplitChunk, at most kSplitMaxLen
  int list_cap;         // entries of a row's candidate list (<= the final kernel's cap)
  int* hist;            // [rows][S][kSplitBins]
  uint32_t* list_keys;  // [rows][list_cap]
  int32_t* list_pos;    // [rows][list_cap]
  int* list_count;      // [rows]: candidates, or -1 (the whole row is selected instead)
};

constexpr int kSplitBins = 2048;
constexpr int kSplitShift = 21;                   // digit = key >> 21 (top 11 bits)
constexpr int kSplitChunk = 4 * kTopkThreads;     // keys per CTA per vector load
constexpr int kSplitMaxVec = 4;
constexpr int kSplitMaxLen = kSplitMaxVec * kSplitChunk;

// Few rows each spread over many CTAs with grid barriers (topk_spread_grid_barrier.cuh).
constexpr int kSpreadThreads = 512;
constexpr int kSpreadBins = 2048;     // the first two passes' 11-bit digits; the third has 10
constexpr int kSpreadPasses = 3;
constexpr int kSpreadListCap = 128;   // the bin keys every CTA ranks directly
constexpr int kSpreadStateWords = 8;  // per row: [0] barrier arrivals, [1] list entries
constexpr int kSpreadMaxSlice = 16384;  // keys per CTA (64 KB of shared memory)
constexpr int kSpreadFirstShift = 21;   // the first pass's digit: key >> 21 (top 11 bits)

struct SpreadArgs {
  int slices;          // S CTAs per row
  int slice_len;       // L positions per CTA, a multiple of 4
  int rows;
  int first_ready;     // 1: the first pass's histograms come counted (the keys' pass counted them)
  unsigned* state;     // [rows][kSpreadStateWords], zero at the start
  int* hist;           // [kSpreadPasses][rows][kSpreadBins], right after state: the first two
                       // passes' zero at the start (or the first pass counted), the last cleared
                       // by the kernel
  int* counts;         // [rows][S][2]
  uint64_t* list;      // [rows][kSpreadListCap]
};

}  // namespace latte::cuda
