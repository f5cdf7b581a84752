// Plugins that are wrong in one way each, built as separate .so files from this source with
// one BROKEN_* definition. The host must refuse every one with a clear message and keep
// working. Like any plugin they include only latte/plugin.h.
#include <cstdio>
#include <stdexcept>

#include "latte/plugin.h"

#ifndef BROKEN_ID
#define BROKEN_ID "broken.backend"
#endif

namespace {

int make(const latte_spec_v1*, const latte_device_v1*, void** kernel, char* error, size_t error_len) {
  *kernel = nullptr;
  std::snprintf(error, error_len, "this test plugin makes no kernels");
  return 1;
}
size_t workspace(void*) { return 0; }
int run(void*, const latte_call_v1*, char* error, size_t error_len) {
  std::snprintf(error, error_len, "this test plugin runs nothing");
  return 1;
}
void destroy(void*) {}

#ifdef BROKEN_CAPS_JSON
const char kCaps[] = R"({"ops": ["sparse_mla"], "devices": ["cpu"], "heads": {"min": 1, "max": })";
#else
const char kCaps[] = R"({"ops": ["sparse_mla"], "devices": ["cpu"]})";
#endif

#ifdef BROKEN_POLICY
const char* const kPolicy = R"({"latte_policy": 1, "rules": [{"name": "r", "when": {"arch": "sm90"}, "order": ["x.*"]}]})";
#else
const char* const kPolicy = nullptr;
#endif

const latte_backend_v1 kBackends[] = {
    {sizeof(latte_backend_v1), BROKEN_ID, "test backend", kCaps, nullptr, make, workspace,
#ifdef BROKEN_NULL_RUN
     nullptr,
#else
     run,
#endif
     destroy},
    // With BROKEN_TWICE the same id is declared a second time.
    {sizeof(latte_backend_v1), BROKEN_ID, "test backend", kCaps, nullptr, make, workspace, run, destroy},
};

#ifdef BROKEN_TWICE
constexpr uint32_t kNumBackends = 2;
#else
constexpr uint32_t kNumBackends = 1;
#endif

#ifdef BROKEN_ABI
constexpr uint32_t kAbi = LATTE_PLUGIN_ABI_VERSION + 41;
#else
constexpr uint32_t kAbi = LATTE_PLUGIN_ABI_VERSION;
#endif

const latte_plugin_v1 kPlugin = {sizeof(latte_plugin_v1), kAbi, "broken-test", "0", kNumBackends, kBackends, kPolicy};

}  // namespace

#ifdef BROKEN_NO_ENTRY
// Exports a misspelled entry point only.
extern "C" __attribute__((visibility("default"))) int latte_plugin_entry_v0(uint32_t, const latte_plugin_v1** out,
                                                                            char*, size_t) {
  *out = &kPlugin;
  return 0;
}
#else
extern "C" __attribute__((visibility("default"))) int latte_plugin_entry(uint32_t, const latte_plugin_v1** out,
                                                                         char* error, size_t error_len) {
#if defined(BROKEN_ENTRY_ERROR)
  std::snprintf(error, error_len, "license file /opt/acme/license.key not found");
  return 7;
#elif defined(BROKEN_ENTRY_THROWS)
  (void)error;
  (void)error_len;
  throw std::runtime_error("acme runtime could not initialise");
#else
  (void)error;
  (void)error_len;
  *out = &kPlugin;
  return 0;
#endif
}
#endif
