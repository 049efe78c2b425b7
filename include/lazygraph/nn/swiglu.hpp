#pragma once
/// \file
/// One SwiGLU MLP block (docs/nn.md gives the exact math): its weights, seeded generation, and the block as an op of
/// two kernels over fp16 or bf16 (element.hpp), its matrices in any format the projections read (projection.hpp). The
/// MLP stack (mlp.hpp) and the decoder (decoder.hpp) are made of it.

#include <cstdint>
#include <utility>

#include "lazygraph/nn/projection.hpp"

namespace lazygraph::nn {

/// One block's weights: norm gain [d], W1 and W3 [ffn x d], W2 [d x ffn], each in any format (weight.hpp). W1 and W3
/// are read by one kernel, so they share a format.
template <Element T>
struct BasicSwigluWeights {
  DeviceBuffer<T> gain;       ///< norm gain [d]
  Weight<T> w1;               ///< gate projection [ffn x d]
  Weight<T> w3;               ///< up projection [ffn x d]
  Weight<T> w2;               ///< down projection [d x ffn]
  DeviceBuffer<T> post_gain;  ///< the output's RMSNorm gain [d] in a model with post-norms (Gemma 3's), else empty

  /// Whether any projection is quantized.
  [[nodiscard]] bool quantized() const noexcept { return !w1.is_dense() || !w3.is_dense() || !w2.is_dense(); }
};

/// One block's fp16 weights.
using SwigluWeights = BasicSwigluWeights<half>;

/// Generates block `layer`'s weights on the GPU from the seed (docs/nn.md's tensor ids 16 l + 6..9), dense.
template <Element T>
BasicSwigluWeights<T> generate_swiglu_weights(const Stream& stream, const BasicKernels<T>& kernels, std::uint32_t seed,
                                              int layer, int d, int ffn);

/// The block's first half: act[b] = gate(W1 h) * (W3 h), h = rmsnorm(x[b]) * gain, for b < batch, gate silu (SwiGLU)
/// or gelu_tanh (GeGLU) (norm_project_gate_up). \throws UsageError as norm_project_gate_up (a weight of another shape,
/// W1 and W3 in two formats, a quantized weight without quantized kernels, a batch outside 1..8).
template <Element T>
auto swiglu_gate_up(const Projector<T>& p, const BasicSwigluWeights<T>& w, DeviceSpan<const T> x, DeviceSpan<T> act,
                    int d, int ffn, float eps, int batch = 1, GateActivation gate = GateActivation::silu) {
  return norm_project_gate_up(p, w.w1, w.w3, x, w.gain.cview(), act, ffn, d, eps, batch, gate);
}

/// x += W2 (silu(W1 h) * (W3 h)), h = rmsnorm(x) * gain, in place on the residual streams `x` [batch][d], using
/// `act` [batch][ffn] as scratch: swiglu_gate_up, then the down projection with the add fused. Each kernel reads its
/// weights once for the whole batch (1 to 8 vectors). `residual` false: W2's product overwrites x instead of adding to
/// it (a tensor-parallel rank other than 0, whose partial sum an all-reduce adds to rank 0's).
/// \throws UsageError as swiglu_gate_up and project().
template <Element T>
auto swiglu_block(const Projector<T>& p, const BasicSwigluWeights<T>& w, DeviceSpan<T> x, DeviceSpan<T> act, int d,
                  int ffn, float eps, int batch = 1, bool residual = true) {
  return swiglu_gate_up(p, w, x.as_const(), act, d, ffn, eps, batch) >>
         project(p, w.w2, act.as_const(), x, d, ffn, batch, residual);
}

/// swiglu_block on the dense kernels `k` only (the MLP stack's weights are never quantized). \throws UsageError as
/// swiglu_block, and naming the weight when one is quantized.
template <Element T>
auto swiglu_block(const BasicKernels<T>& k, const BasicSwigluWeights<T>& w, DeviceSpan<T> x, DeviceSpan<T> act, int d,
                  int ffn, float eps, int batch = 1) {
  return swiglu_block(Projector<T>{k}, w, x, act, d, ffn, eps, batch);
}

/// The op type of one block (swiglu_block), for holding blocks in a vector.
template <Element T>
using BasicSwigluBlockOp =
    decltype(swiglu_block(std::declval<const Projector<T>&>(), std::declval<const BasicSwigluWeights<T>&>(),
                          DeviceSpan<T>{}, DeviceSpan<T>{}, 0, 0, 0.0F, 1));
/// The op type of one fp16 block.
using SwigluBlockOp = BasicSwigluBlockOp<half>;

}  // namespace lazygraph::nn
