/// @brief flashback::Error — the one exception type of the library. Every message names the
/// argument, what was expected and what came.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace flashback {

class Error : public std::runtime_error {
 public:
  Error(std::string argument, std::string expected, std::string actual)
      : std::runtime_error(argument + ": expected " + expected + ", got " + actual),
        argument_(std::move(argument)),
        expected_(std::move(expected)),
        actual_(std::move(actual)) {}

  const std::string& argument() const { return argument_; }
  const std::string& expected() const { return expected_; }
  const std::string& actual() const { return actual_; }

 private:
  std::string argument_, expected_, actual_;
};

namespace detail {
template <typename... Ts>
std::string concat(const Ts&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  return s.str();
}
}  // namespace detail

}  // namespace flashback

/// Throws flashback::Error(arg, expected, actual) unless cond holds. `expected` and `actual`
/// are evaluated only on failure, so they may be expensive string expressions.
#define FLASHBACK_CHECK(cond, arg, expected, actual)                    \
  do {                                                                  \
    if (!(cond)) throw ::flashback::Error((arg), (expected), (actual)); \
  } while (0)
