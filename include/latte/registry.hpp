// The registry of backends: open ids, lookup by id or glob, duplicate ids refused.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "latte/backend.hpp"

namespace latte {

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The process-wide registry: in-tree backends add themselves to it at load time.
  static Registry& global();

  // Adds a backend; `source` is "built-in" or a plugin path. A duplicate id throws
  // latte::Error(invalid_argument) naming both sources.
  void add(std::shared_ptr<const Backend> backend, std::string source = "built-in");
  // Removes every backend added from `source` (used when a plugin's load fails half-way).
  void remove_source(std::string_view source);

  [[nodiscard]] std::shared_ptr<const Backend> find(std::string_view id) const;  // null if absent
  // Throws latte::Error(not_found) listing the registered ids.
  [[nodiscard]] std::shared_ptr<const Backend> get(std::string_view id) const;
  // Ids matching a glob ('*' any run, '?' one character), in id order.
  [[nodiscard]] std::vector<std::shared_ptr<const Backend>> match(std::string_view pattern) const;
  [[nodiscard]] std::vector<std::shared_ptr<const Backend>> all() const;  // in id order
  [[nodiscard]] std::vector<std::string> ids() const;                     // in id order
  // Every backend's info with `source` filled ("built-in" or the plugin's path), in id order.
  [[nodiscard]] std::vector<BackendInfo> infos() const;
  // "built-in", a plugin path, or empty when `id` is not registered.
  [[nodiscard]] std::string source_of(std::string_view id) const;
  [[nodiscard]] std::size_t size() const;
  // Bumped on every change; part of the selector's cache key.
  [[nodiscard]] uint64_t generation() const;

 private:
  struct Entry;
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<Entry>> entries_;
  uint64_t generation_ = 0;
};

// '*' matches any run of characters, '?' one character.
[[nodiscard]] bool glob_match(std::string_view pattern, std::string_view text);

// Throws latte::Error(invalid_argument) unless `id` is a dotted id: letters, digits, '_', '-'
// and '.', with at least one '.' and no empty part ("acme.sparse_mla").
void check_backend_id(std::string_view id);

// Failures of LATTE_REGISTER_BACKEND during static initialization (a duplicate built-in id, a
// throwing factory). They cannot throw there; Context::global() reports them on first use.
[[nodiscard]] std::vector<std::string> registration_errors();

// Self-registration for in-tree backends:  LATTE_REGISTER_BACKEND(CpuReferenceBackend);
struct BackendRegistrar {
  explicit BackendRegistrar(const std::function<std::shared_ptr<const Backend>()>& factory);
};

#define LATTE_CONCAT_INNER(a, b) a##b
#define LATTE_CONCAT(a, b) LATTE_CONCAT_INNER(a, b)
#define LATTE_REGISTER_BACKEND(Type)                                           \
  static const ::latte::BackendRegistrar LATTE_CONCAT(latte_registrar_, __LINE__)( \
      [] { return std::shared_ptr<const ::latte::Backend>(std::make_shared<Type>()); })

}  // namespace latte
