#include "lazygraph/detail/kernels/persistent_schedule.hpp"

#include <algorithm>

#include "lazygraph/driver/error.hpp"

namespace lazygraph::detail {

PersistentSchedule schedule_persistent(std::span<const AccessSet> sets, std::span<const unsigned> tiles,
                                       unsigned blocks) {
  if (sets.size() != tiles.size()) {
    throw UsageError("schedule_persistent: " + std::to_string(sets.size()) + " access sets for " +
                     std::to_string(tiles.size()) + " calls");
  }
  if (blocks == 0) throw UsageError("schedule_persistent: a persistent kernel needs at least one block");
  PersistentSchedule s;
  // Waiting on a call's counter is cheap, so unlike a graph's joins (infer_dependencies), nothing is merged: a call
  // waits for exactly the calls it conflicts with, less those their own waits imply.
  s.after = direct_dependencies(sets);
  s.blocks = blocks;
  std::vector<std::vector<std::uint32_t>> per_block(blocks);
  std::size_t k = 0;
  for (std::size_t call = 0; call < tiles.size(); ++call) {
    if (tiles[call] == 0) throw UsageError("schedule_persistent: call " + std::to_string(call) + " has no tiles");
    for (unsigned tile = 0; tile < tiles[call]; ++tile, ++k) {
      std::vector<std::uint32_t>& q = per_block[k % blocks];
      q.push_back(static_cast<std::uint32_t>(call));
      q.push_back(tile);
    }
  }
  s.queue_begin.reserve(blocks + 1);
  s.queue.reserve(2 * k);
  for (const std::vector<std::uint32_t>& q : per_block) {
    s.queue_begin.push_back(static_cast<std::uint32_t>(s.queue.size() / 2));
    s.queue.insert(s.queue.end(), q.begin(), q.end());
  }
  s.queue_begin.push_back(static_cast<std::uint32_t>(s.queue.size() / 2));
  return s;
}

unsigned persistent_blocks(unsigned requested, int per_sm, int sms, std::size_t tiles, unsigned threads,
                           unsigned shared_bytes) {
  if (per_sm <= 0 || sms <= 0) {
    throw UsageError("persistent program: no block of " + std::to_string(threads) + " threads with " +
                     std::to_string(shared_bytes) +
                     " bytes of dynamic shared memory fits on a multiprocessor (occupancy 0); use fewer threads or "
                     "less shared memory per tile");
  }
  const auto resident = static_cast<unsigned long long>(per_sm) * static_cast<unsigned long long>(sms);
  if (requested > resident) {
    throw UsageError("persistent program: " + std::to_string(requested) + " blocks requested, but only " +
                     std::to_string(resident) + " (" + std::to_string(per_sm) + " per multiprocessor x " +
                     std::to_string(sms) +
                     ") can be resident at once; a block that waits on a counter would then wait for a block that "
                     "never runs. Ask for at most " +
                     std::to_string(resident) + ", or 0 for all of them");
  }
  const unsigned long long blocks = requested != 0 ? requested : resident;
  return static_cast<unsigned>(std::max<unsigned long long>(1, std::min<unsigned long long>(blocks, tiles)));
}

}  // namespace lazygraph::detail
