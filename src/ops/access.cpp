#include "lazygraph/ops/access.hpp"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "lazygraph/driver/error.hpp"

namespace lazygraph {

namespace {

std::string_view verb(const MemoryAccess& a) { return a.writes ? "writes" : "reads"; }

}  // namespace

std::string AccessConflict::describe() const {
  const CUdeviceptr begin = std::max(first.begin, second.begin);
  const CUdeviceptr end = std::min(first.end(), second.end());
  std::ostringstream out;
  out << '"' << first.op << "\" " << verb(first) << " and \"" << second.op << "\" " << verb(second) << " the "
      << (end - begin) << " bytes at 0x" << std::hex << begin << std::dec << " (" << kind() << "; the first views "
      << first.bytes << " bytes at 0x" << std::hex << first.begin << std::dec << ", the second " << second.bytes
      << " bytes at 0x" << std::hex << second.begin << ")";
  return out.str();
}

std::optional<AccessConflict> find_conflict(const AccessSet& earlier, const AccessSet& later) {
  for (const MemoryAccess& a : earlier.entries()) {
    for (const MemoryAccess& b : later.entries()) {
      if ((a.writes || b.writes) && a.overlaps(b)) return AccessConflict{a, b};
    }
  }
  return std::nullopt;
}

namespace detail {

void check_branches_independent(std::span<const AccessSet> branches) {
  for (std::size_t j = 1; j < branches.size(); ++j) {
    for (std::size_t i = 0; i < j; ++i) {
      const std::optional<AccessConflict> c = find_conflict(branches[i], branches[j]);
      if (!c) continue;
      std::ostringstream out;
      out << "all(): branches " << i << " and " << j << " race: " << c->describe()
          << ". Nothing orders the branches of all(): order them with >>, let dataflow(...) order them by what "
             "they touch, or, when they never touch those bytes at the same time, use all_unchecked(...)";
      throw UsageError(out.str());
    }
  }
}

namespace {

using Bits = std::vector<std::uint64_t>;

bool has(const Bits& bits, std::size_t i) { return ((bits[i / 64] >> (i % 64)) & 1U) != 0; }

/// Keeps of each node's predecessors only those not reached through another (the transitive reduction), for
/// `wanted(i, j)`: whether node j must follow node i. Visits the latest candidates first, so that one kept
/// predecessor's ancestors need no edges of their own.
template <class Wanted>
std::vector<std::vector<std::uint32_t>> reduce(std::size_t n, Wanted&& wanted) {
  const std::size_t words = (n + 63) / 64;
  std::vector<Bits> ancestors(n, Bits(words, 0));
  std::vector<std::vector<std::uint32_t>> result(n);
  for (std::size_t j = 0; j < n; ++j) {
    for (std::size_t i = j; i-- > 0;) {
      if (has(ancestors[j], i) || !wanted(i, j)) continue;
      result[j].push_back(static_cast<std::uint32_t>(i));
      ancestors[j][i / 64] |= std::uint64_t{1} << (i % 64);
      for (std::size_t w = 0; w < words; ++w) ancestors[j][w] |= ancestors[i][w];
    }
    std::reverse(result[j].begin(), result[j].end());
  }
  return result;
}

}  // namespace

std::vector<std::vector<std::uint32_t>> direct_dependencies(std::span<const AccessSet> sets) {
  return reduce(sets.size(), [&](std::size_t i, std::size_t j) {
    return sets[i].is_opaque() || sets[j].is_opaque() || find_conflict(sets[i], sets[j]).has_value();
  });
}

std::vector<std::vector<std::uint32_t>> infer_dependencies(std::span<const AccessSet> sets) {
  const std::size_t n = sets.size();
  std::vector<std::vector<std::uint32_t>> deps = direct_dependencies(sets);
  // One join instead of two: a node that waits for several predecessors, the latest of which already waits for
  // several itself (a join), waits for that one alone, which takes the others in. In a graph every join ends a chain
  // of early-launched kernels (about 1-2 us each on an H100); this only ever orders more, never less.
  bool moved = false;
  for (std::size_t j = 0; j < n; ++j) {
    if (deps[j].size() < 2) continue;
    const std::uint32_t m = deps[j].back();  // ascending: the latest
    if (deps[m].size() < 2) continue;
    for (std::size_t k = 0; k + 1 < deps[j].size(); ++k) deps[m].push_back(deps[j][k]);
    deps[j].assign(1, m);
    moved = true;
  }
  if (!moved) return deps;
  std::vector<Bits> edge(n, Bits((n + 63) / 64, 0));
  for (std::size_t j = 0; j < n; ++j) {
    for (const std::uint32_t i : deps[j]) edge[j][i / 64] |= std::uint64_t{1} << (i % 64);
  }
  return reduce(n, [&](std::size_t i, std::size_t j) { return has(edge[j], i); });
}

}  // namespace detail

}  // namespace lazygraph
