// Small string helpers shared by the core's messages.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace latte::detail {

template <typename Range, typename ToString>
std::string join(const Range& items, std::string_view separator, ToString to_str) {
  std::string out;
  bool first = true;
  for (const auto& item : items) {
    if (!first) out += separator;
    out += to_str(item);
    first = false;
  }
  return out;
}

inline std::string join(const std::vector<std::string>& items, std::string_view separator) {
  return join(items, separator, [](const std::string& s) { return s; });
}

// FNV-1a, for fingerprints that only need to be stable within one process.
inline uint64_t fnv1a(std::string_view text, uint64_t hash = 1469598103934665603ull) {
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

inline std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace latte::detail
