#include "lazygraph/detail/driver/graph_handle.hpp"

#include "lazygraph/detail/driver/driver_api.hpp"

namespace lazygraph::detail::driver {

Graph Graph::create() { return Graph(graph_create()); }

void Graph::reset() noexcept { graph_destroy_no_throw(std::exchange(handle_, nullptr)); }

GraphExec GraphExec::instantiate(const Graph& graph, CUcontext ctx, std::string_view object, unsigned long long flags) {
  return GraphExec(graph_instantiate(ctx, graph.native_handle(), flags, object), ctx);
}

void GraphExec::reset() noexcept {
  graph_exec_destroy_no_throw(context_, std::exchange(handle_, nullptr));
  context_ = nullptr;
}

}  // namespace lazygraph::detail::driver
