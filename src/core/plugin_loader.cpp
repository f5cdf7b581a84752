// dlopen a plugin, call its entry point under a try, and check everything it hands back.
#include "core/plugin_loader.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

#if defined(__x86_64__)
constexpr uint16_t kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kHostMachine = EM_AARCH64;
#else
constexpr uint16_t kHostMachine = EM_NONE;  // not checked: dlopen says so itself
#endif

struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

bool read_at(int fd, uint64_t offset, void* out, std::size_t bytes) {
  auto* p = static_cast<unsigned char*>(out);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<std::size_t>(n);
  }
  return true;
}

// The part [offset, offset + bytes) of the file must exist: says which part does not.
void check_within(const std::string& path, uint64_t file_size, uint64_t offset, uint64_t bytes,
                  const std::string& what) {
  if (offset <= file_size && bytes <= file_size - offset) return;
  refuse(path, fmt::format("it is truncated: its {} spans bytes {}..{} but the file has {} bytes "
                           "(an interrupted copy or build?); rebuild or reinstall the plugin",
                           what, offset, offset + bytes, file_size));
}

// dlopen maps each loadable segment from the file by its p_offset and p_filesz, and touching a
// mapped page past the end of the file raises SIGBUS in the loader, which no error return
// catches. So the ELF header and every table and segment it names are checked against the file
// size before dlopen sees the file.
void check_elf_file(const std::string& path) {
  const auto unreadable = [&path] { refuse(path, fmt::format("it cannot be read: {}", std::strerror(errno))); };
  const FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (file.fd < 0) unreadable();
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) unreadable();
  if (!S_ISREG(st.st_mode)) refuse(path, "it is not a regular file; pass the path of the plugin's .so");
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size == 0) refuse(path, "the file is empty (0 bytes), not a shared library; rebuild or reinstall the plugin");

  Elf64_Ehdr header{};
  const std::size_t head = static_cast<std::size_t>(std::min<uint64_t>(size, sizeof header));
  if (!read_at(file.fd, 0, &header, head)) unreadable();
  if (head < SELFMAG || std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) {
    std::string first;
    for (std::size_t i = 0; i < std::min<std::size_t>(head, SELFMAG); ++i) {
      first += fmt::format("{}{:02x}", i ? " " : "", header.e_ident[i]);
    }
    refuse(path, fmt::format("it is not an ELF shared library: it starts with bytes {}, an ELF file "
                             "with 7f 45 4c 46; pass the plugin's .so, built with -shared -fPIC",
                             first));
  }
  check_within(path, size, 0, sizeof header, "ELF header");
  if (header.e_ident[EI_CLASS] != ELFCLASS64) {
    refuse(path, "it is a 32-bit ELF file and this latte is 64-bit; build the plugin for this platform");
  }
  constexpr unsigned char kHostData = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB;
  if (header.e_ident[EI_DATA] != kHostData) {
    refuse(path, "its ELF byte order is not this host's; build the plugin for this platform");
  }
  if (header.e_type != ET_DYN) {
    refuse(path, fmt::format("it is an ELF file of type {} ({}), not a shared library; build it with "
                             "-shared -fPIC",
                             header.e_type, header.e_type == ET_EXEC ? "an executable"
                                            : header.e_type == ET_REL ? "an object file" : "not ET_DYN"));
  }
  if (kHostMachine != EM_NONE && header.e_machine != kHostMachine) {
    refuse(path, fmt::format("it is built for ELF machine {}, this host is machine {}; build the "
                             "plugin for this platform",
                             header.e_machine, kHostMachine));
  }
  if (header.e_phnum == 0 || header.e_phentsize != sizeof(Elf64_Phdr)) {
    refuse(path, fmt::format("its ELF program header table is malformed ({} entries of {} bytes, "
                             "expected entries of {}); rebuild the plugin",
                             header.e_phnum, header.e_phentsize, sizeof(Elf64_Phdr)));
  }
  check_within(path, size, header.e_phoff, uint64_t{header.e_phnum} * sizeof(Elf64_Phdr),
               "program header table");
  std::vector<Elf64_Phdr> segments(header.e_phnum);
  if (!read_at(file.fd, header.e_phoff, segments.data(), segments.size() * sizeof(Elf64_Phdr))) unreadable();
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const Elf64_Phdr& s = segments[i];
    if (s.p_filesz == 0) continue;
    check_within(path, size, s.p_offset, s.p_filesz,
                 fmt::format("segment {} ({})", i, s.p_type == PT_LOAD ? "loadable" : fmt::format("type {:#x}", s.p_type)));
  }
  // The loader does not read the section headers, but a table past the end is a cut file too.
  if (header.e_shoff != 0) {
    // e_shnum 0 with a table present: the count is in the first entry (extended numbering).
    const uint64_t entries = std::max<uint64_t>(header.e_shnum, 1);
    check_within(path, size, header.e_shoff, entries * header.e_shentsize, "section header table");
  }
}

}  // namespace

PluginLibrary::~PluginLibrary() {
  if (handle) dlclose(handle);
}

OpenedPlugin open_plugin(const std::string& path) {
  check_elf_file(path);
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
