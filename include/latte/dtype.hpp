// Element types latte's ops take, and the cache formats of the MLA KV cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace latte {

enum class DType : uint8_t { f32, f16, bf16, e4m3, i32, u8 };

[[nodiscard]] std::string_view to_string(DType dtype);
[[nodiscard]] std::optional<DType> parse_dtype(std::string_view name);
[[nodiscard]] std::size_t dtype_size(DType dtype);

// Layout of one token of the MLA KV cache (docs/design.md, sections 6.1, 6.2 and 6.5). Without
// rope (rope dim 0) the same formats drop the rope values: bf16 512 values (1024 bytes),
// fp8_ds_mla 512 e4m3 + 4 f32 scales (528 bytes, or 656 with the last 128 reserved).
enum class CacheFormat : uint8_t {
  bf16,        // 576 bf16 values, 1152 bytes per token
  fp8_ds_mla,  // 512 e4m3 + 4 f32 scales + 64 bf16 rope, 656 bytes per token
};

[[nodiscard]] std::string_view to_string(CacheFormat format);
[[nodiscard]] std::optional<CacheFormat> parse_cache_format(std::string_view name);
[[nodiscard]] std::size_t cache_bytes_per_token(CacheFormat format);  // with rope: 1152 | 656
// With `rope_dim` 64 (as above) or 0: 1024 | 528 (the compact row without rope).
[[nodiscard]] std::size_t cache_bytes_per_token(CacheFormat format, int rope_dim);

// How kv_store / indexer_k_store pick the per-group FP8 scale.
enum class Fp8ScaleKind : uint8_t {
  amax,  // scale = amax / 448
  pow2,  // scale = the smallest power of two >= amax / 448
};

[[nodiscard]] std::string_view to_string(Fp8ScaleKind kind);

}  // namespace latte
