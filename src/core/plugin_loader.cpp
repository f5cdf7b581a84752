// dlopen a plugin, call its entry point under a try, and check everything it hands back.
#include "core/plugin_loader.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstring>
#include <set>

#include "latte/error.hpp"
#include "latte/registry.hpp"

namespace latte::detail {
namespace {

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  throw Error(ErrorCode::plugin_error, fmt::format("plugin {} refused: {}", path, what));
}

std::string message_of(const char* buffer, std::size_t size) {
  const std::size_t len = strnlen(buffer, size);
  return len ? std::string(buffer, len) : std::string("(no message)");
}

}  // namespace

PluginLibrary::~PluginLibrary() {
  if (handle) dlclose(handle);
}

OpenedPlugin open_plugin(const std::string& path) {
  dlerror();  // clear a stale message
  // RTLD_LOCAL: a plugin's symbols must not leak into other plugins.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    refuse(path, fmt::format("dlopen failed: {}; check that the file is a shared library built "
                             "for this platform and that its dependencies are found (ldd)",
                             why ? why : "unknown error"));
  }
  auto library = std::make_shared<PluginLibrary>(handle, path);

  void* symbol = dlsym(handle, LATTE_PLUGIN_ENTRY_SYMBOL);
  if (!symbol) {
    refuse(path, fmt::format("it does not export the entry point '{}'; a latte plugin defines "
                             "extern \"C\" int {}(uint32_t, const latte_plugin_v1**, char*, size_t) "
                             "(latte/plugin.h)",
                             LATTE_PLUGIN_ENTRY_SYMBOL, LATTE_PLUGIN_ENTRY_SYMBOL));
  }
  auto entry = reinterpret_cast<latte_plugin_entry_fn>(symbol);

  const latte_plugin_v1* plugin = nullptr;
  char error[1024] = {};
  int rc = 0;
  try {
    rc = entry(LATTE_PLUGIN_ABI_VERSION, &plugin, error, sizeof error);
  } catch (const std::exception& e) {
    refuse(path, fmt::format("its entry point threw an exception ({}); plugin functions must "
                             "return error codes, not throw",
                             e.what()));
  } catch (...) {
    refuse(path, "its entry point threw a non-standard exception; plugin functions must return "
                 "error codes, not throw");
  }
  if (rc != 0) {
    refuse(path, fmt::format("its entry point failed with code {}: {}", rc, message_of(error, sizeof error)));
  }
  if (!plugin) refuse(path, "its entry point returned 0 but no plugin description");
  if (plugin->abi_version != LATTE_PLUGIN_ABI_VERSION) {
    refuse(path, fmt::format("it was built for plugin ABI version {}, this latte speaks version {}; "
                             "rebuild the plugin against this latte's latte/plugin.h",
                             plugin->abi_version, LATTE_PLUGIN_ABI_VERSION));
  }
  if (plugin->struct_size < sizeof(latte_plugin_v1)) {
    refuse(path, fmt::format("its latte_plugin_v1 has struct_size {}, smaller than the {} bytes of "
                             "ABI version 1; set struct_size = sizeof(latte_plugin_v1)",
                             plugin->struct_size, sizeof(latte_plugin_v1)));
  }
  if (plugin->num_backends == 0 || !plugin->backends) refuse(path, "it declares no backends");
  if (plugin->num_backends > 1024) refuse(path, fmt::format("it declares {} backends (at most 1024)", plugin->num_backends));

  OpenedPlugin out;
  out.library = library;
  out.info.path = path;
  out.info.name = plugin->name ? plugin->name : "";
  out.info.version = plugin->version ? plugin->version : "";
  if (out.info.name.empty()) refuse(path, "its latte_plugin_v1.name is empty; give the plugin a name");

  std::set<std::string> ids;
  // The array's stride is the plugin's sizeof(latte_backend_v1), which is smaller than this
  // host's when the plugin was built before fields were appended: step by its struct_size.
  const uint32_t stride = plugin->num_backends > 0 ? plugin->backends[0].struct_size : 0;
  if (plugin->num_backends > 0 && stride < LATTE_BACKEND_V1_BASE_SIZE) {
    refuse(path, fmt::format("backends[0] has struct_size {}, smaller than the {} bytes of ABI version 1",
                             stride, LATTE_BACKEND_V1_BASE_SIZE));
  }
  for (uint32_t i = 0; i < plugin->num_backends; ++i) {
    const std::string where = fmt::format("backends[{}]", i);
    const auto& desc = *reinterpret_cast<const latte_backend_v1*>(
        reinterpret_cast<const unsigned char*>(plugin->backends) + static_cast<std::size_t>(i) * stride);
    if (desc.struct_size != stride) {
      refuse(path, fmt::format("{} has struct_size {}, backends[0] {}; every entry of the array has "
                               "sizeof(latte_backend_v1)", where, desc.struct_size, stride));
    }
    if (!desc.id) refuse(path, where + " has no id");
    const std::string id = desc.id;
    try {
      check_backend_id(id);
    } catch (const Error& e) {
      refuse(path, fmt::format("{}: {}", where, e.what()));
    }
    if (!ids.insert(id).second) refuse(path, fmt::format("it declares backend id '{}' twice", id));
    if (!desc.make || !desc.run || !desc.workspace_bytes || !desc.destroy) {
      refuse(path, fmt::format("backend {} leaves a required function NULL (make, run, "
                               "workspace_bytes and destroy are required; check is optional)",
                               id));
    }
    if (!desc.capabilities_json) refuse(path, fmt::format("backend {} has no capabilities_json", id));
    BackendInfo info;
    info.id = id;
    info.description = desc.description ? desc.description : "";
    info.source = path;
    try {
      info.caps = capabilities_from_json(desc.capabilities_json, fmt::format("{} (backend {})", path, id));
    } catch (const Error& e) {
      refuse(path, e.what());
    }
    out.backends.push_back(make_plugin_backend(library, &desc, std::move(info)));
    out.info.backend_ids.push_back(id);
  }

  if (plugin->policy_json) {
    try {
      out.policy = Policy::parse(plugin->policy_json, path, PolicyLayer::plugin);
    } catch (const Error& e) {
      refuse(path, fmt::format("the policy it ships is malformed: {}", e.what()));
    }
    out.info.policy_rules = static_cast<int>(out.policy->rules().size());
  }
  return out;
}

}  // namespace latte::detail
