// The pooled indexer's problem and output in pool geometry (host code). See pooled_topk.hpp.
#include "kernels/indexer/pooled_topk.hpp"

namespace latte::cuda {

IndexerParams pooled_problem(const IndexerParams& token_problem, int kpool) {
  IndexerParams q = token_problem;
  q.block_size = token_problem.block_size / kpool;
  q.vl_div = kpool;
  return q;
}

TopkOutput pooled_output(const TopkOutput& token_out, int kpool, int pool_topk, bool select_tail, int32_t* lens,
                         int64_t lens_s) {
  TopkOutput o = token_out;
  o.topk = pool_topk;
  o.expand = kpool;
  o.tail = select_tail;
  o.width = token_out.topk;
  o.lens = lens;
  o.lens_s = lens_s;
  return o;
}

}  // namespace latte::cuda
