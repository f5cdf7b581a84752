// Model presets parsed with their exact dims and softmax scales; TP; attention specs per op;
// and a table of malformed configs, each with the message it must give.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "latte/error.hpp"
#include "latte/spec.hpp"

namespace latte {
namespace {

using ::testing::HasSubstr;

struct Preset {
  const char* name;
  int heads, q_lora, nope, rope, v, index_heads, index_topk;
  int64_t max_pos;
  const char* rope_type;
  double factor;
};
void PrintTo(const Preset& p, std::ostream* os) { *os << p.name; }

double yarn_scale(double factor) {
  const double m = 0.1 * std::log(factor) + 1.0;
  return std::pow(192.0, -0.5) * m * m;
}

class Presets : public ::testing::TestWithParam<Preset> {};

TEST_P(Presets, ParseWithExactDims) {
  const Preset& p = GetParam();
  const ModelSpec m = load_model(p.name);
  EXPECT_EQ(m.name, p.name);
  EXPECT_EQ(m.num_heads, p.heads);
  EXPECT_EQ(m.q_lora_rank, p.q_lora);
  EXPECT_EQ(m.kv_lora_rank, 512);
  EXPECT_EQ(m.qk_nope_head_dim, p.nope);
  EXPECT_EQ(m.qk_rope_head_dim, p.rope);
  EXPECT_EQ(m.v_head_dim, p.v);
  EXPECT_EQ(m.max_position_embeddings, p.max_pos);
  EXPECT_EQ(m.rope_type, p.rope_type);
  EXPECT_DOUBLE_EQ(m.rope_factor, p.factor);
  EXPECT_EQ(m.is_dsa(), p.index_heads > 0);
  if (p.index_heads > 0) {
    EXPECT_EQ(m.indexer->num_heads, p.index_heads);
    EXPECT_EQ(m.indexer->head_dim, 128);
    EXPECT_EQ(m.indexer->topk, p.index_topk);
  }
  EXPECT_EQ(m.tp, 1);
  EXPECT_EQ(m.heads_per_rank, p.heads);
}

INSTANTIATE_TEST_SUITE_P(
    All, Presets,
    ::testing::Values(Preset{"glm-5", 64, 2048, 192, 64, 256, 32, 2048, 202752, "default", 1.0},
                      Preset{"deepseek-v3.2", 128, 1536, 128, 64, 128, 64, 2048, 163840, "yarn", 40.0},
                      Preset{"deepseek-v3", 128, 1536, 128, 64, 128, 0, 0, 163840, "yarn", 40.0},
                      Preset{"kimi-k2", 64, 1536, 128, 64, 128, 0, 0, 131072, "yarn", 32.0},
                      Preset{"glm-5.3-flash", 64, 1536, 256, 0, 256, 32, 2048, 1048576, "default", 1.0}));

TEST(ModelSpec, SoftmaxScales) {
  EXPECT_EQ(load_model("glm-5").softmax_scale, 0.0625);  // exactly 1/sqrt(256)
  EXPECT_EQ(load_model("glm-5.3-flash").softmax_scale, 0.0625);  // 256 nope dims, no rope: 1/16
  EXPECT_NEAR(load_model("deepseek-v3.2").softmax_scale, 0.13523, 5e-6);
  EXPECT_DOUBLE_EQ(load_model("deepseek-v3.2").softmax_scale, yarn_scale(40.0));
  EXPECT_DOUBLE_EQ(load_model("deepseek-v3").softmax_scale, yarn_scale(40.0));
  EXPECT_DOUBLE_EQ(load_model("kimi-k2").softmax_scale, yarn_scale(32.0));
  EXPECT_NEAR(load_model("kimi-k2").softmax_scale, 0.130861, 5e-6);
}

TEST(ModelSpec, PresetNamesAreCaseInsensitiveAndListed) {
  EXPECT_EQ(load_model("GLM-5").num_heads, 64);
  EXPECT_EQ(model_preset_names(),
            (std::vector<std::string>{"deepseek-v3", "deepseek-v3.2", "glm-5", "glm-5.3-flash", "kimi-k2"}));
}

TEST(ModelSpec, TensorParallelDividesHeads) {
  Deployment d;
  d.tp = 8;
  d.kv_cache = CacheFormat::fp8_ds_mla;
  d.block_size = 16;
  const ModelSpec m = load_model("glm-5", d);
  EXPECT_EQ(m.tp, 8);
  EXPECT_EQ(m.heads_per_rank, 8);
  EXPECT_EQ(m.kv_cache, CacheFormat::fp8_ds_mla);
  EXPECT_EQ(m.block_size, 16);
  d.tp = 3;
  try {
    (void)load_model("glm-5", d);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_THAT(e.what(), HasSubstr("tensor-parallel size 3 does not divide the 64 attention heads of glm-5"));
    EXPECT_THAT(e.what(), HasSubstr("use tp = 1, 2, 4, 8, 16, 32, 64"));
  }
  d.tp = 0;
  EXPECT_THROW((void)load_model("glm-5", d), Error);
  d.tp = 1;
  d.block_size = 0;
  EXPECT_THROW((void)load_model("glm-5", d), Error);
}

TEST(ModelSpec, RopeParametersAndRopeScalingAreBothRead) {
  const std::string base = R"("num_attention_heads": 16, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                               "qk_rope_head_dim": 64, "v_head_dim": 128, "max_position_embeddings": 4096)";
  const ModelSpec a = parse_model_config(
      "{" + base + R"(, "rope_parameters": {"rope_type": "yarn", "factor": 40, "mscale_all_dim": 1.0, "rope_theta": 1e4}})", "a");
  const ModelSpec b = parse_model_config(
      "{" + base + R"(, "rope_scaling": {"type": "yarn", "factor": 40, "mscale_all_dim": 1.0}})", "b");
  EXPECT_DOUBLE_EQ(a.softmax_scale, yarn_scale(40.0));
  EXPECT_DOUBLE_EQ(b.softmax_scale, yarn_scale(40.0));
  // mscale_all_dim scales the log term; absent, the scale is plain.
  const ModelSpec c = parse_model_config(
      "{" + base + R"(, "rope_scaling": {"type": "yarn", "factor": 40, "mscale_all_dim": 0.707}})", "c");
  const double m = 0.1 * 0.707 * std::log(40.0) + 1.0;
  EXPECT_DOUBLE_EQ(c.softmax_scale, std::pow(192.0, -0.5) * m * m);
  const ModelSpec d = parse_model_config("{" + base + R"(, "rope_scaling": {"type": "yarn", "factor": 40}})", "d");
  EXPECT_DOUBLE_EQ(d.softmax_scale, std::pow(192.0, -0.5));
  // A factor of 1 stretches nothing.
  const ModelSpec e = parse_model_config(
      "{" + base + R"(, "rope_scaling": {"type": "yarn", "factor": 1, "mscale_all_dim": 1}})", "e");
  EXPECT_DOUBLE_EQ(e.softmax_scale, std::pow(192.0, -0.5));
  const ModelSpec f = parse_model_config("{" + base + R"(, "rope_scaling": null, "q_lora_rank": null})", "f");
  EXPECT_EQ(f.rope_type, "default");
  EXPECT_EQ(f.q_lora_rank, 0);
  EXPECT_FALSE(f.is_dsa());
}

TEST(ModelSpec, LoadsAPathOrADirectory) {
  const auto dir = std::filesystem::temp_directory_path() / ("latte_model_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir / "config.json");
    out << R"({"num_attention_heads": 32, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
               "v_head_dim": 128, "index_topk": 1024, "index_n_heads": 16, "index_head_dim": 128,
               "max_position_embeddings": 4096})";
  }
  const ModelSpec by_file = load_model((dir / "config.json").string());
  const ModelSpec by_dir = load_model(dir.string());
  EXPECT_EQ(by_file.num_heads, 32);
  EXPECT_EQ(by_dir.indexer->topk, 1024);
  EXPECT_EQ(by_file.name, (dir / "config.json").string());
  std::filesystem::remove_all(dir);
  try {
    (void)load_model("glm-6");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_THAT(e.what(), HasSubstr("unknown model 'glm-6'"));
    EXPECT_THAT(e.what(), HasSubstr("deepseek-v3.2, glm-5, glm-5.3-flash, kimi-k2"));
  }
}

// A preset deployed at TP8 with an fp8_ds_mla cache.
ModelSpec at_tp8_fp8(const char* preset) {
  Deployment d;
  d.tp = 8;
  d.kv_cache = CacheFormat::fp8_ds_mla;
  return load_model(preset, d);
}

TEST(AttentionSpec, PerOperation) {
  const ModelSpec glm = at_tp8_fp8("glm-5");

  const AttentionSpec sparse = attention_spec(glm, Op::sparse_mla);
  EXPECT_EQ(sparse.num_heads, 8);
  EXPECT_EQ(sparse.tp, 8);
  EXPECT_EQ(sparse.head_dim, 576);
  EXPECT_EQ(sparse.head_dim_v, 512);
  EXPECT_EQ(sparse.topk, 2048);
  EXPECT_EQ(sparse.q_dtype, DType::bf16);
  EXPECT_EQ(sparse.kv_cache, CacheFormat::fp8_ds_mla);
  EXPECT_EQ(sparse.scale, 0.0625f);
  EXPECT_EQ(sparse.model, "glm-5");
  EXPECT_EQ(sparse.summary(),
            "sparse_mla H=8 (tp 8) d=576/512 q=bf16 cache=fp8_ds_mla block=64 topk=2048 scale=0.0625 model=glm-5");

  AttentionOptions options;
  options.s_q = 2;
  options.max_tokens = 256;
  const AttentionSpec decode = attention_spec(glm, Op::mla_decode, options);
  EXPECT_EQ(decode.topk, 0);
  EXPECT_EQ(decode.s_q, 2);
  EXPECT_EQ(decode.max_tokens, 256);

  // Index heads are not split by TP: every rank runs the whole indexer.
  options.index_q_dtype = DType::bf16;
  const AttentionSpec indexer = attention_spec(glm, Op::indexer_topk, options);
  EXPECT_EQ(indexer.num_heads, 32);
  EXPECT_EQ(indexer.head_dim, 128);
  EXPECT_EQ(indexer.topk, 2048);
  EXPECT_EQ(indexer.q_dtype, DType::bf16);
  EXPECT_EQ(indexer.s_q, 1);
  EXPECT_EQ(attention_spec(glm, Op::indexer_logits).topk, 0);

  const AttentionSpec store = attention_spec(glm, Op::kv_store);
  EXPECT_EQ(store.num_heads, 0);
  EXPECT_EQ(store.kv_cache, CacheFormat::fp8_ds_mla);
  EXPECT_EQ(store.block_size, 64);
  EXPECT_EQ(attention_spec(glm, Op::indexer_k_store).head_dim, 128);
}

TEST(AttentionSpec, DsaOpsOnADenseModelAreRefused) {
  const ModelSpec v3 = load_model("deepseek-v3");
  EXPECT_EQ(attention_spec(v3, Op::mla_decode).num_heads, 128);
  for (Op op : {Op::sparse_mla, Op::indexer_topk, Op::indexer_logits, Op::indexer_k_store}) {
    try {
      (void)attention_spec(v3, op);
      FAIL() << to_string(op);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_THAT(e.what(), HasSubstr("deepseek-v3 is dense MLA"));
    }
  }
  AttentionOptions bad;
  bad.s_q = 0;
  EXPECT_THROW((void)attention_spec(v3, Op::mla_decode, bad), Error);
}

// ---- GLM-5.3-Flash (glm5_next): MLA without rope, a pooled indexer, hybrid layers ----------

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const std::vector<int> kGlm53DsaLayers = {3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43};

void expect_glm53_flash(const ModelSpec& m) {
  EXPECT_EQ(m.model_type, "glm5_next");
  EXPECT_TRUE(m.nope);
  EXPECT_EQ(m.rope_dim(), 0);
  EXPECT_EQ(m.qk_rope_head_dim, 0);
  EXPECT_EQ(m.kv_lora_rank, 512);
  EXPECT_EQ(m.softmax_scale, 0.0625);
  ASSERT_TRUE(m.is_dsa());
  EXPECT_EQ(m.indexer->num_heads, 32);
  EXPECT_EQ(m.indexer->head_dim, 128);
  EXPECT_EQ(m.indexer->topk, 2048);
  EXPECT_EQ(m.indexer->kpool, 4);
  EXPECT_TRUE(m.indexer->kpool_compress);
  EXPECT_TRUE(m.indexer->kpool_always_select_tail);
  EXPECT_TRUE(m.indexer->pooled());
  EXPECT_EQ(m.indexer->attended_tokens(), 2051);  // 512 pools x 4 tokens + 3 tail tokens
  EXPECT_EQ(m.num_layers, 45);
  EXPECT_EQ(m.mla_layers, kGlm53DsaLayers);
  EXPECT_EQ(m.mtp_layers, 1);
  EXPECT_EQ(m.layer_ops(),
            (std::vector<Op>{Op::kv_store, Op::indexer_pool_store, Op::indexer_topk, Op::sparse_mla}));
}

// The preset, and the published config's architecture fields as a fixture (nested text_config,
// with the fields latte does not read: vision, MoE, linear attention), parse alike.
TEST(Glm53Flash, ThePresetAndTheGlm5NextFixtureParseAlike) {
  expect_glm53_flash(load_model("glm-5.3-flash"));
  const auto fixture = std::filesystem::path(LATTE_SOURCE_DIR) / "tests/core/data/glm5_next_config.json";
  const ModelSpec m = load_model(fixture.string());
  expect_glm53_flash(m);
  EXPECT_EQ(m.max_position_embeddings, load_model("glm-5.3-flash").max_position_embeddings);
  EXPECT_EQ(m.q_lora_rank, 1536);
}

TEST(Glm53Flash, CoverageNamesTheLayersLatteServesAndWhatIsMissing) {
  const ModelSpec m = load_model("glm-5.3-flash");
  EXPECT_EQ(m.coverage(),
            "glm-5.3-flash is hybrid: latte computes the attention of its 11 DSA layers (3, 7, 11, 15, 19, "
            "23, 27, 31, 35, 39, 43) and of its 1 MTP layer; its other 34 layers are linear attention, which "
            "is not latte's. Its indexer scores pools of 4 tokens (index_kpool 4): indexer_pool_store writes "
            "the pool keys, indexer_topk selects pools and expands them to their tokens.");
  for (const char* whole : {"glm-5", "deepseek-v3.2", "deepseek-v3", "kimi-k2"}) {
    EXPECT_EQ(load_model(whole).coverage(), "") << whole;
  }
  EXPECT_EQ(load_model("glm-5").layer_ops(),
            (std::vector<Op>{Op::kv_store, Op::indexer_k_store, Op::indexer_topk, Op::sparse_mla}));
  EXPECT_EQ(load_model("kimi-k2").layer_ops(), (std::vector<Op>{Op::kv_store, Op::mla_decode}));
}

TEST(Glm53Flash, AttentionSpecsHaveHeadDim512AndRefuseWhatLatteLacks) {
  const ModelSpec m = at_tp8_fp8("glm-5.3-flash");
  const AttentionSpec sparse = attention_spec(m, Op::sparse_mla);
  EXPECT_EQ(sparse.head_dim, 512);
  EXPECT_EQ(sparse.head_dim_v, 512);
  EXPECT_EQ(sparse.num_heads, 8);
  EXPECT_EQ(sparse.topk, 2051);
  EXPECT_EQ(sparse.scale, 0.0625f);
  EXPECT_FALSE(sparse.topk_lens);
  EXPECT_EQ(sparse.summary(),
            "sparse_mla H=8 (tp 8) d=512 (no rope) q=bf16 cache=fp8_ds_mla block=64 topk=2051 scale=0.0625 "
            "model=glm-5.3-flash");
  EXPECT_EQ(attention_spec(m, Op::kv_store).head_dim, 512);
  EXPECT_EQ(attention_spec(m, Op::logical_to_slots).topk, 2051);
  // The pooled indexer: token columns (512 pools x 4 + 3 tail) and kpool in the spec.
  const AttentionSpec topk = attention_spec(m, Op::indexer_topk);
  EXPECT_EQ(topk.topk, 2051);
  EXPECT_EQ(topk.kpool, 4);
  EXPECT_EQ(topk.num_heads, 32);
  EXPECT_EQ(topk.block_size, 64);  // tokens per block: the pool pages hold 16 rows
  EXPECT_EQ(topk.summary(), "indexer_topk H=32 d=128 q=e4m3 block=64 topk=2051 kpool=4 model=glm-5.3-flash");
  EXPECT_EQ(attention_spec(m, Op::indexer_logits).kpool, 4);
  EXPECT_EQ(attention_spec(m, Op::indexer_pool_store).kpool, 4);
  EXPECT_EQ(attention_spec(m, Op::indexer_pool_store).head_dim, 128);
  try {
    (void)attention_spec(m, Op::indexer_k_store);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_THAT(e.what(), HasSubstr("glm-5.3-flash has a pooled indexer (index_kpool 4): its keys are written per "
                                    "pool by indexer_pool_store"));
  }
  try {
    (void)attention_spec(load_model("glm-5"), Op::indexer_pool_store);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_THAT(e.what(), HasSubstr("glm-5 scores single tokens: its keys are written by indexer_k_store"));
  }
  try {
    (void)attention_spec(m, Op::mla_decode);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_THAT(e.what(), HasSubstr("glm-5.3-flash has no rope (qk_rope_head_dim 0): its attention is sparse_mla"));
  }
}

// A per-token DSA model without rope (no index_kpool; not glm5_next): its indexer ops stay latte's.
TEST(Glm53Flash, RopeDimZeroWithATokenIndexerKeepsTheIndexerOps) {
  const ModelSpec m = parse_model_config(
      R"({"num_attention_heads": 16, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 0,
          "v_head_dim": 128, "index_topk": 512, "index_n_heads": 8, "index_head_dim": 128,
          "max_position_embeddings": 4096})",
      "nope-token-indexer");
  EXPECT_TRUE(m.nope);
  EXPECT_FALSE(m.indexer->pooled());
  EXPECT_EQ(m.indexer->attended_tokens(), 512);
  EXPECT_EQ(attention_spec(m, Op::indexer_topk).topk, 512);
  EXPECT_EQ(attention_spec(m, Op::sparse_mla).head_dim, 512);
  EXPECT_EQ(m.coverage(), "");
  EXPECT_EQ(m.mla_layers, std::vector<int>{});  // no num_hidden_layers: not known
}

// A pooled indexer on a model latte serves every layer of: the coverage names the model.
TEST(Glm53Flash, CoverageOfAPooledIndexerAlone) {
  const ModelSpec m = parse_model_config(
      R"({"num_attention_heads": 16, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
          "v_head_dim": 128, "index_topk": 512, "index_n_heads": 8, "index_head_dim": 128, "index_kpool": 4,
          "num_hidden_layers": 2, "max_position_embeddings": 4096})",
      "pooled");
  EXPECT_EQ(m.mla_layers, (std::vector<int>{0, 1}));
  EXPECT_EQ(m.indexer->attended_tokens(), 512);  // no tail unless index_kpool_always_select_tail
  EXPECT_EQ(m.coverage(), "pooled's indexer scores pools of 4 tokens (index_kpool 4 without index_kpool_compress), "
                          "which latte does not compute (it computes index_kpool_compress pools of 2..16 tokens): "
                          "latte serves its kv_store and sparse_mla, the indices come from the engine.");
  EXPECT_EQ(m.layer_ops(), (std::vector<Op>{Op::kv_store, Op::sparse_mla}));
  for (Op op : {Op::indexer_topk, Op::indexer_logits, Op::indexer_pool_store}) {
    try {
      (void)attention_spec(m, op);
      FAIL() << to_string(op);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::unsupported);
      EXPECT_THAT(e.what(), HasSubstr("pooled pools index_kpool 4 tokens without index_kpool_compress"));
      EXPECT_THAT(e.what(), HasSubstr("latte serves this model's kv_store and sparse_mla"));
    }
  }
}

// ---- Malformed configs -------------------------------------------------------------------

struct BadConfig {
  const char* name;
  std::string json;
  const char* fragment;
};
void PrintTo(const BadConfig& c, std::ostream* os) { *os << c.name; }

std::string config_with(const std::string& replace_key, const std::string& value) {
  // A valid DSA config with one field replaced (value "" removes it).
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"num_attention_heads", "64"}, {"q_lora_rank", "2048"},     {"kv_lora_rank", "512"},
      {"qk_nope_head_dim", "192"},   {"qk_rope_head_dim", "64"},  {"v_head_dim", "256"},
      {"index_n_heads", "32"},       {"index_head_dim", "128"},   {"index_topk", "2048"},
      {"max_position_embeddings", "202752"}};
  std::string out = "{";
  for (const auto& [key, v] : fields) {
    const std::string& text = key == replace_key ? value : v;
    if (text.empty()) continue;
    out += (out.size() > 1 ? ", " : "") + ("\"" + key + "\": " + text);
  }
  if (replace_key.rfind("rope", 0) == 0) out += (out.size() > 1 ? ", " : "") + value;
  return out + "}";
}

// transformers names a config's attention layers its own way when it loads one (vLLM hands latte
// that form): "indexed_attention" for DSA layers, "full_attention" before normalization. Both are
// latte's layers, as "deepseek_sparse_attention" is; "linear_attention" is not.
TEST(ModelConfig, LayerTypesInTransformersNamesAreLattesLayers) {
  const ModelSpec all = parse_model_config(
      config_with("index_topk", "2048, \"layer_types\": [\"indexed_attention\", \"full_attention\", \"indexed_attention\"]"),
      "test");
  EXPECT_EQ(all.mla_layers, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(all.coverage().empty()) << all.coverage();
  const ModelSpec hybrid = parse_model_config(
      config_with("index_topk", "2048, \"layer_types\": [\"linear_attention\", \"indexed_attention\"]"), "test");
  EXPECT_EQ(hybrid.mla_layers, (std::vector<int>{1}));
  EXPECT_EQ(hybrid.num_layers, 2);
}

class MalformedConfigs : public ::testing::TestWithParam<BadConfig> {};

TEST_P(MalformedConfigs, GiveAClearMessage) {
  try {
    (void)parse_model_config(GetParam().json, "/models/x/config.json");
    FAIL() << "accepted: " << GetParam().json;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::config_error);
    EXPECT_THAT(e.what(), HasSubstr("/models/x/config.json"));
    EXPECT_THAT(e.what(), HasSubstr(GetParam().fragment));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, MalformedConfigs,
    ::testing::Values(
        BadConfig{"NotJson", "{\"num_attention_heads\": 64,", ": not valid JSON"},
        BadConfig{"Empty", "", ": not valid JSON"},
        BadConfig{"NumberOverflow", "{\"num_attention_heads\": 9e99999}", "number overflow"},  // found by the fuzzer
        BadConfig{"TopLevelArray", "[1, 2]", "the top level is array"},
        BadConfig{"MissingHeads", config_with("num_attention_heads", ""), "\"num_attention_heads\" is missing"},
        BadConfig{"HeadsAsString", config_with("num_attention_heads", "\"64\""), "\"num_attention_heads\" = \"64\" must be a positive integer"},
        BadConfig{"HeadsZero", config_with("num_attention_heads", "0"), "\"num_attention_heads\" = 0 must be a positive integer"},
        BadConfig{"HeadsNegative", config_with("num_attention_heads", "-8"), "= -8 must be a positive integer"},
        BadConfig{"HeadsFraction", config_with("num_attention_heads", "64.5"), "= 64.5 must be a positive integer"},
        BadConfig{"HeadsHuge", config_with("num_attention_heads", "99999999999"), "below 2^30"},
        BadConfig{"MissingKvLora", config_with("kv_lora_rank", ""), "\"kv_lora_rank\" is missing"},
        BadConfig{"RopeDimBool", config_with("qk_rope_head_dim", "true"), "\"qk_rope_head_dim\" = true"},
        BadConfig{"MissingVHeadDim", config_with("v_head_dim", ""), "\"v_head_dim\" is missing"},
        BadConfig{"QLoraString", config_with("q_lora_rank", "\"none\""), "\"q_lora_rank\" = \"none\""},
        BadConfig{"TopkWithoutIndexHeads", config_with("index_n_heads", ""), "\"index_n_heads\" is missing although index_topk is set"},
        BadConfig{"TopkWithoutIndexDim", config_with("index_head_dim", ""), "\"index_head_dim\" is missing although index_topk is set"},
        BadConfig{"IndexHeadsWithoutTopk", config_with("index_topk", ""), "\"index_topk\" is missing although index_n_heads"},
        BadConfig{"TopkZero", config_with("index_topk", "0"), "\"index_topk\" = 0"},
        BadConfig{"RopeNotObject", config_with("rope_scaling", "\"rope_scaling\": \"yarn\""), "\"rope_scaling\" = \"yarn\" must be an object"},
        BadConfig{"RopeWithoutType", config_with("rope_scaling", "\"rope_scaling\": {\"factor\": 40}"), "has no \"rope_type\""},
        BadConfig{"RopeUnknownType", config_with("rope_parameters", "\"rope_parameters\": {\"rope_type\": \"ntk\"}"), "\"rope_parameters.rope_type\" = \"ntk\" is not a rope type"},
        BadConfig{"YarnWithoutFactor", config_with("rope_scaling", "\"rope_scaling\": {\"type\": \"yarn\"}"), "\"rope_scaling.factor\" is missing"},
        BadConfig{"YarnNegativeFactor", config_with("rope_scaling", "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": -2}"), "\"rope_scaling.factor\" = -2 must be a positive number"},
        BadConfig{"MscaleString", config_with("rope_scaling", "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 40, \"mscale_all_dim\": \"1\"}"), "\"rope_scaling.mscale_all_dim\" = \"1\" must be a number"},
        BadConfig{"ModelTypeNumber", "{\"model_type\": 3, \"num_attention_heads\": 8}", "\"model_type\" = 3 must be a string"},
        BadConfig{"MaxPositionsNegative", config_with("max_position_embeddings", "-1"), "\"max_position_embeddings\" = -1"},
        // Without it every `latte run` was refused with "accepts 1..0 tokens".
        BadConfig{"MissingMaxPositions", config_with("max_position_embeddings", ""), "\"max_position_embeddings\" is missing; latte needs the model's longest context"},
        BadConfig{"MaxPositionsNull", config_with("max_position_embeddings", "null"), "\"max_position_embeddings\" is missing"},
        BadConfig{"YarnInfiniteScale", config_with("rope_scaling", "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 1e300, \"mscale_all_dim\": 1e300}"), "\"rope_scaling.mscale_all_dim\" = 1e+300 with factor 1e+300 gives mscale 6.90776e+301 and a softmax scale of inf, beyond a float"},
        BadConfig{"YarnScaleBeyondFloat", config_with("rope_parameters", "\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 40, \"mscale_all_dim\": 1e25}"), "softmax scale of 8.50489e+47, beyond a float"},
        BadConfig{"MscaleNegative", config_with("rope_scaling", "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 40, \"mscale_all_dim\": -1}"), "\"rope_scaling.mscale_all_dim\" = -1 must be >= 0"},
        BadConfig{"DuplicateKey", config_with("kv_lora_rank", "512, \"kv_lora_rank\": 256"), "key \"kv_lora_rank\" appears twice at the top level"},
        BadConfig{"RopeDimNegative", config_with("qk_rope_head_dim", "-64"), "\"qk_rope_head_dim\" = -64 must be a non-negative integer"},
        BadConfig{"NopeWithRopeDims", config_with("qk_rope_head_dim", "64, \"mla_use_nope\": true"), "\"mla_use_nope\" = true but qk_rope_head_dim is 64"},
        BadConfig{"NoRopeDimsWithoutNope", config_with("qk_rope_head_dim", "0, \"mla_use_nope\": false"), "\"qk_rope_head_dim\" = 0 (no rope dims) but mla_use_nope is false"},
        BadConfig{"NopeNotBool", config_with("qk_rope_head_dim", "0, \"mla_use_nope\": 1"), "\"mla_use_nope\" = 1 must be true or false"},
        BadConfig{"TextConfigNotObject", "{\"model_type\": \"glm5_next\", \"text_config\": [1]}", "\"text_config\" = [1] must be an object"},
        BadConfig{"NestedFieldsNamedWithTheirPath", "{\"model_type\": \"glm5_next\", \"text_config\": {\"num_attention_heads\": 64}}", "\"text_config.kv_lora_rank\" is missing"},
        BadConfig{"Glm5NextWithoutKpool", "{\"model_type\": \"glm5_next\", \"text_config\": " + config_with("", "") + "}", "\"text_config.index_kpool\" is missing from a glm5_next config"},
        BadConfig{"KpoolCompressNotBool", config_with("index_topk", "2048, \"index_kpool\": 4, \"index_kpool_compress\": \"yes\""), "\"index_kpool_compress\" = \"yes\" must be true or false"},
        BadConfig{"LayerTypeUnknown", config_with("index_topk", "2048, \"layer_types\": [\"deepseek_sparse_attention\", \"mamba\"]"), "\"layer_types[1]\" = \"mamba\" is not a layer type latte knows"},
        BadConfig{"LayerTypesCount", config_with("index_topk", "2048, \"num_hidden_layers\": 3, \"layer_types\": [\"deepseek_sparse_attention\"]"), "\"layer_types\" has 1 entries but num_hidden_layers is 3"},
        BadConfig{"LayerTypesNoMla", config_with("index_topk", "2048, \"layer_types\": [\"linear_attention\"]"), "names no deepseek_sparse_attention layer"},
        BadConfig{"DsaLayerOnADenseModel", "{\"num_attention_heads\": 16, \"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"max_position_embeddings\": 4096, \"layer_types\": [\"deepseek_sparse_attention\"]}", "\"layer_types[0]\" = \"deepseek_sparse_attention\" but the config has no index_topk"},
        BadConfig{"FullAttnLayersDisagree", config_with("index_topk", "2048, \"layer_types\": [\"linear_attention\", \"deepseek_sparse_attention\"], \"linear_attn_config\": {\"full_attn_layers\": [0]}"), "\"linear_attn_config.full_attn_layers\" = [0] disagrees with layer_types, whose deepseek_sparse_attention layers are [1]"}),
    [](const ::testing::TestParamInfo<BadConfig>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace latte
