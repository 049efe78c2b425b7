#include "lazygraph/detail/driver/capture.hpp"
#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/detail/graph/scope.hpp"

namespace lazygraph {

Condition Scope::condition(unsigned default_value) {
  if (!open_) throw_closed();
  if (ctx_->planning()) {
    throw UsageError(
        "Scope::condition in CudaGraph::build: conditions belong to captured graphs; use CudaGraph::scope");
  }
  const CUcontext ctx = ctx_->stream().device().context();
  const CUgraph graph = detail::driver::capture_graph(ctx, ctx_->stream().get());
  const Condition c{detail::driver::conditional_handle_create(ctx, graph, default_value)};
  ctx_->condition_made(c.handle);
  return c;
}

}  // namespace lazygraph
