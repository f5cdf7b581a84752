#include "latte/tensor.hpp"

#include <fmt/format.h>

namespace latte {

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device) {
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.device = device;
  view.rank = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t extent : shape) view.shape[static_cast<std::size_t>(i++)] = extent;
  int64_t stride = 1;
  for (int d = view.rank - 1; d >= 0; --d) {
    view.strides[static_cast<std::size_t>(d)] = stride;
    stride *= view.shape[static_cast<std::size_t>(d)];
  }
  return view;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= size(d);
  return n;
}

int64_t TensorView::nbytes() const { return numel() * static_cast<int64_t>(dtype_size(dtype)); }

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (size(d) != 1 && stride(d) != expected) return false;
    expected *= size(d);
  }
  return true;
}

bool TensorView::rows_contiguous() const { return rank == 0 || size(rank - 1) <= 1 || stride(rank - 1) == 1; }

std::string TensorView::describe() const {
  if (!defined()) return "absent";
  std::string dims, steps;
  if (rank < 0 || rank > kMaxRank) dims = steps = fmt::format("rank {}, outside 0..{}", rank, kMaxRank);
  for (int d = 0; d < rank && rank <= kMaxRank; ++d) {
    dims += fmt::format("{}{}", d ? ", " : "", size(d));
    steps += fmt::format("{}{}", d ? ", " : "", stride(d));
  }
  return fmt::format("{}[{}] strides [{}] on {}{}", to_string(dtype), dims, steps,
                     to_string(device.kind),
                     device.kind == DeviceKind::cuda ? fmt::format(":{}", device.index) : "");
}

}  // namespace latte
