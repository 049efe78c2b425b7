#pragma once
/// \file
/// Owning handles for a CUDA graph (`Graph`, a CUgraph) and its executable form (`GraphExec`, a CUgraphExec).
/// Move-only; null after a move. A GraphExec has no public constructor from a raw handle: it comes only from
/// instantiating a Graph, so every GraphExec is one this library made and will destroy.
///
/// `native_handle()` / `release()` give the raw handles, unchecked: what is done with them is the caller's.

#include <cuda.h>

#include <string_view>
#include <utility>

namespace lazygraph::detail::driver {

/// Destroying and instantiating are out of line (src/driver/graph_handle.cpp), so that including this header does not
/// reach the driver's entry points (driver_api.hpp): none of them is on a replay's path.
class Graph {
 public:
  Graph() = default;
  /// Takes ownership of `graph` (which may be null).
  explicit Graph(CUgraph graph) noexcept : handle_(graph) {}
  /// A new empty graph, to add nodes to (cuGraphCreate). \throws CudaError.
  [[nodiscard]] static Graph create();
  ~Graph() { reset(); }
  Graph(Graph&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Graph& operator=(Graph&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  [[nodiscard]] CUgraph native_handle() const noexcept { return handle_; }
  [[nodiscard]] CUgraph release() noexcept { return std::exchange(handle_, nullptr); }
  void reset() noexcept;
  explicit operator bool() const noexcept { return handle_ != nullptr; }

 private:
  CUgraph handle_ = nullptr;
};

class GraphExec {
 public:
  /// Instantiates `graph` in context `ctx` with CUDA_GRAPH_INSTANTIATE_FLAG_* `flags`. `object` names the graph
  /// in errors. \throws CudaError when instantiation fails (nothing is leaked).
  [[nodiscard]] static GraphExec instantiate(const Graph& graph, CUcontext ctx, std::string_view object,
                                             unsigned long long flags = 0);

  GraphExec() = default;
  ~GraphExec() { reset(); }
  GraphExec(GraphExec&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)), context_(std::exchange(other.context_, nullptr)) {}
  GraphExec& operator=(GraphExec&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
      context_ = std::exchange(other.context_, nullptr);
    }
    return *this;
  }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;

  [[nodiscard]] CUgraphExec native_handle() const noexcept { return handle_; }
  [[nodiscard]] CUcontext context() const noexcept { return context_; }
  /// Destroys the executable graph (if any); null afterwards, as after a move.
  void reset() noexcept;
  explicit operator bool() const noexcept { return handle_ != nullptr; }

 private:
  GraphExec(CUgraphExec handle, CUcontext ctx) noexcept : handle_(handle), context_(ctx) {}

  CUgraphExec handle_ = nullptr;
  CUcontext context_ = nullptr;
};

}  // namespace lazygraph::detail::driver
