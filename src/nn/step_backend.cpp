#include "lazygraph/nn/step_backend.hpp"

#include <memory>
#include <utility>

#include "lazygraph/nn/decoder_step.hpp"

namespace lazygraph::nn {

template <Element T>
void StepBackend<T>::check(const StepContext<T>& /*ctx*/, int /*rows*/) {}

template <Element T>
PersistentProgram& StepBackend<T>::program(const StepContext<T>& /*ctx*/, int /*rows*/) {
  throw UsageError("Decoder::persistent_program: the decoder does not run on DecoderBackend::persistent");
}

namespace {
/// decoder_step's kernels, captured as they are.
template <Element T>
class GraphBackend final : public StepBackend<T> {
 public:
  CudaGraph<> capture(const StepContext<T>& ctx, int rows, const StepCapture& capture) override {
    return capture(
        AnyOp(decoder_step(ctx.projector, ctx.weights, ctx.state, ctx.shape, rows, ctx.sampling, ctx.paged)));
  }
};
}  // namespace

template <Element T>
std::unique_ptr<StepBackend<T>> make_graph_backend() {
  return std::make_unique<GraphBackend<T>>();
}

template class StepBackend<half>;
template class StepBackend<bfloat16>;
template std::unique_ptr<StepBackend<half>> make_graph_backend<half>();
template std::unique_ptr<StepBackend<bfloat16>> make_graph_backend<bfloat16>();

}  // namespace lazygraph::nn
