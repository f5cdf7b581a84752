// DsaStepReport's text and JSON: the per-stage kernel descriptions (Kernel::describe()) appear
// under the stage table, and only for the stages whose backend described its kernel.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "latte/workload.hpp"

namespace latte {
namespace {

DsaStepReport report_with_kernels(const std::string& attention_kernel) {
  DsaStepReport r;
  r.device = describe_device("sm_90");
  StageReport store;
  store.name = "kv_store";
  store.backend = "cuda.kv_store";
  StageReport attention;
  attention.name = "sparse_mla";
  attention.backend = "cuda.sparse_mla";
  attention.kernel = attention_kernel;
  r.stages = {store, attention};
  return r;
}

TEST(WorkloadReport, ListsTheKernelsTheBackendsDescribed) {
  const DsaStepReport r = report_with_kernels("row-group kernel: 64 rows per CTA");
  const std::string text = r.to_text();
  EXPECT_NE(text.find("kernels (what each backend ran, from Kernel::describe()):\n"
                      "  sparse_mla  row-group kernel: 64 rows per CTA\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("  kv_store    \n"), std::string::npos) << text;  // no line for an empty one
  const auto json = nlohmann::json::parse(r.to_json());
  EXPECT_EQ(json["stages"][0]["kernel"], "");
  EXPECT_EQ(json["stages"][1]["kernel"], "row-group kernel: 64 rows per CTA");
}

TEST(WorkloadReport, NoKernelSectionWhenNoBackendDescribedOne) {
  EXPECT_EQ(report_with_kernels("").to_text().find("kernels ("), std::string::npos);
}

}  // namespace
}  // namespace latte
