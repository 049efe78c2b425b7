#pragma once
// Shared by the NCCL tests: whether NCCL is there, saying why not (the test then returns: skipped, with the reason).

#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <string>

namespace lgtest {

/// True when NCCL loads; otherwise false after a MESSAGE "skipped: <why>".
inline bool have_nccl() {
  std::string why;
  if (lazygraph::nccl_available(&why)) return true;
  MESSAGE("skipped: " << why);
  return false;
}

}  // namespace lgtest
