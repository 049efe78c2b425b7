#pragma once
/// \file
/// Module: `forward(Input) -> Output`, with member types Input and Output. GraphModule is the usual way to
/// make one: its forward pass is captured once, at construction, into a CudaGraph that copies the input from
/// pinned staging, computes, and copies the output to pinned staging; `forward` replays it once and waits once.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "lazygraph/driver/device_buffer.hpp"
#include "lazygraph/graph/cuda_graph.hpp"
#include "lazygraph/module/host_io.hpp"
#include "lazygraph/ops/allocate.hpp"
#include "lazygraph/ops/copy.hpp"

namespace lazygraph {

/// A forward pass: member types `Input` and `Output`, and `forward(Input)` returning an Output. GraphModule is
/// one; a module of your own qualifies by shape alone (no opt-in).
template <class M>
concept Module = requires(M& m, typename M::Input input) {
  typename M::Input;
  typename M::Output;
  { m.forward(input) } -> std::same_as<typename M::Output>;
};

/// A graph-backed module from `In[input_size]` to `Out[output_size]`. Its graph copies the input from pinned
/// staging, computes and copies the output to pinned staging (HostIo): `forward` writes the staging, replays once
/// and waits once. `forward_resident` takes input already on the device and skips the copy in.
///
/// Thread safety: forward, forward_into and forward_resident may be called from several threads at once: an
/// execution lock runs one call at a time (each writes the staging, replays and reads back as a whole), so every
/// caller gets its own result.
template <class In, class Out>
class GraphModule {
 public:
  /// `input_size` elements on the host.
  using Input = std::span<const In>;
  /// `output_size` elements on the host.
  using Output = std::vector<Out>;

  /// `build(input, output)` returns the forward pass as a GraphNode op reading `input` and writing `output`
  /// — or, for a forward pass that needs scratch memory, `build(scope, input, output)` records it itself (asking
  /// `scope.scratch` for its intermediates). It is captured now, once, between the staging copies, with `options`
  /// (a GraphPool, say). `build` is kept (copied) for forward_resident, which records it again for the caller's
  /// input.
  template <class Build>
  GraphModule(const Stream& stream, std::size_t input_size, std::size_t output_size, Build&& build,
              const GraphOptions& options = {})
      : GraphModule(stream, HostIo<In, Out>(stream.device(), input_size, output_size), std::forward<Build>(build),
                    options) {}

  /// As above, with the staging I/O given: HostIo(library, ...) copies with the library's staging kernel, which
  /// costs a replay less than memcpy nodes (host_io.hpp). Its sizes are the module's.
  template <class Build>
  GraphModule(const Stream& stream, HostIo<In, Out> io, Build&& build, const GraphOptions& options = {})
      // Zeroed, not left uninitialised: compute-sanitizer's initcheck checks a graph's memcpy nodes against memory as
      // it was when the graph was launched, not as the graph's earlier kernel nodes (the staging kernel's copy in)
      // leave it, so it would report a build(input, output) that starts with a copy of `input` on the first replay.
      : input_(zeros<In>(io.input().size()).sync_on(stream)),
        output_(zeros<Out>(io.output().size()).sync_on(stream)),
        io_(std::move(io)),
        graph_(CudaGraph<>::scope(
            stream,
            [&](Scope& s) {
              s.record(io_.copy_in(input_.view()));
              record_forward(build, s, input_.cview(), output_.view());
              s.record(io_.copy_out(output_.cview()));
            },
            options)),
        record_resident_([build = std::decay_t<Build>(build)](Scope& s, DeviceSpan<const In> x, DeviceSpan<Out> y,
                                                              const HostIo<In, Out>& io) {
          record_forward(build, s, x, y);
          s.record(io.copy_out(y));
        }),
        options_(options) {}

  /// Copies `x` in, replays the graph, and returns the output. \throws UsageError when `x` has the wrong size.
  Output forward(Input x) {
    Output out(output_.size());
    forward_into(x, out);
    return out;
  }

  /// As forward, writing into `out` (no allocation). \throws UsageError when `x` or `out` has the wrong size.
  void forward_into(Input x, std::span<Out> out) {
    check_size("input", x.size(), input_.size());
    check_size("output", out.size(), output_.size());
    const std::lock_guard<std::mutex> lock(*mutex_);
    std::copy(x.begin(), x.end(), io_.input().begin());
    HostIo<In, Out>::run(graph_);
    std::copy(io_.output().begin(), io_.output().end(), out.begin());
  }

  /// As forward_into, for input already on the device: a graph of its own (captured at the first call, and
  /// updated in place when `x` is another buffer than the last call's) reads `x` directly, with no copy in. `x`
  /// must hold its data when the call is made (work queued on other streams is not waited for).
  /// \throws UsageError when `x` or `out` has the wrong size.
  void forward_resident(DeviceSpan<const In> x, std::span<Out> out) {
    check_size("input", x.size(), input_.size());
    check_size("output", out.size(), output_.size());
    const std::lock_guard<std::mutex> lock(*mutex_);
    const auto record = [&](Scope& s) { record_resident_(s, x, output_.view(), io_); };
    if (!resident_) {
      resident_.emplace(CudaGraph<>::scope(graph_.stream(), record, options_));
    } else if (x.address() != resident_input_) {
      UpdateOptions options;
      options.reinstantiate_on_mismatch = true;
      (void)resident_->update_from(record, options);
    }
    resident_input_ = x.address();
    HostIo<In, Out>::run(*resident_);
    std::copy(io_.output().begin(), io_.output().end(), out.begin());
  }

  /// The captured graph (staging copies included, as forward replays it), e.g. to inspect it (node_count,
  /// write_dot, transfers) or replay it with launch_on.
  [[nodiscard]] CudaGraph<>& graph() noexcept { return graph_; }
  /// The device input buffer the graph reads, which `forward` fills.
  [[nodiscard]] DeviceSpan<const In> input() const { return input_.cview(); }
  /// The device output buffer the graph writes, which `forward` reads back.
  [[nodiscard]] DeviceSpan<const Out> output() const { return output_.cview(); }

 private:
  /// Records the forward pass from `x` to `y`: the op `build(x, y)` returns, or what `build(s, x, y)` records.
  template <class Build>
  static void record_forward(const Build& build, Scope& s, DeviceSpan<const In> x, DeviceSpan<Out> y) {
    if constexpr (std::is_invocable_v<const Build&, Scope&, DeviceSpan<const In>, DeviceSpan<Out>>) {
      build(s, x, y);
    } else {
      s.record(build(x, y));
    }
  }

  static void check_size(const char* what, std::size_t got, std::size_t want) {
    if (got != want) {
      throw UsageError(std::string("GraphModule: the ") + what + " has " + std::to_string(got) +
                       " elements; the module's " + what + " has " + std::to_string(want));
    }
  }

  DeviceBuffer<In> input_;
  DeviceBuffer<Out> output_;
  HostIo<In, Out> io_;
  CudaGraph<> graph_;
  /// Records the forward pass from the given input to the output buffer, then the copy out (forward_resident).
  std::function<void(Scope&, DeviceSpan<const In>, DeviceSpan<Out>, const HostIo<In, Out>&)> record_resident_;
  std::optional<CudaGraph<>> resident_;  ///< forward_resident's graph, captured on first use
  CUdeviceptr resident_input_ = 0;       ///< the input buffer resident_ reads
  GraphOptions options_;                 ///< how both graphs are made (a pool, say)
  std::unique_ptr<std::mutex> mutex_ = std::make_unique<std::mutex>();  ///< the execution lock (movable module)
};

}  // namespace lazygraph
