// How the core's parsers quote an offending JSON value in an error message.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace latte::detail {

// The value as compact JSON, cut to 80 characters (invalid UTF-8 replaced).
inline std::string show_json(const nlohmann::json& value) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

}  // namespace latte::detail
