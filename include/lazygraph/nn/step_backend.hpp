#pragma once
/// \file
/// The backend seam: what runs a decoder's step. A decoder holds one StepBackend and asks it for the op of a step of
/// `rows` rows whenever it captures a graph (the step's own, the one behind forward, generate's loop); it never asks
/// which backend it holds. Three are made here:
///   - the graph backend: decoder_step's kernels (decoder_step.hpp), the default;
///   - the persistent backend: one persistent kernel running the same kernels' code as tiles (decoder_tiles.hpp);
///   - a tensor-parallel rank's: its share of the step with the collectives between the blocks (decoder_rank.hpp),
///     each capture checked against the other ranks' collectives.
/// docs/adding.md lists the files a new backend touches.

#include <functional>
#include <memory>

#include "lazygraph/driver/peer_exchange.hpp"
#include "lazygraph/graph/cuda_graph.hpp"
#include "lazygraph/kernels/kernel_library.hpp"
#include "lazygraph/kernels/persistent_program.hpp"
#include "lazygraph/nn/decoder_config.hpp"
#include "lazygraph/nn/decoder_state.hpp"
#include "lazygraph/nn/decoder_weights.hpp"
#include "lazygraph/nn/paged_attention.hpp"
#include "lazygraph/nn/projection.hpp"
#include "lazygraph/nn/sampling.hpp"
#include "lazygraph/nn/tensor_parallel_options.hpp"
#include "lazygraph/ops/any_op.hpp"

namespace lazygraph::nn {

template <Element T>
struct BasicRankState;  // nn/decoder_rank.hpp

/// What a backend builds a step from, handed to it at each call (the decoder is movable: a backend keeps no reference
/// to it).
template <Element T>
struct StepContext {
  const DecoderConfig& shape;             ///< the shapes the step runs (on a rank, its share's: shard_config)
  const DecoderConfig& config;            ///< the whole model's config (the persistent backend's options)
  Projector<T> projector;                 ///< the kernels the projections run on
  const BasicDecoderWeights<T>& weights;  ///< the weights (a rank's share)
  BasicDecoderState<T>& state;            ///< the step's memory
  const Sampling& sampling;               ///< how the step picks its tokens
  const Stream& stream;                   ///< the decoder's stream
  const PagedAttention<T>* paged;         ///< a paged cache's kernels (DecoderConfig::kv_block_size), else null
};

/// What a backend hands the op of a step to: a capture of a graph that holds it (with the staging copies, a loop
/// around it). Called once per call of StepBackend::capture.
using StepCapture = std::function<CudaGraph<>(AnyOp)>;

/// What runs a decoder's step (see the file comment). Not copyable; the decoder holds it by pointer.
template <Element T>
class StepBackend {
 public:
  /// A backend (the factories below make them).
  StepBackend() = default;
  StepBackend(const StepBackend&) = delete;
  StepBackend& operator=(const StepBackend&) = delete;
  virtual ~StepBackend() = default;

  /// The graph `capture` makes of the op of a step of `rows` rows (1 to kMaxRows), after whatever the backend checks
  /// around a capture. \throws UsageError, CudaError as the step's ops and the capture; what the backend checks.
  [[nodiscard]] virtual CudaGraph<> capture(const StepContext<T>& ctx, int rows, const StepCapture& capture) = 0;
  /// After a replay of a graph holding steps of `rows` rows: throws the error the step stopped with, where the backend
  /// can stop one (the persistent kernel's wait timeout: PersistentProgram::check); else nothing.
  virtual void check(const StepContext<T>& ctx, int rows);
  /// The sampling rule changed: drops what holds the old one (the graphs that hold the step are the decoder's).
  virtual void forget_sampling() noexcept {}
  /// A tensor-parallel rank's communicator and logits shares (prefill's collectives need them), or null.
  [[nodiscard]] virtual BasicRankState<T>* rank() noexcept { return nullptr; }
  /// The persistent kernel of steps of `rows` rows, made now if it was not yet. \throws UsageError for a backend
  /// without one, or rows outside [1, kMaxRows].
  [[nodiscard]] virtual PersistentProgram& program(const StepContext<T>& ctx, int rows);
};

/// The graph backend (DecoderBackend::graph): decoder_step's kernels.
template <Element T>
[[nodiscard]] std::unique_ptr<StepBackend<T>> make_graph_backend();

/// The persistent backend (DecoderBackend::persistent) on `device`, its tile functions (every weight format's)
/// loaded from `library`. \throws UsageError for a GPU without the tensor cores its projections' tiles use.
template <Element T>
[[nodiscard]] std::unique_ptr<StepBackend<T>> make_persistent_backend(const KernelLibrary& library,
                                                                      const Device& device);

/// A tensor-parallel rank's backend: rank comm.rank()'s share of the step (decoder_rank_step) over the communicator,
/// with `state`'s x and logits moved to NCCL symmetric memory where `options` asks and NCCL has it, and the all-reduces
/// of x through `peer` where given (nn/decoder_rank.hpp). Each capture checks that every rank recorded the same
/// collectives. \throws UsageError when `peer` is another communicator's; NcclError.
template <Element T>
[[nodiscard]] std::unique_ptr<StepBackend<T>> make_rank_backend(const Communicator& comm, BasicDecoderState<T>& state,
                                                                const TensorParallelOptions& options,
                                                                const PeerExchange* peer);

}  // namespace lazygraph::nn
