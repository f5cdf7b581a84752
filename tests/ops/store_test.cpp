// kv_store, indexer_k_store and logical_to_slots on cpu.reference.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ops_test_util.hpp"

namespace latte::testing {
namespace {

constexpr uint8_t kSentinel = 0xA5;

void fill_bytes(const HostTensor& t, uint8_t byte) {
  std::memset(t.view().data, byte, static_cast<std::size_t>(t.view().nbytes()));
}

struct StoreInputs {
  static constexpr int64_t T = 5;
  HostTensor latent{DType::bf16, {T, 512}};
  HostTensor rope{DType::bf16, {T, 64}};
  HostTensor k{DType::bf16, {T, 128}};
  HostTensor slot_mapping{DType::i32, {T}};
  explicit StoreInputs(std::array<int32_t, T> slots) {
    std::mt19937 rng(9);
    fill_bf16(latent, rng, -3.0f, 3.0f);
    fill_bf16(rope, rng, -1.0f, 1.0f);
    fill_bf16(k, rng, -2.0f, 2.0f);
    for (int64_t t = 0; t < T; ++t) slot_mapping.at<int32_t>(t) = slots[t];
  }
  std::array<float, 576> token(int64_t t) const {
    std::array<float, 576> v{};
    for (int i = 0; i < 512; ++i) v[i] = static_cast<float>(bf16_at(latent, t * 512 + i));
    for (int i = 0; i < 64; ++i) v[512 + i] = static_cast<float>(bf16_at(rope, t * 64 + i));
    return v;
  }
};

// Slots {9, 0, -1, 5, 100}: -1 skips; 100 is out of range and, without check mode, skips too.
const std::array<int32_t, 5> kSlots = {9, 0, -1, 5, 100};

TEST(KvStore, Bf16CacheGetsTheExactBitsAtEachSlotAndNothingElse) {
  StoreInputs in(kSlots);
  HostTensor cache(DType::bf16, {3, 4, 576});
  fill_bytes(cache, kSentinel);
  run_reference(KvStoreArgs{in.latent, in.rope, in.slot_mapping, cache, Fp8ScaleKind::amax});
  std::vector<int64_t> owner(12, -1);
  owner[9] = 0, owner[0] = 1, owner[5] = 3;
  for (int64_t s = 0; s < 12; ++s) {
    for (int i = 0; i < 576; ++i) {
      const uint16_t got = cache.at<uint16_t>(s * 576 + i);
      if (owner[s] < 0) {
        ASSERT_EQ(got, 0xA5A5) << "slot " << s << " was written";
      } else if (i < 512) {
        ASSERT_EQ(got, in.latent.at<uint16_t>(owner[s] * 512 + i)) << s << " " << i;
      } else {
        ASSERT_EQ(got, in.rope.at<uint16_t>(owner[s] * 64 + i - 512)) << s << " " << i;
      }
    }
  }
}

class KvStoreFp8 : public ::testing::TestWithParam<Fp8ScaleKind> {};

TEST_P(KvStoreFp8, WritesThePackedTokenOfEachRow) {
  StoreInputs in(kSlots);
  HostTensor cache(DType::u8, {3, 4, 656});
  fill_bytes(cache, kSentinel);
  run_reference(KvStoreArgs{in.latent, in.rope, in.slot_mapping, cache, GetParam()});
  const std::array<std::pair<int64_t, int64_t>, 3> written = {{{9, 0}, {0, 1}, {5, 3}}};
  for (auto [slot, t] : written) {
    const auto v = in.token(t);
    std::array<uint8_t, 656> want{};
    pack_fp8_ds_mla_token(v.data(), v.data() + 512, GetParam(), want.data());
    EXPECT_EQ(std::memcmp(cache.data<uint8_t>() + slot * 656, want.data(), 656), 0) << slot;
    // And it decodes close to the input (the bounds are derived in formats_test.cpp).
    std::array<float, 576> back{};
    unpack_fp8_ds_mla_token(cache.data<uint8_t>() + slot * 656, back.data());
    for (int i = 0; i < 512; ++i) ASSERT_LE(std::fabs(back[i] - v[i]), 3.0f / 16.0f) << i;
    for (int i = 512; i < 576; ++i) ASSERT_EQ(back[i], v[i]) << i;
  }
  for (int64_t slot : {1, 2, 3, 4, 6, 7, 8, 10, 11}) {
    for (int b = 0; b < 656; ++b) ASSERT_EQ(cache.at<uint8_t>(slot * 656 + b), kSentinel) << slot;
  }
}

INSTANTIATE_TEST_SUITE_P(ScaleKinds, KvStoreFp8,
                         ::testing::Values(Fp8ScaleKind::amax, Fp8ScaleKind::pow2),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(IndexerKStore, WritesCodesAndScalesInThePageLayout) {
  StoreInputs in(kSlots);
  constexpr int BS = 4;
  HostTensor cache(DType::u8, {3, BS, 132});
  fill_bytes(cache, kSentinel);
  run_reference(IndexerKStoreArgs{in.k, in.slot_mapping, cache, Fp8ScaleKind::amax});
  // The expected pages, built token by token with the format functions.
  std::vector<uint8_t> want(3 * BS * 132, kSentinel);
  const std::array<std::pair<int64_t, int64_t>, 3> written = {{{9, 0}, {0, 1}, {5, 3}}};
  for (auto [slot, t] : written) {
    std::array<float, 128> k{};
    for (int i = 0; i < 128; ++i) k[i] = static_cast<float>(bf16_at(in.k, t * 128 + i));
    pack_indexer_k_token(k.data(), Fp8ScaleKind::amax, want.data() + (slot / BS) * BS * 132, BS,
                         static_cast<int>(slot % BS));
  }
  EXPECT_EQ(std::memcmp(cache.data<uint8_t>(), want.data(), want.size()), 0);
  // Slot 9 = block 2, offset 1: codes at page + 128, scale at page + 4*128 + 4.
  const uint8_t* page2 = cache.data<uint8_t>() + 2 * BS * 132;
  float scale = 0.0f;
  std::memcpy(&scale, page2 + BS * 128 + 4, 4);
  float amax = 0.0f;
  for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(float(bf16_at(in.k, i))));
  EXPECT_EQ(scale, amax / 448.0f);
  EXPECT_EQ(page2[128], float_to_e4m3(float(bf16_at(in.k, 0)) / scale));
}

TEST(KvStore, CheckModeReportsTheSlotThatWouldBeSkipped) {
  StoreInputs in(kSlots);
  HostTensor cache(DType::bf16, {3, 4, 576});
  try {
    run_reference(KvStoreArgs{in.latent, in.rope, in.slot_mapping, cache, Fp8ScaleKind::amax}, true);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("slot_mapping[4] = 100 is out of range; allowed -1..11"),
              std::string::npos)
        << e.what();
  }
}

TEST(LogicalToSlots, HandComputedThroughTheBlockTable) {
  HostTensor table(DType::i32, {2, 3});
  const std::array<int32_t, 6> t = {3, 1, -1, 0, 2, 5};
  for (int i = 0; i < 6; ++i) table.at<int32_t>(i) = t[i];
  HostTensor positions(DType::i32, {3, 5});
  const std::array<int32_t, 15> p = {0, 5, -1, 7, 3,     // request 0
                                     8, 9, 12, 100, -7,  // request 0: block -1, past the table, bad
                                     0, 4, 11, 3, -1};   // request 1
  for (int i = 0; i < 15; ++i) positions.at<int32_t>(i) = p[i];
  HostTensor request(DType::i32, {3});
  request.at<int32_t>(0) = 0, request.at<int32_t>(1) = 0, request.at<int32_t>(2) = 1;
  HostTensor slots(DType::i32, {3, 5});
  run_reference(LogicalToSlotsArgs{positions, table, request, slots, 4});
  // slot = table[row][p / 4] * 4 + p % 4
  const std::array<int32_t, 15> want = {12, 5, -1, 7, 15,
                                        -1, -1, -1, -1, -1,
                                        0, 8, 23, 3, -1};
  for (int i = 0; i < 15; ++i) EXPECT_EQ(slots.at<int32_t>(i), want[i]) << i;
  EXPECT_THROW(run_reference(LogicalToSlotsArgs{positions, table, request, slots, 4}, true), Error);
}

}  // namespace
}  // namespace latte::testing
