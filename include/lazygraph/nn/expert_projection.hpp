#pragma once
/// \file
/// Layer 6, nn: the format table's part for a mixture of experts (projection.hpp is the rest): the experts' gate/up
/// and down projections of a decode step over a layer's stacked expert matrices (BasicMoeWeights), in any format, each
/// picking the kernels that read it: moe_gate_up / moe_down over dense experts (kernels/nn/moe.cu), moe_qgate_up /
/// moe_qdown over quantized ones (kernels/nn/qmoe.cu). Both read only the experts the router chose (the plan that
/// moe_route wrote on the device); moe_block (decoder_step.hpp) calls them and never asks the format. One row of dense
/// experts may instead be routed and run by routed_experts' two kernels.

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "lazygraph/nn/moe_shape.hpp"
#include "lazygraph/nn/projection.hpp"

namespace lazygraph::nn {

/// The most distinct experts `batch` rows can choose: min(batch * top k, experts), what the expert kernels' grids
/// are sized for.
[[nodiscard]] inline int most_distinct_experts(const MoeShape& m, int batch) {
  return std::min(batch * m.experts_per_token, m.experts);
}

/// Whether a step of `batch` rows may route and run its experts as routed_experts does: one row, every expert matrix
/// dense, and BasicKernels::moe_down_staged_config's blocks fit (at most kMoeStagedExperts experts among the rest).
/// moe_block asks it.
template <Element T>
[[nodiscard]] bool staged_experts(const Projector<T>& p, const Weight<T>& w1, const Weight<T>& w3, const Weight<T>& w2,
                                  const MoeShape& m, int d, int batch) {
  return w1.is_dense() && w3.is_dense() && w2.is_dense() &&
         p.dense.moe_down_staged_config(d, m.expert_width, m.experts, m.experts_per_token, batch).grid.x != 0;
}

/// Where routed_experts writes: the route as moe_route writes it for one row, for whoever reads it after the step (the
/// kernels themselves route from the logits), the act between the two kernels, and x.
template <Element T>
struct RoutedExpertsIo {
  DeviceSpan<int> ids;        ///< [top k]: the experts chosen, in slot order
  DeviceSpan<float> weights;  ///< [top k]: their weights (renormalized where MoeShape::normalize), rounded to T
  DeviceSpan<int> plan;       ///< [kMoePlanInts]: the plan moe_route would write
  DeviceSpan<T> act;          ///< [top k][width]
  DeviceSpan<T> x;            ///< [d]
};

/// One row's route and experts, where staged_experts says so: moe_gate_up_staged (every block routes the row from
/// the router's `logits` [experts] itself, as moe_route would, then multiplies its slots' experts with h [d]) and
/// moe_down_staged (x += the slots' down products, added in order), the bits of moe_route, moe_gate_up and moe_down
/// without moe_route's launch; moe_down_staged's blocks copy the chosen experts' rows into shared memory while
/// moe_gate_up_staged runs. moe_down_staged reads the logits before its own wait, which is sound because
/// moe_gate_up_staged lets it launch only after its own wait, once the kernel before it is complete: record the pair
/// after the kernel that writes the logits (or after any kernels that each complete only after it), never before it.
/// \throws UsageError naming why where staged_experts is false (a quantized weight, more than kMoeStagedExperts
/// experts, or a shape moe_down_staged_config has no blocks for), or naming the buffer that is smaller than the step
/// needs (logits [experts], h and x [d], ids and weights [top k], plan [kMoePlanInts], act [top k * width]).
template <Element T>
[[nodiscard]] auto routed_experts(const Projector<T>& p, const Weight<T>& w1, const Weight<T>& w3, const Weight<T>& w2,
                                  DeviceSpan<const T> logits, DeviceSpan<const T> h, const RoutedExpertsIo<T>& io,
                                  const MoeShape& m, int d) {
  detail::check_experts("routed_experts", w1.describe(), w1.rows(), w1.cols(), !w1.is_dense(), m.experts,
                        m.expert_width, d, 1);
  detail::check_experts("routed_experts", w3.describe(), w3.rows(), w3.cols(), !w3.is_dense(), m.experts,
                        m.expert_width, d, 1);
  detail::check_experts("routed_experts", w2.describe(), w2.rows(), w2.cols(), !w2.is_dense(), m.experts, d,
                        m.expert_width, 1);
  if (!staged_experts(p, w1, w3, w2, m, d, 1)) {
    std::string why;
    for (const Weight<T>* w : {&w1, &w3, &w2}) {
      if (why.empty() && !w->is_dense()) why = "weight " + w->describe() + " is quantized";
    }
    if (why.empty() && m.experts > kMoeStagedExperts) {
      why = std::to_string(m.experts) + " experts, more than the " + std::to_string(kMoeStagedExperts) +
            " the kernels route";
    }
    if (why.empty()) {
      why = "moe_down_staged has no blocks for d " + std::to_string(d) + ", expert width " +
            std::to_string(m.expert_width) + " and top k " + std::to_string(m.experts_per_token) + " on this GPU";
    }
    throw UsageError("routed_experts cannot run these experts (staged_experts is false): " + why);
  }
  const auto need = [](const char* name, std::size_t size, long long elements) {
    if (size < static_cast<std::size_t>(elements)) {
      throw UsageError("routed_experts: " + std::string(name) + " holds " + std::to_string(size) +
                       " elements, the step needs " + std::to_string(elements));
    }
  };
  const long long top_k = m.experts_per_token;
  need("logits", logits.size(), m.experts);
  need("h", h.size(), d);
  need("ids", io.ids.size(), top_k);
  need("weights", io.weights.size(), top_k);
  need("plan", io.plan.size(), static_cast<long long>(kMoePlanInts));
  need("act", io.act.size(), top_k * m.expert_width);
  need("x", io.x.size(), d);
  const BasicKernels<T>& k = p.dense;
  const int normalize = m.normalize ? 1 : 0;
  // In one wave, so that every block passes its wait, and lets moe_down_staged launch, at once.
  return k.moe_gate_up_staged(k.moe_gate_up_staged_config(m.expert_width, d, m.experts_per_token), w1.dense(),
                              w3.dense(), h, logits, io.ids, io.weights, io.plan, io.act, m.experts, m.expert_width, d,
                              m.experts_per_token, normalize) >>
         k.moe_down_staged(k.moe_down_staged_config(d, m.expert_width, m.experts, m.experts_per_token, 1), w2.dense(),
                           io.act.as_const(), logits, io.x, m.experts, m.expert_width, d, m.experts_per_token,
                           normalize);
}

/// The op type of expert_gate_up().
template <Element T>
using ExpertGateUpOp = detail::WeightOp<
    LaunchOp<const T*, const T*, const T*, const int*, T*, int, int, int, int, int>,
    OptionalLaunch<QuantizedMatrix, QuantizedMatrix, const T*, const int*, T*, int, int, int, int, int>>;

/// act[j] = silu(W1_e h[b]) * (W3_e h[b]) for each pair j = (row b, slot s) of the plan, e the expert row b chose in
/// slot s: w1 and w3 [experts * width x d] (expert e's rows from e * width), h [batch][d], act [batch * top k][width].
/// moe_gate_up or moe_qgate_up. \throws UsageError naming the weights when their shapes are not the experts', when
/// they are not in one format, when a quantized expert's rows are not whole tiles of 16 (each expert must start on
/// one), or when they are quantized and `p` has no quantized kernels.
template <Element T>
[[nodiscard]] ExpertGateUpOp<T> expert_gate_up(const Projector<T>& p, const Weight<T>& w1, const Weight<T>& w3,
                                               DeviceSpan<const T> h, DeviceSpan<const int> plan, DeviceSpan<T> act,
                                               const MoeShape& m, int d, int batch) {
  detail::check_experts("expert_gate_up", w1.describe(), w1.rows(), w1.cols(), !w1.is_dense(), m.experts,
                        m.expert_width, d, batch);
  detail::check_experts("expert_gate_up", w3.describe(), w3.rows(), w3.cols(), !w3.is_dense(), m.experts,
                        m.expert_width, d, batch);
  const bool same = w1.format() == w3.format() &&
                    (w1.is_dense() || w1.quantized().layout().format() == w3.quantized().layout().format());
  if (!same) {
    throw UsageError("weights " + w1.describe() + " and " + w3.describe() +
                     " must be in one format (one kernel reads the two)");
  }
  const int distinct = most_distinct_experts(m, batch);
  if (format_traits(w1.format()).quantized) {
    const BasicQuantizedKernels<T>& q = p.quantized_for(w1);
    const QuantizedMatrix m1 = w1.matrix();
    return ExpertGateUpOp<T>(
        OptionalLaunch(q.moe_qgate_up(q.moe_config(m1, m.expert_width, d, distinct), m1, w3.matrix(), h, plan, act,
                                      m.experts, m.expert_width, d, m.experts_per_token, batch),
                       std::make_shared<const std::pair<std::shared_ptr<const void>, std::shared_ptr<const void>>>(
                           w1.owner(), w3.owner())));
  }
  const BasicKernels<T>& k = p.dense;
  return ExpertGateUpOp<T>(k.moe_gate_up(k.moe_config(m.expert_width, d, batch, distinct), w1.dense(), w3.dense(), h,
                                         plan, act, m.experts, m.expert_width, d, m.experts_per_token, batch));
}

/// What expert_down's moe_down or moe_qdown writes besides x: the experts' fp32 products and the grid columns' counts
/// (BasicDecoderState's moe_partial and moe_counters).
struct ExpertDownScratch {
  DeviceSpan<float> partial;      ///< [batch * top k][d]
  DeviceSpan<unsigned> counters;  ///< [d], zero before and after each launch
};

/// The op type of expert_down().
template <Element T>
using ExpertDownOp = detail::WeightOp<
    LaunchOp<const T*, const T*, const int*, const float*, float*, unsigned*, T*, int, int, int, int, int>,
    OptionalLaunch<QuantizedMatrix, const T*, const int*, const float*, float*, unsigned*, T*, int, int, int, int,
                   int>>;

/// x[b] += the sum over row b's slots s of weights[b][s] * W2_e act[b * top k + s], e the expert of the slot, summed
/// in fp32 in slot order and rounded once: w2 [experts * d x width] (expert e's rows from e * d). moe_down or
/// moe_qdown. \throws UsageError as expert_gate_up.
template <Element T>
[[nodiscard]] ExpertDownOp<T> expert_down(const Projector<T>& p, const Weight<T>& w2, DeviceSpan<const T> act,
                                          DeviceSpan<const int> plan, DeviceSpan<const float> weights,
                                          const ExpertDownScratch& scratch, DeviceSpan<T> x, const MoeShape& m, int d,
                                          int batch) {
  detail::check_experts("expert_down", w2.describe(), w2.rows(), w2.cols(), !w2.is_dense(), m.experts, d,
                        m.expert_width, batch);
  const int distinct = most_distinct_experts(m, batch);
  if (format_traits(w2.format()).quantized) {
    const BasicQuantizedKernels<T>& q = p.quantized_for(w2);
    const QuantizedMatrix m2 = w2.matrix();
    return ExpertDownOp<T>(OptionalLaunch(
        q.moe_qdown(q.moe_config(m2, d, m.expert_width, distinct), m2, act, plan, weights, scratch.partial,
                    scratch.counters, x, m.experts, m.expert_width, d, m.experts_per_token, batch),
        w2.owner()));
  }
  const BasicKernels<T>& k = p.dense;
  return ExpertDownOp<T>(k.moe_down(k.moe_down_config(d, m.expert_width, batch, distinct), w2.dense(), act, plan,
                                    weights, scratch.partial, scratch.counters, x, m.experts, m.expert_width, d,
                                    m.experts_per_token, batch));
}

}  // namespace lazygraph::nn
