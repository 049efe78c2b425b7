// The experts' projections of a mixture of experts (nn/expert_projection.hpp) over quantized experts (kernels/nn/
// qmoe.cu): on the GPU, moe_qgate_up and moe_qdown in every format, fp16 and bf16, batches 1 to 8 whose rows share
// experts or not, against float64 of the dequantized weights (QuantizedWeight::dequantize, the host reference of the
// layout) and the same rounded activations; moe_qdown from the act the GPU wrote, with the route's weights, and its
// counters back at zero. fp8, as in tests/nn/quantized_kernels.cpp, is random e4m3 bytes with random scales. On the
// host: the stacked shape a projection needs, and quantized experts of whole tiles only, refused by name otherwise.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/gpu.hpp"
#include "common/nn.hpp"
#include "common/quantized_formats.hpp"

#include <lazygraph/nn/expert_projection.hpp>

using namespace lazygraph;
using namespace lazygraph::nn;

namespace {

/// The formats the expert kernels read, with T's scale type: int8, int4 symmetric in groups of 32 and 128, int4 with
/// zero points in groups of 64, fp8.
template <class T>
std::vector<QuantizedFormat> expert_formats() {
  const ScaleType s = scale_type_of<T>;
  return {{WeightFormat::int8_channel, 0, false, s},
          {WeightFormat::int4_group, 32, false, s},
          {WeightFormat::int4_group, 64, true, s},
          {WeightFormat::int4_group, 128, false, s},
          {WeightFormat::fp8_block, 128, false, s}};
}

/// `n` uniform values in [-scale, scale).
std::vector<float> uniform(std::size_t n, float scale, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> out(n);
  for (float& v : out) v = dist(gen);
  return out;
}

template <class T>
std::vector<T> rounded(const std::vector<float>& f) {
  std::vector<T> out;
  out.reserve(f.size());
  for (const float v : f) out.push_back(T::from_float(v));
  return out;
}

/// A stacked quantized expert matrix of `experts` x rows x cols: quantized from random values, or random fp8.
QuantizedWeight stacked(const QuantizedFormat& format, const char* name, int experts, int rows, int cols,
                        std::uint32_t seed) {
  const int all = experts * rows;
  if (format.kind == WeightFormat::fp8_block) return lgtest::random_fp8(format, name, all, cols, seed);
  const float scale = 1.0F / std::sqrt(static_cast<float>(cols));
  return quantize(format, name, all, cols, uniform(static_cast<std::size_t>(all) * cols, scale, seed));
}

/// row `row` of `m` ([*][cols]) . x[at ..], in float64.
double dot(const std::vector<float>& m, std::size_t row, const std::vector<double>& x, std::size_t at, int cols) {
  double acc = 0;
  for (int c = 0; c < cols; ++c) {
    acc += static_cast<double>(m[row * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c)]) *
           x[at + static_cast<std::size_t>(c)];
  }
  return acc;
}

template <class T>
std::vector<double> widened(const std::vector<T>& v) {
  std::vector<double> out;
  out.reserve(v.size());
  for (const T x : v) out.push_back(x.to_float());
  return out;
}

/// ||got - ref|| / ||ref|| and max |got - ref| / max |ref| both within `tolerance`; a NaN (an unwritten poison) fails.
void check_close(const std::vector<double>& got, const std::vector<double>& ref, double tolerance) {
  REQUIRE(got.size() == ref.size());
  double err = 0;
  double norm = 0;
  double worst = 0;
  double largest = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = got[i];
    REQUIRE_MESSAGE(std::isfinite(g), "element " << i << " is not finite (unwritten?)");
    err += (g - ref[i]) * (g - ref[i]);
    norm += ref[i] * ref[i];
    worst = std::max(worst, std::abs(g - ref[i]));
    largest = std::max(largest, std::abs(ref[i]));
  }
  CHECK(largest > 0);
  CHECK(std::sqrt(err / norm) < tolerance);
  CHECK(worst / largest < tolerance);
}

/// Router logits that choose `ids` ([batch][top_k]) in slot order by clear margins: 3 - s / 4 for slot s's expert,
/// -3 for the others.
template <class T>
std::vector<T> logits_choosing(const std::vector<int>& ids, int experts, int top_k) {
  const int batch = static_cast<int>(ids.size()) / top_k;
  std::vector<T> logits(static_cast<std::size_t>(batch) * experts, T::from_float(-3.0F));
  for (int b = 0; b < batch; ++b) {
    for (int slot = 0; slot < top_k; ++slot) {
      const auto at = static_cast<std::size_t>(b) * experts + ids[static_cast<std::size_t>(b * top_k + slot)];
      logits[at] = T::from_float(3.0F - 0.25F * static_cast<float>(slot));
    }
  }
  return logits;
}

/// A dense rows x cols weight named `name`, fresh random values in [-0.1, 0.1) rounded to T, on the device.
template <class T>
Weight<T> dense_weight(int rows, int cols, const char* name, std::uint32_t seed) {
  return Weight<T>(
      lgtest::to_device(lgtest::stream(), rounded<T>(uniform(static_cast<std::size_t>(rows) * cols, 0.1F, seed))), rows,
      cols, name);
}

struct Shape {
  int experts, width, d, top_k;
  std::vector<int> ids;  // [batch][top_k]; empty: 8 rows of random distinct experts
};

/// The shapes: a row alone; 8 rows sharing experts; 3 rows of 4 of 16 experts; 8 rows of 8 of 64 (few shared).
std::vector<Shape> shapes() {
  std::vector<Shape> out{{8, 128, 256, 2, {3, 5}},
                         {8, 256, 128, 2, {3, 5, 5, 0, 1, 3, 7, 6, 3, 2, 4, 5, 0, 7, 5, 3}},
                         {16, 128, 384, 4, {15, 0, 8, 2, 2, 8, 0, 15, 1, 9, 4, 3}},
                         {64, 128, 256, 8, {}}};
  std::mt19937 gen(3);
  for (Shape& s : out) {
    if (!s.ids.empty()) continue;
    for (int b = 0; b < 8; ++b) {
      std::vector<int> all(static_cast<std::size_t>(s.experts));
      for (int e = 0; e < s.experts; ++e) all[static_cast<std::size_t>(e)] = e;
      std::shuffle(all.begin(), all.end(), gen);
      s.ids.insert(s.ids.end(), all.begin(), all.begin() + s.top_k);
    }
  }
  return out;
}

/// One shape in one format: routes by logits_choosing, runs expert_gate_up and expert_down through the projections
/// over quantized Weights, and checks act and x against float64.
template <class T>
void check_experts(const QuantizedFormat& format, const Shape& shape, double tolerance) {
  Stream& s = lgtest::stream();
  const BasicKernels<T> k(lgtest::nn_kernels());
  const BasicQuantizedKernels<T> q(lgtest::nn_kernels());
  const Projector<T> p{k, &q};
  const int top_k = shape.top_k;
  const int batch = static_cast<int>(shape.ids.size()) / top_k;
  const MoeShape m{shape.experts, top_k, shape.width, true};
  const auto seed = static_cast<std::uint32_t>(shape.width + shape.d + shape.experts);
  const QuantizedWeight w1 = stacked(format, "experts.*.gate_proj", m.experts, m.expert_width, shape.d, seed);
  const QuantizedWeight w3 = stacked(format, "experts.*.up_proj", m.experts, m.expert_width, shape.d, seed + 1);
  const QuantizedWeight w2 = stacked(format, "experts.*.down_proj", m.experts, shape.d, m.expert_width, seed + 2);
  const Weight<T> dw1(DeviceQuantizedWeight<T>(s, w1));
  const Weight<T> dw3(DeviceQuantizedWeight<T>(s, w3));
  const Weight<T> dw2(DeviceQuantizedWeight<T>(s, w2));
  const std::vector<T> h = rounded<T>(uniform(static_cast<std::size_t>(batch) * shape.d, 1.0F, seed + 3));
  // The residual of the size of the experts' sum (its rms 0.01 to 0.15 here), so that rounding x + sum to T once, which
  // no kernel avoids, stays far inside the bounds: with x in [-1, 1] that rounding alone was up to 8% of a bf16 sum and
  // 0.95% of an fp16 one (the int formats' sums, emulated on the host), at or past them.
  const std::vector<T> x = rounded<T>(uniform(static_cast<std::size_t>(batch) * shape.d, 0.0625F, seed + 4));

  const auto pairs = static_cast<std::size_t>(batch) * static_cast<std::size_t>(top_k);
  const auto logits = lgtest::to_device(s, logits_choosing<T>(shape.ids, m.experts, top_k));
  auto ids = lgtest::to_device(s, std::vector<int>(pairs, -7));
  auto weights = lgtest::to_device(s, std::vector<float>(pairs, std::nanf("")));
  auto plan = lgtest::to_device(s, std::vector<int>(kMoePlanInts, -7));
  auto dh = lgtest::to_device(s, h);
  auto act = lgtest::to_device(
      s, std::vector<T>(pairs * static_cast<std::size_t>(m.expert_width), T::from_float(std::nanf(""))));
  auto partial = lgtest::to_device(s, std::vector<float>(pairs * static_cast<std::size_t>(shape.d), std::nanf("")));
  auto counters = lgtest::to_device(s, std::vector<unsigned>(static_cast<std::size_t>(shape.d), 0U));
  auto dx = lgtest::to_device(s, x);
  k.moe_route.launch(s, {{1, 1, 1}, {256, 1, 1}, 0}, logits.cview(), ids.view(), weights.view(), plan.view(), m.experts,
                     top_k, 1, batch);
  REQUIRE(lgtest::to_host(s, ids.cview()) == shape.ids);
  (expert_gate_up(p, dw1, dw3, dh.cview(), plan.cview(), act.view(), m, shape.d, batch) >>
   expert_down(p, dw2, act.cview(), plan.cview(), weights.cview(), {partial.view(), counters.view()}, dx.view(), m,
               shape.d, batch))
      .sync_on(s);

  // act[j] = silu(W1_e h_b) * (W3_e h_b), the weights dequantized, in float64.
  const std::vector<float> f1 = w1.dequantize();
  const std::vector<float> f3 = w3.dequantize();
  const std::vector<float> f2 = w2.dequantize();
  const std::vector<double> hd = widened(h);
  std::vector<double> act_ref;
  for (std::size_t j = 0; j < pairs; ++j) {
    const auto e = static_cast<std::size_t>(shape.ids[j]);
    const std::size_t at = j / static_cast<std::size_t>(top_k) * static_cast<std::size_t>(shape.d);
    for (int i = 0; i < m.expert_width; ++i) {
      const std::size_t row = e * static_cast<std::size_t>(m.expert_width) + static_cast<std::size_t>(i);
      act_ref.push_back(lgtest::silu(dot(f1, row, hd, at, shape.d)) * dot(f3, row, hd, at, shape.d));
    }
  }
  const std::vector<T> got_act = lgtest::to_host(s, act.cview());
  check_close(widened(got_act), act_ref, tolerance);

  // x + sum over the row's slots of weight * W2_e act, from the act and the weights the GPU wrote.
  const std::vector<double> act_got = widened(got_act);
  const std::vector<float> w = lgtest::to_host(s, weights.cview());
  std::vector<double> x_ref = widened(x);
  for (std::size_t j = 0; j < pairs; ++j) {
    const auto e = static_cast<std::size_t>(shape.ids[j]);
    const std::size_t b = j / static_cast<std::size_t>(top_k);
    for (int r = 0; r < shape.d; ++r) {
      const std::size_t row = e * static_cast<std::size_t>(shape.d) + static_cast<std::size_t>(r);
      x_ref[b * static_cast<std::size_t>(shape.d) + static_cast<std::size_t>(r)] +=
          static_cast<double>(w[j]) *
          dot(f2, row, act_got, j * static_cast<std::size_t>(m.expert_width), m.expert_width);
    }
  }
  // x's change (not x itself, whose size would hide errors of the experts' sum).
  std::vector<double> change_ref;
  std::vector<double> change_got;
  const std::vector<T> got_x = lgtest::to_host(s, dx.cview());
  for (std::size_t i = 0; i < x.size(); ++i) {
    change_ref.push_back(x_ref[i] - x[i].to_float());
    change_got.push_back(static_cast<double>(got_x[i].to_float()) - x[i].to_float());
  }
  check_close(change_got, change_ref, 2 * tolerance);
  const std::vector<unsigned> after = lgtest::to_host(s, counters.cview());
  CHECK(std::all_of(after.begin(), after.end(), [](unsigned c) { return c == 0; }));
}

}  // namespace

TEST_CASE("an expert projection names the stacked shape it needs and takes quantized experts of whole tiles only") {
  // Checked before anything is launched: 4 experts of 40 x 128 are one weight of 160 x 128.
  CHECK_THROWS_WITH_AS(nn::detail::check_experts("expert_gate_up", "w1", 0, 0, false, 4, 40, 128, 1),
                       "expert_gate_up: weight w1 is 0 x 0, where 160 x 128 is needed", UsageError);
  CHECK_THROWS_WITH_AS(nn::detail::check_experts("expert_down", "w2", 160, 128, false, 4, 128, 40, 1),
                       "expert_down: weight w2 is 160 x 128, where 512 x 40 is needed", UsageError);
  CHECK_NOTHROW(nn::detail::check_experts("expert_gate_up", "w1", 160, 128, false, 4, 40, 128, 8));
  CHECK_THROWS_WITH_AS(nn::detail::check_experts("expert_gate_up", "w1", 160, 128, false, 4, 40, 128, 9),
                       "expert_gate_up: weight w1: a batch of 9 rows is outside 1..8", UsageError);
  // Dense experts of any rows; quantized ones start each on a tile of 16 rows.
  CHECK_THROWS_WITH_AS(nn::detail::check_experts("expert_gate_up", "w1", 160, 128, true, 4, 40, 128, 1),
                       "expert_gate_up: weight w1 stacks 4 quantized experts of 40 rows; a quantized expert is whole "
                       "tiles of 16 rows (quantized.hpp), so its rows must be a multiple of 16",
                       UsageError);
  CHECK_NOTHROW(nn::detail::check_experts("expert_gate_up", "w1", 192, 128, true, 4, 48, 128, 1));
  const MoeShape m{4, 2, 40, true};
  CHECK(most_distinct_experts(m, 1) == 2);
  CHECK(most_distinct_experts(m, 8) == 4);  // 16 pairs over 4 experts
}

TEST_SUITE("gpu") {
  TEST_CASE_TEMPLATE(
      "quantized experts' gate-up and down projections match float64 of the dequantized weights in every format for "
      "batches of 1 to 8 rows sharing experts or not",
      T, half, bfloat16) {
    const double tolerance = std::same_as<T, half> ? 5e-3 : 2e-2;  // tests/nn/quantized_kernels.cpp's bounds
    for (const QuantizedFormat& format : expert_formats<T>()) {
      CAPTURE(format_name(format));
      for (const Shape& shape : shapes()) {
        CAPTURE(shape.experts);
        CAPTURE(shape.ids.size() / static_cast<std::size_t>(shape.top_k));
        check_experts<T>(format, shape, tolerance);
      }
    }
  }

  TEST_CASE_TEMPLATE(
      "routed_experts routes one row of dense experts and computes what moe_route and the expert kernels do, where "
      "staged_experts says so, and is refused elsewhere",
      T, half, bfloat16) {
    Stream& s = lgtest::stream();
    const BasicKernels<T> k(lgtest::nn_kernels());
    const BasicQuantizedKernels<T> q(lgtest::nn_kernels());
    const Projector<T> p{k, &q};
    const MoeShape m{64, 8, 128, true};
    const int d = 256;
    const Weight<T> w1 = dense_weight<T>(m.experts * m.expert_width, d, "experts.*.gate_proj", 7U);
    const Weight<T> w3 = dense_weight<T>(m.experts * m.expert_width, d, "experts.*.up_proj", 8U);
    const Weight<T> w2 = dense_weight<T>(m.experts * d, m.expert_width, "experts.*.down_proj", 9U);
    const QuantizedFormat int8{WeightFormat::int8_channel, 0, false, scale_type_of<T>};
    const QuantizedWeight qw2 = stacked(int8, "experts.*.down_proj", m.experts, d, m.expert_width, 9U);
    const Weight<T> quantized_w2(DeviceQuantizedWeight<T>(s, qw2));
    const bool fits = k.moe_down_staged_config(d, m.expert_width, m.experts, m.experts_per_token, 1).grid.x != 0;
    CHECK(staged_experts(p, w1, w3, w2, m, d, 1) == fits);
    CHECK_FALSE(staged_experts(p, w1, w3, w2, m, d, 2));
    CHECK_FALSE(staged_experts(p, w1, w3, quantized_w2, m, d, 1));

    // Fresh random logits, h and x; both ways in a graph of their own from the same inputs.
    const auto logits = lgtest::to_device(s, rounded<T>(uniform(static_cast<std::size_t>(m.experts), 2.0F, 11U)));
    const auto h = lgtest::to_device(s, rounded<T>(uniform(static_cast<std::size_t>(d), 1.0F, 12U)));
    const std::vector<T> x0 = rounded<T>(uniform(static_cast<std::size_t>(d), 1.0F, 13U));
    const auto top_k = static_cast<std::size_t>(m.experts_per_token);
    struct Out {
      DeviceBuffer<int> ids;
      DeviceBuffer<float> weights;
      DeviceBuffer<int> plan;
      DeviceBuffer<T> act;
      DeviceBuffer<T> x;
    };
    const auto fresh = [&] {
      return Out{lgtest::to_device(s, std::vector<int>(top_k, -7)),
                 lgtest::to_device(s, std::vector<float>(top_k, std::nanf(""))),
                 lgtest::to_device(s, std::vector<int>(kMoePlanInts, -7)),
                 lgtest::to_device(s, std::vector<T>(top_k * static_cast<std::size_t>(m.expert_width))),
                 lgtest::to_device(s, x0)};
    };
    Out plain = fresh();
    auto partial = lgtest::to_device(s, std::vector<float>(top_k * static_cast<std::size_t>(d)));
    auto counters = lgtest::to_device(s, std::vector<unsigned>(static_cast<std::size_t>(d)));
    k.moe_route.launch(s, k.step_config({{1, 1, 1}, {256, 1, 1}, 0}), logits.cview(), plain.ids.view(),
                       plain.weights.view(), plain.plan.view(), m.experts, m.experts_per_token, 1, 1);
    (expert_gate_up(p, w1, w3, h.cview(), plain.plan.cview(), plain.act.view(), m, d, 1) >>
     expert_down(p, w2, plain.act.cview(), plain.plan.cview(), plain.weights.cview(), {partial.view(), counters.view()},
                 plain.x.view(), m, d, 1))
        .sync_on(s);
    if (fits) {
      // In a captured graph (its kernels launched early), as a step records it.
      Out routed = fresh();
      CudaGraph<> graph = CudaGraph<>::capture(
          s, routed_experts(p, w1, w3, w2, logits.cview(), h.cview(),
                            RoutedExpertsIo<T>{routed.ids.view(), routed.weights.view(), routed.plan.view(),
                                               routed.act.view(), routed.x.view()},
                            m, d));
      graph.launch();
      CHECK(lgtest::to_host(s, routed.ids.cview()) == lgtest::to_host(s, plain.ids.cview()));
      CHECK(lgtest::to_host(s, routed.plan.cview()) == lgtest::to_host(s, plain.plan.cview()));
      const auto bits = [](const std::vector<float>& v) {
        std::vector<std::uint32_t> b;
        for (const float f : v) b.push_back(std::bit_cast<std::uint32_t>(f));
        return b;
      };
      CHECK(bits(lgtest::to_host(s, routed.weights.cview())) == bits(lgtest::to_host(s, plain.weights.cview())));
      const auto same = [](const std::vector<T>& a, const std::vector<T>& b) {
        return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](T u, T v) { return u.bits == v.bits; });
      };
      CHECK(same(lgtest::to_host(s, routed.act.cview()), lgtest::to_host(s, plain.act.cview())));
      CHECK(same(lgtest::to_host(s, routed.x.cview()), lgtest::to_host(s, plain.x.cview())));
    } else {
      MESSAGE("routed_experts does not run this shape on this GPU: only the refusal is checked");
    }
    const RoutedExpertsIo<T> io{plain.ids.view(), plain.weights.view(), plain.plan.view(), plain.act.view(),
                                plain.x.view()};
    // The refusal names the weight that is quantized, and only it.
    std::string refusal;
    try {
      (void)routed_experts(p, w1, w3, quantized_w2, logits.cview(), h.cview(), io, m, d);
    } catch (const UsageError& e) {
      refusal = e.what();
    }
    CHECK(refusal.find("down_proj") != std::string::npos);
    CHECK(refusal.find("is quantized") != std::string::npos);
    CHECK(refusal.find("gate_proj") == std::string::npos);
    // A buffer smaller than the step needs is refused by name.
    auto short_plan = lgtest::to_device(s, std::vector<int>(kMoePlanInts - 1));
    const RoutedExpertsIo<T> short_io{plain.ids.view(), plain.weights.view(), short_plan.view(), plain.act.view(),
                                      plain.x.view()};
    if (fits) {
      CHECK_THROWS_WITH_AS((void)routed_experts(p, w1, w3, w2, logits.cview(), h.cview(), short_io, m, d),
                           doctest::Contains("plan holds 1152"), UsageError);
      CHECK_THROWS_WITH_AS((void)routed_experts(p, w1, w3, w2, logits.cview().subspan(0, 8), h.cview(), io, m, d),
                           doctest::Contains("logits holds 8"), UsageError);
    }
    const MoeShape many{256, 8, 128, true};
    const Weight<T> many_w1 = dense_weight<T>(many.experts * many.expert_width, d, "experts.*.gate_proj", 7U);
    const Weight<T> many_w3 = dense_weight<T>(many.experts * many.expert_width, d, "experts.*.up_proj", 8U);
    const Weight<T> many_w2 = dense_weight<T>(many.experts * d, many.expert_width, "experts.*.down_proj", 9U);
    CHECK_FALSE(staged_experts(p, many_w1, many_w3, many_w2, many, d, 1));
    CHECK_THROWS_WITH_AS((void)routed_experts(p, many_w1, many_w3, many_w2, logits.cview(), h.cview(), io, many, d),
                         doctest::Contains("256 experts, more than the 128"), UsageError);
  }

  TEST_CASE_TEMPLATE(
      "routed_experts after the router's fused norm and gemv, replayed in one graph with a new residual each time, "
      "routes each replay from that replay's logits, as the kernels run one by one do",
      T, half, bfloat16) {
    // moe_down_staged reads the logits before its wait: this checks, through a real router kernel writing them in
    // the same graph, that it sees the replay's own logits and not the previous replay's.
    Stream& s = lgtest::stream();
    const BasicKernels<T> k(lgtest::nn_kernels());
    const BasicQuantizedKernels<T> q(lgtest::nn_kernels());
    const Projector<T> p{k, &q};
    const MoeShape m{64, 8, 128, true};
    const int d = 256;
    const float eps = 1e-6F;
    const Weight<T> w1 = dense_weight<T>(m.experts * m.expert_width, d, "experts.*.gate_proj", 21U);
    const Weight<T> w3 = dense_weight<T>(m.experts * m.expert_width, d, "experts.*.up_proj", 22U);
    const Weight<T> w2 = dense_weight<T>(m.experts * d, m.expert_width, "experts.*.down_proj", 23U);
    if (!staged_experts(p, w1, w3, w2, m, d, 1)) {
      MESSAGE("routed_experts does not run this shape on this GPU");
      return;
    }
    const auto router = lgtest::to_device(s, rounded<T>(uniform(static_cast<std::size_t>(m.experts) * d, 0.25F, 24U)));
    const auto gain = lgtest::to_device(s, rounded<T>(uniform(static_cast<std::size_t>(d), 1.0F, 25U)));
    const auto top_k = static_cast<std::size_t>(m.experts_per_token);
    const auto make = [&]<class U>(std::size_t n, U value) { return lgtest::to_device(s, std::vector<U>(n, value)); };
    auto x = make(static_cast<std::size_t>(d), T::from_float(0.0F));
    auto h = make(static_cast<std::size_t>(d), T::from_float(0.0F));
    auto logits = make(static_cast<std::size_t>(m.experts), T::from_float(0.0F));
    auto ids = make(top_k, -7);
    auto weights = make(top_k, 0.0F);
    auto plan = make(static_cast<std::size_t>(kMoePlanInts), -7);
    auto act = make(top_k * static_cast<std::size_t>(m.expert_width), T::from_float(0.0F));
    CudaGraph<> graph = CudaGraph<>::capture(
        s, k.rms_norm_store_gemv(k.rms_norm_store_gemv_config(m.experts, d), router.cview(), x.cview(), gain.cview(),
                                 h.view(), logits.view(), m.experts, d, eps) >>
               routed_experts(p, w1, w3, w2, logits.cview(), h.cview(),
                              RoutedExpertsIo<T>{ids.view(), weights.view(), plan.view(), act.view(), x.view()}, m, d));

    // The same step, kernel by kernel with nothing launched early: rms_norm, gemv, moe_route, the expert kernels.
    const BasicKernels<T> one_by_one(lgtest::nn_kernels(), false);
    const Projector<T> plain_p{one_by_one, &q};
    auto plain_x = make(static_cast<std::size_t>(d), T::from_float(0.0F));
    auto plain_h = make(static_cast<std::size_t>(d), T::from_float(0.0F));
    auto plain_logits = make(static_cast<std::size_t>(m.experts), T::from_float(0.0F));
    auto plain_ids = make(top_k, -7);
    auto plain_weights = make(top_k, 0.0F);
    auto plain_plan = make(static_cast<std::size_t>(kMoePlanInts), -7);
    auto plain_act = make(top_k * static_cast<std::size_t>(m.expert_width), T::from_float(0.0F));
    auto partial = make(top_k * static_cast<std::size_t>(d), 0.0F);
    auto counters = make(static_cast<std::size_t>(d), 0U);

    const auto same = [](const std::vector<T>& a, const std::vector<T>& b) {
      return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](T u, T v) { return u.bits == v.bits; });
    };
    std::vector<std::vector<int>> routes;
    for (std::uint32_t replay = 0; replay < 4; ++replay) {
      CAPTURE(replay);
      const std::vector<T> x0 = rounded<T>(uniform(static_cast<std::size_t>(d), 1.0F, 30U + replay));
      copy_async(s, x.view(), std::span<const T>(x0));
      copy_async(s, plain_x.view(), std::span<const T>(x0));
      graph.launch();
      one_by_one.rms_norm.launch(s, {{1, 1, 1}, {256, 1, 1}, 0}, plain_x.cview(), gain.cview(), plain_h.view(), d, eps);
      one_by_one.gemv.launch(s, one_by_one.gemv_config(m.experts, d), router.cview(), plain_h.cview(),
                             plain_logits.view(), m.experts, d, 1);
      one_by_one.moe_route.launch(s, {{1, 1, 1}, {256, 1, 1}, 0}, plain_logits.cview(), plain_ids.view(),
                                  plain_weights.view(), plain_plan.view(), m.experts, m.experts_per_token, 1, 1);
      (expert_gate_up(plain_p, w1, w3, plain_h.cview(), plain_plan.cview(), plain_act.view(), m, d, 1) >>
       expert_down(plain_p, w2, plain_act.cview(), plain_plan.cview(), plain_weights.cview(),
                   {partial.view(), counters.view()}, plain_x.view(), m, d, 1))
          .sync_on(s);
      s.synchronize();
      const std::vector<int> got_ids = lgtest::to_host(s, ids.cview());
      CHECK(got_ids == lgtest::to_host(s, plain_ids.cview()));
      CHECK(same(lgtest::to_host(s, h.cview()), lgtest::to_host(s, plain_h.cview())));
      CHECK(same(lgtest::to_host(s, logits.cview()), lgtest::to_host(s, plain_logits.cview())));
      CHECK(same(lgtest::to_host(s, act.cview()), lgtest::to_host(s, plain_act.cview())));
      CHECK(same(lgtest::to_host(s, x.cview()), lgtest::to_host(s, plain_x.cview())));
      routes.push_back(got_ids);
    }
    // Each replay chose other experts than the one before, so a stale route would have shown.
    for (std::size_t i = 1; i < routes.size(); ++i) CHECK(routes[i] != routes[i - 1]);
  }
}
