// The cuda.sparse_mla backend: declared capabilities, registration, and the Kernel that
// validates a call, fills the raw-pointer parameters and launches on the caller's stream.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <variant>
#include <vector>

#include "backends/cuda_sparse_mla/mla_params.hpp"
#include "cuda/check.cuh"
#include "latte/backend.hpp"
#include "latte/error.hpp"
#include "latte/registry.hpp"
#include "latte/spec.hpp"
#include "latte/validate.hpp"

namespace latte::cuda_sparse_mla {
namespace {

constexpr int kMaxTokens = 65536;
constexpr int kMaxTopkDeclared = 32768;
// Longest decode context the default workspace is sized for (DeepSeek max_position_embeddings).
constexpr int kWorkspaceContext = 163840;

Capabilities declared() {
  Capabilities caps;
  caps.ops = {Op::sparse_mla, Op::mla_decode};
  caps.devices = {DeviceKind::cuda};
  caps.arch = IntRule::at_least(80);
  caps.q_dtypes = {DType::bf16};
  caps.kv_caches = {CacheFormat::bf16, CacheFormat::fp8_ds_mla};
  caps.heads = IntRule::range(1, 128);
  caps.head_dim = IntRule::list({kQkDim});
  caps.block_size = IntRule::at_least(1);
  caps.topk = IntRule::range(1, kMaxTopkDeclared);
  caps.s_q = IntRule::range(1, 4);
  caps.max_tokens = IntRule::range(1, kMaxTokens);
  caps.workspace =
      "split partials: tokens x heads x ceil(topk/chunk) x 1028 B (chunk 128 ... 2048 tokens by "
      "rows and the kernel's max_tokens; decode: ceil(context/1024 ... 4096)), capped at 256 MiB; "
      "0 when unsplit";
  caps.notes =
      "portable mma.sync/ldmatrix/cp.async kernels for sm_80..sm_120 (<= 101376 B shared memory "
      "per block), bf16 / f16 math; fp8_ds_mla converted in the fragment path; fp8 sparse calls of "
      "<= 8 heads on GPUs with two such blocks per SM: the heads on the mma's N dimension";
  return caps;
}

int rows_of(const AttentionSpec& spec) {
  return (spec.op == Op::mla_decode ? std::max(1, spec.s_q) : 1) * std::max(1, spec.num_heads);
}

class CudaSparseMlaKernel final : public Kernel {
 public:
  CudaSparseMlaKernel(const AttentionSpec& spec, const DeviceInfo& device)
      : spec_(spec),
        device_{std::max(1, device.sm_count), device.max_smem_per_block + 1024},
        tuning_(tuning_from_env()) {
    const bool decode = spec.op == Op::mla_decode;
    // groups 0: a kernel made without spec.max_tokens (any call size; sized for kUnknownCallGroups)
    const int64_t tokens = spec.max_tokens;
    const int64_t groups =
        tokens <= 0 ? 0 : decode ? std::max<int64_t>(1, tokens / std::max(1, spec.s_q)) : tokens;
    const int work = decode ? kWorkspaceContext : std::max(1, spec.topk);
    max_groups_ = groups;
    workspace_ = workspace_bytes_for(decode, spec.kv_cache, rows_of(spec), work, groups, tuning_, device_);
  }

  [[nodiscard]] std::size_t workspace_bytes() const override { return workspace_; }

  // The plan of a call of the kernel's size (a decode request spanning the workspace's context).
  [[nodiscard]] std::string describe() const override {
    MlaParams p;
    p.decode = spec_.op == Op::mla_decode;
    p.format = spec_.kv_cache;
    p.s_q = p.decode ? std::max(1, spec_.s_q) : 1;
    p.heads = std::max(1, spec_.num_heads);
    p.topk = std::max(1, spec_.topk);
    p.block_size = std::max(1, spec_.block_size);
    p.max_blocks = p.decode ? (kWorkspaceContext + p.block_size - 1) / p.block_size : 0;
    p.groups = static_cast<int>(std::max<int64_t>(1, max_groups_));
    const MlaPlan plan = make_plan(p, device_, workspace_, tuning_, max_groups_);
    return describe_plan(p, plan, device_, max_groups_);
  }

  void run(const OpArgs& args, const RunContext& ctx) override {
    if (op_of(args) != spec_.op) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("cuda.sparse_mla: this kernel was made for {} but was given {} "
                              "arguments; make a kernel for {}.",
                              to_string(spec_.op), to_string(op_of(args)), to_string(op_of(args))));
    }
    MlaParams p;
    Device dev{};
    if (const auto* a = std::get_if<SparseMlaArgs>(&args)) {
      const SparseMlaShape s = validate(*a);
      dev = require_cuda(args);
      if (s.tokens == 0) return;
      fill_common(p, a->q, a->kv_cache, s.format, s.num_blocks, s.block_size, a->out, a->lse,
                  a->scale);
      p.decode = false;
      p.groups = static_cast<int>(s.tokens);
      p.s_q = 1;
      p.heads = static_cast<int>(s.heads);
      p.q_sg = a->q.stride(0);
      p.q_si = 0;
      p.q_sh = a->q.stride(1);
      set_q_rope(p, a->q_rope);
      p.o_sg = a->out.stride(0);
      p.o_si = 0;
      p.o_sh = a->out.stride(1);
      if (a->lse.defined()) {
        p.l_sg = a->lse.stride(0);
        p.l_si = 0;
        p.l_sh = a->lse.stride(1);
      }
      p.indices = a->indices.ptr<const int32_t>();
      p.idx_s = a->indices.stride(0);
      p.topk = static_cast<int>(s.topk);
      if (ctx.check_indices) check_sparse(*a, s, ctx);
    } else if (const auto* d = std::get_if<MlaDecodeArgs>(&args)) {
      const MlaDecodeShape s = validate(*d);
      dev = require_cuda(args);
      if (s.batch == 0) return;
      fill_common(p, d->q, d->kv_cache, s.format, s.num_blocks, s.block_size, d->out, d->lse,
                  d->scale);
      p.decode = true;
      p.groups = static_cast<int>(s.batch);
      p.s_q = static_cast<int>(s.s_q);
      p.heads = static_cast<int>(s.heads);
      p.q_sg = d->q.stride(0);
      p.q_si = d->q.stride(1);
      p.q_sh = d->q.stride(2);
      set_q_rope(p, TensorView{});
      p.o_sg = d->out.stride(0);
      p.o_si = d->out.stride(1);
      p.o_sh = d->out.stride(2);
      if (d->lse.defined()) {
        p.l_sg = d->lse.stride(0);
        p.l_si = d->lse.stride(1);
        p.l_sh = d->lse.stride(2);
      }
      p.block_table = d->block_table.ptr<const int32_t>();
      p.bt_s = d->block_table.stride(0);
      p.max_blocks = static_cast<int>(s.max_blocks);
      p.seq_lens = d->seq_lens.ptr<const int32_t>();
      p.sl_s = d->seq_lens.stride(0);
      if (ctx.check_indices) check_decode(*d, s, ctx);
    } else {
      throw Error(ErrorCode::unsupported,
                  fmt::format("cuda.sparse_mla computes sparse_mla and mla_decode, not {}.",
                              to_string(op_of(args))));
    }
    if (p.s_q * p.heads > 512 || p.heads > 128) {
      throw Error(ErrorCode::unsupported,
                  fmt::format("cuda.sparse_mla: {} heads per rank; it takes 1..128.", p.heads));
    }
    if (p.groups > kMaxTokens * 4) {
      throw Error(ErrorCode::unsupported,
                  fmt::format("cuda.sparse_mla: {} groups in one call; split the call.", p.groups));
    }
    int prev = 0;
    LATTE_CUDA_TRY(cudaGetDevice(&prev));
    if (prev != dev.index) LATTE_CUDA_TRY(cudaSetDevice(dev.index));
    try {
      const MlaPlan plan =
          make_plan(p, device_, ctx.workspace ? ctx.workspace_bytes : 0, tuning_, max_groups_);
      if (plan.nsplit > 1 && ctx.workspace == nullptr) {
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("cuda.sparse_mla: this call splits each token's KV list in {} "
                                "parts and needs a workspace (RunContext::workspace) of "
                                "Kernel::workspace_bytes() = {} bytes.",
                                plan.nsplit, workspace_));
      }
      launch_mla(p, plan, ctx.workspace, static_cast<cudaStream_t>(ctx.stream), dev.index);
    } catch (...) {
      if (prev != dev.index) cudaSetDevice(prev);
      throw;
    }
    if (prev != dev.index) LATTE_CUDA_TRY(cudaSetDevice(prev));
  }

 private:
  static Device require_cuda(const OpArgs& args) {
    const Device dev = common_device(args);
    if (dev.kind != DeviceKind::cuda) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("cuda.sparse_mla: {} was given host tensors; it reads CUDA device "
                              "memory. Move the tensors to the GPU or select cpu.reference.",
                              to_string(op_of(args))));
    }
    return dev;
  }

  // The rope dims' address: a q_rope tensor of its own, else q's last 64 dims.
  static void set_q_rope(MlaParams& p, const TensorView& q_rope) {
    if (q_rope.defined()) {
      p.q_rope = q_rope.ptr<const __nv_bfloat16>();
      p.qr_sg = q_rope.stride(0);
      p.qr_si = 0;
      p.qr_sh = q_rope.stride(1);
    } else {
      p.q_rope = p.q + kLatentDim;
      p.qr_sg = p.q_sg;
      p.qr_si = p.q_si;
      p.qr_sh = p.q_sh;
    }
  }

  static void fill_common(MlaParams& p, const TensorView& q, const TensorView& kv,
                          CacheFormat format, int64_t num_blocks, int64_t block_size,
                          const TensorView& out, const TensorView& lse, float scale) {
    p.q = q.ptr<const __nv_bfloat16>();
    p.kv = kv.ptr<const uint8_t>();
    const int64_t esz = format == CacheFormat::fp8_ds_mla ? 1 : 2;
    p.kv_sblock = kv.stride(0) * esz;
    p.kv_stok = kv.stride(1) * esz;
    p.num_blocks = num_blocks;
    p.block_size = static_cast<int>(block_size);
    p.format = format;
    p.out = out.ptr<__nv_bfloat16>();
    p.lse = lse.defined() ? lse.ptr<float>() : nullptr;
    p.scale = scale;
  }

  // Check mode: copy the indices to the host (a synchronization, documented) and check them.
  static void check_sparse(const SparseMlaArgs& a, const SparseMlaShape& s, const RunContext& ctx) {
    const int64_t rows = s.tokens, stride = a.indices.stride(0);
    std::vector<int32_t> host(static_cast<std::size_t>((rows - 1) * stride + s.topk));
    auto stream = static_cast<cudaStream_t>(ctx.stream);
    LATTE_CUDA_TRY(cudaMemcpyAsync(host.data(), a.indices.data, host.size() * sizeof(int32_t),
                                   cudaMemcpyDeviceToHost, stream));
    LATTE_CUDA_TRY(cudaStreamSynchronize(stream));
    check_slot_indices(host.data(), rows, s.topk, stride, s.num_slots(), "sparse_mla: indices");
  }

  static void check_decode(const MlaDecodeArgs& d, const MlaDecodeShape& s, const RunContext& ctx) {
    auto stream = static_cast<cudaStream_t>(ctx.stream);
    const int64_t ls = d.seq_lens.stride(0), bs = d.block_table.stride(0);
    std::vector<int32_t> lens(static_cast<std::size_t>((s.batch - 1) * ls + 1));
    std::vector<int32_t> table(static_cast<std::size_t>((s.batch - 1) * bs + s.max_blocks));
    LATTE_CUDA_TRY(cudaMemcpyAsync(lens.data(), d.seq_lens.data, lens.size() * sizeof(int32_t),
                                   cudaMemcpyDeviceToHost, stream));
    LATTE_CUDA_TRY(cudaMemcpyAsync(table.data(), d.block_table.data,
                                   table.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
    LATTE_CUDA_TRY(cudaStreamSynchronize(stream));
    const int64_t capacity = s.max_blocks * s.block_size;
    check_values_in_range(lens.data(), s.batch, ls, s.s_q, capacity, "mla_decode: seq_lens",
                          "each request holds at least its s_q new tokens and at most "
                          "max_blocks * block_size positions of block_table");
    std::vector<int64_t> used(static_cast<std::size_t>(s.batch));
    for (int64_t b = 0; b < s.batch; ++b) {
      const int64_t len = lens[static_cast<std::size_t>(b * ls)];
      used[static_cast<std::size_t>(b)] = (len + s.block_size - 1) / s.block_size;
    }
    check_block_table_prefix(table.data(), s.batch, bs, used.data(), s.num_blocks,
                             "mla_decode: block_table");
  }

  AttentionSpec spec_;
  PlanDevice device_;  // SM count and shared memory per SM, for the launch plan
  Tuning tuning_;  // the environment's tuning hooks, read once here
  int64_t max_groups_ = 0;  // groups of the largest call (spec.max_tokens; 0: not known): the split size
  std::size_t workspace_ = 0;
};

class CudaSparseMlaBackend final : public Backend {
 public:
  CudaSparseMlaBackend()
      : info_{"cuda.sparse_mla",
              "portable CUDA sparse MLA and dense paged MLA decode (sm_80..sm_120), bf16 or "
              "fp8_ds_mla cache, any heads 1..128, topk 1..32768, block size >= 1",
              declared(), "built-in"} {}

  [[nodiscard]] const BackendInfo& info() const override { return info_; }

  [[nodiscard]] std::vector<Reason> custom_checks(const AttentionSpec& spec,
                                                  const DeviceInfo& device) const override {
    std::vector<Reason> out;
    if (spec.head_dim_v != kLatentDim) {
      out.push_back({"head_dim_v", "head_dim_v", std::to_string(kLatentDim),
                     std::to_string(spec.head_dim_v),
                     fmt::format("cuda.sparse_mla computes the 512-dim MLA latent output; this "
                                 "spec has head_dim_v {}.",
                                 spec.head_dim_v)});
    }
    if (spec.op == Op::mla_decode && spec.s_q * spec.num_heads > 512) {
      out.push_back({"rows", "s_q * num_heads", "<= 512",
                     std::to_string(spec.s_q * spec.num_heads),
                     "cuda.sparse_mla decodes at most 512 (query, head) rows per request."});
    }
    const int64_t need = static_cast<int64_t>(
        std::max(smem_bytes(CacheFormat::bf16, 32), smem_bytes(CacheFormat::fp8_ds_mla, 32)));
    if (device.kind == DeviceKind::cuda && device.max_smem_per_block > 0 &&
        device.max_smem_per_block < need) {
      out.push_back({"smem", "max_smem_per_block", fmt::format(">= {} bytes", need),
                     std::to_string(device.max_smem_per_block),
                     fmt::format("cuda.sparse_mla needs {} bytes of shared memory per block; "
                                 "{} offers {}.",
                                 need, device.label(), device.max_smem_per_block)});
    }
    return out;
  }

  [[nodiscard]] std::unique_ptr<Kernel> make(const AttentionSpec& spec,
                                             const DeviceInfo& device) const override {
    return std::make_unique<CudaSparseMlaKernel>(spec, device);
  }

 private:
  BackendInfo info_;
};

LATTE_REGISTER_BACKEND(CudaSparseMlaBackend);

}  // namespace
}  // namespace latte::cuda_sparse_mla
