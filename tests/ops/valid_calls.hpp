// Small, valid calls of every op on owned host tensors, for tests that break one thing at a
// time (validate_test.cpp) or that need a working call (reference_backend_test.cpp).
#pragma once

#include <random>

#include "ops_test_util.hpp"

namespace latte::testing {

struct ValidCalls {
  // Shared sizes: 4 tokens, 2 heads, caches of 4 blocks x 4 tokens.
  static constexpr int64_t T = 4, H = 2, TOPK = 3, NB = 4, BS = 4, B = 2;

  HostTensor q{DType::bf16, {T, H, 576}};
  HostTensor bf16_cache{DType::bf16, {NB, BS, 576}};
  HostTensor fp8_cache{DType::u8, {NB, BS, 656}};
  HostTensor indices{DType::i32, {T, TOPK}};
  HostTensor out{DType::bf16, {T, H, 512}};
  HostTensor lse{DType::f32, {T, H}};

  HostTensor dq{DType::bf16, {B, 1, H, 576}};
  HostTensor block_table{DType::i32, {B, 2}};
  HostTensor seq_lens{DType::i32, {B}};
  HostTensor dout{DType::bf16, {B, 1, H, 512}};
  HostTensor dlse{DType::f32, {B, 1, H}};

  HostTensor iq{DType::e4m3, {T, H, 128}};
  HostTensor iq_scale{DType::f32, {T, H}};
  HostTensor iweights{DType::f32, {T, H}};
  HostTensor k_cache{DType::u8, {NB, BS, 132}};
  HostTensor iblock_table{DType::i32, {T, 2}};
  HostTensor visible_lens{DType::i32, {T}};
  HostTensor itopk{DType::i32, {T, TOPK}};
  HostTensor logits{DType::f32, {T, 8}};

  HostTensor latent{DType::bf16, {T, 512}};
  HostTensor rope{DType::bf16, {T, 64}};
  HostTensor k{DType::bf16, {T, 128}};
  HostTensor slot_mapping{DType::i32, {T}};

  HostTensor positions{DType::i32, {T, TOPK}};
  HostTensor slots{DType::i32, {T, TOPK}};

  // MLA without rope (rope_dim 0): the 512-dim query, rows of 512 bf16 or 528 fp8 bytes.
  HostTensor nope_q{DType::bf16, {T, H, 512}};
  HostTensor nope_bf16_cache{DType::bf16, {NB, BS, 512}};
  HostTensor nope_fp8_cache{DType::u8, {NB, BS, 528}};
  HostTensor topk_lens{DType::i32, {T}};

  // The pooled indexer, kpool 2: pool pages of 4 rows (8 tokens per block of iblock_table).
  static constexpr int KPOOL = 2;
  HostTensor pool_cache{DType::u8, {NB, 4, 132}};
  HostTensor pool_indices{DType::i32, {T, 5}};  // kpool 2 x pool_topk 2 + 1 tail
  HostTensor out_lens{DType::i32, {T}};
  HostTensor gate{DType::f32, {T, 128}};
  HostTensor ape{DType::f32, {KPOOL, 128}};
  HostTensor token_positions{DType::i32, {T}};
  HostTensor pool_state{DType::f32, {T, KPOOL - 1, 2, 128}};

  ValidCalls() {
    std::mt19937 rng(1);
    for (const HostTensor* t : {&q, &bf16_cache, &dq, &latent, &rope, &k, &nope_q, &nope_bf16_cache}) {
      fill_bf16(*t, rng);
    }
    const int32_t row_lens[T] = {3, 1, 0, 2};
    for (int64_t i = 0; i < T; ++i) topk_lens.at<int32_t>(i) = row_lens[i];
    const int32_t idx[T][TOPK] = {{0, 1, -1}, {2, 15, 3}, {-1, -1, -1}, {7, 7, 8}};
    for (int64_t i = 0; i < T * TOPK; ++i) indices.at<int32_t>(i) = idx[i / TOPK][i % TOPK];
    const int32_t table[B][2] = {{0, 1}, {3, 2}};
    for (int64_t i = 0; i < B * 2; ++i) block_table.at<int32_t>(i) = table[i / 2][i % 2];
    seq_lens.at<int32_t>(0) = 5;
    seq_lens.at<int32_t>(1) = 8;
    for (int64_t i = 0; i < iq.numel(); ++i) iq.at<uint8_t>(i) = static_cast<uint8_t>(i % 0x70);
    for (int64_t i = 0; i < T * H; ++i) {
      iq_scale.at<float>(i) = 0.5f;
      iweights.at<float>(i) = 1.0f;
    }
    for (int64_t i = 0; i < T * 2; ++i) iblock_table.at<int32_t>(i) = static_cast<int32_t>(i % NB);
    const int32_t lens[T] = {1, 2, 5, 8};
    for (int64_t i = 0; i < T; ++i) visible_lens.at<int32_t>(i) = lens[i];
    const int32_t mapping[T] = {0, 5, 15, -1};
    for (int64_t i = 0; i < T; ++i) slot_mapping.at<int32_t>(i) = mapping[i];
    for (int64_t i = 0; i < T * TOPK; ++i) positions.at<int32_t>(i) = static_cast<int32_t>(i % 8) - 1;
    const int32_t pool_positions[T] = {0, 1, 5, -1};
    for (int64_t i = 0; i < T; ++i) token_positions.at<int32_t>(i) = pool_positions[i];
  }

  SparseMlaArgs sparse_mla() const {
    return {q, bf16_cache, indices, out, lse, 0.0625f};
  }
  SparseMlaArgs sparse_mla_nope() const {
    SparseMlaArgs a{nope_q, nope_bf16_cache, indices, out, lse, 0.0625f};
    a.rope_dim = kNoRopeDim;
    a.topk_lens = topk_lens;
    return a;
  }
  MlaDecodeArgs mla_decode() const {
    return {dq, fp8_cache, block_table, seq_lens, dout, dlse, 0.0625f};
  }
  IndexerInputs indexer_inputs() const {
    return {iq, iq_scale, iweights, k_cache, iblock_table, {}, visible_lens};
  }
  IndexerTopkArgs indexer_topk() const { return {indexer_inputs(), itopk, IndexKind::physical}; }
  IndexerLogitsArgs indexer_logits() const { return {indexer_inputs(), logits}; }
  KvStoreArgs kv_store() const { return {latent, rope, slot_mapping, fp8_cache, Fp8ScaleKind::amax}; }
  KvStoreArgs kv_store_nope() const {
    return {latent, {}, slot_mapping, nope_fp8_cache, Fp8ScaleKind::amax, kNoRopeDim};
  }
  IndexerKStoreArgs indexer_k_store() const { return {k, slot_mapping, k_cache, Fp8ScaleKind::pow2}; }
  LogicalToSlotsArgs logical_to_slots() const { return {positions, iblock_table, {}, slots, 4}; }
  IndexerInputs pooled_inputs() const {
    IndexerInputs in{iq, iq_scale, iweights, pool_cache, iblock_table, {}, visible_lens};
    in.kpool = KPOOL;
    return in;
  }
  IndexerTopkArgs pooled_topk() const {
    IndexerTopkArgs a{pooled_inputs(), pool_indices, IndexKind::physical};
    a.pool_topk = 2;
    a.select_tail = true;
    a.out_lens = out_lens;
    return a;
  }
  IndexerLogitsArgs pooled_logits() const { return {pooled_inputs(), logits}; }
  IndexerPoolStoreArgs pool_store() const {
    return {k, gate, ape, token_positions, {}, iblock_table, pool_cache, pool_state, Fp8ScaleKind::pow2, true, KPOOL};
  }
};

}  // namespace latte::testing
