#pragma once
// What the host_call tests ask of a HostCallError: its message, and whether a text contains a part.

#include <doctest/doctest.h>

#include <exception>
#include <string>

#include "lazygraph/driver/error.hpp"

namespace lgtest {

/// The message of the HostCallError that `f` throws; fails the test when it throws nothing or something else.
template <class F>
std::string host_call_error_of(F&& f) {
  try {
    f();
  } catch (const lazygraph::HostCallError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("threw another exception: " << e.what());
    return {};
  }
  FAIL("threw nothing");
  return {};
}

/// True when `text` contains `part`.
inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace lgtest
