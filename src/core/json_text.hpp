// How the core reads JSON inputs (model configs, policies, plugin capabilities) and quotes an
// offending value in an error message. Every JSON input goes through parse_json_input, so one set
// of limits holds for all of them: a hostile file gets an error, never a stack overflow or an
// exhausted memory.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "latte/error.hpp"

namespace latte::detail {

// The limits of one JSON input. Real inputs are a few KB and nest fewer than 8 levels.
inline constexpr std::size_t kMaxJsonBytes = std::size_t{4} << 20;  // 4 MiB
inline constexpr int kMaxJsonDepth = 64;                             // arrays and objects

namespace json_detail {

inline void append_json(const nlohmann::json& value, std::string& out, std::size_t budget, int depth) {
  const auto scalar = [](const nlohmann::json& v) {
    return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  if (!value.is_structured()) {
    out += scalar(value);
    return;
  }
  const bool object = value.is_object();
  if (depth >= kMaxJsonDepth) {  // values come from parse_json_input, so this does not happen
    out += object ? "{...}" : "[...]";
    return;
  }
  out += object ? '{' : '[';
  bool first = true;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (out.size() > budget) return;  // the caller cuts the text anyway
    if (!first) out += ',';
    first = false;
    if (object) out += scalar(nlohmann::json(it.key())) + ":";
    append_json(it.value(), out, budget, depth + 1);
  }
  out += object ? '}' : ']';
}

[[noreturn]] inline void fail_size(std::string_view subject, ErrorCode code, const std::string& size) {
  throw Error(code, fmt::format("{}: {} bytes of JSON, over latte's limit of {} bytes (4 MiB) for one "
                                "JSON input; model configs, policies and capabilities are a few KB: "
                                "check that this is the right file",
                                subject, size, kMaxJsonBytes));
}

}  // namespace json_detail

// The value as compact JSON, cut to 80 characters (invalid UTF-8 replaced). Writes no more than
// it shows, so a large value costs no more than a small one.
inline std::string show_json(const nlohmann::json& value) {
  std::string text;
  json_detail::append_json(value, text, 80, 0);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

// Parses one JSON input. `subject` starts every error ("model config /x/config.json"); errors
// carry `code`. Refused, each with the limit and the fix: more than kMaxJsonBytes, nesting deeper
// than kMaxJsonDepth, a key twice in one object (JSON readers disagree on which copy counts), and
// text that is not JSON. `comments` allows // and /* */ comments.
inline nlohmann::json parse_json_input(std::string_view text, std::string_view subject, ErrorCode code,
                                       bool comments = false) {
  using nlohmann::json;
  if (text.size() > kMaxJsonBytes) json_detail::fail_size(subject, code, std::to_string(text.size()));

  // The containers being read, outermost first, to check keys and to name where a duplicate is.
  struct Open {
    bool object;
    std::set<std::string> keys;
    std::string key;   // object: the key being read
    long index = -1;   // array: the element being read
  };
  std::vector<Open> open;
  int deepest = 0;
  const auto where = [&open]() {
    std::string path;
    for (const Open& o : open) {
      if (&o == &open.back()) break;
      path += o.object ? (path.empty() ? o.key : "." + o.key) : fmt::format("[{}]", o.index);
    }
    return path.empty() ? std::string("at the top level") : fmt::format("in {}", path);
  };
  const auto next_element = [&open]() {
    if (!open.empty() && !open.back().object) ++open.back().index;
  };
  // nlohmann calls this with `depth` = the containers around the event. A container past the
  // limit is discarded (return false) with all it holds, so the DOM never nests deeper than the
  // limit; the parse still runs to the end, which gives the depth the error reports.
  const json::parser_callback_t callback = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        deepest = std::max(deepest, depth + 1);
        if (depth + 1 > kMaxJsonDepth) return false;
        next_element();
        open.push_back({event == json::parse_event_t::object_start, {}, {}});
        return true;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (static_cast<std::size_t>(depth) + 1 == open.size()) open.pop_back();
        return true;
      case json::parse_event_t::key:
        if (static_cast<std::size_t>(depth) == open.size() && open.back().object) {
          Open& o = open.back();
          o.key = parsed.get<std::string>();
          if (!o.keys.insert(o.key).second) {
            throw Error(code, fmt::format("{}: key {} appears twice {}; JSON readers disagree on "
                                          "which copy counts, so latte takes neither: keep one",
                                          subject, show_json(parsed), where()));
          }
        }
        return true;
      case json::parse_event_t::value:
        if (static_cast<std::size_t>(depth) == open.size()) next_element();
        return true;
    }
    return true;
  };

  json root;
  try {
    root = json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true, comments);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers like 1e99999
    std::string what = e.what();
    if (what.size() > 300) what = what.substr(0, 297) + "...";  // "last read" can quote a whole string
    throw Error(code, fmt::format("{}: not valid JSON: {}", subject, what));
  }
  if (deepest > kMaxJsonDepth) {
    throw Error(code, fmt::format("{}: JSON nested {} levels deep, over latte's limit of {} levels of "
                                  "arrays and objects; model configs, policies and capabilities "
                                  "nest fewer than 8: check that this is the right file",
                                  subject, deepest, kMaxJsonDepth));
  }
  return root;
}

// The text of a JSON file, or nullopt when it cannot be opened. Reads at most kMaxJsonBytes + 1
// bytes, so that a huge file or a device such as /dev/zero is refused without being read whole.
inline std::optional<std::string> read_json_file(const std::filesystem::path& path, std::string_view subject,
                                                 ErrorCode code) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    const auto size = std::filesystem::file_size(path, ec);
    if (!ec && size > kMaxJsonBytes) json_detail::fail_size(subject, code, std::to_string(size));
  }
  std::string text;
  char chunk[1 << 16];
  while (in && text.size() <= kMaxJsonBytes) {
    in.read(chunk, sizeof chunk);
    text.append(chunk, static_cast<std::size_t>(in.gcount()));
  }
  if (text.size() > kMaxJsonBytes) json_detail::fail_size(subject, code, "more than " + std::to_string(kMaxJsonBytes));
  return text;
}

}  // namespace latte::detail
