#pragma once
/// \file
/// One SwiGLU MLP block (docs/nn.md gives the exact math): its weights, seeded generation, and the block as an op of
/// two kernels over fp16 or bf16 (element.hpp). The MLP stack (mlp.hpp) and the decoder (decoder.hpp) are made of it.

#include <cstdint>
#include <utility>

#include "lazygraph/nn/kernels.hpp"

namespace lazygraph::nn {

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
  return k.rms_norm_gemv_swiglu(k.gemv_config(ffn, d, batch), w.w1.cview(), w.w3.cview(), x.as_const(), w.gain.cview(),
                                act, ffn, d, eps, batch) >>
         k.gemv_add(k.gemv_config(d, ffn, batch), w.w2.cview(), act.as_const(), x, d, ffn, batch);
}

/// The op type of one block (swiglu_block), for holding blocks in a vector.
template <Element T>
using BasicSwigluBlockOp =
    decltype(swiglu_block(std::declval<const BasicKernels<T>&>(), std::declval<const BasicSwigluWeights<T>&>(),
                          DeviceSpan<T>{}, DeviceSpan<T>{}, 0, 0, 0.0F, 1));
/// The op type of one fp16 block.
using SwigluBlockOp = BasicSwigluBlockOp<half>;

}  // namespace lazygraph::nn
