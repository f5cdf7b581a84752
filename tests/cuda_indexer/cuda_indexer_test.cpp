// cuda.indexer against cpu.reference: logits, top-k on both paths (fused / unfused) and both
// index kinds, short contexts, causal edges, ties, invalid block ids, determinism, poisoned
// outputs; and the plain row top-k against an exact host selection.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "kernels/indexer/smxx/indexer_launch.hpp"
#include "kernels/topk/topk_launch.hpp"
#include "cuda_indexer/indexer_test_problem.hpp"
#include "cuda_indexer/mirror_tensor.hpp"
#include "cuda_indexer/pooled_check.hpp"
#include "gpu_test_util.hpp"
#include "latte/backend.hpp"
#include "latte/device.hpp"
#include "latte/error.hpp"
#include "latte/formats.hpp"
#include "latte/ops.hpp"
#include "latte/registry.hpp"
#include "latte/spec.hpp"
#include "latte/validate.hpp"

namespace latte::testing {
namespace {

using cuda_indexer::DeviceTraits;
using cuda_indexer::TopkOutput;
using cuda_indexer::TopkPath;

DeviceInfo gpu() { return describe_device("cuda:0"); }

DeviceTraits traits_of(const DeviceInfo& d) {
  DeviceTraits t;
  t.arch = d.arch();
  t.sm_count = d.sm_count;
  return t;
}

// The top-k launchers' programmatic dependent launch, as cuda.indexer passes it.
bool topk_pdl(const DeviceTraits& dev) { return cuda_indexer::path_arch(dev) >= 90 && cuda::topk_pdl_enabled(); }

struct TopkRun {
  std::vector<int32_t> logical, physical;
};

// The top-k output over idx ([T, topk] i32 on the device), logical positions or physical slots.
TopkOutput topk_output(MirrorTensor& idx, int topk, bool physical) {
  TopkOutput o;
  o.indices = static_cast<int32_t*>(idx.device());
  o.st = topk;
  o.sc = 1;
  o.topk = topk;
  o.physical = physical;
  return o;
}

TopkRun run_path(const Problem& p, int topk, TopkPath path, const DeviceTraits& dev) {
  TopkRun out;
  const IndexerParams raw = p.raw();
  const std::size_t ws_bytes = cuda_indexer::topk_workspace_bytes(raw, topk, path, dev);
  DeviceBuffer ws(std::max<std::size_t>(ws_bytes, 16));
  for (int kind = 0; kind < 2; ++kind) {
    MirrorTensor idx(DType::i32, {p.T, topk});
    idx.poison_device(0x5A);
    const TopkOutput o = topk_output(idx, topk, kind == 1);
    cuda_indexer::launch_indexer_topk(raw, o, path, ws.get(), ws_bytes, dev, nullptr);
    LATTE_CUDA_CHECK(cudaDeviceSynchronize());
    idx.download();
    (kind == 0 ? out.logical : out.physical).assign(idx.host<int32_t>(), idx.host<int32_t>() + idx.numel());
  }
  return out;
}

// physical == logical mapped through the block table (-1 stays -1).
void expect_physical_matches(const Problem& p, const TopkRun& r, int topk, const char* what) {
  for (int t = 0; t < p.T; ++t)
    for (int i = 0; i < topk; ++i) {
      const int32_t l = r.logical[static_cast<std::size_t>(t) * topk + i];
      const int32_t want = l < 0 ? -1 : p.slot_of(t, l);
      ASSERT_EQ(r.physical[static_cast<std::size_t>(t) * topk + i], want) << what << " row " << t << " col " << i;
    }
}

void check_problem(const Problem& p, int topk, double tol, const DeviceTraits& dev, bool check_logits = true) {
  const std::vector<float> ref = reference_logits(p);
  const IndexerParams raw = p.raw();
  if (check_logits) {
    MirrorTensor lg(DType::f32, {p.T, p.max_len()});
    for (int rep = 0; rep < 2; ++rep) {
      lg.poison_device(0x7F);
      cuda_indexer::launch_indexer_logits(raw, static_cast<float*>(lg.device()), p.max_len(), 1, p.max_len(), dev,
                                          nullptr);
      LATTE_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<float> before(lg.host<float>(), lg.host<float>() + lg.numel());
      lg.download();
      expect_logits_close(p, ref, lg.host<float>(), tol, "indexer_logits");
      if (rep == 1) EXPECT_EQ(std::memcmp(before.data(), lg.host<float>(), lg.bytes()), 0) << "logits not deterministic";
    }
  }
  const TopkRun unfused = run_path(p, topk, TopkPath::unfused, dev);
  const TopkRun fused = run_path(p, topk, TopkPath::fused, dev);
  expect_topk_valid(p, ref, unfused.logical.data(), topk, tol, "unfused");
  expect_topk_valid(p, ref, fused.logical.data(), topk, tol, "fused");
  expect_physical_matches(p, unfused, topk, "unfused physical");
  expect_physical_matches(p, fused, topk, "fused physical");
  // Both paths score with the same code, so they choose the same set: bit-identical output.
  EXPECT_EQ(unfused.logical, fused.logical) << "fused and unfused chose different tokens";
  const TopkRun again = run_path(p, topk, TopkPath::fused, dev);
  EXPECT_EQ(again.logical, fused.logical) << "fused top-k not deterministic";
  EXPECT_EQ(again.physical, fused.physical) << "fused top-k not deterministic";
}

class CudaIndexer : public ::testing::Test {
 protected:
  void SetUp() override { LATTE_SKIP_WITHOUT_GPU(); }
};

// The launchers never pick a path the loaded kernels lack: kernel_arch is known, at most the
// device's, and a build's lowest architecture reaches it (the sm_80 build on this GPU: 80).
TEST_F(CudaIndexer, KernelArchIsKnownAndNotAboveTheDevice) {
  const DeviceTraits dev = traits_of(gpu());
  const int k = cuda_indexer::kernel_arch();
  std::printf("  device sm_%d, indexer kernels compiled for sm_%d\n", dev.arch, k);
  EXPECT_GE(k, 80);
  EXPECT_LE(k, dev.arch);
}

TEST_F(CudaIndexer, DecodeGlm5ShapeFp8) {
  std::mt19937 rng(1);
  Options o;
  o.heads = 32;
  const Problem p = make_problem(rng, decode_tokens({3000, 5000, 777, 4100}, 1), 4, o);
  check_problem(p, 512, 2e-3, traits_of(gpu()));
}

// One token over a row past the one-CTA top-k's limit (361 600 positions): the automatic path
// takes the unfused path with the spread top-k (the fused path cannot run), valid against the
// float64 scores, logical and physical.
TEST_F(CudaIndexer, RowPastTheOneCtaLimitTakesTheSpreadPath) {
  std::mt19937 rng(41);
  Options o;
  o.heads = 8;
  const Problem p = make_problem(rng, decode_tokens({400000}, 1), 1, o);
  const DeviceTraits dev = traits_of(gpu());
  const IndexerParams raw = p.raw();
  ASSERT_GT(raw.max_len(), cuda::topk_max_positions(2048));
  const std::size_t ws = cuda_indexer::topk_workspace_bytes(raw, 2048, TopkPath::automatic, dev);
  ASSERT_EQ(cuda_indexer::choose_topk_path(raw, 2048, ws, dev), TopkPath::unfused);
  const std::vector<float> ref = reference_logits(p);
  const TopkRun r = run_path(p, 2048, TopkPath::automatic, dev);
  expect_topk_valid(p, ref, r.logical.data(), 2048, 2e-3, "spread");
  expect_physical_matches(p, r, 2048, "spread physical");
}

// Three tokens over rows past the one-CTA limit with a workspace of two tokens' keys: the
// unfused path runs them in token slices that the spread top-k takes, valid against float64.
TEST_F(CudaIndexer, RowsPastTheOneCtaLimitRunInTokenSlices) {
  std::mt19937 rng(42);
  Options o;
  o.heads = 4;
  const Problem p = make_problem(rng, decode_tokens({400000, 370000, 5000}, 1), 3, o);
  const DeviceTraits dev = traits_of(gpu());
  const IndexerParams raw = p.raw();
  const int topk = 2048;
  ASSERT_TRUE(cuda::topk_rows_too_long(raw.max_len(), topk));
  const std::size_t row = static_cast<std::size_t>((raw.max_len() + 127) / 128 * 128) * 4;
  const std::size_t bytes = (2 * row + 255) / 256 * 256 + cuda::split_workspace_bytes(2, raw.max_len(), topk, dev.sm_count);
  ASSERT_EQ(cuda::keys_tokens_per_pass(p.T, raw.max_len(), topk, row, bytes, dev.sm_count), 2);
  DeviceBuffer ws(bytes);
  MirrorTensor idx(DType::i32, {p.T, topk});
  idx.poison_device(0x5A);
  const TopkOutput out = topk_output(idx, topk, false);
  cuda_indexer::launch_indexer_topk(raw, out, TopkPath::automatic, ws.get(), bytes, dev, nullptr);
  LATTE_CUDA_CHECK(cudaDeviceSynchronize());
  idx.download();
  expect_topk_valid(p, reference_logits(p), idx.host<int32_t>(), topk, 2e-3, "token slices");
  // Too little workspace for even one token's keys and spread state: refused, named.
  EXPECT_THROW(cuda_indexer::launch_indexer_topk(raw, out, TopkPath::automatic, ws.get(), row, dev, nullptr), Error);
}

TEST_F(CudaIndexer, DecodeMtpCausalEdgeDeepseekHeads) {
  std::mt19937 rng(2);
  Options o;
  o.heads = 64;
  const Problem p = make_problem(rng, decode_tokens({2600, 1300, 4097}, 3), 3, o);
  check_problem(p, 1024, 2e-3, traits_of(gpu()));
}

TEST_F(CudaIndexer, Bf16QueriesAndOddHeads) {
  std::mt19937 rng(3);
  Options o;
  o.heads = 20;
  o.q_dtype = DType::bf16;
  o.block_size = 16;
  const Problem p = make_problem(rng, decode_tokens({1500, 2900}, 2), 2, o);
  check_problem(p, 256, 2e-3, traits_of(gpu()));
}

TEST_F(CudaIndexer, Sm80PathBf16MathOnE4m3Queries) {
  std::mt19937 rng(4);
  Options o;
  o.heads = 64;
  const Problem p = make_problem(rng, decode_tokens({3333, 2048}, 1), 2, o);
  DeviceTraits dev = traits_of(gpu());
  dev.force_bf16_math = true;
  check_problem(p, 512, 2e-3, dev);
}

// Every matrix path the device can run for e4m3 queries (the default picks one per arch:
// e4m3 mma.sync on sm_89 / sm_120, f16 widening on sm_90 / sm_100), forced through
// LATTE_CUDA_INDEXER_MATH, against the reference; and the paths choose the same tokens.
TEST_F(CudaIndexer, EveryMathPathForE4m3Queries) {
  std::mt19937 rng(13);
  Options o;
  o.heads = 32;
  std::vector<std::pair<int, int>> tokens = decode_tokens({2900, 1700}, 2);
  for (int i = 0; i < 16; ++i) tokens.emplace_back(2, 600 + i + 1);  // a prefill group
  const Problem p = make_problem(rng, tokens, 3, o);
  const DeviceTraits dev = traits_of(gpu());
  if (cuda_indexer::path_arch(dev) < 89) GTEST_SKIP() << "skipped: e4m3 / f16 conversion paths need kernels built for sm_89+";
  std::vector<std::vector<int32_t>> chosen;
  for (const char* math : {"fp8", "f16", "bf16"}) {
    SCOPED_TRACE(math);
    ::setenv("LATTE_CUDA_INDEXER_MATH", math, 1);
    check_problem(p, 700, 2e-3, dev);
    chosen.push_back(run_path(p, 700, TopkPath::unfused, dev).logical);
    ::unsetenv("LATTE_CUDA_INDEXER_MATH");
  }
  // The scores differ only in summation order, so the sets may differ at near-ties; count them.
  const std::size_t topk = 700;
  for (std::size_t m = 1; m < chosen.size(); ++m) {
    for (int t = 0; t < p.T; ++t) {
      const std::set<int32_t> a(chosen[0].begin() + t * topk, chosen[0].begin() + (t + 1) * topk);
      const std::set<int32_t> b(chosen[m].begin() + t * topk, chosen[m].begin() + (t + 1) * topk);
      std::size_t only_a = 0;
      for (int32_t x : a) only_a += b.count(x) ? 0 : 1;
      EXPECT_LE(only_a, 2u) << "path " << m << " vs fp8, row " << t;
    }
  }
}

TEST_F(CudaIndexer, OneHeadAndMaxHeads) {
  std::mt19937 rng(5);
  for (int heads : {1, 128}) {
    Options o;
    o.heads = heads;
    const Problem p = make_problem(rng, decode_tokens({1800, 900}, 2), 2, o);
    check_problem(p, 300, 2e-3, traits_of(gpu()));
  }
}

TEST_F(CudaIndexer, PrefillRaggedCausal) {
  std::mt19937 rng(6);
  Options o;
  o.heads = 32;
  // Request 0: 40 new tokens after 1200 cached; request 1: 24 new tokens after 300.
  std::vector<std::pair<int, int>> tokens;
  for (int i = 0; i < 40; ++i) tokens.emplace_back(0, 1200 + i + 1);
  for (int i = 0; i < 24; ++i) tokens.emplace_back(1, 300 + i + 1);
  const Problem p = make_problem(rng, tokens, 2, o);
  check_problem(p, 256, 2e-3, traits_of(gpu()));
}

TEST_F(CudaIndexer, ShortContextsPadWithMinusOne) {
  std::mt19937 rng(7);
  Options o;
  o.heads = 32;
  const Problem p = make_problem(rng, decode_tokens({1, 5, 64, 65, 700}, 1), 5, o);
  const int topk = 2048;
  for (TopkPath path : {TopkPath::unfused, TopkPath::fused}) {
    const TopkRun r = run_path(p, topk, path, traits_of(gpu()));
    for (int t = 0; t < p.T; ++t) {
      const int vis = p.vl.host<int32_t>()[t];
      for (int i = 0; i < topk; ++i) {
        ASSERT_EQ(r.logical[static_cast<std::size_t>(t) * topk + i], i < vis ? i : -1) << "row " << t << " col " << i;
        ASSERT_EQ(r.physical[static_cast<std::size_t>(t) * topk + i], i < vis ? p.slot_of(t, i) : -1);
      }
    }
  }
}

TEST_F(CudaIndexer, InvalidBlockIdsAreInvisible) {
  std::mt19937 rng(8);
  Options o;
  o.heads = 16;
  o.invalid_block = true;
  const Problem p = make_problem(rng, decode_tokens({1000, 600}, 1), 2, o);
  check_problem(p, 128, 2e-3, traits_of(gpu()));
  // The short-row case too: every visible position of row 0 except block 1's.
  const TopkRun r = run_path(p, 2048, TopkPath::unfused, traits_of(gpu()));
  for (int i = 0; i < 2048; ++i) {
    const int32_t want = i < 1000 - 64 ? (i < 64 ? i : i + 64) : -1;
    ASSERT_EQ(r.logical[static_cast<std::size_t>(i)], want) << "col " << i;
  }
}

TEST_F(CudaIndexer, TiesGoToSmallerPositions) {
  std::mt19937 rng(9);
  Options o;
  o.heads = 32;
  o.dup_pool = 6;  // six distinct K vectors: each score repeats hundreds of times
  const Problem p = make_problem(rng, decode_tokens({4000, 2500}, 2), 2, o);
  const int topk = 700;
  // Exact comparison with cpu.reference's own top-k: equal scores are bit-equal on the GPU
  // too (same K bytes), and the distinct scores are far apart.
  MirrorTensor ref_idx(DType::i32, {p.T, topk});
  IndexerTopkArgs a;
  a.in = p.inputs(false);
  a.indices = ref_idx.host_view();
  a.kind = IndexKind::logical;
  make_kernel("cpu.reference", Op::indexer_topk, p, topk, DeviceInfo{})->run(a, RunContext{});
  for (TopkPath path : {TopkPath::unfused, TopkPath::fused}) {
    const TopkRun r = run_path(p, topk, path, traits_of(gpu()));
    for (int t = 0; t < p.T; ++t) {
      std::vector<int32_t> want(ref_idx.host<int32_t>() + t * topk, ref_idx.host<int32_t>() + (t + 1) * topk);
      std::sort(want.begin(), want.end(), [](int32_t x, int32_t y) { return (x < 0) != (y < 0) ? x >= 0 : x < y; });
      const std::vector<int32_t> got(r.logical.begin() + t * topk, r.logical.begin() + (t + 1) * topk);
      EXPECT_EQ(got, want) << (path == TopkPath::fused ? "fused" : "unfused") << " row " << t;
    }
  }
}

// The fused path's repair pass (the compaction kernel), forced for every token:
// LATTE_CUDA_INDEXER_DEBUG=4 sets each token's admission threshold to its largest sampled
// score, so fewer than topk candidates are admitted and the repair pass recomputes the row.
TEST_F(CudaIndexer, FusedCompactionAndGlobalBuffer) {
  std::mt19937 rng(10);
  const ScopedEnv repair("LATTE_CUDA_INDEXER_DEBUG", "4");
  // sm_count 1 makes one chunk per token, so the running buffer fills and compacts many times.
  DeviceTraits one = traits_of(gpu());
  one.sm_count = 1;
  {
    Options o;
    o.heads = 8;
    const Problem p = make_problem(rng, decode_tokens({20000, 13000}, 1), 2, o);
    check_problem(p, 300, 2e-3, one, false);
  }
  {
    // topk 4096 with 128 bf16 heads: the buffer does not fit in shared memory (global buffer).
    Options o;
    o.heads = 128;
    o.q_dtype = DType::bf16;
    const Problem p = make_problem(rng, decode_tokens({12000}, 1), 1, o);
    check_problem(p, 4096, 2e-3, one, false);
  }
}

// The other repair trigger: LATTE_CUDA_INDEXER_DEBUG=8 sets the threshold to the smallest
// sampled score, so rows longer than a candidate list (8192) overflow it and are repaired;
// the shorter row is served by its (complete) list.
TEST_F(CudaIndexer, FusedListOverflowIsRepaired) {
  std::mt19937 rng(13);
  const ScopedEnv overflow("LATTE_CUDA_INDEXER_DEBUG", "8");
  Options o;
  o.heads = 32;
  const Problem p = make_problem(rng, decode_tokens({30000, 5000, 17000}, 1), 3, o);
  check_problem(p, 2048, 2e-3, traits_of(gpu()), false);
}

// A misspelt measurement switch is refused with its value and the accepted ones, not ignored.
TEST_F(CudaIndexer, UnknownSwitchValuesAreRefused) {
  std::mt19937 rng(5);
  const Problem p = make_problem(rng, decode_tokens({900}, 1), 1, Options{});
  const DeviceTraits dev = traits_of(gpu());
  auto expect_refused = [&](TopkPath path, const char* needle) {
    try {
      (void)run_path(p, 64, path, dev);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  {
    const ScopedEnv bad("LATTE_CUDA_INDEXER_PATH", "fusd");
    expect_refused(TopkPath::automatic, "LATTE_CUDA_INDEXER_PATH=fusd is not accepted (one of automatic, fused, unfused)");
  }
  if (cuda_indexer::path_arch(dev) >= 89) {
    const ScopedEnv bad("LATTE_CUDA_INDEXER_MATH", "fp4");
    expect_refused(TopkPath::unfused, "LATTE_CUDA_INDEXER_MATH=fp4 is not accepted (one of fp8, f16, bf16)");
  }
}

TEST_F(CudaIndexer, LongChunksAreDeterministic) {
  // Few SMs make every CTA stream many stages (pipeline reuse of every slot, compactions).
  std::mt19937 rng(12);
  DeviceTraits few = traits_of(gpu());
  few.sm_count = 4;
  Options o;
  o.heads = 64;
  const Problem p = make_problem(rng, decode_tokens({20000, 15000, 9000}, 2), 3, o);
  check_problem(p, 1000, 2e-3, few);
  const TopkRun first = run_path(p, 1000, TopkPath::unfused, few);
  for (int rep = 0; rep < 4; ++rep) {
    EXPECT_EQ(run_path(p, 1000, TopkPath::unfused, few).logical, first.logical) << "unfused rep " << rep;
    EXPECT_EQ(run_path(p, 1000, TopkPath::fused, few).logical, first.logical) << "fused rep " << rep;
  }
}

// Diagnostic: the unfused path's intermediate keys, downloaded, against its top-k: tells a
// scoring problem from a selection problem. Many repetitions (timing-dependent bugs).
TEST_F(CudaIndexer, UnfusedKeysAndSelectionAgree) {
  std::mt19937 rng(8);
  Options o;
  o.heads = 16;
  o.invalid_block = true;
  const Problem p = make_problem(rng, decode_tokens({1000, 600}, 1), 2, o);
  const DeviceTraits dev = traits_of(gpu());
  const IndexerParams raw = p.raw();
  for (int topk : {2048, 128}) {
    const std::size_t ws_bytes = cuda_indexer::topk_workspace_bytes(raw, topk, TopkPath::unfused, dev);
    DeviceBuffer ws(ws_bytes);
    const int64_t ld = (raw.max_len() + 127) / 128 * 128;  // the keys' rows: whole 128-position stages
    std::vector<uint32_t> first_keys;
    int bad_keys = 0, bad_sel = 0, bad_det = 0;
    for (int rep = 0; rep < 30; ++rep) {
      LATTE_CUDA_CHECK(cudaMemset(ws.get(), 0xEE, ws_bytes));
      MirrorTensor idx(DType::i32, {p.T, topk});
      const TopkOutput out = topk_output(idx, topk, false);
      cuda_indexer::launch_indexer_topk(raw, out, TopkPath::unfused, ws.get(), ws_bytes, dev, nullptr);
      LATTE_CUDA_CHECK(cudaDeviceSynchronize());
      idx.download();
      std::vector<uint32_t> keys(ws_bytes / 4);
      ws.download(keys.data(), ws_bytes);
      std::size_t seen = 0;
      for (int t = 0; t < p.T; ++t) {
        const int vis = p.vl.host<int32_t>()[t];
        std::vector<std::pair<uint64_t, int32_t>> comp;
        for (int s = 0; s < vis && rep > 0; ++s)
          if (keys[static_cast<std::size_t>(t * ld + s)] != first_keys[seen + s] && bad_det++ < 5)
            ADD_FAILURE() << "topk " << topk << " rep " << rep << ": key[" << t << ", " << s << "] changed";
        seen += static_cast<std::size_t>(vis);
        for (int s = 0; s < vis; ++s) {
          const uint32_t k = keys[static_cast<std::size_t>(t * ld + s)];
          const bool valid_block = p.slot_of(t, s) >= 0;
          if ((k != 0) != valid_block && bad_keys++ < 5)
            ADD_FAILURE() << "topk " << topk << " rep " << rep << ": key[" << t << ", " << s << "] = " << k
                          << " but block valid = " << valid_block;
          if (rep == 0) first_keys.push_back(k);
          if (k) comp.emplace_back((static_cast<uint64_t>(k) << 32) | (~static_cast<uint32_t>(s)), s);
        }
        std::sort(comp.begin(), comp.end(), std::greater<>());
        std::vector<int32_t> want;
        for (std::size_t i = 0; i < comp.size() && static_cast<int>(i) < topk; ++i) want.push_back(comp[i].second);
        std::sort(want.begin(), want.end());
        want.resize(static_cast<std::size_t>(topk), -1);
        const std::vector<int32_t> got(idx.host<int32_t>() + t * topk, idx.host<int32_t>() + (t + 1) * topk);
        if (got != want && bad_sel++ < 5) {
          std::size_t i = 0;
          while (i < got.size() && got[i] == want[i]) ++i;
          ADD_FAILURE() << "topk " << topk << " rep " << rep << " row " << t << ": selection differs from the keys' top-k at col "
                        << i << " (got " << got[i] << ", want " << want[i] << ")";
        }
      }
    }
  }
}

TEST_F(CudaIndexer, BackendRunsThroughRegistry) {
  std::mt19937 rng(11);
  Options o;
  o.heads = 32;
  const Problem p = make_problem(rng, decode_tokens({2000, 3000}, 1), 2, o);
  const DeviceInfo dev = gpu();
  const int topk = 512;
  const std::vector<float> ref = reference_logits(p);
  {
    MirrorTensor lg(DType::f32, {p.T, p.max_len() + 37});  // wider than the cache: -inf tail
    lg.poison_device(0x7F);
    IndexerLogitsArgs a;
    a.in = p.inputs(true);
    a.logits = lg.dev_view();
    auto k = make_kernel("cuda.indexer", Op::indexer_logits, p, 0, dev);
    RunContext ctx;
    ctx.check_indices = true;
    k->run(a, ctx);
    LATTE_CUDA_CHECK(cudaDeviceSynchronize());
    lg.download();
    const int64_t W = p.max_len() + 37, L = p.max_len();
    std::vector<float> narrow(static_cast<std::size_t>(p.T * L));
    for (int t = 0; t < p.T; ++t) {
      for (int64_t s = 0; s < W; ++s) {
        if (s < L) narrow[static_cast<std::size_t>(t * L + s)] = lg.host<float>()[t * W + s];
        else ASSERT_TRUE(std::isinf(lg.host<float>()[t * W + s])) << "tail not -inf";
      }
    }
    expect_logits_close(p, ref, narrow.data(), 2e-3, "backend logits");
  }
  {
    MirrorTensor idx(DType::i32, {p.T, topk});
    idx.poison_device(0x11);
    IndexerTopkArgs a;
    a.in = p.inputs(true);
    a.indices = idx.dev_view();
    a.kind = IndexKind::logical;
    auto k = make_kernel("cuda.indexer", Op::indexer_topk, p, topk, dev);
    DeviceBuffer ws(std::max<std::size_t>(k->workspace_bytes(), 16));
    RunContext ctx;
    ctx.workspace = ws.get();
    ctx.workspace_bytes = k->workspace_bytes();
    k->run(a, ctx);
    LATTE_CUDA_CHECK(cudaDeviceSynchronize());
    idx.download();
    expect_topk_valid(p, ref, idx.host<int32_t>(), topk, 2e-3, "backend topk");
  }
  // Check mode reports an out-of-range visible length.
  {
    p.vl.host<int32_t>()[0] = static_cast<int32_t>(p.max_len() + 1);
    const_cast<MirrorTensor&>(p.vl).upload();
    MirrorTensor idx(DType::i32, {p.T, topk});
    IndexerTopkArgs a;
    a.in = p.inputs(true);
    a.indices = idx.dev_view();
    auto k = make_kernel("cuda.indexer", Op::indexer_topk, p, topk, dev);
    DeviceBuffer ws(std::max<std::size_t>(k->workspace_bytes(), 16));
    RunContext ctx;
    ctx.workspace = ws.get();
    ctx.workspace_bytes = k->workspace_bytes();
    ctx.check_indices = true;
    EXPECT_THROW(k->run(a, ctx), Error);
  }
}

// ---- plain row top-k vs an exact host selection ----

std::vector<int32_t> host_topk(const float* row, int64_t n, int k) {
  std::vector<int32_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  auto before = [row](int32_t a, int32_t b) {
    const float x = row[a], y = row[b];
    const bool xn = std::isnan(x), yn = std::isnan(y);
    if (xn != yn) return yn;
    if (!xn && x != y) return x > y;
    return a < b;
  };
  const int m = static_cast<int>(std::min<int64_t>(k, n));
  std::partial_sort(idx.begin(), idx.begin() + m, idx.end(), before);
  std::vector<int32_t> out(idx.begin(), idx.begin() + m);
  std::sort(out.begin(), out.end());
  out.resize(static_cast<std::size_t>(k), -1);
  return out;
}

// split: with a workspace, so that few long rows are split over several CTAs (the workspace
// must then be non-zero: the split path really runs).
void check_rows(const std::vector<float>& data, int rows, int64_t n, int k, const char* what, bool split = false) {
  MirrorTensor s(DType::f32, {rows, n});
  std::memcpy(s.host<float>(), data.data(), data.size() * 4);
  s.upload();
  MirrorTensor out(DType::i32, {rows, k});
  const DeviceTraits dev = traits_of(gpu());
  const std::size_t ws_bytes = split ? cuda::rows_topk_workspace_bytes(rows, n, k, dev.sm_count) : 0;
  if (split) EXPECT_GT(ws_bytes, 0u) << what << ": the split path would not run";
  DeviceBuffer ws(std::max<std::size_t>(ws_bytes, 16));
  std::vector<int32_t> first;
  for (int rep = 0; rep < 3; ++rep) {
    out.poison_device(0x33);
    if (split) LATTE_CUDA_CHECK(cudaMemset(ws.get(), rep == 1 ? 0xFF : 0x5A, ws_bytes));  // stale workspace
    cuda::launch_rows_topk(static_cast<const float*>(s.device()), rows, n, n, k, static_cast<int32_t*>(out.device()),
                           k, split ? ws.get() : nullptr, ws_bytes, dev.sm_count, topk_pdl(dev), nullptr);
    LATTE_CUDA_CHECK(cudaDeviceSynchronize());
    out.download();
    std::vector<int32_t> got(out.host<int32_t>(), out.host<int32_t>() + out.numel());
    if (rep == 0) first = got;
    else EXPECT_EQ(got, first) << what << ": not deterministic";
  }
  for (int r = 0; r < rows; ++r) {
    const std::vector<int32_t> want = host_topk(data.data() + static_cast<int64_t>(r) * n, n, k);
    const std::vector<int32_t> got(first.begin() + static_cast<int64_t>(r) * k, first.begin() + static_cast<int64_t>(r + 1) * k);
    EXPECT_EQ(got, want) << what << " row " << r;
  }
}

TEST_F(CudaIndexer, RowTopkExactDistinct) {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto [rows, n, k] : {std::tuple{8, int64_t{131072}, 2048}, std::tuple{3, int64_t{262144}, 4096},
                           std::tuple{4, int64_t{5000}, 4096}, std::tuple{2, int64_t{3000}, 4096},
                           std::tuple{5, int64_t{20000}, 1}, std::tuple{2, int64_t{9000}, 2047}}) {
    std::vector<float> d(static_cast<std::size_t>(rows * n));
    for (float& x : d) x = normal(rng);
    check_rows(d, rows, n, k, "distinct");
  }
}

TEST_F(CudaIndexer, RowTopkTiesNanZerosAndAdversarial) {
  std::mt19937 rng(22);
  const int64_t n = 70000;
  const int rows = 6, k = 2048;
  std::vector<float> d(static_cast<std::size_t>(rows * n));
  std::uniform_int_distribution<int> level(0, 15);
  for (int64_t i = 0; i < n; ++i) {
    d[static_cast<std::size_t>(i)] = static_cast<float>(level(rng));                   // 16 levels: ties
    d[static_cast<std::size_t>(n + i)] = 1.0f;                                          // all equal
    d[static_cast<std::size_t>(2 * n + i)] = static_cast<float>(i);                     // ascending
    d[static_cast<std::size_t>(3 * n + i)] = (i % 3 == 0) ? -0.0f : 0.0f;               // signed zeros
    d[static_cast<std::size_t>(4 * n + i)] = (i % 7 == 0) ? NAN : (i % 5 == 0 ? -INFINITY : static_cast<float>(-(i % 11)));
    d[static_cast<std::size_t>(5 * n + i)] = (i < 100) ? 5.0f : static_cast<float>(level(rng)) * 1e-3f;  // few big
  }
  check_rows(d, rows, n, k, "ties");
  // Mostly NaN: fewer than k numbers.
  std::vector<float> e(static_cast<std::size_t>(n), NAN);
  for (int i = 0; i < 10; ++i) e[static_cast<std::size_t>(i * 997)] = static_cast<float>(i);
  check_rows(e, 1, n, k, "nan");
}


// Eight rows of n that stress a selection: 16 levels (ties), all equal, ascending, signed zeros,
// NaN and -inf, few large values, one narrow 11-bit bin, half -inf.
constexpr int kAdversarialRows = 8;
std::vector<float> adversarial_rows(int64_t n, std::mt19937& rng) {
  std::vector<float> d(static_cast<std::size_t>(kAdversarialRows * n));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> level(0, 15);
  std::uniform_real_distribution<float> narrow(1.0f, 1.0625f);
  for (int64_t i = 0; i < n; ++i) {
    d[static_cast<std::size_t>(i)] = static_cast<float>(level(rng));
    d[static_cast<std::size_t>(n + i)] = 1.0f;
    d[static_cast<std::size_t>(2 * n + i)] = static_cast<float>(i);
    d[static_cast<std::size_t>(3 * n + i)] = (i % 3 == 0) ? -0.0f : 0.0f;
    d[static_cast<std::size_t>(4 * n + i)] = (i % 7 == 0) ? NAN : (i % 5 == 0 ? -INFINITY : static_cast<float>(-(i % 11)));
    d[static_cast<std::size_t>(5 * n + i)] = (i < 100) ? 5.0f : static_cast<float>(level(rng)) * 1e-3f;
    d[static_cast<std::size_t>(6 * n + i)] = narrow(rng);
    d[static_cast<std::size_t>(7 * n + i)] = (i % 2 == 0) ? normal(rng) : -INFINITY;
  }
  return d;
}

// Rows split over several CTAs (launch_rows_topk with a workspace): exact against the host on
// distinct values, rows whose length is not a multiple of the slice, ties, all-equal rows and
// narrow distributions (more candidates than the list holds: the whole-row fallback), NaN,
// -inf, signed zeros, topk 1 and 4096.
TEST_F(CudaIndexer, RowTopkSplitExact) {
  const ScopedEnv split_not_spread("LATTE_CUDA_TOPK_SPREAD", "0");
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto [rows, n, k] : {std::tuple{8, int64_t{131072}, 2048}, std::tuple{3, int64_t{70001}, 2048},
                           std::tuple{1, int64_t{262144}, 4096}, std::tuple{2, int64_t{65536}, 1},
                           std::tuple{5, int64_t{100003}, 4096}, std::tuple{16, int64_t{65537}, 2048}}) {
    std::vector<float> d(static_cast<std::size_t>(rows * n));
    for (float& x : d) x = normal(rng);
    check_rows(d, rows, n, k, "split distinct", true);
  }
  const int64_t n = 70001;
  const int k = 2048;
  check_rows(adversarial_rows(n, rng), kAdversarialRows, n, k, "split ties", true);
  std::vector<float> e(static_cast<std::size_t>(2 * n), NAN);  // mostly NaN: fewer than k numbers
  for (int i = 0; i < 10; ++i) e[static_cast<std::size_t>(i * 997)] = static_cast<float>(i);
  for (int i = 0; i < 3000; ++i) e[static_cast<std::size_t>(n + i * 23)] = static_cast<float>(i % 50);
  check_rows(e, 2, n, k, "split nan", true);
}

// The unfused indexer path with its rows split over several CTAs (a workspace that holds the
// split lists) equals the same path with one CTA per row (keys-only workspace), logical and
// physical, on long and short rows (shorter than topk, nothing visible), with and without ties.
TEST_F(CudaIndexer, UnfusedSplitRowsEqualOneCtaPerRow) {
  const DeviceTraits dev = traits_of(gpu());
  for (const char* spread : {"0", "1"})
  for (int dup : {0, 5}) {
    const ScopedEnv env("LATTE_CUDA_TOPK_SPREAD", spread);
    SCOPED_TRACE(std::string("LATTE_CUDA_TOPK_SPREAD=") + spread);
    std::mt19937 rng(31 + dup);
    Options o;
    o.heads = 32;
    o.dup_pool = dup;
    // Spread: at most 262144 keys per call (6 rows of up to 40000 positions).
    const std::vector<std::pair<int, int>> tokens =
        spread[0] == '0' ? std::vector<std::pair<int, int>>{{0, 70000}, {1, 17001}, {2, 1500}, {0, 0}, {3, 66666}, {1, 9000}}
                         : std::vector<std::pair<int, int>>{{0, 40000}, {1, 17001}, {2, 1500}, {0, 0}, {3, 36666}, {1, 9000}};
    const Problem p = make_problem(rng, tokens, 4, o);
    const IndexerParams raw = p.raw();
    if (spread[0] == '1') ASSERT_TRUE(cuda::topk_spreads(p.T, raw.max_len(), dev.sm_count));
    for (int topk : {2048, 1, 4096}) {
      const std::size_t full = cuda_indexer::topk_workspace_bytes(raw, topk, TopkPath::unfused, dev);
      const std::size_t keys_only = cuda_indexer::topk_workspace_bytes(raw, topk, TopkPath::unfused, [&] {
        DeviceTraits d = dev;
        d.sm_count = 2;  // too few SMs to split: the keys alone
        return d;
      }());
      ASSERT_GT(full, keys_only) << "the split path would not run";
      std::vector<int32_t> res[2][2];
      for (int split = 0; split < 2; ++split) {
        const std::size_t bytes = split ? full : keys_only;
        DeviceBuffer ws(bytes);
        LATTE_CUDA_CHECK(cudaMemset(ws.get(), 0xA7, bytes));
        for (int kind = 0; kind < 2; ++kind) {
          MirrorTensor idx(DType::i32, {p.T, topk});
          idx.poison_device(0x5A);
          const TopkOutput out = topk_output(idx, topk, kind == 1);
          cuda_indexer::launch_indexer_topk(raw, out, TopkPath::unfused, ws.get(), bytes, dev, nullptr);
          LATTE_CUDA_CHECK(cudaDeviceSynchronize());
          idx.download();
          res[split][kind].assign(idx.host<int32_t>(), idx.host<int32_t>() + idx.numel());
        }
      }
      for (int kind = 0; kind < 2; ++kind)
        for (int t = 0; t < p.T; ++t) {
          const std::vector<int32_t> a(res[0][kind].begin() + t * topk, res[0][kind].begin() + (t + 1) * topk);
          const std::vector<int32_t> b(res[1][kind].begin() + t * topk, res[1][kind].begin() + (t + 1) * topk);
          EXPECT_EQ(b, a) << "dup " << dup << " topk " << topk << (kind ? " physical" : " logical") << " row " << t;
        }
      // Short rows: exactly their visible positions, then -1.
      for (int t = 0; t < p.T; ++t) {
        const int vis = tokens[static_cast<std::size_t>(t)].second;
        if (vis > topk) continue;
        for (int i = 0; i < topk; ++i)
          ASSERT_EQ(res[1][0][static_cast<std::size_t>(t) * topk + i], i < vis ? i : -1) << "short row " << t;
      }
    }
  }
}


// The scored spread kernel (scores and top-k in one cooperative kernel, the unfused path of up
// to 8 tokens) equals the keys pass followed by the spread top-k bit for bit: the same math
// (matrix path, k permutation, epilogue) gives the same keys, and the same selection follows.
// Every head count up to 128, both query dtypes and negative q_scales, block sizes 4 / 16 / 64,
// missing blocks, rows of 0, < topk, not a multiple of 4 and up to 33 333 positions, ties,
// logical and physical output, topk 1 / 2048 / 4096; and it is valid against float64.
TEST_F(CudaIndexer, ScoredSpreadEqualsKeysPassAndSpread) {
  const DeviceTraits dev = traits_of(gpu());
  std::mt19937 rng(71);
  struct Case {
    int heads;
    DType q;
    int bs;
    int dup;
    bool tr;
    std::vector<std::pair<int, int>> tokens;
  };
  const std::vector<Case> cases = {
      {32, DType::e4m3, 64, 0, true, {{0, 33333}}},
      {64, DType::e4m3, 64, 0, true, {{0, 9001}, {1, 2049}, {2, 0}, {3, 1}}},
      {1, DType::e4m3, 16, 0, true, {{0, 5000}, {1, 2047}}},
      {7, DType::bf16, 64, 0, false, {{0, 7777}, {1, 100}, {2, 20000}}},
      {128, DType::e4m3, 64, 5, true, {{0, 12000}, {1, 3001}, {0, 11999}, {2, 2048}, {1, 3000}, {2, 40}, {0, 5}, {1, 8191}}},
      {40, DType::e4m3, 4, 0, true, {{0, 3001}, {1, 2500}}},
  };
  for (const Case& c : cases) {
    Options o;
    o.heads = c.heads;
    o.q_dtype = c.q;
    o.block_size = c.bs;
    o.dup_pool = c.dup;
    o.token_request = c.tr;
    o.invalid_block = true;
    const int B = 1 + std::max_element(c.tokens.begin(), c.tokens.end())->first + (c.tr ? 0 : 2);
    std::vector<std::pair<int, int>> tokens = c.tokens;
    if (!c.tr)
      for (int t = 0; t < static_cast<int>(tokens.size()); ++t) tokens[static_cast<std::size_t>(t)].first = t;
    Problem p = make_problem(rng, tokens, std::max(B, static_cast<int>(tokens.size())), o);
    if (c.q == DType::e4m3) {
      for (int t = 0; t < p.T; ++t)
        for (int h = 1; h < p.H; h += 3) p.qs.host<float>()[t * p.H + h] *= -1.0f;
      p.qs.upload();
    }
    const IndexerParams raw = p.raw();
    const std::vector<float> ref = reference_logits(p);
    for (int topk : {2048, 1, 4096}) {
      const std::string what = "H=" + std::to_string(c.heads) + " bs=" + std::to_string(c.bs) +
                               " T=" + std::to_string(p.T) + " topk=" + std::to_string(topk);
      SCOPED_TRACE(what);
      const std::size_t bytes = cuda_indexer::topk_workspace_bytes(raw, topk, TopkPath::unfused, dev);
      {
        const ScopedEnv wherever_it_runs("LATTE_CUDA_TOPK_SCORED", "1");
        ASSERT_TRUE(cuda_indexer::scored_spread_takes(raw, topk, bytes, dev));
      }
      DeviceBuffer ws(bytes);
      std::vector<int32_t> res[2][2];
      for (int scored = 0; scored < 2; ++scored) {
        const ScopedEnv env("LATTE_CUDA_TOPK_SCORED", scored ? "1" : "0");
        LATTE_CUDA_CHECK(cudaMemset(ws.get(), 0xA7, bytes));
        for (int kind = 0; kind < 2; ++kind) {
          MirrorTensor idx(DType::i32, {p.T, topk});
          idx.poison_device(0x5A);
          cuda_indexer::launch_indexer_topk(raw, topk_output(idx, topk, kind == 1), TopkPath::unfused, ws.get(), bytes,
                                            dev, nullptr);
          LATTE_CUDA_CHECK(cudaDeviceSynchronize());
          idx.download();
          res[scored][kind].assign(idx.host<int32_t>(), idx.host<int32_t>() + idx.numel());
        }
      }
      EXPECT_EQ(res[1][0], res[0][0]) << "logical";
      EXPECT_EQ(res[1][1], res[0][1]) << "physical";
      expect_topk_valid(p, ref, res[1][0].data(), topk, 2e-3, what.c_str());
      TopkRun r;
      r.logical = res[1][0];
      r.physical = res[1][1];
      expect_physical_matches(p, r, topk, "scored physical");
    }
  }
}

// `enqueue` (work on `stream`) captured into a CUDA graph and replayed three times, each over a
// stale workspace (ws, bytes: 0x5A, 0xFF, 0x5A) after `poison`; `check(rep)` after each replay.
void replay_over_stale_workspace(cudaStream_t stream, const std::function<void()>& enqueue, void* ws,
                                 std::size_t bytes, const std::function<void()>& poison,
                                 const std::function<void(int)>& check) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  LATTE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  enqueue();
  LATTE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  LATTE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 3; ++rep) {
    poison();
    LATTE_CUDA_CHECK(cudaDeviceSynchronize());
    LATTE_CUDA_CHECK(cudaMemsetAsync(ws, rep == 1 ? 0xFF : 0x5A, bytes, stream));
    LATTE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    LATTE_CUDA_CHECK(cudaStreamSynchronize(stream));
    check(rep);
  }
  LATTE_CUDA_CHECK(cudaGraphExecDestroy(exec));
  LATTE_CUDA_CHECK(cudaGraphDestroy(graph));
}

// The scored spread kernel captured into a CUDA graph (its state memset and its cooperative,
// programmatic launch): every replay over a stale workspace equals the eager call.
TEST_F(CudaIndexer, ScoredSpreadGraphReplayEqualsEager) {
  const DeviceTraits dev = traits_of(gpu());
  const ScopedEnv on("LATTE_CUDA_TOPK_SCORED", "1");
  std::mt19937 rng(73);
  Options o;
  o.heads = 32;
  const Problem p = make_problem(rng, {{0, 20000}, {1, 30001}, {2, 700}}, 3, o);
  const IndexerParams raw = p.raw();
  const int topk = 2048;
  const std::size_t bytes = cuda_indexer::topk_workspace_bytes(raw, topk, TopkPath::unfused, dev);
  ASSERT_TRUE(cuda_indexer::scored_spread_takes(raw, topk, bytes, dev));
  DeviceBuffer ws(bytes);
  MirrorTensor idx(DType::i32, {p.T, topk});
  cudaStream_t stream = nullptr;
  LATTE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const TopkOutput out = topk_output(idx, topk, true);
  auto enqueue = [&] { cuda_indexer::launch_indexer_topk(raw, out, TopkPath::unfused, ws.get(), bytes, dev, stream); };
  idx.poison_device(0x5A);
  enqueue();  // eager (kernel attributes are set outside the capture)
  LATTE_CUDA_CHECK(cudaStreamSynchronize(stream));
  idx.download();
  const std::vector<int32_t> want(idx.host<int32_t>(), idx.host<int32_t>() + idx.numel());
  replay_over_stale_workspace(stream, enqueue, ws.get(), bytes, [&] { idx.poison_device(0x33); }, [&](int rep) {
    idx.download();
    const std::vector<int32_t> got(idx.host<int32_t>(), idx.host<int32_t>() + idx.numel());
    EXPECT_EQ(got, want) << "replay " << rep;
  });
  LATTE_CUDA_CHECK(cudaStreamDestroy(stream));
}

// Host-only: the fused path's workspace bound is finite for every topk cuda.indexer declares (it
// planned a context past the one-CTA top-k's rows for topk > 2824 and threw: every such call
// failed when its kernel was made), and a kernel made for topk 4096 has a workspace.
TEST(TopkPlan, FusedWorkspaceBoundForEveryTopk) {
  DeviceTraits dev;
  dev.arch = 90;
  dev.sm_count = 132;
  for (int topk : {1, 2048, 2825, 3313, 3806, cuda_indexer::kMaxTopk})
    for (int64_t tokens : {1, 9, 106})
      EXPECT_GT(cuda_indexer::fused_workspace_bound(tokens, topk, 92, true, dev), 0u) << topk << " " << tokens;
  AttentionSpec spec;
  spec.op = Op::indexer_topk;
  spec.num_heads = 92;
  spec.head_dim = kIndexDim;
  spec.q_dtype = DType::e4m3;
  spec.topk = cuda_indexer::kMaxTopk;
  spec.max_tokens = 9;
  EXPECT_GT(Registry::global().get("cuda.indexer")->make(spec, describe_device("sm_90"))->workspace_bytes(), 0u);
}

// Host-only: the scored spread kernel's automatic rule (measured on the H200) and its knob.
TEST(ScoredSpreadRule, FewTokensOverAtLeast32KKeysInSlicesOfAtMost1024) {
  DeviceTraits dev;
  dev.arch = 120;
  dev.sm_count = 132;
  IndexerParams p;
  p.heads = 32;
  p.block_size = 64;
  const auto takes = [&](int tokens, int64_t len) {
    p.tokens = tokens;
    p.max_blocks = static_cast<int>(len / 64);
    return cuda_indexer::scored_spread_takes(p, 2048, std::size_t{1} << 30, dev);
  };
  EXPECT_TRUE(takes(1, 32768));    // 64 CTAs of 512
  EXPECT_TRUE(takes(1, 131072));   // 132 CTAs of 996
  EXPECT_TRUE(takes(4, 32768));    // 33 CTAs of 996 per row
  EXPECT_FALSE(takes(1, 8192));    // too few keys
  EXPECT_FALSE(takes(8, 32768));   // slices of 2048
  EXPECT_FALSE(takes(9, 8192));    // more than 8 tokens: not the spread top-k
  {
    const ScopedEnv on("LATTE_CUDA_TOPK_SCORED", "1");
    EXPECT_TRUE(takes(1, 8192));
    EXPECT_TRUE(takes(8, 32768));
    EXPECT_FALSE(takes(8, 131072));  // not the spread top-k (more than 262144 keys)
  }
  p.tokens = 1;
  p.max_blocks = 512;
  EXPECT_FALSE(cuda_indexer::scored_spread_takes(p, 2048, 16, dev)) << "workspace too small";
  const ScopedEnv off("LATTE_CUDA_TOPK_SCORED", "0");
  EXPECT_FALSE(takes(1, 32768));
}

// The split path (and, with LATTE_CUDA_TOPK_SPREAD=1, the spread kernel: cooperative and
// programmatic) captured into a CUDA graph on a stream (its collect and final kernels are
// programmatic dependent launches on sm_90+): a copy writes the rows right before each top-k,
// two top-k calls share one workspace and the second rows take the whole-row fallback; every
// replay equals the host.
TEST_F(CudaIndexer, RowTopkSplitGraphCapture) {
  for (const char* spread : {"0", "1"}) {
  const ScopedEnv env("LATTE_CUDA_TOPK_SPREAD", spread);
  SCOPED_TRACE(std::string("LATTE_CUDA_TOPK_SPREAD=") + spread);
  std::mt19937 rng(25);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> narrow(3.0f, 3.0625f);  // above nearly every normal value
  const int rows = 8, k = 2048;
  const int64_t n = spread[0] == '1' ? 32768 : 131072;  // the spread path: at most 262144 keys
  if (spread[0] == '1') ASSERT_TRUE(cuda::topk_spreads(rows, n, traits_of(gpu()).sm_count));
  std::vector<float> d(static_cast<std::size_t>(2 * rows * n));
  for (int64_t i = 0; i < rows * n; ++i) d[static_cast<std::size_t>(i)] = normal(rng);
  for (int64_t i = rows * n; i < 2 * rows * n; ++i)
    d[static_cast<std::size_t>(i)] = (i % 5 == 0) ? normal(rng) : narrow(rng);  // mostly one bin
  MirrorTensor src(DType::f32, {2 * rows, n});
  std::memcpy(src.host<float>(), d.data(), d.size() * 4);
  src.upload();
  DeviceBuffer scores(static_cast<std::size_t>(rows * n) * 4);
  MirrorTensor out(DType::i32, {2 * rows, k});
  const DeviceTraits dev = traits_of(gpu());
  const std::size_t ws_bytes = cuda::rows_topk_workspace_bytes(rows, n, k, dev.sm_count);
  ASSERT_GT(ws_bytes, 0u) << "the split path would not run";
  DeviceBuffer ws(ws_bytes);
  cudaStream_t stream = nullptr;
  LATTE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto* o = static_cast<int32_t*>(out.device());
  const auto* sp = static_cast<const float*>(src.device());
  auto* sc = static_cast<float*>(scores.get());
  auto enqueue = [&] {
    for (int h = 0; h < 2; ++h) {
      LATTE_CUDA_CHECK(cudaMemcpyAsync(sc, sp + h * rows * n, static_cast<std::size_t>(rows * n) * 4,
                                       cudaMemcpyDeviceToDevice, stream));
      cuda::launch_rows_topk(sc, rows, n, n, k, o + h * rows * k, k, ws.get(), ws_bytes, dev.sm_count, topk_pdl(dev), stream);
    }
  };
  enqueue();  // eager once (kernel attributes are set outside the capture)
  LATTE_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<std::vector<int32_t>> want(2 * rows);
  for (int r = 0; r < 2 * rows; ++r) want[static_cast<std::size_t>(r)] = host_topk(d.data() + r * n, n, k);
  replay_over_stale_workspace(stream, enqueue, ws.get(), ws_bytes, [&] { out.poison_device(0x33); }, [&](int rep) {
    out.download();
    for (int r = 0; r < 2 * rows; ++r) {
      const std::vector<int32_t> got(out.host<int32_t>() + r * k, out.host<int32_t>() + (r + 1) * k);
      EXPECT_EQ(got, want[static_cast<std::size_t>(r)]) << "replay " << rep << " row " << r;
    }
  });
  LATTE_CUDA_CHECK(cudaStreamDestroy(stream));
  }
}

// Rows spread over many CTAs that meet at grid barriers (launch_rows_topk with a workspace, up
// to 8 rows): exact against the host, deterministic, with a stale workspace, on distinct values
// at lengths around topk and past the one-CTA kernel's limit, 1 to 8 rows, topk 1 / 2048 / 4096,
// and on ties (16 levels, all equal, signed zeros), ascending rows, NaN and -inf, few large
// values, one narrow 11-bit bin, half -inf, fewer valid numbers than topk.
TEST_F(CudaIndexer, RowTopkSpreadExact) {
  const DeviceTraits dev = traits_of(gpu());
  std::mt19937 rng(26);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto [rows, n, k] : {std::tuple{1, int64_t{32768}, 2048}, std::tuple{1, int64_t{131072}, 2048},
                           std::tuple{8, int64_t{32768}, 2048}, std::tuple{2, int64_t{2048}, 2048},
                           std::tuple{3, int64_t{2049}, 2048}, std::tuple{4, int64_t{2047}, 2048},
                           std::tuple{5, int64_t{9001}, 1}, std::tuple{5, int64_t{50000}, 4096},
                           std::tuple{1, int64_t{500000}, 2048}, std::tuple{7, int64_t{700}, 4096}}) {
    ASSERT_TRUE(cuda::topk_spreads(rows, n, dev.sm_count)) << rows << " x " << n;
    std::vector<float> d(static_cast<std::size_t>(rows * n));
    for (float& x : d) x = normal(rng);
    check_rows(d, rows, n, k, "spread distinct", true);
  }
  const int64_t n = 32749;
  const int k = 2048;
  ASSERT_TRUE(cuda::topk_spreads(kAdversarialRows, n, dev.sm_count));
  check_rows(adversarial_rows(n, rng), kAdversarialRows, n, k, "spread ties", true);
  // 2050 values in 2 levels around the boundary: the list route and the equal-key route.
  std::vector<float> t(static_cast<std::size_t>(2 * n), -1.0f);
  for (int64_t i = 0; i < 2050; ++i) t[static_cast<std::size_t>(i * 19)] = i < 1000 ? 2.0f : 1.0f;
  for (int64_t i = 0; i < 2100; ++i) t[static_cast<std::size_t>(n + i * 17)] = i < 2000 ? 3.0f : static_cast<float>(i);
  check_rows(t, 2, n, k, "spread boundary ties", true);
  std::vector<float> e(static_cast<std::size_t>(2 * n), NAN);  // mostly NaN: fewer than k numbers
  for (int i = 0; i < 10; ++i) e[static_cast<std::size_t>(i * 997)] = static_cast<float>(i);
  for (int i = 0; i < 3000; ++i) e[static_cast<std::size_t>(n + i * 13)] = static_cast<float>(i % 50);
  check_rows(e, 2, n, k, "spread nan", true);
}

// A small split problem for compute-sanitizer runs (memcheck, racecheck).
TEST_F(CudaIndexer, RowTopkSplitSmall) {
  std::mt19937 rng(24);
  std::uniform_int_distribution<int> level(0, 7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 65541;
  std::vector<float> d(static_cast<std::size_t>(2 * n));
  for (int64_t i = 0; i < n; ++i) {
    d[static_cast<std::size_t>(i)] = normal(rng);
    d[static_cast<std::size_t>(n + i)] = static_cast<float>(level(rng));
  }
  check_rows(d, 2, n, 2048, "spread small", true);
  const ScopedEnv split_not_spread("LATTE_CUDA_TOPK_SPREAD", "0");
  check_rows(d, 2, n, 2048, "split small", true);
}

// Host-only: Kernel::describe() names the score kernel's matrix path of the described arch
// (sm_80 bf16, sm_89 / sm_120 e4m3, sm_90 / sm_100 f16), the top-k and the per-call path rule.
TEST(CudaIndexerDescribe, NamesTheMatrixPathAndThePathRule) {
  auto be = Registry::global().find("cuda.indexer");
  if (!be) GTEST_SKIP() << "skipped: cuda.indexer not built";
  AttentionSpec spec;
  spec.op = Op::indexer_topk;
  spec.num_heads = 64;
  spec.head_dim = 128;
  spec.q_dtype = DType::e4m3;
  spec.topk = 2048;
  spec.max_tokens = 32;
  const auto text = [&](const char* arch) { return be->make(spec, describe_device(arch))->describe(); };
  EXPECT_EQ(text("sm_90"),
            "scores by f16 mma.sync (q and K widened from e4m3) on sm_90; exact radix top-2048; per call: unfused "
            "with the top-k spread over the GPU for up to 8 query tokens and 131072 keys (from 32768 keys scores "
            "and top-k in one cooperative kernel); else fused (no [T, L] scores) for 1 query token, or up to 32 at "
            "contexts of 128K+, or when the workspace holds no row of scores; else unfused");
  EXPECT_EQ(text("sm_89").rfind("scores by mma.sync e4m3 on sm_89; exact radix top-2048", 0), 0u) << text("sm_89");
  EXPECT_EQ(text("sm_80").rfind("scores by bf16 mma.sync (q and K widened exactly from e4m3) on sm_80", 0), 0u)
      << text("sm_80");
  spec.q_dtype = DType::bf16;
  spec.op = Op::indexer_logits;
  EXPECT_EQ(text("sm_120"), "scores by bf16 mma.sync (K widened exactly from e4m3) on sm_120; logits [T, L] written");
}

// Host-only: the top-k kernel's longest rows. A row one 32-position step past the limit is
// refused with the limit in the message (what a soak found: the message had named a limit the
// plan did not reach), and the kernel's documented rows of 262144 positions fit at topk 2048.
TEST(TopkPlan, RefusesRowsPastTheLimitItNames) {
  for (const int topk : {1, 512, 2048, 4096}) {
    SCOPED_TRACE(topk);
    const int64_t most = cuda::topk_max_positions(topk);
    EXPECT_GE(most, 262144);
    EXPECT_GT(cuda::plan_topk(most, topk).cap, 0);
    try {
      (void)cuda::plan_topk(most + 32, topk);
      ADD_FAILURE() << "rows of " << most + 32 << " planned";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::unsupported);
      EXPECT_NE(std::string(e.what()).find("at most " + std::to_string(most) + " positions at topk " +
                                           std::to_string(topk)),
                std::string::npos)
          << e.what();
    }
  }
}

// Host-only: rows past the one-CTA top-k run through the spread top-k a few tokens per pass, as
// long as the spread top-k takes them (16384 positions per CTA on every SM), and the workspace
// floor of both indexers (long_row_workspace_bytes) holds one token of the longest such row.
TEST(TopkPlan, LongRowsRunThroughTheSpreadTopkInTokenSlices) {
  const int sms = 132, topk = 2048;
  const int64_t longest = cuda::spread_max_positions(sms);
  EXPECT_EQ(longest, int64_t{16384} * sms);
  EXPECT_TRUE(cuda::topk_rows_too_long(400000, topk));
  EXPECT_FALSE(cuda::topk_rows_too_long(cuda::topk_max_positions(topk), topk));
  const std::size_t floor = cuda::long_row_workspace_bytes(topk, sms);
  EXPECT_EQ(cuda::keys_tokens_per_pass(3, longest, topk, static_cast<std::size_t>(longest) * 4, floor, sms), 1);
  EXPECT_EQ(cuda::keys_tokens_per_pass(3, longest + 128, topk, static_cast<std::size_t>(longest + 128) * 4, 4 * floor, sms), 0);
  // 85 tokens of 487296 positions (a soak's call): at most 4 per pass (30 CTAs of 16384 per row).
  const std::size_t row = std::size_t{487296} * 4;
  EXPECT_EQ(cuda::keys_tokens_per_pass(85, 487296, 3313, row, 100 * row, sms), 4);
  EXPECT_EQ(cuda::keys_tokens_per_pass(85, 487296, 3313, row, floor, sms), 4);
  EXPECT_EQ(cuda::keys_tokens_per_pass(85, 487296, 3313, row, 2 * row, sms), 1);
}

// The pooled indexer (GLM-5.3-Flash) on cuda.indexer: the per-token top-k over pool rows and
// the expansion, against float64 pool scores (pooled_check.hpp).
TEST_F(CudaIndexer, PooledIndexerAgainstFloat64) {
  std::mt19937 rng(53);
  for (const PooledCase& c : pooled_cases()) check_pooled_backend("cuda.indexer", c, rng, 2e-3);
}

// Host-only: both CUDA indexers take GLM-5.3-Flash's pooled indexer ops on the GPUs they run on
// (no kpool refusal), at TP1 and TP8.
TEST(CudaIndexerPooled, BothIndexersTakePooledSpecs) {
  for (const char* id : {"cuda.indexer", "hopper.indexer"}) {
    auto be = Registry::global().find(id);
    if (!be) continue;
    for (const int tp : {1, 8}) {
      Deployment d;
      d.tp = tp;
      for (const Op op : {Op::indexer_topk, Op::indexer_logits}) {
        const AttentionSpec s = attention_spec(load_model("glm-5.3-flash", d), op);
        ASSERT_EQ(s.kpool, 4);
        const auto reasons = check(*be, s, describe_device("sm_90"));
        EXPECT_TRUE(reasons.empty()) << id << " " << to_string(op) << ": " << (reasons.empty() ? "" : reasons[0].text);
      }
    }
  }
}

}  // namespace
}  // namespace latte::testing
