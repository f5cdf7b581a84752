// Number formats and byte layouts (docs/design.md, sections 5 and 6), host side. CUDA kernels use
// the same definitions through their own device code and are tested against these.
#pragma once

#include <cstdint>

#include "latte/dtype.hpp"

namespace latte {

inline constexpr float kE4m3Max = 448.0f;  // largest finite e4m3 value (code 0x7E)

// Byte offsets inside one fp8_ds_mla token (656 bytes, docs/design.md, section 6.2).
inline constexpr int kFp8DsMlaBytes = 656;
inline constexpr int kFp8DsMlaScaleOffset = 512;  // 4 f32 group scales
inline constexpr int kFp8DsMlaRopeOffset = 528;   // 64 bf16 rope values
// A token without rope (rope dim 0, docs/design.md, section 6.5): the first 528 bytes of an
// fp8_ds_mla token, 512 e4m3 and the 4 f32 scales. Stored compact (528-byte rows) or in
// 656-byte rows whose last 128 bytes are reserved: never read, and left as they are by writes.
inline constexpr int kFp8NopeBytes = kFp8DsMlaRopeOffset;

// OCP FP8 E4M3FN: round to nearest even, saturate finite overflow (and infinities) to +-448,
// NaN -> 0x7F (sign kept).
[[nodiscard]] uint8_t float_to_e4m3(float value);
[[nodiscard]] float e4m3_to_float(uint8_t code);
// bfloat16: round to nearest even from float32; NaN stays NaN.
[[nodiscard]] uint16_t float_to_bf16(float value);
[[nodiscard]] float bf16_to_float(uint16_t bits);

// The per-group scale kv_store and indexer_k_store use for a group whose |max| is `amax`.
// amax == 0 gives scale 1 so that zeros round-trip. Values are stored as e4m3(x / scale),
// the division done in float32. A group holding inf or NaN gets a non-finite scale and
// decodes to NaN everywhere (the poison stays visible).
[[nodiscard]] float fp8_group_scale(float amax, Fp8ScaleKind kind);

// One token of the fp8_ds_mla cache (656 bytes): 512 latent -> e4m3 in 4 groups of 128 with
// f32 scales, 64 rope -> bf16. `latent` and `rope` are float values (already bf16-exact when
// they come from bf16 tensors).
void pack_fp8_ds_mla_token(const float* latent, const float* rope, Fp8ScaleKind kind,
                           uint8_t* out656);
// Back to 576 floats: latent = e4m3 * scale, rope = bf16.
void unpack_fp8_ds_mla_token(const uint8_t* in656, float* out576);
// The same without rope: 512 latent values -> the first 528 bytes of `out` (e4m3 codes, then the
// 4 f32 group scales); nothing past them is written.
void pack_fp8_nope_token(const float* latent, Fp8ScaleKind kind, uint8_t* out528);
// Back to 512 floats (e4m3 * scale), reading the first 528 bytes only.
void unpack_fp8_nope_token(const uint8_t* in528, float* out512);

// One token of the indexer K cache, inside its page (docs/design.md, section 6.3): 128 e4m3 at
// page + offset*128, one f32 scale at page + block_size*128 + offset*4.
void pack_indexer_k_token(const float* k128, Fp8ScaleKind kind, uint8_t* page, int block_size,
                          int offset);
void unpack_indexer_k_token(const uint8_t* page, int block_size, int offset, float* out128);

}  // namespace latte
