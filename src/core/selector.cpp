// The selector: force and exclude, the declared and custom checks, the policy ranking.
#include <fmt/format.h>

#include <algorithm>

#include "core/selector_impl.hpp"
#include "core/text.hpp"
#include "latte/error.hpp"
#include "latte/registry.hpp"

namespace latte::detail {
namespace {

bool declares(const Backend& backend, Op op) {
  const auto& ops = backend.info().caps.ops;
  return std::find(ops.begin(), ops.end(), op) != ops.end();
}

void add_unique(std::vector<std::string>& list, const std::string& item) {
  if (std::find(list.begin(), list.end(), item) == list.end()) list.push_back(item);
}

std::string trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return std::string(text);
}

}  // namespace

std::string ChoiceEntry::text() const {
  return op ? fmt::format("{}={}={}", origin, to_string(*op), glob) : fmt::format("{}={}", origin, glob);
}

std::vector<ChoiceEntry> parse_choice_entries(const std::vector<std::string>& raw, const std::string& origin) {
  std::vector<ChoiceEntry> out;
  for (const std::string& list : raw) {
    std::size_t start = 0;
    while (start <= list.size()) {
      const std::size_t comma = std::min(list.find(',', start), list.size());
      const std::string item = trim(std::string_view(list).substr(start, comma - start));
      start = comma + 1;
      if (item.empty()) continue;  // "a,,b" and trailing commas are harmless
      ChoiceEntry entry;
      entry.origin = origin;
      entry.glob = item;
      if (const auto eq = item.find('='); eq != std::string::npos) {
        const std::string op_name = trim(std::string_view(item).substr(0, eq));
        entry.glob = trim(std::string_view(item).substr(eq + 1));
        entry.op = parse_op(op_name);
        if (!entry.op) {
          std::string ops;
          for (Op op : all_ops()) ops += (ops.empty() ? "" : ", ") + std::string(to_string(op));
          throw Error(ErrorCode::invalid_argument,
                      fmt::format("{} entry '{}': '{}' is not an op; write [op=]backend-id with op "
                                  "one of {}",
                                  origin, item, op_name, ops));
        }
      }
      if (entry.glob.empty()) {
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("{} entry '{}' names no backend; write [op=]backend-id such as "
                                "sparse_mla=cuda.sparse_mla",
                                origin, item));
      }
      out.push_back(std::move(entry));
    }
  }
  return out;
}

std::vector<Reason> safe_check(const Backend& backend, const AttentionSpec& spec, const DeviceInfo& device) {
  try {
    return check(backend, spec, device);
  } catch (const std::exception& e) {
    return {Reason{"check_error", "backend", "a check that returns", "an exception",
                   fmt::format("its own check threw ({}); treated as a refusal", e.what())}};
  }
}

Decision decide(const std::vector<std::shared_ptr<const Backend>>& backends, const PolicyStack& policies,
                const AttentionSpec& spec, const DeviceInfo& device, const std::vector<ChoiceEntry>& force,
                const std::vector<ChoiceEntry>& exclude) {
  Decision decision;
  Selection& sel = decision.selection;
  sel.spec = spec;
  sel.device = device;
  const std::size_t n = backends.size();

  // An unknown forced or excluded id is a typo, never a silent no-op. Plugins' ids count once
  // the plugin is loaded, as for every other use of an id.
  for (const auto* list : {&force, &exclude}) {
    for (const ChoiceEntry& entry : *list) {
      const bool known = std::any_of(backends.begin(), backends.end(),
                                     [&](const auto& b) { return glob_match(entry.glob, b->info().id); });
      if (known) continue;
      std::vector<std::string> ids;
      for (const auto& b : backends) ids.push_back(b->info().id);
      throw Error(ErrorCode::not_found,
                  fmt::format("{} backend '{}' ({}) matches no registered backend; registered: {}; fix "
                              "the id or drop the entry (`latte backends` lists the ids, a plugin's "
                              "once it is loaded)",
                              list == &force ? "forced" : "excluded", entry.glob, entry.text(),
                              ids.empty() ? std::string("none") : join(ids, ", ")));
    }
  }

  std::vector<const ChoiceEntry*> forced_by(n, nullptr), excluded_by(n, nullptr);
  for (std::size_t i = 0; i < n; ++i) {
    const Backend& b = *backends[i];
    const std::string& id = b.info().id;
    for (const ChoiceEntry& entry : force) {
      if (!glob_match(entry.glob, id)) continue;
      if (entry.op ? *entry.op == spec.op : declares(b, spec.op)) {
        forced_by[i] = &entry;
        add_unique(sel.forced, entry.text());
      }
    }
    for (const ChoiceEntry& entry : exclude) {
      if (glob_match(entry.glob, id) && (!entry.op || *entry.op == spec.op)) {
        excluded_by[i] = &entry;
        add_unique(sel.excluded, entry.text());
      }
    }
    if (forced_by[i] && excluded_by[i]) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("backend {} is both forced ({}) and excluded ({}); drop one of the two",
                              id, forced_by[i]->text(), excluded_by[i]->text()));
    }
  }
  const bool force_active = !sel.forced.empty();

  std::vector<std::string> valid_ids;
  std::vector<RejectedBackend> rejected;
  std::vector<std::shared_ptr<const Backend>> candidates;
  std::vector<HeldBack> held_back;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& backend = backends[i];
    const std::string& id = backend->info().id;
    if (excluded_by[i]) {
      rejected.push_back({id, {Reason{"excluded", "backend", "not excluded", excluded_by[i]->text(),
                                          fmt::format("excluded by {}", excluded_by[i]->text())}}});
      held_back.push_back({backend, "exclude", fmt::format("it is excluded by {}", excluded_by[i]->text())});
      continue;
    }
    if (force_active && !forced_by[i]) {
      rejected.push_back({id, {Reason{"not_forced", "backend", join(sel.forced, ", "), id,
                                          fmt::format("not forced: {} selects only the forced backends",
                                                      join(sel.forced, ", "))}}});
      held_back.push_back({backend, "force", fmt::format("it is not among the forced backends ({})", join(sel.forced, ", "))});
      continue;
    }
    candidates.push_back(backend);
    std::vector<Reason> reasons = safe_check(*backend, spec, device);
    if (reasons.empty()) {
      valid_ids.push_back(id);
    } else {
      rejected.push_back({id, std::move(reasons)});
    }
  }

  sel.rejected = std::move(rejected);
  sel.valid = policies.rank(valid_ids, spec, device);
  if (!sel.valid.empty()) {
    sel.chosen = sel.valid.front().id;
    for (const auto& backend : backends) {
      if (backend->info().id == sel.chosen) sel.backend = backend;
    }
    return decision;
  }

  sel.suggestions = suggest(candidates, held_back, spec, device);
  if (force_active) {
    std::string text = fmt::format("the forced backend{} ({}) refuse{} {} on {}:",
                                   candidates.size() == 1 ? "" : "s", join(sel.forced, ", "),
                                   candidates.size() == 1 ? "s" : "", spec.summary(), device.label());
    for (const auto& backend : candidates) {
      for (const RejectedBackend& r : sel.rejected) {
        if (r.id != backend->info().id) continue;
        for (const Reason& reason : r.reasons) text += fmt::format("\n  {}: {}: {}", r.id, reason.code, reason.text);
      }
    }
    text += "\nlatte does not fall back from a forced backend: remove the force (LATTE_BACKEND, "
            "--force) to let the policy choose, or change the spec.";
    for (const Suggestion& s : sel.suggestions) text += "\n  - " + s.text;
    decision.forced_error = std::move(text);
  }
  return decision;
}

}  // namespace latte::detail
