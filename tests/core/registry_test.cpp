// The registry: open dotted ids, lookup by id and glob, duplicates refused naming both sources.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "latte/error.hpp"
#include "latte/registry.hpp"
#include "test_backends.hpp"

namespace latte {
namespace {

using ::testing::HasSubstr;
using testing::make_backend;
using testing::mla_caps;

TEST(GlobMatch, StarAndQuestionMark) {
  EXPECT_TRUE(glob_match("cuda.*", "cuda.sparse_mla"));
  EXPECT_TRUE(glob_match("*", "anything.at_all"));
  EXPECT_TRUE(glob_match("*.sparse_mla", "hopper.sparse_mla"));
  EXPECT_TRUE(glob_match("cuda.?parse_mla", "cuda.sparse_mla"));
  EXPECT_TRUE(glob_match("a*b*c", "a.xx.b.yy.c"));
  EXPECT_FALSE(glob_match("cuda.*", "hopper.sparse_mla"));
  EXPECT_FALSE(glob_match("cuda.sparse", "cuda.sparse_mla"));
  EXPECT_FALSE(glob_match("a*b*c", "a.xx.b.yy.d"));
  EXPECT_FALSE(glob_match("?", ""));
  EXPECT_TRUE(glob_match("", ""));
}

TEST(Registry, AddsFindsAndListsInIdOrder) {
  Registry registry;
  const uint64_t g0 = registry.generation();
  registry.add(make_backend("zeta.b", mla_caps({DeviceKind::cpu})));
  registry.add(make_backend("alpha.a", mla_caps({DeviceKind::cpu})), "/plugins/libalpha.so");
  EXPECT_GT(registry.generation(), g0);
  EXPECT_EQ(registry.size(), 2u);
  EXPECT_EQ(registry.ids(), (std::vector<std::string>{"alpha.a", "zeta.b"}));
  ASSERT_NE(registry.find("zeta.b"), nullptr);
  EXPECT_EQ(registry.find("zeta.c"), nullptr);
  EXPECT_EQ(registry.source_of("alpha.a"), "/plugins/libalpha.so");
  EXPECT_EQ(registry.source_of("zeta.b"), "built-in");
  const auto infos = registry.infos();
  ASSERT_EQ(infos.size(), 2u);
  EXPECT_EQ(infos[0].source, "/plugins/libalpha.so");
  EXPECT_EQ(registry.match("*.b").size(), 1u);
  EXPECT_EQ(registry.match("*").size(), 2u);
}

TEST(Registry, GetOfAnUnknownIdListsTheRegisteredOnes) {
  Registry registry;
  registry.add(make_backend("cuda.sparse_mla", mla_caps({DeviceKind::cuda})));
  try {
    (void)registry.get("cuda.sparse");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_THAT(e.what(), HasSubstr("unknown backend 'cuda.sparse'"));
    EXPECT_THAT(e.what(), HasSubstr("registered backends: cuda.sparse_mla"));
  }
}

TEST(Registry, DuplicateIdNamesBothSources) {
  Registry registry;
  registry.add(make_backend("cuda.sparse_mla", mla_caps({DeviceKind::cuda})));
  try {
    registry.add(make_backend("cuda.sparse_mla", mla_caps({DeviceKind::cuda})), "/opt/libvendor.so");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_THAT(e.what(), HasSubstr("duplicate backend id 'cuda.sparse_mla'"));
    EXPECT_THAT(e.what(), HasSubstr("registered from built-in and again from /opt/libvendor.so"));
  }
  EXPECT_EQ(registry.size(), 1u);
}

TEST(Registry, RefusesIdsThatAreNotDotted) {
  Registry registry;
  for (const char* bad : {"", "nodot", "has space.x", ".lead", "trail.", "a..b", "uni.c\xc3\xb6"}) {
    EXPECT_THROW(registry.add(make_backend(bad, mla_caps({DeviceKind::cpu}))), Error) << bad;
  }
  EXPECT_EQ(registry.size(), 0u);
  EXPECT_THROW(registry.add(nullptr), Error);
}

TEST(Registry, RemoveSourceDropsOnlyThatSource) {
  Registry registry;
  registry.add(make_backend("a.one", mla_caps({DeviceKind::cpu})), "/p/liba.so");
  registry.add(make_backend("a.two", mla_caps({DeviceKind::cpu})), "/p/liba.so");
  registry.add(make_backend("b.one", mla_caps({DeviceKind::cpu})));
  const uint64_t g = registry.generation();
  registry.remove_source("/p/liba.so");
  EXPECT_EQ(registry.ids(), std::vector<std::string>{"b.one"});
  EXPECT_GT(registry.generation(), g);
}

TEST(Registry, GlobalRegistryHasNoRegistrationErrors) {
  EXPECT_TRUE(registration_errors().empty());
  for (const auto& backend : Registry::global().all()) {
    EXPECT_NO_THROW(check_backend_id(backend->info().id));
  }
}

}  // namespace
}  // namespace latte
