// A plugin built against latte/plugin.h as ABI version 1 first shipped: its latte_backend_v1
// ends at `destroy` (no `describe`). Mirrored here with a local struct so that the array has the
// old stride. The host must load both backends, make their kernels and describe them as "".
#include <cstddef>
#include <cstdio>

#include "latte/plugin.h"

namespace {

struct BackendV1Base {  // latte_backend_v1 up to `destroy`
  uint32_t struct_size;
  const char* id;
  const char* description;
  const char* capabilities_json;
  int (*check)(const latte_spec_v1*, const latte_device_v1*, latte_reason_sink_fn, void*);
  int (*make)(const latte_spec_v1*, const latte_device_v1*, void**, char*, size_t);
  size_t (*workspace_bytes)(void*);
  int (*run)(void*, const latte_call_v1*, char*, size_t);
  void (*destroy)(void*);
};
static_assert(sizeof(BackendV1Base) == LATTE_BACKEND_V1_BASE_SIZE, "the ABI version 1 base layout");

int token;  // the kernel handle: any non-null pointer
int make(const latte_spec_v1*, const latte_device_v1*, void** kernel, char*, size_t) {
  *kernel = &token;
  return 0;
}
size_t workspace(void*) { return 0; }
int run(void*, const latte_call_v1*, char* error, size_t error_len) {
  std::snprintf(error, error_len, "this test plugin runs nothing");
  return 1;
}
void destroy(void*) {}

const char kCaps[] = R"({"ops": ["sparse_mla"], "devices": ["cpu"]})";

const BackendV1Base kBackends[] = {
    {sizeof(BackendV1Base), "old.first", "v1 base layout", kCaps, nullptr, make, workspace, run, destroy},
    {sizeof(BackendV1Base), "old.second", "v1 base layout", kCaps, nullptr, make, workspace, run, destroy},
};

const latte_plugin_v1 kPlugin = {sizeof(latte_plugin_v1), LATTE_PLUGIN_ABI_VERSION, "v1-base", "0", 2,
                                 reinterpret_cast<const latte_backend_v1*>(kBackends), nullptr};

}  // namespace

extern "C" __attribute__((visibility("default"))) int latte_plugin_entry(uint32_t, const latte_plugin_v1** out, char*,
                                                                         size_t) {
  *out = &kPlugin;
  return 0;
}
