// example.cpu_sparse_mla: a complete latte backend in a plugin. It includes only
// latte/plugin.h (the stable C ABI) and links nothing of latte, so it shows everything an
// out-of-tree backend needs: declared capabilities, a shipped policy rule, argument checks,
// and the computation itself (docs/design.md, section 2) on the CPU with float32 accumulation.
//
// Semantics: score = scale * dot(q[t,h], c[s]) over the listed slots of indices[t] (-1 = no
// token; an out-of-range slot is an error in check mode and skipped otherwise; a slot listed
// twice counts twice, as in the GPU kernels); lse is the natural log of the sum of exp(score);
// out is the softmax-weighted latent part c[s][0:512]. A row without tokens gets out = 0 and
// lse = -inf.
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <vector>

#include "latte/plugin.h"

namespace {

constexpr int kQkDim = 576;
constexpr int kLatentDim = 512;

// bf16 <-> float, round to nearest even; NaN stays NaN.
float bf16_to_float(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

uint16_t float_to_bf16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof word);
  if ((word & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((word >> 16) | 0x40u);  // quiet NaN
  word += 0x7fffu + ((word >> 16) & 1u);
  return static_cast<uint16_t>(word >> 16);
}

int fail(char* error, size_t error_len, const char* format, ...) {
  if (error && error_len) {
    va_list args;
    va_start(args, format);
    std::vsnprintf(error, error_len, format, args);
    va_end(args);
  }
  return 1;
}

const char* dtype_name(int32_t dtype) {
  static const char* names[] = {"f32", "f16", "bf16", "e4m3", "i32", "u8"};
  return dtype >= 0 && dtype <= LATTE_U8 ? names[dtype] : "unknown";
}

// Checks one tensor's dtype, rank, device and (where wanted >= 0) extents.
int check_tensor(const latte_tensor_v1& t, const char* name, int32_t dtype, int rank, const int64_t* want,
                 char* error, size_t error_len) {
  if (!t.data) return fail(error, error_len, "sparse_mla: %s is missing", name);
  if (t.dtype != dtype) {
    return fail(error, error_len, "sparse_mla: %s must be %s, got %s", name, dtype_name(dtype), dtype_name(t.dtype));
  }
  if (t.rank != rank) return fail(error, error_len, "sparse_mla: %s must have rank %d, got %d", name, rank, t.rank);
  if (t.device_kind != LATTE_DEVICE_CPU) {
    return fail(error, error_len, "sparse_mla: %s is on cuda:%d; example.cpu_sparse_mla runs on the CPU "
                "(copy the tensors to host memory or use a CUDA backend)", name, t.device_index);
  }
  for (int d = 0; d < rank; ++d) {
    if (t.shape[d] < 0) return fail(error, error_len, "sparse_mla: %s has a negative extent in dim %d", name, d);
    if (want[d] >= 0 && t.shape[d] != want[d]) {
      return fail(error, error_len, "sparse_mla: %s dim %d must be %lld, got %lld", name, d,
                  static_cast<long long>(want[d]), static_cast<long long>(t.shape[d]));
    }
  }
  return 0;
}

struct Kernel {
  int32_t num_heads;
  char description[96];  // describe()'s line, valid while the kernel lives
};

int check_spec(const latte_spec_v1* spec, const latte_device_v1* device, latte_reason_sink_fn sink, void* state) {
  // A rule the declared capabilities cannot express: the kernel reads the rope part from the
  // same row, so head_dim_v must be the latent width.
  (void)device;
  if (spec->head_dim_v != kLatentDim) {
    char got[32];
    std::snprintf(got, sizeof got, "%d", spec->head_dim_v);
    sink(state, "head_dim_v", "head_dim_v", "512", got, "needs a 512-wide latent (head_dim_v 512)");
  }
  return 0;
}

int make_kernel(const latte_spec_v1* spec, const latte_device_v1* device, void** kernel, char* error, size_t error_len) {
  if (device->kind != LATTE_DEVICE_CPU) return fail(error, error_len, "example.cpu_sparse_mla runs on the CPU only");
  Kernel* k = new (std::nothrow) Kernel{spec->num_heads, {}};
  if (!k) return fail(error, error_len, "out of memory");
  std::snprintf(k->description, sizeof k->description, "one host thread, %d heads per token, float32 sums",
                static_cast<int>(spec->num_heads));
  *kernel = k;
  return 0;
}

size_t workspace_bytes(void* kernel) {
  (void)kernel;
  return 0;  // scratch lives on the host stack and heap, not in a device workspace
}

void destroy_kernel(void* kernel) { delete static_cast<Kernel*>(kernel); }

const char* describe_kernel(void* kernel) { return static_cast<const Kernel*>(kernel)->description; }

int run_sparse_mla(void* kernel_ptr, const latte_call_v1* call, char* error, size_t error_len) {
  const Kernel& kernel = *static_cast<const Kernel*>(kernel_ptr);
  if (call->op != LATTE_OP_SPARSE_MLA) return fail(error, error_len, "example.cpu_sparse_mla runs sparse_mla only");
  if (call->num_tensors != 5) return fail(error, error_len, "sparse_mla: expected 5 tensors, got %d", call->num_tensors);
  const latte_tensor_v1& q = call->tensors[0];
  const latte_tensor_v1& cache = call->tensors[1];
  const latte_tensor_v1& indices = call->tensors[2];
  const latte_tensor_v1& out = call->tensors[3];
  const latte_tensor_v1& lse = call->tensors[4];

  const int64_t any = -1;
  const int64_t q_want[] = {any, kernel.num_heads, kQkDim};
  if (check_tensor(q, "q", LATTE_BF16, 3, q_want, error, error_len)) return 1;
  const int64_t tokens = q.shape[0];
  const int64_t heads = q.shape[1];
  const int64_t cache_want[] = {any, any, kQkDim};
  if (check_tensor(cache, "kv_cache", LATTE_BF16, 3, cache_want, error, error_len)) return 1;
  const int64_t idx_want[] = {tokens, any};
  if (check_tensor(indices, "indices", LATTE_I32, 2, idx_want, error, error_len)) return 1;
  const int64_t out_want[] = {tokens, heads, kLatentDim};
  if (check_tensor(out, "out", LATTE_BF16, 3, out_want, error, error_len)) return 1;
  const bool has_lse = lse.data != nullptr;
  if (has_lse) {
    const int64_t lse_want[] = {tokens, heads};
    if (check_tensor(lse, "lse", LATTE_F32, 2, lse_want, error, error_len)) return 1;
  }
  if (cache.strides[2] != 1 || q.strides[2] != 1 || out.strides[2] != 1) {
    return fail(error, error_len, "sparse_mla: q, kv_cache and out need contiguous rows (last stride 1)");
  }
  const int64_t topk = indices.shape[1];
  if (topk > 65536) return fail(error, error_len, "sparse_mla: topk %lld is above 65536", static_cast<long long>(topk));
  if (!(call->scale > 0.0f) || !std::isfinite(call->scale)) {
    return fail(error, error_len, "sparse_mla: scale %g must be a positive finite number", static_cast<double>(call->scale));
  }
  const int64_t block_size = cache.shape[1];
  const int64_t num_slots = cache.shape[0] * block_size;

  const auto* q_data = static_cast<const uint16_t*>(q.data);
  const auto* c_data = static_cast<const uint16_t*>(cache.data);
  const auto* idx_data = static_cast<const int32_t*>(indices.data);
  auto* out_data = static_cast<uint16_t*>(out.data);
  auto* lse_data = static_cast<float*>(lse.data);

  std::vector<float> rows;     // the gathered cache rows of one token, as float
  std::vector<float> scores;
  std::vector<float> q_row(kQkDim);
  std::vector<float> acc(kLatentDim);
  for (int64_t t = 0; t < tokens; ++t) {
    rows.clear();
    for (int64_t k = 0; k < topk; ++k) {
      const int32_t slot = idx_data[t * indices.strides[0] + k * indices.strides[1]];
      if (slot == -1) continue;
      if (slot < 0 || slot >= num_slots) {
        if (call->check_indices) {
          return fail(error, error_len, "sparse_mla: indices[%lld, %lld] = %d is outside -1 or 0..%lld (num_blocks * block_size - 1)",
                      static_cast<long long>(t), static_cast<long long>(k), slot, static_cast<long long>(num_slots - 1));
        }
        continue;  // out of range: treated as -1, never read
      }
      const uint16_t* c = c_data + (slot / block_size) * cache.strides[0] + (slot % block_size) * cache.strides[1];
      for (int d = 0; d < kQkDim; ++d) rows.push_back(bf16_to_float(c[d]));
    }
    const int64_t count = static_cast<int64_t>(rows.size()) / kQkDim;
    scores.resize(static_cast<size_t>(count));
    for (int64_t h = 0; h < heads; ++h) {
      const uint16_t* qh = q_data + t * q.strides[0] + h * q.strides[1];
      for (int d = 0; d < kQkDim; ++d) q_row[d] = bf16_to_float(qh[d]);
      float best = -std::numeric_limits<float>::infinity();
      for (int64_t s = 0; s < count; ++s) {
        const float* c = rows.data() + s * kQkDim;
        float dot = 0.0f;
        for (int d = 0; d < kQkDim; ++d) dot += q_row[d] * c[d];
        scores[s] = call->scale * dot;
        best = std::max(best, scores[s]);
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      float sum = 0.0f;
      for (int64_t s = 0; s < count; ++s) {
        const float w = std::exp(scores[s] - best);
        sum += w;
        const float* c = rows.data() + s * kQkDim;
        for (int d = 0; d < kLatentDim; ++d) acc[d] += w * c[d];
      }
      uint16_t* oh = out_data + t * out.strides[0] + h * out.strides[1];
      const float inv = count > 0 ? 1.0f / sum : 0.0f;
      for (int d = 0; d < kLatentDim; ++d) oh[d * out.strides[2]] = float_to_bf16(acc[d] * inv);
      if (has_lse) {
        lse_data[t * lse.strides[0] + h * lse.strides[1]] =
            count > 0 ? best + std::log(sum) : -std::numeric_limits<float>::infinity();
      }
    }
  }
  return 0;
}

int run(void* kernel, const latte_call_v1* call, char* error, size_t error_len) {
  try {
    return run_sparse_mla(kernel, call, error, error_len);
  } catch (const std::bad_alloc&) {
    return fail(error, error_len, "example.cpu_sparse_mla: out of memory");
  }
}

const char kCapabilities[] = R"({
  "ops": ["sparse_mla"],
  "devices": ["cpu"],
  "q_dtypes": ["bf16"],
  "kv_caches": ["bf16"],
  "heads": {"min": 1, "max": 128},
  "head_dim": 576,
  "block_size": "any",
  "topk": {"min": 1, "max": 65536},
  "workspace": "none",
  "notes": "example plugin: float32 sparse MLA on the CPU over a bf16 cache"
})";

// Shipped into the plugin policy layer: above latte's defaults, below a user's file.
const char kPolicy[] = R"({
  "latte_policy": 1,
  "rules": [
    {"name": "example-cpu-sparse-mla",
     "when": {"device": "cpu", "op": "sparse_mla", "kv_cache": "bf16"},
     "order": ["example.cpu_sparse_mla"]}
  ]
})";

const latte_backend_v1 kBackends[] = {{
    sizeof(latte_backend_v1),
    "example.cpu_sparse_mla",
    "sparse MLA on the CPU, float32 accumulation (latte example plugin)",
    kCapabilities,
    check_spec,
    make_kernel,
    workspace_bytes,
    run,
    destroy_kernel,
    describe_kernel,
}};

const latte_plugin_v1 kPlugin = {
    sizeof(latte_plugin_v1), LATTE_PLUGIN_ABI_VERSION, "latte-example", "1.0", 1, kBackends, kPolicy,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) int latte_plugin_entry(uint32_t host_abi_version,
                                                                         const latte_plugin_v1** out,
                                                                         char* error, size_t error_len) {
  if (host_abi_version != LATTE_PLUGIN_ABI_VERSION) {
    return fail(error, error_len, "latte-example speaks plugin ABI %u, the host %u", LATTE_PLUGIN_ABI_VERSION,
                host_abi_version);
  }
  *out = &kPlugin;
  return 0;
}
