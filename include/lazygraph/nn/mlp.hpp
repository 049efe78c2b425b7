#pragma once
/// \file
/// A stack of SwiGLU MLP blocks with RMSNorm and residual adds (docs/nn.md gives the exact math), as an op
/// expression and as a graph-backed Module.

#include <cstdint>
#include <span>
#include <vector>

#include "lazygraph/nn/kernels.hpp"

namespace lazygraph::nn {

/// The MLP stack's shape.
struct MlpConfig {
  int d = 512;                ///< width of the residual stream
  int ffn = 1536;             ///< hidden width of each block
  int layers = 16;            ///< blocks
  std::uint32_t seed = 1234;  ///< seed of the generated weights
  float eps = 1e-5F;          ///< RMSNorm epsilon
  bool early_launch = true;   ///< launch the kernels early (Kernels::step_config); false to compare

  /// \throws UsageError unless d and ffn are positive multiples of 8 (the gemv kernels load 8 halves
  /// at a time) and layers >= 1.
  void validate() const;
  /// Bytes of weights one forward pass reads (the matrices and the norm gains).
  [[nodiscard]] std::size_t weight_bytes() const;
};

/// One block's weights: norm gain [d], W1 and W3 [ffn x d], W2 [d x ffn].
struct SwigluWeights {
  DeviceBuffer<half> gain;  ///< norm gain [d]
  DeviceBuffer<half> w1;    ///< gate projection [ffn x d]
  DeviceBuffer<half> w3;    ///< up projection [ffn x d]
  DeviceBuffer<half> w2;    ///< down projection [d x ffn]
};

/// Generates block `layer`'s weights on the GPU from the seed (docs/nn.md's tensor ids 16 l + 6..9).
SwigluWeights generate_swiglu_weights(const Stream& stream, const Kernels& kernels, std::uint32_t seed, int layer,
                                      int d, int ffn);

/// x += W2 (silu(W1 h) * (W3 h)), h = rmsnorm(x) * gain, in place on the residual streams `x` [batch][d], using
/// `act` [batch][ffn] as scratch: a fused norm + gate/up projection kernel, then the down projection with the add
/// fused. Each kernel reads its weights once for the whole batch (1 to 8 vectors).
inline auto swiglu_block(const Kernels& k, const SwigluWeights& w, DeviceSpan<half> x, DeviceSpan<half> act, int d,
                         int ffn, float eps, int batch = 1) {
  return k.rms_norm_gemv_swiglu(k.gemv_config(ffn, d), w.w1.cview(), w.w3.cview(), x.as_const(), w.gain.cview(), act,
                                ffn, d, eps, batch) >>
         k.gemv_add(k.gemv_config(d, ffn), w.w2.cview(), act.as_const(), x, d, ffn, batch);
}

/// The op type of one block (swiglu_block), for holding blocks in a vector.
using SwigluBlockOp = decltype(swiglu_block(std::declval<const Kernels&>(), std::declval<const SwigluWeights&>(),
                                            DeviceSpan<half>{}, DeviceSpan<half>{}, 0, 0, 0.0F, 1));

/// The whole MLP as one op: copies `input` into `output` (the residual stream), then runs every block on it.
inline auto mlp_forward(const Kernels& k, const std::vector<SwigluWeights>& layers, const MlpConfig& config,
                        DeviceSpan<const half> input, DeviceSpan<half> output, DeviceSpan<half> act) {
  std::vector<SwigluBlockOp> blocks;
  blocks.reserve(layers.size());
  for (const SwigluWeights& w : layers)
    blocks.push_back(swiglu_block(k, w, output, act, config.d, config.ffn, config.eps));
  return copy(output, input) >> chain(std::move(blocks));
}

/// The MLP stack as a Module: weights generated on the GPU from the seed, forward pass captured once into a
/// CUDA graph at construction. `forward` copies the d inputs in, replays, and returns the d outputs.
/// Not thread-safe: forward it from one thread at a time.
class Mlp {
 public:
  using Input = std::span<const half>;  ///< d values
  using Output = std::vector<half>;     ///< d values

  /// \throws UsageError for an invalid config; CudaError when the GPU runs out of memory.
  Mlp(const Stream& stream, const KernelLibrary& library, const MlpConfig& config);

  /// \throws UsageError unless x has d elements.
  Output forward(Input x) { return module_.forward(x); }
  /// forward, writing into `out` (d values). \throws UsageError unless x and out have d elements.
  void forward_into(Input x, std::span<half> out) { module_.forward_into(x, out); }

  /// The same forward pass as an op, for running it without the graph (the benchmark's eager variant).
  [[nodiscard]] auto forward_op(DeviceSpan<const half> input, DeviceSpan<half> output) {
    return mlp_forward(kernels_, layers_, config_, input, output, act_.view());
  }

  /// The config it was built with.
  [[nodiscard]] const MlpConfig& config() const noexcept { return config_; }
  /// Every block's weights.
  [[nodiscard]] const std::vector<SwigluWeights>& layers() const noexcept { return layers_; }
  /// The graph behind forward (replay it directly to time the device work alone).
  [[nodiscard]] CudaGraph<>& graph() noexcept { return module_.graph(); }
  /// The graph's input buffer (d values).
  [[nodiscard]] DeviceSpan<const half> input() const { return module_.input(); }
  /// The graph's output buffer (d values).
  [[nodiscard]] DeviceSpan<const half> output() const { return module_.output(); }

 private:
  MlpConfig config_;
  Kernels kernels_;
  std::vector<SwigluWeights> layers_;
  DeviceBuffer<half> act_;
  GraphModule<half, half> module_;
};

static_assert(Module<Mlp>);

}  // namespace lazygraph::nn
