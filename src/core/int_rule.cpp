// IntRule: the integer rules of declared capabilities (heads, block size, topk, arch, ...).
#include <fmt/format.h>

#include <algorithm>

#include "core/text.hpp"
#include "latte/capabilities.hpp"

namespace latte {

bool IntRule::accepts(int64_t value) const {
  if (min && value < *min) return false;
  if (max && value > *max) return false;
  if (multiple_of && *multiple_of != 0 && value % *multiple_of != 0) return false;
  if (!one_of.empty() && std::find(one_of.begin(), one_of.end(), value) == one_of.end()) {
    return false;
  }
  return true;
}

bool IntRule::is_any() const { return !min && !max && !multiple_of && one_of.empty(); }

std::string IntRule::describe() const {
  return describe_with([](int64_t v) { return fmt::format("{}", v); });
}

std::string IntRule::describe_with(const std::function<std::string(int64_t)>& name) const {
  if (is_any()) return "any";
  std::vector<std::string> parts;
  if (!one_of.empty()) {
    parts.push_back(one_of.size() == 1
                        ? name(one_of.front())
                        : fmt::format("one of {{{}}}", detail::join(one_of, ", ", name)));
  }
  if (min && max) {
    parts.push_back(*min == *max ? name(*min) : fmt::format("{}..{}", name(*min), name(*max)));
  } else if (min) {
    parts.push_back(fmt::format(">= {}", name(*min)));
  } else if (max) {
    parts.push_back(fmt::format("<= {}", name(*max)));
  }
  if (multiple_of) parts.push_back(fmt::format("a multiple of {}", *multiple_of));
  return detail::join(parts, ", ");
}

}  // namespace latte
