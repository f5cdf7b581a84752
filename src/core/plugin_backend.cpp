// A latte_backend_v1 from a plugin, seen as a latte::Backend: C++ types are converted to the
// C structs of latte/plugin.h, and nothing a plugin throws escapes into the host.
#include <fmt/format.h>

#include <cstddef>
#include <cstring>
#include <type_traits>
#include <variant>

#include "core/op_traits.hpp"
#include "core/plugin_loader.hpp"
#include "core/spec_fields.hpp"
#include "latte/error.hpp"

namespace latte::detail {
namespace {

static_assert(static_cast<int>(DType::u8) == LATTE_U8 && static_cast<int>(DType::bf16) == LATTE_BF16,
              "latte_dtype_v1 follows latte::DType");
static_assert(static_cast<int>(Op::logical_to_slots) == LATTE_OP_LOGICAL_TO_SLOTS,
              "latte_op_v1 follows latte::Op");
static_assert(static_cast<int>(CacheFormat::fp8_ds_mla) == LATTE_CACHE_FP8_DS_MLA,
              "latte_cache_format_v1 follows latte::CacheFormat");

std::string message_of(const char* buffer, std::size_t size) {
  const std::size_t len = strnlen(buffer, size);
  return len ? std::string(buffer, len) : std::string("(no message)");
}

latte_device_v1 to_c(const DeviceInfo& device) {
  latte_device_v1 c{};
  c.struct_size = sizeof c;
  c.kind = device.kind == DeviceKind::cpu ? LATTE_DEVICE_CPU : LATTE_DEVICE_CUDA;
  c.index = device.index;
  c.arch = device.arch();
  c.sm_count = device.sm_count;
  c.max_smem_per_block = device.max_smem_per_block;
  c.memory_bytes = device.memory_bytes;
  c.name = device.name.c_str();
  return c;
}

latte_tensor_v1 to_c(const TensorView& t) {
  latte_tensor_v1 c{};
  c.data = t.data;
  c.dtype = static_cast<int32_t>(t.dtype);
  c.rank = t.rank;
  for (int d = 0; d < t.rank && d < LATTE_PLUGIN_MAX_RANK; ++d) {
    c.shape[d] = t.size(d);
    c.strides[d] = t.stride(d);
  }
  c.device_kind = t.device.kind == DeviceKind::cpu ? LATTE_DEVICE_CPU : LATTE_DEVICE_CUDA;
  c.device_index = t.device.index;
  return c;
}

// The tensors of a call in the field order of its Args struct (latte/ops.hpp), and the
// op's scalar parameters, as latte_call_v1 documents.
struct CCall {
  std::vector<latte_tensor_v1> tensors;
  float scale = 0.0f;
  int32_t int_param = 0;
};

CCall to_c(const OpArgs& args) {
  CCall call;
  const auto add = [&](std::initializer_list<const TensorView*> views) {
    for (const TensorView* v : views) call.tensors.push_back(to_c(*v));
  };
  const auto add_indexer = [&](const IndexerInputs& in) {
    add({&in.q, &in.q_scale, &in.weights, &in.k_cache, &in.block_table, &in.token_request, &in.visible_lens});
  };
  std::visit(
      [&](const auto& a) {
        using T = std::decay_t<decltype(a)>;
        if constexpr (std::is_same_v<T, SparseMlaArgs>) {
          add({&a.q, &a.kv_cache, &a.indices, &a.out, &a.lse});
          call.scale = a.scale;
        } else if constexpr (std::is_same_v<T, MlaDecodeArgs>) {
          add({&a.q, &a.kv_cache, &a.block_table, &a.seq_lens, &a.out, &a.lse});
          call.scale = a.scale;
        } else if constexpr (std::is_same_v<T, IndexerTopkArgs>) {
          add_indexer(a.in);
          add({&a.indices});
          call.int_param = a.kind == IndexKind::logical ? 0 : 1;
        } else if constexpr (std::is_same_v<T, IndexerLogitsArgs>) {
          add_indexer(a.in);
          add({&a.logits});
        } else if constexpr (std::is_same_v<T, KvStoreArgs>) {
          add({&a.latent, &a.rope, &a.slot_mapping, &a.kv_cache});
          call.int_param = a.scale_kind == Fp8ScaleKind::amax ? 0 : 1;
        } else if constexpr (std::is_same_v<T, IndexerKStoreArgs>) {
          add({&a.k, &a.slot_mapping, &a.k_cache});
          call.int_param = a.scale_kind == Fp8ScaleKind::amax ? 0 : 1;
        } else if constexpr (std::is_same_v<T, LogicalToSlotsArgs>) {
          add({&a.positions, &a.block_table, &a.token_request, &a.slots});
          call.int_param = a.block_size;
        } else {
          // indexer_pool_store: refused by custom_checks, so no kernel is ever given one.
          static_assert(std::is_same_v<T, IndexerPoolStoreArgs>, "every op of ABI v1 has a C form");
          throw Error(ErrorCode::unsupported, "plugins (ABI v1) cannot run indexer_pool_store");
        }
      },
      args);
  return call;
}

// Collects reasons from the plugin's check(); every string is copied.
void reason_sink(void* state, const char* code, const char* field, const char* wanted, const char* got,
                 const char* text) {
  auto* reasons = static_cast<std::vector<Reason>*>(state);
  const auto str = [](const char* s) { return s ? std::string(s) : std::string(); };
  reasons->push_back(Reason{code && *code ? str(code) : "custom", str(field), str(wanted), str(got), str(text)});
}

class PluginKernel final : public Kernel {
 public:
  PluginKernel(const AttentionSpec& spec, Device device, std::shared_ptr<PluginLibrary> library,
               const latte_backend_v1* desc, void* kernel, std::string id)
      : Kernel(spec, device), library_(std::move(library)), desc_(desc), kernel_(kernel), id_(std::move(id)) {}
  ~PluginKernel() override {
    try {
      desc_->destroy(kernel_);
    } catch (...) {
      // A destructor must not throw; a plugin that throws here leaks its kernel.
    }
  }

  std::string describe() const override {
    // OPTIONAL entry, present only in plugins whose struct reaches it
    if (desc_->struct_size < offsetof(latte_backend_v1, describe) + sizeof desc_->describe || !desc_->describe) {
      return {};
    }
    try {
      const char* text = desc_->describe(kernel_);
      return text ? std::string(text) : std::string();
    } catch (...) {
      throw Error(ErrorCode::plugin_error,
                  fmt::format("plugin backend {} ({}) threw from describe()", id_, library_->path));
    }
  }

  std::size_t workspace_bytes() const override {
    try {
      return desc_->workspace_bytes(kernel_);
    } catch (...) {
      throw Error(ErrorCode::plugin_error,
                  fmt::format("plugin backend {} ({}) threw from workspace_bytes()", id_, library_->path));
    }
  }

 protected:
  // Called with a problem that fits this kernel (Kernel::run checked it): a plugin receives only
  // arguments whose shapes, dtypes, strides and devices agree, with the same messages as
  // built-ins, and index values already checked in check mode.
  void compute(const Problem& problem, const RunContext& ctx) override {
    const CCall c = std::visit([](const auto& p) { return to_c(OpArgs(*p.args)); }, problem);
    latte_call_v1 call{};
    call.struct_size = sizeof call;
    call.op = static_cast<int32_t>(op_of(problem));
    call.num_tensors = static_cast<int32_t>(c.tensors.size());
    call.tensors = c.tensors.data();
    call.scale = c.scale;
    call.int_param = c.int_param;
    call.stream = ctx.stream;
    call.workspace = ctx.workspace;
    call.workspace_bytes = ctx.workspace_bytes;
    call.check_indices = ctx.check_indices ? 1 : 0;
    char error[1024] = {};
    int rc = 0;
    try {
      rc = desc_->run(kernel_, &call, error, sizeof error);
    } catch (const std::exception& e) {
      throw Error(ErrorCode::plugin_error,
                  fmt::format("plugin backend {} ({}) threw from run(): {}", id_, library_->path, e.what()));
    } catch (...) {
      throw Error(ErrorCode::plugin_error,
                  fmt::format("plugin backend {} ({}) threw from run()", id_, library_->path));
    }
    if (rc != 0) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("{}: {}", id_, message_of(error, sizeof error)));
    }
  }

 private:
  std::shared_ptr<PluginLibrary> library_;  // keeps the code of desc_ loaded
  const latte_backend_v1* desc_;
  void* kernel_;
  std::string id_;
};

class PluginBackend final : public Backend {
 public:
  PluginBackend(std::shared_ptr<PluginLibrary> library, const latte_backend_v1* desc, BackendInfo info)
      : library_(std::move(library)), desc_(desc), info_(std::move(info)) {}

  const BackendInfo& info() const override { return info_; }

  std::vector<Reason> custom_checks(const AttentionSpec& spec, const DeviceInfo& device) const override {
    // ABI v1 hands a plugin the call's tensors in the v1 field order of the Args structs: one q,
    // no rope_dim (its rows always have rope) and no topk_lens.
    std::vector<Reason> refused;
    if (spec.split_q) {
      refused.push_back(Reason{"split_q", "q", "q as one [T, H, 576] tensor", "q [T, H, 512] + q_rope [T, H, 64]",
                               "plugins (ABI v1) take the query as one [T, H, 576] tensor; concatenate q and "
                               "q_rope for this backend"});
    }
    if (op_uses_mla_cache(spec.op) && spec.head_dim == kLatentDim) {
      refused.push_back(Reason{"rope_dim", "head_dim", "576 (rows with rope)", "512 (rope_dim 0: no rope)",
                               "plugins (ABI v1) know MLA rows with 64 rope dims only: the ABI has no rope_dim, "
                               "so a row without rope would be read as one with rope; use a built-in backend "
                               "for a model without rope"});
    }
    if (spec.topk_lens) {
      refused.push_back(Reason{"topk_lens", "topk_lens", "absent", "[T] i32 row lengths",
                               "plugins (ABI v1) are given no topk_lens and would read every column of "
                               "indices; pad each row with -1 past its length and drop topk_lens"});
    }
    // ABI v1 has no pool geometry (kpool, pool_topk, select_tail, out_lens) and no pool store.
    if (spec.op == Op::indexer_pool_store) {
      refused.push_back(Reason{"op", "op", "an op of plugin ABI v1", "indexer_pool_store",
                               "plugins (ABI v1) cannot be given indexer_pool_store (its arguments have no C "
                               "form); it runs on cpu.reference"});
    } else if (auto pooled = pooled_indexer_refusal("a plugin (ABI v1, which has no pool geometry)", spec)) {
      refused.push_back(*pooled);
    }
    if (!refused.empty()) return refused;
    if (!desc_->check) return {};
    const latte_spec_v1 c_spec = spec_to_c(spec);
    const latte_device_v1 c_device = to_c(device);
    std::vector<Reason> reasons;
    int rc = 0;
    try {
      rc = desc_->check(&c_spec, &c_device, reason_sink, &reasons);
    } catch (...) {
      return {Reason{"check_error", "backend", "a check that returns", "an exception",
                     fmt::format("the plugin's check() threw ({}); treated as a refusal", library_->path)}};
    }
    if (rc != 0 && reasons.empty()) {
      reasons.push_back(Reason{"check_error", "backend", "0", std::to_string(rc),
                               fmt::format("the plugin's check() returned {} without a reason", rc)});
    }
    return reasons;
  }

  std::unique_ptr<Kernel> make(const AttentionSpec& spec, const DeviceInfo& device) const override {
    const latte_spec_v1 c_spec = spec_to_c(spec);
    const latte_device_v1 c_device = to_c(device);
    void* kernel = nullptr;
    char error[1024] = {};
    int rc = 0;
    try {
      rc = desc_->make(&c_spec, &c_device, &kernel, error, sizeof error);
    } catch (const std::exception& e) {
      throw Error(ErrorCode::plugin_error,
                  fmt::format("plugin backend {} ({}) threw from make(): {}", info_.id, library_->path, e.what()));
    } catch (...) {
      throw Error(ErrorCode::plugin_error,
                  fmt::format("plugin backend {} ({}) threw from make()", info_.id, library_->path));
    }
    if (rc != 0 || !kernel) {
      if (kernel) {
        try {
          desc_->destroy(kernel);
        } catch (...) {
        }
      }
      throw Error(ErrorCode::unsupported,
                  fmt::format("plugin backend {} could not make a kernel for {} on {}: {}", info_.id,
                              spec.summary(), device.label(),
                              rc != 0 ? message_of(error, sizeof error) : std::string("make() returned no kernel")));
    }
    return std::make_unique<PluginKernel>(spec, device.handle(), library_, desc_, kernel, info_.id);
  }

 private:
  std::shared_ptr<PluginLibrary> library_;
  const latte_backend_v1* desc_;
  BackendInfo info_;
};

}  // namespace

latte_spec_v1 spec_to_c(const AttentionSpec& spec) {
  latte_spec_v1 c{};
  c.struct_size = sizeof c;
  c.op = static_cast<int32_t>(spec.op);
  c.q_dtype = static_cast<int32_t>(spec.q_dtype);
  c.kv_cache = static_cast<int32_t>(spec.kv_cache);
  c.scale = spec.scale;
  c.model = spec.model.c_str();
  for (const SpecIntField& f : spec_int_fields()) {
    if (f.c_abi.present()) f.c_abi.set(c, f.spec.get(spec));
  }
  return c;
}

std::shared_ptr<const Backend> make_plugin_backend(std::shared_ptr<PluginLibrary> library,
                                                   const latte_backend_v1* desc, BackendInfo info) {
  return std::make_shared<PluginBackend>(std::move(library), desc, std::move(info));
}

}  // namespace latte::detail
