// hopper.indexer against cpu.reference, through the registry as a user calls it: every head
// count, block sizes (both kernels), multi-token decode, ragged prefill, no token_request,
// invalid block ids, negative q scales, poisoned outputs, determinism and CUDA-graph replay;
// indexer_topk by both paths exactly the top-k of its own logits (physical and logical, short
// rows, long rows split over CTAs, the fused path's forced repairs, token slices in a short
// workspace). And its selection on described devices
// (host only).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_indexer/indexer_test_problem.hpp"
#include "cuda_indexer/pooled_check.hpp"
#include "gpu_test_util.hpp"
#include "latte/context.hpp"
#include "latte/error.hpp"
#include "latte/selector.hpp"
#if LATTE_HOPPER_INDEXER_BUILT
#include "kernels/indexer/sm90a/indexer_topk_sm90a.hpp"
#endif

namespace latte::testing {
namespace {

constexpr const char* kId = "hopper.indexer";

bool hopper_built() { return Registry::global().find(kId) != nullptr; }

#define SKIP_WITHOUT_HOPPER()                                                                          \
  do {                                                                                                 \
    LATTE_SKIP_WITHOUT_GPU();                                                                          \
    if (!hopper_built()) GTEST_SKIP() << "skipped: hopper.indexer not built (CUDA architectures without 90)"; \
    if (describe_device("cuda:0").arch() != 90)                                                        \
      GTEST_SKIP() << "skipped: hopper.indexer runs on sm_90 (H100 / H200) only";                      \
  } while (0)

// indexer_logits arguments of p on the GPU, the output `lg` ([T, max_len]) poisoned.
IndexerLogitsArgs poisoned_logits_args(const Problem& p, MirrorTensor& lg) {
  lg = MirrorTensor(DType::f32, {p.T, p.max_len()});
  lg.poison_device(0x7F);
  IndexerLogitsArgs a;
  a.in = p.inputs(true);
  a.logits = lg.dev_view();
  return a;
}

// hopper.indexer's logits of p on the GPU (into a poisoned tensor).
std::vector<float> run_logits(const Problem& p, Kernel& kernel) {
  MirrorTensor lg;
  kernel.run(poisoned_logits_args(p, lg), RunContext{});
  LATTE_CUDA_CHECK(cudaDeviceSynchronize());
  lg.download();
  return std::vector<float>(lg.host<float>(), lg.host<float>() + lg.numel());
}

std::unique_ptr<Kernel> hopper_kernel(const Problem& p) {
  return make_kernel(kId, Op::indexer_logits, p, 0, describe_device("cuda:0"));
}

void check(const Problem& p, const std::string& what) {
  const std::vector<float> ref = reference_logits(p);
  auto kernel = hopper_kernel(p);
  const std::vector<float> got = run_logits(p, *kernel);
  expect_logits_close(p, ref, got.data(), 2e-3, what.c_str());
  const std::vector<float> again = run_logits(p, *kernel);
  EXPECT_EQ(std::memcmp(got.data(), again.data(), got.size() * sizeof(float)), 0) << what << ": not deterministic";
}

// An environment variable set for the scope of one check.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  const char* name;
};

class HopperIndexer : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_WITHOUT_HOPPER(); }
  std::mt19937 rng{20261130};
};

TEST_F(HopperIndexer, DecodeEveryHeadCount) {
  for (int heads : {1, 5, 8, 32, 40, 64, 100, 128}) {
    Options o;
    o.heads = heads;
    const Problem p = make_problem(rng, decode_tokens({1, 63, 64, 65, 1000, 2500}, 1), 6, o);
    check(p, "decode H=" + std::to_string(heads));
  }
}

// 2-4 query tokens per request (multi-token prediction), causal among them.
TEST_F(HopperIndexer, MultiTokenDecodeAndBlockSizes) {
  for (int heads : {32, 64, 128})
    for (int bs : {4, 16, 64, 128})  // 4: the cp.async kernel; dense pages need bs * 132 % 16 == 0
      for (int nq : {2, 3, 4}) {
        Options o;
        o.heads = heads;
        o.block_size = bs;
        const Problem p = make_problem(rng, decode_tokens({5, 700, 1537}, nq), 3, o);
        check(p, "decode H=" + std::to_string(heads) + " bs=" + std::to_string(bs) + " nq=" + std::to_string(nq));
      }
}

TEST_F(HopperIndexer, PrefillRaggedCausal) {
  std::vector<std::pair<int, int>> tokens;
  for (int i = 0; i < 300; ++i) tokens.emplace_back(0, 1 + i);      // a new prompt
  for (int i = 0; i < 200; ++i) tokens.emplace_back(1, 1801 + i);   // a chunk after a prefix
  for (int heads : {8, 64}) {
    Options o;
    o.heads = heads;
    const Problem p = make_problem(rng, tokens, 2, o);
    check(p, "prefill H=" + std::to_string(heads));
  }
}

TEST_F(HopperIndexer, NoTokenRequestInvalidBlocksNegativeScales) {
  Options o;
  o.heads = 64;
  o.token_request = false;
  o.invalid_block = true;
  Problem p = make_problem(rng, {{0, 900}, {1, 130}, {2, 1}}, 3, o);
  for (int t = 0; t < p.T; ++t)
    for (int h = 1; h < p.H; h += 2) p.qs.host<float>()[t * p.H + h] *= -1.0f;
  p.qs.upload();
  check(p, "no token_request, invalid block, negative q_scale");
}

// Logits rows narrower and wider than max_len, in padded rows: positions past max_len are
// -inf, positions past L and the padding are not written. A view whose last dimension is not
// contiguous is refused with the fix in the message.
TEST_F(HopperIndexer, PaddedNarrowAndWideLogitsRows) {
  Options o;
  o.heads = 64;
  const Problem p = make_problem(rng, decode_tokens({1500, 700, 2048}, 1), 3, o);
  const std::vector<float> ref = reference_logits(p);
  auto kernel = hopper_kernel(p);
  const int64_t M = p.max_len(), pad = 13;
  for (const int64_t L : {M - 100, M + 77}) {
    MirrorTensor buf(DType::f32, {p.T, L + pad});
    buf.poison_device(0x7F);
    IndexerLogitsArgs a;
    a.in = p.inputs(true);
    a.logits = buf.dev_view();
    a.logits.shape[1] = L;
    kernel->run(a, RunContext{});
    LATTE_CUDA_CHECK(cudaDeviceSynchronize());
    buf.download();
    const float* got = buf.host<float>();
    int bad = 0;
    for (int t = 0; t < p.T; ++t) {
      double scale = 1e-20;
      for (int64_t s = 0; s < M; ++s)
        if (std::isfinite(ref[t * M + s])) scale = std::max(scale, std::fabs(static_cast<double>(ref[t * M + s])));
      for (int64_t s = 0; s < L + pad; ++s) {
        const float g = got[t * (L + pad) + s];
        if (s >= L) {  // the row padding keeps its poison bytes
          uint32_t bits = 0;
          std::memcpy(&bits, &g, 4);
          EXPECT_EQ(bits, 0x7F7F7F7Fu) << "padding written at [" << t << ", " << s << "]";
          continue;
        }
        const float r = s < M ? ref[t * M + s] : -INFINITY;
        const bool ok = std::isinf(r) ? (std::isinf(g) && g < 0) : std::fabs(static_cast<double>(g) - r) <= 2e-3 * scale;
        if (!ok && bad++ < 5) ADD_FAILURE() << "L " << L << ": [" << t << ", " << s << "] = " << g << ", reference " << r;
      }
    }
    EXPECT_EQ(bad, 0) << "L " << L;
  }
  MirrorTensor col(DType::f32, {M, p.T});
  IndexerLogitsArgs a;
  a.in = p.inputs(true);
  a.logits = col.dev_view();
  a.logits.shape = {p.T, M};
  a.logits.strides = {1, p.T};
  try {
    kernel->run(a, RunContext{});
    ADD_FAILURE() << "a column-major logits view was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be contiguous"), std::string::npos) << e.what();
  }
}

// Both kernels compute the same wgmma batches and epilogue in the same order: bit-identical.
TEST_F(HopperIndexer, TmaAndCpAsyncKernelsAgreeBitwise) {
  for (int bs : {8, 32, 64}) {
    Options o;
    o.heads = 64;
    o.block_size = bs;
    o.invalid_block = true;
    const Problem p = make_problem(rng, decode_tokens({2000, 333, 4096}, 2), 3, o);
    auto kernel = hopper_kernel(p);
    const std::vector<float> tma = run_logits(p, *kernel);
    std::vector<float> cpasync;
    {
      const ScopedEnv kernel_env("LATTE_HOPPER_INDEXER_KERNEL", "cpasync");
      cpasync = run_logits(p, *kernel);
    }
    EXPECT_EQ(std::memcmp(tma.data(), cpasync.data(), tma.size() * sizeof(float)), 0) << "bs " << bs;
    expect_logits_close(p, reference_logits(p), tma.data(), 2e-3, ("bs " + std::to_string(bs)).c_str());
  }
}

// kernel.run(args, ctx) captured in a CUDA graph on ctx.stream, the graph replayed twice.
void replay_in_graph(Kernel& kernel, const OpArgs& args, const RunContext& ctx) {
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  LATTE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  kernel.run(args, ctx);
  LATTE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  LATTE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 2; ++i) LATTE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  LATTE_CUDA_CHECK(cudaStreamSynchronize(stream));
  LATTE_CUDA_CHECK(cudaGraphExecDestroy(exec));
  LATTE_CUDA_CHECK(cudaGraphDestroy(graph));
}

TEST_F(HopperIndexer, GraphReplayEqualsEagerRun) {
  Options o;
  o.heads = 64;
  const Problem p = make_problem(rng, decode_tokens({3000, 4096, 77}, 2), 3, o);
  auto kernel = hopper_kernel(p);
  const std::vector<float> eager = run_logits(p, *kernel);

  cudaStream_t stream = nullptr;
  LATTE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  MirrorTensor lg;
  const IndexerLogitsArgs a = poisoned_logits_args(p, lg);
  RunContext ctx;
  ctx.stream = stream;
  replay_in_graph(*kernel, a, ctx);
  lg.download();
  EXPECT_EQ(std::memcmp(eager.data(), lg.host<float>(), lg.bytes()), 0) << "graph replay differs from the eager run";
  LATTE_CUDA_CHECK(cudaStreamDestroy(stream));
}

// indexer_topk through hopper.indexer: indices [T, topk] (poisoned first) with a workspace of
// ws_bytes (the kernel's workspace_bytes() when 0).
std::vector<int32_t> run_topk(const Problem& p, Kernel& kernel, int topk, bool physical, std::size_t ws_bytes = 0,
                              cudaStream_t stream = nullptr) {
  if (ws_bytes == 0) ws_bytes = kernel.workspace_bytes();
  MirrorTensor idx(DType::i32, {p.T, topk});
  idx.poison_device(0x5A);
  IndexerTopkArgs a;
  a.in = p.inputs(true);
  a.indices = idx.dev_view();
  a.kind = physical ? IndexKind::physical : IndexKind::logical;
  DeviceBuffer ws(std::max<std::size_t>(ws_bytes, 16));
  LATTE_CUDA_CHECK(cudaMemset(ws.get(), 0xA5, std::max<std::size_t>(ws_bytes, 16)));  // stale workspace
  RunContext ctx;
  ctx.workspace = ws.get();
  ctx.workspace_bytes = ws_bytes;
  ctx.stream = stream;
  kernel.run(a, ctx);
  LATTE_CUDA_CHECK(cudaDeviceSynchronize());
  idx.download();
  return std::vector<int32_t>(idx.host<int32_t>(), idx.host<int32_t>() + idx.numel());
}

std::unique_ptr<Kernel> hopper_topk_kernel(const Problem& p, int topk) {
  return make_kernel(kId, Op::indexer_topk, p, topk, describe_device("cuda:0"));
}

// A workspace that holds either path for every token of p at once (the kernel's bound holds the
// fused buffers of up to 128 tokens).
std::size_t ample_workspace(const Problem& p, const Kernel& kernel) {
  return kernel.workspace_bytes() + static_cast<std::size_t>(p.T) * (p.max_len() * 4 + 2048 * 4 + 8192 * 8 + 4096);
}

// LATTE_HOPPER_INDEXER_PATH for the scope of one check.
struct ForcePath : ScopedEnv {
  explicit ForcePath(const char* path) : ScopedEnv("LATTE_HOPPER_INDEXER_PATH", path) {}
};

// The fused path held to the unfused one: p's top-k kernel, an ample workspace and the unfused
// path's physical indices (the reference); fused() runs the fused path under whatever else the
// test has set in the environment.
struct FusedAgainstUnfused {
  const Problem& p;
  int topk;
  std::unique_ptr<Kernel> kernel;
  std::size_t ws;
  std::vector<int32_t> unfused;
  FusedAgainstUnfused(const Problem& problem, int k)
      : p(problem), topk(k), kernel(hopper_topk_kernel(p, k)), ws(ample_workspace(p, *kernel)) {
    const ForcePath force("unfused");
    unfused = run_topk(p, *kernel, topk, true, ws);
  }
  std::vector<int32_t> fused() {
    const ForcePath force("fused");
    return run_topk(p, *kernel, topk, true, ws);
  }
};

// The top-k equals the exact top-k of hopper.indexer's own logits (the keys are those logits'
// order keys) by both paths, logical and physical; valid against cpu.reference's logits;
// deterministic.
void check_topk(const Problem& p, const std::vector<int>& topks, const std::string& problem) {
  const std::vector<float> logits = run_logits(p, *hopper_kernel(p));
  const std::vector<float> ref = reference_logits(p);
  for (const char* path : {"unfused", "fused"})
    for (const int topk : topks) {
      const ForcePath force(path);
      const std::string what = problem + " topk=" + std::to_string(topk) + " " + path;
      const std::vector<int32_t> want = exact_topk_of(p, logits, topk);
      auto kernel = hopper_topk_kernel(p, topk);
      const std::size_t ws = ample_workspace(p, *kernel);
      const bool tma_block = p.bs == 8 || p.bs == 16 || p.bs == 32 || p.bs % 64 == 0;
      if (std::string(path) == "fused" && !tma_block) {  // the admission pass is the TMA kernel's
        EXPECT_THROW(run_topk(p, *kernel, topk, false, ws), Error) << what;
        continue;
      }
      const std::vector<int32_t> logical = run_topk(p, *kernel, topk, false, ws);
      ASSERT_EQ(logical, want) << what << ": not the exact top-k of the backend's logits";
      expect_topk_valid(p, ref, logical.data(), topk, 2e-3, what.c_str());
      const std::vector<int32_t> physical = run_topk(p, *kernel, topk, true, ws);
      for (int t = 0; t < p.T; ++t)
        for (int i = 0; i < topk; ++i) {
          const int32_t l = logical[static_cast<std::size_t>(t) * topk + i];
          ASSERT_EQ(physical[static_cast<std::size_t>(t) * topk + i], l < 0 ? -1 : p.slot_of(t, l))
              << what << ": physical row " << t << " col " << i;
        }
      EXPECT_EQ(run_topk(p, *kernel, topk, false, ws), logical) << what << ": not deterministic";
    }
}

TEST_F(HopperIndexer, TopkIsTheExactTopkOfItsLogits) {
  for (int heads : {8, 32, 64, 128})
    for (int bs : {4, 64}) {  // 4: the cp.async kernel
      Options o;
      o.heads = heads;
      o.block_size = bs;
      o.invalid_block = heads == 64;
      // Rows shorter than topk (-1 padding), at the causal edge of multi-token decode, longer.
      const Problem p = make_problem(rng, decode_tokens({1, 100, 2047, 2049, 6000}, 2), 5, o);
      check_topk(p, {1, 100, 2048}, "H=" + std::to_string(heads) + " bs=" + std::to_string(bs));
    }
}

TEST_F(HopperIndexer, TopkPrefillAndTies) {
  std::vector<std::pair<int, int>> tokens;
  for (int i = 0; i < 150; ++i) tokens.emplace_back(0, 1 + 20 * i);
  Options o;
  o.heads = 64;
  o.dup_pool = 7;  // K rows from 7 distinct vectors: many equal scores, ties to the smaller position
  o.token_request = false;
  const Problem p = make_problem(rng, {{0, 3000}, {1, 2500}, {2, 700}}, 3, o);
  check_topk(p, {512}, "ties, no token_request");
  o.dup_pool = 0;
  o.token_request = true;
  check_topk(make_problem(rng, tokens, 1, o), {256}, "prefill");
}

// Few long rows: the top-k splits each over several CTAs (rows * 8 <= SMs, >= 65536 positions).
TEST_F(HopperIndexer, TopkLongRowsSplitOverCtas) {
  Options o;
  o.heads = 32;
  const Problem p = make_problem(rng, decode_tokens({70000, 131072}, 1), 2, o);
  check_topk(p, {2048}, "long rows");
}

// The fused path's repair: too few admissions (tau = the largest sample) and list overflow
// (tau = the smallest sample, rows longer than the list) give the unfused path's result; so does
// the admission pass launched after the sample pass rather than dependent on it.
TEST_F(HopperIndexer, TopkFusedRepairEqualsUnfused) {
  Options o;
  o.heads = 64;
  o.invalid_block = true;
  const Problem p = make_problem(rng, decode_tokens({300, 5000, 20000, 70000}, 2), 4, o);
  FusedAgainstUnfused check(p, 2048);
  EXPECT_EQ(check.fused(), check.unfused) << "fused";
  for (const char* debug : {"4", "8"}) {
    const ScopedEnv env("LATTE_HOPPER_INDEXER_DEBUG", debug);
    EXPECT_EQ(check.fused(), check.unfused) << "fused, LATTE_HOPPER_INDEXER_DEBUG=" << debug;
  }
  for (const char* admit : {"off", "on"}) {
    const ScopedEnv env("LATTE_HOPPER_INDEXER_ADMIT_PDL", admit);
    EXPECT_EQ(check.fused(), check.unfused) << "fused, LATTE_HOPPER_INDEXER_ADMIT_PDL=" << admit;
  }
}

// The repair pass's running buffers (kernels/topk/running_topk.cuh) at every buffer size: topk 1 and
// 100 compact many times per CTA (chunks of thousands of positions against buffers of 1056 and
// 1248), 4096 takes the largest shared-memory buffer (run after the smaller ones: the kernel's
// limit must cover it); ties (K rows from 5 distinct vectors) make the compactions break them by
// position. Every repair forced (tau = the largest sample).
TEST_F(HopperIndexer, TopkFusedRepairEveryBufferSize) {
  Options o;
  o.heads = 32;
  const Problem mixed = make_problem(rng, decode_tokens({3000, 20000, 70000}, 2), 3, o);
  o.dup_pool = 5;
  const Problem ties = make_problem(rng, decode_tokens({9000, 40000}, 1), 2, o);
  for (const Problem* p : {&mixed, &ties})
    for (const int topk : {1, 100, 4096}) {
      const std::string what = std::string(p == &ties ? "ties" : "mixed") + ", topk " + std::to_string(topk);
      FusedAgainstUnfused check(*p, topk);
      const ScopedEnv env("LATTE_HOPPER_INDEXER_DEBUG", "4");
      EXPECT_EQ(check.fused(), check.unfused) << what;
    }
}

// The automatic path at long contexts: 8 tokens of up to 128K positions (about 2700 positions, 42
// stages of 64, per admission CTA on an H200; invalid blocks among them), fused equal to unfused.
TEST_F(HopperIndexer, TopkFusedLongRowsEqualsUnfused) {
  Options o;
  o.heads = 64;
  o.invalid_block = true;
  const Problem p = make_problem(rng, decode_tokens({131072, 120001, 131072, 99999, 131072, 65600, 131072, 128000}, 1), 8, o);
  FusedAgainstUnfused check(p, 2048);
  EXPECT_EQ(check.fused(), check.unfused) << "fused";
}

// The fused path's admission pass is launched dependent on its sample pass except where the
// sample pass has more than three one-stage CTAs per SM (measured rule, indexer_topk_sm90a.cpp): on
// 132 SMs, 32 and 48 tokens sample in 512 and 768 one-stage CTAs, 24 tokens in 384, 64 tokens in
// two-stage CTAs. (Sample CTAs per SM come from the occupancy of the device's kernel: GPU test.)
TEST_F(HopperIndexer, AdmissionLaunchRule) {
#if !LATTE_HOPPER_INDEXER_BUILT
  GTEST_SKIP() << "skipped: hopper.indexer not built (CUDA architectures without 90)";
#else
  IndexerParams p;
  p.heads = 64;
  p.block_size = 64;
  p.max_blocks = 131072 / 64;
  for (const int tokens : {1, 2, 8, 16, 24, 32, 48, 64, 128}) {
    p.tokens = tokens;
    p.batch = tokens;
    EXPECT_EQ(hopper_indexer::admission_pdl(p, 132), tokens != 32 && tokens != 48) << tokens << " tokens";
  }
#endif
}

// A workspace of two tokens' keys: the tokens run in slices, with the same result.
TEST_F(HopperIndexer, TopkInTokenSlicesEqualsOnePass) {
  Options o;
  o.heads = 64;
  const Problem p = make_problem(rng, decode_tokens({5000, 3000, 4096, 100, 2222}, 1), 5, o);
  auto kernel = hopper_topk_kernel(p, 1024);
  const std::vector<int32_t> one_pass = run_topk(p, *kernel, 1024, true);
  const std::size_t two_rows = static_cast<std::size_t>((p.max_len() + 63) / 64 * 64) * 4 * 2 + 100;
  EXPECT_EQ(run_topk(p, *kernel, 1024, true, two_rows), one_pass);
  try {
    run_topk(p, *kernel, 1024, true, 64);
    ADD_FAILURE() << "a workspace below one token's keys was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("workspace"), std::string::npos) << e.what();
  }
}

// Both paths captured in a CUDA graph (the fused path's passes are programmatic dependent
// launches) replay to the eager result.
TEST_F(HopperIndexer, TopkGraphReplayEqualsEagerRun) {
  Options o;
  o.heads = 64;
  const Problem p = make_problem(rng, decode_tokens({3000, 4096, 77}, 2), 3, o);
  const int topk = 2048;
  auto kernel = hopper_topk_kernel(p, topk);
  const std::size_t ws_bytes = ample_workspace(p, *kernel);
  for (const char* path : {"unfused", "fused"}) {
    const ForcePath force(path);
    const std::vector<int32_t> eager = run_topk(p, *kernel, topk, true, ws_bytes);
    cudaStream_t stream = nullptr;
    LATTE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    MirrorTensor idx(DType::i32, {p.T, topk});
    IndexerTopkArgs a;
    a.in = p.inputs(true);
    a.indices = idx.dev_view();
    DeviceBuffer ws(ws_bytes);
    RunContext ctx;
    ctx.stream = stream;
    ctx.workspace = ws.get();
    ctx.workspace_bytes = ws_bytes;
    kernel->run(a, ctx);  // eager once: kernel attributes are set outside the capture
    LATTE_CUDA_CHECK(cudaStreamSynchronize(stream));
    idx.poison_device(0x5A);
    replay_in_graph(*kernel, a, ctx);
    idx.download();
    EXPECT_EQ(std::memcmp(eager.data(), idx.host<int32_t>(), idx.bytes()), 0)
        << path << ": graph replay differs from the eager run";
    LATTE_CUDA_CHECK(cudaStreamDestroy(stream));
  }
}
// Host only (runs in CI): the default policy puts hopper.indexer first for e4m3 logits and
// top-k on sm_90, and every other case falls to cuda.indexer with hopper.indexer's reason.
AttentionSpec logits_spec(DType q, Op op = Op::indexer_logits) {
  AttentionSpec spec;
  spec.op = op;
  spec.num_heads = 64;
  spec.head_dim = 128;
  spec.q_dtype = q;
  spec.block_size = 64;
  spec.topk = op == Op::indexer_topk ? 2048 : 0;
  spec.max_tokens = 32;
  return spec;
}

std::string hopper_reason(const Selection& s) {
  for (const auto& r : s.rejected)
    if (r.id == kId && !r.reasons.empty()) return r.reasons[0].code;
  return "";
}

TEST(HopperIndexerSelection, FirstForE4m3IndexerOpsOnSm90Only) {
  if (!hopper_built()) GTEST_SKIP() << "skipped: hopper.indexer not built (CUDA architectures without 90)";
  Context context{Registry::global()};
  SelectOptions no_env;
  no_env.use_environment = false;
  const Selection s = context.select(logits_spec(DType::e4m3), describe_device("sm_90"), no_env);
  EXPECT_EQ(s.chosen, kId);
  EXPECT_EQ(s.valid[0].rule, "defaults:built-in#hopper-indexer");
  EXPECT_EQ(s.valid[1].id, "cuda.indexer");
  EXPECT_EQ(s.describe_kernel(),
            "indexer_logits: wgmma m64n64k32 e4m3 (sm_90a), K the A operand in 64-position tiles in the 128-byte "
            "swizzle (TMA copies of 64-row page pieces by a producer warp, 6 stages); one query token per CTA, its "
            "heads as the columns (padded to 64); ReLU, head weights and k_scale in registers; f32 logits");
  AttentionSpec odd = logits_spec(DType::e4m3);
  odd.block_size = 4;
  EXPECT_NE(context.select(odd, describe_device("sm_90"), no_env).describe_kernel().find(
                "cp.async by the consumer threads (block size 4 is not 8, 16, 32 or a multiple of 64), 3 stages"),
            std::string::npos);

  const Selection bf16 = context.select(logits_spec(DType::bf16), describe_device("sm_90"), no_env);
  EXPECT_EQ(bf16.chosen, "cuda.indexer");
  EXPECT_EQ(hopper_reason(bf16), "q_dtype");
  const Selection sm89 = context.select(logits_spec(DType::e4m3), describe_device("sm_89"), no_env);
  EXPECT_EQ(sm89.chosen, "cuda.indexer");
  EXPECT_EQ(hopper_reason(sm89), "arch");
  const Selection topk = context.select(logits_spec(DType::e4m3, Op::indexer_topk), describe_device("sm_90"), no_env);
  EXPECT_EQ(topk.chosen, kId);
  EXPECT_EQ(topk.valid[1].id, "cuda.indexer");
  EXPECT_EQ(topk.describe_kernel().rfind("indexer_topk: scores by wgmma m64n64k32 e4m3", 0), 0u) << topk.describe_kernel();
  EXPECT_NE(topk.describe_kernel().find("u32 score keys into the workspace; then the exact top-2048 of each row"),
            std::string::npos)
      << topk.describe_kernel();
  const Selection topk_bf16 =
      context.select(logits_spec(DType::bf16, Op::indexer_topk), describe_device("sm_90"), no_env);
  EXPECT_EQ(topk_bf16.chosen, "cuda.indexer");
  EXPECT_EQ(hopper_reason(topk_bf16), "q_dtype");
  AttentionSpec big_topk = logits_spec(DType::e4m3, Op::indexer_topk);
  big_topk.topk = 8192;
  try {
    (void)context.select(big_topk, describe_device("sm_90"), no_env);
    ADD_FAILURE() << "topk 8192 was accepted on sm_90";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hopper.indexer   rejected  topk: needs topk 1..4096"), std::string::npos)
        << e.what();
  }
}

#if LATTE_HOPPER_INDEXER_BUILT
// A decode problem of `tokens` query tokens over `len` positions (64 index heads), for the host
// path and workspace rules.
IndexerParams host_problem(int tokens, int64_t len, int block_size = 64) {
  IndexerParams p;
  p.tokens = tokens;
  p.heads = 64;
  p.block_size = block_size;
  p.max_blocks = static_cast<int>(len / block_size);
  p.batch = tokens;
  return p;
}
#endif

// Host only (runs in CI): the automatic top-k path follows the H200 measurements (unfused with the
// spread top-k up to 8 tokens and 131072 keys; else fused at >= 128K, at >= 64K for up to 24
// tokens, at >= 32K for up to 8), needs the workspace and a TMA block size, and yields to
// LATTE_HOPPER_INDEXER_PATH.
TEST(HopperIndexerTopkPath, FusedWhereItMeasuredFaster) {
#if !LATTE_HOPPER_INDEXER_BUILT
  GTEST_SKIP() << "skipped: hopper.indexer not built (CUDA architectures without 90)";
#else
  using hopper_indexer::TopkPath;
  const auto path = [&](int tokens, int64_t len, int block_size = 64) {
    const IndexerParams p = host_problem(tokens, len, block_size);
    return hopper_indexer::choose_topk_path(p, 2048, hopper_indexer::topk_workspace_bound(tokens, 2048, 132), 132);
  };
  EXPECT_EQ(path(1, 8192), TopkPath::unfused);
  EXPECT_EQ(path(1, 32768), TopkPath::unfused);  // the spread top-k
  EXPECT_EQ(path(4, 32768), TopkPath::unfused);
  EXPECT_EQ(path(8, 32768), TopkPath::fused);
  EXPECT_EQ(path(2, 131072), TopkPath::fused);
  EXPECT_EQ(path(16, 32768), TopkPath::unfused);
  EXPECT_EQ(path(24, 65536), TopkPath::fused);
  EXPECT_EQ(path(32, 65536), TopkPath::unfused);
  EXPECT_EQ(path(1, 131072), TopkPath::unfused);  // the spread top-k
  EXPECT_EQ(path(1, 262144), TopkPath::fused);
  EXPECT_EQ(path(3, 400000), TopkPath::unfused);  // past the one-CTA top-k: the spread top-k only
  EXPECT_EQ(path(32, 131072), TopkPath::fused);
  EXPECT_EQ(path(128, 32768), TopkPath::unfused);
  EXPECT_EQ(path(128, 131072), TopkPath::fused);
  EXPECT_EQ(path(1, 131072, 48), TopkPath::unfused);  // block size 48: no TMA kernel, no admission pass
  const IndexerParams one = host_problem(1, 262144);
  EXPECT_EQ(hopper_indexer::choose_topk_path(one, 2048, 1100000, 132), TopkPath::unfused);  // one row of keys only
  EXPECT_GE(hopper_indexer::topk_workspace_bound(1, 2048, 132),
            hopper_indexer::topk_workspace_bytes(one, 2048, TopkPath::automatic, 132));
  {
    const ForcePath force("unfused");
    EXPECT_EQ(path(1, 262144), TopkPath::unfused);
  }
  {
    const ForcePath force("fastest");
    EXPECT_THROW((void)path(1, 131072), Error);
  }
#endif
}

// Host only: the fused path's workspace holds no [T, L] keys. It does not grow with the context
// once the repair pass's chunks reach their bound (about one CTA per SM over all tokens), and
// stays far below the unfused path's keys at long contexts.
TEST(HopperIndexerTopkPath, FusedWorkspaceIsIndependentOfTheContext) {
#if !LATTE_HOPPER_INDEXER_BUILT
  GTEST_SKIP() << "skipped: hopper.indexer not built (CUDA architectures without 90)";
#else
  using hopper_indexer::TopkPath;
  const auto bytes = [](int tokens, int64_t len, TopkPath path) {
    return hopper_indexer::topk_workspace_bytes(host_problem(tokens, len), 2048, path, 132);
  };
  for (const int tokens : {32, 128, 512}) {
    EXPECT_EQ(bytes(tokens, 65536, TopkPath::fused), bytes(tokens, 131072, TopkPath::fused)) << tokens << " tokens";
    EXPECT_LT(bytes(tokens, 131072, TopkPath::fused) * 2, bytes(tokens, 131072, TopkPath::unfused))
        << tokens << " tokens";
    EXPECT_LE(bytes(tokens, 131072, TopkPath::fused), static_cast<std::size_t>(tokens) * 80 * 1024 + (5u << 20))
        << tokens << " tokens: O(T * topk) plus the repair pass's O(SMs * topk)";
  }
  EXPECT_LE(bytes(1, 262144, TopkPath::fused), std::size_t{5} << 20);
  EXPECT_LT(bytes(4, 262144, TopkPath::fused), bytes(4, 262144, TopkPath::unfused));
#endif
}

// Host only: what describe() says for each head padding and block size (the wgmma n, the copy
// kernel and why).
TEST(HopperIndexerDescribe, NamesTheColumnsAndTheCopyKernel) {
  auto be = Registry::global().find(kId);
  if (!be) GTEST_SKIP() << "skipped: hopper.indexer not built (CUDA architectures without 90)";
  const auto text = [&](int heads, int block_size) {
    AttentionSpec spec = logits_spec(DType::e4m3);
    spec.num_heads = heads;
    spec.block_size = block_size;
    return be->make(spec, describe_device("sm_90"))->describe();
  };
  const auto has = [](const std::string& t, const std::string& part) {
    EXPECT_NE(t.find(part), std::string::npos) << "'" << part << "' not in: " << t;
  };
  has(text(5, 64), "wgmma m64n8k32 e4m3");
  has(text(5, 64), "(padded to 8)");
  has(text(32, 16), "wgmma m64n32k32");
  has(text(32, 16), "TMA copies of 16-row page pieces");
  has(text(100, 128), "wgmma m64n64k32");
  has(text(100, 128), "(padded to 128)");
  has(text(100, 128), "TMA copies of 64-row page pieces");
  has(text(64, 48), "cp.async by the consumer threads (block size 48 is not 8, 16, 32 or a multiple of 64), 3 stages");
}

// The pooled indexer (GLM-5.3-Flash) on hopper.indexer: its per-token top-k over pool rows and
// the expansion, against float64 pool scores (pooled_check.hpp).
TEST_F(HopperIndexer, PooledIndexerAgainstFloat64) {
  std::mt19937 rng(54);
  for (const PooledCase& c : pooled_cases()) check_pooled_backend("hopper.indexer", c, rng, 2e-3);
}

}  // namespace
}  // namespace latte::testing
