// A tensor-parallel rank's backend (step_backend.hpp): its share of the step with the collectives between the blocks.
#include <memory>
#include <string>

#include "lazygraph/nn/decoder_rank.hpp"
#include "lazygraph/nn/step_backend.hpp"

namespace lazygraph::nn {

namespace {
template <Element T>
class RankBackend final : public StepBackend<T> {
 public:
  RankBackend(const Communicator& comm, BasicDecoderState<T>& state, const TensorParallelOptions& options)
      : rank_(comm, state, options) {}

  CudaGraph<> capture(const StepContext<T>& ctx, int rows, const StepCapture& capture) override {
    // Ranks in other processes made their graph too: compare the collectives before anything replays them.
    CollectiveLog log(rank_.comm);
    CudaGraph<> graph =
        capture(AnyOp(decoder_rank_step(ctx.projector, ctx.weights, ctx.state, rank_, ctx.shape, rows, ctx.sampling)));
    check_same_collectives(rank_.comm, ctx.stream, log, "a graph of steps of " + std::to_string(rows) + " rows");
    return graph;
  }
  BasicRankState<T>* rank() noexcept override { return &rank_; }

 private:
  BasicRankState<T> rank_;
};
}  // namespace

template <Element T>
std::unique_ptr<StepBackend<T>> make_rank_backend(const Communicator& comm, BasicDecoderState<T>& state,
                                                  const TensorParallelOptions& options, const PeerExchange* peer) {
  if (peer != nullptr && peer->communicator() != comm) {
    throw UsageError("Decoder: the PeerExchange given is " + peer->communicator().describe() + "'s, not this rank's (" +
                     comm.describe() + ")");
  }
  auto backend = std::make_unique<RankBackend<T>>(comm, state, options);
  if (peer != nullptr) backend->rank()->peer = *peer;
  return backend;
}

template std::unique_ptr<StepBackend<half>> make_rank_backend<half>(const Communicator&, BasicDecoderState<half>&,
                                                                    const TensorParallelOptions&, const PeerExchange*);
template std::unique_ptr<StepBackend<bfloat16>> make_rank_backend<bfloat16>(const Communicator&,
                                                                            BasicDecoderState<bfloat16>&,
                                                                            const TensorParallelOptions&,
                                                                            const PeerExchange*);

}  // namespace lazygraph::nn
