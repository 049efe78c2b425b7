#pragma once
/// \file
/// A stack of SwiGLU MLP blocks with RMSNorm and residual adds (docs/nn.md gives the exact math), as an op
/// expression and as a graph-backed Module, over fp16 or bf16 (element.hpp).

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
template <Element T>
struct BasicSwigluWeights {
  DeviceBuffer<T> gain;  ///< norm gain [d]
  DeviceBuffer<T> w1;    ///< gate projection [ffn x d]
  DeviceBuffer<T> w3;    ///< up projection [ffn x d]
  DeviceBuffer<T> w2;    ///< down projection [d x ffn]
};

/// One block's fp16 weights.
using SwigluWeights = BasicSwigluWeights<half>;

/// Generates block `layer`'s weights on the GPU from the seed (docs/nn.md's tensor ids 16 l + 6..9).
template <Element T>
BasicSwigluWeights<T> generate_swiglu_weights(const Stream& stream, const BasicKernels<T>& kernels, std::uint32_t seed,
                                              int layer, int d, int ffn);

/// x += W2 (silu(W1 h) * (W3 h)), h = rmsnorm(x) * gain, in place on the residual streams `x` [batch][d], using
/// `act` [batch][ffn] as scratch: a fused norm + gate/up projection kernel, then the down projection with the add
/// fused. Each kernel reads its weights once for the whole batch (1 to 8 vectors).
template <Element T>
auto swiglu_block(const BasicKernels<T>& k, const BasicSwigluWeights<T>& w, DeviceSpan<T> x, DeviceSpan<T> act, int d,
                  int ffn, float eps, int batch = 1) {
  return k.rms_norm_gemv_swiglu(k.gemv_config(ffn, d), w.w1.cview(), w.w3.cview(), x.as_const(), w.gain.cview(), act,
                                ffn, d, eps, batch) >>
         k.gemv_add(k.gemv_config(d, ffn), w.w2.cview(), act.as_const(), x, d, ffn, batch);
}

/// The op type of one block (swiglu_block), for holding blocks in a vector.
template <Element T>
using BasicSwigluBlockOp =
    decltype(swiglu_block(std::declval<const BasicKernels<T>&>(), std::declval<const BasicSwigluWeights<T>&>(),
                          DeviceSpan<T>{}, DeviceSpan<T>{}, 0, 0, 0.0F, 1));
/// The op type of one fp16 block.
using SwigluBlockOp = BasicSwigluBlockOp<half>;

/// The whole MLP as one op: copies `input` into `output` (the residual stream), then runs every block on it.
template <Element T>
auto mlp_forward(const BasicKernels<T>& k, std::span<const std::type_identity_t<BasicSwigluWeights<T>>> layers,
                 const MlpConfig& config, DeviceSpan<const T> input, DeviceSpan<T> output, DeviceSpan<T> act) {
  std::vector<BasicSwigluBlockOp<T>> blocks;
  blocks.reserve(layers.size());
  for (const BasicSwigluWeights<T>& w : layers)
    blocks.push_back(swiglu_block(k, w, output, act, config.d, config.ffn, config.eps));
  return copy(output, input) >> chain(std::move(blocks));
}

/// The MLP stack as a Module: weights generated on the GPU from the seed, forward pass captured once into a
/// CUDA graph at construction. `forward` copies the d inputs in, replays, and returns the d outputs.
/// Not thread-safe: forward it from one thread at a time.
template <Element T>
class BasicMlp {
 public:
  using Input = std::span<const T>;  ///< d values
  using Output = std::vector<T>;     ///< d values

  /// \throws UsageError for an invalid config; CudaError when the GPU runs out of memory.
  BasicMlp(const Stream& stream, const KernelLibrary& library, const MlpConfig& config);

  /// \throws UsageError unless x has d elements.
  Output forward(Input x) { return module_.forward(x); }
  /// forward, writing into `out` (d values). \throws UsageError unless x and out have d elements.
  void forward_into(Input x, std::span<T> out) { module_.forward_into(x, out); }
  /// As forward_into, for input already on the device (GraphModule::forward_resident: no copy in).
  void forward_resident(DeviceSpan<const T> x, std::span<T> out) { module_.forward_resident(x, out); }

  /// The same forward pass as an op, for running it without the graph (the benchmark's eager variant).
  [[nodiscard]] auto forward_op(DeviceSpan<const T> input, DeviceSpan<T> output) {
    return mlp_forward(kernels_, layers_, config_, input, output, act_.view());
  }

  /// The config it was built with.
  [[nodiscard]] const MlpConfig& config() const noexcept { return config_; }
  /// Every block's weights.
  [[nodiscard]] const std::vector<BasicSwigluWeights<T>>& layers() const noexcept { return layers_; }
  /// The graph behind forward (replay it directly to time the device work alone).
  [[nodiscard]] CudaGraph<>& graph() noexcept { return module_.graph(); }
  /// The graph's input buffer (d values).
  [[nodiscard]] DeviceSpan<const T> input() const { return module_.input(); }
  /// The graph's output buffer (d values).
  [[nodiscard]] DeviceSpan<const T> output() const { return module_.output(); }

 private:
  MlpConfig config_;
  BasicKernels<T> kernels_;
  std::vector<BasicSwigluWeights<T>> layers_;
  DeviceBuffer<T> act_;
  GraphModule<T, T> module_;
};

/// The fp16 MLP stack.
using Mlp = BasicMlp<half>;

extern template class BasicMlp<half>;
extern template class BasicMlp<bfloat16>;

static_assert(Module<Mlp>);
static_assert(Module<BasicMlp<bfloat16>>);

}  // namespace lazygraph::nn
