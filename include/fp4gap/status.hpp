#pragma once
// Errors and statuses shared by every layer.
#include <stdexcept>
#include <string>
#include <string_view>

namespace fp4gap {

// Thrown when an input breaks a documented rule. The message names the rule and quotes the
// shape or value that broke it, e.g. "K % 16 != 0: K = 100 (NVFP4 blocks are 16 elements)".
class InvalidArgument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Thrown when something outside the caller's control fails (CUDA, cuBLAS, I/O).
class RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class StatusCode { ok, not_supported, invalid_problem };

// What a backend answers to "can you run this problem on this device?".
struct Status {
  StatusCode code = StatusCode::ok;
  std::string reason;  // empty when ok

  static Status ok() { return {}; }
  static Status not_supported(std::string why) { return {StatusCode::not_supported, std::move(why)}; }
  static Status invalid_problem(std::string why) { return {StatusCode::invalid_problem, std::move(why)}; }
  bool is_ok() const { return code == StatusCode::ok; }
};

constexpr std::string_view to_string(StatusCode c) {
  switch (c) {
    case StatusCode::ok: return "ok";
    case StatusCode::not_supported: return "not_supported";
    case StatusCode::invalid_problem: return "invalid_problem";
  }
  return "?";
}

}  // namespace fp4gap
