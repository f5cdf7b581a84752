// A TensorView is plain data that callers fill in: a rank outside 0..kMaxRank must give an
// error that says so, never a read past the shape array.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "latte/error.hpp"
#include "latte/validate.hpp"

namespace latte {
namespace {

using ::testing::HasSubstr;

TEST(TensorView, DescribeNamesARankOutsideTheLimit) {
  float x = 0;
  TensorView t = TensorView::contiguous(&x, DType::f32, {1});
  t.rank = kMaxRank + 2;
  EXPECT_EQ(t.describe(), "f32[rank 8, outside 0..6] strides [rank 8, outside 0..6] on cpu");
  t.rank = -1;
  EXPECT_THAT(t.describe(), HasSubstr("rank -1, outside 0..6"));
}

TEST(TensorView, ValidateRefusesARankOutsideTheLimit) {
  static char memory[4][64];
  SparseMlaArgs args;
  args.q = TensorView::contiguous(memory[0], DType::bf16, {2, 8, kQkDim});
  args.kv_cache = TensorView::contiguous(memory[1], DType::bf16, {4, 16, kQkDim});
  args.indices = TensorView::contiguous(memory[2], DType::i32, {2, 64});
  args.out = TensorView::contiguous(memory[3], DType::bf16, {2, 8, kLatentDim});
  args.scale = 0.0625f;
  args.q.rank = kMaxRank + 2;
  try {
    (void)validate(args);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_THAT(e.what(), HasSubstr("has rank 8"));
    EXPECT_THAT(e.what(), HasSubstr("rank 8, outside 0..6"));
  }
}

}  // namespace
}  // namespace latte
