// One DSA decode step of a real model's shape on random data, end to end through the
// selected backends, verified against cpu.reference (and the dense-MLA equality oracle when
// the context fits in topk and the model has rope). The stages are the model's layer_ops():
// the per-token indexer's (GLM-5, DeepSeek-V3.2) or the pooled indexer's (GLM-5.3-Flash:
// indexer_pool_store, indexer_topk over pools, sparse_mla without rope). This is what
// `latte run` and latte.run_dsa_step print.
//
// A tool over liblatte's public API, not part of liblatte: each stage's backend is chosen with
// Context::select, and every op (the stages and the reference checks) runs through latte::run.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "latte/context.hpp"
#include "latte/device.hpp"
#include "latte/selector.hpp"
#include "latte/spec.hpp"

namespace latte::workload {

struct DsaStepConfig {
  std::string model = "glm-5";   // preset name or config.json path
  int tp = 1;
  CacheFormat kv_cache = CacheFormat::bf16;
  int block_size = 64;
  int batch = 4;                 // requests, one decode token each
  int context = 2048;            // tokens of KV per request, the new one included
  std::string device = "cpu";    // "cpu" or "cuda:N"
  uint64_t seed = 1;
  int repeats = 0;               // timed runs per stage; 0 = 1 on the CPU, 20 on CUDA
  SelectOptions select;          // force / exclude
};

struct StageReport {
  std::string name;          // "kv_store", "indexer_k_store" | "indexer_pool_store", "indexer_topk", "sparse_mla"
  Op op = Op::sparse_mla;
  std::string backend;       // the backend that ran
  std::string rule;          // the policy rule that ranked it first
  std::string kernel;        // Kernel::describe() of what latte::run ran (may be empty)
  double ms = 0;             // median time per run
  double rate = 0;           // throughput in `rate_unit`
  std::string rate_unit;     // "TFLOP/s", "GB/s"
  std::string check;         // what it was compared with
  double error = 0;          // relative error (or mismatch fraction, see check)
  double tolerance = 0;
  bool passed = false;
};

struct DsaStepReport {
  ModelSpec model;
  DeviceInfo device;
  DsaStepConfig config;
  std::vector<StageReport> stages;
  bool passed = false;
  [[nodiscard]] std::string to_text() const;
  [[nodiscard]] std::string to_json() const;
};

// Throws latte::Error for bad configuration (unknown model, TP not dividing the heads, a model
// whose indexer latte does not compute, no valid backend for a stage, ...), and out_of_memory,
// before allocating anything, when the step needs more host or device memory than there is
// (naming the estimate and the largest batch and context that fit). `progress` receives one
// line per step for long runs. `context`: the one to select and run in (null:
// Context::global()).
[[nodiscard]] DsaStepReport run_dsa_step(const DsaStepConfig& config,
                                         const std::function<void(std::string_view)>& progress = {},
                                         Context* context = nullptr);

// The peak memory of run_dsa_step(config), from the shapes it allocates and the workspaces of
// the kernels it would run: host bytes, and device bytes (0 on the CPU).
struct DsaStepMemory {
  uint64_t host_bytes = 0;
  uint64_t device_bytes = 0;
};
[[nodiscard]] DsaStepMemory estimate_dsa_step_memory(const DsaStepConfig& config,
                                                     const Context* context = nullptr);

}  // namespace latte::workload
