// libFuzzer harness for every input latte reads from users: model configs (config.json),
// policies, plugin capabilities JSON, device strings, force / exclude lists (LATTE_BACKEND,
// LATTE_EXCLUDE, --force, --exclude) and op arguments (tensor views checked by validate).
// LATTE_FUZZ_INPUT picks one kind (model_config, policy, capabilities, device, choice_list,
// op_args); unset, every input goes to every kind (handy to replay a crash file). A latte::Error
// is the expected answer to bad input; anything else (another exception, a crash, a sanitizer
// report, a broken invariant) is a bug.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/selector_impl.hpp"
#include "latte/backend.hpp"
#include "latte/capabilities.hpp"
#include "latte/device.hpp"
#include "latte/error.hpp"
#include "latte/policy.hpp"
#include "latte/spec.hpp"
#include "latte/validate.hpp"

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

void fuzz_model_config(std::string_view text, uint8_t variant) {
  latte::Deployment deployment;
  deployment.tp = 1 << (variant % 4);  // 1, 2, 4, 8: also exercises the TP check
  deployment.kv_cache = variant & 4 ? latte::CacheFormat::fp8_ds_mla : latte::CacheFormat::bf16;
  latte::ModelSpec model;
  try {
    model = latte::parse_model_config(text, "fuzz", deployment);
  } catch (const latte::Error&) {
    return;
  }
  // Kernels take the scale as a float.
  if (!(std::isfinite(static_cast<float>(model.softmax_scale)) && model.softmax_scale > 0)) broken("softmax scale");
  if (model.heads_per_rank * model.tp != model.num_heads) broken("heads per rank");
  if (model.max_position_embeddings < 1) broken("max_position_embeddings");
  for (latte::Op op : latte::all_ops()) {
    try {
      const latte::AttentionSpec spec = latte::attention_spec(model, op);
      if (spec.summary().empty()) broken("summary");
    } catch (const latte::Error&) {
    }
  }
}

latte::DeviceInfo sm90() {
  latte::DeviceInfo device;
  device.kind = latte::DeviceKind::cuda;
  device.arch_major = 9;
  return device;
}

void fuzz_policy(std::string_view text) {
  latte::Policy policy;
  try {
    policy = latte::Policy::parse(text, "fuzz", latte::PolicyLayer::user);
  } catch (const latte::Error&) {
    return;
  }
  // The canonical form must parse back to itself.
  const std::string canonical = policy.to_json();
  const latte::Policy again = latte::Policy::parse(canonical, "fuzz", latte::PolicyLayer::user);
  if (again.to_json() != canonical) broken("policy round trip");

  // Ranking is a permutation of the ids, whatever the rules say.
  latte::PolicyStack stack;
  stack.add(latte::Policy::builtin());
  stack.add(policy);
  latte::AttentionSpec spec;
  spec.num_heads = 8;
  spec.topk = 2048;
  spec.model = "glm-5";
  const std::vector<std::string> ids = {"cuda.sparse_mla", "hopper.sparse_mla", "cpu.reference", "acme.x"};
  if (stack.rank(ids, spec, sm90()).size() != ids.size()) broken("ranking");
}

std::vector<latte::AttentionSpec> probe_specs() {
  std::vector<latte::AttentionSpec> specs;
  for (latte::Op op : latte::all_ops()) {
    latte::AttentionSpec spec;
    spec.op = op;
    spec.num_heads = 64;
    spec.topk = 2048;
    spec.max_tokens = 128;
    specs.push_back(spec);
  }
  specs[0].kv_cache = latte::CacheFormat::fp8_ds_mla;
  return specs;
}

void fuzz_capabilities(std::string_view text) {
  latte::Capabilities caps;
  try {
    caps = latte::capabilities_from_json(std::string(text), "fuzz");
  } catch (const latte::Error&) {
    return;
  }
  // What latte writes (latte backends --json) reads back to the same capabilities.
  if (latte::capabilities_from_json(latte::capabilities_to_json(caps), "again") != caps) broken("capabilities round trip");
  latte::DeviceInfo cpu;
  for (const latte::DeviceInfo& device : {cpu, sm90()}) {
    for (const latte::AttentionSpec& spec : probe_specs()) {
      if (latte::check_declared(caps, spec, device).empty() != latte::declared_accepts(caps, spec, device)) {
        broken("declared_accepts disagrees with check_declared");
      }
    }
  }
}

void fuzz_device(std::string_view text) {
  latte::DeviceInfo info;
  try {
    info = latte::describe_device(text);
  } catch (const latte::Error&) {
    return;
  }
  if (info.label().empty()) broken("device label");
  if (info.kind == latte::DeviceKind::cuda && !info.probed) {
    // A described architecture is one of the list, and its name reads back to it.
    if (latte::described_arch_example(info.arch()).empty()) broken("described arch not in the list");
    if (!(latte::describe_device(latte::arch_name(info.arch())) == info)) broken("arch name round trip");
  }
}

class FuzzBackend final : public latte::Backend {
 public:
  FuzzBackend(std::string id, latte::Capabilities caps) {
    info_.id = std::move(id);
    info_.caps = std::move(caps);
  }
  const latte::BackendInfo& info() const override { return info_; }
  std::unique_ptr<latte::Kernel> make(const latte::AttentionSpec&, const latte::DeviceInfo&) const override {
    return nullptr;  // the selector never makes kernels
  }

 private:
  latte::BackendInfo info_;
};

// The first line is a force list, the rest an exclude list, as in LATTE_BACKEND / LATTE_EXCLUDE.
void fuzz_choice_list(std::string_view text) {
  static const std::vector<std::shared_ptr<const latte::Backend>> backends = [] {
    latte::Capabilities attention;
    attention.ops = {latte::Op::sparse_mla, latte::Op::mla_decode};
    attention.devices = {latte::DeviceKind::cuda, latte::DeviceKind::cpu};
    latte::Capabilities store = attention;
    store.ops = {latte::Op::kv_store};
    return std::vector<std::shared_ptr<const latte::Backend>>{
        std::make_shared<FuzzBackend>("cpu.reference", attention),
        std::make_shared<FuzzBackend>("cuda.sparse_mla", attention),
        std::make_shared<FuzzBackend>("cuda.kv_store", store),
        std::make_shared<FuzzBackend>("hopper.sparse_mla", attention)};
  }();
  static const latte::PolicyStack policies = [] {
    latte::PolicyStack stack;
    stack.add(latte::Policy::builtin());
    return stack;
  }();
  const std::size_t newline = std::min(text.find('\n'), text.size());
  const std::string force(text.substr(0, newline));
  const std::string exclude(text.substr(std::min(newline + 1, text.size())));
  latte::detail::Decision decision;
  try {
    const auto f = latte::detail::parse_choice_entries({force}, "LATTE_BACKEND");
    const auto x = latte::detail::parse_choice_entries({exclude}, "LATTE_EXCLUDE");
    for (const auto& entry : f) {
      if (entry.glob.empty()) broken("empty glob accepted");
    }
    latte::AttentionSpec spec;
    spec.num_heads = 64;
    spec.topk = 2048;
    decision = latte::detail::decide(backends, policies, spec, sm90(), f, x);
  } catch (const latte::Error&) {
    return;
  }
  // Every backend is either valid or rejected, and the chosen one is the first valid one.
  const latte::Selection& s = decision.selection;
  if (s.valid.size() + s.rejected.size() != backends.size()) broken("valid + rejected != backends");
  if (s.valid.empty() != s.chosen.empty()) broken("chosen without valid");
  if (!s.valid.empty() && s.valid.front().id != s.chosen) broken("chosen is not the first valid");
}

// ---- op arguments -----------------------------------------------------------------------

// Bytes read as records that change one field of a valid call, so that the fuzzer explores the
// neighbourhood of valid calls rather than random tensors that fail on the first check.
class Bytes {
 public:
  explicit Bytes(std::string_view data) : data_(data) {}
  [[nodiscard]] bool empty() const { return pos_ >= data_.size(); }
  uint8_t byte() { return pos_ < data_.size() ? static_cast<uint8_t>(data_[pos_++]) : 0; }
  int64_t number() {
    static constexpr int64_t kEdges[] = {0, 1, 2, 3, -1, -2, 7, 16, 63, 64, 65, 128, 132, 512, 576, 656,
                                         2048, 65536, 65537, int64_t{1} << 31, (int64_t{1} << 31) - 1,
                                         int64_t{1} << 62, INT64_MAX, INT64_MIN};
    const uint8_t b = byte();
    if (b < sizeof(kEdges) / sizeof(kEdges[0])) return kEdges[b];
    if (b < 200) return b - 100;  // small values around zero
    int64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | byte();
    return v;
  }

 private:
  std::string_view data_;
  std::size_t pos_ = 0;
};

// Distinct fake addresses: validate reads no data, but it compares addresses (aliasing).
void* address(int slot) { return reinterpret_cast<void*>(uintptr_t{0x100000000} * static_cast<uintptr_t>(slot + 1)); }

latte::TensorView view(int slot, latte::DType dtype, std::initializer_list<int64_t> shape) {
  return latte::TensorView::contiguous(address(slot), dtype, shape);
}

// Valid small calls of every op: T = 2 tokens, H = 8 heads, 4 blocks of 16 slots, batch 2.
latte::OpArgs valid_call(latte::Op op) {
  using latte::DType;
  latte::IndexerInputs in;
  in.q = view(0, DType::e4m3, {2, 4, 128});
  in.q_scale = view(1, DType::f32, {2, 4});
  in.weights = view(2, DType::f32, {2, 4});
  in.k_cache = view(3, DType::u8, {4, 16, 132});
  in.block_table = view(4, DType::i32, {2, 4});
  in.visible_lens = view(5, DType::i32, {2});
  switch (op) {
    case latte::Op::sparse_mla:
      return latte::SparseMlaArgs{view(0, DType::bf16, {2, 8, 576}), view(1, DType::bf16, {4, 16, 576}),
                                  view(2, DType::i32, {2, 64}), view(3, DType::bf16, {2, 8, 512}),
                                  view(4, DType::f32, {2, 8}), 0.0625f, {}};
    case latte::Op::mla_decode:
      return latte::MlaDecodeArgs{view(0, DType::bf16, {2, 1, 8, 576}), view(1, DType::bf16, {4, 16, 576}),
                                  view(2, DType::i32, {2, 4}), view(3, DType::i32, {2}),
                                  view(4, DType::bf16, {2, 1, 8, 512}), view(5, DType::f32, {2, 1, 8}), 0.0625f};
    case latte::Op::indexer_topk:
      return latte::IndexerTopkArgs{in, view(6, DType::i32, {2, 16}), latte::IndexKind::physical};
    case latte::Op::indexer_logits:
      return latte::IndexerLogitsArgs{in, view(6, DType::f32, {2, 64})};
    case latte::Op::kv_store:
      return latte::KvStoreArgs{view(0, DType::bf16, {2, 512}), view(1, DType::bf16, {2, 64}),
                                view(2, DType::i32, {2}), view(3, DType::bf16, {4, 16, 576}),
                                latte::Fp8ScaleKind::amax};
    case latte::Op::indexer_k_store:
      return latte::IndexerKStoreArgs{view(0, DType::bf16, {2, 128}), view(1, DType::i32, {2}),
                                      view(2, DType::u8, {4, 16, 132}), latte::Fp8ScaleKind::amax};
    case latte::Op::logical_to_slots:
      return latte::LogicalToSlotsArgs{view(0, DType::i32, {2, 8}), view(1, DType::i32, {2, 4}), {},
                                       view(2, DType::i32, {2, 8}), 16};
    case latte::Op::indexer_pool_store:  // kpool 4: pool pages of 4 rows, 16-token blocks
      return latte::IndexerPoolStoreArgs{view(0, DType::bf16, {2, 128}), view(1, DType::f32, {2, 128}),
                                         view(2, DType::f32, {4, 128}),  view(3, DType::i32, {2}),
                                         {},                            view(4, DType::i32, {2, 4}),
                                         view(5, DType::u8, {4, 4, 132}), view(6, DType::f32, {2, 3, 2, 128}),
                                         latte::Fp8ScaleKind::pow2,      true,
                                         4};
  }
  broken("unknown op");
}

// The tensor views of a call, optional ones included, and its scalar fields.
struct Fields {
  std::vector<latte::TensorView*> tensors;
  float* scale = nullptr;
  int* block_size = nullptr;
};

Fields fields_of(latte::OpArgs& args) {
  Fields f;
  const auto indexer = [&](latte::IndexerInputs& in) {
    f.tensors.insert(f.tensors.end(), {&in.q, &in.q_scale, &in.weights, &in.k_cache, &in.block_table,
                                       &in.token_request, &in.visible_lens});
  };
  if (auto* a = std::get_if<latte::SparseMlaArgs>(&args)) {
    f.tensors = {&a->q, &a->kv_cache, &a->indices, &a->out, &a->lse, &a->q_rope};
    f.scale = &a->scale;
  } else if (auto* a = std::get_if<latte::MlaDecodeArgs>(&args)) {
    f.tensors = {&a->q, &a->kv_cache, &a->block_table, &a->seq_lens, &a->out, &a->lse};
    f.scale = &a->scale;
  } else if (auto* a = std::get_if<latte::IndexerTopkArgs>(&args)) {
    indexer(a->in);
    f.tensors.push_back(&a->indices);
    f.tensors.push_back(&a->out_lens);
  } else if (auto* a = std::get_if<latte::IndexerLogitsArgs>(&args)) {
    indexer(a->in);
    f.tensors.push_back(&a->logits);
  } else if (auto* a = std::get_if<latte::KvStoreArgs>(&args)) {
    f.tensors = {&a->latent, &a->rope, &a->slot_mapping, &a->kv_cache};
  } else if (auto* a = std::get_if<latte::IndexerKStoreArgs>(&args)) {
    f.tensors = {&a->k, &a->slot_mapping, &a->k_cache};
  } else if (auto* a = std::get_if<latte::LogicalToSlotsArgs>(&args)) {
    f.tensors = {&a->positions, &a->block_table, &a->token_request, &a->slots};
    f.block_size = &a->block_size;
  } else if (auto* a = std::get_if<latte::IndexerPoolStoreArgs>(&args)) {
    f.tensors = {&a->k,           &a->gate,    &a->ape,        &a->positions,
                 &a->token_request, &a->block_table, &a->k_cache, &a->pool_state};
    f.block_size = &a->kpool;  // the int scalar fuzzed alike
  }
  return f;
}

void validate_or_error(const latte::OpArgs& args) {
  (void)latte::make_problem(args);
  (void)latte::common_device(args);
}

void fuzz_op_args(std::string_view text) {
  static const bool templates_valid = [] {
    for (latte::Op op : latte::all_ops()) {
      try {
        validate_or_error(valid_call(op));
      } catch (const latte::Error& e) {
        std::fprintf(stderr, "the fuzz template for %s is refused: %s\n", std::string(latte::to_string(op)).c_str(), e.what());
        std::abort();  // the harness would only fuzz refusals
      }
    }
    return true;
  }();
  (void)templates_valid;
  Bytes bytes(text);
  const std::vector<latte::Op>& ops = latte::all_ops();
  latte::OpArgs args = valid_call(ops[bytes.byte() % ops.size()]);
  Fields f = fields_of(args);
  while (!bytes.empty()) {
    const uint8_t what = bytes.byte();
    latte::TensorView& t = *f.tensors[bytes.byte() % f.tensors.size()];
    const std::size_t dim = bytes.byte() % latte::kMaxRank;
    switch (what % 10) {
      case 0: t.shape[dim] = bytes.number(); break;
      case 1: t.strides[dim] = bytes.number(); break;
      case 2: t.rank = static_cast<int>(bytes.number() % 9); break;  // -8 .. 8, kMaxRank is 6
      case 3: t.dtype = static_cast<latte::DType>(bytes.byte() % 6); break;
      case 4: t.data = nullptr; break;
      case 5: t.data = f.tensors[bytes.byte() % f.tensors.size()]->data; break;  // aliasing
      case 6:  // a view that starts inside an allocation
        t.data = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(t.data) + static_cast<uintptr_t>(bytes.number() % 4096));
        break;
      case 7: t.device = latte::Device{bytes.byte() % 2 ? latte::DeviceKind::cuda : latte::DeviceKind::cpu, bytes.byte() % 3}; break;
      case 8: if (f.scale) *f.scale = std::bit_cast<float>(static_cast<uint32_t>(bytes.number())); break;
      case 9: if (f.block_size) *f.block_size = static_cast<int>(bytes.number()); break;
    }
  }
  try {
    validate_or_error(args);
  } catch (const latte::Error&) {
  }
}

enum Kind { model_config, policy, capabilities, device, choice_list, op_args, all };
Kind g_kind = all;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* names[] = {"model_config", "policy", "capabilities", "device", "choice_list", "op_args"};
  const char* wanted = std::getenv("LATTE_FUZZ_INPUT");
  if (!wanted || !*wanted) return 0;
  for (int k = 0; k < all; ++k) {
    if (std::strcmp(wanted, names[k]) == 0) {
      g_kind = static_cast<Kind>(k);
      return 0;
    }
  }
  std::fprintf(stderr, "LATTE_FUZZ_INPUT=%s is not an input kind; use model_config, policy, capabilities, "
                       "device, choice_list or op_args (or leave it unset for all)\n", wanted);
  std::exit(2);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (g_kind == model_config || g_kind == all) fuzz_model_config(text, size ? data[size - 1] : 0);
  if (g_kind == policy || g_kind == all) fuzz_policy(text);
  if (g_kind == capabilities || g_kind == all) fuzz_capabilities(text);
  if (g_kind == device || g_kind == all) fuzz_device(text);
  if (g_kind == choice_list || g_kind == all) fuzz_choice_list(text);
  if (g_kind == op_args || g_kind == all) fuzz_op_args(text);
  return 0;
}
