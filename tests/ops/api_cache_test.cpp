// latte::run keeps the kernels it made per context. A context made where a destroyed one lived
// (the same address) must get kernels of its own backends, never the old context's: the
// functional API keys its caches by Context::id, which is never reused.
#include <gtest/gtest.h>

#include <memory>
#include <new>

#include "core/test_backends.hpp"
#include "latte/api.hpp"
#include "latte/context.hpp"
#include "latte/registry.hpp"
#include "valid_calls.hpp"

namespace latte::testing {
namespace {

TEST(ApiCache, AContextAtADestroyedOnesAddressGetsItsOwnKernels) {
  ValidCalls calls;
  const SparseMlaArgs args = calls.sparse_mla();
  Capabilities caps;  // takes any spec on the CPU
  caps.ops = {Op::sparse_mla};
  caps.devices = {DeviceKind::cpu};
  const auto first = make_backend("test.same_id", caps);
  const auto second = make_backend("test.same_id", caps);
  Registry first_registry, second_registry;
  first_registry.add(first);
  second_registry.add(second);
  alignas(Context) unsigned char storage[sizeof(Context)];
  CallOptions options;
  options.backend = "test.same_id";

  auto* context = new (storage) Context(first_registry);
  const uint64_t first_id = context->id();
  options.context = context;
  EXPECT_EQ(run(args, options), "test.same_id");
  EXPECT_EQ(first->runs.load(), 1);
  context->~Context();

  context = new (storage) Context(second_registry);  // the same address
  EXPECT_NE(context->id(), first_id);
  options.context = context;
  EXPECT_EQ(run(args, options), "test.same_id");
  EXPECT_EQ(second->runs.load(), 1) << "the new context's backend did not run";
  EXPECT_EQ(first->runs.load(), 1) << "the destroyed context's kernel ran";
  context->~Context();
}

}  // namespace
}  // namespace latte::testing
