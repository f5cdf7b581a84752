// latte::Error: every user-facing failure carries a code and a message that names
// what was wrong, the value, and what to do.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace latte {

enum class ErrorCode {
  invalid_argument,  // a tensor, shape, dtype, stride or value the op cannot take
  not_found,         // unknown model, backend id, device, file
  unsupported,       // a valid request that this backend or build cannot serve
  no_valid_backend,  // the selector found nothing that accepts the spec
  config_error,      // malformed model config.json
  policy_error,      // malformed policy file
  plugin_error,      // a plugin that could not be loaded
  cuda_error,        // a CUDA runtime failure
  out_of_memory,     // host or device memory for a request could not be had (the bytes named)
  internal,          // a bug in latte
};

std::string_view to_string(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  [[nodiscard]] ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace latte
