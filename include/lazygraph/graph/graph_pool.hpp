#pragma once
/// \file
/// GraphPool: graphs whose scratch memory (Scope::scratch) may share physical memory, because they never run at the
/// same time — the equivalent of PyTorch's graph pool handle.
///
/// How the sharing works: scratch memory is made of CUDA graph memory nodes, whose physical memory CUDA takes from
/// one per-device graph memory pool and maps into a graph when it runs. Graphs launched into one stream run one
/// after another, so CUDA backs all of them with the same physical pages (on the H100, 16 graphs of 64–124 MiB of
/// scratch each replayed on one stream reserve 128 MiB; on two streams, concurrently, 256 MiB). A GraphPool is
/// that one stream: every graph made with `GraphOptions::pool` replays on the pool's stream — also when launched
/// on another one (`launch_on(s)` links `s` to the pool's stream both ways: the replay runs after the work queued
/// on `s` before it, and the work queued on `s` after it waits for it) — so no two graphs of one pool ever run at
/// once, and replays of a pool from several threads are serialised.
///
/// What it cannot do: CUDA keeps one graph memory pool per device, so usage() and trim() are the device's (all
/// graphs, pooled or not); and a graph outside any pool that runs concurrently with a pooled one gets memory of
/// its own, as it must.

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

#include "lazygraph/driver/device.hpp"
#include "lazygraph/driver/stream.hpp"

namespace lazygraph {

/// The device's memory for graph scratch allocations, in bytes (cuDeviceGetGraphMemAttribute).
struct GraphMemoryUsage {
  /// Backing memory in use by graphs now.
  std::size_t used = 0;
  /// The most in use since the peaks were last reset.
  std::size_t used_peak = 0;
  /// Physical memory reserved for graphs now (in use or cached for the next replay).
  std::size_t reserved = 0;
  /// The most reserved since the peaks were last reset.
  std::size_t reserved_peak = 0;
};

/// The graph memory of `device` (every graph's scratch memory, pooled or not).
[[nodiscard]] GraphMemoryUsage graph_memory_usage(const Device& device);

namespace detail {
/// What the graphs of a pool share: the stream they replay on, the lock that orders replays elsewhere, and the
/// scratch bytes of each graph.
struct GraphPoolState {
  explicit GraphPoolState(const Device& d) : device(d), stream(std::make_shared<Stream>(d.create_stream())) {}
  Device device;
  std::shared_ptr<Stream> stream;
  std::mutex launch_mutex;  ///< held while a replay (and its links to another stream) is queued
  mutable std::mutex accounts_mutex;
  std::map<const void*, std::size_t> scratch_bytes;  ///< by graph
};
}  // namespace detail

/// Graphs that may share scratch memory because they never run at once (see the file comment). A handle: copies
/// refer to one pool, which lives as long as a copy or a graph made with it does.
///
/// Thread safety: every member may be called from several threads at once; graphs of one pool may be replayed from
/// several threads at once (their replays are serialised).
class GraphPool {
 public:
  /// A pool on `device`, with a stream of its own. \throws CudaError when the stream cannot be made.
  explicit GraphPool(const Device& device) : state_(std::make_shared<detail::GraphPoolState>(device)) {}

  /// The device.
  [[nodiscard]] const Device& device() const noexcept { return state_->device; }
  /// The stream the pool's graphs replay on.
  [[nodiscard]] const Stream& stream() const noexcept { return *state_->stream; }
  /// The graphs made with this pool that are alive.
  [[nodiscard]] std::size_t graph_count() const;
  /// The scratch memory (Scope::scratch) of the largest graph of the pool: what the pool needs when its graphs
  /// share physical memory.
  [[nodiscard]] std::size_t largest_scratch_bytes() const;
  /// The scratch memory of all its graphs together: what they would need without sharing.
  [[nodiscard]] std::size_t total_scratch_bytes() const;
  /// The device's graph memory (graph_memory_usage).
  [[nodiscard]] GraphMemoryUsage usage() const { return graph_memory_usage(device()); }
  /// Waits for the pool's replays, then gives back to the system the graph memory that no queued or running graph
  /// uses (the device's, cuDeviceGraphMemTrim): the next replay maps memory again (slower, once).
  void trim();
  /// Sets usage()'s peaks to the current values.
  void reset_peaks();

  /// The shared state (GraphState's).
  [[nodiscard]] const std::shared_ptr<detail::GraphPoolState>& state() const noexcept { return state_; }

 private:
  std::shared_ptr<detail::GraphPoolState> state_;
};

}  // namespace lazygraph
