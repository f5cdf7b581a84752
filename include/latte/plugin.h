/* latte plugin ABI: a backend in a shared library, loaded without editing latte.
 *
 * A plugin exports ONE symbol, `latte_plugin_entry` (LATTE_PLUGIN_ENTRY_SYMBOL), of type
 * latte_plugin_entry_fn. The host calls it with the ABI version it speaks; the plugin fills
 * *out with a description that stays valid until the library is unloaded, or returns
 * non-zero with a message in `error`. Every struct starts with `struct_size` so that later
 * versions can append fields; entries marked OPTIONAL may be NULL.
 *
 * Capabilities are declared as JSON (the form of `latte backends --json`), so the host checks
 * them with the same code as built-in backends. Plain C: no C++ types cross the boundary, and
 * no exception may escape a plugin function (the host catches and refuses them anyway when
 * the plugin is C++ built with the same runtime).
 */
#ifndef LATTE_PLUGIN_H
#define LATTE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LATTE_PLUGIN_ABI_VERSION 1u
#define LATTE_PLUGIN_ENTRY_SYMBOL "latte_plugin_entry"
#define LATTE_PLUGIN_MAX_RANK 6

/* Values of latte_tensor_v1.dtype: the order of latte::DType. */
enum latte_dtype_v1 { LATTE_F32 = 0, LATTE_F16, LATTE_BF16, LATTE_E4M3, LATTE_I32, LATTE_U8 };
/* Values of op fields: the order of latte::Op. */
enum latte_op_v1 {
  LATTE_OP_SPARSE_MLA = 0, LATTE_OP_MLA_DECODE, LATTE_OP_INDEXER_TOPK, LATTE_OP_INDEXER_LOGITS,
  LATTE_OP_KV_STORE, LATTE_OP_INDEXER_K_STORE, LATTE_OP_LOGICAL_TO_SLOTS
};
enum latte_device_kind_v1 { LATTE_DEVICE_CPU = 0, LATTE_DEVICE_CUDA = 1 };
enum latte_cache_format_v1 { LATTE_CACHE_BF16 = 0, LATTE_CACHE_FP8_DS_MLA = 1 };

typedef struct latte_tensor_v1 {
  void* data;            /* NULL with rank 0: argument absent */
  int32_t dtype;         /* latte_dtype_v1 */
  int32_t rank;
  int64_t shape[LATTE_PLUGIN_MAX_RANK];
  int64_t strides[LATTE_PLUGIN_MAX_RANK]; /* in elements */
  int32_t device_kind;   /* latte_device_kind_v1 */
  int32_t device_index;
} latte_tensor_v1;

typedef struct latte_spec_v1 {
  uint32_t struct_size;
  int32_t op;            /* latte_op_v1 */
  int32_t num_heads;
  int32_t head_dim;
  int32_t head_dim_v;
  int32_t q_dtype;       /* latte_dtype_v1 */
  int32_t kv_cache;      /* latte_cache_format_v1 */
  int32_t block_size;
  int32_t topk;
  int32_t s_q;
  int64_t max_tokens;
  float scale;
  const char* model;
} latte_spec_v1;

typedef struct latte_device_v1 {
  uint32_t struct_size;
  int32_t kind;          /* latte_device_kind_v1 */
  int32_t index;
  int32_t arch;          /* 90 for sm_90; 0 for the CPU */
  int32_t sm_count;
  int64_t max_smem_per_block;
  int64_t memory_bytes;
  const char* name;
} latte_device_v1;

/* The tensors of one call, in the field order of the op's Args struct in latte/ops.hpp
 * (e.g. sparse_mla: q, kv_cache, indices, out, lse). */
typedef struct latte_call_v1 {
  uint32_t struct_size;
  int32_t op;
  int32_t num_tensors;
  const latte_tensor_v1* tensors;
  float scale;           /* sparse_mla, mla_decode */
  int32_t int_param;     /* indexer_topk: index kind (0 logical, 1 physical); kv stores: scale
                            kind (0 amax, 1 pow2); logical_to_slots: block_size */
  void* stream;
  void* workspace;
  size_t workspace_bytes;
  int32_t check_indices;
} latte_call_v1;

/* Writes a reason for refusing a spec; called from check(). All strings are copied. */
typedef void (*latte_reason_sink_fn)(void* sink, const char* code, const char* field,
                                     const char* wanted, const char* got, const char* text);

typedef struct latte_backend_v1 {
  uint32_t struct_size;
  const char* id;                 /* dotted, e.g. "example.cpu_sparse_mla" */
  const char* description;
  const char* capabilities_json;  /* see docs/architecture.md */
  /* OPTIONAL: extra rules beyond the declared capabilities. Returns 0. */
  int (*check)(const latte_spec_v1* spec, const latte_device_v1* device,
               latte_reason_sink_fn sink, void* sink_state);
  /* Creates a kernel for an accepted spec. Returns 0 and sets *kernel, or non-zero with a
   * message in error[0..error_len). */
  int (*make)(const latte_spec_v1* spec, const latte_device_v1* device, void** kernel,
              char* error, size_t error_len);
  size_t (*workspace_bytes)(void* kernel);
  int (*run)(void* kernel, const latte_call_v1* call, char* error, size_t error_len);
  void (*destroy)(void* kernel);
  /* OPTIONAL, appended after ABI version 1's first release (a plugin whose struct_size ends at
   * `destroy` is still accepted and has none): one line on how the kernel computes, valid until
   * the kernel is destroyed; NULL or "" for nothing to add (latte::Kernel::describe). */
  const char* (*describe)(void* kernel);
} latte_backend_v1;

/* The size of latte_backend_v1 as ABI version 1 first shipped (up to `destroy`): the smallest
 * struct_size the host accepts. */
#define LATTE_BACKEND_V1_BASE_SIZE offsetof(latte_backend_v1, describe)

typedef struct latte_plugin_v1 {
  uint32_t struct_size;
  uint32_t abi_version;           /* LATTE_PLUGIN_ABI_VERSION the plugin was built against */
  const char* name;
  const char* version;
  uint32_t num_backends;
  const latte_backend_v1* backends;
  const char* policy_json;        /* OPTIONAL: rules for the plugin policy layer */
} latte_plugin_v1;

/* Returns 0 and sets *out, or non-zero with a message in error[0..error_len). */
typedef int (*latte_plugin_entry_fn)(uint32_t host_abi_version, const latte_plugin_v1** out,
                                     char* error, size_t error_len);

#ifdef __cplusplus
}
#endif

#endif /* LATTE_PLUGIN_H */
