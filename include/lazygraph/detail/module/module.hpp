#pragma once
/// \file
/// Module: `forward(Input) -> Output`, with member types Input and Output. GraphModule is the usual way to
/// make one: its forward pass is captured once, at construction, into a CudaGraph reading a device input
/// buffer and writing a device output buffer; `forward` copies the input in, replays, and copies the output out.

#include <concepts>
#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "lazygraph/detail/driver/device_buffer.hpp"
#include "lazygraph/detail/graph/cuda_graph.hpp"
#include "lazygraph/detail/ops/copy.hpp"

namespace lazygraph {

/// A forward pass: member types `Input` and `Output`, and `forward(Input)` returning an Output. GraphModule is
/// one; a module of your own qualifies by shape alone (no opt-in).
template <class M>
concept Module = requires(M& m, typename M::Input input) {
  typename M::Input;
  typename M::Output;
  { m.forward(input) } -> std::same_as<typename M::Output>;
};

/// A graph-backed module from `In[input_size]` to `Out[output_size]`.
///
/// Thread safety: forward and forward_into may be called from several threads at once: an execution lock runs
/// one call at a time (each copies in, replays and copies out as a whole), so every caller gets its own result.
template <class In, class Out>
class GraphModule {
 public:
  /// `input_size` elements on the host.
  using Input = std::span<const In>;
  /// `output_size` elements on the host.
  using Output = std::vector<Out>;

  /// `build(input, output)` returns the forward pass as a GraphNode op reading `input` and writing `output`;
  /// it is captured now, once.
  template <class Build>
  GraphModule(const Stream& stream, std::size_t input_size, std::size_t output_size, Build&& build)
      : input_(stream.device(), input_size),
        output_(stream.device(), output_size),
        graph_(CudaGraph<>::scope(stream, [&](Scope& s) { s.record(build(input_.cview(), output_.view())); })) {}

  /// Copies `x` in, replays the graph, and returns the output. \throws UsageError when `x` has the wrong size.
  Output forward(Input x) {
    Output out(output_.size());
    forward_into(x, out);
    return out;
  }

  /// As forward, writing into `out` (no allocation).
  void forward_into(Input x, std::span<Out> out) {
    const std::lock_guard<std::mutex> lock(*mutex_);
    graph_.update(copy(input_.view(), x));
    graph_.launch();
    copy_async(graph_.stream(), out, output_.cview());
    graph_.stream().synchronize();
  }

  /// The captured graph, e.g. to inspect it (node_count, write_dot) or replay it with launch_on.
  [[nodiscard]] CudaGraph<>& graph() noexcept { return graph_; }
  /// The device input buffer the graph reads, which `forward` fills.
  [[nodiscard]] DeviceSpan<const In> input() const { return input_.cview(); }
  /// The device output buffer the graph writes, which `forward` reads back.
  [[nodiscard]] DeviceSpan<const Out> output() const { return output_.cview(); }

 private:
  DeviceBuffer<In> input_;
  DeviceBuffer<Out> output_;
  CudaGraph<> graph_;
  std::unique_ptr<std::mutex> mutex_ = std::make_unique<std::mutex>();  ///< the execution lock (movable module)
};

}  // namespace lazygraph
