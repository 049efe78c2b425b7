#include "lazygraph/detail/ops/access.hpp"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "lazygraph/detail/driver/error.hpp"

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

std::vector<std::vector<std::uint32_t>> infer_dependencies(std::span<const AccessSet> sets) {
  const std::size_t n = sets.size();
  const std::size_t words = (n + 63) / 64;
  // ancestors[j]: every op that op j follows, directly or through others (a bit per op).
  std::vector<std::vector<std::uint64_t>> ancestors(n, std::vector<std::uint64_t>(words, 0));
  std::vector<std::vector<std::uint32_t>> result(n);
  for (std::size_t j = 0; j < n; ++j) {
    // The latest conflicting op first: once it is a predecessor, its own ancestors need no edge of their own.
    for (std::size_t i = j; i-- > 0;) {
      if ((ancestors[j][i / 64] >> (i % 64)) & 1U) continue;
      const bool ordered = sets[i].is_opaque() || sets[j].is_opaque() || find_conflict(sets[i], sets[j]).has_value();
      if (!ordered) continue;
      result[j].push_back(static_cast<std::uint32_t>(i));
      ancestors[j][i / 64] |= std::uint64_t{1} << (i % 64);
      for (std::size_t w = 0; w < words; ++w) ancestors[j][w] |= ancestors[i][w];
    }
    std::reverse(result[j].begin(), result[j].end());
  }
  return result;
}

}  // namespace detail

}  // namespace lazygraph
