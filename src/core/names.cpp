// String forms of the small enums, in one place so that every layer spells them alike.
#include <array>
#include <string_view>

#include "latte/device.hpp"
#include "latte/dtype.hpp"
#include "latte/error.hpp"
#include "latte/formats.hpp"
#include "latte/ops.hpp"

namespace latte {
namespace {

template <typename Enum, std::size_t N>
std::optional<Enum> parse_name(const std::array<std::string_view, N>& names, std::string_view name) {
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == name) return static_cast<Enum>(i);
  }
  return std::nullopt;
}

constexpr std::array<std::string_view, 6> kDTypeNames = {"f32", "f16", "bf16", "e4m3", "i32", "u8"};
constexpr std::array<std::string_view, 2> kCacheFormatNames = {"bf16", "fp8_ds_mla"};
constexpr std::array<std::string_view, 8> kOpNames = {
    "sparse_mla", "mla_decode",      "indexer_topk",     "indexer_logits",
    "kv_store",   "indexer_k_store", "logical_to_slots", "indexer_pool_store"};

}  // namespace

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::not_found: return "not_found";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::no_valid_backend: return "no_valid_backend";
    case ErrorCode::config_error: return "config_error";
    case ErrorCode::policy_error: return "policy_error";
    case ErrorCode::plugin_error: return "plugin_error";
    case ErrorCode::cuda_error: return "cuda_error";
    case ErrorCode::out_of_memory: return "out_of_memory";
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

std::string_view to_string(DType dtype) { return kDTypeNames[static_cast<std::size_t>(dtype)]; }

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "float32" || name == "fp32") return DType::f32;
  if (name == "float16" || name == "fp16") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  if (name == "float8_e4m3fn" || name == "fp8_e4m3") return DType::e4m3;
  if (name == "int32") return DType::i32;
  if (name == "uint8") return DType::u8;
  return parse_name<DType>(kDTypeNames, name);
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::e4m3: case DType::u8: return 1;
  }
  return 0;
}

std::string_view to_string(CacheFormat format) {
  return kCacheFormatNames[static_cast<std::size_t>(format)];
}

std::optional<CacheFormat> parse_cache_format(std::string_view name) {
  return parse_name<CacheFormat>(kCacheFormatNames, name);
}

std::size_t cache_bytes_per_token(CacheFormat format) { return cache_bytes_per_token(format, kRopeDim); }

std::size_t cache_bytes_per_token(CacheFormat format, int rope_dim) {
  if (format == CacheFormat::bf16) return static_cast<std::size_t>(2 * (kLatentDim + rope_dim));
  return rope_dim == kNoRopeDim ? kFp8NopeBytes : kFp8DsMlaBytes;
}

std::string_view to_string(Fp8ScaleKind kind) { return kind == Fp8ScaleKind::amax ? "amax" : "pow2"; }

std::string_view to_string(DeviceKind kind) { return kind == DeviceKind::cpu ? "cpu" : "cuda"; }

std::string_view to_string(Op op) { return kOpNames[static_cast<std::size_t>(op)]; }

std::optional<Op> parse_op(std::string_view name) { return parse_name<Op>(kOpNames, name); }

const std::vector<Op>& all_ops() {
  static const std::vector<Op> ops = {Op::sparse_mla,      Op::mla_decode, Op::indexer_topk,
                                      Op::indexer_logits,  Op::kv_store,   Op::indexer_k_store,
                                      Op::logical_to_slots, Op::indexer_pool_store};
  return ops;
}

Op op_of(const OpArgs& args) { return static_cast<Op>(args.index()); }

}  // namespace latte
