// `latte run`: one DSA decode step (kv_store -> indexer_k_store -> indexer_topk -> sparse_mla)
// of a model's shape on random data through the selected backends, each stage checked.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "latte/error.hpp"
#include "latte/formats.hpp"
#include "latte/workload.hpp"
#include "workload_buffers.hpp"

namespace latte {
namespace {

using detail::StageTimer;
using detail::WorkBuffer;

constexpr const char* kOracleId = "cpu.reference";

void fill_bf16(WorkBuffer& buffer, std::mt19937_64& rng, float stddev) {
  std::normal_distribution<float> normal(0.0f, stddev);
  auto* values = buffer.host_as<uint16_t>();
  for (std::size_t i = 0; i < buffer.bytes() / 2; ++i) values[i] = float_to_bf16(normal(rng));
}

double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

std::vector<double> bf16_values(const WorkBuffer& buffer) {
  std::vector<double> out(buffer.bytes() / 2);
  const auto* bits = buffer.host_as<uint16_t>();
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

// The MLA cache decoded to floats, token by token (576 values each).
std::vector<double> decode_mla_cache(const WorkBuffer& cache, CacheFormat format, int64_t tokens) {
  std::vector<double> out(static_cast<std::size_t>(tokens) * kQkDim);
  std::vector<float> token(kQkDim);
  for (int64_t s = 0; s < tokens; ++s) {
    if (format == CacheFormat::bf16) {
      const auto* bits = cache.host_as<uint16_t>() + s * kQkDim;
      for (int i = 0; i < kQkDim; ++i) token[i] = bf16_to_float(bits[i]);
    } else {
      unpack_fp8_ds_mla_token(cache.host() + s * 656, token.data());
    }
    std::copy(token.begin(), token.end(), out.begin() + s * kQkDim);
  }
  return out;
}

std::vector<double> decode_index_cache(const WorkBuffer& cache, int64_t num_blocks, int block_size) {
  std::vector<double> out(static_cast<std::size_t>(num_blocks * block_size) * kIndexDim);
  std::vector<float> token(kIndexDim);
  const int64_t page_bytes = static_cast<int64_t>(block_size) * kIndexBytesPerToken;
  for (int64_t b = 0; b < num_blocks; ++b) {
    for (int o = 0; o < block_size; ++o) {
      unpack_indexer_k_token(cache.host() + b * page_bytes, block_size, o, token.data());
      std::copy(token.begin(), token.end(), out.begin() + (b * block_size + o) * kIndexDim);
    }
  }
  return out;
}


// Runs one stage through the selected backend: selection, make, a warm-up, then `repeats`
// timed runs (median).
class StageRunner {
 public:
  StageRunner(const Context& context, const DeviceInfo& device, const DsaStepConfig& config,
              int repeats)
      : context_(context), device_(device), config_(config), repeats_(repeats) {}

  StageReport run(const std::string& name, const AttentionSpec& spec, const OpArgs& args,
                  const std::function<void(std::string_view)>& progress) {
    const Selection selection = context_.select(spec, device_, config_.select);
    StageReport report;
    report.name = name;
    report.op = spec.op;
    report.backend = selection.chosen;
    report.rule = selection.valid.empty() ? std::string() : selection.valid.front().rule;
    if (progress) progress(fmt::format("{} on {} ({})", name, report.backend, report.rule));
    const std::unique_ptr<Kernel> kernel = selection.backend->make(spec, device_);
    report.kernel = kernel->describe();
    WorkBuffer workspace(kernel->workspace_bytes(), device_.handle());
    RunContext ctx;
    ctx.workspace = workspace.bytes() ? workspace.view(DType::u8, {static_cast<int64_t>(workspace.bytes())}).data : nullptr;
    ctx.workspace_bytes = workspace.bytes();
    StageTimer timer(device_.handle());
    std::vector<double> times;
    const int warmups = device_.kind == DeviceKind::cuda ? 2 : 0;
    for (int i = 0; i < warmups + repeats_; ++i) {
      timer.start();
      kernel->run(args, ctx);
      const double ms = timer.stop_ms();
      if (i >= warmups) times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    report.ms = times[times.size() / 2];
    return report;
  }

 private:
  const Context& context_;
  const DeviceInfo& device_;
  const DsaStepConfig& config_;
  int repeats_;
};

// Runs an op on host tensors with the oracle.
void run_oracle(const Context& context, const AttentionSpec& spec, const OpArgs& args) {
  const DeviceInfo cpu = describe_device("cpu");
  const auto oracle = context.registry().get(kOracleId);
  oracle->make(spec, cpu)->run(args, RunContext{});
}

}  // namespace

DsaStepReport run_dsa_step(const DsaStepConfig& config,
                           const std::function<void(std::string_view)>& progress,
                           const Context* context_ptr) {
  const Context& context = context_ptr ? *context_ptr : Context::global();
  Deployment deployment;
  deployment.tp = config.tp;
  deployment.kv_cache = config.kv_cache;
  deployment.block_size = config.block_size;
  const ModelSpec model = load_model(config.model, deployment);
  if (!model.is_dsa()) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("model '{}' is dense MLA (its config has no index_topk): `latte run` runs a "
                            "DSA step; use --model glm-5 or --model deepseek-v3.2, or see "
                            "`latte select --model {} --op mla_decode`",
                            model.name, config.model));
  }
  if (config.batch < 1 || config.batch > 4096)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("--batch {} is out of range: use 1..4096 requests", config.batch));
  if (config.context < 1 || config.context > model.max_position_embeddings)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("--context {} is out of range: {} accepts 1..{} tokens", config.context,
                            model.name, model.max_position_embeddings));
  const DeviceInfo device = describe_device(config.device);
  if (!device.probed)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("--device {} describes an architecture; `latte run` needs a real device: "
                            "use --device cpu or --device cuda:N (see `latte devices`), or ask "
                            "`latte select --device {}` what would run there",
                            config.device, config.device));
  const Device dev = device.handle();
  const int repeats = config.repeats > 0 ? config.repeats : (device.kind == DeviceKind::cuda ? 20 : 1);

  const int64_t B = config.batch, L = config.context, bs = config.block_size;
  const int64_t H = model.heads_per_rank, Hi = model.indexer->num_heads, K = model.indexer->topk;
  const int64_t blocks_per_request = (L + bs - 1) / bs;
  const int64_t num_blocks = B * blocks_per_request + 1;  // one block no request owns
  const int64_t T = B * L;                                 // tokens written to the caches
  const CacheFormat format = config.kv_cache;
  const int64_t token_bytes = static_cast<int64_t>(cache_bytes_per_token(format));
  std::mt19937_64 rng(config.seed);

  DsaStepReport report;
  report.model = model;
  report.device = device;
  report.config = config;

  // Paging: each request owns a random set of physical blocks.
  WorkBuffer block_table(static_cast<std::size_t>(B * blocks_per_request) * 4, dev);
  {
    std::vector<int32_t> blocks(static_cast<std::size_t>(num_blocks));
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    std::copy_n(blocks.begin(), B * blocks_per_request, block_table.host_as<int32_t>());
  }
  const int32_t* table = block_table.host_as<int32_t>();
  WorkBuffer slot_mapping(static_cast<std::size_t>(T) * 4, dev);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < L; ++p)
      slot_mapping.host_as<int32_t>()[b * L + p] =
          static_cast<int32_t>(table[b * blocks_per_request + p / bs] * bs + p % bs);

  if (progress) progress(fmt::format("making random inputs: {} requests x {} tokens", B, L));
  WorkBuffer latent(static_cast<std::size_t>(T) * kLatentDim * 2, dev);
  WorkBuffer rope(static_cast<std::size_t>(T) * kRopeDim * 2, dev);
  WorkBuffer index_k(static_cast<std::size_t>(T) * kIndexDim * 2, dev);
  fill_bf16(latent, rng, 1.0f);
  fill_bf16(rope, rng, 1.0f);
  fill_bf16(index_k, rng, 1.0f);
  WorkBuffer kv_cache(static_cast<std::size_t>(num_blocks * bs * token_bytes), dev);
  WorkBuffer k_cache(static_cast<std::size_t>(num_blocks * bs * kIndexBytesPerToken), dev);
  for (WorkBuffer* b : {&block_table, &slot_mapping, &latent, &rope, &index_k, &kv_cache, &k_cache})
    b->upload();

  StageRunner runner(context, device, config, repeats);
  AttentionOptions options;
  options.max_tokens = T;
  const DType cache_dtype = format == CacheFormat::bf16 ? DType::bf16 : DType::u8;
  const int64_t cache_last = format == CacheFormat::bf16 ? kQkDim : token_bytes;

  // 1. kv_store: every token of every request into the MLA cache.
  {
    KvStoreArgs args;
    args.latent = latent.view(DType::bf16, {T, kLatentDim});
    args.rope = rope.view(DType::bf16, {T, kRopeDim});
    args.slot_mapping = slot_mapping.view(DType::i32, {T});
    args.kv_cache = kv_cache.view(cache_dtype, {num_blocks, bs, cache_last});
    const AttentionSpec spec = attention_spec(model, Op::kv_store, options);
    StageReport stage = runner.run("kv_store", spec, args, progress);
    kv_cache.download();
    const std::vector<double> got = decode_mla_cache(kv_cache, format, num_blocks * bs);
    std::vector<double> want(got.size(), 0.0);
    if (stage.backend != kOracleId) {
      WorkBuffer ref(kv_cache.bytes(), Device{});
      KvStoreArgs host = args;
      host.latent = latent.host_view(DType::bf16, {T, kLatentDim});
      host.rope = rope.host_view(DType::bf16, {T, kRopeDim});
      host.slot_mapping = slot_mapping.host_view(DType::i32, {T});
      host.kv_cache = ref.host_view(cache_dtype, {num_blocks, bs, cache_last});
      run_oracle(context, spec, host);
      want = decode_mla_cache(ref, format, num_blocks * bs);
      stage.check = "decoded cache vs cpu.reference";
      stage.tolerance = 1e-6;
    } else {
      // The oracle itself: compare with the inputs (exact for bf16, the fp8 bound otherwise).
      const std::vector<double> lat = bf16_values(latent), rp = bf16_values(rope);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t slot = slot_mapping.host_as<int32_t>()[t];
        std::copy_n(lat.begin() + t * kLatentDim, kLatentDim, want.begin() + slot * kQkDim);
        std::copy_n(rp.begin() + t * kRopeDim, kRopeDim, want.begin() + slot * kQkDim + kLatentDim);
      }
      stage.check = "round trip vs the inputs";
      stage.tolerance = format == CacheFormat::bf16 ? 0.0 : 0.06;
    }
    stage.error = relative_error(got, want);
    stage.passed = stage.error <= stage.tolerance;
    stage.rate = static_cast<double>(T) * (2.0 * kQkDim + token_bytes + 4) / (stage.ms * 1e6);
    stage.rate_unit = "GB/s";
    report.stages.push_back(stage);
  }

  // 2. indexer_k_store: the indexer keys into their e4m3 pages.
  {
    IndexerKStoreArgs args;
    args.k = index_k.view(DType::bf16, {T, kIndexDim});
    args.slot_mapping = slot_mapping.view(DType::i32, {T});
    args.k_cache = k_cache.view(DType::u8, {num_blocks, bs, kIndexBytesPerToken});
    const AttentionSpec spec = attention_spec(model, Op::indexer_k_store, options);
    StageReport stage = runner.run("indexer_k_store", spec, args, progress);
    k_cache.download();
    const std::vector<double> got = decode_index_cache(k_cache, num_blocks, static_cast<int>(bs));
    std::vector<double> want(got.size(), 0.0);
    if (stage.backend != kOracleId) {
      WorkBuffer ref(k_cache.bytes(), Device{});
      IndexerKStoreArgs host = args;
      host.k = index_k.host_view(DType::bf16, {T, kIndexDim});
      host.slot_mapping = slot_mapping.host_view(DType::i32, {T});
      host.k_cache = ref.host_view(DType::u8, {num_blocks, bs, kIndexBytesPerToken});
      run_oracle(context, spec, host);
      want = decode_index_cache(ref, num_blocks, static_cast<int>(bs));
      stage.check = "decoded pages vs cpu.reference";
      stage.tolerance = 1e-6;
    } else {
      const std::vector<double> k = bf16_values(index_k);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t slot = slot_mapping.host_as<int32_t>()[t];
        std::copy_n(k.begin() + t * kIndexDim, kIndexDim, want.begin() + slot * kIndexDim);
      }
      stage.check = "round trip vs the inputs";
      stage.tolerance = 0.06;
    }
    stage.error = relative_error(got, want);
    stage.passed = stage.error <= stage.tolerance;
    stage.rate = static_cast<double>(T) * (2.0 * kIndexDim + kIndexBytesPerToken + 4) / (stage.ms * 1e6);
    stage.rate_unit = "GB/s";
    report.stages.push_back(stage);
  }

  // 3. indexer_topk: each request's decode token (position L-1) picks its topk tokens.
  WorkBuffer index_q(static_cast<std::size_t>(B * Hi * kIndexDim), dev);
  WorkBuffer q_scale(static_cast<std::size_t>(B * Hi) * 4, dev);
  WorkBuffer weights(static_cast<std::size_t>(B * Hi) * 4, dev);
  WorkBuffer visible(static_cast<std::size_t>(B) * 4, dev);
  WorkBuffer indices(static_cast<std::size_t>(B * K) * 4, dev);
  {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t r = 0; r < B * Hi; ++r) {
      float row[kIndexDim];
      float amax = 0;
      for (float& v : row) { v = normal(rng); amax = std::max(amax, std::fabs(v)); }
      const float scale = fp8_group_scale(amax, Fp8ScaleKind::amax);
      q_scale.host_as<float>()[r] = scale;
      for (int i = 0; i < kIndexDim; ++i) index_q.host()[r * kIndexDim + i] = float_to_e4m3(row[i] / scale);
      weights.host_as<float>()[r] = normal(rng) / std::sqrt(static_cast<float>(Hi * kIndexDim));
    }
    for (int64_t b = 0; b < B; ++b) visible.host_as<int32_t>()[b] = static_cast<int32_t>(L);
    for (WorkBuffer* buf : {&index_q, &q_scale, &weights, &visible}) buf->upload();
    indices.fill_device(0xFF);
  }
  {
    IndexerTopkArgs args;
    args.in.q = index_q.view(DType::e4m3, {B, Hi, kIndexDim});
    args.in.q_scale = q_scale.view(DType::f32, {B, Hi});
    args.in.weights = weights.view(DType::f32, {B, Hi});
    args.in.k_cache = k_cache.view(DType::u8, {num_blocks, bs, kIndexBytesPerToken});
    args.in.block_table = block_table.view(DType::i32, {B, blocks_per_request});
    args.in.visible_lens = visible.view(DType::i32, {B});
    args.indices = indices.view(DType::i32, {B, K});
    args.kind = IndexKind::physical;
    AttentionOptions index_options;
    index_options.max_tokens = B;
    const AttentionSpec spec = attention_spec(model, Op::indexer_topk, index_options);
    StageReport stage = runner.run("indexer_topk", spec, args, progress);
    indices.download();
    // Check: the chosen slots are distinct, visible, and their scores are the topk best
    // scores of the oracle's logits (ties may pick either of equal scores).
    if (progress) progress("checking indexer_topk against cpu.reference logits");
    WorkBuffer logits(static_cast<std::size_t>(B * L) * 4, Device{});
    IndexerLogitsArgs ref;
    ref.in = args.in;
    ref.in.q = index_q.host_view(DType::e4m3, {B, Hi, kIndexDim});
    ref.in.q_scale = q_scale.host_view(DType::f32, {B, Hi});
    ref.in.weights = weights.host_view(DType::f32, {B, Hi});
    ref.in.k_cache = k_cache.host_view(DType::u8, {num_blocks, bs, kIndexBytesPerToken});
    ref.in.block_table = block_table.host_view(DType::i32, {B, blocks_per_request});
    ref.in.visible_lens = visible.host_view(DType::i32, {B});
    ref.logits = logits.host_view(DType::f32, {B, L});
    AttentionSpec logits_spec = spec;
    logits_spec.op = Op::indexer_logits;
    logits_spec.topk = 0;
    run_oracle(context, logits_spec, ref);
    std::vector<int64_t> position_of_slot(static_cast<std::size_t>(num_blocks * bs), -1);
    for (int64_t t = 0; t < T; ++t) position_of_slot[slot_mapping.host_as<int32_t>()[t]] = t % L;
    double worst = 0;
    int64_t bad_entries = 0;
    std::string first_bad;  // what went wrong first, for the report
    auto note_bad = [&](std::string what) {
      if (bad_entries++ == 0) first_bad = std::move(what);
    };
    const int64_t expected_valid = std::min(K, L);
    for (int64_t b = 0; b < B; ++b) {
      const float* row_logits = logits.host_as<float>() + b * L;
      std::vector<double> want(row_logits, row_logits + L);
      std::sort(want.begin(), want.end(), std::greater<>());
      std::vector<double> got;
      std::vector<bool> seen(static_cast<std::size_t>(L), false);
      for (int64_t k = 0; k < K; ++k) {
        const int32_t slot = indices.host_as<int32_t>()[b * K + k];
        if (slot < 0) continue;
        const bool in_request = slot < num_blocks * bs && position_of_slot[slot] >= 0 &&
                                slot_mapping.host_as<int32_t>()[b * L + position_of_slot[slot]] == slot;
        if (!in_request) {
          note_bad(fmt::format("row {} column {}: slot {} is not a token of request {}", b, k, slot, b));
          continue;
        }
        if (seen[position_of_slot[slot]]) {
          note_bad(fmt::format("row {} column {}: position {} chosen twice", b, k, position_of_slot[slot]));
          continue;
        }
        seen[position_of_slot[slot]] = true;
        got.push_back(row_logits[position_of_slot[slot]]);
      }
      if (static_cast<int64_t>(got.size()) != expected_valid)
        note_bad(fmt::format("row {}: {} valid entries, expected {}", b, got.size(), expected_valid));
      std::sort(got.begin(), got.end(), std::greater<>());
      double scale = 0;
      for (int64_t i = 0; i < expected_valid; ++i) scale = std::max(scale, std::fabs(want[i]));
      for (std::size_t i = 0; i < got.size(); ++i)
        worst = std::max(worst, std::fabs(got[i] - want[i]) / std::max(scale, 1e-30));
    }
    stage.check = bad_entries ? fmt::format("chosen scores vs cpu.reference top-k: {} bad, first: {}",
                                            bad_entries, first_bad)
                              : std::string("chosen scores vs cpu.reference top-k");
    stage.error = bad_entries ? std::numeric_limits<double>::infinity() : worst;
    stage.tolerance = 1e-3;
    stage.passed = stage.error <= stage.tolerance;
    stage.rate = static_cast<double>(B * L * kIndexBytesPerToken) / (stage.ms * 1e6);
    stage.rate_unit = "GB/s";
    report.stages.push_back(stage);
  }

  // 4. sparse_mla over the chosen slots.
  {
    WorkBuffer q(static_cast<std::size_t>(B * H * kQkDim) * 2, dev);
    WorkBuffer out(static_cast<std::size_t>(B * H * kLatentDim) * 2, dev);
    WorkBuffer lse(static_cast<std::size_t>(B * H) * 4, dev);
    fill_bf16(q, rng, 1.0f);
    q.upload();
    out.fill_device(0xFF);  // NaN poison: every element must be written
    SparseMlaArgs args;
    args.q = q.view(DType::bf16, {B, H, kQkDim});
    args.kv_cache = kv_cache.view(cache_dtype, {num_blocks, bs, cache_last});
    args.indices = indices.view(DType::i32, {B, K});
    args.out = out.view(DType::bf16, {B, H, kLatentDim});
    args.lse = lse.view(DType::f32, {B, H});
    args.scale = static_cast<float>(model.softmax_scale);
    AttentionOptions attn_options;
    attn_options.max_tokens = B;
    const AttentionSpec spec = attention_spec(model, Op::sparse_mla, attn_options);
    StageReport stage = runner.run("sparse_mla", spec, args, progress);
    out.download();
    const std::vector<double> got = bf16_values(out);
    std::vector<std::string> checks;
    double worst = 0;
    auto host_attention_inputs = [&](auto& host) {
      host.q = q.host_view(DType::bf16, {B, H, kQkDim});
      host.kv_cache = kv_cache.host_view(cache_dtype, {num_blocks, bs, cache_last});
    };
    if (stage.backend != kOracleId) {
      if (progress) progress("checking sparse_mla against cpu.reference");
      WorkBuffer ref_out(out.bytes(), Device{});
      SparseMlaArgs host = args;
      host_attention_inputs(host);
      host.indices = indices.host_view(DType::i32, {B, K});
      host.out = ref_out.host_view(DType::bf16, {B, H, kLatentDim});
      host.lse = TensorView{};
      run_oracle(context, spec, host);
      worst = std::max(worst, relative_error(got, bf16_values(ref_out)));
      checks.emplace_back("cpu.reference");
    }
    if (L <= K) {
      // DESIGN.md 2.1 equality oracle: with every visible token selected, sparse == dense.
      if (progress) progress("checking sparse_mla against dense MLA (equality oracle)");
      WorkBuffer dense_out(out.bytes(), Device{});
      WorkBuffer seq_lens(static_cast<std::size_t>(B) * 4, Device{});
      for (int64_t b = 0; b < B; ++b) seq_lens.host_as<int32_t>()[b] = static_cast<int32_t>(L);
      MlaDecodeArgs dense;
      dense.q = q.host_view(DType::bf16, {B, 1, H, kQkDim});
      dense.kv_cache = kv_cache.host_view(cache_dtype, {num_blocks, bs, cache_last});
      dense.block_table = block_table.host_view(DType::i32, {B, blocks_per_request});
      dense.seq_lens = seq_lens.host_view(DType::i32, {B});
      dense.out = dense_out.host_view(DType::bf16, {B, 1, H, kLatentDim});
      dense.scale = args.scale;
      AttentionSpec dense_spec = attention_spec(model, Op::mla_decode, attn_options);
      run_oracle(context, dense_spec, dense);
      worst = std::max(worst, relative_error(got, bf16_values(dense_out)));
      checks.emplace_back("dense MLA oracle");
    }
    if (checks.empty()) {
      stage.check = "none: cpu.reference is the oracle; use --context <= topk for the dense oracle";
      stage.passed = true;
    } else {
      stage.check = fmt::format("{}", fmt::join(checks, " + "));
      stage.error = worst;
      stage.tolerance = 1e-2;
      stage.passed = worst <= stage.tolerance;
    }
    const double flops = 2.0 * static_cast<double>(B * H * std::min(K, L)) * (kQkDim + kLatentDim);
    stage.rate = flops / (stage.ms * 1e9);
    stage.rate_unit = "TFLOP/s";
    report.stages.push_back(stage);
  }

  report.passed = std::all_of(report.stages.begin(), report.stages.end(),
                              [](const StageReport& s) { return s.passed; });
  return report;
}

}  // namespace latte
