// The registry: backends by open dotted id, kept in id order; glob lookup; duplicates refused.
#include "latte/registry.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "core/text.hpp"
#include "latte/error.hpp"

namespace latte {

struct Registry::Entry {
  std::string id;
  std::shared_ptr<const Backend> backend;
  std::string source;
};

namespace {

bool id_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

std::mutex& registration_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::vector<std::string>& registration_error_list() {
  static std::vector<std::string> errors;
  return errors;
}

}  // namespace

void check_backend_id(std::string_view id) {
  const auto bad = [&](const char* why) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("backend id '{}' is not valid: {}; write a dotted id such as "
                            "'acme.sparse_mla' (letters, digits, '_', '-', '.')",
                            id, why));
  };
  if (id.empty()) bad("it is empty");
  if (!std::all_of(id.begin(), id.end(), id_char)) bad("it has a character outside [A-Za-z0-9_.-]");
  if (id.find('.') == std::string_view::npos) bad("it has no '.' separating a namespace from a name");
  if (id.front() == '.' || id.back() == '.' || id.find("..") != std::string_view::npos) {
    bad("it has an empty dotted part");
  }
}

Registry& Registry::global() {
  static Registry registry;
  return registry;
}

void Registry::add(std::shared_ptr<const Backend> backend, std::string source) {
  if (!backend) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("Registry::add got a null backend (source: {})", source));
  }
  const std::string& id = backend->info().id;
  check_backend_id(id);
  std::lock_guard lock(mutex_);
  auto pos = std::lower_bound(entries_.begin(), entries_.end(), id,
                              [](const std::shared_ptr<Entry>& e, const std::string& key) { return e->id < key; });
  if (pos != entries_.end() && (*pos)->id == id) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("duplicate backend id '{}': registered from {} and again from {}; "
                            "backend ids must be unique (rename one, or do not load both)",
                            id, (*pos)->source, source));
  }
  entries_.insert(pos, std::make_shared<Entry>(Entry{id, std::move(backend), std::move(source)}));
  ++generation_;
}

void Registry::remove_source(std::string_view source) {
  std::lock_guard lock(mutex_);
  const auto removed = std::erase_if(entries_, [&](const std::shared_ptr<Entry>& e) { return e->source == source; });
  if (removed) ++generation_;
}

std::shared_ptr<const Backend> Registry::find(std::string_view id) const {
  std::lock_guard lock(mutex_);
  auto pos = std::lower_bound(entries_.begin(), entries_.end(), id,
                              [](const std::shared_ptr<Entry>& e, std::string_view key) { return e->id < key; });
  if (pos != entries_.end() && (*pos)->id == id) return (*pos)->backend;
  return nullptr;
}

std::shared_ptr<const Backend> Registry::get(std::string_view id) const {
  if (auto backend = find(id)) return backend;
  const std::vector<std::string> known = ids();
  throw Error(ErrorCode::not_found,
              known.empty()
                  ? fmt::format("unknown backend '{}': no backends are registered (load a plugin "
                                "or build latte with its backends)",
                                id)
                  : fmt::format("unknown backend '{}'; registered backends: {}", id,
                                detail::join(known, ", ")));
}

std::vector<std::shared_ptr<const Backend>> Registry::match(std::string_view pattern) const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<const Backend>> out;
  for (const auto& entry : entries_) {
    if (glob_match(pattern, entry->id)) out.push_back(entry->backend);
  }
  return out;
}

std::vector<std::shared_ptr<const Backend>> Registry::all() const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<const Backend>> out;
  out.reserve(entries_.size());
  for (const auto& entry : entries_) out.push_back(entry->backend);
  return out;
}

std::vector<std::string> Registry::ids() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& entry : entries_) out.push_back(entry->id);
  return out;
}

std::vector<BackendInfo> Registry::infos() const {
  std::lock_guard lock(mutex_);
  std::vector<BackendInfo> out;
  out.reserve(entries_.size());
  for (const auto& entry : entries_) {
    BackendInfo info = entry->backend->info();
    info.source = entry->source;
    out.push_back(std::move(info));
  }
  return out;
}

std::string Registry::source_of(std::string_view id) const {
  std::lock_guard lock(mutex_);
  for (const auto& entry : entries_) {
    if (entry->id == id) return entry->source;
  }
  return {};
}

std::size_t Registry::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

uint64_t Registry::generation() const {
  std::lock_guard lock(mutex_);
  return generation_;
}

bool glob_match(std::string_view pattern, std::string_view text) {
  // Greedy matching with one backtrack point: the last '*' seen.
  std::size_t p = 0, t = 0, star = std::string_view::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

BackendRegistrar::BackendRegistrar(const std::function<std::shared_ptr<const Backend>()>& factory) {
  // This runs during static initialization of liblatte: an exception here would terminate the
  // host process (a Python interpreter, an engine). Record the failure instead;
  // Context::global() reports it on first use.
  try {
    Registry::global().add(factory(), "built-in");
  } catch (const std::exception& e) {
    std::lock_guard lock(registration_mutex());
    registration_error_list().push_back(e.what());
  }
}

std::vector<std::string> registration_errors() {
  std::lock_guard lock(registration_mutex());
  return registration_error_list();
}

}  // namespace latte
