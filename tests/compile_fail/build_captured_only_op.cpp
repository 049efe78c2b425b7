// expect-error: CudaGraph::build: this op \(or a part of it\) submits work to the stream itself
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

// A GraphNode of the user's own that submits to the stream directly: it can be captured, not built.
struct RawOp : lg::OpBase<RawOp> {
  using Output = void;
  static constexpr bool is_graph_node = true;
  void execute(lg::ExecContext& /*ctx*/) const {}
};

void misuse(const lg::Device& d) { auto g = lg::CudaGraph<>::build(d, RawOp{}); }
