// One call, one validation: latte::run builds the typed problem once (make_problem) and every
// later step — the spec for selection, the kernel's fit check, check mode, the backend's
// compute — reads that problem. A second validation anywhere on the path fails these counts.
#include <gtest/gtest.h>

#include <vector>

#include "latte/api.hpp"
#include "latte/problem.hpp"
#include "latte/registry.hpp"
#include "valid_calls.hpp"

namespace latte::testing {
namespace {

std::vector<OpArgs> every_op(const ValidCalls& c) {
  return {c.sparse_mla(), c.mla_decode(), c.indexer_topk(), c.indexer_logits(),
          c.kv_store(),   c.indexer_k_store(), c.logical_to_slots()};
}

TEST(ValidateOnce, EveryOpThroughTheApiValidatesExactlyOnce) {
  ValidCalls calls;
  for (const bool check : {false, true}) {
    for (const OpArgs& args : every_op(calls)) {
      CallOptions options;
      options.check_indices = check;
      (void)run(args, options);  // selection and kernel made once, cached after
      const uint64_t before = detail::validation_count();
      EXPECT_EQ(run(args, options), "cpu.reference");
      EXPECT_EQ(detail::validation_count() - before, 1u)
          << to_string(op_of(args)) << (check ? " in check mode" : "");
    }
  }
}

TEST(ValidateOnce, TheDeclaredCacheFormatIsCheckedWithoutASecondValidation) {
  ValidCalls calls;
  CallOptions options;
  options.kv_format = CacheFormat::bf16;
  const SparseMlaArgs args = calls.sparse_mla();  // a bf16 cache
  const uint64_t before = detail::validation_count();
  EXPECT_EQ(run(args, options), "cpu.reference");
  EXPECT_EQ(detail::validation_count() - before, 1u);
  options.kv_format = CacheFormat::fp8_ds_mla;
  try {
    (void)run(args, options);
    ADD_FAILURE() << "a bf16 cache passed as fp8_ds_mla";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("kv_format is 'fp8_ds_mla' but kv_cache holds a bf16 cache"),
              std::string::npos)
        << e.what();
  }
}

TEST(ValidateOnce, AKernelRunOnArgumentsValidatesOnceAndOnAProblemNotAgain) {
  ValidCalls calls;
  const SparseMlaArgs args = calls.sparse_mla();
  const auto kernel = Registry::global().get("cpu.reference")->make(spec_from_args(args), DeviceInfo{});
  uint64_t before = detail::validation_count();
  kernel->run(args, RunContext{});
  EXPECT_EQ(detail::validation_count() - before, 1u);
  const Problem problem = validate(args);
  before = detail::validation_count();
  kernel->run(problem, RunContext{});
  EXPECT_EQ(detail::validation_count() - before, 0u);
}

}  // namespace
}  // namespace latte::testing
