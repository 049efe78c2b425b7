#pragma once
/// \file
/// One SwiGLU MLP block (docs/nn.md gives the exact math): its weights, seeded generation, and the block as an op of
/// two kernels over fp16 or bf16 (element.hpp), on dense or weight-only quantized weights (quantized_kernels.hpp). The
/// MLP stack (mlp.hpp) and the decoder (decoder.hpp) are made of it.

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "lazygraph/kernels/optional_launch.hpp"
#include "lazygraph/nn/kernels.hpp"
#include "lazygraph/nn/quantized_kernels.hpp"

namespace lazygraph::nn {

/// One block's weights: norm gain [d], W1 and W3 [ffn x d], W2 [d x ffn]. Each projection is dense or quantized,
/// never both: where the quantized member is set (not null), the dense buffer is empty (and the other way round). W1
/// and W3 are quantized together, in one format (rms_norm_qgemv_swiglu reads both); W2 on its own. A quantized weight
/// is shared: the graphs that read it keep it alive, as they keep dense buffers.
template <Element T>
struct BasicSwigluWeights {
  DeviceBuffer<T> gain;  ///< norm gain [d]
  DeviceBuffer<T> w1;    ///< gate projection [ffn x d]; empty when quantized_w1 is set
  DeviceBuffer<T> w3;    ///< up projection [ffn x d]; empty when quantized_w3 is set
  DeviceBuffer<T> w2;    ///< down projection [d x ffn]; empty when quantized_w2 is set
  std::shared_ptr<const DeviceQuantizedWeight<T>> quantized_w1 = nullptr;  ///< W1 quantized, or null
  std::shared_ptr<const DeviceQuantizedWeight<T>> quantized_w3 = nullptr;  ///< W3 quantized (W1's format), or null
  std::shared_ptr<const DeviceQuantizedWeight<T>> quantized_w2 = nullptr;  ///< W2 quantized, or null

  /// Whether any projection is quantized.
  [[nodiscard]] bool quantized() const noexcept {
    return quantized_w1 != nullptr || quantized_w3 != nullptr || quantized_w2 != nullptr;
  }
};

/// One block's fp16 weights.
using SwigluWeights = BasicSwigluWeights<half>;

/// Generates block `layer`'s weights on the GPU from the seed (docs/nn.md's tensor ids 16 l + 6..9).
template <Element T>
BasicSwigluWeights<T> generate_swiglu_weights(const Stream& stream, const BasicKernels<T>& kernels, std::uint32_t seed,
                                              int layer, int d, int ffn);

/// x += W2 (silu(W1 h) * (W3 h)), h = rmsnorm(x) * gain, in place on the residual streams `x` [batch][d], using
/// `act` [batch][ffn] as scratch: a fused norm + gate/up projection kernel, then the down projection with the add
/// fused. Each kernel reads its weights once for the whole batch (1 to 8 vectors). Dense weights only.
/// \throws UsageError when a projection of `w` is quantized (take the overload with the quantized kernels).
template <Element T>
auto swiglu_block(const BasicKernels<T>& k, const BasicSwigluWeights<T>& w, DeviceSpan<T> x, DeviceSpan<T> act, int d,
                  int ffn, float eps, int batch = 1) {
  if (w.quantized()) {
    throw UsageError(
        "swiglu_block: the weights are quantized; build the block with the quantized kernels "
        "(swiglu_block(kernels, &quantized_kernels, ...))");
  }
  return k.rms_norm_gemv_swiglu(k.gemv_config(ffn, d, batch), w.w1.cview(), w.w3.cview(), x.as_const(), w.gain.cview(),
                                act, ffn, d, eps, batch) >>
         k.gemv_add(k.gemv_config(d, ffn, batch), w.w2.cview(), act.as_const(), x, d, ffn, batch);
}

/// The block's first half on dense or quantized W1 and W3: act = silu(W1 h) * (W3 h), h = rmsnorm(x[b]) * gain, by
/// rms_norm_qgemv_swiglu where they are quantized, rms_norm_gemv_swiglu where not (both in the op's type: choose()).
/// `qk` may be null when they are dense. \throws UsageError when they are quantized and `qk` is null, when only one
/// of them is quantized or they differ in format, or when a quantized one is not [ffn x d] or batch is outside 1..8
/// (check_quantized).
template <Element T>
auto swiglu_gate_up(const BasicKernels<T>& k, std::type_identity_t<const BasicQuantizedKernels<T>*> qk,
                    const BasicSwigluWeights<T>& w, DeviceSpan<const T> x, DeviceSpan<T> act, int d, int ffn, float eps,
                    int batch = 1) {
  const bool gate_up = w.quantized_w1 != nullptr;
  if (gate_up != (w.quantized_w3 != nullptr)) {
    throw UsageError("swiglu_block: W1 and W3 must both be quantized or both dense (one kernel reads the two)");
  }
  if (gate_up && qk == nullptr) {
    throw UsageError("swiglu_block: the weights are quantized, but no quantized kernels were given");
  }
  if (gate_up) {
    check_quantized(*w.quantized_w1, ffn, d, batch);
    check_quantized(*w.quantized_w3, ffn, d, batch);
    if (!(w.quantized_w1->layout().format() == w.quantized_w3->layout().format())) {
      throw UsageError("swiglu_block: W1 (" + format_name(w.quantized_w1->layout().format()) + ") and W3 (" +
                       format_name(w.quantized_w3->layout().format()) + ") must have one format");
    }
  }
  // What the graphs keep alive of a quantized W1 and W3 (one launch reads both).
  using Pair =
      std::pair<std::shared_ptr<const DeviceQuantizedWeight<T>>, std::shared_ptr<const DeviceQuantizedWeight<T>>>;
  return choose(gate_up,
                optional_launch(
                    gate_up,
                    [&] {
                      const QuantizedMatrix w1 = w.quantized_w1->matrix();
                      return qk->rms_norm_qgemv_swiglu(qk->config(w1, ffn, d), w1, w.quantized_w3->matrix(), x,
                                                       w.gain.cview(), act, ffn, d, eps, batch);
                    },
                    gate_up ? std::make_shared<const Pair>(w.quantized_w1, w.quantized_w3) : nullptr),
                k.rms_norm_gemv_swiglu(k.gemv_config(ffn, d, batch), w.w1.cview(), w.w3.cview(), x, w.gain.cview(), act,
                                       ffn, d, eps, batch));
}

/// The block of the overload above on dense or quantized weights, each projection by its own kind: W1 and W3 as
/// swiglu_gate_up; W2 by qgemv_add or gemv_add. Both kinds are in the op's type (choose()), only the weights' runs.
/// `qk` may be null when no projection is quantized. \throws UsageError as swiglu_gate_up; when W2 is quantized and
/// `qk` is null, or it is not [d x ffn] or batch is outside 1..8 (check_quantized). `residual` false: W2's product
/// overwrites x instead of adding to it (a tensor-parallel rank other than 0, whose partial sum an all-reduce adds to
/// rank 0's); a dense W2 only.
template <Element T>
auto swiglu_block(const BasicKernels<T>& k, std::type_identity_t<const BasicQuantizedKernels<T>*> qk,
                  const BasicSwigluWeights<T>& w, DeviceSpan<T> x, DeviceSpan<T> act, int d, int ffn, float eps,
                  int batch = 1, bool residual = true) {
  auto up = swiglu_gate_up(k, qk, w, x.as_const(), act, d, ffn, eps, batch);
  const bool down = w.quantized_w2 != nullptr;
  if (down && qk == nullptr) {
    throw UsageError("swiglu_block: the weights are quantized, but no quantized kernels were given");
  }
  if (down) check_quantized(*w.quantized_w2, d, ffn, batch);
  if (down && !residual) {
    throw UsageError("swiglu_block: a quantized W2 always adds to x (qgemv_add); residual false needs a dense one");
  }
  auto add = choose(
      down,
      optional_launch(
          down,
          [&] {
            const QuantizedMatrix w2 = w.quantized_w2->matrix();
            return qk->qgemv_add(qk->config(w2, d, ffn), w2, act.as_const(), x, d, ffn, batch);
          },
          w.quantized_w2),
      (residual ? k.gemv_add : k.gemv)(k.gemv_config(d, ffn, batch), w.w2.cview(), act.as_const(), x, d, ffn, batch));
  return std::move(up) >> std::move(add);
}

/// The op type of one block (swiglu_block), for holding blocks in a vector.
template <Element T>
using BasicSwigluBlockOp =
    decltype(swiglu_block(std::declval<const BasicKernels<T>&>(), std::declval<const BasicSwigluWeights<T>&>(),
                          DeviceSpan<T>{}, DeviceSpan<T>{}, 0, 0, 0.0F, 1));
/// The op type of one fp16 block.
using SwigluBlockOp = BasicSwigluBlockOp<half>;

}  // namespace lazygraph::nn
