#pragma once
/// \file
/// Layer 6, nn: the format table. Every product of a model's activations with a weight matrix goes through the
/// projections here, which take a Weight (weight.hpp) in any format and pick the kernels that read its format: the
/// dense family (BasicKernels: gemv, gemv_add, rms_norm_gemv, rms_norm_gemv_swiglu, qkv_rope_append, gemv_all_reduce)
/// or the quantized one (BasicQuantizedKernels: the same operations over a QuantizedMatrix, one kernel per quantized
/// format). Blocks, backends and the tensor-parallel rank call these and never ask what format a weight is in; this
/// file and the table below are the only places that do (docs/adding.md: "A weight format"). The table names no
/// quantized format: each row is built from weight_format.hpp's list of formats.
///
/// Each projection is an op of one type whatever the format (a OneOfOp of the families' launches, only the chosen one
/// built), so a model's op types do not depend on its weights. Dense launches keep their weight alive through its span;
/// quantized ones keep the DeviceQuantizedWeight alive as their owner.

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lazygraph/kernels/optional_launch.hpp"
#include "lazygraph/nn/detail/one_of_op.hpp"
#include "lazygraph/nn/detail/weight_op.hpp"
#include "lazygraph/nn/kernels.hpp"
#include "lazygraph/nn/peer_all_reduce.hpp"
#include "lazygraph/nn/quantized_kernels.hpp"
#include "lazygraph/nn/weight.hpp"

namespace lazygraph::nn {

/// What the table knows of one WeightFormat.
struct WeightFormatTraits {
  WeightFormat format;    ///< the format
  std::string_view name;  ///< its name in messages
  bool quantized;         ///< projected by the quantized kernels (BasicQuantizedKernels), else by BasicKernels
};

/// The format table: one row per WeightFormat, in the enum's order (kWeightFormatNames'). Dense weights are projected
/// by the dense kernels; every quantized format by the quantized kernels, which read its storage row
/// (src/nn/formats/), and whose tile functions the persistent backend runs for every format.
inline constexpr std::array<WeightFormatTraits, kWeightFormatNames.size()> kWeightFormats = [] {
  std::array<WeightFormatTraits, kWeightFormatNames.size()> rows{};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const bool dense = kWeightFormatNames[i].format == WeightFormat::dense;
    rows[i] = {kWeightFormatNames[i].format, kWeightFormatNames[i].name, !dense};
  }
  return rows;
}();

/// The table's row of `format`.
[[nodiscard]] constexpr const WeightFormatTraits& format_traits(WeightFormat format) noexcept {
  return kWeightFormats[static_cast<std::size_t>(format)];
}

/// The kernels a model's projections run on: the dense family always; the quantized one where some weight is
/// quantized (null otherwise: a dense model runs on GPUs the quantized kernels need more of).
template <Element T>
struct Projector {
  const BasicKernels<T>& dense;                         ///< the dense kernels
  const BasicQuantizedKernels<T>* quantized = nullptr;  ///< the quantized kernels, or null when no weight is quantized

  /// The quantized kernels for `w`. \throws UsageError naming the weight when there are none.
  [[nodiscard]] const BasicQuantizedKernels<T>& quantized_for(const Weight<T>& w) const {
    if (quantized == nullptr) {
      throw UsageError("weight " + w.describe() + " is quantized (" + std::string(format_traits(w.format()).name) +
                       "), but no quantized kernels were given");
    }
    return *quantized;
  }
};

/// The op type of project().
template <Element T>
using ProjectOp = detail::WeightOp<LaunchOp<const T*, const T*, T*, int, int, int>,
                                   OptionalLaunch<QuantizedMatrix, const T*, T*, int, int, int>>;

/// out[b] = W x[b] (`add`: out[b] += W x[b]) for b < batch: x [batch][cols], out [batch][rows], W = `w` [rows x cols].
/// gemv / gemv_add, or qgemv / qgemv_add. \throws UsageError naming the weight when it is not [rows x cols], batch is
/// outside 1..8, or it is quantized and `p` has no quantized kernels.
template <Element T>
[[nodiscard]] ProjectOp<T> project(const Projector<T>& p, const Weight<T>& w, DeviceSpan<const T> x, DeviceSpan<T> out,
                                   int rows, int cols, int batch, bool add = false) {
  detail::check_projection(add ? "project_add" : "project", w.describe(), w.rows(), w.cols(), rows, cols, batch);
  if (format_traits(w.format()).quantized) {
    const BasicQuantizedKernels<T>& q = p.quantized_for(w);
    const QuantizedMatrix m = w.matrix();
    return ProjectOp<T>(OptionalLaunch(
        (add ? q.qgemv_add : q.qgemv)(q.config(m, rows, cols), m, x, out, rows, cols, batch), w.owner()));
  }
  const BasicKernels<T>& k = p.dense;
  return ProjectOp<T>(
      (add ? k.gemv_add : k.gemv)(k.gemv_config(rows, cols, batch), w.dense(), x, out, rows, cols, batch));
}

/// The op type of norm_project().
template <Element T>
using NormProjectOp = detail::WeightOp<LaunchOp<const T*, const T*, const T*, T*, int, int, float, int>,
                                       OptionalLaunch<QuantizedMatrix, const T*, const T*, T*, int, int, float, int>>;

/// out[b] = W (rmsnorm(x[b]) * gain) for b < batch: rms_norm_gemv or rms_norm_qgemv; shapes and errors as project().
template <Element T>
[[nodiscard]] NormProjectOp<T> norm_project(const Projector<T>& p, const Weight<T>& w, DeviceSpan<const T> x,
                                            DeviceSpan<const T> gain, DeviceSpan<T> out, int rows, int cols, float eps,
                                            int batch) {
  detail::check_projection("norm_project", w.describe(), w.rows(), w.cols(), rows, cols, batch);
  if (format_traits(w.format()).quantized) {
    const BasicQuantizedKernels<T>& q = p.quantized_for(w);
    const QuantizedMatrix m = w.matrix();
    return NormProjectOp<T>(
        OptionalLaunch(q.rms_norm_qgemv(q.config(m, rows, cols), m, x, gain, out, rows, cols, eps, batch), w.owner()));
  }
  const BasicKernels<T>& k = p.dense;
  return NormProjectOp<T>(
      k.rms_norm_gemv(k.rms_norm_gemv_config(rows, cols, batch), w.dense(), x, gain, out, rows, cols, eps, batch));
}

/// The op type of norm_project_gate_up().
template <Element T>
using GateUpOp =
    detail::WeightOp<LaunchOp<const T*, const T*, const T*, const T*, T*, int, int, float, int>,
                     OptionalLaunch<QuantizedMatrix, QuantizedMatrix, const T*, const T*, T*, int, int, float, int>>;

/// act[b] = gate(W1 h) * (W3 h), h = rmsnorm(x[b]) * gain, for b < batch: W1 and W3 [rows x cols], both read by one
/// kernel (rms_norm_gemv_swiglu or rms_norm_qgemv_swiglu for silu; the _geglu kernels for gelu_tanh).
/// \throws UsageError as project(), and when W1 and W3 are not in one format.
template <Element T>
[[nodiscard]] GateUpOp<T> norm_project_gate_up(const Projector<T>& p, const Weight<T>& w1, const Weight<T>& w3,
                                               DeviceSpan<const T> x, DeviceSpan<const T> gain, DeviceSpan<T> act,
                                               int rows, int cols, float eps, int batch,
                                               GateActivation gate = GateActivation::silu) {
  const bool gelu = gate == GateActivation::gelu_tanh;
  detail::check_projection("norm_project_gate_up", w1.describe(), w1.rows(), w1.cols(), rows, cols, batch);
  detail::check_projection("norm_project_gate_up", w3.describe(), w3.rows(), w3.cols(), rows, cols, batch);
  // One kernel reads the two with one x, gathered by w1's input order: w3's must be the same (the loader checks
  // their contents are).
  const bool same = w1.format() == w3.format() &&
                    (w1.is_dense() || (w1.quantized().layout().format() == w3.quantized().layout().format() &&
                                       w1.quantized().input_order().size() == w3.quantized().input_order().size()));
  if (!same) {
    throw UsageError("weights " + w1.describe() + " and " + w3.describe() +
                     " must be in one format and input order (one kernel reads the two)");
  }
  if (format_traits(w1.format()).quantized) {
    const BasicQuantizedKernels<T>& q = p.quantized_for(w1);
    const QuantizedMatrix m1 = w1.matrix();
    return GateUpOp<T>(
        OptionalLaunch((gelu ? q.rms_norm_qgemv_geglu : q.rms_norm_qgemv_swiglu)(
                           q.config(m1, rows, cols), m1, w3.matrix(), x, gain, act, rows, cols, eps, batch),
                       std::make_shared<const std::pair<std::shared_ptr<const void>, std::shared_ptr<const void>>>(
                           w1.owner(), w3.owner())));
  }
  const BasicKernels<T>& k = p.dense;
  return GateUpOp<T>((gelu ? k.rms_norm_gemv_geglu : k.rms_norm_gemv_swiglu)(
      k.gemv_config(rows, cols, batch, 2), w1.dense(), w3.dense(), x, gain, act, rows, cols, eps, batch));
}

/// What norm_project_qkv_rope_append reads and writes besides the stacked weight.
template <Element T>
struct QkvRopeAppend {
  DeviceSpan<const T> x;                ///< the residual streams [batch][d]
  DeviceSpan<const T> gain;             ///< the norm gain [d]
  DeviceSpan<const T> bias;             ///< the q, k and v biases stacked [q_rows + 2 kv_dim], or empty for none
  DeviceSpan<T> q;                      ///< the queries out [batch][q_rows]
  DeviceSpan<T> k_cache;                ///< the layer's key cache [slot_count][kv_heads][context][head_dim]
  DeviceSpan<T> v_cache;                ///< its value cache
  DeviceSpan<const int> positions;      ///< each row's position
  DeviceSpan<const int> slots;          ///< each row's sequence slot
  DeviceSpan<const float> frequencies;  ///< RoPE's inverse frequencies [head_dim / 2]
  int d = 0;                            ///< the width of x
  int q_rows = 0;                       ///< the query rows of the stacked weight
  int kv_heads = 0;                     ///< key/value heads
  int head_dim = 0;                     ///< per-head width
  int context = 0;                      ///< positions per slot of the caches
  int slot_count = 0;                   ///< slots of the caches
  float eps = 0;                        ///< RMSNorm epsilon
  int batch = 1;                        ///< rows
};

/// The op type of norm_project_qkv_rope_append().
template <Element T>
using QkvRopeAppendOp =
    detail::WeightOp<LaunchOp<const T*, const T*, const T*, const T*, const T*, const T*, const T*, const T*, T*, T*,
                              T*, const int*, const int*, int, int, int, int, int, int, const float*, float, int>,
                     OptionalLaunch<QuantizedMatrix, const T*, const T*, const T*, T*, T*, T*, const int*, const int*,
                                    int, int, int, int, int, int, const float*, float, int>>;

/// The attention block's input side in one kernel: h = rmsnorm(x[b]) * gain; [q | k | v] = W h + bias for the stacked
/// weight `w` ([q_rows + 2 kv_dim x d]); RoPE on q and k; q written out, k and v appended to the caches at each row's
/// slot and position. qkv_rope_append or quantized_qkv_rope_append. \throws UsageError as project().
template <Element T>
[[nodiscard]] QkvRopeAppendOp<T> norm_project_qkv_rope_append(const Projector<T>& p, const Weight<T>& w,
                                                              const QkvRopeAppend<T>& a) {
  const int kv_dim = a.kv_heads * a.head_dim;
  const int rows = a.q_rows + 2 * kv_dim;
  detail::check_projection("norm_project_qkv_rope_append", w.describe(), w.rows(), w.cols(), rows, a.d, a.batch);
  if (!a.bias.empty() && a.bias.size() != static_cast<std::size_t>(rows)) {
    throw UsageError("norm_project_qkv_rope_append: the stacked biases of " + w.describe() + " hold " +
                     std::to_string(a.bias.size()) + " elements, not " + std::to_string(rows));
  }
  if (format_traits(w.format()).quantized) {
    const BasicQuantizedKernels<T>& q = p.quantized_for(w);
    const QuantizedMatrix m = w.matrix();
    return QkvRopeAppendOp<T>(OptionalLaunch(
        q.quantized_qkv_rope_append(q.config(m, rows, a.d), m, a.bias.empty() ? DeviceSpan<const T>{} : a.bias, a.x,
                                    a.gain, a.q, a.k_cache, a.v_cache, a.positions, a.slots, a.d, a.q_rows, a.kv_heads,
                                    a.head_dim, a.context, a.slot_count, a.frequencies, a.eps, a.batch),
        w.owner()));
  }
  const BasicKernels<T>& k = p.dense;
  const DeviceSpan<const T> all = w.dense();
  const auto d = static_cast<std::size_t>(a.d);
  const auto q_size = static_cast<std::size_t>(a.q_rows);
  const auto kv_size = static_cast<std::size_t>(kv_dim);
  const auto bias = [&](std::size_t at, std::size_t size) {
    return a.bias.empty() ? DeviceSpan<const T>{} : a.bias.subspan(at, size);
  };
  return QkvRopeAppendOp<T>(k.qkv_rope_append(
      k.qkv_config(a.q_rows, kv_dim, a.d, a.batch), all.subspan(0, q_size * d), all.subspan(q_size * d, kv_size * d),
      all.subspan((q_size + kv_size) * d, kv_size * d), bias(0, q_size), bias(q_size, kv_size),
      bias(q_size + kv_size, kv_size), a.x, a.gain, a.q, a.k_cache, a.v_cache, a.positions, a.slots, a.d, a.q_rows,
      a.kv_heads, a.head_dim, a.context, a.slot_count, a.frequencies, a.eps, a.batch));
}

/// The op type of project_all_reduce().
template <Element T>
using ProjectAllReduceOp = detail::WeightOp<
    decltype(gemv_all_reduce(std::declval<const BasicKernels<T>&>(), std::declval<const PeerExchange&>(),
                             DeviceSpan<const T>{}, DeviceSpan<const T>{}, DeviceSpan<T>{}, 0, 0, 0)),
    decltype(qgemv_all_reduce(std::declval<const BasicQuantizedKernels<T>&>(), std::declval<const PeerExchange&>(),
                              std::declval<const std::shared_ptr<const DeviceQuantizedWeight<T>>&>(),
                              DeviceSpan<const T>{}, DeviceSpan<T>{}, 0, 0, 0))>;

/// A tensor-parallel rank's row-parallel projection and the all-reduce after it in one kernel: x[b] += the sum over
/// the ranks of `exchange` of their W a[b] (gemv_all_reduce or qgemv_all_reduce, nn/peer_all_reduce.hpp).
/// \throws UsageError as those, and as project().
template <Element T>
[[nodiscard]] ProjectAllReduceOp<T> project_all_reduce(const Projector<T>& p, const PeerExchange& exchange,
                                                       const Weight<T>& w, DeviceSpan<const T> a, DeviceSpan<T> x,
                                                       int rows, int cols, int batch) {
  detail::check_projection("project_all_reduce", w.describe(), w.rows(), w.cols(), rows, cols, batch);
  if (format_traits(w.format()).quantized) {
    return ProjectAllReduceOp<T>(
        qgemv_all_reduce(p.quantized_for(w), exchange, w.shared_quantized(), a, x, rows, cols, batch));
  }
  return ProjectAllReduceOp<T>(gemv_all_reduce(p.dense, exchange, w.dense(), a, x, rows, cols, batch));
}

/// The op type of a GemmOperand's preparation: nothing for a dense weight, the dequantization of a quantized one.
template <Element T>
using GemmPrepareOp = ChainOp<OptionalLaunch<QuantizedMatrix, T*, int, int>>;

/// A weight as the dense [rows x cols] matrix a GEMM reads (prefill on tensor cores): `prepare` makes it readable
/// (nothing for a dense weight; a quantized one's values dequantized into the scratch buffer, rounded once to T, by
/// qdequantize), after which `values` holds it.
template <Element T>
struct GemmOperand {
  GemmPrepareOp<T> prepare;    ///< run before the GEMM
  DeviceSpan<const T> values;  ///< what the GEMM reads, [rows][cols]
};

/// `w` as a GEMM operand (see GemmOperand); `scratch` holds at least rows * cols elements where `w` is quantized (it is
/// not touched otherwise). \throws UsageError naming the weight when the scratch is too small, or it is quantized and
/// `p` has no quantized kernels.
template <Element T>
[[nodiscard]] GemmOperand<T> gemm_operand(const Projector<T>& p, const Weight<T>& w, DeviceSpan<T> scratch) {
  std::vector<OptionalLaunch<QuantizedMatrix, T*, int, int>> steps;
  if (!format_traits(w.format()).quantized) return {chain(std::move(steps)), w.dense()};
  const std::size_t size = static_cast<std::size_t>(w.rows()) * static_cast<std::size_t>(w.cols());
  if (scratch.size() < size) {
    throw UsageError("gemm_operand: weight " + w.describe() + " needs " + std::to_string(size) +
                     " elements to be dequantized into, the scratch buffer holds " + std::to_string(scratch.size()));
  }
  const BasicQuantizedKernels<T>& q = p.quantized_for(w);
  const QuantizedMatrix m = w.matrix();
  steps.emplace_back(q.qdequantize(q.dequantize_config(m, w.rows(), w.cols()), m, scratch, w.rows(), w.cols()),
                     w.owner());
  return {chain(std::move(steps)), scratch.subspan(0, size).as_const()};
}

}  // namespace lazygraph::nn
