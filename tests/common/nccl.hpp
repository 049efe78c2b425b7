#pragma once
// Shared by the NCCL tests: whether NCCL and two GPUs are there, saying why not (the test then returns: skipped, with
// the reason), and ranks run one per thread, as one process per GPU would run them.

#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <cstddef>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace lgtest {

/// True when NCCL loads; otherwise false after a MESSAGE "skipped: <why>".
inline bool have_nccl() {
  std::string why;
  if (lazygraph::nccl_available(&why)) return true;
  MESSAGE("skipped: " << why);
  return false;
}

/// True when NCCL loads and this machine has two GPUs, for two ranks; otherwise false after a MESSAGE saying which
/// is missing.
inline bool have_two_ranks() {
  if (!have_nccl()) return false;
  if (lazygraph::Device::count() >= 2) return true;
  MESSAGE("skipped: two GPUs needed for two ranks; this machine has " << lazygraph::Device::count());
  return false;
}

/// Runs `rank(r)` for every r in [0, ranks), each on a thread of its own, and waits for all of them; then rethrows
/// the exception of the lowest rank that threw, if any.
template <class Rank>
void on_rank_threads(std::size_t ranks, Rank&& rank) {
  std::vector<std::exception_ptr> errors(ranks);
  std::vector<std::thread> threads;
  threads.reserve(ranks);
  for (std::size_t r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        rank(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace lgtest
