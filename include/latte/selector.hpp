// The selector: valid backends ranked by the policy, rejected ones with their reasons,
// and, when nothing is valid, the nearest changes that would make something valid.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "latte/backend.hpp"
#include "latte/policy.hpp"

namespace latte {

struct SelectOptions {
  // Force: "[op=]id-glob" entries (each may be a comma-separated list); a plain glob applies to
  // the ops its backends declare. A forced backend that refuses the spec is an error listing
  // its reasons; a glob that matches no registered backend is Error(not_found). The other
  // backends are rejected with reason code "not_forced".
  std::vector<std::string> force;
  // "[op=]id-glob" entries, removed with reason code "excluded"; a plain glob excludes from
  // every op. A backend both forced and excluded is Error(invalid_argument).
  std::vector<std::string> exclude;
  // Also read LATTE_BACKEND (force) and LATTE_EXCLUDE (exclude), same syntax, added to the above.
  bool use_environment = true;
};

// An immutable list shared between copies, read like a const std::vector. Every select()
// copies a Selection out of the selection cache; sharing its tables (instead of copying
// hundreds of strings) keeps a cached selection at about a microsecond.
template <typename T>
class SharedList {
 public:
  using value_type = T;
  using const_iterator = typename std::vector<T>::const_iterator;

  SharedList() = default;
  SharedList(std::vector<T> items)  // NOLINT(google-explicit-constructor): a list is a list
      : items_(std::make_shared<const std::vector<T>>(std::move(items))) {}
  SharedList(std::initializer_list<T> items) : SharedList(std::vector<T>(items)) {}

  [[nodiscard]] const std::vector<T>& items() const {
    static const std::vector<T> none;
    return items_ ? *items_ : none;
  }
  operator const std::vector<T>&() const { return items(); }  // NOLINT(google-explicit-constructor)
  [[nodiscard]] const_iterator begin() const { return items().begin(); }
  [[nodiscard]] const_iterator end() const { return items().end(); }
  [[nodiscard]] std::size_t size() const { return items().size(); }
  [[nodiscard]] bool empty() const { return items().empty(); }
  [[nodiscard]] const T& operator[](std::size_t i) const { return items()[i]; }
  [[nodiscard]] const T& at(std::size_t i) const { return items().at(i); }
  [[nodiscard]] const T& front() const { return items().front(); }
  [[nodiscard]] const T& back() const { return items().back(); }
  friend bool operator==(const SharedList& a, const SharedList& b) { return a.items() == b.items(); }

 private:
  std::shared_ptr<const std::vector<T>> items_;
};

struct RejectedBackend {
  std::string id;
  std::vector<Reason> reasons;
};

// "fp8_ds_mla needs sm_89+ on X; bf16 would be accepted by Y"
struct Suggestion {
  std::string field;    // "kv_cache", "device", "tp", "block_size", ...
  std::string value;    // the value that would work
  std::vector<std::string> backends;  // the backends that would then accept
  std::string text;
};

struct Selection {
  std::string chosen;                        // id of the best valid backend
  std::shared_ptr<const Backend> backend;
  AttentionSpec spec;
  DeviceInfo device;
  SharedList<Ranking> valid;                 // best first
  SharedList<RejectedBackend> rejected;      // in id order
  std::vector<std::string> forced;           // the force entries that applied
  std::vector<std::string> excluded;         // the exclude entries that applied
  SharedList<Suggestion> suggestions;        // filled when nothing is valid

  [[nodiscard]] bool ok() const { return !chosen.empty(); }
  // The decision and a table of every backend (id | chosen / #rank / rejected | rule or
  // reasons), then the suggestions when nothing is valid. For a terminal; not for parsing.
  [[nodiscard]] std::string explain() const;
  // The same as JSON with stable keys (docs/architecture.md, "Selection JSON").
  [[nodiscard]] std::string to_json() const;
  // What the chosen backend would run: Kernel::describe() of a kernel made for `spec` on
  // `device` (described architectures work for backends whose make() needs no GPU, as the
  // built-in ones). "" when nothing is chosen or the backend has nothing to add;
  // "(not made for <device>: <why>)" when make() throws.
  [[nodiscard]] std::string describe_kernel() const;
};

}  // namespace latte
