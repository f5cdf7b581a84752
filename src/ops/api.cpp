// The functional API: tensors in, the selected backend's kernel run on them. Kernels are
// kept per (backend, spec, device) so repeated calls pay for selection and make() once; a
// per-call cache and per-stream workspaces keep a repeated call's host cost to validation and
// the launch (docs/python.md, "Host cost of a call").
#include "latte/api.hpp"

#include <fmt/format.h>

#include <bit>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <vector>

#include "core/selector_impl.hpp"
#include "kernels/common/env_knob.hpp"
#include "ops/device_guard.hpp"
#include "ops/problem_fit.hpp"
#include "latte/error.hpp"
#include "latte/validate.hpp"

#ifdef LATTE_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace latte {
namespace {

// Devices are described once per process (a probe costs a driver query); the map's nodes
// never move, so the reference stays valid.
const DeviceInfo& device_info_for(Device device) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, DeviceInfo> cache;
  const auto key = std::make_pair(static_cast<int>(device.kind), device.index);
  std::lock_guard lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) {
    const std::string name =
        device.kind == DeviceKind::cpu ? std::string("cpu") : fmt::format("cuda:{}", device.index);
    it = cache.emplace(key, describe_device(name)).first;
  }
  return it->second;
}

// Kernels made so far, per (context, backend, device, tuning variables); specs compared with
// their own ==, so a field added to AttentionSpec can never make two specs share a kernel.
struct KernelSlot {
  uint64_t context;  // Context::id
  std::string backend;
  Device device;
  AttentionSpec spec;
  std::string tuning;  // the tuning variables the kernel read at make()
  std::shared_ptr<Kernel> kernel;
};

// The kernel of the backend `selection` chose, made once per (context, backend, spec, device).
std::shared_ptr<Kernel> kernel_of(const Context& context, const Selection& selection,
                                  const AttentionSpec& spec, const DeviceInfo& device,
                                  const std::string& tuning) {
  static std::mutex mutex;
  static std::vector<KernelSlot> cache;
  auto find = [&]() -> std::shared_ptr<Kernel> {
    for (const KernelSlot& slot : cache) {
      if (slot.context == context.id() && slot.backend == selection.chosen &&
          slot.device == device.handle() && slot.spec == spec && slot.tuning == tuning)
        return slot.kernel;
    }
    return nullptr;
  };
  {
    std::lock_guard lock(mutex);
    if (auto kernel = find()) return kernel;
  }
  std::shared_ptr<Kernel> kernel = selection.backend->make(spec, device);
  std::lock_guard lock(mutex);
  if (auto existing = find()) return existing;  // another thread made it meanwhile
  cache.push_back(KernelSlot{context.id(), selection.chosen, device.handle(), spec, tuning, kernel});
  return kernel;
}

// The per-call cache in front of Context::select. A call's decision depends on the spec, the
// device, the forced id, LATTE_BACKEND / LATTE_EXCLUDE, the tuning variables (kernels read
// them at make()) and the context's state (its epoch and the registry's generation, both
// counters that never return to an old value); an entry keyed
// by all of them maps to what select() chose and the kernel, so a repeated call copies no
// Selection and builds no key string, and any change of policy, plugins or environment misses
// and goes through select() again: select() stays the one source of decisions.
struct CallKey {
  uint64_t context = 0;  // Context::id
  uint64_t epoch = 0;
  uint64_t generation = 0;
  Device device;
  AttentionSpec spec;
  std::string forced;
  std::string env_force;
  std::string env_exclude;
  std::string tuning;
};

struct CallEntry {
  std::size_t hash = 0;
  CallKey key;
  std::shared_ptr<Kernel> kernel;
  std::string backend_id;
};

std::size_t mix(std::size_t h, uint64_t v) {
  return h ^ (static_cast<std::size_t>(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
}

// The fields that vary between calls; equality is still checked field by field.
std::size_t call_hash(uint64_t context, uint64_t epoch, uint64_t generation, Device device,
                      const AttentionSpec& s) {
  std::size_t h = std::hash<uint64_t>{}(context);
  h = mix(h, epoch);
  h = mix(h, generation);
  h = mix(h, (static_cast<uint64_t>(device.kind) << 32) | static_cast<uint32_t>(device.index));
  h = mix(h, (static_cast<uint64_t>(s.op) << 48) | (static_cast<uint64_t>(s.q_dtype) << 40) |
                 (static_cast<uint64_t>(s.kv_cache) << 32) | static_cast<uint32_t>(s.num_heads));
  h = mix(h, (static_cast<uint64_t>(static_cast<uint32_t>(s.block_size)) << 32) |
                 static_cast<uint32_t>(s.topk));
  h = mix(h, static_cast<uint64_t>(s.max_tokens));
  h = mix(h, std::bit_cast<uint32_t>(s.scale));
  return h;
}

class CallCache {
 public:
  // The kernel and backend id for a call, or false when this exact key has not been seen.
  bool find(std::size_t hash, uint64_t context, uint64_t epoch, uint64_t generation,
            Device device, const AttentionSpec& spec, const std::string& forced,
            const char* env_force, const char* env_exclude, const std::string& tuning,
            std::shared_ptr<Kernel>* kernel, std::string* backend_id) const {
    std::shared_lock lock(mutex_);
    for (const CallEntry& e : entries_) {
      const CallKey& k = e.key;
      if (e.hash == hash && k.context == context && k.epoch == epoch && k.generation == generation &&
          k.device == device && k.forced == forced && k.env_force == env_force &&
          k.env_exclude == env_exclude && k.tuning == tuning && k.spec == spec) {
        *kernel = e.kernel;
        *backend_id = e.backend_id;
        return true;
      }
    }
    return false;
  }

  void insert(CallEntry entry) {
    std::unique_lock lock(mutex_);
    // Entries of an older state of the same context can never match again: drop them.
    std::erase_if(entries_, [&](const CallEntry& e) {
      return e.key.context == entry.key.context &&
             (e.key.epoch != entry.key.epoch || e.key.generation != entry.key.generation);
    });
    if (entries_.size() >= kMaxEntries) entries_.clear();  // a bound, not an LRU: keys rarely vary
    entries_.push_back(std::move(entry));
  }

 private:
  static constexpr std::size_t kMaxEntries = 1024;
  mutable std::shared_mutex mutex_;
  std::vector<CallEntry> entries_;
};

CallCache& call_cache() {
  static CallCache* cache = new CallCache();  // never destroyed: kernels may come from plugins
  return *cache;
}

std::shared_ptr<Kernel> kernel_for(const Context& context, const std::string& forced,
                                   const AttentionSpec& spec, const DeviceInfo& device,
                                   std::string* backend_id) {
  // Read the stamps before selecting: if the state changes meanwhile, the entry is stored under
  // the old stamps, which no later call reads again.
  const uint64_t epoch = context.epoch();
  const uint64_t generation = context.registry().generation();
  const char* env_force = detail::selection_env("LATTE_BACKEND");
  const char* env_exclude = detail::selection_env("LATTE_EXCLUDE");
  const std::string tuning = cuda::tuning_env_key();  // usually empty: no allocation
  const Device handle = device.handle();
  const std::size_t hash = call_hash(context.id(), epoch, generation, handle, spec);
  std::shared_ptr<Kernel> kernel;
  if (call_cache().find(hash, context.id(), epoch, generation, handle, spec, forced, env_force,
                        env_exclude, tuning, &kernel, backend_id)) {
    return kernel;
  }
  SelectOptions options;
  if (!forced.empty()) options.force.push_back(forced);
  const Selection selection = context.select(spec, device, options);
  kernel = kernel_of(context, selection, spec, device, tuning);
  *backend_id = selection.chosen;
  call_cache().insert(CallEntry{hash, CallKey{context.id(), epoch, generation, handle, spec, forced, env_force, env_exclude, tuning},
                                kernel, selection.chosen});
  return kernel;
}

#ifdef LATTE_WITH_CUDA
[[noreturn]] void workspace_failed(std::size_t bytes, Device device, cudaError_t err) {
  throw Error(err == cudaErrorMemoryAllocation ? ErrorCode::out_of_memory : ErrorCode::cuda_error,
              fmt::format("allocating {} bytes of workspace on cuda:{} failed: {}", bytes,
                          device.index, cudaGetErrorString(err)));
}

// Device workspace kept per (device, stream) for calls on a stream that is not capturing a CUDA
// graph, so steady-state calls allocate nothing. Kernels on one stream run in order, so one
// buffer serves them all; it grows when a kernel needs more (the old one freed in stream
// order, after the kernels queued before). The slot's lock is held from lookup to launch, so a
// growth by another thread cannot free the buffer between. Streams are told apart by
// cudaStreamGetId, unique for the process's life, so a new stream that reuses a destroyed
// one's handle never shares its buffer with kernels still queued there. Buffers are kept for
// the process's life: one per stream ever used, the size of its largest workspace.
class StreamWorkspaces {
 public:
  struct Slot {
    std::mutex mutex;
    void* ptr = nullptr;
    std::size_t bytes = 0;
  };

  Slot& slot(int device, unsigned long long stream_id) {
    std::lock_guard lock(mutex_);
    std::unique_ptr<Slot>& s = slots_[{device, stream_id}];
    if (!s) s = std::make_unique<Slot>();
    return *s;
  }

 private:
  std::mutex mutex_;
  std::map<std::pair<int, unsigned long long>, std::unique_ptr<Slot>> slots_;
};

StreamWorkspaces& stream_workspaces() {
  static StreamWorkspaces* workspaces = new StreamWorkspaces();  // never freed at exit: the CUDA
  return *workspaces;                                             // runtime may be gone by then
}
#endif

// Workspace for one call. CPU: host memory for the call. CUDA: the stream's cached buffer
// (StreamWorkspaces), except while the stream is capturing a CUDA graph: then the call
// allocates and frees stream-ordered itself, so the graph owns its memory (a cached pointer
// baked into a graph would dangle once a later growth freed it).
class CallWorkspace {
 public:
  CallWorkspace(std::size_t bytes, Device device, void* stream) {
    if (bytes == 0) return;
    if (device.kind == DeviceKind::cpu) {
      try {
        host_.resize(bytes);
      } catch (const std::bad_alloc&) {
        throw Error(ErrorCode::out_of_memory,
                    fmt::format("allocating {} bytes of workspace on the host failed (std::bad_alloc)", bytes));
      }
      ptr_ = host_.data();
      return;
    }
#ifdef LATTE_WITH_CUDA
    const auto s = static_cast<cudaStream_t>(stream);
    stream_ = s;
    if (StreamWorkspaces::Slot* slot = cached_slot(device, s)) {
      lock_ = std::unique_lock(slot->mutex);
      if (slot->bytes < bytes) {
        if (slot->ptr) {
          cudaFreeAsync(slot->ptr, s);
          slot->ptr = nullptr;
          slot->bytes = 0;
        }
        void* fresh = nullptr;
        const cudaError_t err = cudaMallocAsync(&fresh, bytes, s);
        if (err != cudaSuccess) workspace_failed(bytes, device, err);
        slot->ptr = fresh;
        slot->bytes = bytes;
      }
      ptr_ = slot->ptr;
      return;
    }
    const cudaError_t err = cudaMallocAsync(&ptr_, bytes, s);
    if (err != cudaSuccess) workspace_failed(bytes, device, err);
    owned_ = true;
#else
    (void)stream;
    throw Error(ErrorCode::unsupported, "a CUDA tensor was given to a latte built without CUDA");
#endif
  }
  ~CallWorkspace() {
#ifdef LATTE_WITH_CUDA
    if (owned_) cudaFreeAsync(ptr_, stream_);
#endif
  }
  CallWorkspace(const CallWorkspace&) = delete;
  CallWorkspace& operator=(const CallWorkspace&) = delete;
  [[nodiscard]] void* get() const { return ptr_; }

 private:
#ifdef LATTE_WITH_CUDA
  // The stream's cached slot, or null when the call must own its workspace: the stream is
  // capturing (or its capture state or id cannot be read; the error is cleared so that a
  // kernel's launch check does not report it).
  static StreamWorkspaces::Slot* cached_slot(Device device, cudaStream_t stream) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    if (status != cudaStreamCaptureStatusNone) return nullptr;
    unsigned long long id = 0;
#if CUDART_VERSION >= 12000
    if (cudaStreamGetId(stream, &id) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
#else
    id = reinterpret_cast<uintptr_t>(stream);  // no stream ids before CUDA 12: the handle
#endif
    return &stream_workspaces().slot(device.index, id);
  }
  std::unique_lock<std::mutex> lock_;  // the cached slot's, until the kernel is queued
  bool owned_ = false;                 // allocated for this call (the stream is capturing)
  cudaStream_t stream_ = nullptr;
#endif
  void* ptr_ = nullptr;
  std::vector<unsigned char> host_;
};

}  // namespace

AttentionSpec spec_from_args(const OpArgs& args) { return detail::spec_of(make_problem(args)); }

std::string run(const OpArgs& args, const CallOptions& options) {
  const Context& context = options.context ? *options.context : Context::global();
  const Problem problem = make_problem(args);
  if (const CacheFormat* format = cache_format_of(problem); options.kv_format && format &&
                                                              *options.kv_format != *format) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: kv_format is '{}' but kv_cache holds a {} cache (bf16 cache: "
                            "[num_blocks, block_size, 576] bf16; fp8_ds_mla: [num_blocks, "
                            "block_size, 656] uint8). Pass the matching cache or kv_format.",
                            to_string(op_of(problem)), to_string(*options.kv_format), to_string(*format)));
  }
  const AttentionSpec spec = detail::spec_of(problem);
  const Device device = device_of(problem);
  // Kernels launch on the current device: the tensors' device for the call (the workspace is
  // allocated there too).
  const detail::DeviceGuard guard(device);
  const DeviceInfo& info = device_info_for(device);
  std::string backend_id;
  const std::shared_ptr<Kernel> kernel = kernel_for(context, options.backend, spec, info, &backend_id);
  const std::size_t bytes = kernel->workspace_bytes();
  CallWorkspace workspace(bytes, device, options.stream);
  RunContext ctx;
  ctx.stream = options.stream;
  ctx.workspace = workspace.get();
  ctx.workspace_bytes = bytes;
  ctx.check_indices = options.check_indices;
  kernel->run(problem, ctx);
  return backend_id;
}

}  // namespace latte
