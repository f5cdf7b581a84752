// Hugging Face config.json -> ModelSpec (docs/design.md, sections 2.1 and 7), and the compiled-in
// presets.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/json_text.hpp"
#include "core/text.hpp"
#include "latte/error.hpp"
#include "latte/spec.hpp"

namespace latte::detail {
extern const std::vector<std::pair<std::string_view, std::string_view>> kModelPresets;
}  // namespace latte::detail

namespace latte {
namespace {

using nlohmann::json;

// How every error about a config starts.
std::string config_subject(std::string_view source) { return fmt::format("model config {}", source); }

class ConfigReader {
 public:
  ConfigReader(const json& root, std::string_view source) : root_(root), source_(source) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw Error(ErrorCode::config_error,
                fmt::format("{}: {}; fix the config.json (or pick a preset: {})",
                            config_subject(source_), key.empty() ? what : fmt::format("\"{}\" {}", key, what),
                            detail::join(model_preset_names(), ", ")));
  }

  const json* find(const json& object, const std::string& key) const {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return nullptr;
    return &*it;
  }

  // A positive integer (integral floats such as 64.0 are accepted: some exporters write them).
  int positive_int(const json& object, const std::string& key, const std::string& path) const {
    const json* value = find(object, key);
    if (!value) fail(path, "is missing; latte needs it to size the attention");
    return positive_int_value(*value, path);
  }

  std::optional<int> optional_positive_int(const json& object, const std::string& key,
                                           const std::string& path) const {
    const json* value = find(object, key);
    if (!value) return std::nullopt;
    return positive_int_value(*value, path);
  }

  // A positive integer or 0 (qk_rope_head_dim: 0 for attention without rope).
  int non_negative_int(const json& object, const std::string& key, const std::string& path) const {
    const json* value = find(object, key);
    if (!value) fail(path, "is missing; latte needs it to size the attention");
    if (value->is_number() && value->get<double>() == 0.0) return 0;
    const bool number = value->is_number();
    if (!number || value->get<double>() < 0) {
      fail(path, fmt::format("= {} must be a non-negative integer", detail::show_json(*value)));
    }
    return positive_int_value(*value, path);
  }

  std::optional<bool> optional_bool(const json& object, const std::string& key, const std::string& path) const {
    const json* value = find(object, key);
    if (!value) return std::nullopt;
    if (!value->is_boolean()) fail(path, fmt::format("= {} must be true or false", detail::show_json(*value)));
    return value->get<bool>();
  }

  int positive_int_value(const json& value, const std::string& path) const {
    constexpr double kLimit = 1 << 30;
    double number = 0;
    if (value.is_number_unsigned()) {
      number = static_cast<double>(value.get<uint64_t>());
    } else if (value.is_number_integer()) {
      number = static_cast<double>(value.get<int64_t>());
    } else if (value.is_number_float()) {
      number = value.get<double>();
    } else {
      fail(path, fmt::format("= {} must be a positive integer", detail::show_json(value)));
    }
    if (!std::isfinite(number) || number != std::floor(number) || number <= 0 || number > kLimit) {
      fail(path, fmt::format("= {} must be a positive integer below 2^30", detail::show_json(value)));
    }
    return static_cast<int>(number);
  }

  double positive_number(const json& object, const std::string& key, const std::string& path) const {
    const json* value = find(object, key);
    if (!value) fail(path, "is missing");
    if (!value->is_number() || !std::isfinite(value->get<double>()) || value->get<double>() <= 0) {
      fail(path, fmt::format("= {} must be a positive number", detail::show_json(*value)));
    }
    return value->get<double>();
  }

  std::optional<double> optional_number(const json& object, const std::string& key,
                                        const std::string& path) const {
    const json* value = find(object, key);
    if (!value) return std::nullopt;
    if (!value->is_number() || !std::isfinite(value->get<double>())) {
      fail(path, fmt::format("= {} must be a number", detail::show_json(*value)));
    }
    return value->get<double>();
  }

  std::string optional_string(const json& object, const std::string& key, const std::string& path) const {
    const json* value = find(object, key);
    if (!value) return {};
    if (!value->is_string()) fail(path, fmt::format("= {} must be a string", detail::show_json(*value)));
    return value->get<std::string>();
  }

  const json& root() const { return root_; }
  std::string_view source() const { return source_; }

 private:
  const json& root_;
  std::string_view source_;
};

// The rope block: newer transformers write "rope_parameters" (with rope_theta inside), older
// ones "rope_scaling". Sets rope_type, rope_factor and the softmax scale (yarn mscale included);
// the head dims must be read already.
void read_rope(const ConfigReader& reader, const json& text, const std::string& at, ModelSpec& spec) {
  const double base_scale = std::pow(static_cast<double>(spec.qk_nope_head_dim + spec.qk_rope_head_dim), -0.5);
  spec.softmax_scale = base_scale;
  std::string key = at + "rope_parameters";
  const json* rope = reader.find(text, "rope_parameters");
  if (!rope) {
    key = at + "rope_scaling";
    rope = reader.find(text, "rope_scaling");
  }
  spec.rope_type = "default";
  spec.rope_factor = 1.0;
  if (!rope) return;
  if (!rope->is_object()) {
    reader.fail(key, fmt::format("= {} must be an object such as {{\"rope_type\": \"yarn\", \"factor\": 40}}", detail::show_json(*rope)));
  }
  std::string type = reader.optional_string(*rope, "rope_type", key + ".rope_type");
  if (type.empty()) type = reader.optional_string(*rope, "type", key + ".type");
  if (type.empty()) {
    reader.fail(key, "has no \"rope_type\" (or \"type\"); write \"default\" or \"yarn\"");
  }
  static const std::vector<std::string> known = {"default", "linear", "dynamic", "yarn",
                                                 "deepseek_yarn", "llama3", "longrope"};
  if (std::find(known.begin(), known.end(), type) == known.end()) {
    reader.fail(key + ".rope_type", fmt::format("= \"{}\" is not a rope type latte knows ({})", type, detail::join(known, ", ")));
  }
  spec.rope_type = type == "deepseek_yarn" ? "yarn" : type;
  if (type == "default") return;
  spec.rope_factor = reader.positive_number(*rope, "factor", key + ".factor");
  if (spec.rope_type == "yarn") {
    // DeepSeek's yarn: the softmax scale grows by mscale^2, mscale = 0.1 * m * ln(factor) + 1
    // with m = mscale_all_dim, when that is set and the context is actually stretched.
    const std::string path = key + ".mscale_all_dim";
    const auto all_dim = reader.optional_number(*rope, "mscale_all_dim", path);
    if (all_dim && *all_dim < 0) {
      reader.fail(path, fmt::format("= {} must be >= 0: yarn multiplies the softmax scale by mscale² with "
                                    "mscale = 0.1 · mscale_all_dim · ln(factor) + 1, and a negative value "
                                    "shrinks the scale or flips its sign; use the model's published value "
                                    "(DeepSeek-V3: 1.0) or 0 for no yarn scaling",
                                    *all_dim));
    }
    if (all_dim && *all_dim != 0.0 && spec.rope_factor > 1.0) {
      const double mscale = 0.1 * *all_dim * std::log(spec.rope_factor) + 1.0;
      spec.softmax_scale = base_scale * mscale * mscale;
      // Kernels take the scale as a float: one that overflows it would run as inf.
      if (!std::isfinite(static_cast<float>(spec.softmax_scale))) {
        reader.fail(path, fmt::format("= {} with factor {} gives mscale {:g} and a softmax scale of {:g}, "
                                      "beyond a float; real yarn configs give a scale near 0.1 "
                                      "(mscale_all_dim about 1, factor up to a few hundred): use the model's published values",
                                      *all_dim, spec.rope_factor, mscale, spec.softmax_scale));
      }
    }
  }
}

// Attention without rope: mla_use_nope (GLM-5.3-Flash's flag) and qk_rope_head_dim 0 must agree.
void read_nope(const ConfigReader& reader, const json& text, const std::string& at, ModelSpec& spec) {
  const std::optional<bool> use_nope = reader.optional_bool(text, "mla_use_nope", at + "mla_use_nope");
  if (use_nope.value_or(false) && spec.qk_rope_head_dim != 0) {
    reader.fail(at + "mla_use_nope",
                fmt::format("= true but qk_rope_head_dim is {}: attention without rope has no rope dims; "
                            "set qk_rope_head_dim to 0, or mla_use_nope to false",
                            spec.qk_rope_head_dim));
  }
  if (spec.qk_rope_head_dim == 0 && use_nope == false) {
    reader.fail(at + "qk_rope_head_dim",
                "= 0 (no rope dims) but mla_use_nope is false; set mla_use_nope to true for attention "
                "without rope, or qk_rope_head_dim to the rope dims (64)");
  }
  spec.nope = spec.qk_rope_head_dim == 0;
}

// The pooled indexer's fields (GLM-5.3-Flash: index_kpool 4, compress, always select the tail).
// glm5_next configs must state index_kpool: its config class defaults to 16 where the released
// checkpoint says 4, so a config without it cannot be read either way with confidence.
void read_kpool(const ConfigReader& reader, const json& text, const std::string& at, const std::string& model_type,
                IndexerSpec& indexer) {
  const auto kpool = reader.optional_positive_int(text, "index_kpool", at + "index_kpool");
  if (!kpool && model_type == "glm5_next") {
    reader.fail(at + "index_kpool",
                "is missing from a glm5_next config; its indexer scores pools of index_kpool tokens (the "
                "released GLM-5.3-Flash says 4): write the checkpoint's value");
  }
  indexer.kpool = kpool.value_or(0);
  indexer.kpool_compress = reader.optional_bool(text, "index_kpool_compress", at + "index_kpool_compress").value_or(false);
  indexer.kpool_always_select_tail =
      reader.optional_bool(text, "index_kpool_always_select_tail", at + "index_kpool_always_select_tail").value_or(false);
}

constexpr std::string_view kDsaLayer = "deepseek_sparse_attention";  // MLA + indexer: latte's
// transformers normalizes the attention layers' names when it loads a config (vLLM hands latte
// that form): "indexed_attention" for a DSA layer, "full_attention" before normalization.
constexpr std::string_view kIndexedLayer = "indexed_attention";
constexpr std::string_view kFullLayer = "full_attention";
constexpr std::string_view kLinearLayer = "linear_attention";        // not latte's

// Which layers are MLA (latte's): layer_types when the config lists them (hybrid models), else
// every layer. A linear_attn_config.full_attn_layers list, when present, must name the same.
void read_layers(const ConfigReader& reader, const json& text, const std::string& at, ModelSpec& spec) {
  spec.num_layers = reader.optional_positive_int(text, "num_hidden_layers", at + "num_hidden_layers").value_or(0);
  if (reader.find(text, "num_nextn_predict_layers")) {
    spec.mtp_layers = reader.non_negative_int(text, "num_nextn_predict_layers", at + "num_nextn_predict_layers");
  }
  const std::string key = at + "layer_types";
  const json* types = reader.find(text, "layer_types");
  if (!types) {
    for (int i = 0; i < spec.num_layers; ++i) spec.mla_layers.push_back(i);
    return;
  }
  if (!types->is_array()) reader.fail(key, fmt::format("= {} must be a list of layer types", detail::show_json(*types)));
  const auto count = static_cast<int64_t>(types->size());
  if (spec.num_layers != 0 && count != spec.num_layers) {
    reader.fail(key, fmt::format("has {} entries but num_hidden_layers is {}: give one type per layer", count,
                                 spec.num_layers));
  }
  if (count == 0 || count > (1 << 20)) reader.fail(key, fmt::format("has {} entries; expected one per layer", count));
  spec.num_layers = static_cast<int>(count);
  for (int i = 0; i < spec.num_layers; ++i) {
    const json& type = (*types)[static_cast<std::size_t>(i)];
    const std::string path = fmt::format("{}[{}]", key, i);
    if (!type.is_string()) reader.fail(path, fmt::format("= {} must be a string", detail::show_json(type)));
    const std::string name = type.get<std::string>();
    if (name == kDsaLayer || name == kIndexedLayer || name == kFullLayer) {
      if (name != kFullLayer && !spec.is_dsa()) {
        reader.fail(path, fmt::format("= \"{}\" but the config has no index_topk: a DSA layer needs the "
                                      "indexer's fields (index_n_heads, index_head_dim, index_topk)",
                                      name));
      }
      spec.mla_layers.push_back(i);
    } else if (name != kLinearLayer) {
      reader.fail(path, fmt::format("= \"{}\" is not a layer type latte knows: {} or {} (MLA with the DSA "
                                    "indexer, which latte computes), {} (MLA), or {} (which latte does not)",
                                    name, kDsaLayer, kIndexedLayer, kFullLayer, kLinearLayer));
    }
  }
  if (spec.mla_layers.empty()) {
    reader.fail(key, fmt::format("names no {} layer, so latte has nothing to compute in this model", kDsaLayer));
  }
  const json* linear = reader.find(text, "linear_attn_config");
  const json* full = linear && linear->is_object() ? reader.find(*linear, "full_attn_layers") : nullptr;
  if (!full) return;
  const std::string full_key = at + "linear_attn_config.full_attn_layers";
  if (!full->is_array()) reader.fail(full_key, fmt::format("= {} must be a list of layer indices", detail::show_json(*full)));
  bool same = full->size() == spec.mla_layers.size();
  for (std::size_t i = 0; i < full->size(); ++i) {
    const json& v = (*full)[i];
    if (!v.is_number_integer()) reader.fail(full_key, fmt::format("holds {}, not a layer index", detail::show_json(v)));
    same = same && v.get<int64_t>() == spec.mla_layers[i];
  }
  if (!same) {
    reader.fail(full_key, fmt::format("= {} disagrees with layer_types, whose {} layers are [{}]; fix one of them",
                                      detail::show_json(*full), kDsaLayer, detail::join(spec.mla_layers, ", ", [](int l) {
                                        return std::to_string(l);
                                      })));
  }
}

void apply_deployment(ModelSpec& spec, const Deployment& deployment, std::string_view source) {
  if (deployment.tp < 1) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("tensor-parallel size {} is not valid for {}: use a positive divisor of "
                            "its {} attention heads",
                            deployment.tp, source, spec.num_heads));
  }
  if (spec.num_heads % deployment.tp != 0) {
    std::vector<std::string> divisors;
    for (int d = 1; d <= spec.num_heads; ++d) {
      if (spec.num_heads % d == 0) divisors.push_back(std::to_string(d));
    }
    throw Error(ErrorCode::invalid_argument,
                fmt::format("tensor-parallel size {} does not divide the {} attention heads of {}: "
                            "heads are split evenly across ranks; use tp = {}",
                            deployment.tp, spec.num_heads, source, detail::join(divisors, ", ")));
  }
  if (deployment.block_size < 1 || deployment.block_size > (1 << 20)) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("KV-cache block size {} is not valid: use a positive number of tokens "
                            "per block such as 64",
                            deployment.block_size));
  }
  spec.tp = deployment.tp;
  spec.heads_per_rank = spec.num_heads / deployment.tp;
  spec.kv_cache = deployment.kv_cache;
  spec.block_size = deployment.block_size;
}

std::string read_file(const std::filesystem::path& path) {
  auto text = detail::read_json_file(path, config_subject(path.string()), ErrorCode::config_error);
  if (!text) {
    throw Error(ErrorCode::not_found, fmt::format("cannot read model config {}", path.string()));
  }
  return std::move(*text);
}

}  // namespace

ModelSpec parse_model_config(std::string_view json_text, std::string_view source,
                             const Deployment& deployment) {
  const json root = detail::parse_json_input(json_text, config_subject(source), ErrorCode::config_error);
  const ConfigReader reader(root, source);
  if (!root.is_object()) {
    reader.fail("", fmt::format("the top level is {}, not a JSON object of config fields", root.type_name()));
  }

  ModelSpec spec;
  spec.name = std::string(source);
  spec.model_type = reader.optional_string(root, "model_type", "model_type");
  // A multimodal config (GLM-5.3-Flash's glm5_next) nests the language model's fields in
  // text_config; the others hold them at the top level.
  const json* text_config = reader.find(root, "text_config");
  if (text_config && !text_config->is_object()) {
    reader.fail("text_config", fmt::format("= {} must be an object of the language model's fields",
                                           detail::show_json(*text_config)));
  }
  const json& text = text_config ? *text_config : root;
  const std::string at = text_config ? "text_config." : "";
  spec.num_heads = reader.positive_int(text, "num_attention_heads", at + "num_attention_heads");
  spec.q_lora_rank = reader.optional_positive_int(text, "q_lora_rank", at + "q_lora_rank").value_or(0);
  spec.kv_lora_rank = reader.positive_int(text, "kv_lora_rank", at + "kv_lora_rank");
  spec.qk_nope_head_dim = reader.positive_int(text, "qk_nope_head_dim", at + "qk_nope_head_dim");
  spec.qk_rope_head_dim = reader.non_negative_int(text, "qk_rope_head_dim", at + "qk_rope_head_dim");
  spec.v_head_dim = reader.positive_int(text, "v_head_dim", at + "v_head_dim");
  read_nope(reader, text, at, spec);
  if (!reader.find(text, "max_position_embeddings")) {
    reader.fail(at + "max_position_embeddings",
                "is missing; latte needs the model's longest context (it bounds `latte run --context`): "
                "add it as in the model's published config.json, e.g. \"max_position_embeddings\": 163840");
  }
  spec.max_position_embeddings =
      reader.positive_int(text, "max_position_embeddings", at + "max_position_embeddings");

  // DSA: index_topk present. The indexer dims must come with it.
  if (const auto topk = reader.optional_positive_int(text, "index_topk", at + "index_topk")) {
    IndexerSpec indexer;
    indexer.topk = *topk;
    if (!reader.find(text, "index_n_heads")) {
      reader.fail(at + "index_n_heads", "is missing although index_topk is set (a DSA model needs "
                                        "index_n_heads, index_head_dim and index_topk)");
    }
    indexer.num_heads = reader.positive_int(text, "index_n_heads", at + "index_n_heads");
    if (!reader.find(text, "index_head_dim")) {
      reader.fail(at + "index_head_dim", "is missing although index_topk is set (a DSA model needs "
                                         "index_n_heads, index_head_dim and index_topk)");
    }
    indexer.head_dim = reader.positive_int(text, "index_head_dim", at + "index_head_dim");
    read_kpool(reader, text, at, spec.model_type, indexer);
    spec.indexer = indexer;
  } else if (reader.find(text, "index_n_heads") || reader.find(text, "index_head_dim")) {
    reader.fail(at + "index_topk", "is missing although index_n_heads/index_head_dim are set: without "
                                   "it latte cannot tell how many tokens each query attends to");
  }

  read_rope(reader, text, at, spec);
  read_layers(reader, text, at, spec);

  apply_deployment(spec, deployment, source);
  return spec;
}

std::string ModelSpec::coverage() const {
  std::string out;
  const int other_layers = num_layers - static_cast<int>(mla_layers.size());
  if (other_layers > 0) {
    const std::string layers = detail::join(mla_layers, ", ", [](int l) { return std::to_string(l); });
    const std::string mtp =
        mtp_layers > 0 ? fmt::format(" and of its {} MTP layer{}", mtp_layers, mtp_layers == 1 ? "" : "s") : "";
    out = fmt::format("{} is hybrid: latte computes the attention of its {} {} layer{} ({}){}; its other {} "
                      "layer{} are linear attention, which is not latte's.",
                      name, mla_layers.size(), is_dsa() ? "DSA" : "MLA", mla_layers.size() == 1 ? "" : "s",
                      layers, mtp, other_layers, other_layers == 1 ? "" : "s");
  }
  if (indexer && indexer->pooled()) {
    const std::string whose = out.empty() ? name + "'s" : " Its";
    if (indexer->pooled_in_latte()) {
      out += fmt::format("{} indexer scores pools of {} tokens (index_kpool {}): indexer_pool_store writes the pool "
                         "keys, indexer_topk selects pools and expands them to their tokens.",
                         whose, indexer->kpool, indexer->kpool);
    } else {
      out += fmt::format("{} indexer scores pools of {} tokens (index_kpool {}{}), which latte does not compute (it "
                         "computes index_kpool_compress pools of {}..{} tokens): latte serves its kv_store and "
                         "sparse_mla, the indices come from the engine.",
                         whose, indexer->kpool, indexer->kpool,
                         indexer->kpool_compress ? "" : " without index_kpool_compress", kMinKpool, kMaxKpool);
    }
  }
  return out;
}

std::vector<Op> ModelSpec::layer_ops() const {
  if (!is_dsa()) return {Op::kv_store, Op::mla_decode};
  if (indexer->pooled() && !indexer->pooled_in_latte()) return {Op::kv_store, Op::sparse_mla};
  if (indexer->pooled()) return {Op::kv_store, Op::indexer_pool_store, Op::indexer_topk, Op::sparse_mla};
  return {Op::kv_store, Op::indexer_k_store, Op::indexer_topk, Op::sparse_mla};
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : detail::kModelPresets) names.emplace_back(name);
  std::sort(names.begin(), names.end());  // the file glob's order is not guaranteed
  return names;
}

ModelSpec load_model(std::string_view name_or_path, const Deployment& deployment) {
  const std::string wanted = detail::lower(name_or_path);
  for (const auto& [name, text] : detail::kModelPresets) {
    if (name == wanted) return parse_model_config(text, name, deployment);
  }
  std::filesystem::path path{std::string(name_or_path)};
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) path /= "config.json";
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw Error(ErrorCode::not_found,
                fmt::format("unknown model '{}': it is not a preset ({}) and no config.json is at "
                            "that path; pass a preset name or the path of a Hugging Face "
                            "config.json (or its directory)",
                            name_or_path, detail::join(model_preset_names(), ", ")));
  }
  const std::string text = read_file(path);
  return parse_model_config(text, path.string(), deployment);
}

}  // namespace latte
