// cuda.sparse_mla on a GPU: sparse_mla and mla_decode against the float64 oracle (cpu.reference
// when registered, else a float64 loop here), poisoned outputs, -1 / out-of-range padding and
// empty rows, bitwise determinism, batch invariance, CUDA-graph capture and replay, slabbed
// workspaces, and the sparse == dense equality oracle.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/sparse_mla/smxx/mla_fwd_dispatch.hpp"
#if LATTE_HOPPER_MLA_BUILT
#include "kernels/sparse_mla/sm90a/mla_sm90a.hpp"
#endif
#include "kernels/sparse_mla/mla_params.hpp"
#include "gpu_test_util.hpp"
#include "latte/api.hpp"
#include "latte/backend.hpp"
#include "latte/context.hpp"
#include "latte/device.hpp"
#include "latte/error.hpp"
#include "latte/formats.hpp"
#include "latte/ops.hpp"
#include "latte/registry.hpp"
#include "latte/spec.hpp"

namespace latte {
namespace {

using testing::DeviceBuffer;
using testing::ScopedEnv;

constexpr float kGlmScale = 0.0625f;
constexpr double kTol = 1e-2;

std::size_t token_bytes(CacheFormat f) { return f == CacheFormat::bf16 ? 1152 : 656; }

DeviceInfo cuda0() { return describe_device("cuda:0"); }

// ---------------------------------------------------------------- host problem
struct Cache {
  CacheFormat fmt = CacheFormat::bf16;
  int block_size = 1;
  int64_t num_blocks = 0;
  std::vector<uint8_t> bytes;
  [[nodiscard]] int64_t slots() const { return num_blocks * block_size; }
  // decoded values of one slot (576 floats)
  void decode(int64_t slot, double* out) const {
    const uint8_t* t = bytes.data() + static_cast<std::size_t>(slot) * token_bytes(fmt);
    if (fmt == CacheFormat::bf16) {
      const auto* v = reinterpret_cast<const uint16_t*>(t);
      for (int d = 0; d < 576; ++d) out[d] = bf16_to_float(v[d]);
    } else {
      float f[576];
      unpack_fp8_ds_mla_token(t, f);
      for (int d = 0; d < 576; ++d) out[d] = f[d];
    }
  }
};

// amp_log2_span > 0: each group's amplitude 2^u, u uniform in [-span/2, span/2] (fp8 scales
// over that many octaves); else uniform in [0.25, 4].
Cache make_cache(CacheFormat fmt, int block_size, int64_t min_slots, std::mt19937& rng, float amp_log2_span = 0.f) {
  Cache c;
  c.fmt = fmt;
  c.block_size = block_size;
  c.num_blocks = (min_slots + block_size - 1) / block_size;
  const std::size_t n = static_cast<std::size_t>(c.slots());
  c.bytes.resize(n * token_bytes(fmt));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::uniform_real_distribution<float> amp(0.25f, 4.f);
  std::uniform_real_distribution<float> octave(-amp_log2_span / 2, amp_log2_span / 2);
  for (std::size_t s = 0; s < n; ++s) {
    uint8_t* t = c.bytes.data() + s * token_bytes(fmt);
    float lat[512], rope[64];
    // per-group amplitudes differ so that the four fp8 scales differ
    for (int g = 0; g < 4; ++g) {
      const float a = amp_log2_span > 0.f ? std::exp2(octave(rng)) : amp(rng);
      for (int d = 0; d < 128; ++d) lat[g * 128 + d] = a * u(rng);
    }
    for (float& r : rope) r = 2.f * u(rng);
    if (fmt == CacheFormat::bf16) {
      auto* v = reinterpret_cast<uint16_t*>(t);
      for (int d = 0; d < 512; ++d) v[d] = float_to_bf16(lat[d]);
      for (int d = 0; d < 64; ++d) v[512 + d] = float_to_bf16(rope[d]);
    } else {
      pack_fp8_ds_mla_token(lat, rope, (s % 3 == 0) ? Fp8ScaleKind::pow2 : Fp8ScaleKind::amax, t);
    }
  }
  return c;
}

std::vector<uint16_t> make_q(int64_t rows, std::mt19937& rng, float amplitude) {
  std::vector<uint16_t> q(static_cast<std::size_t>(rows) * 576);
  std::uniform_real_distribution<float> u(-amplitude, amplitude);
  for (auto& v : q) v = float_to_bf16(u(rng));
  return q;
}

struct IndexOpts {
  double pad = 0.1;           // fraction of -1 entries
  double oob = 0.02;          // fraction of out-of-range entries (>= slots, or < -1)
  std::vector<int> empty;     // tokens whose row is all -1
};

// The default padding and out-of-range entries, and token 1's row all -1.
IndexOpts row1_empty() {
  IndexOpts o;
  o.empty = {1};
  return o;
}

// No -1 and no out-of-range entry.
IndexOpts no_padding() {
  IndexOpts o;
  o.pad = 0;
  o.oob = 0;
  return o;
}

// Half the entries -1, tokens 0 and 2 all -1.
IndexOpts half_empty() {
  IndexOpts o;
  o.pad = 0.5;
  o.empty = {0, 2};
  return o;
}

std::vector<int32_t> make_indices(int64_t T, int topk, int64_t slots, const IndexOpts& o,
                                  std::mt19937& rng) {
  std::vector<int32_t> idx(static_cast<std::size_t>(T) * topk);
  std::uniform_int_distribution<int64_t> pick(0, slots - 1);
  std::uniform_real_distribution<double> u(0, 1);
  for (int64_t t = 0; t < T; ++t) {
    const bool empty = std::find(o.empty.begin(), o.empty.end(), t) != o.empty.end();
    for (int k = 0; k < topk; ++k) {
      int32_t v = static_cast<int32_t>(pick(rng));
      const double r = u(rng);
      if (empty || r < o.pad) v = -1;
      else if (r < o.pad + o.oob) v = (k & 1) ? static_cast<int32_t>(slots + k) : -2 - k;
      idx[static_cast<std::size_t>(t * topk + k)] = v;
    }
  }
  return idx;
}

// float64 oracle for one row: the listed slots (-1 / out of range skipped)
void oracle_row(const Cache& c, const uint16_t* q, const std::vector<int64_t>& slots, double scale,
                double* out, double* lse) {
  double qd[576];
  for (int d = 0; d < 576; ++d) qd[d] = bf16_to_float(q[d]);
  std::fill(out, out + 512, 0.0);
  if (slots.empty()) {
    *lse = -std::numeric_limits<double>::infinity();
    return;
  }
  std::vector<double> sc(slots.size());
  std::vector<double> kv(slots.size() * 576);
  double mx = -std::numeric_limits<double>::infinity();
  for (std::size_t k = 0; k < slots.size(); ++k) {
    c.decode(slots[k], &kv[k * 576]);
    double dot = 0;
    for (int d = 0; d < 576; ++d) dot += qd[d] * kv[k * 576 + d];
    sc[k] = scale * dot;
    mx = std::max(mx, sc[k]);
  }
  double sum = 0;
  for (double s : sc) sum += std::exp(s - mx);
  const double l = mx + std::log(sum);
  for (std::size_t k = 0; k < slots.size(); ++k) {
    const double p = std::exp(sc[k] - l);
    for (int d = 0; d < 512; ++d) out[d] += p * kv[k * 576 + d];
  }
  *lse = l;
}

// ---------------------------------------------------------------- GPU runs through the backend
struct Result {
  std::vector<uint16_t> out;
  std::vector<float> lse;
};

class Runner {
 public:
  Runner() { LATTE_CUDA_CHECK(cudaStreamCreate(&stream_)); }
  ~Runner() { cudaStreamDestroy(stream_); }
  cudaStream_t stream() const { return stream_; }

  std::unique_ptr<Kernel> make(const AttentionSpec& spec, const char* id = "cuda.sparse_mla") {
    auto be = Registry::global().get(id);
    const auto reasons = check(*be, spec, cuda0());
    EXPECT_TRUE(reasons.empty()) << (reasons.empty() ? "" : reasons[0].text);
    return be->make(spec, cuda0());
  }

  // Poisons out (NaN bytes) and lse, runs, returns both. `ws_bytes` overrides the workspace
  // size (SIZE_MAX: the kernel's own).
  Result run(Kernel& k, OpArgs args, std::size_t out_elems, std::size_t rows,
             std::size_t ws_bytes = SIZE_MAX, bool graph = false) {
    const std::size_t ws = ws_bytes == SIZE_MAX ? k.workspace_bytes() : ws_bytes;
    if (ws > ws_buf_.bytes()) ws_buf_ = DeviceBuffer(ws);
    TensorView* outv = nullptr;
    TensorView* lsev = nullptr;
    std::visit(
        [&](auto& a) {
          using T = std::decay_t<decltype(a)>;
          if constexpr (std::is_same_v<T, SparseMlaArgs> || std::is_same_v<T, MlaDecodeArgs>) {
            outv = &a.out;
            lsev = &a.lse;
          }
        },
        args);
    LATTE_CUDA_CHECK(cudaMemsetAsync(outv->data, 0xFF, out_elems * 2, stream_));
    LATTE_CUDA_CHECK(cudaMemsetAsync(lsev->data, 0xFF, rows * 4, stream_));
    RunContext ctx;
    ctx.stream = stream_;
    ctx.workspace = ws ? ws_buf_.get() : nullptr;
    ctx.workspace_bytes = ws;
    if (!graph) {
      k.run(args, ctx);
    } else {
      cudaGraph_t g;
      cudaGraphExec_t ge;
      LATTE_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      k.run(args, ctx);
      LATTE_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
      LATTE_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
      for (int rep = 0; rep < 3; ++rep) {
        LATTE_CUDA_CHECK(cudaMemsetAsync(outv->data, 0xFF, out_elems * 2, stream_));
        LATTE_CUDA_CHECK(cudaGraphLaunch(ge, stream_));
      }
      LATTE_CUDA_CHECK(cudaGraphExecDestroy(ge));
      LATTE_CUDA_CHECK(cudaGraphDestroy(g));
    }
    LATTE_CUDA_CHECK(cudaGetLastError());
    LATTE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    Result r;
    r.out.resize(out_elems);
    r.lse.resize(rows);
    LATTE_CUDA_CHECK(cudaMemcpy(r.out.data(), outv->data, out_elems * 2, cudaMemcpyDeviceToHost));
    LATTE_CUDA_CHECK(cudaMemcpy(r.lse.data(), lsev->data, rows * 4, cudaMemcpyDeviceToHost));
    return r;
  }

 private:
  cudaStream_t stream_{};
  DeviceBuffer ws_buf_;
};

struct DeviceProblem {
  DeviceBuffer q, cache, idx, out, lse;
};

struct SparseCase {
  CacheFormat fmt;
  int H, topk, bs, T;
  IndexOpts opts;
  float q_amp = 3.f;
  float kv_amp_log2_span = 0.f;  // > 0: KV group amplitudes (fp8 scales) over that many octaves
};

std::string name_of(const SparseCase& c) {
  return std::string(c.fmt == CacheFormat::bf16 ? "bf16" : "fp8") + " H=" + std::to_string(c.H) +
         " topk=" + std::to_string(c.topk) + " bs=" + std::to_string(c.bs) +
         " T=" + std::to_string(c.T);
}

struct SparseSetup {
  SparseCase c;
  Cache cache;
  std::vector<uint16_t> q;
  std::vector<int32_t> idx;
  DeviceProblem d;
  SparseMlaArgs args;
  AttentionSpec spec;
};

std::unique_ptr<SparseSetup> setup_sparse(const SparseCase& c, uint32_t seed) {
  auto s = std::make_unique<SparseSetup>();
  s->c = c;
  std::mt19937 rng(seed);
  const int64_t slots = std::max<int64_t>(2 * c.topk, 257);
  s->cache = make_cache(c.fmt, c.bs, slots, rng, c.kv_amp_log2_span);
  s->q = make_q(static_cast<int64_t>(c.T) * c.H, rng, c.q_amp);
  s->idx = make_indices(c.T, c.topk, s->cache.slots(), c.opts, rng);
  s->d.q = DeviceBuffer(s->q.size() * 2);
  s->d.q.upload(s->q.data(), s->q.size() * 2);
  s->d.cache = DeviceBuffer(s->cache.bytes.size());
  s->d.cache.upload(s->cache.bytes.data(), s->cache.bytes.size());
  s->d.idx = DeviceBuffer(s->idx.size() * 4);
  s->d.idx.upload(s->idx.data(), s->idx.size() * 4);
  s->d.out = DeviceBuffer(static_cast<std::size_t>(c.T) * c.H * 512 * 2);
  s->d.lse = DeviceBuffer(static_cast<std::size_t>(c.T) * c.H * 4);
  const Device dev{DeviceKind::cuda, 0};
  SparseMlaArgs& a = s->args;
  a.q = TensorView::contiguous(s->d.q.get(), DType::bf16, {c.T, c.H, 576}, dev);
  if (c.fmt == CacheFormat::bf16) {
    a.kv_cache = TensorView::contiguous(s->d.cache.get(), DType::bf16,
                                        {s->cache.num_blocks, c.bs, 576}, dev);
  } else {
    a.kv_cache = TensorView::contiguous(s->d.cache.get(), DType::u8,
                                        {s->cache.num_blocks, c.bs, 656}, dev);
  }
  a.indices = TensorView::contiguous(s->d.idx.get(), DType::i32, {c.T, c.topk}, dev);
  a.out = TensorView::contiguous(s->d.out.get(), DType::bf16, {c.T, c.H, 512}, dev);
  a.lse = TensorView::contiguous(s->d.lse.get(), DType::f32, {c.T, c.H}, dev);
  a.scale = kGlmScale;
  AttentionSpec& sp = s->spec;
  sp.op = Op::sparse_mla;
  sp.num_heads = c.H;
  sp.kv_cache = c.fmt;
  sp.block_size = c.bs;
  sp.topk = c.topk;
  sp.max_tokens = c.T;
  sp.scale = kGlmScale;
  return s;
}

// Every element written (no NaN left from the poison), lse never NaN.
void expect_all_written(const Result& r, const std::string& what) {
  std::size_t bad = 0;
  for (uint16_t v : r.out)
    if (std::isnan(bf16_to_float(v))) ++bad;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " output values unwritten or NaN";
  std::size_t badl = 0;
  for (float v : r.lse)
    if (std::isnan(v)) ++badl;
  EXPECT_EQ(badl, 0u) << what << ": " << badl << " lse values unwritten or NaN";
}

// Tokens to compare against the oracle: bounded float64 work, always the empty rows, the first
// and the last token.
std::vector<int64_t> sample_tokens(const SparseCase& c) {
  const double per_token = static_cast<double>(c.H) * c.topk;
  const auto budget = static_cast<int64_t>(std::max(1.0, 6.0e5 / per_token));
  std::vector<int64_t> ts;
  for (int e : c.opts.empty)
    if (e < c.T) ts.push_back(e);
  ts.push_back(0);
  ts.push_back(c.T / 2);
  ts.push_back(c.T - 1);
  const int64_t n = std::min<int64_t>(c.T, budget);
  for (int64_t i = 0; i < n; ++i) ts.push_back(i * c.T / n);
  std::sort(ts.begin(), ts.end());
  ts.erase(std::unique(ts.begin(), ts.end()), ts.end());
  return ts;
}

// The valid slots of an index row's first `len` entries, in column order (-1 / out of range skipped).
std::vector<int64_t> listed_slots(const int32_t* row, int len, int64_t slots) {
  std::vector<int64_t> out;
  for (int k = 0; k < len; ++k)
    if (row[k] >= 0 && row[k] < slots) out.push_back(row[k]);
  return out;
}

// Runs cpu.reference on the host arguments `a` (whose out and lse are `out`, `lse`) and copies
// the results into ref / ref_lse.
void reference_into(const Backend& cpu, const SparseMlaArgs& a, const std::vector<uint16_t>& out,
                    const std::vector<float>& lse, std::vector<double>& ref, std::vector<double>& ref_lse) {
  cpu.make(spec_from_args(a), describe_device("cpu"))->run(a, RunContext{});
  for (std::size_t i = 0; i < out.size(); ++i) ref[i] = bf16_to_float(out[i]);
  for (std::size_t i = 0; i < lse.size(); ++i) ref_lse[i] = lse[i];
}

// Oracle for the sampled tokens: cpu.reference when registered, else the loop above.
void oracle_sparse(const SparseSetup& s, const std::vector<int64_t>& ts, std::vector<double>& ref,
                   std::vector<double>& ref_lse) {
  const int H = s.c.H, K = s.c.topk;
  ref.assign(ts.size() * H * 512, 0.0);
  ref_lse.assign(ts.size() * H, 0.0);
  auto cpu = Registry::global().find("cpu.reference");
  if (cpu) {
    std::vector<uint16_t> q(ts.size() * H * 576), out(ts.size() * H * 512);
    std::vector<int32_t> idx(ts.size() * K);
    std::vector<float> lse(ts.size() * H);
    for (std::size_t i = 0; i < ts.size(); ++i) {
      std::memcpy(&q[i * H * 576], &s.q[static_cast<std::size_t>(ts[i]) * H * 576], H * 576 * 2);
      std::memcpy(&idx[i * K], &s.idx[static_cast<std::size_t>(ts[i]) * K], K * 4);
    }
    const auto n = static_cast<int64_t>(ts.size());
    SparseMlaArgs a;
    a.q = TensorView::contiguous(q.data(), DType::bf16, {n, H, 576});
    a.kv_cache = s.c.fmt == CacheFormat::bf16
                     ? TensorView::contiguous(const_cast<uint8_t*>(s.cache.bytes.data()),
                                              DType::bf16, {s.cache.num_blocks, s.c.bs, 576})
                     : TensorView::contiguous(const_cast<uint8_t*>(s.cache.bytes.data()),
                                              DType::u8, {s.cache.num_blocks, s.c.bs, 656});
    a.indices = TensorView::contiguous(idx.data(), DType::i32, {n, K});
    a.out = TensorView::contiguous(out.data(), DType::bf16, {n, H, 512});
    a.lse = TensorView::contiguous(lse.data(), DType::f32, {n, H});
    a.scale = kGlmScale;
    reference_into(*cpu, a, out, lse, ref, ref_lse);
    return;
  }
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const auto slots = listed_slots(&s.idx[static_cast<std::size_t>(ts[i]) * K], K, s.cache.slots());
    for (int h = 0; h < H; ++h) {
      oracle_row(s.cache, &s.q[(static_cast<std::size_t>(ts[i]) * H + h) * 576], slots, kGlmScale,
                 &ref[(i * H + h) * 512], &ref_lse[i * H + h]);
    }
  }
}

void compare(const Result& r, const std::vector<int64_t>& ts, int H, const std::vector<double>& ref,
             const std::vector<double>& ref_lse, const std::string& what, double tol = kTol) {
  double num = 0, den = 0, lse_err = 0;
  int lse_bad = 0;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    for (int h = 0; h < H; ++h) {
      const std::size_t row = static_cast<std::size_t>(ts[i]) * H + h;
      for (int d = 0; d < 512; ++d) {
        const double g = bf16_to_float(r.out[row * 512 + d]);
        const double e = ref[(i * H + h) * 512 + d];
        num += (g - e) * (g - e);
        den += e * e;
      }
      const double gl = r.lse[row], el = ref_lse[i * H + h];
      if (std::isinf(el) || std::isinf(gl)) {
        if (!(std::isinf(el) && std::isinf(gl) && el < 0 && gl < 0)) ++lse_bad;
      } else {
        lse_err = std::max(lse_err, std::fabs(gl - el));
      }
    }
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  std::printf("  %-44s rel err %.2e  max |lse err| %.2e  (%zu tokens vs oracle)\n", what.c_str(),
              rel, lse_err, ts.size());
  EXPECT_LE(rel, tol) << what;
  EXPECT_LE(lse_err, 1e-2) << what;
  EXPECT_EQ(lse_bad, 0) << what << ": empty-row lse mismatch";
}

bool bitwise_equal(const Result& a, const Result& b) {
  return a.out == b.out && std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4) == 0;
}

// Runs a kernel made for `s` over all its tokens and checks the sampled tokens against the
// oracle (every element written, relative error and lse within tolerance).
Result run_vs_oracle(Runner& run, const SparseSetup& s, const std::string& what, const char* id = "cuda.sparse_mla",
                     double tol = kTol) {
  auto k = run.make(s.spec, id);
  const std::size_t n = s.q.size() / 576;
  const Result r = run.run(*k, s.args, n * 512, n);
  expect_all_written(r, what);
  const auto ts = sample_tokens(s.c);
  std::vector<double> ref, ref_lse;
  oracle_sparse(s, ts, ref, ref_lse);
  compare(r, ts, s.c.H, ref, ref_lse, what, tol);
  return r;
}

// The case's all -1 rows: out exactly 0, lse -inf.
void expect_empty_rows_zero(const SparseCase& c, const Result& r) {
  for (int e : c.opts.empty) {
    if (e >= c.T) continue;
    for (int h = 0; h < c.H; ++h) {
      const std::size_t row = static_cast<std::size_t>(e) * c.H + h;
      EXPECT_TRUE(std::isinf(r.lse[row]) && r.lse[row] < 0) << name_of(c);
      for (int d = 0; d < 512; ++d) ASSERT_EQ(r.out[row * 512 + d], 0u) << name_of(c);
    }
  }
}

// ---------------------------------------------------------------- tests
class CudaSparseMla : public ::testing::Test {
 protected:
  void SetUp() override {
    LATTE_SKIP_WITHOUT_GPU();
    if (!Registry::global().find("cuda.sparse_mla")) GTEST_SKIP() << "cuda.sparse_mla not built";
  }
};

// Each value of the issue's sets appears in some case: H {1,5,8,16,40,64,128}, topk {1,63,100,
// 2048,5000}, block size {1,16,64}, both formats, T {1,3,128,4096}.
std::vector<SparseCase> accuracy_cases() {
  const IndexOpts padded = row1_empty(), dense = no_padding(), heavy = half_empty();
  return {
      {CacheFormat::bf16, 1, 1, 1, 3, padded},
      {CacheFormat::fp8_ds_mla, 1, 63, 16, 3, padded},
      {CacheFormat::fp8_ds_mla, 5, 63, 16, 3, padded},
      {CacheFormat::bf16, 5, 100, 64, 128, padded},
      {CacheFormat::bf16, 8, 100, 64, 128, padded},
      {CacheFormat::fp8_ds_mla, 8, 2048, 64, 128, padded},
      {CacheFormat::bf16, 16, 5000, 16, 3, heavy},
      {CacheFormat::fp8_ds_mla, 16, 1, 1, 128, padded},
      {CacheFormat::fp8_ds_mla, 40, 100, 1, 128, padded},
      {CacheFormat::bf16, 40, 2048, 16, 3, padded},
      {CacheFormat::fp8_ds_mla, 64, 2048, 64, 1, dense},
      {CacheFormat::bf16, 64, 2048, 64, 128, padded},
      {CacheFormat::fp8_ds_mla, 64, 5000, 16, 3, heavy},
      {CacheFormat::fp8_ds_mla, 128, 5000, 16, 3, padded},
      {CacheFormat::bf16, 128, 63, 1, 1, dense},
      {CacheFormat::fp8_ds_mla, 128, 2048, 64, 128, padded},
      {CacheFormat::fp8_ds_mla, 64, 2048, 64, 4096, padded},
      {CacheFormat::bf16, 16, 2048, 1, 4096, padded},
      // the few-heads kernel's two n8 tiles of heads (kernels for more than 16 tokens): all 16
      // real, and the second tile partly
      {CacheFormat::fp8_ds_mla, 16, 2048, 64, 128, padded},
      {CacheFormat::fp8_ds_mla, 12, 700, 16, 17, heavy},
  };
}

TEST_F(CudaSparseMla, AccuracyVsOracle) {
  Runner run;
  uint32_t seed = 1234;
  std::printf("  oracle: %s\n",
              Registry::global().find("cpu.reference") ? "cpu.reference" : "float64 loop (test)");
  for (const SparseCase& c : accuracy_cases()) {
    auto s = setup_sparse(c, seed++);
    const Result r = run_vs_oracle(run, *s, name_of(c));
    expect_empty_rows_zero(c, r);
  }
}

// Large scores (peaked softmax) stay accurate and finite.
TEST_F(CudaSparseMla, PeakedSoftmax) {
  Runner run;
  for (CacheFormat f : {CacheFormat::bf16, CacheFormat::fp8_ds_mla}) {
    SparseCase c{f, 16, 300, 16, 4, IndexOpts{}, 40.f};
    auto s = setup_sparse(c, 99);
    run_vs_oracle(run, *s, "peaked " + name_of(c));
  }
  for (int heads : {8, 13}) {  // the few-heads kernel, one and two n8 tiles of heads (> 16 tokens)
    SparseCase few{CacheFormat::fp8_ds_mla, heads, 300, 16, heads > 8 ? 17 : 4, IndexOpts{}, 40.f};
    auto s = setup_sparse(few, 99);
    run_vs_oracle(run, *s, "peaked " + name_of(few));
  }
}

// Scores that rise along each token's KV list (the list sorted by head 0's score, invalid
// entries first): the running max grows tile after tile, so the lazy rescaling both keeps a
// stale reference max (P up to 2^8) and moves it several times within a split; the result
// still matches the oracle.
TEST_F(CudaSparseMla, RisingScores) {
  Runner run;
  for (const auto& [f, heads] : {std::pair{CacheFormat::bf16, 64}, std::pair{CacheFormat::fp8_ds_mla, 64},
                                 std::pair{CacheFormat::fp8_ds_mla, 8}, std::pair{CacheFormat::fp8_ds_mla, 16}}) {
    // a kernel for 16 tokens: 4 splits of 512 (64 heads), 8 of 256 (8 / 16 heads: the few-heads kernel)
    SparseCase c{f, heads, 2048, 16, 16, IndexOpts{}, 10.f};
    auto s = setup_sparse(c, 5);
    const int64_t slots = s->cache.slots();
    double top_split_span = 0;  // head 0, log2 units, over the last 512 entries of token 0
    for (int64_t t = 0; t < c.T; ++t) {
      double qd[576];
      for (int d = 0; d < 576; ++d) qd[d] = bf16_to_float(s->q[static_cast<std::size_t>(t) * c.H * 576 + d]);
      int32_t* row = &s->idx[static_cast<std::size_t>(t) * c.topk];
      std::vector<std::pair<double, int32_t>> keyed;
      std::vector<int32_t> invalid;
      for (int k = 0; k < c.topk; ++k) {
        if (row[k] < 0 || row[k] >= slots) {
          invalid.push_back(row[k]);
          continue;
        }
        double kv[576];
        s->cache.decode(row[k], kv);
        double dot = 0;
        for (int d = 0; d < 576; ++d) dot += qd[d] * kv[d];
        keyed.emplace_back(kGlmScale * dot * 1.4426950408889634, row[k]);
      }
      std::sort(keyed.begin(), keyed.end());
      std::copy(invalid.begin(), invalid.end(), row);
      for (std::size_t k = 0; k < keyed.size(); ++k) row[invalid.size() + k] = keyed[k].second;
      if (t == 0) top_split_span = keyed.back().first - keyed[keyed.size() - 512].first;
    }
    // the data must exercise both paths: the top split's scores rise by well over 2^8
    ASSERT_GT(top_split_span, 16.0) << "test data: head 0's scores span only " << top_split_span << " (log2)";
    s->d.idx.upload(s->idx.data(), s->idx.size() * 4);
    std::printf("  head 0's scores rise by %.1f (log2) over token 0's last 512 entries\n", top_split_span);
    run_vs_oracle(run, *s, "rising " + name_of(c));
  }
}

// fp8 group scales over 24 octaves, in random order and rising along each token's list (one
// split of 2048 entries): the few-heads kernel's scale reference (P' = P x scale / 2^e_ref in
// f16) moves several times within a split, and both orders still match the oracle.
TEST_F(CudaSparseMla, WideKvScales) {
  Runner run;
  setenv("LATTE_CUDA_SPARSE_MLA_CHUNK", "2048", 1);
  for (int heads : {8, 5, 16, 11}) {  // 9-16 heads: the few-heads kernel from 17 tokens
    for (bool rising : {false, true}) {
      SparseCase c{CacheFormat::fp8_ds_mla, heads, 2048, 16, heads > 8 ? 17 : 8, IndexOpts{}};
      c.kv_amp_log2_span = 24.f;
      auto s = setup_sparse(c, 21 + heads);
      if (rising) {
        auto largest_scale = [&](int32_t slot) {
          float sc[4];
          std::memcpy(sc, s->cache.bytes.data() + static_cast<std::size_t>(slot) * 656 + 512, 16);
          return std::max(std::max(sc[0], sc[1]), std::max(sc[2], sc[3]));
        };
        const int64_t slots = s->cache.slots();
        for (int64_t t = 0; t < c.T; ++t) {
          int32_t* row = &s->idx[static_cast<std::size_t>(t) * c.topk];
          std::stable_partition(row, row + c.topk, [&](int32_t v) { return v < 0 || v >= slots; });
          int32_t* first = std::find_if(row, row + c.topk, [&](int32_t v) { return v >= 0 && v < slots; });
          std::sort(first, row + c.topk, [&](int32_t a, int32_t b) { return largest_scale(a) < largest_scale(b); });
        }
        s->d.idx.upload(s->idx.data(), s->idx.size() * 4);
      }
      run_vs_oracle(run, *s, std::string(rising ? "rising" : "random") + " scales " + name_of(c));
    }
  }
  unsetenv("LATTE_CUDA_SPARSE_MLA_CHUNK");
}

// Shared memory per SM of the H200 (228 KB) and of an A100 (164 KB), for the plans below.
constexpr int64_t kH200SmemPerSm = 233472;
constexpr int64_t kA100SmemPerSm = 167936;
// A kernel made for decode batches of up to 64 groups (the plans' normal split size; kernels
// for larger batches and for prefill chunks split less).
constexpr int64_t kLargeCalls = 64;

// The launch plan of a sparse call of T tokens by a kernel made for c.T tokens per call (the
// backend's own rule and hooks).
cuda_sparse_mla::MlaPlan sparse_plan(const SparseCase& c, int64_t T, int sm_count,
                                     std::size_t workspace) {
  cuda_sparse_mla::MlaParams p;
  p.format = c.fmt;
  p.heads = c.H;
  p.topk = c.topk;
  p.groups = static_cast<int>(T);
  return cuda_sparse_mla::make_plan(p, {sm_count, kH200SmemPerSm}, workspace, cuda_sparse_mla::tuning_from_env(),
                                    c.T);
}

TEST_F(CudaSparseMla, DeterministicAndBatchInvariant) {
  Runner run;
  const int sm_count = cuda0().sm_count;
  const std::vector<SparseCase> cases = {
      {CacheFormat::fp8_ds_mla, 64, 2048, 64, 96, IndexOpts{}},
      {CacheFormat::bf16, 128, 1000, 16, 64, IndexOpts{}},
      // the row-group kernel with consecutive splits in one CTA for the batch and a CTA per split
      // alone (all of a token's splits in one CTA; two of three)
      {CacheFormat::bf16, 64, 2048, 64, 256, IndexOpts{}},
      {CacheFormat::bf16, 128, 3000, 16, 30, IndexOpts{}},
      {CacheFormat::fp8_ds_mla, 8, 5000, 1, 64, IndexOpts{}},
      {CacheFormat::fp8_ds_mla, 16, 2048, 64, 40, IndexOpts{}},
      {CacheFormat::bf16, 40, 63, 64, 200, IndexOpts{}},
      {CacheFormat::bf16, 8, 2048, 16, 40, IndexOpts{}},
      {CacheFormat::fp8_ds_mla, 64, 2048, 64, 1024, IndexOpts{}},  // a prefill-chunk kernel: one split
  };
  for (const SparseCase& c : cases) {
    auto s = setup_sparse(c, 7);
    auto k = run.make(s->spec);
    const std::size_t n = s->q.size() / 576;
    const Result a = run.run(*k, s->args, n * 512, n);
    const Result b = run.run(*k, s->args, n * 512, n);
    EXPECT_TRUE(bitwise_equal(a, b)) << "run-to-run " << name_of(c);
    // the token-alone comparisons below cross launch plans where the rows allow it: the same
    // split (a function of heads and topk), but 16-row tiles alone and 32-row tiles in the batch
    const auto plan_t = sparse_plan(c, c.T, sm_count, k->workspace_bytes());
    const auto plan_1 = sparse_plan(c, 1, sm_count, k->workspace_bytes());
    EXPECT_EQ(plan_t.chunk, plan_1.chunk) << name_of(c);
    EXPECT_EQ(plan_t.nsplit, plan_1.nsplit) << name_of(c);
    std::printf("  %-34s split %d x %d tokens; row tile / CTAs per SM / dim split T=%d: %d / %d / %d, "
                "T=1: %d / %d / %d\n",
                name_of(c).c_str(), plan_t.nsplit, plan_t.chunk, c.T, plan_t.row_tile, plan_t.ctas_per_sm,
                plan_t.dim_split, plan_1.row_tile, plan_1.ctas_per_sm, plan_1.dim_split);
    // the kernel (row tiles, few heads or row groups) depends on format, heads and the kernel's
    // size, never on the call's
    EXPECT_EQ(plan_t.few_heads, plan_1.few_heads) << name_of(c);
    EXPECT_EQ(plan_t.row_groups, plan_1.row_groups) << name_of(c);
    EXPECT_EQ(plan_t.row_tile == cuda_sparse_mla::kRowGroupsRows, plan_t.row_groups) << name_of(c);
    // a token alone is far below one wave: its output dims split over two CTAs (every row-tile
    // case here)
    const bool row_tile_kernel = !plan_t.few_heads && !plan_t.row_groups;
    if (row_tile_kernel) {
      EXPECT_EQ(plan_1.dim_split, 2) << name_of(c);
      EXPECT_EQ(plan_t.dim_split, 1) << name_of(c);
    }
    if (row_tile_kernel && c.H > 16 && plan_t.nsplit > 1) {
      EXPECT_EQ(plan_t.row_tile, 32) << name_of(c);
      EXPECT_EQ(plan_1.row_tile, 16) << name_of(c);
    }
    if (row_tile_kernel && c.H <= 16 && c.T * plan_t.nsplit > 2 * sm_count) {  // 3 CTAs per SM in the batch only
      EXPECT_EQ(plan_t.ctas_per_sm, 3) << name_of(c);
      EXPECT_EQ(plan_1.ctas_per_sm, 2) << name_of(c);
    }
    // a small workspace forces several launches (slabs): bitwise the same
    const std::size_t small = std::max<std::size_t>(k->workspace_bytes() / 7, 1);
    if (k->workspace_bytes() > 0) {
      const Result sl = run.run(*k, s->args, n * 512, n, small);
      EXPECT_TRUE(bitwise_equal(a, sl)) << "slabbed workspace " << name_of(c);
    }
    // each of a few tokens alone (T = 1) and a sub-batch: bitwise equal to the batched rows
    for (int64_t t : {int64_t{0}, int64_t{c.T / 2}, int64_t{c.T - 1}}) {
      SparseMlaArgs one = s->args;
      one.q.data = static_cast<uint16_t*>(s->d.q.get()) + t * c.H * 576;
      one.q.shape[0] = 1;
      one.indices.data = static_cast<int32_t*>(s->d.idx.get()) + t * c.topk;
      one.indices.shape[0] = 1;
      one.out.shape[0] = 1;
      one.lse.shape[0] = 1;
      const Result r1 = run.run(*k, one, static_cast<std::size_t>(c.H) * 512, c.H);
      const bool same_out =
          std::equal(r1.out.begin(), r1.out.end(), a.out.begin() + t * c.H * 512);
      const bool same_lse =
          std::memcmp(r1.lse.data(), a.lse.data() + t * c.H, static_cast<std::size_t>(c.H) * 4) == 0;
      EXPECT_TRUE(same_out && same_lse) << "token " << t << " alone vs batch, " << name_of(c);
    }
    {
      const int64_t t0 = c.T / 3, nt = std::min<int64_t>(5, c.T - t0);
      SparseMlaArgs sub = s->args;
      sub.q.data = static_cast<uint16_t*>(s->d.q.get()) + t0 * c.H * 576;
      sub.q.shape[0] = nt;
      sub.indices.data = static_cast<int32_t*>(s->d.idx.get()) + t0 * c.topk;
      sub.indices.shape[0] = nt;
      sub.out.shape[0] = nt;
      sub.lse.shape[0] = nt;
      const Result rs = run.run(*k, sub, static_cast<std::size_t>(nt) * c.H * 512, nt * c.H);
      EXPECT_TRUE(std::equal(rs.out.begin(), rs.out.end(), a.out.begin() + t0 * c.H * 512))
          << "sub-batch vs batch, " << name_of(c);
    }
  }
}

// Every bf16 accuracy case through the row-group kernel (forced: by default it takes bf16 calls
// of 64 or 128 heads in kernels for more than 8 tokens), so its padded row groups, heads that
// are not a multiple of 16, splits and block sizes are all checked against the oracle.
TEST_F(CudaSparseMla, RowGroupsKernelVsOracle) {
  Runner run;
  const ScopedEnv forced("LATTE_CUDA_SPARSE_MLA_ROW_GROUPS", "1");
  uint32_t seed = 4321;
  for (const SparseCase& c : accuracy_cases()) {
    if (c.fmt != CacheFormat::bf16) continue;
    auto s = setup_sparse(c, seed++);
    const auto plan = sparse_plan(c, c.T, cuda0().sm_count, std::size_t{1} << 30);
    EXPECT_TRUE(plan.row_groups) << name_of(c);
    const Result r = run_vs_oracle(run, *s, "row groups " + name_of(c));
    expect_empty_rows_zero(c, r);
  }
}

TEST_F(CudaSparseMla, CudaGraphCaptureReplay) {
  Runner run;
  for (const SparseCase& c : {SparseCase{CacheFormat::fp8_ds_mla, 64, 2048, 64, 4, IndexOpts{}},
                              SparseCase{CacheFormat::bf16, 8, 100, 16, 16, IndexOpts{}},
                              SparseCase{CacheFormat::fp8_ds_mla, 8, 700, 16, 8, IndexOpts{}}}) {
    auto s = setup_sparse(c, 11);
    auto k = run.make(s->spec);
    const std::size_t n = s->q.size() / 576;
    const Result eager = run.run(*k, s->args, n * 512, n);
    const Result replay = run.run(*k, s->args, n * 512, n, SIZE_MAX, /*graph=*/true);
    expect_all_written(replay, "graph " + name_of(c));
    EXPECT_TRUE(bitwise_equal(eager, replay)) << "graph replay vs eager, " << name_of(c);
  }
}

// The query's rope part as a tensor of its own (q [T, H, 512] + q_rope [T, H, 64], as vLLM hands
// (ql_nope, q_pe)) gives the joined query's output bit for bit, in every kernel variant: q is
// read as a strided view of the joined buffer (row stride 576) and q_rope from another buffer.
TEST_F(CudaSparseMla, SplitQueryEqualsTheJoinedQuery) {
  Runner run;
  for (const SparseCase& c : {SparseCase{CacheFormat::fp8_ds_mla, 8, 2048, 64, 5, IndexOpts{}},    // few heads
                              SparseCase{CacheFormat::fp8_ds_mla, 64, 700, 16, 9, IndexOpts{}},    // fp8 rows
                              SparseCase{CacheFormat::bf16, 64, 2048, 64, 4, IndexOpts{}},         // row groups
                              SparseCase{CacheFormat::bf16, 16, 300, 16, 6, row1_empty()},         // bf16 rows
                              SparseCase{CacheFormat::bf16, 128, 63, 1, 1, IndexOpts{}}}) {
    auto s = setup_sparse(c, 21);
    const std::size_t n = s->q.size() / 576;
    const Result joined = run.run(*run.make(s->spec), s->args, n * 512, n);
    std::vector<uint16_t> rope(n * 64);
    for (std::size_t r = 0; r < n; ++r)
      std::copy_n(s->q.begin() + static_cast<std::ptrdiff_t>(r * 576 + 512), 64, rope.begin() + static_cast<std::ptrdiff_t>(r * 64));
    DeviceBuffer d_rope(rope.size() * 2);
    d_rope.upload(rope.data(), rope.size() * 2);
    SparseMlaArgs split = s->args;
    split.q.shape[2] = 512;  // the joined buffer's latent dims, row stride 576
    split.q_rope = TensorView::contiguous(d_rope.get(), DType::bf16, {c.T, c.H, 64},
                                          Device{DeviceKind::cuda, 0});
    AttentionSpec spec = s->spec;
    spec.split_q = true;
    AttentionSpec want = spec_from_args(s->args);  // the call's spec: the joined one's, split
    want.split_q = true;
    EXPECT_TRUE(spec_from_args(split) == want);
    const Result got = run.run(*run.make(spec), split, n * 512, n);
    expect_all_written(got, "split q " + name_of(c));
    EXPECT_TRUE(bitwise_equal(joined, got)) << "split q vs joined, " << name_of(c);
  }
}

TEST_F(CudaSparseMla, RefusesMissingWorkspaceAndChecksIndices) {
  Runner run;
  auto s = setup_sparse(SparseCase{CacheFormat::bf16, 64, 2048, 64, 2, IndexOpts{}}, 5);
  auto k = run.make(s->spec);
  ASSERT_GT(k->workspace_bytes(), 0u);
  RunContext ctx;
  ctx.stream = run.stream();
  EXPECT_THROW(k->run(s->args, ctx), Error);  // split without a workspace
  DeviceBuffer ws(k->workspace_bytes());
  ctx.workspace = ws.get();
  ctx.workspace_bytes = ws.bytes();
  ctx.check_indices = true;
  EXPECT_THROW(k->run(s->args, ctx), Error);  // the padded indices hold out-of-range entries
  LATTE_CUDA_CHECK(cudaStreamSynchronize(run.stream()));
}

// ---------------------------------------------------------------- mla_decode
struct DecodeCase {
  CacheFormat fmt;
  int H, s_q, bs, B;
  std::vector<int> lens;  // per request (cycled)
};

// Through backend `id`: every element written, bitwise repeat and CUDA-graph replay, the causal
// float64 oracle within `tol`, a request alone = the same request in the batch (bitwise), and for
// s_q = 1 the backend's own sparse_mla over the request's slot list.
void run_decode_cases(const std::vector<DecodeCase>& cases, const std::string& tag, const char* id = "cuda.sparse_mla",
                      double tol = kTol) {
  Runner run;
  uint32_t seed = 77;
  for (const DecodeCase& c : cases) {
    std::mt19937 rng(seed++);
    std::vector<int> lens(c.B);
    int max_len = 1;
    for (int b = 0; b < c.B; ++b) max_len = std::max(max_len, lens[b] = c.lens[b % c.lens.size()]);
    const int max_blocks = (max_len + c.bs - 1) / c.bs + 1;  // one spare (padding) column
    // physical blocks shuffled; one spare block
    const int64_t nblocks = static_cast<int64_t>(c.B) * max_blocks + 1;
    Cache cache = make_cache(c.fmt, c.bs, nblocks * c.bs, rng);
    std::vector<int32_t> perm(static_cast<std::size_t>(nblocks));
    for (int64_t i = 0; i < nblocks; ++i) perm[i] = static_cast<int32_t>(i);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> table(static_cast<std::size_t>(c.B) * max_blocks);
    for (int b = 0; b < c.B; ++b)
      for (int j = 0; j < max_blocks; ++j)
        table[b * max_blocks + j] = (j * c.bs < lens[b]) ? perm[b * max_blocks + j] : -1;
    const int rows = c.s_q * c.H;
    std::vector<uint16_t> q = make_q(static_cast<int64_t>(c.B) * rows, rng, 3.f);

    DeviceBuffer dq(q.size() * 2), dc(cache.bytes.size()), dt(table.size() * 4),
        dl(lens.size() * 4), dout(q.size() / 576 * 512 * 2), dlse(q.size() / 576 * 4);
    dq.upload(q.data(), q.size() * 2);
    dc.upload(cache.bytes.data(), cache.bytes.size());
    dt.upload(table.data(), table.size() * 4);
    dl.upload(lens.data(), lens.size() * 4);
    const Device dev{DeviceKind::cuda, 0};
    MlaDecodeArgs a;
    a.q = TensorView::contiguous(dq.get(), DType::bf16, {c.B, c.s_q, c.H, 576}, dev);
    a.kv_cache = c.fmt == CacheFormat::bf16
                     ? TensorView::contiguous(dc.get(), DType::bf16, {cache.num_blocks, c.bs, 576}, dev)
                     : TensorView::contiguous(dc.get(), DType::u8, {cache.num_blocks, c.bs, 656}, dev);
    a.block_table = TensorView::contiguous(dt.get(), DType::i32, {c.B, max_blocks}, dev);
    a.seq_lens = TensorView::contiguous(dl.get(), DType::i32, {c.B}, dev);
    a.out = TensorView::contiguous(dout.get(), DType::bf16, {c.B, c.s_q, c.H, 512}, dev);
    a.lse = TensorView::contiguous(dlse.get(), DType::f32, {c.B, c.s_q, c.H}, dev);
    a.scale = kGlmScale;
    AttentionSpec sp;
    sp.op = Op::mla_decode;
    sp.num_heads = c.H;
    sp.kv_cache = c.fmt;
    sp.block_size = c.bs;
    sp.s_q = c.s_q;
    sp.max_tokens = static_cast<int64_t>(c.B) * c.s_q;
    sp.scale = kGlmScale;
    auto k = run.make(sp, id);
    const std::size_t nrows = static_cast<std::size_t>(c.B) * rows;
    const Result r = run.run(*k, a, nrows * 512, nrows);
    const std::string what = tag + "decode " + (c.fmt == CacheFormat::bf16 ? "bf16" : "fp8") +
                             " H=" + std::to_string(c.H) + " s_q=" + std::to_string(c.s_q) +
                             " bs=" + std::to_string(c.bs) + " B=" + std::to_string(c.B);
    expect_all_written(r, what);
    const Result r2 = run.run(*k, a, nrows * 512, nrows);
    EXPECT_TRUE(bitwise_equal(r, r2)) << "run-to-run " << what;
    const Result rg = run.run(*k, a, nrows * 512, nrows, SIZE_MAX, true);
    EXPECT_TRUE(bitwise_equal(r, rg)) << "graph replay " << what;
    if (c.B >= 2) {  // request 1 alone, through the same kernel
      const std::size_t r1 = static_cast<std::size_t>(rows);
      MlaDecodeArgs one = a;
      one.q = TensorView::contiguous(static_cast<uint16_t*>(dq.get()) + r1 * 576, DType::bf16, {1, c.s_q, c.H, 576}, dev);
      one.block_table =
          TensorView::contiguous(static_cast<int32_t*>(dt.get()) + max_blocks, DType::i32, {1, max_blocks}, dev);
      one.seq_lens = TensorView::contiguous(static_cast<int32_t*>(dl.get()) + 1, DType::i32, {1}, dev);
      DeviceBuffer o1(r1 * 512 * 2), l1(r1 * 4);
      one.out = TensorView::contiguous(o1.get(), DType::bf16, {1, c.s_q, c.H, 512}, dev);
      one.lse = TensorView::contiguous(l1.get(), DType::f32, {1, c.s_q, c.H}, dev);
      const Result alone = run.run(*k, one, r1 * 512, r1);
      EXPECT_EQ(0, std::memcmp(alone.out.data(), r.out.data() + r1 * 512, r1 * 512 * 2)) << "batch invariance " << what;
      EXPECT_EQ(0, std::memcmp(alone.lse.data(), r.lse.data() + r1, r1 * 4)) << "batch invariance (lse) " << what;
    }

    // float64 oracle (causal): row (b, i, h) sees positions 0 .. len - s_q + i
    std::vector<double> ref(nrows * 512), ref_lse(nrows);
    for (int b = 0; b < c.B; ++b) {
      for (int i = 0; i < c.s_q; ++i) {
        std::vector<int64_t> slots;
        for (int pos = 0; pos <= lens[b] - c.s_q + i; ++pos)
          slots.push_back(static_cast<int64_t>(table[b * max_blocks + pos / c.bs]) * c.bs + pos % c.bs);
        // bound the float64 work on big heads: a few heads per (b, i)
        for (int h = 0; h < c.H; ++h) {
          const std::size_t row = (static_cast<std::size_t>(b) * c.s_q + i) * c.H + h;
          oracle_row(cache, &q[row * 576], slots, kGlmScale, &ref[row * 512], &ref_lse[row]);
        }
      }
    }
    std::vector<int64_t> all_rows(nrows);
    for (std::size_t i = 0; i < nrows; ++i) all_rows[i] = static_cast<int64_t>(i);
    compare(r, all_rows, 1, ref, ref_lse, what, tol);

    // Equality oracle: s_q = 1 decode == sparse_mla over the full slot list (float order aside)
    if (c.s_q == 1) {
      const int topk = max_len;
      std::vector<int32_t> idx(static_cast<std::size_t>(c.B) * topk, -1);
      for (int b = 0; b < c.B; ++b)
        for (int pos = 0; pos < lens[b]; ++pos)
          idx[b * topk + pos] = table[b * max_blocks + pos / c.bs] * c.bs + pos % c.bs;
      DeviceBuffer di(idx.size() * 4), so(nrows * 512 * 2), sl(nrows * 4);
      di.upload(idx.data(), idx.size() * 4);
      SparseMlaArgs sa;
      sa.q = TensorView::contiguous(dq.get(), DType::bf16, {c.B, c.H, 576}, dev);
      sa.kv_cache = a.kv_cache;
      sa.indices = TensorView::contiguous(di.get(), DType::i32, {c.B, topk}, dev);
      sa.out = TensorView::contiguous(so.get(), DType::bf16, {c.B, c.H, 512}, dev);
      sa.lse = TensorView::contiguous(sl.get(), DType::f32, {c.B, c.H}, dev);
      sa.scale = kGlmScale;
      AttentionSpec ss;
      ss.op = Op::sparse_mla;
      ss.num_heads = c.H;
      ss.kv_cache = c.fmt;
      ss.block_size = c.bs;
      ss.topk = topk;
      ss.max_tokens = c.B;
      ss.scale = kGlmScale;
      auto ks = run.make(ss, id);
      const Result rs = run.run(*ks, sa, nrows * 512, nrows);
      std::vector<double> as_ref(nrows * 512), as_lse(nrows);
      for (std::size_t i = 0; i < nrows * 512; ++i) as_ref[i] = bf16_to_float(rs.out[i]);
      for (std::size_t i = 0; i < nrows; ++i) as_lse[i] = rs.lse[i];
      compare(r, all_rows, 1, as_ref, as_lse, what + " vs sparse_mla", tol);
    }
  }
}

TEST_F(CudaSparseMla, DecodeVsOracleAndSparse) {
  run_decode_cases({
                       {CacheFormat::bf16, 16, 1, 64, 3, {1, 700, 2500}},
                       {CacheFormat::fp8_ds_mla, 8, 4, 16, 3, {4, 1111, 3000}},
                       {CacheFormat::fp8_ds_mla, 128, 1, 64, 2, {2049, 64}},
                       {CacheFormat::bf16, 40, 2, 1, 2, {33, 5000}},
                       {CacheFormat::fp8_ds_mla, 64, 3, 64, 2, {4500, 3}},
                       {CacheFormat::bf16, 128, 1, 16, 9, {2049, 300, 1, 4097}},
                   },
                   "");
}

// bf16 decode through the row-group kernel (forced; by default it takes 64 / 128 rows in kernels
// for more than 8 requests): causal rows of s_q > 1 queries, rows past the call's, splits, block
// sizes.
TEST_F(CudaSparseMla, RowGroupsDecodeVsOracle) {
  const ScopedEnv forced("LATTE_CUDA_SPARSE_MLA_ROW_GROUPS", "1");
  run_decode_cases({
                       {CacheFormat::bf16, 16, 1, 64, 3, {1, 700, 2500}},
                       {CacheFormat::bf16, 40, 2, 1, 2, {33, 5000}},
                       {CacheFormat::bf16, 128, 1, 16, 2, {2049, 300}},
                       {CacheFormat::bf16, 16, 4, 64, 3, {4, 1111, 4500}},
                   },
                   "row groups ");
}

// docs/operations.md's rule for index values out of range, on mla_decode: a length past the
// block table still ends each query's causal window at seq_lens[b] - s_q + i (the positions past
// the table hold no token), and block-table holes (-1, negative, >= num_blocks) hold no token.
// Small tables, so a window cut at the table's end instead (as the kernels once did) drops a
// large share of a query's positions and fails the tolerance.
void run_decode_edges(CacheFormat fmt, int s_q, const std::string& what, const char* id = "cuda.sparse_mla",
                      double tol = kTol) {
  Runner run;
  std::mt19937 rng(991u + static_cast<unsigned>(s_q));
  constexpr int H = 7, bs = 13, max_blocks = 3, B = 5;
  const std::vector<int> lens = {77, 41, 39, 20, 1};  // cap = 39: past, just past, at, in, < s_q
  Cache cache = make_cache(fmt, bs, 12 * bs, rng);
  const int32_t nb = static_cast<int32_t>(cache.num_blocks);
  const std::vector<int32_t> table = {3, -1, 7,   10, 1000000, 2,   -7, 5, 11,
                                      4, 8, 6,     9, -1, 0};
  const int rows = s_q * H;
  std::vector<uint16_t> q = make_q(static_cast<int64_t>(B) * rows, rng, 3.f);
  DeviceBuffer dq(q.size() * 2), dc(cache.bytes.size()), dt(table.size() * 4), dl(lens.size() * 4),
      dout(q.size() / 576 * 512 * 2), dlse(q.size() / 576 * 4);
  dq.upload(q.data(), q.size() * 2);
  dc.upload(cache.bytes.data(), cache.bytes.size());
  dt.upload(table.data(), table.size() * 4);
  dl.upload(lens.data(), lens.size() * 4);
  const Device dev{DeviceKind::cuda, 0};
  MlaDecodeArgs a;
  a.q = TensorView::contiguous(dq.get(), DType::bf16, {B, s_q, H, 576}, dev);
  a.kv_cache = fmt == CacheFormat::bf16
                   ? TensorView::contiguous(dc.get(), DType::bf16, {cache.num_blocks, bs, 576}, dev)
                   : TensorView::contiguous(dc.get(), DType::u8, {cache.num_blocks, bs, 656}, dev);
  a.block_table = TensorView::contiguous(dt.get(), DType::i32, {B, max_blocks}, dev);
  a.seq_lens = TensorView::contiguous(dl.get(), DType::i32, {B}, dev);
  a.out = TensorView::contiguous(dout.get(), DType::bf16, {B, s_q, H, 512}, dev);
  a.lse = TensorView::contiguous(dlse.get(), DType::f32, {B, s_q, H}, dev);
  a.scale = kGlmScale;
  AttentionSpec sp;
  sp.op = Op::mla_decode;
  sp.num_heads = H;
  sp.kv_cache = fmt;
  sp.block_size = bs;
  sp.s_q = s_q;
  sp.max_tokens = static_cast<int64_t>(B) * s_q;
  sp.scale = kGlmScale;
  auto k = run.make(sp, id);
  const std::size_t nrows = static_cast<std::size_t>(B) * rows;
  const Result r = run.run(*k, a, nrows * 512, nrows);
  expect_all_written(r, what);
  std::vector<double> ref(nrows * 512), ref_lse(nrows);
  for (int b = 0; b < B; ++b) {
    for (int i = 0; i < s_q; ++i) {
      std::vector<int64_t> slots;
      for (int pos = 0; pos <= lens[b] - s_q + i && pos < max_blocks * bs; ++pos) {
        const int32_t blk = table[b * max_blocks + pos / bs];
        if (blk >= 0 && blk < nb) slots.push_back(static_cast<int64_t>(blk) * bs + pos % bs);
      }
      for (int h = 0; h < H; ++h) {
        const std::size_t row = (static_cast<std::size_t>(b) * s_q + i) * H + h;
        oracle_row(cache, &q[row * 576], slots, kGlmScale, &ref[row * 512], &ref_lse[row]);
      }
    }
  }
  std::vector<int64_t> all_rows(nrows);
  for (std::size_t i = 0; i < nrows; ++i) all_rows[i] = static_cast<int64_t>(i);
  compare(r, all_rows, 1, ref, ref_lse, what, tol);
}

TEST_F(CudaSparseMla, DecodeLengthsPastTheTableAndHoles) {
  for (CacheFormat fmt : {CacheFormat::bf16, CacheFormat::fp8_ds_mla})
    for (int s_q : {1, 2, 4})
      run_decode_edges(fmt, s_q, std::string("decode edges ") +
                                     (fmt == CacheFormat::bf16 ? "bf16" : "fp8") + " s_q=" +
                                     std::to_string(s_q));
  const ScopedEnv forced("LATTE_CUDA_SPARSE_MLA_ROW_GROUPS", "1");
  for (int s_q : {1, 2, 4}) run_decode_edges(CacheFormat::bf16, s_q, "decode edges row groups s_q=" + std::to_string(s_q));
}

// Small problems for compute-sanitizer (memcheck, racecheck): both formats, every configuration
// of the row-tile kernel (forced through the LATTE_CUDA_SPARSE_MLA_* tuning variables) and the
// few-heads kernel, splits, padding.
TEST_F(CudaSparseMla, SanitizerSmall) {
  Runner run;
  setenv("LATTE_CUDA_SPARSE_MLA_ROW_TILE_ONLY", "1", 1);
  struct Config {
    const char *warps, *tile, *ctas, *dims;
  };
  for (const auto& [warps, tile, ctas, dims] :
       {Config{"4", "16", "2", "1"}, Config{"4", "16", "2", "2"}, Config{"4", "16", "3", "1"},
        Config{"4", "32", "2", "1"}, Config{"8", "16", "2", "1"}, Config{"8", "16", "2", "2"},
        Config{"8", "16", "3", "1"}, Config{"8", "32", "2", "1"}}) {
    setenv("LATTE_CUDA_SPARSE_MLA_WARPS", warps, 1);
    setenv("LATTE_CUDA_SPARSE_MLA_ROW_TILE", tile, 1);
    setenv("LATTE_CUDA_SPARSE_MLA_CTAS", ctas, 1);
    setenv("LATTE_CUDA_SPARSE_MLA_DIM_SPLIT", dims, 1);
    const IndexOpts padded = row1_empty();
    for (const SparseCase& c : {SparseCase{CacheFormat::fp8_ds_mla, 40, 700, 16, 3, padded},
                                SparseCase{CacheFormat::bf16, 40, 700, 16, 3, padded},
                                SparseCase{CacheFormat::bf16, 5, 33, 1, 2, padded},
                                SparseCase{CacheFormat::fp8_ds_mla, 5, 300, 16, 3, padded}}) {
      auto s = setup_sparse(c, 3);
      run_vs_oracle(run, *s,
                    std::string("warps ") + warps + " tile " + tile + " ctas " + ctas + " dims " + dims + " " +
                        name_of(c));
    }
  }
  unsetenv("LATTE_CUDA_SPARSE_MLA_ROW_TILE");
  unsetenv("LATTE_CUDA_SPARSE_MLA_WARPS");
  unsetenv("LATTE_CUDA_SPARSE_MLA_CTAS");
  unsetenv("LATTE_CUDA_SPARSE_MLA_DIM_SPLIT");
  unsetenv("LATTE_CUDA_SPARSE_MLA_ROW_TILE_ONLY");
  const IndexOpts padded = row1_empty();
  for (const SparseCase& c : {SparseCase{CacheFormat::fp8_ds_mla, 5, 300, 16, 3, padded},
                              SparseCase{CacheFormat::fp8_ds_mla, 8, 700, 1, 2, padded},
                              SparseCase{CacheFormat::fp8_ds_mla, 12, 300, 16, 17, padded},
                              SparseCase{CacheFormat::fp8_ds_mla, 16, 700, 1, 17, padded}}) {
    auto s = setup_sparse(c, 3);
    run_vs_oracle(run, *s, "few heads " + name_of(c));
  }
}

// Small problems for compute-sanitizer through the row-group kernel (forced): whole CTAs (64 and
// 128 heads; decode 2 x 32 rows) and CTAs with row groups past the rows (40 and 5 heads; decode
// 2 x 40 rows), with splits and padding.
void run_row_groups_small(const std::vector<SparseCase>& cases, const DecodeCase& decode) {
  const ScopedEnv forced("LATTE_CUDA_SPARSE_MLA_ROW_GROUPS", "1");
  Runner run;
  for (const SparseCase& c : cases) {
    auto s = setup_sparse(c, 3);
    run_vs_oracle(run, *s, "row groups " + name_of(c));
  }
  run_decode_cases({decode}, "row groups ");
}

TEST_F(CudaSparseMla, SanitizerRowGroupsWhole) {
  const IndexOpts padded = row1_empty();
  run_row_groups_small({SparseCase{CacheFormat::bf16, 64, 700, 16, 3, padded},
                        SparseCase{CacheFormat::bf16, 128, 300, 64, 2, padded}},
                       {CacheFormat::bf16, 32, 2, 16, 2, {300, 1000}});
}

TEST_F(CudaSparseMla, SanitizerRowGroupsPartial) {
  const IndexOpts padded = row1_empty();
  run_row_groups_small({SparseCase{CacheFormat::bf16, 40, 700, 16, 3, padded},
                        SparseCase{CacheFormat::bf16, 5, 33, 1, 2, padded}},
                       {CacheFormat::bf16, 40, 2, 1, 2, {33, 700}});
}

// Consecutive splits in one CTA (MlaPlan::chunks_per_cta 2 on the H200): 32-token splits cut a
// 2048-token list into 64, and 3 tokens x 64 splits = 192 split CTAs overflow one wave, so each
// CTA runs two splits back to back through the same shared-memory stages.
TEST_F(CudaSparseMla, SanitizerRowGroupsPacked) {
  const ScopedEnv chunk("LATTE_CUDA_SPARSE_MLA_CHUNK", "32");
  const IndexOpts padded = row1_empty();
  run_row_groups_small({SparseCase{CacheFormat::bf16, 64, 2048, 16, 3, padded}},
                       {CacheFormat::bf16, 32, 2, 16, 2, {300, 1000}});
}

// ---------------------------------------------------------------- MLA without rope, topk_lens
// sparse_mla with rope_dim 0 (GLM-5.3-Flash: q [T, H, 512], cache rows of the 512 latent values)
// in its three cache layouts, and per-row lengths (topk_lens), against cpu.reference.
enum class NopeRows { bf16_512, fp8_528, fp8_656 };

struct NopeCase {
  SparseCase base;  // base.fmt: the cache format of the rows (bf16 for bf16_512, else fp8)
  NopeRows rows;
  bool lens = false;          // topk_lens: lengths 0, negative, past topk and in between, garbage past them
  float scale = 0.0731f;      // not a power of two
};

NopeCase nope_case(NopeRows rows, int H, int topk, int bs, int T, bool lens, IndexOpts opts = row1_empty(),
                   float scale = 0.0731f) {
  const CacheFormat fmt = rows == NopeRows::bf16_512 ? CacheFormat::bf16 : CacheFormat::fp8_ds_mla;
  return NopeCase{SparseCase{fmt, H, topk, bs, T, std::move(opts)}, rows, lens, scale};
}

int nope_row_bytes(NopeRows r) { return r == NopeRows::bf16_512 ? 1024 : r == NopeRows::fp8_528 ? 528 : 656; }

std::string name_of(const NopeCase& c) {
  const char* rows = c.rows == NopeRows::bf16_512 ? "no rope bf16 512" : c.rows == NopeRows::fp8_528 ? "no rope fp8 528"
                                                                                                 : "no rope fp8 656";
  return std::string(rows) + " H=" + std::to_string(c.base.H) + " topk=" + std::to_string(c.base.topk) +
         " bs=" + std::to_string(c.base.bs) + " T=" + std::to_string(c.base.T) + (c.lens ? " topk_lens" : "");
}

// Row lengths for topk_lens: every kind of value (0, negative, past topk, 1, topk, in between;
// a lone token in between);
// the entries past a row's length are replaced by valid slots (garbage a kernel that read them
// would attend to).
std::vector<int32_t> make_lens(int64_t T, int topk, int64_t slots, std::vector<int32_t>& idx, std::mt19937& rng) {
  std::vector<int32_t> lens(static_cast<std::size_t>(T));
  std::uniform_int_distribution<int> any(1, topk);
  std::uniform_int_distribution<int64_t> pick(0, slots - 1);
  for (int64_t t = 0; t < T; ++t) {
    int32_t len;
    switch (T == 1 ? 7 : t % 8) {  // a lone token: a length in between
      case 0: len = 0; break;
      case 1: len = -3; break;
      case 2: len = topk + 5; break;
      case 3: len = 1; break;
      case 4: len = topk; break;
      default: len = any(rng); break;
    }
    lens[static_cast<std::size_t>(t)] = len;
    for (int k = std::clamp(len, 0, topk); k < topk; ++k)
      idx[static_cast<std::size_t>(t * topk + k)] = static_cast<int32_t>(pick(rng));
  }
  return lens;
}

struct NopeSetup {
  NopeCase c;
  Cache src;                  // the same rows with rope (the float64 fallback oracle's source)
  std::vector<uint8_t> rows;  // the cache without rope, as uploaded
  std::vector<uint16_t> q;    // [T, H, 512]
  std::vector<int32_t> idx, lens;
  DeviceBuffer d_q, d_cache, d_idx, d_lens, d_out, d_lse;
  SparseMlaArgs args;
  AttentionSpec spec;
};

std::unique_ptr<NopeSetup> setup_nope(const NopeCase& c, uint32_t seed) {
  auto s = std::make_unique<NopeSetup>();
  s->c = c;
  const SparseCase& b = c.base;
  std::mt19937 rng(seed);
  const int64_t slots = std::max<int64_t>(2 * b.topk, 257);
  s->src = make_cache(b.fmt, b.bs, slots, rng, b.kv_amp_log2_span);
  const std::size_t rb = static_cast<std::size_t>(nope_row_bytes(c.rows));
  const std::size_t n = static_cast<std::size_t>(s->src.slots());
  s->rows.resize(n * rb);
  std::uniform_int_distribution<int> byte(0, 255);
  for (std::size_t t = 0; t < n; ++t) {
    const uint8_t* from = s->src.bytes.data() + t * token_bytes(b.fmt);
    uint8_t* to = s->rows.data() + t * rb;
    std::memcpy(to, from, b.fmt == CacheFormat::bf16 ? 1024 : 528);  // the latent (and fp8 scales)
    if (c.rows == NopeRows::fp8_656) {
      // bytes 528..655 are reserved and never read: NaN (0xFF / 0x7FC0 as bf16), inf / huge
      // values and random bytes, so that a rope step run on them would show in the output
      for (std::size_t k = 528; k < 656; ++k) {
        switch (t % 4) {
          case 0: to[k] = 0xFF; break;
          case 1: to[k] = (k & 1) ? 0x7F : 0xC0; break;
          case 2: to[k] = (k & 1) ? 0x7F : 0x80; break;  // bf16 0x7F80 = +inf
          default: to[k] = static_cast<uint8_t>(byte(rng)); break;
        }
      }
    }
  }
  s->q.resize(static_cast<std::size_t>(b.T) * b.H * 512);
  std::uniform_real_distribution<float> u(-b.q_amp, b.q_amp);
  for (auto& v : s->q) v = float_to_bf16(u(rng));
  s->idx = make_indices(b.T, b.topk, slots, b.opts, rng);
  if (c.lens) s->lens = make_lens(b.T, b.topk, slots, s->idx, rng);
  s->d_q = DeviceBuffer(s->q.size() * 2);
  s->d_q.upload(s->q.data(), s->q.size() * 2);
  s->d_cache = DeviceBuffer(s->rows.size());  // exactly the rows: a read past them is out of bounds
  s->d_cache.upload(s->rows.data(), s->rows.size());
  s->d_idx = DeviceBuffer(s->idx.size() * 4);
  s->d_idx.upload(s->idx.data(), s->idx.size() * 4);
  s->d_out = DeviceBuffer(static_cast<std::size_t>(b.T) * b.H * 512 * 2);
  s->d_lse = DeviceBuffer(static_cast<std::size_t>(b.T) * b.H * 4);
  const Device dev{DeviceKind::cuda, 0};
  SparseMlaArgs& a = s->args;
  a.rope_dim = 0;
  a.q = TensorView::contiguous(s->d_q.get(), DType::bf16, {b.T, b.H, 512}, dev);
  a.kv_cache = c.rows == NopeRows::bf16_512
                   ? TensorView::contiguous(s->d_cache.get(), DType::bf16, {s->src.num_blocks, b.bs, 512}, dev)
                   : TensorView::contiguous(s->d_cache.get(), DType::u8,
                                            {s->src.num_blocks, b.bs, static_cast<int64_t>(rb)}, dev);
  a.indices = TensorView::contiguous(s->d_idx.get(), DType::i32, {b.T, b.topk}, dev);
  if (c.lens) {
    s->d_lens = DeviceBuffer(s->lens.size() * 4);
    s->d_lens.upload(s->lens.data(), s->lens.size() * 4);
    a.topk_lens = TensorView::contiguous(s->d_lens.get(), DType::i32, {b.T}, dev);
  }
  a.out = TensorView::contiguous(s->d_out.get(), DType::bf16, {b.T, b.H, 512}, dev);
  a.lse = TensorView::contiguous(s->d_lse.get(), DType::f32, {b.T, b.H}, dev);
  a.scale = c.scale;
  s->spec = spec_from_args(a);
  s->spec.max_tokens = b.T;
  EXPECT_EQ(s->spec.head_dim, kLatentDim);
  EXPECT_EQ(s->spec.topk_lens, c.lens);
  return s;
}

// The row's effective length, as cpu.reference and the validation layer read topk_lens.
int nope_len(const NopeSetup& s, int64_t t) {
  return s.c.lens ? std::clamp(s.lens[static_cast<std::size_t>(t)], 0, s.c.base.topk) : s.c.base.topk;
}

// Oracle for the sampled tokens: cpu.reference on the same rows without rope (and the same
// topk_lens) when registered, else the float64 loop on the rows with rope and a zero rope query.
void oracle_nope(const NopeSetup& s, const std::vector<int64_t>& ts, std::vector<double>& ref,
                 std::vector<double>& ref_lse) {
  const int H = s.c.base.H, K = s.c.base.topk;
  ref.assign(ts.size() * H * 512, 0.0);
  ref_lse.assign(ts.size() * H, 0.0);
  const auto n = static_cast<int64_t>(ts.size());
  if (auto cpu = Registry::global().find("cpu.reference")) {
    std::vector<uint16_t> q(ts.size() * H * 512), out(ts.size() * H * 512);
    std::vector<int32_t> idx(ts.size() * K), lens(ts.size());
    std::vector<float> lse(ts.size() * H);
    for (std::size_t i = 0; i < ts.size(); ++i) {
      std::memcpy(&q[i * H * 512], &s.q[static_cast<std::size_t>(ts[i]) * H * 512], H * 512 * 2);
      std::memcpy(&idx[i * K], &s.idx[static_cast<std::size_t>(ts[i]) * K], K * 4);
      if (s.c.lens) lens[i] = s.lens[static_cast<std::size_t>(ts[i])];
    }
    SparseMlaArgs a;
    a.rope_dim = 0;
    a.q = TensorView::contiguous(q.data(), DType::bf16, {n, H, 512});
    auto* rows = const_cast<uint8_t*>(s.rows.data());
    a.kv_cache = s.c.rows == NopeRows::bf16_512
                     ? TensorView::contiguous(rows, DType::bf16, {s.src.num_blocks, s.c.base.bs, 512})
                     : TensorView::contiguous(rows, DType::u8,
                                              {s.src.num_blocks, s.c.base.bs, nope_row_bytes(s.c.rows)});
    a.indices = TensorView::contiguous(idx.data(), DType::i32, {n, K});
    if (s.c.lens) a.topk_lens = TensorView::contiguous(lens.data(), DType::i32, {n});
    a.out = TensorView::contiguous(out.data(), DType::bf16, {n, H, 512});
    a.lse = TensorView::contiguous(lse.data(), DType::f32, {n, H});
    a.scale = s.c.scale;
    reference_into(*cpu, a, out, lse, ref, ref_lse);
    return;
  }
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const auto slots = listed_slots(&s.idx[static_cast<std::size_t>(ts[i]) * K], nope_len(s, ts[i]), s.src.slots());
    for (int h = 0; h < H; ++h) {
      uint16_t q576[576] = {};  // the latent query, zero rope: the 512-dim dot product
      std::memcpy(q576, &s.q[(static_cast<std::size_t>(ts[i]) * H + h) * 512], 512 * 2);
      oracle_row(s.src, q576, slots, s.c.scale, &ref[(i * H + h) * 512], &ref_lse[i * H + h]);
    }
  }
}

// Runs a kernel made for the case's spec over all its tokens (outputs poisoned), checks the
// sampled tokens against the oracle and every empty row (all -1, or a length of 0 or below):
// out exactly 0, lse -inf.
Result run_nope_vs_oracle(Runner& run, const NopeSetup& s, const std::string& what) {
  auto k = run.make(s.spec);
  const SparseCase& b = s.c.base;
  const std::size_t n = static_cast<std::size_t>(b.T) * b.H;
  const Result r = run.run(*k, s.args, n * 512, n);
  expect_all_written(r, what);
  std::vector<int64_t> ts = sample_tokens(b);
  if (s.c.lens) {  // a token of every length kind
    for (int64_t t = 0; t < std::min<int64_t>(b.T, 8); ++t) ts.push_back(t);
    std::sort(ts.begin(), ts.end());
    ts.erase(std::unique(ts.begin(), ts.end()), ts.end());
  }
  std::vector<double> ref, ref_lse;
  oracle_nope(s, ts, ref, ref_lse);
  compare(r, ts, b.H, ref, ref_lse, what);
  for (int64_t t = 0; t < b.T; ++t) {
    const bool empty = nope_len(s, t) == 0 ||
                       std::find(b.opts.empty.begin(), b.opts.empty.end(), t) != b.opts.empty.end();
    if (!empty) continue;
    for (int h = 0; h < b.H; ++h) {
      const std::size_t row = static_cast<std::size_t>(t) * b.H + h;
      EXPECT_TRUE(std::isinf(r.lse[row]) && r.lse[row] < 0) << what << " token " << t;
      const auto nonzero = std::count_if(r.out.begin() + static_cast<std::ptrdiff_t>(row * 512),
                                         r.out.begin() + static_cast<std::ptrdiff_t>(row * 512 + 512),
                                         [](uint16_t v) { return v != 0; });
      EXPECT_EQ(nonzero, 0) << what << " token " << t << " head " << h << ": an empty row's output";
    }
  }
  return r;
}

// Each kernel family on the H200 (sm_90): fp8 with at most 8 heads the few-heads kernel, bf16
// with 64 / 128 heads in kernels for more than 8 tokens the row-group kernel, the rest the
// row-tile kernel (16- and 32-row tiles, the dim split at T = 1, 3 CTAs per SM for large grids).
// Heads 1, 2, 8, 16, 64, 128; topk 1, 64, 2048, 2176; block sizes 1, 16, 64; all three layouts.
std::vector<NopeCase> nope_accuracy_cases() {
  const IndexOpts dense = no_padding(), heavy = half_empty();
  using R = NopeRows;
  return {
      nope_case(R::fp8_528, 1, 1, 1, 3, false),
      nope_case(R::fp8_656, 1, 64, 16, 9, true),
      nope_case(R::fp8_656, 2, 64, 16, 5, true),
      nope_case(R::fp8_528, 2, 2176, 64, 40, false, heavy),
      nope_case(R::fp8_528, 8, 2048, 64, 128, true),
      nope_case(R::fp8_656, 8, 2176, 16, 300, true, row1_empty(), 0.0441941738f),
      nope_case(R::bf16_512, 1, 64, 1, 7, true),
      nope_case(R::bf16_512, 2, 2176, 16, 3, true),
      nope_case(R::bf16_512, 8, 2048, 64, 128, false),
      nope_case(R::fp8_528, 16, 2176, 1, 64, true),
      nope_case(R::bf16_512, 16, 64, 16, 200, true),
      nope_case(R::fp8_656, 16, 1, 64, 128, false),
      nope_case(R::fp8_656, 64, 2048, 64, 1, false, dense),
      nope_case(R::fp8_528, 64, 2048, 64, 1, true),
      nope_case(R::fp8_528, 64, 2048, 64, 128, true),
      nope_case(R::fp8_656, 64, 2176, 16, 32, true, heavy),
      nope_case(R::bf16_512, 64, 2048, 64, 128, true),
      nope_case(R::bf16_512, 64, 2176, 16, 4, false),
      nope_case(R::bf16_512, 64, 1, 1, 1, false, dense),
      nope_case(R::fp8_656, 128, 2176, 16, 32, true),
      nope_case(R::fp8_528, 128, 64, 64, 3, false, dense, 0.1353f),
      nope_case(R::bf16_512, 128, 2048, 1, 32, true),
      nope_case(R::bf16_512, 128, 2176, 16, 2, true, heavy),
      nope_case(R::fp8_528, 64, 2048, 16, 400, true),
  };
}

TEST_F(CudaSparseMla, NoRopeVsOracle) {
  Runner run;
  uint32_t seed = 9100;
  std::printf("  oracle: %s\n", Registry::global().find("cpu.reference") ? "cpu.reference" : "float64 loop (test)");
  for (const NopeCase& c : nope_accuracy_cases()) {
    auto s = setup_nope(c, seed++);
    run_nope_vs_oracle(run, *s, name_of(c));
  }
}

// Peaked softmax and fp8 group scales over 24 octaves (the few-heads kernel's scale reference
// moves) without rope.
TEST_F(CudaSparseMla, NoRopePeakedAndWideScales) {
  Runner run;
  for (NopeRows rows : {NopeRows::bf16_512, NopeRows::fp8_528, NopeRows::fp8_656}) {
    for (int heads : {8, 16, 64}) {
      NopeCase c = nope_case(rows, heads, 700, 16, heads == 16 ? 17 : 4, true, IndexOpts{});
      c.base.q_amp = 40.f;
      auto s = setup_nope(c, 31 + heads);
      run_nope_vs_oracle(run, *s, "peaked " + name_of(c));
      if (rows == NopeRows::bf16_512) continue;
      NopeCase w = nope_case(rows, heads, 2048, 16, heads == 16 ? 17 : 8, false, IndexOpts{});
      w.base.kv_amp_log2_span = 24.f;
      auto sw = setup_nope(w, 41 + heads);
      run_nope_vs_oracle(run, *sw, "wide scales " + name_of(w));
    }
  }
}

// Every configuration of the row-tile kernel (forced through the tuning variables) computes
// bitwise the same rows without rope, and matches the oracle; the few-heads and the row-group
// kernel (forced) too. Small problems: also the compute-sanitizer test of the rope-less
// instantiations (a read past byte 528 of the compact rows' last slot is out of bounds).
TEST_F(CudaSparseMla, SanitizerNoRope) {
  Runner run;
  const std::vector<NopeCase> cases = {
      nope_case(NopeRows::fp8_528, 40, 700, 16, 3, true),
      nope_case(NopeRows::fp8_656, 40, 700, 16, 3, false),
      nope_case(NopeRows::bf16_512, 40, 700, 16, 3, true),
      nope_case(NopeRows::bf16_512, 5, 33, 1, 2, false),
      nope_case(NopeRows::fp8_528, 5, 300, 16, 9, true),
  };
  std::vector<Result> first(cases.size());
  struct Config {
    const char *warps, *tile, *ctas, *dims;
  };
  bool have_first = false;
  for (const auto& [warps, tile, ctas, dims] :
       {Config{"4", "16", "2", "1"}, Config{"4", "16", "2", "2"}, Config{"4", "16", "3", "1"},
        Config{"4", "32", "2", "1"}, Config{"8", "16", "2", "1"}, Config{"8", "16", "2", "2"},
        Config{"8", "16", "3", "1"}, Config{"8", "32", "2", "1"}}) {
    const ScopedEnv only("LATTE_CUDA_SPARSE_MLA_ROW_TILE_ONLY", "1");
    const ScopedEnv w("LATTE_CUDA_SPARSE_MLA_WARPS", warps), t("LATTE_CUDA_SPARSE_MLA_ROW_TILE", tile),
        ct("LATTE_CUDA_SPARSE_MLA_CTAS", ctas), d("LATTE_CUDA_SPARSE_MLA_DIM_SPLIT", dims);
    for (std::size_t i = 0; i < cases.size(); ++i) {
      auto s = setup_nope(cases[i], 3);
      const std::string what = std::string("warps ") + warps + " tile " + tile + " ctas " + ctas + " dims " + dims +
                               " " + name_of(cases[i]);
      const Result r = run_nope_vs_oracle(run, *s, what);
      if (!have_first) {
        first[i] = r;
      } else {
        EXPECT_TRUE(bitwise_equal(first[i], r)) << what << " vs warps 4 tile 16 ctas 2 dims 1";
      }
    }
    have_first = true;
  }
  const auto run_all = [&](const std::vector<NopeCase>& cs, const std::string& tag) {
    for (const NopeCase& c : cs) run_nope_vs_oracle(run, *setup_nope(c, 3), tag + name_of(c));
  };
  // the few-heads kernel (fp8, <= 8 heads, 9-16 from 17 tokens; the row-tile kernel on devices
  // that do not hold two per SM)
  run_all({nope_case(NopeRows::fp8_528, 5, 300, 16, 3, true), nope_case(NopeRows::fp8_656, 8, 700, 1, 2, true),
           nope_case(NopeRows::fp8_656, 2, 64, 64, 3, false), nope_case(NopeRows::fp8_528, 14, 300, 16, 17, true),
           nope_case(NopeRows::fp8_656, 16, 700, 1, 17, false)},
          "few heads ");
  // the row-group kernel: whole CTAs, row groups past the heads, consecutive splits in one CTA
  const ScopedEnv forced("LATTE_CUDA_SPARSE_MLA_ROW_GROUPS", "1");
  run_all({nope_case(NopeRows::bf16_512, 64, 700, 16, 3, true), nope_case(NopeRows::bf16_512, 40, 700, 16, 3, false),
           nope_case(NopeRows::bf16_512, 128, 300, 64, 2, true)},
          "row groups ");
  const ScopedEnv chunk("LATTE_CUDA_SPARSE_MLA_CHUNK", "32");
  auto s = setup_nope(nope_case(NopeRows::bf16_512, 64, 2048, 16, 3, true), 3);
  run_nope_vs_oracle(run, *s, "row groups packed " + name_of(s->c));
}

// A call with topk_lens equals the same call with every column past a row's length set to -1
// and no topk_lens, value for value (out and lse; a split past a row's length contributes
// exactly nothing to the combine), with rope and without, in every kernel family, with several
// splits per row (128-token chunks) and the default ones; the topk_lens call also replays from a
// CUDA graph captured before the lengths changed (the plan reads no device memory).
TEST_F(CudaSparseMla, TopkLensEqualsPaddedRows) {
  Runner run;
  struct Family {
    CacheFormat fmt;
    int H, topk, T;
  };
  const std::vector<Family> families = {
      {CacheFormat::fp8_ds_mla, 8, 2048, 16},    // few heads
      {CacheFormat::fp8_ds_mla, 16, 2048, 16},   // few heads, two n8 tiles
      {CacheFormat::fp8_ds_mla, 64, 2048, 16},   // row tiles (32 rows)
      {CacheFormat::fp8_ds_mla, 64, 2176, 1},    // row tiles, 16 rows, dim split
      {CacheFormat::bf16, 64, 2048, 16},         // row groups
      {CacheFormat::bf16, 16, 700, 40},          // row tiles
  };
  const auto same_values = [](const Result& a, const Result& b) {
    for (std::size_t i = 0; i < a.out.size(); ++i)
      if (bf16_to_float(a.out[i]) != bf16_to_float(b.out[i])) return false;
    for (std::size_t i = 0; i < a.lse.size(); ++i)
      if (!(a.lse[i] == b.lse[i])) return false;
    return true;
  };
  for (const char* chunk : {"128", ""}) {
    std::unique_ptr<ScopedEnv> forced;
    if (*chunk) forced = std::make_unique<ScopedEnv>("LATTE_CUDA_SPARSE_MLA_CHUNK", chunk);
    for (const Family& f : families) {
      for (bool rope : {true, false}) {
        std::mt19937 rng(17);
        const std::string what = std::string(rope ? "rope " : "no rope ") +
                                 (f.fmt == CacheFormat::bf16 ? "bf16" : "fp8") + " H=" + std::to_string(f.H) +
                                 " topk=" + std::to_string(f.topk) + " T=" + std::to_string(f.T) +
                                 (*chunk ? " chunk 128" : "");
        // the call with topk_lens (garbage past each length), then the padded call
        std::unique_ptr<SparseSetup> rs;
        std::unique_ptr<NopeSetup> ns;
        SparseMlaArgs args;
        AttentionSpec spec;
        std::vector<int32_t>* idx = nullptr;
        DeviceBuffer* d_idx = nullptr;
        int64_t slots = 0;
        if (rope) {
          rs = setup_sparse(SparseCase{f.fmt, f.H, f.topk, 16, f.T, IndexOpts{}}, 23);
          args = rs->args;
          spec = rs->spec;
          idx = &rs->idx;
          d_idx = &rs->d.idx;
          slots = rs->cache.slots();
        } else {
          const NopeRows rows = f.fmt == CacheFormat::bf16 ? NopeRows::bf16_512 : NopeRows::fp8_656;
          ns = setup_nope(nope_case(rows, f.H, f.topk, 16, f.T, false, IndexOpts{}), 23);
          args = ns->args;
          spec = ns->spec;
          idx = &ns->idx;
          d_idx = &ns->d_idx;
          slots = ns->src.slots();
        }
        std::vector<int32_t> lens = make_lens(f.T, f.topk, slots, *idx, rng);
        d_idx->upload(idx->data(), idx->size() * 4);
        DeviceBuffer d_lens(lens.size() * 4);
        d_lens.upload(lens.data(), lens.size() * 4);
        SparseMlaArgs with = args;
        with.topk_lens = TensorView::contiguous(d_lens.get(), DType::i32, {f.T}, Device{DeviceKind::cuda, 0});
        AttentionSpec with_spec = spec;
        with_spec.topk_lens = true;
        const std::size_t n = static_cast<std::size_t>(f.T) * f.H;
        auto k_with = run.make(with_spec);
        const Result got = run.run(*k_with, with, n * 512, n);
        expect_all_written(got, what);
        // a graph captured now, replayed after the lengths (and garbage) changed, equals eager
        // with the new lengths: the launch does not depend on them
        {
          std::vector<int32_t> lens2(lens.size());  // every row's length changes
          for (std::size_t t = 0; t < lens.size(); ++t) {
            const int len = std::clamp(lens[t], 0, f.topk);
            lens2[t] = len == 0 ? f.topk / 3 + 1 : len / 2;
          }
          RunContext ctx;
          ctx.stream = run.stream();
          DeviceBuffer ws(std::max<std::size_t>(k_with->workspace_bytes(), 1));
          ctx.workspace = ws.get();
          ctx.workspace_bytes = k_with->workspace_bytes();
          cudaGraph_t g;
          cudaGraphExec_t ge;
          LATTE_CUDA_CHECK(cudaStreamBeginCapture(run.stream(), cudaStreamCaptureModeThreadLocal));
          k_with->run(with, ctx);
          LATTE_CUDA_CHECK(cudaStreamEndCapture(run.stream(), &g));
          LATTE_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
          LATTE_CUDA_CHECK(cudaStreamSynchronize(run.stream()));
          d_lens.upload(lens2.data(), lens2.size() * 4);
          LATTE_CUDA_CHECK(cudaMemsetAsync(with.out.data, 0xFF, n * 512 * 2, run.stream()));
          LATTE_CUDA_CHECK(cudaMemsetAsync(with.lse.data, 0xFF, n * 4, run.stream()));
          LATTE_CUDA_CHECK(cudaGraphLaunch(ge, run.stream()));
          LATTE_CUDA_CHECK(cudaStreamSynchronize(run.stream()));
          Result replay;
          replay.out.resize(n * 512);
          replay.lse.resize(n);
          LATTE_CUDA_CHECK(cudaMemcpy(replay.out.data(), with.out.data, n * 512 * 2, cudaMemcpyDeviceToHost));
          LATTE_CUDA_CHECK(cudaMemcpy(replay.lse.data(), with.lse.data, n * 4, cudaMemcpyDeviceToHost));
          LATTE_CUDA_CHECK(cudaGraphExecDestroy(ge));
          LATTE_CUDA_CHECK(cudaGraphDestroy(g));
          const Result eager2 = run.run(*k_with, with, n * 512, n);
          EXPECT_TRUE(bitwise_equal(replay, eager2)) << what << ": graph replay with changed topk_lens vs eager";
          d_lens.upload(lens.data(), lens.size() * 4);
        }
        // the padded call: -1 past each length, no topk_lens
        for (int64_t t = 0; t < f.T; ++t)
          for (int k = std::clamp(lens[static_cast<std::size_t>(t)], 0, f.topk); k < f.topk; ++k)
            (*idx)[static_cast<std::size_t>(t * f.topk + k)] = -1;
        d_idx->upload(idx->data(), idx->size() * 4);
        const Result padded = run.run(*run.make(spec), args, n * 512, n);
        expect_all_written(padded, what);
        EXPECT_TRUE(same_values(got, padded)) << what << ": topk_lens vs -1 padded rows";
        // a kernel made for topk_lens runs the padded call (no topk_lens) the same way
        EXPECT_TRUE(same_values(run.run(*k_with, args, n * 512, n), padded)) << what;
      }
    }
  }
}

// Host-only: 16-row tiles run 3 CTAs per SM when the grid is more than one wave of 2 and the
// device holds 3 (the H200, not an A100), else 2; 32-row tiles always 2.
TEST(CudaSparseMlaPlan, CtasPerSmRule) {
  cuda_sparse_mla::MlaParams p;
  p.format = CacheFormat::fp8_ds_mla;
  p.topk = 2048;
  p.heads = 8;
  p.groups = 128;  // 128 x 8 splits = 1024 CTAs
  cuda_sparse_mla::Tuning row_tiles;  // fp8 with 8 heads: the row-tile kernel only when asked
  row_tiles.row_tile_only = 1;
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, row_tiles, kLargeCalls).ctas_per_sm, 3);
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {108, kA100SmemPerSm}, 1 << 30, row_tiles, kLargeCalls).ctas_per_sm, 2);
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, kLargeCalls).ctas_per_sm, 2);
  p.format = CacheFormat::bf16;
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, kLargeCalls).ctas_per_sm, 3);
  p.groups = 1;  // 8 CTAs: one wave
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, kLargeCalls).ctas_per_sm, 2);
  p.heads = 64;
  p.groups = 128;  // 32-row tiles (bf16 with 64 heads: the row-tile kernel only when asked)
  const auto plan = cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, row_tiles, kLargeCalls);
  EXPECT_EQ(plan.row_tile, 32);
  EXPECT_EQ(plan.ctas_per_sm, 2);
  for (int tile : {16, 32})
    for (int ctas : {2, 3})
      EXPECT_LE(cuda_sparse_mla::smem_bytes(CacheFormat::fp8_ds_mla, tile, ctas), 101376u);
  EXPECT_LE(3 * (cuda_sparse_mla::smem_bytes(CacheFormat::bf16, 16, 3) + 1024), 233472u);
}

// Host-only: the row tile rule at the H200 sweep's points (docs/kernels/sparse_mla.md, "Work
// decomposition"): 16 rows while their grid has at most one CTA per SM; then 32 for fp8, and for
// bf16 when 32 rows need fewer waves.
TEST(CudaSparseMlaPlan, RowTileRule) {
  cuda_sparse_mla::MlaParams p;
  p.topk = 2048;
  struct Point {
    CacheFormat format;
    int heads, tokens, row_tile;
  };
  for (const Point& pt : {Point{CacheFormat::fp8_ds_mla, 64, 1, 16}, Point{CacheFormat::fp8_ds_mla, 64, 8, 16},
                          Point{CacheFormat::fp8_ds_mla, 64, 12, 32}, Point{CacheFormat::fp8_ds_mla, 64, 32, 32},
                          Point{CacheFormat::fp8_ds_mla, 128, 4, 16}, Point{CacheFormat::fp8_ds_mla, 128, 8, 32},
                          Point{CacheFormat::fp8_ds_mla, 8, 128, 16}, Point{CacheFormat::bf16, 64, 8, 16},
                          Point{CacheFormat::bf16, 64, 24, 16}, Point{CacheFormat::bf16, 64, 32, 32},
                          Point{CacheFormat::bf16, 64, 48, 16}, Point{CacheFormat::bf16, 64, 64, 32},
                          Point{CacheFormat::bf16, 128, 16, 32}, Point{CacheFormat::bf16, 128, 24, 16},
                          Point{CacheFormat::bf16, 64, 4096, 32}}) {
    p.format = pt.format;
    p.heads = pt.heads;
    p.groups = pt.tokens;
    cuda_sparse_mla::Tuning sweep;  // the sweep's split size, on the row-tile kernel
    sweep.chunk = 512;
    sweep.row_tile_only = 1;
    const auto plan = cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, sweep, kLargeCalls);
    EXPECT_EQ(plan.row_tile, pt.row_tile) << (pt.format == CacheFormat::bf16 ? "bf16" : "fp8") << " H=" << pt.heads
                                          << " T=" << pt.tokens;
  }
}

// Host-only: the split size is a function of the rows and of the kernel's largest call, never of
// a call's group count; kernels made for one group or at most 8 groups per call get smaller ones,
// kernels for prefill chunks (1024 groups or more) larger ones, a kernel of unknown size (0) the
// decode batches' size.
TEST(CudaSparseMlaPlan, ChunkFollowsTheKernelNotTheCall) {
  cuda_sparse_mla::MlaParams p;
  p.format = CacheFormat::fp8_ds_mla;
  p.topk = 2048;
  for (const auto& [heads, max_groups, chunk] :
       {std::tuple{64, 1, 128}, std::tuple{64, 2, 256}, std::tuple{64, 8, 256}, std::tuple{64, 9, 512},
        std::tuple{64, 64, 512}, std::tuple{64, 65, 2048}, std::tuple{128, 32, 1024}, std::tuple{128, 0, 512},
        std::tuple{128, 1023, 2048},
        std::tuple{128, 1024, 2048}, std::tuple{64, 4096, 2048},
        std::tuple{64, 0, 512}, std::tuple{8, 1, 128}, std::tuple{8, 32, 256}, std::tuple{8, 33, 512},
        std::tuple{8, 64, 512}, std::tuple{8, 512, 1024}, std::tuple{8, 4096, 1024}, std::tuple{8, 0, 256},
        std::tuple{16, 8, 128}, std::tuple{16, 16, 256}, std::tuple{16, 17, 256}, std::tuple{16, 64, 512}, std::tuple{16, 128, 1024},
        std::tuple{16, 0, 256}}) {
    p.heads = heads;
    for (int groups : {1, 8}) {
      if (max_groups > 0 && groups > max_groups) continue;
      p.groups = groups;
      const auto plan = cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, max_groups);
      EXPECT_EQ(plan.chunk, chunk) << "H " << heads << " kernel for " << max_groups << ", call of " << groups;
    }
  }
  p.decode = true;
  p.heads = 128;
  p.max_blocks = 512;
  p.block_size = 64;
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, 1).chunk, 1024);
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, 8).chunk, 1024);
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, 32).chunk, 4096);
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, 128).chunk, 4096);
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, 0).chunk, 4096);
  // one 16-row tile (DeepSeek-V3 TP8): 2048 beyond 64 requests, and 2 CTAs per SM for any grid
  p.heads = 16;
  for (const auto& [max_groups, chunk] : {std::pair{1, 1024}, std::pair{8, 1024}, std::pair{64, 1024},
                                          std::pair{65, 2048}, std::pair{128, 2048}, std::pair{0, 1024}}) {
    p.groups = max_groups > 0 ? max_groups : 512;
    const auto plan = cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, max_groups);
    EXPECT_EQ(plan.chunk, chunk) << "16 heads, kernel for " << max_groups << " requests";
    EXPECT_EQ(plan.ctas_per_sm, 2) << "16 heads, kernel for " << max_groups << " requests";
  }
}

// Host-only: the output dims split over two CTAs when the doubled grid has at most one CTA per
// SM (16-row tiles at 2 CTAs per SM only), never for calls that fill the device.
TEST(CudaSparseMlaPlan, DimSplitRule) {
  cuda_sparse_mla::MlaParams p;
  p.format = CacheFormat::fp8_ds_mla;
  p.topk = 2048;
  p.heads = 64;  // 4 row tiles of 16 x 4 splits of 512 = 16 CTAs per token (the row-tile kernel)
  cuda_sparse_mla::Tuning row_tiles;
  row_tiles.row_tile_only = 1;
  for (const auto& [groups, want] : {std::pair{1, 2}, std::pair{4, 2}, std::pair{8, 1}, std::pair{128, 1}}) {
    p.groups = groups;
    const auto plan = cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, row_tiles, kLargeCalls);
    EXPECT_EQ(plan.dim_split, want) << groups << " tokens";
    if (plan.dim_split == 2) {
      EXPECT_EQ(plan.row_tile, 16);
      EXPECT_EQ(plan.ctas_per_sm, 2);
    }
  }
  p.format = CacheFormat::bf16;
  p.heads = 8;
  p.groups = 1;
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, kLargeCalls).dim_split, 2);
  cuda_sparse_mla::Tuning forced;
  forced.dim_split = 1;
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, forced, kLargeCalls).dim_split, 1);
}

// Host-only: the few-heads kernel serves fp8 sparse calls of at most 8 heads at every T, of 9-16
// heads in kernels for more than 16 tokens (one row tile, no dim split) on devices that hold two
// of its CTAs per SM (the H200), never bf16,
// dense decode or more heads, nor on an A100 or a 100 KB-per-SM GPU (sm_86 / sm_89 / sm_120,
// where one CTA of the 8-head variant per block still fits).
TEST(CudaSparseMlaPlan, FewHeadsKernelRule) {
  cuda_sparse_mla::MlaParams p;
  p.format = CacheFormat::fp8_ds_mla;
  p.topk = 2048;
  for (int heads : {1, 5, 8, 9, 16, 17, 32})
    for (int groups : {1, 128, 4096}) {
      p.heads = heads;
      p.groups = groups;
      const auto plan = cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, groups);
      // 9-16 heads: not in kernels for at most 16 groups
      EXPECT_EQ(plan.few_heads, heads <= 8 || (heads <= 16 && groups > 16)) << heads << " heads, " << groups << " groups";
      if (plan.few_heads) {
        EXPECT_EQ(plan.row_tiles, 1);
        EXPECT_EQ(plan.dim_split, 1);
      }
    }
  p.heads = 8;
  cuda_sparse_mla::Tuning row_tiles;
  row_tiles.row_tile_only = 1;
  EXPECT_FALSE(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, row_tiles, kLargeCalls).few_heads);
  EXPECT_FALSE(cuda_sparse_mla::make_plan(p, {108, kA100SmemPerSm}, 1 << 30, {}, kLargeCalls).few_heads);
  EXPECT_FALSE(cuda_sparse_mla::make_plan(p, {188, 101376 + 1024}, 1 << 30, {}, kLargeCalls).few_heads);
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {108, kA100SmemPerSm}, 1 << 30, {}, 128).chunk, 256);
  p.format = CacheFormat::bf16;
  EXPECT_FALSE(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, kLargeCalls).few_heads);
  p.format = CacheFormat::fp8_ds_mla;
  p.decode = true;  // dense decode keeps the row-tile kernel
  p.s_q = 1;
  p.max_blocks = 64;
  p.block_size = 64;
  EXPECT_FALSE(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, kLargeCalls).few_heads);
  EXPECT_LE(cuda_sparse_mla::sparse_fp8_fewheads_smem_bytes(8), 101376u);
  p.decode = false;  // 16 heads: two CTAs per SM on the H200 only
  p.heads = 16;
  EXPECT_TRUE(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, kLargeCalls).few_heads);
  EXPECT_FALSE(cuda_sparse_mla::make_plan(p, {108, kA100SmemPerSm}, 1 << 30, {}, kLargeCalls).few_heads);
  EXPECT_FALSE(cuda_sparse_mla::make_plan(p, {188, 101376 + 1024}, 1 << 30, {}, kLargeCalls).few_heads);
  EXPECT_GT(cuda_sparse_mla::sparse_fp8_fewheads_smem_bytes(16), 101376u);
}

// Host-only: the row-group kernel serves bf16 calls (sparse and dense decode) whose rows are a
// multiple of 64 in kernels made for more than 8 groups (or of unknown size): 64-row tiles, one
// CTA per SM, no dim split; never fp8, other row counts or small-call kernels, unless forced (fp8
// never).
TEST(CudaSparseMlaPlan, RowGroupsKernelRule) {
  cuda_sparse_mla::MlaParams p;
  p.format = CacheFormat::bf16;
  p.topk = 2048;
  for (int heads : {8, 32, 40, 64, 96, 128, 192})
    for (int64_t max_groups : {int64_t{1}, int64_t{8}, int64_t{9}, int64_t{128}, kLargeCalls, int64_t{0}}) {
      p.heads = heads;
      p.groups = max_groups > 0 ? std::min<int64_t>(max_groups, 64) : 64;
      const auto plan = cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, max_groups);
      const bool want = heads % 64 == 0 && (max_groups == 0 || max_groups > 8);
      EXPECT_EQ(plan.row_groups, want) << heads << " heads, kernel for " << max_groups;
      if (plan.row_groups) {
        EXPECT_EQ(plan.row_tile, 64);
        EXPECT_EQ(plan.row_tiles, (heads + 63) / 64);
        EXPECT_EQ(plan.ctas_per_sm, 1);
        EXPECT_EQ(plan.dim_split, 1);
        EXPECT_FALSE(plan.few_heads);
      }
    }
  // its splits: 1024 tokens for decode batches (small calls in a kernel for many stay fast), 2048
  // for prefill chunks; dense decode 2048
  p.heads = 64;
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, 128).chunk, 1024);
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, 4096).chunk, 2048);
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, 32).chunk, 512);
  cuda_sparse_mla::Tuning off;
  off.row_tile_only = 1;
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, off, 128).chunk, 2048);
  EXPECT_FALSE(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, off, kLargeCalls).row_groups);
  cuda_sparse_mla::Tuning on;
  on.row_groups = 1;
  p.heads = 5;
  EXPECT_TRUE(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, on, 1).row_groups);
  // consecutive splits per CTA: the fewest that fit one wave, else all of a group's; 1 alone
  p.heads = 64;
  p.groups = 256;  // 2 splits of 1024
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, 256).chunks_per_cta, 2);
  p.groups = 1;
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, 256).chunks_per_cta, 1);
  p.heads = 128;
  p.topk = 3000;
  p.groups = 30;  // 3 splits of 1024 x 2 row tiles: 180 CTAs, 120 with two splits per CTA
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, 30).chunks_per_cta, 2);
  p.heads = 64;
  p.topk = 2048;
  p.groups = 3;  // SanitizerRowGroupsPacked's case: 64 splits of 32 tokens x 3 = 192 CTAs
  cuda_sparse_mla::Tuning split32;  // as the test forces it: the kernel and 32-token splits
  split32.chunk = 32;
  split32.row_groups = 1;
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, split32, 3).chunks_per_cta, 2);
  p.format = CacheFormat::fp8_ds_mla;
  p.heads = 64;
  EXPECT_FALSE(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, kLargeCalls).row_groups);
  EXPECT_FALSE(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, on, kLargeCalls).row_groups);
  p.format = CacheFormat::bf16;
  p.decode = true;  // dense decode: rows = s_q x heads
  p.s_q = 1;
  p.heads = 128;
  p.max_blocks = 64;
  p.block_size = 64;
  EXPECT_TRUE(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, kLargeCalls).row_groups);
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, kLargeCalls).chunk, 2048);
  EXPECT_EQ(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, off, kLargeCalls).chunk, 4096);
  EXPECT_FALSE(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, 8).row_groups);
  p.heads = 16;
  p.s_q = 4;
  EXPECT_TRUE(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, kLargeCalls).row_groups);
  p.s_q = 3;
  EXPECT_FALSE(cuda_sparse_mla::make_plan(p, {132, kH200SmemPerSm}, 1 << 30, {}, kLargeCalls).row_groups);
  EXPECT_LE(cuda_sparse_mla::bf16_rowgroups_smem_bytes(), 101376u);
}

// Host-only: a sparse call's split (chunk, splits per token) depends on heads and topk, never
// on T (only the row tile, which changes no bit, does).
TEST(CudaSparseMlaPlan, SplitIndependentOfT) {
  for (int H : {8, 64, 128})
    for (int topk : {63, 700, 2048, 5000}) {
      SparseCase c{CacheFormat::fp8_ds_mla, H, topk, 1, 1, IndexOpts{}};
      const auto p1 = sparse_plan(c, 1, 132, std::size_t{1} << 30);
      for (int64_t T : {2, 8, 32, 128, 4096}) {
        const auto p = sparse_plan(c, T, 132, std::size_t{1} << 30);
        EXPECT_EQ(p.chunk, p1.chunk) << "H " << H << " topk " << topk << " T " << T;
        EXPECT_EQ(p.nsplit, p1.nsplit) << "H " << H << " topk " << topk << " T " << T;
      }
    }
}

// Host-only: the tuning variables take the values they document (empty = unset: the default
// rule) and refuse any other with an error that names the variable, its value and the accepted
// ones.
TEST(CudaSparseMlaPlan, TuningVariablesRefuseWhatTheyDoNotAccept) {
  struct Var {
    const char* name;
    std::vector<const char*> good, bad;
  };
  const std::vector<Var> vars = {
      {"LATTE_CUDA_SPARSE_MLA_CHUNK", {"32", "512", ""}, {"0", "48", "-64", "abc", "64x"}},
      {"LATTE_CUDA_SPARSE_MLA_ROW_TILE", {"16", "32"}, {"8", "64", "sixteen"}},
      {"LATTE_CUDA_SPARSE_MLA_WARPS", {"4", "8"}, {"2", "16", "8.0"}},
      {"LATTE_CUDA_SPARSE_MLA_CTAS", {"2", "3"}, {"1", "4", " 3"}},
      {"LATTE_CUDA_SPARSE_MLA_DIM_SPLIT", {"1", "2"}, {"0", "4", "two"}},
      {"LATTE_CUDA_SPARSE_MLA_ROW_TILE_ONLY", {"1"}, {"0", "2", "yes"}},
      {"LATTE_CUDA_SPARSE_MLA_ROW_GROUPS", {"1"}, {"0", "2", "on"}},
  };
  for (const auto& v : vars) {
    for (const char* good : v.good) {
      setenv(v.name, good, 1);
      const auto t = cuda_sparse_mla::tuning_from_env();
      EXPECT_EQ(t.chunk + t.row_tile + t.warps + t.ctas + t.dim_split + t.row_tile_only + t.row_groups, std::atoi(good))
          << v.name << "=" << good;
    }
    for (const char* bad : v.bad) {
      setenv(v.name, bad, 1);
      try {
        (void)cuda_sparse_mla::tuning_from_env();
        ADD_FAILURE() << v.name << "=" << bad << " was accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
        EXPECT_NE(std::string(e.what()).find(std::string(v.name) + "=" + bad), std::string::npos) << e.what();
      }
    }
    unsetenv(v.name);
  }
  const auto unset = cuda_sparse_mla::tuning_from_env();
  EXPECT_EQ(unset.chunk + unset.row_tile + unset.warps + unset.ctas + unset.dim_split + unset.row_tile_only +
                unset.row_groups,
            0);
}

// The kernels' shared memory fits sm_86 / sm_89 / sm_120 (101376 bytes per block); the declared
// capabilities accept the issue's shapes on every described arch and refuse sm_75.
TEST(CudaSparseMlaCaps, DeclaredCapabilities) {
  auto be = Registry::global().find("cuda.sparse_mla");
  if (!be) GTEST_SKIP() << "cuda.sparse_mla not built";
  AttentionSpec sp;
  sp.op = Op::sparse_mla;
  sp.num_heads = 8;
  sp.kv_cache = CacheFormat::fp8_ds_mla;
  sp.block_size = 1;
  sp.topk = 100;
  sp.max_tokens = 1;
  for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"}) {
    const auto reasons = check(*be, sp, describe_device(arch));
    EXPECT_TRUE(reasons.empty()) << arch << ": " << (reasons.empty() ? "" : reasons[0].text);
  }
  sp.num_heads = 129;
  EXPECT_FALSE(check(*be, sp, describe_device("sm_90")).empty());
  sp.num_heads = 64;
  sp.topk = 40000;
  EXPECT_FALSE(check(*be, sp, describe_device("sm_90")).empty());
}

// Host-only: MLA without rope (GLM-5.3-Flash, head_dim 512) and topk_lens are computed on every
// architecture: the specs pass the capabilities and the custom checks, and selecting
// GLM-5.3-Flash's sparse_mla on a GPU chooses cuda.sparse_mla; mla_decode stays with rope only.
TEST(CudaSparseMlaCaps, AcceptsRowsWithoutRopeAndTopkLens) {
  auto be = Registry::global().find("cuda.sparse_mla");
  if (!be) GTEST_SKIP() << "cuda.sparse_mla not built";
  for (int tp : {1, 8}) {
    for (CacheFormat fmt : {CacheFormat::bf16, CacheFormat::fp8_ds_mla}) {
      Deployment d;
      d.tp = tp;
      d.kv_cache = fmt;
      AttentionSpec glm53 = attention_spec(load_model("glm-5.3-flash", d), Op::sparse_mla);
      ASSERT_EQ(glm53.head_dim, 512);
      for (bool lens : {false, true}) {
        glm53.topk_lens = lens;
        for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"}) {
          const auto reasons = check(*be, glm53, describe_device(arch));
          EXPECT_TRUE(reasons.empty()) << arch << " tp " << tp << ": " << (reasons.empty() ? "" : reasons[0].text);
        }
        const Selection s = Context::global().explain(glm53, describe_device("sm_90"));
        EXPECT_TRUE(s.ok()) << s.explain();
        EXPECT_EQ(s.chosen, "cuda.sparse_mla") << s.explain();
        AttentionSpec with_rope = glm53;  // the same shape with rope (and topk_lens)
        with_rope.head_dim = kQkDim;
        EXPECT_TRUE(check(*be, with_rope, describe_device("sm_90")).empty());
      }
    }
  }
  // dense decode has rope only: head_dim 512 refused with its reason
  AttentionSpec dec;
  dec.op = Op::mla_decode;
  dec.num_heads = 16;
  dec.kv_cache = CacheFormat::bf16;
  dec.head_dim = kLatentDim;
  dec.s_q = 1;
  const auto refused = check(*be, dec, describe_device("sm_90"));
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].code, "head_dim");
  EXPECT_NE(refused[0].text.find("mla_decode with rope only"), std::string::npos) << refused[0].text;
  dec.head_dim = kQkDim;
  EXPECT_TRUE(check(*be, dec, describe_device("sm_90")).empty());
}

// Host-only: rows without rope and topk_lens leave the plan as it is for rows with rope (the
// split, the row tile, the kernel, the grid): a function of the spec and the call's size only,
// never of the lengths in device memory (so a call with topk_lens is capturable in a CUDA graph).
TEST(CudaSparseMlaPlan, RowsWithoutRopeAndTopkLensKeepThePlan) {
  const int32_t lens_stub = 0;  // never read on the host
  for (CacheFormat fmt : {CacheFormat::bf16, CacheFormat::fp8_ds_mla}) {
    for (int heads : {1, 2, 8, 16, 64, 128}) {
      for (int topk : {1, 64, 2048, 2176}) {
        for (int64_t kernel_tokens : {int64_t{1}, int64_t{32}, int64_t{128}, int64_t{0}}) {
          for (int T : {1, 32, 128}) {
            cuda_sparse_mla::MlaParams p;
            p.format = fmt;
            p.heads = heads;
            p.topk = topk;
            p.groups = T;
            const cuda_sparse_mla::Tuning tuning;
            const cuda_sparse_mla::PlanDevice dev{132, kH200SmemPerSm};
            const auto want = cuda_sparse_mla::make_plan(p, dev, std::size_t{1} << 30, tuning, kernel_tokens);
            p.rope = false;
            p.topk_lens = &lens_stub;
            const auto got = cuda_sparse_mla::make_plan(p, dev, std::size_t{1} << 30, tuning, kernel_tokens);
            const std::string what = std::string(fmt == CacheFormat::bf16 ? "bf16" : "fp8") + " H=" +
                                     std::to_string(heads) + " topk=" + std::to_string(topk) + " T=" + std::to_string(T);
            EXPECT_EQ(got.chunk, want.chunk) << what;
            EXPECT_EQ(got.nsplit, want.nsplit) << what;
            EXPECT_EQ(got.row_tile, want.row_tile) << what;
            EXPECT_EQ(got.row_tiles, want.row_tiles) << what;
            EXPECT_EQ(got.few_heads, want.few_heads) << what;
            EXPECT_EQ(got.row_groups, want.row_groups) << what;
            EXPECT_EQ(got.ctas_per_sm, want.ctas_per_sm) << what;
            EXPECT_EQ(got.dim_split, want.dim_split) << what;
            EXPECT_EQ(got.chunks_per_cta, want.chunks_per_cta) << what;
            EXPECT_EQ(got.slab, want.slab) << what;
          }
        }
      }
    }
  }
}

// Host-only: Kernel::describe() of a kernel for rows without rope says so, in every kernel family.
TEST(CudaSparseMlaCaps, DescribeNamesRowsWithoutRope) {
  auto be = Registry::global().find("cuda.sparse_mla");
  if (!be) GTEST_SKIP() << "cuda.sparse_mla not built";
  const auto has = [](const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; };
  AttentionSpec sp;
  sp.op = Op::sparse_mla;
  sp.head_dim = kLatentDim;
  sp.topk = 2048;
  sp.topk_lens = true;
  sp.kv_cache = CacheFormat::fp8_ds_mla;
  sp.num_heads = 8;
  sp.max_tokens = 128;
  const std::string few = be->make(sp, describe_device("sm_90"))->describe();
  EXPECT_PRED2(has, few, "few-heads kernel: the 8 heads on the mma's N dimension");
  EXPECT_PRED2(has, few, "rows without rope (512-dim QK, 528 bytes read per row)");
  sp.num_heads = 64;
  const std::string tile = be->make(sp, describe_device("sm_90"))->describe();
  EXPECT_PRED2(has, tile, "row-tile kernel: 32-row tiles");
  EXPECT_PRED2(has, tile, "rows without rope (512-dim QK, 528 bytes read per row)");
  sp.kv_cache = CacheFormat::bf16;
  const std::string groups = be->make(sp, describe_device("sm_90"))->describe();
  EXPECT_PRED2(has, groups, "row-group kernel");
  EXPECT_PRED2(has, groups, "rows without rope (512-dim QK, 1024-byte rows)");
  sp.head_dim = kQkDim;  // with rope: not mentioned
  EXPECT_FALSE(has(be->make(sp, describe_device("sm_90"))->describe(), "without rope"));
}

// Host-only: Kernel::describe() names the kernel variant, the splits and the grid the plan gives
// a call of the kernel's size, on described devices (no GPU needed to make the kernel).
TEST(CudaSparseMlaCaps, DescribeNamesTheVariantAndTheSplits) {
  auto be = Registry::global().find("cuda.sparse_mla");
  if (!be) GTEST_SKIP() << "cuda.sparse_mla not built";
  const auto starts = [](const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; };
  AttentionSpec sp;
  sp.op = Op::sparse_mla;
  sp.num_heads = 64;
  sp.kv_cache = CacheFormat::bf16;
  sp.topk = 2048;
  sp.max_tokens = 128;
  EXPECT_EQ(be->make(sp, describe_device("sm_90"))->describe(),
            "row-group kernel: 64 rows per CTA, 8 warps, 1 CTA per SM, bf16 mma.sync; 2 splits of 1024 tokens "
            "per list, 2 consecutive splits per CTA; a call of 128 tokens: 128 CTAs on 132 SMs");
  sp.max_tokens = 32;  // 32 x 2 = 64 split CTAs fit one wave: a CTA per split
  EXPECT_EQ(be->make(sp, describe_device("sm_120"))->describe(),
            "row-group kernel: 64 rows per CTA, 8 warps, 1 CTA per SM, bf16 mma.sync; 4 splits of 512 tokens "
            "per list; a call of 32 tokens: 128 CTAs on 188 SMs");
  sp.max_tokens = 1;  // single-token kernels keep the row-tile kernel
  EXPECT_PRED2(starts, be->make(sp, describe_device("sm_90"))->describe(), "row-tile kernel: 16-row tiles");
  sp.kv_cache = CacheFormat::fp8_ds_mla;
  sp.num_heads = 8;
  sp.max_tokens = 128;
  EXPECT_PRED2(starts, be->make(sp, describe_device("sm_90"))->describe(),
               "few-heads kernel: the 8 heads on the mma's N dimension (one n8 tile, Q^T in registers)");
  // sm_120 holds one few-heads CTA per SM: the row-tile kernel until measured there
  EXPECT_PRED2(starts, be->make(sp, describe_device("sm_120"))->describe(), "row-tile kernel:");
  sp.num_heads = 16;  // two n8 tiles from kernels for more than 16 tokens; sm_120 holds none
  EXPECT_PRED2(starts, be->make(sp, describe_device("sm_90"))->describe(),
               "few-heads kernel: the 16 heads on the mma's N dimension (two n8 tiles, Q^T in shared memory)");
  EXPECT_PRED2(starts, be->make(sp, describe_device("sm_120"))->describe(), "row-tile kernel:");
  sp.max_tokens = 16;
  EXPECT_PRED2(starts, be->make(sp, describe_device("sm_90"))->describe(), "row-tile kernel: 16-row tiles");
  sp.op = Op::mla_decode;
  sp.kv_cache = CacheFormat::bf16;
  sp.num_heads = 128;
  sp.topk = 0;
  sp.s_q = 1;
  sp.max_tokens = 32;
  EXPECT_EQ(be->make(sp, describe_device("sm_90"))->describe(),
            "row-group kernel: 64 rows per CTA, 8 warps, 1 CTA per SM, bf16 mma.sync; splits of 2048 positions, "
            "as many as a request's length needs; a kernel for 32 requests per call");
}

// ---------------------------------------------------------------- hopper.mla
// hopper.mla (sm_90a, fp8_ds_mla and bf16 caches, sparse_mla and mla_decode, heads 1..128) against
// the oracle within the Hopper MLA issue's bound (relative error 5e-3), empty rows exactly 0 /
// -inf, every output written, bitwise determinism, batch invariance (a token or request alone =
// the same one in a call of many), CUDA graph replay, split and unsplit kernels, row groups
// padded past the heads.
class HopperMla : public ::testing::Test {
 protected:
  void SetUp() override {
    LATTE_SKIP_WITHOUT_GPU();
    if (!Registry::global().find("hopper.mla")) GTEST_SKIP() << "hopper.mla not built (no 90 in the CUDA architectures)";
    if (cuda0().arch() != 90) GTEST_SKIP() << "hopper.mla runs on sm_90 only; this GPU is " << cuda0().label();
  }
};

constexpr double kHopperTol = 5e-3;

std::vector<SparseCase> hopper_cases() {
  const IndexOpts padded = row1_empty(), dense = no_padding(), heavy = half_empty();
  return {
      {CacheFormat::fp8_ds_mla, 64, 2048, 64, 1, dense},
      {CacheFormat::fp8_ds_mla, 64, 2048, 64, 3, padded},
      {CacheFormat::fp8_ds_mla, 128, 2048, 64, 3, padded},
      {CacheFormat::fp8_ds_mla, 64, 63, 16, 5, padded},
      {CacheFormat::fp8_ds_mla, 128, 100, 1, 5, heavy},
      {CacheFormat::fp8_ds_mla, 64, 5000, 16, 3, heavy},
      {CacheFormat::fp8_ds_mla, 64, 2048, 64, 200, padded},
      {CacheFormat::fp8_ds_mla, 128, 2048, 64, 160, padded},
      // bf16: three operand stages (the stage counts 1, 2, 3 and 4 mod 3 below), no widening
      {CacheFormat::bf16, 64, 2048, 64, 1, dense},
      {CacheFormat::bf16, 64, 2048, 64, 3, padded},
      {CacheFormat::bf16, 128, 2048, 64, 3, padded},
      {CacheFormat::bf16, 64, 63, 16, 5, padded},
      {CacheFormat::bf16, 128, 100, 1, 5, heavy},
      {CacheFormat::bf16, 64, 130, 16, 4, dense},
      {CacheFormat::bf16, 64, 5000, 16, 3, heavy},
      {CacheFormat::bf16, 64, 2048, 64, 200, padded},
      {CacheFormat::bf16, 128, 2048, 64, 160, padded},
      // heads that are not a multiple of 64: the last row group padded with zero queries
      {CacheFormat::fp8_ds_mla, 1, 63, 16, 3, padded},
      {CacheFormat::fp8_ds_mla, 8, 2048, 64, 5, padded},
      {CacheFormat::bf16, 16, 2048, 64, 3, padded},
      {CacheFormat::fp8_ds_mla, 40, 100, 1, 140, padded},
      {CacheFormat::bf16, 96, 700, 16, 4, heavy},
      // fp8 with a second row group half (96 heads) or almost all (65) padding
      {CacheFormat::fp8_ds_mla, 96, 700, 16, 4, heavy},
      {CacheFormat::fp8_ds_mla, 65, 2048, 64, 2, padded},
  };
}

// The sparse plan (host only, runs in CI): which kernel (the few-heads kernel for the fp8 cache at
// 1-16 heads, in 16-head tiles for small calls of more heads; else the 64-row kernel), every list
// entry in exactly one split of that kernel's stages, no empty split, a kernel that already fills
// the SMs unsplit, few tokens split, the workspace exactly the partials (64-row groups whatever
// the kernel), and the plan a function of the kernel alone (cache, max_tokens, heads, topk, SMs).
TEST(HopperMlaPlan, CoversTheListAndSplitsOnlyToFillTheGpu) {
#if !LATTE_HOPPER_MLA_BUILT
  GTEST_SKIP() << "skipped: hopper.mla not built (CUDA architectures without 90)";
#else
  using hopper_mla::kHeadsPerCta;
  using hopper_mla::kTileRows;
  const auto up = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  for (const CacheFormat fmt : {CacheFormat::fp8_ds_mla, CacheFormat::bf16})
  for (const int sms : {132, 114}) {
    for (const int heads : {1, 8, 9, 16, 17, 64, 100, 128}) {
      for (const int topk : {1, 63, 100, 2048, 5000, 32768}) {
        for (const int64_t tokens : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{3}, int64_t{16}, int64_t{32},
                                     int64_t{128}, int64_t{4096}}) {
          const auto plan = hopper_mla::plan_sm90a(fmt, tokens, heads, topk, sms);
          const std::string at = std::string(fmt == CacheFormat::bf16 ? "bf16" : "fp8") + " sms " +
                                 std::to_string(sms) + " heads " + std::to_string(heads) + " topk " +
                                 std::to_string(topk) + " tokens " + std::to_string(tokens);
          const int64_t tiles16 = up(heads, 16);
          int tile = 0;
          if (fmt == CacheFormat::fp8_ds_mla) {
            if (heads <= 8) tile = 8;
            else if (heads <= 16 || (tokens > 0 && tokens * tiles16 <= hopper_mla::kFewHeadsTiledCtas)) tile = 16;
          }
          ASSERT_EQ(plan.head_tile, tile) << at;
          EXPECT_EQ(hopper_mla::fewheads_tile_sm90a(fmt, false, heads, tokens), tile) << at;
          EXPECT_EQ(hopper_mla::fewheads_tile_sm90a(fmt, true, heads, tokens), 0) << at;  // decode: 64-row kernel
          const int stage = tile > 0 ? hopper_mla::kFewHeadsStageRows : kTileRows;
          EXPECT_EQ(plan.chunk % stage, 0) << at;
          ASSERT_GE(plan.chunk, stage) << at;
          ASSERT_GE(plan.nsplit, 1) << at;
          EXPECT_GE(static_cast<int64_t>(plan.nsplit) * plan.chunk, topk) << at;
          EXPECT_LT(static_cast<int64_t>(plan.nsplit - 1) * plan.chunk, std::max(topk, 1)) << at;
          const int per_group = tile > 0 ? static_cast<int>(up(heads, tile)) : static_cast<int>(up(heads, kHeadsPerCta));
          EXPECT_EQ(hopper_mla::ctas_per_group_sm90a(plan, heads), per_group) << at;
          if (tokens == 0 || tokens * per_group >= sms) EXPECT_EQ(plan.nsplit, 1) << at;
          const std::size_t ws = hopper_mla::workspace_bytes_sm90a(plan, tokens, heads);
          if (plan.nsplit == 1) {
            EXPECT_EQ(ws, 0u) << at;
          } else {
            EXPECT_EQ(ws, static_cast<std::size_t>(tokens * up(heads, kHeadsPerCta)) * plan.nsplit * kHeadsPerCta *
                              (512 + 1) * sizeof(float))
                << at;
          }
          const auto again = hopper_mla::plan_sm90a(fmt, tokens, heads, topk, sms);
          EXPECT_TRUE(again.chunk == plan.chunk && again.nsplit == plan.nsplit && again.head_tile == plan.head_tile)
              << at;
        }
      }
    }
  }
  // The shapes of the measured table (H200, 132 SMs, topk 2048). The 64-row kernel: one token
  // splits, 32 tokens of 64 heads fill the GPU in four splits, 128 tokens run unsplit.
  EXPECT_GT(hopper_mla::plan_sm90a(CacheFormat::bf16, 1, 64, 2048, 132).nsplit, 8);
  EXPECT_EQ(hopper_mla::plan_sm90a(CacheFormat::fp8_ds_mla, 32, 64, 2048, 132).nsplit, 4);
  EXPECT_EQ(hopper_mla::plan_sm90a(CacheFormat::fp8_ds_mla, 128, 64, 2048, 132).nsplit, 1);
  EXPECT_EQ(hopper_mla::plan_sm90a(CacheFormat::fp8_ds_mla, 32, 64, 2048, 132).head_tile, 0);
  // The few-heads kernel's 64-entry stages: one token of GLM-5 TP8 in 32 splits of one stage;
  // one token of GLM-5 TP1 / DeepSeek-V3.2 in 4 / 8 tiles of 16 heads, split 32 / 16 ways (128
  // CTAs of one / two stages: the fewest stages that keep one wave); 8 tokens of 8 heads 16 ways.
  EXPECT_EQ(hopper_mla::plan_sm90a(CacheFormat::fp8_ds_mla, 1, 8, 2048, 132).chunk, 64);
  const auto tp1 = hopper_mla::plan_sm90a(CacheFormat::fp8_ds_mla, 1, 64, 2048, 132);
  const auto v32 = hopper_mla::plan_sm90a(CacheFormat::fp8_ds_mla, 1, 128, 2048, 132);
  EXPECT_EQ(tp1.head_tile, 16);
  EXPECT_EQ(tp1.nsplit, 32);
  EXPECT_EQ(v32.head_tile, 16);
  EXPECT_EQ(v32.nsplit, 16);
  EXPECT_EQ(v32.chunk, 128);
  EXPECT_EQ(hopper_mla::plan_sm90a(CacheFormat::fp8_ds_mla, 8, 8, 2048, 132).nsplit, 16);
#endif
}

// The query's 16-byte loads (host only): an aligned pointer and strides of 8 elements, except on
// a dim of one entry, whose stride is never stepped (a [1, H, 576] query cut from a wider buffer
// keeps the fast loads); an odd stride on a dim that is stepped, or a misaligned q_rope, takes
// the element-wise loads.
TEST(HopperMlaPlan, QueryVectorLoadsIgnoreTheStrideOfADimOfOne) {
#if !LATTE_HOPPER_MLA_BUILT
  GTEST_SKIP() << "skipped: hopper.mla not built (CUDA architectures without 90)";
#else
  alignas(16) static __nv_bfloat16 q[64];
  hopper_mla::MlaParams p;
  p.q = q;
  p.groups = 1;
  p.s_q = 1;
  p.heads = 16;
  p.q_sg = 16 * 576 + 3;  // odd, but one token
  p.q_si = 0;
  p.q_sh = 576;
  EXPECT_TRUE(hopper_mla::q_vector_loads_sm90a(p));
  p.groups = 2;
  EXPECT_FALSE(hopper_mla::q_vector_loads_sm90a(p)) << "two tokens step the odd token stride";
  p.groups = 1;
  p.heads = 1;
  p.q_sh = 577;
  EXPECT_TRUE(hopper_mla::q_vector_loads_sm90a(p)) << "one head: its stride is never stepped";
  p.heads = 2;
  EXPECT_FALSE(hopper_mla::q_vector_loads_sm90a(p));
  p.q_sh = 576;
  p.q_rope = q + 4;  // a separate rope tensor 8 bytes off
  p.qr_sh = 64;
  EXPECT_FALSE(hopper_mla::q_vector_loads_sm90a(p));
  p.q_rope = q + 8;
  EXPECT_TRUE(hopper_mla::q_vector_loads_sm90a(p));
  p.q = q + 1;
  EXPECT_FALSE(hopper_mla::q_vector_loads_sm90a(p)) << "the query's base not 16-byte aligned";
#endif
}

// Dense decode's plan (host only): the chunk is the kernel's (a multiple of the stage, at least
// the decode minimum) and a call takes as many splits as its block table spans; kernels whose
// requests fill the SMs (or of unknown size) never split and need no workspace; otherwise the workspace
// holds at least one request of the longest context, and at most 256 MiB beyond that.
TEST(HopperMlaPlan, DecodeSplitsFollowTheBlockTable) {
#if !LATTE_HOPPER_MLA_BUILT
  GTEST_SKIP() << "skipped: hopper.mla not built (CUDA architectures without 90)";
#else
  using hopper_mla::kTileRows;
  for (const int rows : {1, 16, 64, 128, 512}) {
    for (const int64_t requests : {int64_t{0}, int64_t{1}, int64_t{8}, int64_t{32}, int64_t{128}, int64_t{1024}}) {
      const std::string at = "rows " + std::to_string(rows) + " requests " + std::to_string(requests);
      const auto plan = hopper_mla::plan_decode_sm90a(requests, rows, 132);
      EXPECT_TRUE(plan.decode) << at;
      const int64_t ctas = requests * ((rows + 63) / 64);
      hopper_mla::MlaParams p;
      p.decode = true;
      p.block_size = 64;
      for (const int blocks : {1, 64, 2560, INT32_MAX}) {  // the last: past any i32 length
        p.max_blocks = blocks;
        const int n = hopper_mla::call_nsplit_sm90a(plan, p);
        const int64_t positions = std::min<int64_t>(int64_t{blocks} * 64, INT32_MAX);
        EXPECT_GE(static_cast<int64_t>(n) * plan.chunk, positions) << at;
        EXPECT_LT(static_cast<int64_t>(n - 1) * plan.chunk, positions) << at;
      }
      const std::size_t ws = hopper_mla::workspace_bytes_sm90a(plan, requests, rows);
      if (requests == 0 || ctas >= 132) EXPECT_EQ(plan.chunk, hopper_mla::kWholeList) << at;
      if (plan.chunk == hopper_mla::kWholeList) {  // also where the model finds splitting slower
        EXPECT_EQ(ws, 0u) << at;
        continue;
      }
      EXPECT_EQ(plan.chunk % kTileRows, 0) << at;
      EXPECT_GE(plan.chunk, hopper_mla::kDecodeMinChunk) << at;
      const std::size_t one = static_cast<std::size_t>((rows + 63) / 64) *
                              ((cuda_sparse_mla::kWorkspaceContext + plan.chunk - 1) / plan.chunk) * 64 * 513 * 4;
      EXPECT_GE(ws, one) << at;
      EXPECT_LE(ws, std::max(one, std::size_t{256} << 20)) << at;
    }
  }
  // DeepSeek-V3 (128 heads) at 32 requests: 64 CTAs, split; at 128: 256 CTAs, whole lists.
  EXPECT_GT(hopper_mla::plan_decode_sm90a(32, 128, 132).nsplit, 1);
  EXPECT_EQ(hopper_mla::plan_decode_sm90a(128, 128, 132).chunk, hopper_mla::kWholeList);
#endif
}

// Host-only (runs in CI): hopper.mla's support surface. Both caches at 64 / 128 heads on sm_90,
// nothing on other GPUs, every refusal with its reason; the selector picks it for GLM-5 TP1 /
// DeepSeek-V3.2 at every token count with cuda.sparse_mla second; the kernel's description names
// the kernel (one fp8 token: the few-heads kernel in head tiles) and the cache's pipeline. Few
// heads and dense decode: accepted, ranked by the policy where measured.
TEST(HopperMlaCaps, BothCachesAtSixtyFourAndOneTwentyEightHeadsOnSm90) {
  auto be = Registry::global().find("hopper.mla");
  if (!be) GTEST_SKIP() << "skipped: hopper.mla not built (CUDA architectures without 90)";
  const auto starts = [](const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; };
  for (const char* model : {"glm-5", "deepseek-v3.2"}) {
    for (const CacheFormat fmt : {CacheFormat::fp8_ds_mla, CacheFormat::bf16}) {
      Deployment d;
      d.tp = 1;
      d.kv_cache = fmt;
      AttentionSpec sp = attention_spec(load_model(model, d), Op::sparse_mla);
      const std::string at = std::string(model) + (fmt == CacheFormat::bf16 ? " bf16" : " fp8");
      ASSERT_TRUE(sp.num_heads == 64 || sp.num_heads == 128) << at;
      EXPECT_TRUE(check(*be, sp, describe_device("sm_90")).empty()) << at;
      for (const char* arch : {"sm_80", "sm_89", "sm_100", "sm_120"}) {
        const auto reasons = check(*be, sp, describe_device(arch));
        ASSERT_FALSE(reasons.empty()) << at << " " << arch;
        EXPECT_EQ(reasons[0].code, "arch") << at << " " << arch;
      }
      // The policy: both caches at every token count; one fp8 token runs the few-heads kernel in
      // tiles of 16 heads, cuda.sparse_mla valid and ranked second.
      sp.max_tokens = 1;
      const Selection one = Context::global().explain(sp, describe_device("sm_90"));
      EXPECT_EQ(one.chosen, "hopper.mla") << at;
      ASSERT_GE(one.valid.size(), 2u) << at;
      EXPECT_EQ(one.valid[1].id, "cuda.sparse_mla") << at;
      if (fmt == CacheFormat::fp8_ds_mla) {
        EXPECT_PRED2(starts, be->make(sp, describe_device("sm_90"))->describe(),
                     "sm_90a kernel (mla_sparse_fewheads_sm90a_cpasync_wgmma_ws, fp8_ds_mla cache): the " +
                         std::to_string(sp.num_heads) + " heads on wgmma's N dimension (" +
                         std::to_string(sp.num_heads / 16) + " CTAs of n16 per token")
            << at;
      }
      sp.max_tokens = 128;
      EXPECT_PRED2(starts, be->make(sp, describe_device("sm_90"))->describe(),
                   std::string("sm_90a kernel (mla_sparse_sm90a_cpasync_wgmma_ws, ") +
                       (fmt == CacheFormat::bf16 ? "bf16 cache)" : "fp8_ds_mla cache)"))
          << at;
    }
  }
  // Accepted: 8 / 16 heads (GLM-5 TP8 / TP4), dense decode (DeepSeek-V3, s_q 1..4, TP1 / TP8);
  // refused with the field that decides it: rows without rope (GLM-5.3-Flash), s_q 5.
  Deployment d;
  d.kv_cache = CacheFormat::fp8_ds_mla;
  for (const int tp : {4, 8}) {
    d.tp = tp;
    AttentionSpec few = attention_spec(load_model("glm-5", d), Op::sparse_mla);
    EXPECT_TRUE(check(*be, few, describe_device("sm_90")).empty()) << "glm-5 tp" << tp;
    // The few-heads kernel, first for small calls (up to 16 / 32 tokens at 8 / 16 heads).
    few.max_tokens = 16;
    EXPECT_EQ(Context::global().explain(few, describe_device("sm_90")).chosen, "hopper.mla") << "glm-5 tp" << tp;
    EXPECT_PRED2(starts, be->make(few, describe_device("sm_90"))->describe(),
                 "sm_90a kernel (mla_sparse_fewheads_sm90a_cpasync_wgmma_ws, fp8_ds_mla cache): the " +
                     std::to_string(few.num_heads) + " heads on wgmma's N dimension")
        << "glm-5 tp" << tp;
    few.max_tokens = 128;
    EXPECT_EQ(Context::global().explain(few, describe_device("sm_90")).chosen, "cuda.sparse_mla") << "glm-5 tp" << tp;
  }
  d.tp = 1;
  const auto nope = check(*be, attention_spec(load_model("glm-5.3-flash", d), Op::sparse_mla), describe_device("sm_90"));
  ASSERT_FALSE(nope.empty());
  EXPECT_EQ(nope[0].code, "head_dim");
  d.kv_cache = CacheFormat::bf16;
  for (const int tp : {1, 8}) {
    d.tp = tp;
    AttentionSpec dec = attention_spec(load_model("deepseek-v3", d), Op::mla_decode);
    for (const int s_q : {1, 4}) {
      dec.s_q = s_q;
      EXPECT_TRUE(check(*be, dec, describe_device("sm_90")).empty()) << "deepseek-v3 tp" << tp << " s_q " << s_q;
    }
    dec.s_q = 5;
    const auto sq = check(*be, dec, describe_device("sm_90"));
    ASSERT_FALSE(sq.empty());
    EXPECT_EQ(sq[0].code, "s_q");
    dec.s_q = 1;
    dec.max_tokens = 32;
    EXPECT_PRED2(starts, be->make(dec, describe_device("sm_90"))->describe(),
                 "sm_90a kernel (mla_sparse_sm90a_cpasync_wgmma_ws, bf16 cache, dense decode through the block table)");
    // The policy: hopper.mla first at 128 heads (TP1), the portable kernel at 16 (TP8).
    EXPECT_EQ(Context::global().explain(dec, describe_device("sm_90")).chosen,
              tp == 1 ? "hopper.mla" : "cuda.sparse_mla")
        << "deepseek-v3 tp" << tp;
  }
}

TEST_F(HopperMla, AccuracyVsOracle) {
  Runner run;
  uint32_t seed = 4321;
  for (SparseCase c : hopper_cases()) {
    c.kv_amp_log2_span = 8.f;  // fp8 scales over 8 octaves
    auto s = setup_sparse(c, seed++);
    const Result r = run_vs_oracle(run, *s, "hopper.mla " + name_of(c), "hopper.mla", kHopperTol);
    expect_empty_rows_zero(c, r);
  }
}

// The few-heads kernel (fp8, at most 16 heads: heads on wgmma's N, 8 or 16 columns): head counts
// around the two widths, lists of one partial stage to many (split and unsplit kernels, more
// tokens than SMs), block sizes 1 / 16 / 64, a peaked softmax (the column maxima move late) and
// fp8 scales over 24 octaves.
TEST_F(HopperMla, FewHeadsPeakedWideScalesAndSplits) {
  Runner run;
  const IndexOpts padded = row1_empty(), heavy = half_empty();
  const std::vector<SparseCase> cases = {
      {CacheFormat::fp8_ds_mla, 2, 130, 1, 4, padded},     {CacheFormat::fp8_ds_mla, 7, 2048, 64, 1, heavy},
      {CacheFormat::fp8_ds_mla, 9, 63, 16, 140, padded},   {CacheFormat::fp8_ds_mla, 12, 5000, 16, 3, heavy},
      {CacheFormat::fp8_ds_mla, 16, 2048, 64, 33, padded}, {CacheFormat::fp8_ds_mla, 16, 300, 64, 1, padded},
  };
  uint32_t seed = 600;
  for (SparseCase c : cases) {
    for (const int kind : {0, 1}) {
      if (kind == 0) c.q_amp = 40.f, c.kv_amp_log2_span = 8.f;  // peaked
      if (kind == 1) c.q_amp = 3.f, c.kv_amp_log2_span = 24.f;  // wide scales
      auto s = setup_sparse(c, seed++);
      const Result r = run_vs_oracle(run, *s, std::string(kind == 0 ? "peaked " : "wide scales ") + name_of(c),
                                     "hopper.mla", kHopperTol);
      expect_empty_rows_zero(c, r);
    }
  }
}

// More than 16 heads in small calls: the few-heads kernel in tiles of 16 heads (the last tile
// padded with zero query columns for 24 / 65 heads; a tile's heads are rows of their 64-row part
// for the combine), at the largest call the tiles are planned for, and the 64-row kernel one
// token past it; block sizes that are not powers of two (48) beside 16 / 64, split and unsplit.
TEST_F(HopperMla, FewHeadsInTilesAndTheSixtyFourRowKernelPastThem) {
  Runner run;
  const IndexOpts padded = row1_empty(), heavy = half_empty();
  uint32_t seed = 900;
  for (const int H : {24, 64, 65, 128}) {
    const int tiles = (H + 15) / 16;
    const int most = static_cast<int>(hopper_mla::kFewHeadsTiledCtas / tiles);  // tokens the tiles are planned for
    ASSERT_GE(most, 1) << H;
    for (const int T : {1, most, most + 1}) {
      for (const int bs : {48, H == 64 ? 16 : 64}) {
        SparseCase c{CacheFormat::fp8_ds_mla, H, T == 1 ? 2048 : 700, bs, T, T == most ? heavy : padded};
        c.q_amp = T == 1 ? 40.f : 3.f;  // a peaked softmax at one token
        c.kv_amp_log2_span = 12.f;
        auto s = setup_sparse(c, seed++);
        const std::string text = run.make(s->spec, "hopper.mla")->describe();
        const bool tiled = text.find("mla_sparse_fewheads_sm90a") != std::string::npos;
        EXPECT_EQ(tiled, T <= most) << name_of(c) << ": " << text;
        const Result r = run_vs_oracle(run, *s, (tiled ? "head tiles " : "64-row ") + name_of(c), "hopper.mla",
                                       kHopperTol);
        expect_empty_rows_zero(c, r);
      }
    }
  }
}

// Bitwise repeat, CUDA-graph replay and batch invariance (token 4 alone = token 4 among six).
void check_deterministic_batch_invariant_graphs(const SparseCase& c) {
  Runner run;
  auto s = setup_sparse(c, 77);
  auto k = run.make(s->spec, "hopper.mla");
  const std::size_t n = static_cast<std::size_t>(c.T) * c.H;
  const Result a = run.run(*k, s->args, n * 512, n);
  const Result b = run.run(*k, s->args, n * 512, n);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), n * 4), 0);
  const Result g = run.run(*k, s->args, n * 512, n, SIZE_MAX, true);
  EXPECT_EQ(a.out, g.out) << "graph replay differs from the eager run";
  // Token 4 alone, through the same kernel: its bits do not depend on the call's size.
  SparseMlaArgs one = s->args;
  const Device dev{DeviceKind::cuda, 0};
  one.q = TensorView::contiguous(static_cast<uint16_t*>(s->d.q.get()) + 4 * c.H * 576, DType::bf16, {1, c.H, 576}, dev);
  one.indices = TensorView::contiguous(static_cast<int32_t*>(s->d.idx.get()) + 4 * c.topk, DType::i32, {1, c.topk}, dev);
  DeviceBuffer out1(c.H * 512 * 2), lse1(c.H * 4);
  one.out = TensorView::contiguous(out1.get(), DType::bf16, {1, c.H, 512}, dev);
  one.lse = TensorView::contiguous(lse1.get(), DType::f32, {1, c.H}, dev);
  const Result r1 = run.run(*k, one, c.H * 512, c.H);
  EXPECT_EQ(0, std::memcmp(r1.out.data(), a.out.data() + 4 * c.H * 512, c.H * 512 * 2)) << "batch invariance";
}

TEST_F(HopperMla, DeterministicBatchInvariantAndGraphs) {
  for (const CacheFormat f : {CacheFormat::fp8_ds_mla, CacheFormat::bf16}) {
    SCOPED_TRACE(f == CacheFormat::bf16 ? "bf16 cache" : "fp8_ds_mla cache");
    check_deterministic_batch_invariant_graphs({f, 64, 2048, 64, 6, row1_empty()});
    check_deterministic_batch_invariant_graphs({f, 16, 700, 16, 6, row1_empty()});
    check_deterministic_batch_invariant_graphs({f, 5, 2048, 64, 6, row1_empty()});
    check_deterministic_batch_invariant_graphs({f, 128, 2048, 64, 6, row1_empty()});  // two row groups
  }
}

// Dense decode: split kernels (few requests: the splits a request's length reaches, its own causal
// windows for s_q > 1, row groups padded past s_q x heads) and unsplit ones (more requests than
// SMs), block sizes 1 / 16 / 64, lengths shorter than s_q.
TEST_F(HopperMla, DecodeVsOracleAndSparse) {
  run_decode_cases({
                       {CacheFormat::bf16, 128, 1, 64, 3, {1, 700, 2500}},
                       {CacheFormat::fp8_ds_mla, 16, 4, 16, 3, {4, 1111, 3000}},
                       {CacheFormat::fp8_ds_mla, 128, 1, 64, 2, {2049, 64}},
                       {CacheFormat::bf16, 40, 2, 1, 2, {33, 5000}},
                       {CacheFormat::fp8_ds_mla, 64, 3, 64, 2, {4500, 3}},
                       {CacheFormat::bf16, 2, 2, 16, 140, {2049, 300, 1, 4097}},
                       {CacheFormat::fp8_ds_mla, 3, 1, 64, 140, {600, 1200, 2}},
                   },
                   "hopper.mla ", "hopper.mla", kHopperTol);
}

TEST_F(HopperMla, DecodeLengthsPastTheTableAndHoles) {
  for (CacheFormat fmt : {CacheFormat::bf16, CacheFormat::fp8_ds_mla})
    for (int s_q : {1, 2, 4})
      run_decode_edges(fmt, s_q,
                       std::string("hopper.mla decode edges ") + (fmt == CacheFormat::bf16 ? "bf16" : "fp8") +
                           " s_q=" + std::to_string(s_q),
                       "hopper.mla", kHopperTol);
}

// Small problems for compute-sanitizer: decode split and unsplit with padded row groups, sparse
// with few heads and in head tiles.
TEST_F(HopperMla, SanitizerDecodeAndFewHeads) {
  run_decode_cases({{CacheFormat::fp8_ds_mla, 24, 3, 16, 2, {700, 2}}, {CacheFormat::bf16, 5, 1, 1, 2, {300, 40}}},
                   "sanitizer hopper.mla ", "hopper.mla", kHopperTol);
  Runner run;
  for (const SparseCase& c : {SparseCase{CacheFormat::fp8_ds_mla, 5, 300, 16, 3, row1_empty()},
                              SparseCase{CacheFormat::fp8_ds_mla, 24, 300, 48, 2, row1_empty()},  // 2 head tiles
                              SparseCase{CacheFormat::bf16, 70, 100, 1, 2, row1_empty()}}) {
    auto s = setup_sparse(c, 3);
    run_vs_oracle(run, *s, "sanitizer hopper.mla " + name_of(c), "hopper.mla", kHopperTol);
  }
}

}  // namespace
}  // namespace latte
