// cpu.reference as the registry and the selector see it: registered, honest capabilities,
// and a Kernel that refuses what it cannot run with a clear message.
#include <gmock/gmock.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "latte/api.hpp"
#include "latte/backend.hpp"
#include "latte/error.hpp"
#include "latte/registry.hpp"
#include "valid_calls.hpp"

namespace latte::testing {
namespace {

AttentionSpec glm5_spec(Op op) {
  AttentionSpec spec;
  spec.op = op;
  spec.model = "glm-5";
  const bool indexer = op == Op::indexer_topk || op == Op::indexer_logits || op == Op::indexer_k_store;
  spec.num_heads = indexer ? 32 : 64;
  spec.head_dim = indexer ? kIndexDim : kQkDim;
  spec.q_dtype = indexer ? DType::e4m3 : DType::bf16;
  spec.kv_cache = CacheFormat::fp8_ds_mla;
  spec.block_size = 64;
  spec.topk = (op == Op::sparse_mla || op == Op::indexer_topk) ? 2048 : 0;
  spec.s_q = 1;
  spec.scale = 0.0625f;
  return spec;
}

std::vector<std::string> codes(const std::vector<Reason>& reasons) {
  std::vector<std::string> out;
  for (const Reason& r : reasons) out.push_back(r.code);
  return out;
}

TEST(CpuReference, IsRegisteredWithEveryOpOnTheCpu) {
  const auto backend = Registry::global().find("cpu.reference");
  ASSERT_NE(backend, nullptr);
  const BackendInfo& info = backend->info();
  EXPECT_EQ(info.id, "cpu.reference");
  EXPECT_FALSE(info.description.empty());
  EXPECT_EQ(info.caps.ops, all_ops());
  EXPECT_EQ(info.caps.devices, std::vector<DeviceKind>{DeviceKind::cpu});
}

TEST(CpuReference, AcceptsEveryOpOfAGlm5StepOnTheCpu) {
  const auto backend = Registry::global().get("cpu.reference");
  for (Op op : all_ops()) {
    for (CacheFormat format : {CacheFormat::bf16, CacheFormat::fp8_ds_mla}) {
      AttentionSpec spec = glm5_spec(op);
      spec.kv_cache = format;
      EXPECT_THAT(codes(check(*backend, spec, DeviceInfo{})), ::testing::IsEmpty())
          << to_string(op) << " " << to_string(format);
    }
  }
  AttentionSpec decode = glm5_spec(Op::mla_decode);
  decode.s_q = 4;
  decode.num_heads = 8;  // GLM-5 at TP 8
  decode.block_size = 1;
  EXPECT_THAT(codes(check(*backend, decode, DeviceInfo{})), ::testing::IsEmpty());
  AttentionSpec bf16_index = glm5_spec(Op::indexer_topk);
  bf16_index.q_dtype = DType::bf16;
  EXPECT_THAT(codes(check(*backend, bf16_index, DeviceInfo{})), ::testing::IsEmpty());
}

TEST(CpuReference, DeclaresWhatItRefuses) {
  const auto backend = Registry::global().get("cpu.reference");
  DeviceInfo gpu;
  gpu.kind = DeviceKind::cuda;
  gpu.arch_major = 9;
  EXPECT_THAT(codes(check(*backend, glm5_spec(Op::sparse_mla), gpu)), ::testing::Contains("device_kind"));
  AttentionSpec decode = glm5_spec(Op::mla_decode);
  decode.s_q = 5;
  EXPECT_THAT(codes(check(*backend, decode, DeviceInfo{})), ::testing::Contains("s_q"));
  AttentionSpec heads = glm5_spec(Op::sparse_mla);
  heads.num_heads = 129;
  EXPECT_THAT(codes(check(*backend, heads, DeviceInfo{})), ::testing::Contains("heads"));
  AttentionSpec topk = glm5_spec(Op::indexer_topk);
  topk.topk = kMaxTopk + 1;
  EXPECT_THAT(codes(check(*backend, topk, DeviceInfo{})), ::testing::Contains("topk"));
}

TEST(CpuReference, KernelNeedsNoWorkspaceAndRefusesArgsOfAnotherOp) {
  const auto backend = Registry::global().get("cpu.reference");
  ValidCalls calls;
  const auto kernel = backend->make(spec_from_args(calls.sparse_mla()), DeviceInfo{});
  EXPECT_EQ(kernel->workspace_bytes(), 0u);
  try {
    kernel->run(calls.kv_store(), RunContext{});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_THAT(e.what(), ::testing::HasSubstr("made for sparse_mla but was given kv_store"));
  }
  EXPECT_NO_THROW(kernel->run(calls.sparse_mla(), RunContext{}));
}

// A kernel computes only problems that fit the spec it was made for: a call whose cache format,
// heads or topk differ is refused naming both values, before the backend sees it.
TEST(CpuReference, KernelRefusesACallOfAnotherSpecNamingBoth) {
  const auto backend = Registry::global().get("cpu.reference");
  ValidCalls calls;
  const SparseMlaArgs call = calls.sparse_mla();
  const AttentionSpec fits = spec_from_args(call);
  const auto expect_refused = [&](AttentionSpec spec, const std::string& fragment) {
    const auto kernel = backend->make(spec, DeviceInfo{});
    try {
      kernel->run(call, RunContext{});
      ADD_FAILURE() << "no error for " << fragment;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_THAT(e.what(), ::testing::HasSubstr(fragment));
    }
  };
  AttentionSpec other = fits;
  other.kv_cache = fits.kv_cache == CacheFormat::bf16 ? CacheFormat::fp8_ds_mla : CacheFormat::bf16;
  expect_refused(other, fmt::format("made for cache format {} but the call has cache format {}",
                                    to_string(other.kv_cache), to_string(fits.kv_cache)));
  other = fits;
  other.num_heads = fits.num_heads + 1;
  expect_refused(other, fmt::format("made for heads {} but the call has heads {}", other.num_heads,
                                    fits.num_heads));
  other = fits;
  other.topk = fits.topk - 1;
  expect_refused(other, fmt::format("made for topk up to {} but the call has topk {}", other.topk,
                                    fits.topk));
  other.topk = fits.topk + 1;  // fewer columns than the kernel was made for: fine
  EXPECT_NO_THROW(backend->make(other, DeviceInfo{})->run(call, RunContext{}));
}

// MLA without rope: cpu.reference takes sparse_mla and kv_store of head_dim 512 (with
// topk_lens), and refuses mla_decode of head_dim 512, whose arguments cannot say "no rope".
TEST(CpuReference, AcceptsRowsWithoutRopeForSparseMlaAndKvStoreOnly) {
  const auto backend = Registry::global().get("cpu.reference");
  for (Op op : {Op::sparse_mla, Op::kv_store}) {
    AttentionSpec spec = glm5_spec(op);
    spec.head_dim = kLatentDim;
    spec.topk_lens = op == Op::sparse_mla;
    EXPECT_THAT(codes(check(*backend, spec, DeviceInfo{})), ::testing::IsEmpty()) << to_string(op);
  }
  AttentionSpec decode = glm5_spec(Op::mla_decode);
  decode.head_dim = kLatentDim;
  const auto reasons = check(*backend, decode, DeviceInfo{});
  ASSERT_EQ(codes(reasons), std::vector<std::string>{"head_dim"});
  EXPECT_THAT(reasons[0].text, ::testing::HasSubstr("computes mla_decode with rope only (d_qk 576)"));
  AttentionSpec odd = glm5_spec(Op::sparse_mla);
  odd.head_dim = 544;
  EXPECT_THAT(codes(check(*backend, odd, DeviceInfo{})), ::testing::Contains("head_dim"));
}

// A kernel made for rows with rope does not run a call without (and the reverse), nor a call
// with topk_lens unless made for them: each computes only what its spec says.
TEST(CpuReference, KernelRefusesAnotherRopeDimOrUnexpectedTopkLens) {
  const auto backend = Registry::global().get("cpu.reference");
  ValidCalls calls;
  const SparseMlaArgs nope = calls.sparse_mla_nope();  // rope_dim 0, with topk_lens
  const AttentionSpec nope_spec = spec_from_args(nope);
  EXPECT_EQ(nope_spec.head_dim, 512);
  EXPECT_TRUE(nope_spec.topk_lens);
  EXPECT_EQ(spec_from_args(calls.kv_store_nope()).head_dim, 512);
  EXPECT_EQ(spec_from_args(calls.kv_store()).head_dim, 576);
  const auto refused = [&](const AttentionSpec& spec, const OpArgs& args, const std::string& fragment) {
    try {
      backend->make(spec, DeviceInfo{})->run(args, RunContext{});
      ADD_FAILURE() << "no error for " << fragment;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_THAT(e.what(), ::testing::HasSubstr(fragment));
    }
  };
  refused(spec_from_args(calls.sparse_mla()), nope, "made for head_dim 576 but the call has head_dim 512");
  refused(nope_spec, calls.sparse_mla(), "made for head_dim 512 but the call has head_dim 576");
  refused(spec_from_args(calls.kv_store()), calls.kv_store_nope(), "made for head_dim 576 but the call has head_dim 512");
  AttentionSpec no_lens = nope_spec;
  no_lens.topk_lens = false;
  refused(no_lens, nope, "made for calls without topk_lens but the call has them");
  SparseMlaArgs without = nope;
  without.topk_lens = {};
  EXPECT_NO_THROW(backend->make(nope_spec, DeviceInfo{})->run(without, RunContext{}));
}

}  // namespace
}  // namespace latte::testing
