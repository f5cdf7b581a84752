// `latte run`: one DSA decode step of a model's shape on random data through the selected
// backends, each stage checked. The stages are the model's layer_ops(): kv_store ->
// indexer_k_store -> indexer_topk -> sparse_mla, or with the pooled indexer (GLM-5.3-Flash)
// kv_store -> indexer_pool_store -> indexer_topk over pools -> sparse_mla with topk_lens; rows
// without rope where the model has none.
// liblatte's public API only: Context::select chooses each stage's backend (with the model's
// spec, as `latte select --model` does), latte::run runs every op on the backend chosen.
#include "latte_workload/dsa_step.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "latte/api.hpp"
#include "latte/backend.hpp"
#include "latte/error.hpp"
#include "latte/formats.hpp"
#include "latte_workload/buffers.hpp"

namespace latte::workload {
namespace {

constexpr const char* kOracleId = "cpu.reference";

void fill_bf16(WorkBuffer& buffer, std::mt19937_64& rng, float stddev) {
  std::normal_distribution<float> normal(0.0f, stddev);
  auto* values = buffer.host_as<uint16_t>();
  for (std::size_t i = 0; i < buffer.bytes() / 2; ++i) values[i] = float_to_bf16(normal(rng));
}

// relative_error's sums, added pair by pair, so that no check holds a decoded copy of a cache.
class ErrorSum {
 public:
  void add(double got, double want) {
    finite_ = finite_ && std::isfinite(got);
    diff_ += (got - want) * (got - want);
    norm_ += want * want;
  }
  [[nodiscard]] double value() const {
    if (!finite_) return std::numeric_limits<double>::infinity();
    return norm_ == 0 ? std::sqrt(diff_) : std::sqrt(diff_ / norm_);
  }

 private:
  double diff_ = 0, norm_ = 0;
  bool finite_ = true;
};

// Two bf16 buffers of the same size, compared element by element.
double bf16_relative_error(const WorkBuffer& got, const WorkBuffer& want) {
  ErrorSum sum;
  const auto* g = got.host_as<uint16_t>();
  const auto* w = want.host_as<uint16_t>();
  for (std::size_t i = 0; i < got.bytes() / 2; ++i) sum.add(bf16_to_float(g[i]), bf16_to_float(w[i]));
  return sum.value();
}

// One token of the MLA cache decoded to floats: 576 values, 512 without rope (rope_dim 0).
void decode_mla_token(const WorkBuffer& cache, CacheFormat format, int rope_dim, int64_t slot, float* token) {
  const int64_t token_bytes = static_cast<int64_t>(cache_bytes_per_token(format, rope_dim));
  if (format == CacheFormat::bf16) {
    const auto* bits = cache.host_as<uint16_t>() + slot * (kLatentDim + rope_dim);
    for (int i = 0; i < kLatentDim + rope_dim; ++i) token[i] = bf16_to_float(bits[i]);
  } else if (rope_dim == kNoRopeDim) {
    unpack_fp8_nope_token(cache.host() + slot * token_bytes, token);
  } else {
    unpack_fp8_ds_mla_token(cache.host() + slot * token_bytes, token);
  }
}

// One row of the indexer's key pages decoded to floats (128 values): a token's, or a pool's in
// the pooled indexer's pages (`rows_per_page` = block_size / kpool).
void decode_index_row(const WorkBuffer& cache, int rows_per_page, int64_t row, float* key) {
  const int64_t page_bytes = static_cast<int64_t>(rows_per_page) * kIndexBytesPerToken;
  unpack_indexer_k_token(cache.host() + (row / rows_per_page) * page_bytes, rows_per_page,
                         static_cast<int>(row % rows_per_page), key);
}

// The shapes of one step. Every buffer run_dsa_step allocates is sized here, and the memory
// estimate that refuses a step too large for the machine adds up the same sizes.
struct StepShapes {
  int64_t B, L, bs, H, Hi;
  int64_t K;  // columns of the indices: topk, or with the pooled indexer's tail topk + kpool - 1
  int64_t blocks_per_request, num_blocks, slots, T;
  int64_t R, qk;  // rope dims of the MLA rows (64, or 0 without rope) and query/key dims (576 | 512)
  int64_t token_bytes;
  // The indexer's unit: a token (kpool 1), or a pool of kpool tokens (the pooled indexer), of
  // which the top-k keeps pool_topk; units: the columns of the reference logits per request.
  int64_t kpool, pool_topk, units;
  bool tail;  // the pooled indexer appends the tokens of the incomplete pool

  StepShapes(const ModelSpec& model, int64_t batch, int64_t context, int64_t block_size, CacheFormat format)
      : B(batch), L(context), bs(block_size), H(model.heads_per_rank), Hi(model.indexer->num_heads),
        K(model.indexer->attended_tokens()), blocks_per_request((L + bs - 1) / bs),
        num_blocks(B * blocks_per_request + 1),  // one block no request owns
        slots(num_blocks * bs), T(B * L),         // T: tokens written to the caches
        R(model.rope_dim()), qk(kLatentDim + R),
        token_bytes(static_cast<int64_t>(cache_bytes_per_token(format, model.rope_dim()))),
        kpool(model.indexer->pooled() ? model.indexer->kpool : 1), pool_topk(model.indexer->topk / kpool),
        units((L + kpool - 1) / kpool), tail(pooled() && model.indexer->kpool_always_select_tail) {}

  [[nodiscard]] bool pooled() const { return kpool > 1; }
  // The positions a request's decode token attends to: the top-k's valid entries.
  [[nodiscard]] int64_t attended() const {
    return kpool * std::min(pool_topk, L / kpool) + (tail ? L % kpool : 0);
  }
  [[nodiscard]] int64_t key_rows() const { return num_blocks * (bs / kpool); }  // rows of the key pages

  static std::size_t n(int64_t bytes) { return static_cast<std::size_t>(bytes); }
  [[nodiscard]] std::size_t block_table() const { return n(B * blocks_per_request * 4); }
  [[nodiscard]] std::size_t slot_mapping() const { return n(T * 4); }
  [[nodiscard]] std::size_t latent() const { return n(T * kLatentDim * 2); }
  [[nodiscard]] std::size_t rope() const { return n(T * R * 2); }
  [[nodiscard]] std::size_t index_k() const { return n(T * kIndexDim * 2); }
  [[nodiscard]] std::size_t kv_cache() const { return n(slots * token_bytes); }
  [[nodiscard]] std::size_t k_cache() const { return n(key_rows() * kIndexBytesPerToken); }
  // indexer_pool_store's other inputs (none for the per-token indexer): gate, ape, positions,
  // token_request, and pool_state, which it also writes.
  [[nodiscard]] std::size_t gate() const { return pooled() ? n(T * kIndexDim * 2) : 0; }
  [[nodiscard]] std::size_t ape() const { return pooled() ? n(kpool * kIndexDim * 4) : 0; }
  [[nodiscard]] std::size_t per_token() const { return pooled() ? n(T * 4) : 0; }  // positions, token_request
  [[nodiscard]] std::size_t pool_state() const { return pooled() ? n(B * (kpool - 1) * 2 * kIndexDim * 4) : 0; }
  [[nodiscard]] std::size_t token_of_slot() const { return n(slots * 8); }
  [[nodiscard]] std::size_t index_q() const { return n(B * Hi * kIndexDim); }
  [[nodiscard]] std::size_t per_index_head() const { return n(B * Hi * 4); }  // q_scale, weights
  [[nodiscard]] std::size_t per_request() const { return n(B * 4); }          // visible, seq_lens
  [[nodiscard]] std::size_t out_lens() const { return pooled() ? per_request() : 0; }
  [[nodiscard]] std::size_t indices() const { return n(B * K * 4); }
  [[nodiscard]] std::size_t logits() const { return n(B * units * 4); }
  [[nodiscard]] std::size_t q() const { return n(B * H * qk * 2); }
  [[nodiscard]] std::size_t out() const { return n(B * H * kLatentDim * 2); }
  [[nodiscard]] std::size_t lse() const { return n(B * H * 4); }
  // The top-k check's per-row vectors (scores of the row, of the chosen, positions seen).
  [[nodiscard]] std::size_t topk_row() const { return n(units * 8 + pool_topk * 8 + (L + 7) / 8); }
  // The dense-MLA equality oracle checks sparse_mla when every visible token is attended to; it
  // exists for rows with rope only (mla_decode has no rope_dim 0).
  [[nodiscard]] bool dense_oracle() const { return R > 0 && attended() == L; }
};

// One stage: its spec, the backend chosen for it and that backend's workspace, all before any
// buffer (the memory estimate needs the workspaces and which checks copy a cache).
struct Stage {
  std::string name;
  AttentionSpec spec;
  Selection selection;
  std::size_t workspace_bytes = 0;
  [[nodiscard]] bool is_oracle() const { return selection.chosen == kOracleId; }
};

// Everything run_dsa_step decides before allocating. The stages are the model's layer_ops():
// key_store is indexer_k_store, or indexer_pool_store for a pooled indexer.
struct StepPlan {
  ModelSpec model;
  DeviceInfo device;
  StepShapes shapes;
  Stage kv_store, key_store, indexer_topk, sparse_mla;

  // The peak memory of the step at `shapes`: what is alive during the stage that needs most.
  [[nodiscard]] DsaStepMemory memory(const StepShapes& s) const {
    const bool cuda = device.kind == DeviceKind::cuda;
    // Inputs and caches (host and run copy), alive through the whole step.
    const std::size_t step = s.block_table() + s.slot_mapping() + s.latent() + s.rope() + s.index_k() +
                             s.kv_cache() + s.k_cache() + s.gate() + s.ape() + 2 * s.per_token() +
                             s.pool_state();
    // The top-k inputs and outputs (host and run copy), alive from stage 3 on.
    const std::size_t topk = s.index_q() + 2 * s.per_index_head() + s.per_request() + s.indices() + s.out_lens();
    const std::size_t attention = s.q() + s.out() + s.lse();
    // Workspaces are latte::run's. On the CPU a stage's lives in host memory while its kernel
    // runs, its check's buffers after that. On CUDA it is device memory that latte::run keeps
    // per stream and only grows, so a stage holds the largest workspace of the stages so far.
    const auto host_workspace = [cuda](const Stage& stage) { return cuda ? 0 : stage.workspace_bytes; };
    const std::size_t stage1 = std::max(host_workspace(kv_store), kv_store.is_oracle() ? 0 : s.kv_cache());
    const std::size_t stage2 =
        std::max(host_workspace(key_store), key_store.is_oracle() ? 0 : s.k_cache() + s.pool_state());
    const std::size_t stage3 = topk + std::max(host_workspace(indexer_topk), s.logits() + s.topk_row());
    const std::size_t stage4 = topk + attention +
                               std::max({host_workspace(sparse_mla), sparse_mla.is_oracle() ? 0 : s.out(),
                                         s.dense_oracle() ? s.out() + s.per_request() : 0});
    DsaStepMemory m;
    m.host_bytes = step + s.token_of_slot() + std::max({stage1, stage2, stage3, stage4});
    if (cuda) {
      const std::size_t w1 = kv_store.workspace_bytes;
      const std::size_t w2 = std::max(w1, key_store.workspace_bytes);
      const std::size_t w3 = std::max(w2, indexer_topk.workspace_bytes);
      const std::size_t w4 = std::max(w3, sparse_mla.workspace_bytes);
      m.device_bytes = step + std::max({w1, w2, topk + w3, topk + attention + w4});
    }
    return m;
  }
};

// The kernel made here is only asked for its workspace and dropped: the stage runs through
// latte::run, which makes and keeps its own.
Stage make_stage(const Context& context, const DsaStepConfig& config, const DeviceInfo& device,
                 std::string name, const AttentionSpec& spec) {
  Stage stage{std::move(name), spec, context.select(spec, device, config.select), 0};
  stage.workspace_bytes = stage.selection.backend->make(spec, device)->workspace_bytes();
  return stage;
}

StepPlan plan_step(const DsaStepConfig& config, const Context& context) {
  Deployment deployment;
  deployment.tp = config.tp;
  deployment.kv_cache = config.kv_cache;
  deployment.block_size = config.block_size;
  ModelSpec model = load_model(config.model, deployment);
  if (!model.is_dsa()) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("model '{}' is dense MLA (its config has no index_topk): `latte run` runs a "
                            "DSA step; use --model glm-5 or --model deepseek-v3.2, or see "
                            "`latte select --model {} --op mla_decode`",
                            model.name, config.model));
  }
  // The step follows layer_ops(): it needs the indices latte's indexer selects. A pooled indexer
  // latte does not compute leaves the indices to the engine (layer_ops: kv_store, sparse_mla).
  const std::vector<Op> ops = model.layer_ops();
  if (std::find(ops.begin(), ops.end(), Op::indexer_topk) == ops.end()) {
    throw Error(ErrorCode::unsupported,
                fmt::format("`latte run` cannot build a decode step of {}: the step selects the tokens with latte's "
                            "indexer, and latte computes no indexer of this model. {} See `latte select --model {} "
                            "--op all` for the backends of what latte serves.",
                            model.name, model.coverage(), config.model));
  }
  if (model.indexer->pooled() && config.block_size % model.indexer->kpool != 0)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("--block-size {} is not a multiple of {}'s pool size (index_kpool {}): a block holds "
                            "whole pools; use --block-size 64",
                            config.block_size, model.name, model.indexer->kpool));
  if (config.batch < 1 || config.batch > 4096)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("--batch {} is out of range: use 1..4096 requests", config.batch));
  if (config.context < 1 || config.context > model.max_position_embeddings)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("--context {} is out of range: {} accepts 1..{} tokens", config.context,
                            model.name, model.max_position_embeddings));
  DeviceInfo device = describe_device(config.device);
  if (!device.probed)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("--device {} describes an architecture; `latte run` needs a real device: "
                            "use --device cpu or --device cuda:N (see `latte devices`), or ask "
                            "`latte select --device {}` what would run there",
                            config.device, config.device));
  const StepShapes shapes(model, config.batch, config.context, config.block_size, config.kv_cache);
  AttentionOptions per_token;  // the cache writes: every token of every request
  per_token.max_tokens = shapes.T;
  AttentionOptions per_request;  // the decode step: one token per request
  per_request.max_tokens = shapes.B;
  const Op key_store = model.indexer->pooled() ? Op::indexer_pool_store : Op::indexer_k_store;
  AttentionSpec attention = attention_spec(model, Op::sparse_mla, per_request);
  attention.topk_lens = shapes.pooled();  // the pooled top-k's out_lens: each row's length
  return StepPlan{
      model,
      device,
      shapes,
      make_stage(context, config, device, "kv_store", attention_spec(model, Op::kv_store, per_token)),
      make_stage(context, config, device, std::string(to_string(key_store)), attention_spec(model, key_store, per_token)),
      make_stage(context, config, device, "indexer_topk", attention_spec(model, Op::indexer_topk, per_request)),
      make_stage(context, config, device, "sparse_mla", attention)};
}

// The largest n in [1, hi] with fits(n), or 0 when not even 1 fits (fits is monotone).
int64_t largest_fitting(int64_t hi, const std::function<bool(int64_t)>& fits) {
  int64_t lo = 0;  // fits(lo) holds, or lo == 0
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Refuses, before anything is allocated, a step that needs more memory than there is, with the
// estimate and the largest batch and context that fit.
void check_memory(const StepPlan& plan, const DsaStepConfig& config) {
  const bool cuda = plan.device.kind == DeviceKind::cuda;
  const AvailableMemory host = available_memory(Device{});
  const AvailableMemory dev = cuda ? available_memory(plan.device.handle()) : AvailableMemory{};
  const auto fits = [&](int64_t batch, int64_t context) {
    const DsaStepMemory m =
        plan.memory(StepShapes(plan.model, batch, context, config.block_size, config.kv_cache));
    return m.host_bytes <= host.bytes && (!cuda || m.device_bytes <= dev.bytes);
  };
  const int64_t B = config.batch, L = config.context;
  if (fits(B, L)) return;
  const DsaStepMemory need = plan.memory(plan.shapes);
  std::string needs = fmt::format("{} of host memory", format_bytes(need.host_bytes));
  std::string there = fmt::format("{} ({})", format_bytes(host.bytes), host.source);
  if (cuda) {
    needs += fmt::format(" and {} on cuda:{}", format_bytes(need.device_bytes), plan.device.index);
    there += fmt::format(", {} ({})", format_bytes(dev.bytes), dev.source);
  }
  const int64_t batch = largest_fitting(B - 1, [&](int64_t b) { return fits(b, L); });
  const int64_t context = largest_fitting(L - 1, [&](int64_t l) { return fits(B, l); });
  const std::string at_context = batch ? fmt::format("at --context {} at most --batch {} fits", L, batch)
                                       : fmt::format("not even --batch 1 fits at --context {}", L);
  const std::string at_batch = context ? fmt::format("at --batch {} at most --context {} does", B, context)
                                       : fmt::format("not even --context 1 does at --batch {}", B);
  throw Error(ErrorCode::out_of_memory,
              fmt::format("--batch {} --context {} of {} needs about {}; available: {}; {}, {}; lower "
                          "--batch or --context",
                          B, L, plan.model.name, needs, there, at_context, at_batch));
}

// The decision latte::run(args) takes when told to force `id`: its own select() (the same
// spec, device and options, so the same cached decision). latte::run adds LATTE_BACKEND's
// entries to the forced id and those may rank another backend first: a stage or a check that
// would then not run on `id` is refused before it runs.
Selection forced_call_selection(const Context& context, const OpArgs& args, const DeviceInfo& device,
                                const std::string& id, std::string_view what) {
  SelectOptions options;
  options.force.push_back(id);
  Selection selection = context.select(spec_from_args(args), device, options);
  if (selection.chosen != id) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{} must run on {}, but latte::run would run {} (forced: {}): force `latte run`'s "
                            "backends with --force (force= in run_dsa_step), not LATTE_BACKEND, which "
                            "applies to every call, the checks' cpu.reference calls included",
                            what, id, selection.chosen, fmt::join(selection.forced, ", ")));
  }
  return selection;
}

CallOptions forced_call(Context& context, const std::string& id) {
  CallOptions options;
  options.backend = id;
  options.context = &context;
  return options;
}

// Runs a planned stage through latte::run on the backend chosen for it: a warm-up on CUDA,
// then `repeats` timed runs (median).
class StageRunner {
 public:
  StageRunner(Context& context, const DeviceInfo& device, int repeats)
      : context_(context), device_(device), repeats_(repeats) {}

  StageReport run(const Stage& stage, const OpArgs& args, const std::function<void(std::string_view)>& progress) {
    StageReport report;
    report.name = stage.name;
    report.op = stage.spec.op;
    report.rule = stage.selection.valid.empty() ? std::string() : stage.selection.valid.front().rule;
    if (progress) progress(fmt::format("{} on {} ({})", stage.name, stage.selection.chosen, report.rule));
    const Selection call =
        forced_call_selection(context_, args, device_, stage.selection.chosen, "stage " + stage.name);
    const CallOptions options = forced_call(context_, stage.selection.chosen);
    StageTimer timer(device_.handle());
    std::vector<double> times;
    const int warmups = device_.kind == DeviceKind::cuda ? 2 : 0;
    for (int i = 0; i < warmups + repeats_; ++i) {
      timer.start();
      report.backend = latte::run(args, options);
      const double ms = timer.stop_ms();
      if (i >= warmups) times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    report.ms = times[times.size() / 2];
    report.kernel = call.describe_kernel();  // a kernel made for the call's spec, as latte::run's
    return report;
  }

 private:
  Context& context_;
  const DeviceInfo& device_;
  int repeats_;
};

// Runs an op on host tensors on the oracle, through latte::run like the stages.
void run_oracle(Context& context, const OpArgs& args, std::string_view what) {
  const DeviceInfo cpu = describe_device("cpu");
  (void)forced_call_selection(context, args, cpu, kOracleId, what);
  (void)latte::run(args, forced_call(context, kOracleId));
}

// The check of indexer_topk against the oracle's logits (one column per token, or per pool of
// the pooled indexer): the chosen entries are tokens of the row's request, none twice, and their
// scores are the best of the logits (ties may pick either of equal scores). Pooled, in addition:
// the entries come before the -1 padding and out_lens counts them, the chosen tokens form
// complete pools, and the tail (the incomplete pool's tokens) is chosen exactly when the model
// selects it.
void check_topk(const StepShapes& z, const WorkBuffer& indices, const WorkBuffer& out_lens, const WorkBuffer& logits,
                const int64_t* token_of_slot, StageReport& stage) {
  const int64_t L = z.L, K = z.K, kpool = z.kpool;
  const int64_t complete = L / kpool;                      // complete pools (tokens: L)
  const int64_t expected_units = std::min(z.pool_topk, complete);
  const int64_t tail_begin = kpool * complete;             // the incomplete pool's first position
  const int64_t expected_tail = z.tail ? L - tail_begin : 0;
  double worst = 0;
  int64_t bad_entries = 0;
  std::string first_bad;  // what went wrong first, for the report
  auto note_bad = [&](std::string what) {
    if (bad_entries++ == 0) first_bad = std::move(what);
  };
  for (int64_t b = 0; b < z.B; ++b) {
    const float* row_logits = logits.host_as<float>() + b * z.units;
    std::vector<double> want(row_logits, row_logits + z.units);
    std::sort(want.begin(), want.end(), std::greater<>());
    std::vector<double> got;
    got.reserve(static_cast<std::size_t>(z.pool_topk));
    std::vector<bool> seen(static_cast<std::size_t>(L), false);
    int64_t entries = 0, tail = 0;
    bool padding = false;
    for (int64_t k = 0; k < K; ++k) {
      const int32_t slot = indices.host_as<int32_t>()[b * K + k];
      if (slot < 0) {
        padding = true;
        continue;
      }
      ++entries;
      if (z.pooled() && padding) note_bad(fmt::format("row {} column {}: slot {} after the padding", b, k, slot));
      const int64_t t = slot < z.slots ? token_of_slot[slot] : -1;
      if (t < 0 || t / L != b) {
        note_bad(fmt::format("row {} column {}: slot {} is not a token of request {}", b, k, slot, b));
        continue;
      }
      const int64_t position = t % L;
      if (seen[position]) {
        note_bad(fmt::format("row {} column {}: position {} chosen twice", b, k, position));
        continue;
      }
      seen[position] = true;
      if (position >= tail_begin) {
        ++tail;
        if (!z.tail) note_bad(fmt::format("row {} column {}: position {} of the incomplete pool", b, k, position));
      }
    }
    for (int64_t unit = 0; unit < complete; ++unit) {
      const auto first = seen.begin() + unit * kpool;
      const int64_t chosen = std::count(first, first + kpool, true);
      if (chosen == kpool) got.push_back(row_logits[unit]);
      else if (chosen > 0)
        note_bad(fmt::format("row {}: pool {} has {} of its {} positions", b, unit, chosen, kpool));
    }
    if (!z.pooled()) {
      if (static_cast<int64_t>(got.size()) != expected_units)
        note_bad(fmt::format("row {}: {} valid entries, expected {}", b, got.size(), expected_units));
    } else {
      if (static_cast<int64_t>(got.size()) != expected_units)
        note_bad(fmt::format("row {}: {} pools chosen, expected {}", b, got.size(), expected_units));
      if (z.tail && tail != expected_tail)
        note_bad(fmt::format("row {}: {} of the {} tail positions chosen", b, tail, expected_tail));
      const int32_t length = out_lens.host_as<int32_t>()[b];
      if (length != entries) note_bad(fmt::format("row {}: out_lens {}, {} entries", b, length, entries));
    }
    std::sort(got.begin(), got.end(), std::greater<>());
    double scale = 0;
    for (int64_t i = 0; i < expected_units; ++i) scale = std::max(scale, std::fabs(want[i]));
    for (std::size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::fabs(got[i] - want[i]) / std::max(scale, 1e-30));
  }
  const std::string what = z.pooled() ? "chosen pools' scores vs cpu.reference top pools"
                                      : "chosen scores vs cpu.reference top-k";
  stage.check = bad_entries ? fmt::format("{}: {} bad, first: {}", what, bad_entries, first_bad) : what;
  stage.error = bad_entries ? std::numeric_limits<double>::infinity() : worst;
  stage.tolerance = 1e-3;
  stage.passed = stage.error <= stage.tolerance;
}

}  // namespace

DsaStepMemory estimate_dsa_step_memory(const DsaStepConfig& config, const Context* context_ptr) {
  const StepPlan plan = plan_step(config, context_ptr ? *context_ptr : Context::global());
  return plan.memory(plan.shapes);
}

DsaStepReport run_dsa_step(const DsaStepConfig& config,
                           const std::function<void(std::string_view)>& progress,
                           Context* context_ptr) {
  Context& context = context_ptr ? *context_ptr : Context::global();
  const StepPlan plan = plan_step(config, context);
  check_memory(plan, config);
  const ModelSpec& model = plan.model;
  const DeviceInfo& device = plan.device;
  const StepShapes& z = plan.shapes;
  const Device dev = device.handle();
  const int repeats = config.repeats > 0 ? config.repeats : (device.kind == DeviceKind::cuda ? 20 : 1);

  const int64_t B = z.B, L = z.L, bs = z.bs, H = z.H, Hi = z.Hi, K = z.K;
  const int64_t blocks_per_request = z.blocks_per_request, num_blocks = z.num_blocks, T = z.T;
  const int64_t R = z.R, qk = z.qk, kpool = z.kpool;
  const int rope_dim = static_cast<int>(R);
  const int key_rows_per_page = static_cast<int>(bs / kpool);  // tokens, or pools of the pooled indexer
  const CacheFormat format = config.kv_cache;
  const int64_t token_bytes = z.token_bytes;
  std::mt19937_64 rng(config.seed);

  DsaStepReport report;
  report.model = model;
  report.device = device;
  report.config = config;

  // Paging: each request owns a random set of physical blocks.
  WorkBuffer block_table(z.block_table(), dev);
  {
    std::vector<int32_t> blocks(static_cast<std::size_t>(num_blocks));
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    std::copy_n(blocks.begin(), B * blocks_per_request, block_table.host_as<int32_t>());
  }
  const int32_t* table = block_table.host_as<int32_t>();
  WorkBuffer slot_mapping(z.slot_mapping(), dev);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < L; ++p)
      slot_mapping.host_as<int32_t>()[b * L + p] =
          static_cast<int32_t>(table[b * blocks_per_request + p / bs] * bs + p % bs);
  // Which token each slot holds (-1: none), for the checks.
  WorkBuffer token_of_slot_buffer(z.token_of_slot(), Device{});
  int64_t* token_of_slot = token_of_slot_buffer.host_as<int64_t>();
  std::fill_n(token_of_slot, z.slots, int64_t{-1});
  for (int64_t t = 0; t < T; ++t) token_of_slot[slot_mapping.host_as<int32_t>()[t]] = t;

  if (progress) progress(fmt::format("making random inputs: {} requests x {} tokens", B, L));
  WorkBuffer latent(z.latent(), dev);
  WorkBuffer rope(z.rope(), dev);  // empty without rope
  WorkBuffer index_k(z.index_k(), dev);
  fill_bf16(latent, rng, 1.0f);
  fill_bf16(rope, rng, 1.0f);
  fill_bf16(index_k, rng, 1.0f);
  WorkBuffer kv_cache(z.kv_cache(), dev);
  WorkBuffer k_cache(z.k_cache(), dev);  // token pages, or the pooled indexer's pool pages
  // indexer_pool_store's other inputs (empty for the per-token indexer): gates and a bias of
  // moderate size (the per-dimension softmax over a pool's slots is far from one-hot), each
  // token's position and request, and every request's pool state, new (zeros).
  WorkBuffer gate(z.gate(), dev);
  WorkBuffer ape(z.ape(), dev);
  WorkBuffer positions(z.per_token(), dev);
  WorkBuffer token_request(z.per_token(), dev);
  WorkBuffer pool_state(z.pool_state(), dev);
  if (z.pooled()) {
    fill_bf16(gate, rng, 1.0f);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    for (int64_t i = 0; i < kpool * kIndexDim; ++i) ape.host_as<float>()[i] = normal(rng);
    for (int64_t t = 0; t < T; ++t) {
      positions.host_as<int32_t>()[t] = static_cast<int32_t>(t % L);
      token_request.host_as<int32_t>()[t] = static_cast<int32_t>(t / L);
    }
  }
  for (WorkBuffer* b : {&block_table, &slot_mapping, &latent, &rope, &index_k, &kv_cache, &k_cache, &gate, &ape,
                        &positions, &token_request, &pool_state})
    b->upload();

  StageRunner runner(context, device, repeats);
  const DType cache_dtype = format == CacheFormat::bf16 ? DType::bf16 : DType::u8;
  const int64_t cache_last = format == CacheFormat::bf16 ? qk : token_bytes;

  // 1. kv_store: every token of every request into the MLA cache (rows without rope when the
  //    model has none).
  {
    KvStoreArgs args;
    args.latent = latent.view(DType::bf16, {T, kLatentDim});
    if (R > 0) args.rope = rope.view(DType::bf16, {T, R});
    args.slot_mapping = slot_mapping.view(DType::i32, {T});
    args.kv_cache = kv_cache.view(cache_dtype, {num_blocks, bs, cache_last});
    args.rope_dim = rope_dim;
    StageReport stage = runner.run(plan.kv_store, args, progress);
    kv_cache.download();
    ErrorSum error;
    float got[kQkDim], want[kQkDim];
    if (!plan.kv_store.is_oracle()) {
      WorkBuffer ref(kv_cache.bytes(), Device{});
      KvStoreArgs host = args;
      host.latent = latent.host_view(DType::bf16, {T, kLatentDim});
      if (R > 0) host.rope = rope.host_view(DType::bf16, {T, R});
      host.slot_mapping = slot_mapping.host_view(DType::i32, {T});
      host.kv_cache = ref.host_view(cache_dtype, {num_blocks, bs, cache_last});
      run_oracle(context, host, "the check of kv_store");
      for (int64_t s = 0; s < z.slots; ++s) {
        decode_mla_token(kv_cache, format, rope_dim, s, got);
        decode_mla_token(ref, format, rope_dim, s, want);
        for (int64_t i = 0; i < qk; ++i) error.add(got[i], want[i]);
      }
      stage.check = "decoded cache vs cpu.reference";
      stage.tolerance = 1e-6;
    } else {
      // The oracle itself: compare with the inputs (exact for bf16, the fp8 bound otherwise);
      // a slot no token was written to must stay zero.
      const auto* lat = latent.host_as<uint16_t>();
      const auto* rp = rope.host_as<uint16_t>();
      for (int64_t s = 0; s < z.slots; ++s) {
        decode_mla_token(kv_cache, format, rope_dim, s, got);
        const int64_t t = token_of_slot[s];
        for (int i = 0; i < kLatentDim; ++i) want[i] = t < 0 ? 0.0f : bf16_to_float(lat[t * kLatentDim + i]);
        for (int64_t i = 0; i < R; ++i) want[kLatentDim + i] = t < 0 ? 0.0f : bf16_to_float(rp[t * R + i]);
        for (int64_t i = 0; i < qk; ++i) error.add(got[i], want[i]);
      }
      stage.check = "round trip vs the inputs";
      stage.tolerance = format == CacheFormat::bf16 ? 0.0 : 0.06;
    }
    stage.error = error.value();
    stage.passed = stage.error <= stage.tolerance;
    stage.rate = static_cast<double>(T) * (2.0 * qk + token_bytes + 4) / (stage.ms * 1e6);
    stage.rate_unit = "GB/s";
    report.stages.push_back(stage);
  }

  // 2. The indexer's keys into their e4m3 pages: indexer_k_store one row per token, or
  //    indexer_pool_store one row per complete pool of each request (and its pool state).
  if (!z.pooled()) {
    IndexerKStoreArgs args;
    args.k = index_k.view(DType::bf16, {T, kIndexDim});
    args.slot_mapping = slot_mapping.view(DType::i32, {T});
    args.k_cache = k_cache.view(DType::u8, {num_blocks, bs, kIndexBytesPerToken});
    StageReport stage = runner.run(plan.key_store, args, progress);
    k_cache.download();
    ErrorSum error;
    float got[kIndexDim], want[kIndexDim];
    if (!plan.key_store.is_oracle()) {
      WorkBuffer ref(k_cache.bytes(), Device{});
      IndexerKStoreArgs host = args;
      host.k = index_k.host_view(DType::bf16, {T, kIndexDim});
      host.slot_mapping = slot_mapping.host_view(DType::i32, {T});
      host.k_cache = ref.host_view(DType::u8, {num_blocks, bs, kIndexBytesPerToken});
      run_oracle(context, host, "the check of indexer_k_store");
      for (int64_t s = 0; s < z.slots; ++s) {
        decode_index_row(k_cache, key_rows_per_page, s, got);
        decode_index_row(ref, key_rows_per_page, s, want);
        for (int i = 0; i < kIndexDim; ++i) error.add(got[i], want[i]);
      }
      stage.check = "decoded pages vs cpu.reference";
      stage.tolerance = 1e-6;
    } else {
      const auto* k = index_k.host_as<uint16_t>();
      for (int64_t s = 0; s < z.slots; ++s) {
        decode_index_row(k_cache, key_rows_per_page, s, got);
        const int64_t t = token_of_slot[s];
        for (int i = 0; i < kIndexDim; ++i) want[i] = t < 0 ? 0.0f : bf16_to_float(k[t * kIndexDim + i]);
        for (int i = 0; i < kIndexDim; ++i) error.add(got[i], want[i]);
      }
      stage.check = "round trip vs the inputs";
      stage.tolerance = 0.06;
    }
    stage.error = error.value();
    stage.passed = stage.error <= stage.tolerance;
    stage.rate = static_cast<double>(T) * (2.0 * kIndexDim + kIndexBytesPerToken + 4) / (stage.ms * 1e6);
    stage.rate_unit = "GB/s";
    report.stages.push_back(stage);
  } else {
    // The stage's arguments on the run copies, or the oracle's on the host copies, writing
    // `pages` and `state`.
    const auto pool_store_args = [&](bool on_host, WorkBuffer& pages, WorkBuffer& state) {
      const auto view = [on_host](WorkBuffer& buffer, DType dtype, std::initializer_list<int64_t> shape) {
        return on_host ? buffer.host_view(dtype, shape) : buffer.view(dtype, shape);
      };
      IndexerPoolStoreArgs a;
      a.k = view(index_k, DType::bf16, {T, kIndexDim});
      a.gate = view(gate, DType::bf16, {T, kIndexDim});
      a.ape = view(ape, DType::f32, {kpool, kIndexDim});
      a.positions = view(positions, DType::i32, {T});
      a.token_request = view(token_request, DType::i32, {T});
      a.block_table = view(block_table, DType::i32, {B, blocks_per_request});
      a.k_cache = view(pages, DType::u8, {num_blocks, bs / kpool, kIndexBytesPerToken});
      a.pool_state = view(state, DType::f32, {B, kpool - 1, 2, kIndexDim});
      a.kpool = static_cast<int>(kpool);
      return a;
    };
    const IndexerPoolStoreArgs args = pool_store_args(false, k_cache, pool_state);
    // The timed runs write the same bytes each: every pool's tokens are in the call.
    StageReport stage = runner.run(plan.key_store, args, progress);
    k_cache.download();
    pool_state.download();
    if (!plan.key_store.is_oracle()) {
      // The oracle on host copies, from the same new (zero) state.
      WorkBuffer ref(k_cache.bytes(), Device{});
      WorkBuffer ref_state(pool_state.bytes(), Device{});
      run_oracle(context, pool_store_args(true, ref, ref_state), "the check of indexer_pool_store");
      ErrorSum error;
      float got[kIndexDim], want[kIndexDim];
      for (int64_t row = 0; row < z.key_rows(); ++row) {
        decode_index_row(k_cache, key_rows_per_page, row, got);
        decode_index_row(ref, key_rows_per_page, row, want);
        for (int i = 0; i < kIndexDim; ++i) error.add(got[i], want[i]);
      }
      const int64_t values = static_cast<int64_t>(pool_state.bytes() / 4);
      int64_t state_diff = 0;  // pool_state holds f32 copies of bf16 inputs: exact
      for (int64_t i = 0; i < values; ++i)
        state_diff += std::memcmp(pool_state.host() + i * 4, ref_state.host() + i * 4, 4) != 0;
      stage.check = state_diff ? fmt::format("decoded pool pages + pool_state vs cpu.reference: pool_state "
                                             "differs in {} of {} values", state_diff, values)
                               : std::string("decoded pool pages + pool_state vs cpu.reference");
      stage.error = state_diff ? std::numeric_limits<double>::infinity() : error.value();
      stage.tolerance = 1e-6;
      stage.passed = stage.error <= stage.tolerance;
    } else {
      stage.check = "none: cpu.reference is the oracle";
      stage.passed = true;
    }
    stage.rate = (static_cast<double>(T) * (4.0 * kIndexDim + 8) +
                  static_cast<double>(B * (L / kpool)) * kIndexBytesPerToken) / (stage.ms * 1e6);
    stage.rate_unit = "GB/s";
    report.stages.push_back(stage);
  }

  // 3. indexer_topk: each request's decode token (position L-1) picks its topk tokens, or with
  //    the pooled indexer its best pools' tokens and the tail, each row's length in out_lens.
  WorkBuffer index_q(z.index_q(), dev);
  WorkBuffer q_scale(z.per_index_head(), dev);
  WorkBuffer weights(z.per_index_head(), dev);
  WorkBuffer visible(z.per_request(), dev);
  WorkBuffer indices(z.indices(), dev);
  WorkBuffer out_lens(z.out_lens(), dev);  // empty for the per-token indexer
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
    out_lens.fill_device(0xFF);
  }
  {
    IndexerTopkArgs args;
    args.in.q = index_q.view(DType::e4m3, {B, Hi, kIndexDim});
    args.in.q_scale = q_scale.view(DType::f32, {B, Hi});
    args.in.weights = weights.view(DType::f32, {B, Hi});
    args.in.k_cache = k_cache.view(DType::u8, {num_blocks, bs / kpool, kIndexBytesPerToken});
    args.in.block_table = block_table.view(DType::i32, {B, blocks_per_request});
    args.in.visible_lens = visible.view(DType::i32, {B});
    args.indices = indices.view(DType::i32, {B, K});
    args.kind = IndexKind::physical;
    if (z.pooled()) {
      args.in.kpool = static_cast<int>(kpool);
      args.pool_topk = static_cast<int>(z.pool_topk);
      args.select_tail = z.tail;
      args.out_lens = out_lens.view(DType::i32, {B});
    }
    StageReport stage = runner.run(plan.indexer_topk, args, progress);
    indices.download();
    out_lens.download();
    if (progress) progress("checking indexer_topk against cpu.reference logits");
    WorkBuffer logits(z.logits(), Device{});
    IndexerLogitsArgs ref;
    ref.in = args.in;
    ref.in.q = index_q.host_view(DType::e4m3, {B, Hi, kIndexDim});
    ref.in.q_scale = q_scale.host_view(DType::f32, {B, Hi});
    ref.in.weights = weights.host_view(DType::f32, {B, Hi});
    ref.in.k_cache = k_cache.host_view(DType::u8, {num_blocks, bs / kpool, kIndexBytesPerToken});
    ref.in.block_table = block_table.host_view(DType::i32, {B, blocks_per_request});
    ref.in.visible_lens = visible.host_view(DType::i32, {B});
    ref.logits = logits.host_view(DType::f32, {B, z.units});
    run_oracle(context, ref, "the check of indexer_topk");
    check_topk(z, indices, out_lens, logits, token_of_slot, stage);
    stage.rate = static_cast<double>(B * z.units * kIndexBytesPerToken) / (stage.ms * 1e6);
    stage.rate_unit = "GB/s";
    report.stages.push_back(stage);
  }

  // 4. sparse_mla over the chosen slots (rows without rope when the model has none; with the
  //    pooled indexer each row's length from out_lens).
  {
    WorkBuffer q(z.q(), dev);
    WorkBuffer out(z.out(), dev);
    WorkBuffer lse(z.lse(), dev);
    fill_bf16(q, rng, 1.0f);
    q.upload();
    out.fill_device(0xFF);  // NaN poison: every element must be written
    SparseMlaArgs args;
    args.q = q.view(DType::bf16, {B, H, qk});
    args.kv_cache = kv_cache.view(cache_dtype, {num_blocks, bs, cache_last});
    args.indices = indices.view(DType::i32, {B, K});
    args.out = out.view(DType::bf16, {B, H, kLatentDim});
    args.lse = lse.view(DType::f32, {B, H});
    args.scale = static_cast<float>(model.softmax_scale);
    args.rope_dim = rope_dim;
    if (z.pooled()) args.topk_lens = out_lens.view(DType::i32, {B});
    StageReport stage = runner.run(plan.sparse_mla, args, progress);
    out.download();
    std::vector<std::string> checks;
    double worst = 0;
    if (!plan.sparse_mla.is_oracle()) {
      if (progress) progress("checking sparse_mla against cpu.reference");
      WorkBuffer ref_out(z.out(), Device{});
      SparseMlaArgs host = args;
      host.q = q.host_view(DType::bf16, {B, H, qk});
      host.kv_cache = kv_cache.host_view(cache_dtype, {num_blocks, bs, cache_last});
      host.indices = indices.host_view(DType::i32, {B, K});
      host.out = ref_out.host_view(DType::bf16, {B, H, kLatentDim});
      host.lse = TensorView{};
      if (z.pooled()) host.topk_lens = out_lens.host_view(DType::i32, {B});
      run_oracle(context, host, "the check of sparse_mla");
      worst = std::max(worst, bf16_relative_error(out, ref_out));
      checks.emplace_back("cpu.reference");
    }
    if (z.dense_oracle()) {
      // The equality oracle (docs/design.md, section 2.2): with every visible token selected,
      // sparse == dense.
      if (progress) progress("checking sparse_mla against dense MLA (equality oracle)");
      WorkBuffer dense_out(z.out(), Device{});
      WorkBuffer seq_lens(z.per_request(), Device{});
      for (int64_t b = 0; b < B; ++b) seq_lens.host_as<int32_t>()[b] = static_cast<int32_t>(L);
      MlaDecodeArgs dense;
      dense.q = q.host_view(DType::bf16, {B, 1, H, kQkDim});
      dense.kv_cache = kv_cache.host_view(cache_dtype, {num_blocks, bs, cache_last});
      dense.block_table = block_table.host_view(DType::i32, {B, blocks_per_request});
      dense.seq_lens = seq_lens.host_view(DType::i32, {B});
      dense.out = dense_out.host_view(DType::bf16, {B, 1, H, kLatentDim});
      dense.scale = args.scale;
      run_oracle(context, dense, "the dense oracle of sparse_mla");
      worst = std::max(worst, bf16_relative_error(out, dense_out));
      checks.emplace_back("dense MLA oracle");
    }
    if (checks.empty()) {
      stage.check = R > 0 ? "none: cpu.reference is the oracle; use --context <= topk for the dense oracle"
                          : "none: cpu.reference is the oracle (no dense oracle: mla_decode has rope, this model none)";
      stage.passed = true;
    } else {
      stage.check = fmt::format("{}", fmt::join(checks, " + "));
      stage.error = worst;
      stage.tolerance = 1e-2;
      stage.passed = worst <= stage.tolerance;
    }
    const double flops = 2.0 * static_cast<double>(B * H * z.attended()) * (qk + kLatentDim);
    stage.rate = flops / (stage.ms * 1e9);
    stage.rate_unit = "TFLOP/s";
    report.stages.push_back(stage);
  }

  report.passed = std::all_of(report.stages.begin(), report.stages.end(),
                              [](const StageReport& s) { return s.passed; });
  return report;
}

}  // namespace latte::workload
