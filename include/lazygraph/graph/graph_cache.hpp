#pragma once
/// \file
/// GraphCache: many graphs of one computation, one per key (a batch size, a sequence bucket, a shape), made on
/// first use and replayed after — what vLLM and torch.compile do per batch size. Bounded: past `capacity` graphs
/// the least recently used one is dropped. `bucket_for` rounds a run-time size up to one of a few sizes, so that a
/// handful of keys cover every size.
///
/// Made with a GraphPool, its graphs share one pool: the maker is given it, to record each graph with
/// `GraphOptions::pool`, so that the graphs' scratch memory (Scope::scratch) shares physical memory — they are
/// replayed one at a time anyway. Padding and unpadding inputs to a bucket is BucketedModule's (module layer).
///
/// Thread safety: none; guard a cache shared between threads with a lock (its graphs' replays are the slow part).

#include <algorithm>
#include <cstddef>
#include <functional>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lazygraph/driver/error.hpp"
#include "lazygraph/graph/cuda_graph.hpp"
#include "lazygraph/graph/graph_pool.hpp"

namespace lazygraph {

/// The smallest of `buckets` (ascending) that is at least `size`. \throws UsageError when `buckets` is empty or
/// not ascending, or `size` is beyond the largest, naming both.
[[nodiscard]] inline std::size_t bucket_for(std::size_t size, std::span<const std::size_t> buckets) {
  if (buckets.empty()) throw UsageError("bucket_for: no buckets");
  if (!std::is_sorted(buckets.begin(), buckets.end())) throw UsageError("bucket_for: buckets must be ascending");
  const auto it = std::lower_bound(buckets.begin(), buckets.end(), size);
  if (it == buckets.end()) {
    throw UsageError("bucket_for: size " + std::to_string(size) + " is beyond the largest bucket (" +
                     std::to_string(buckets.back()) + ")");
  }
  return *it;
}

/// Hits, misses and evictions of a GraphCache since it was made.
struct GraphCacheStats {
  std::size_t hits = 0;       ///< get() found the key
  std::size_t misses = 0;     ///< get() did not find it (and called the maker)
  std::size_t made = 0;       ///< graphs the maker returned (misses whose maker did not throw)
  std::size_t evictions = 0;  ///< graphs dropped to stay within capacity
};

/// Graphs by key, made by `make(key)` on a miss (a capture or build), at most `capacity` of them, the least recently
/// used dropped first. `Graph` is CudaGraph<> by default; any movable type works (the cache only stores it).
template <class Key, class Graph = CudaGraph<>, class Hash = std::hash<Key>>
class GraphCache {
 public:
  /// How a graph is made for a key.
  using Maker = std::function<Graph(const Key&)>;

  /// How a graph is made for a key in a cache with a pool: record it with `GraphOptions::pool = pool`.
  using PooledMaker = std::function<Graph(const Key&, const GraphPool& pool)>;

  /// \throws UsageError for capacity 0 or an empty maker.
  GraphCache(std::size_t capacity, Maker make) : capacity_(capacity), make_(std::move(make)) {
    if (capacity_ == 0) throw UsageError("GraphCache: capacity must be at least 1");
    if (!make_) throw UsageError("GraphCache: no maker");
  }

  /// A cache without a maker of its own: each miss is made by the maker given to get(key, make). For an owner that
  /// moves (a module holding its graphs), whose maker would otherwise point at where it was. \throws UsageError for
  /// capacity 0.
  explicit GraphCache(std::size_t capacity) : capacity_(capacity) {
    if (capacity_ == 0) throw UsageError("GraphCache: capacity must be at least 1");
  }

  /// A cache whose graphs share `pool` (the maker records each with it). \throws UsageError as above.
  GraphCache(std::size_t capacity, GraphPool pool, PooledMaker make)
      : GraphCache(capacity, bind_pool(pool, std::move(make))) {
    pool_.emplace(std::move(pool));
  }

  /// The graph of `key`: the cached one (now the most recently used), or a new one from the maker, cached. When
  /// the maker throws (out of memory while capturing, say), the exception propagates and the cache is as it was:
  /// its other graphs keep working. A graph is dropped only after its replacement was made; dropping one that a
  /// stream still runs waits for those replays (as destroying any CudaGraph does). The reference is valid until the
  /// next get() that misses.
  /// \throws UsageError for a cache made without a maker (use get(key, make)).
  Graph& get(const Key& key) {
    if (!make_) throw UsageError("GraphCache: made without a maker; call get(key, make)");
    return get(key, make_);
  }

  /// As get(key), but a miss is made by `make(key)` (which returns a Graph) instead of the cache's maker.
  template <class Make>
  Graph& get(const Key& key, Make&& make) {
    if (const auto it = index_.find(key); it != index_.end()) {
      ++stats_.hits;
      if (it->second != entries_.begin()) entries_.splice(entries_.begin(), entries_, it->second);
      return it->second->second;
    }
    ++stats_.misses;
    Graph made = make(key);
    ++stats_.made;
    entries_.emplace_front(key, std::move(made));
    try {
      index_.emplace(key, entries_.begin());
    } catch (...) {
      entries_.pop_front();
      throw;
    }
    while (entries_.size() > capacity_) {
      index_.erase(entries_.back().first);
      entries_.pop_back();
      ++stats_.evictions;
    }
    return entries_.front().second;
  }

  /// Whether `key` has a graph (does not count as a use).
  [[nodiscard]] bool contains(const Key& key) const { return index_.find(key) != index_.end(); }
  /// Graphs held.
  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  /// The most graphs held at once.
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  /// The pool the cache's graphs share; null for a cache made without one.
  [[nodiscard]] const GraphPool* pool() const noexcept { return pool_ ? &*pool_ : nullptr; }
  /// Counters since construction.
  [[nodiscard]] const GraphCacheStats& stats() const noexcept { return stats_; }
  /// The keys from most to least recently used.
  [[nodiscard]] std::vector<Key> keys() const {
    std::vector<Key> out;
    out.reserve(entries_.size());
    for (const auto& e : entries_) out.push_back(e.first);
    return out;
  }
  /// Drops every graph (counters stay).
  void clear() noexcept {
    index_.clear();
    entries_.clear();
  }

 private:
  static Maker bind_pool(const GraphPool& pool, PooledMaker make) {
    if (!make) return nullptr;
    return [pool, make = std::move(make)](const Key& key) { return make(key, pool); };
  }

  using Entries = std::list<std::pair<Key, Graph>>;
  std::size_t capacity_ = 0;
  Maker make_;
  std::optional<GraphPool> pool_;
  Entries entries_;  ///< most recently used first
  std::unordered_map<Key, typename Entries::iterator, Hash> index_;
  GraphCacheStats stats_;
};

}  // namespace lazygraph
