#include "lazygraph/detail/kernels/persistent_schedule.hpp"

#include <algorithm>

#include "lazygraph/driver/error.hpp"

namespace lazygraph::detail {

namespace {

using CallBits = std::vector<std::uint64_t>;

bool has_call(const CallBits& b, std::size_t i) { return ((b[i / 64] >> (i % 64)) & 1U) != 0; }
void set_call(CallBits& b, std::size_t i) { b[i / 64] |= std::uint64_t{1} << (i % 64); }
void unite_calls(CallBits& a, const CallBits& b) {
  for (std::size_t w = 0; w < a.size(); ++w) a[w] |= b[w];
}

/// One call's per-tile accesses, sorted by address, to find the tiles a range conflicts with.
struct ProducerTiles {
  struct Entry {
    CUdeviceptr begin;
    CUdeviceptr end;
    bool writes;
    std::uint32_t tile;
  };
  std::vector<Entry> entries;  ///< by begin
  std::size_t longest = 0;

  /// Marks in `hit` the tiles with an access that conflicts with `a` (overlaps it, one of the two writing).
  void conflicts(const MemoryAccess& a, std::vector<char>& hit) const {
    const CUdeviceptr from = a.begin > longest ? a.begin - longest : 0;
    auto it = std::lower_bound(entries.begin(), entries.end(), from,
                               [](const Entry& e, CUdeviceptr v) { return e.begin < v; });
    for (; it != entries.end() && it->begin < a.end(); ++it) {
      if (it->end > a.begin && (it->writes || a.writes)) hit[it->tile] = 1;
    }
  }
};

/// Tile t's accesses, checked to lie within the call's (a write within a write, a read within either).
std::vector<MemoryAccess> checked_tile_accesses(const CallAccesses& c, unsigned t) {
  AccessSet set;
  c.per_tile(t, set);
  std::vector<MemoryAccess> out(set.entries().begin(), set.entries().end());
  for (const MemoryAccess& a : out) {
    const auto inside = [&](const MemoryAccess& whole) {
      return whole.begin <= a.begin && a.end() <= whole.end() && (whole.writes || !a.writes);
    };
    if (std::none_of(c.call.entries().begin(), c.call.entries().end(), inside)) {
      throw UsageError("persistent program: tile " + std::to_string(t) + " of " + c.name + " " +
                       (a.writes ? "writes" : "reads") + " " + std::to_string(a.bytes) +
                       " bytes that the call's own accesses do not cover; a tile's accesses must lie within its "
                       "call's (its spans)");
    }
  }
  return out;
}

}  // namespace

PersistentSchedule schedule_persistent(std::span<const CallAccesses> calls, unsigned blocks) {
  if (blocks == 0) throw UsageError("schedule_persistent: a persistent kernel needs at least one block");
  const std::size_t n = calls.size();
  PersistentSchedule s;
  s.blocks = blocks;
  s.after.resize(n);
  s.tiles_begin.reserve(n + 1);
  std::uint32_t total = 0;
  for (const CallAccesses& c : calls) {
    if (c.tiles == 0) throw UsageError("schedule_persistent: " + c.name + " has no tiles");
    s.tiles_begin.push_back(total);
    total += c.tiles;
  }
  s.tiles_begin.push_back(total);

  const std::size_t words = (n + 63) / 64;
  std::vector<CallBits> done_before(n, CallBits(words, 0));  // per call, calls complete before any of its tiles starts
  std::vector<ProducerTiles> index(n);
  std::vector<bool> indexed(n, false);
  const auto per_tile = [&](std::size_t c) {
    return static_cast<bool>(calls[c].per_tile) && !calls[c].call.is_opaque();
  };
  const auto index_of = [&](std::size_t i) -> const ProducerTiles& {
    if (!indexed[i]) {
      for (unsigned t = 0; t < calls[i].tiles; ++t) {
        for (const MemoryAccess& a : checked_tile_accesses(calls[i], t)) {
          index[i].entries.push_back({a.begin, a.end(), a.writes, t});
          index[i].longest = std::max(index[i].longest, a.bytes);
        }
      }
      std::sort(index[i].entries.begin(), index[i].entries.end(),
                [](const ProducerTiles::Entry& a, const ProducerTiles::Entry& b) { return a.begin < b.begin; });
      indexed[i] = true;
    }
    return index[i];
  };

  std::vector<TileWait> previous;  // the last tile's waits, shared by the next tile when equal
  std::uint32_t previous_begin = 0;
  for (std::size_t j = 0; j < n; ++j) {
    std::vector<std::size_t> candidates;  // latest first
    for (std::size_t i = j; i-- > 0;) {
      if (calls[i].call.is_opaque() || calls[j].call.is_opaque() ||
          find_conflict(calls[i].call, calls[j].call).has_value()) {
        candidates.push_back(i);
      }
    }
    CallBits common(words, ~std::uint64_t{0});
    std::vector<std::uint32_t> after;
    for (unsigned t = 0; t < calls[j].tiles; ++t) {
      CallBits done(words, 0);
      std::vector<TileWait> waits;
      const std::vector<MemoryAccess> mine =
          per_tile(j) ? checked_tile_accesses(calls[j], t) : std::vector<MemoryAccess>{};
      for (const std::size_t i : candidates) {
        if (has_call(done, i)) continue;
        if (per_tile(i) && per_tile(j)) {
          std::vector<char> hit(calls[i].tiles, 0);
          const ProducerTiles& producer = index_of(i);
          for (const MemoryAccess& a : mine) producer.conflicts(a, hit);
          const auto hits = static_cast<std::size_t>(std::count(hit.begin(), hit.end(), 1));
          if (hits == 0) continue;
          if (hits < calls[i].tiles) {
            for (std::uint32_t k = 0; k < calls[i].tiles;) {
              if (hit[k] == 0) {
                ++k;
                continue;
              }
              std::uint32_t e = k;
              while (e < calls[i].tiles && hit[e] != 0) ++e;
              waits.push_back({static_cast<std::uint32_t>(i), k, e - k});
              k = e;
            }
            unite_calls(done, done_before[i]);  // a tile of i is done, so what all of i's tiles waited for is
            after.push_back(static_cast<std::uint32_t>(i));
            continue;
          }
        }
        waits.push_back({static_cast<std::uint32_t>(i), kWholeCall, calls[i].tiles});
        unite_calls(done, done_before[i]);
        set_call(done, i);
        after.push_back(static_cast<std::uint32_t>(i));
      }
      for (std::size_t w = 0; w < words; ++w) common[w] &= done[w];
      if (j + t == 0 || waits != previous) {
        previous_begin = static_cast<std::uint32_t>(s.waits.size());
        s.waits.insert(s.waits.end(), waits.begin(), waits.end());
        previous = std::move(waits);
      }
      s.tile_waits.push_back(previous_begin);
      s.tile_waits.push_back(static_cast<std::uint32_t>(previous.size()));
    }
    done_before[j] = std::move(common);
    std::sort(after.begin(), after.end());
    after.erase(std::unique(after.begin(), after.end()), after.end());
    s.after[j] = std::move(after);
  }

  std::vector<std::vector<std::uint32_t>> per_block(blocks);
  std::size_t k = 0;
  for (std::size_t call = 0; call < n; ++call) {
    for (unsigned tile = 0; tile < calls[call].tiles; ++tile, ++k) {
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
