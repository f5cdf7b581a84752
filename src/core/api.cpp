// The functional API: tensors in, the selected backend's kernel run on them. Kernels are
// kept per (backend, spec, device) so repeated calls pay for selection and make() once.
#include "latte/api.hpp"

#include <fmt/format.h>

#include <bit>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "latte/error.hpp"
#include "latte/validate.hpp"

#ifdef LATTE_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace latte {
namespace {

// Kernels are made for a token capacity; rounding it up to a power of two lets calls of
// similar size share one kernel (and one selection).
int64_t token_capacity(int64_t tokens) {
  return tokens <= 1 ? 1 : static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(tokens)));
}

// The fields every op's spec has; head dims follow the op (576/512 for MLA, 128 for the indexer).
AttentionSpec base_spec(Op op, int64_t heads, int64_t block_size, int64_t tokens) {
  AttentionSpec spec;
  spec.op = op;
  spec.num_heads = static_cast<int>(heads);
  spec.block_size = static_cast<int>(block_size);
  spec.max_tokens = token_capacity(tokens);
  if (op == Op::indexer_topk || op == Op::indexer_logits || op == Op::indexer_k_store) {
    spec.head_dim = kIndexDim;
    spec.head_dim_v = 0;
  }
  return spec;
}

struct SpecVisitor {
  AttentionSpec operator()(const SparseMlaArgs& a) const {
    const SparseMlaShape s = validate(a);
    AttentionSpec spec = base_spec(Op::sparse_mla, s.heads, s.block_size, s.tokens);
    spec.kv_cache = s.format;
    spec.topk = static_cast<int>(s.topk);
    spec.scale = a.scale;
    return spec;
  }
  AttentionSpec operator()(const MlaDecodeArgs& a) const {
    const MlaDecodeShape s = validate(a);
    AttentionSpec spec = base_spec(Op::mla_decode, s.heads, s.block_size, s.batch * s.s_q);
    spec.kv_cache = s.format;
    spec.s_q = static_cast<int>(s.s_q);
    spec.scale = a.scale;
    return spec;
  }
  static AttentionSpec indexer_spec(Op op, const IndexerShape& s, int topk) {
    AttentionSpec spec = base_spec(op, s.heads, s.block_size, s.tokens);
    spec.q_dtype = s.q_dtype;
    spec.topk = topk;
    return spec;
  }
  AttentionSpec operator()(const IndexerTopkArgs& a) const {
    return indexer_spec(Op::indexer_topk, validate(a), static_cast<int>(a.indices.size(1)));
  }
  AttentionSpec operator()(const IndexerLogitsArgs& a) const {
    return indexer_spec(Op::indexer_logits, validate(a), 0);
  }
  AttentionSpec operator()(const KvStoreArgs& a) const {
    const KvStoreShape s = validate(a);
    AttentionSpec spec = base_spec(Op::kv_store, 1, s.block_size, s.tokens);
    spec.kv_cache = s.format;
    return spec;
  }
  AttentionSpec operator()(const IndexerKStoreArgs& a) const {
    const KvStoreShape s = validate(a);
    return base_spec(Op::indexer_k_store, 1, s.block_size, s.tokens);
  }
  AttentionSpec operator()(const LogicalToSlotsArgs& a) const {
    const LogicalToSlotsShape s = validate(a);
    return base_spec(Op::logical_to_slots, 1, a.block_size, s.tokens);
  }
};

DeviceInfo device_info_for(Device device) {
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

// Kernels made so far, per (context, backend, device); specs compared with their own ==, so
// a field added to AttentionSpec can never make two specs share a kernel.
struct KernelSlot {
  const Context* context;
  std::string backend;
  Device device;
  AttentionSpec spec;
  std::shared_ptr<Kernel> kernel;
};

// Selection runs on every call (the Context caches it, keyed by spec, device, policy and
// environment), so policy or LATTE_BACKEND changes take effect; kernels are kept per chosen
// backend, spec and device.
std::shared_ptr<Kernel> kernel_for(const Context& context, const std::string& forced,
                                   const AttentionSpec& spec, const DeviceInfo& device,
                                   std::string* backend_id) {
  static std::mutex mutex;
  static std::vector<KernelSlot> cache;
  SelectOptions options;
  if (!forced.empty()) options.force.push_back(forced);
  const Selection selection = context.select(spec, device, options);
  *backend_id = selection.chosen;
  auto find = [&]() -> std::shared_ptr<Kernel> {
    for (const KernelSlot& slot : cache) {
      if (slot.context == &context && slot.backend == selection.chosen &&
          slot.device == device.handle() && slot.spec == spec)
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
  cache.push_back(KernelSlot{&context, selection.chosen, device.handle(), spec, kernel});
  return kernel;
}

// Workspace for one call: host memory on the CPU, stream-ordered device memory on CUDA (so
// the call stays asynchronous and capturable in a CUDA graph).
class CallWorkspace {
 public:
  CallWorkspace(std::size_t bytes, Device device, void* stream) : device_(device), stream_(stream) {
    if (bytes == 0) return;
    if (device.kind == DeviceKind::cpu) {
      host_.resize(bytes);
      ptr_ = host_.data();
      return;
    }
#ifdef LATTE_WITH_CUDA
    const cudaError_t err = cudaMallocAsync(&ptr_, bytes, static_cast<cudaStream_t>(stream));
    if (err != cudaSuccess) {
      throw Error(ErrorCode::cuda_error,
                  fmt::format("allocating {} bytes of workspace on cuda:{} failed: {}", bytes,
                              device.index, cudaGetErrorString(err)));
    }
#else
    throw Error(ErrorCode::unsupported, "a CUDA tensor was given to a latte built without CUDA");
#endif
  }
  ~CallWorkspace() {
#ifdef LATTE_WITH_CUDA
    if (ptr_ && device_.kind == DeviceKind::cuda) cudaFreeAsync(ptr_, static_cast<cudaStream_t>(stream_));
#endif
  }
  CallWorkspace(const CallWorkspace&) = delete;
  CallWorkspace& operator=(const CallWorkspace&) = delete;
  [[nodiscard]] void* get() const { return ptr_; }

 private:
  Device device_;
  void* stream_;
  void* ptr_ = nullptr;
  std::vector<unsigned char> host_;
};

}  // namespace

AttentionSpec spec_from_args(const OpArgs& args) { return std::visit(SpecVisitor{}, args); }

std::string run(const OpArgs& args, const CallOptions& options) {
  const Context& context = options.context ? *options.context : Context::global();
  const AttentionSpec spec = spec_from_args(args);
  const Device device = common_device(args);
#ifdef LATTE_WITH_CUDA
  // Kernels launch on the current device: make it the tensors' device for the call.
  int previous = -1;
  if (device.kind == DeviceKind::cuda) {
    cudaGetDevice(&previous);
    if (previous != device.index) cudaSetDevice(device.index);
  }
  struct Restore {
    int device;
    ~Restore() { if (device >= 0) cudaSetDevice(device); }
  } restore{previous};
#endif
  const DeviceInfo info = device_info_for(device);
  std::string backend_id;
  const std::shared_ptr<Kernel> kernel = kernel_for(context, options.backend, spec, info, &backend_id);
  const std::size_t bytes = kernel->workspace_bytes();
  CallWorkspace workspace(bytes, device, options.stream);
  RunContext ctx;
  ctx.stream = options.stream;
  ctx.workspace = workspace.get();
  ctx.workspace_bytes = bytes;
  ctx.check_indices = options.check_indices;
  kernel->run(args, ctx);
  return backend_id;
}

}  // namespace latte
