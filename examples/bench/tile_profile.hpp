#pragma once
/// \file
/// A persistent program's profile (PersistentProgram::profile) summed per tile function, for the benchmarks' tables.

#include <lazygraph/lazygraph.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace bench {

/// One tile function's calls in a profiled run: their count and tiles, and the tiles' summed microseconds before,
/// in and after their waits.
struct TileFunctionTime {
  std::string name;
  int calls = 0;
  double tiles = 0;
  double before = 0;
  double waiting = 0;
  double after = 0;
  /// The tiles' summed time.
  [[nodiscard]] double busy() const { return before + waiting + after; }
};

/// `calls` summed per tile function, in order of first call; `span` gets the run's length in microseconds.
inline std::vector<TileFunctionTime> by_tile_function(const std::vector<lazygraph::PersistentCallProfile>& calls,
                                                      double& span) {
  std::vector<TileFunctionTime> by;
  span = 0;
  for (const auto& c : calls) {
    auto it = std::find_if(by.begin(), by.end(), [&](const TileFunctionTime& t) { return t.name == c.name; });
    if (it == by.end()) it = by.insert(by.end(), TileFunctionTime{c.name});
    ++it->calls;
    it->tiles += c.tiles;
    it->before += c.before_wait * c.tiles;
    it->waiting += c.waiting * c.tiles;
    it->after += c.after_wait * c.tiles;
    span = std::max(span, c.last_end);
  }
  return by;
}

}  // namespace bench
