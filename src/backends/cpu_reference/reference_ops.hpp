// The cpu.reference computations, one function per op. Each takes arguments that already
// passed latte::validate (whose result it receives) and tensors in host memory. `check`
// is RunContext::check_indices: report the first out-of-range index instead of treating it
// as -1. The semantics are those of docs/operations.md.
#pragma once

#include "latte/ops.hpp"
#include "latte/validate.hpp"

namespace latte::cpu_reference {

void sparse_mla(const SparseMlaArgs& args, const SparseMlaShape& shape, bool check);
void mla_decode(const MlaDecodeArgs& args, const MlaDecodeShape& shape, bool check);
void indexer_topk(const IndexerTopkArgs& args, const IndexerShape& shape, bool check);
void indexer_logits(const IndexerLogitsArgs& args, const IndexerShape& shape, bool check);
void kv_store(const KvStoreArgs& args, const KvStoreShape& shape, bool check);
void indexer_k_store(const IndexerKStoreArgs& args, const KvStoreShape& shape, bool check);
void logical_to_slots(const LogicalToSlotsArgs& args, const LogicalToSlotsShape& shape,
                      bool check);

}  // namespace latte::cpu_reference
