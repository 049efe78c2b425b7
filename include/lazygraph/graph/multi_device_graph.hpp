#pragma once
/// \file
/// MultiDeviceGraph: one CUDA graph per rank of an NCCL communicator (Communicator::create_all), recorded together
/// and launched together. Recording runs `callback(rank, scope)` for every rank at once, one thread per rank (NCCL
/// needs every rank to take part in a collective at the same time, also while capturing: a rank's first collective
/// may connect to its peers), and compares the ranks' collectives as they are recorded, so that ranks that
/// disagree fail with a UsageError naming both instead of hanging in NCCL. Each rank's graph replays on a stream
/// of its own device; `launch` starts them all and waits, `synchronize_for(timeout)` bounds a wait.
///
///     auto comms = Communicator::create_all(devices);
///     auto graph = MultiDeviceGraph::capture(comms, [&](int rank, Scope& s) {
///       s.record(matmul(rank) >> all_reduce(comms[rank], partial[rank].view()));
///     });
///     graph.launch();

#include <chrono>
#include <functional>
#include <span>
#include <vector>

#include "lazygraph/driver/communicator.hpp"
#include "lazygraph/graph/cuda_graph.hpp"
#include "lazygraph/graph/graph_options.hpp"

namespace lazygraph {

namespace detail {

/// Runs `record(rank)` for every rank on a thread of its own and collects what each threw. When a rank fails
/// while another still records after `grace` (waiting in NCCL for the failed rank, which never comes), the
/// communicators are aborted so that it returns. Compares the ranks' collectives (Clique) throughout.
/// \throws the first rank's error, or UsageError when the ranks recorded different collectives.
void record_ranks(std::span<const Communicator> comms, const std::function<void(int)>& record,
                  std::chrono::milliseconds grace);

}  // namespace detail

/// One graph per rank, recorded and launched together (see the file comment). Move-only.
class MultiDeviceGraph {
 public:
  /// Captures `callback(rank, scope)` for every communicator (a Scope on a stream of that rank's device), each
  /// on a thread of its own, and instantiates and uploads each rank's graph.
  /// \throws UsageError for no communicators, communicators of different cliques, or ranks that recorded
  /// different collectives; whatever a callback threw. The communicators stay usable unless another rank was
  /// left waiting in NCCL for the failed one (as at a communicator's first collectives, where the ranks connect
  /// to each other): after a few seconds the communicators are aborted so that it returns; make new ones.
  template <class F>
  requires std::is_invocable_v<F&, int, Scope&>
  static MultiDeviceGraph capture(std::span<const Communicator> comms, F&& callback, const GraphOptions& options = {}) {
    std::vector<std::optional<CudaGraph<>>> graphs(comms.size());
    detail::record_ranks(
        comms,
        [&](int rank) {
          const Stream stream = Stream::pooled(comms[static_cast<std::size_t>(rank)].device());
          graphs[static_cast<std::size_t>(rank)].emplace(CudaGraph<>::scope(
              stream, [&](Scope& s) { (void)callback(rank, s); }, options));
        },
        std::chrono::seconds(5));
    MultiDeviceGraph out;
    out.comms_.assign(comms.begin(), comms.end());
    for (auto& g : graphs) out.graphs_.push_back(std::move(*g));
    return out;
  }

  /// Replays every rank's graph (each on its own stream, all started before any is waited for) and waits.
  void launch();
  /// Replays every rank's graph without waiting.
  void launch_async();
  /// Waits for every rank's replays.
  void synchronize();
  /// Waits for every rank's replays, at most `timeout` in all, checking each communicator's asynchronous error:
  /// on an error or a timeout the communicators are aborted and NcclError or TimeoutError names the rank.
  void synchronize_for(std::chrono::milliseconds timeout);

  /// The number of ranks (graphs).
  [[nodiscard]] std::size_t size() const noexcept { return graphs_.size(); }
  /// Rank `rank`'s graph (to inspect, or to launch alone). \throws std::out_of_range.
  [[nodiscard]] CudaGraph<>& graph(int rank) { return graphs_.at(static_cast<std::size_t>(rank)); }
  /// Rank `rank`'s communicator.
  [[nodiscard]] const Communicator& communicator(int rank) const { return comms_.at(static_cast<std::size_t>(rank)); }

 private:
  MultiDeviceGraph() = default;
  std::vector<CudaGraph<>> graphs_;
  std::vector<Communicator> comms_;
};

}  // namespace lazygraph
