// cuda.sparse_mla's host side between a validated problem and the launch: the raw parameters
// of sparse_mla and mla_decode problems, and the planned launch of a call.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>

#include "kernels/common/cuda_check.cuh"
#include "kernels/sparse_mla/mla_run.hpp"
#include "latte/error.hpp"

namespace latte::cuda_sparse_mla {
namespace {

void fill_common(MlaParams& p, const TensorView& q, const TensorView& kv, CacheFormat format,
                 int64_t num_blocks, int64_t block_size, const TensorView& out, const TensorView& lse,
                 float scale) {
  p.q = q.ptr<const __nv_bfloat16>();
  p.kv = kv.ptr<const uint8_t>();
  const int64_t esz = format == CacheFormat::fp8_ds_mla ? 1 : 2;
  p.kv_sblock = kv.stride(0) * esz;
  p.kv_stok = kv.stride(1) * esz;
  p.num_blocks = num_blocks;
  p.block_size = static_cast<int>(block_size);
  p.format = format;
  p.out = out.ptr<__nv_bfloat16>();
  p.lse = lse.defined() ? lse.ptr<float>() : nullptr;
  p.scale = scale;
}

// The rope dims' address: a q_rope tensor of its own, else q's last 64 dims.
void set_q_rope(MlaParams& p, const TensorView& q_rope) {
  if (q_rope.defined()) {
    p.q_rope = q_rope.ptr<const __nv_bfloat16>();
    p.qr_sg = q_rope.stride(0);
    p.qr_si = 0;
    p.qr_sh = q_rope.stride(1);
  } else {
    p.q_rope = p.q + kLatentDim;
    p.qr_sg = p.q_sg;
    p.qr_si = p.q_si;
    p.qr_sh = p.q_sh;
  }
}

}  // namespace

MlaParams mla_params(const SparseMlaProblem& s) {
  const SparseMlaArgs& a = *s.args;
  MlaParams p;
  fill_common(p, a.q, a.kv_cache, s.format, s.num_blocks, s.block_size, a.out, a.lse, a.scale);
  p.decode = false;
  p.groups = static_cast<int>(s.tokens);
  p.s_q = 1;
  p.heads = static_cast<int>(s.heads);
  p.q_sg = a.q.stride(0);
  p.q_si = 0;
  p.q_sh = a.q.stride(1);
  // rope_dim 0: q and the cache rows are the 512 latent dims (the kernels' rope-less instantiations)
  p.rope = s.rope_dim != kNoRopeDim;
  if (p.rope) set_q_rope(p, a.q_rope);
  p.o_sg = a.out.stride(0);
  p.o_si = 0;
  p.o_sh = a.out.stride(1);
  if (a.lse.defined()) {
    p.l_sg = a.lse.stride(0);
    p.l_si = 0;
    p.l_sh = a.lse.stride(1);
  }
  p.indices = a.indices.ptr<const int32_t>();
  p.idx_s = a.indices.stride(0);
  p.topk = static_cast<int>(s.topk);
  if (a.topk_lens.defined()) {
    p.topk_lens = a.topk_lens.ptr<const int32_t>();
    p.tl_s = a.topk_lens.stride(0);
  }
  return p;
}

MlaParams mla_params(const MlaDecodeProblem& s) {
  const MlaDecodeArgs& d = *s.args;
  MlaParams p;
  fill_common(p, d.q, d.kv_cache, s.format, s.num_blocks, s.block_size, d.out, d.lse, d.scale);
  p.decode = true;
  p.groups = static_cast<int>(s.batch);
  p.s_q = static_cast<int>(s.s_q);
  p.heads = static_cast<int>(s.heads);
  p.q_sg = d.q.stride(0);
  p.q_si = d.q.stride(1);
  p.q_sh = d.q.stride(2);
  set_q_rope(p, TensorView{});
  p.o_sg = d.out.stride(0);
  p.o_si = d.out.stride(1);
  p.o_sh = d.out.stride(2);
  if (d.lse.defined()) {
    p.l_sg = d.lse.stride(0);
    p.l_si = d.lse.stride(1);
    p.l_sh = d.lse.stride(2);
  }
  p.block_table = d.block_table.ptr<const int32_t>();
  p.bt_s = d.block_table.stride(0);
  p.max_blocks = static_cast<int>(s.max_blocks);
  p.seq_lens = d.seq_lens.ptr<const int32_t>();
  p.sl_s = d.seq_lens.stride(0);
  return p;
}

int rows_per_group(const AttentionSpec& spec) {
  return (spec.op == Op::mla_decode ? std::max(1, spec.s_q) : 1) * std::max(1, spec.num_heads);
}

int64_t max_groups_of(const AttentionSpec& spec) {
  if (spec.max_tokens <= 0) return 0;
  return spec.op == Op::mla_decode ? std::max<int64_t>(1, spec.max_tokens / std::max(1, spec.s_q)) : spec.max_tokens;
}

MlaParams nominal_params(const AttentionSpec& spec, int64_t max_groups) {
  MlaParams p;
  p.decode = spec.op == Op::mla_decode;
  p.format = spec.kv_cache;
  p.rope = p.decode || spec.head_dim != kLatentDim;  // head_dim 512: sparse rows without rope
  p.s_q = p.decode ? std::max(1, spec.s_q) : 1;
  p.heads = std::max(1, spec.num_heads);
  p.topk = std::max(1, spec.topk);
  p.block_size = std::max(1, spec.block_size);
  p.max_blocks = p.decode ? (kWorkspaceContext + p.block_size - 1) / p.block_size : 0;
  p.groups = static_cast<int>(std::max<int64_t>(1, max_groups));
  return p;
}

void run_mla(const MlaParams& p, const PlanDevice& device, const Tuning& tuning, int64_t max_groups,
             void* workspace, std::size_t workspace_bytes, std::size_t kernel_workspace, void* stream) {
  if (p.groups == 0) return;
  if (p.s_q * p.heads > kMaxRows || p.heads > kMaxHeads) {
    throw Error(ErrorCode::unsupported,
                fmt::format("cuda.sparse_mla: {} heads per rank and {} query tokens; it takes 1..{} "
                            "heads and at most {} (query, head) rows.",
                            p.heads, p.s_q, kMaxHeads, kMaxRows));
  }
  if (p.groups > kMaxTokens * 4) {
    throw Error(ErrorCode::unsupported,
                fmt::format("cuda.sparse_mla: {} groups in one call; split the call.", p.groups));
  }
  const MlaPlan plan = make_plan(p, device, workspace ? workspace_bytes : 0, tuning, max_groups);
  if (plan.nsplit > 1 && workspace == nullptr) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("cuda.sparse_mla: this call splits each token's KV list in {} parts and "
                            "needs a workspace (RunContext::workspace) of Kernel::workspace_bytes() = "
                            "{} bytes.",
                            plan.nsplit, kernel_workspace));
  }
  int current = 0;
  LATTE_CUDA_TRY(cudaGetDevice(&current));
  launch_mla(p, plan, workspace, static_cast<cudaStream_t>(stream), current);
}

}  // namespace latte::cuda_sparse_mla
