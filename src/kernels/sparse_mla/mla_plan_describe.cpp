// Kernel::describe() of cuda.sparse_mla: the plan of a call of the kernel's size in one line,
// so that `latte select` / `latte run` say which kernel variant runs and how a list is split.
#include <fmt/format.h>

#include <string>

#include "kernels/sparse_mla/mla_params.hpp"

namespace latte::cuda_sparse_mla {

std::string describe_plan(const MlaParams& p, const MlaPlan& plan, const PlanDevice& device, int64_t max_groups) {
  const bool fp8 = p.format == CacheFormat::fp8_ds_mla;
  std::string kernel;
  if (plan.row_groups) {
    kernel = fmt::format("row-group kernel: {} rows per CTA, 8 warps, 1 CTA per SM, bf16 mma.sync", kRowGroupsRows);
  } else if (plan.few_heads) {
    kernel = fmt::format("few-heads kernel: the {} heads on the mma's N dimension ({}), e4m3 widened in the fragments",
                         p.heads, p.heads <= 8 ? "one n8 tile, Q^T in registers" : "two n8 tiles, Q^T in shared memory");
  } else {
    const int warps = plan.warps > 0 ? plan.warps : fp8 ? 8 : 4;
    kernel = fmt::format("row-tile kernel: {}-row tiles, {} warps, {} CTAs per SM{}, {}", plan.row_tile, warps,
                         plan.ctas_per_sm, plan.dim_split > 1 ? ", output dims over 2 CTAs" : "",
                         fp8 ? "e4m3 widened in the fragments" : "bf16 mma.sync");
  }
  // rows without rope: the 512-dim QK (no rope loads or mma), and the bytes each row gather reads
  if (!p.rope) kernel += fp8 ? ", rows without rope (512-dim QK, 528 bytes read per row)"
                             : ", rows without rope (512-dim QK, 1024-byte rows)";
  std::string splits;
  if (p.decode) {
    splits = fmt::format("splits of {} positions, as many as a request's length needs", plan.chunk);
  } else if (plan.nsplit == 1) {
    splits = fmt::format("each list of up to {} tokens in one CTA", plan.chunk);
  } else {
    splits = fmt::format("{} splits of {} tokens per list", plan.nsplit, plan.chunk);
  }
  if (plan.chunks_per_cta > 1) splits += fmt::format(", {} consecutive splits per CTA", plan.chunks_per_cta);
  std::string call;
  if (p.decode) {
    call = max_groups > 0 ? fmt::format("a kernel for {} requests per call", max_groups)
                          : std::string("a kernel for any number of requests per call");
  } else {
    // a kernel of unknown size plans each call by its own size: shown for one token (p.groups)
    const int64_t ctas = static_cast<int64_t>(p.groups) * plan.row_tiles * plan.dim_split * plan.split_ctas();
    call = fmt::format("{}a call of {} token{}: {} CTAs on {} SMs",
                       max_groups > 0 ? "" : "a kernel for calls of any size, tiles and CTAs per call; ",
                       p.groups, p.groups == 1 ? "" : "s", ctas, device.sm_count);
  }
  return fmt::format("{}; {}; {}", kernel, splits, call);
}

}  // namespace latte::cuda_sparse_mla
