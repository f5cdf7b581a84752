// Devices described by name with the limits of docs/design.md, section 8, and the errors for
// unknown ones.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "latte/device.hpp"
#include "latte/error.hpp"

namespace latte {
namespace {

using ::testing::HasSubstr;

struct Described {
  const char* name;
  int arch;
  int64_t smem;
  int sm_count;
};
void PrintTo(const Described& d, std::ostream* os) { *os << d.name; }

class DescribedDevices : public ::testing::TestWithParam<Described> {};

TEST_P(DescribedDevices, HaveTheLimitsOfTheirArchitecture) {
  const Described& want = GetParam();
  const DeviceInfo d = describe_device(want.name);
  EXPECT_EQ(d.kind, DeviceKind::cuda);
  EXPECT_EQ(d.arch(), want.arch);
  EXPECT_EQ(d.max_smem_per_block, want.smem);
  EXPECT_EQ(d.sm_count, want.sm_count);
  EXPECT_FALSE(d.probed);
  EXPECT_EQ(d.label(), std::string(want.name) + " (described)");
  EXPECT_FALSE(described_arch_example(want.arch).empty());
}

INSTANTIATE_TEST_SUITE_P(Table, DescribedDevices,
                         ::testing::Values(Described{"sm_80", 80, 166912, 108}, Described{"sm_86", 86, 101376, 72},
                                           Described{"sm_89", 89, 101376, 142}, Described{"sm_90", 90, 232448, 132},
                                           Described{"sm_100", 100, 232448, 148},
                                           Described{"sm_120", 120, 101376, 188}));

TEST(Devices, DescribedArchsAreAscending) {
  EXPECT_EQ(described_archs(), (std::vector<int>{80, 86, 89, 90, 100, 120}));
  EXPECT_EQ(arch_name(120), "sm_120");
  EXPECT_EQ(arch_name(0), "cpu");
}

TEST(Devices, CpuIsProbed) {
  const DeviceInfo cpu = describe_device("cpu");
  EXPECT_EQ(cpu.kind, DeviceKind::cpu);
  EXPECT_EQ(cpu.arch(), 0);
  EXPECT_TRUE(cpu.probed);
  EXPECT_GT(cpu.sm_count, 0);
  EXPECT_EQ(cpu.label(), "cpu");
  EXPECT_EQ(describe_device("CPU"), cpu);
  const auto all = probe_devices();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.front().kind, DeviceKind::cpu);
  EXPECT_EQ(static_cast<int>(all.size()), 1 + cuda_device_count());
}

TEST(Devices, UnknownNamesSayWhatIsAccepted) {
  for (const char* bad : {"gpu", "sm_75", "sm90", "cuda:x", "cuda:", "sm_", "tpu:0"}) {
    try {
      (void)describe_device(bad);
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::not_found) << bad;
      EXPECT_THAT(e.what(), HasSubstr(bad));
      EXPECT_THAT(e.what(), HasSubstr("sm_120"));
    }
  }
}

TEST(Devices, MissingCudaDeviceIsAClearError) {
  const int count = cuda_device_count();
  try {
    (void)describe_device("cuda:" + std::to_string(count + 3));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_THAT(e.what(), HasSubstr("cuda:" + std::to_string(count + 3)));
    if (!built_with_cuda()) EXPECT_THAT(e.what(), HasSubstr("built without CUDA"));
  }
}

}  // namespace
}  // namespace latte
