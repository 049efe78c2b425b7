// The persistent backend (step_backend.hpp): a step is ONE persistent kernel running decoder_step_tiles' calls.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lazygraph/nn/decoder_tiles.hpp"
#include "lazygraph/nn/step_backend.hpp"

namespace lazygraph::nn {

namespace {
/// The programs of steps of 1 to kMaxRows rows, each made at its first use and dropped when the sampling changes
/// (their sample calls hold the rule).
template <Element T>
class PersistentBackend final : public StepBackend<T> {
 public:
  explicit PersistentBackend(const KernelLibrary& library) : tiles_(library), programs_(kMaxRows + 1) {}

  CudaGraph<> capture(const StepContext<T>& ctx, int rows, const StepCapture& capture) override {
    return capture(AnyOp(program(ctx, rows).op()));
  }
  void check(const StepContext<T>& ctx, int rows) override { program(ctx, rows).check(ctx.stream); }
  void forget_sampling() noexcept override {
    for (std::optional<PersistentProgram>& p : programs_) p.reset();
  }
  PersistentProgram& program(const StepContext<T>& ctx, int rows) override {
    std::optional<PersistentProgram>& p = programs_.at(static_cast<std::size_t>(rows));
    if (!p) {
      const PersistentOptions& o = ctx.config.persistent;
      const unsigned blocks =
          o.blocks != 0 ? o.blocks : static_cast<unsigned>(ctx.stream.device().sm_count()) * o.min_blocks_per_sm;
      p.emplace(ctx.stream, decoder_step_tiles(tiles_, ctx.weights, ctx.state, ctx.config, rows, ctx.sampling, blocks),
                o);
    }
    return *p;
  }

 private:
  BasicDecoderTiles<T> tiles_;
  std::vector<std::optional<PersistentProgram>> programs_;  ///< by rows
};
}  // namespace

template <Element T>
std::unique_ptr<StepBackend<T>> make_persistent_backend(const KernelLibrary& library, const Device& device) {
  check_tensor_cores(device.compute_capability());  // its projections are the tensor-core kernels'
  return std::make_unique<PersistentBackend<T>>(library);
}

template std::unique_ptr<StepBackend<half>> make_persistent_backend<half>(const KernelLibrary&, const Device&);
template std::unique_ptr<StepBackend<bfloat16>> make_persistent_backend<bfloat16>(const KernelLibrary&, const Device&);

}  // namespace lazygraph::nn
