// A mixture of experts' routing (nn/moe_routing.hpp): the float64 reference on hand-made logits (host), and the MoE
// kernels of kernels/nn/moe.cu against float64 computed from the same rounded inputs, in fp16 and bf16 (gpu suite):
// moe_route against route_token (and its plan against the distinct experts of the choice), moe_gate_up and moe_down
// against the experts' SwiGLU sums on the fp32 and the tensor-core variants, every row of a batch giving the bits it
// gets alone.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include "common/gpu.hpp"
#include "common/nn.hpp"

#include <lazygraph/nn/kernels.hpp>
#include <lazygraph/nn/moe_routing.hpp>

using namespace lazygraph;
using namespace lazygraph::nn;

namespace {

/// softmax(logits)[i], in float64.
double softmax_at(const std::vector<double>& logits, int i) {
  double sum = 0;
  for (const double l : logits) sum += std::exp(l);
  return std::exp(logits[static_cast<std::size_t>(i)]) / sum;
}

}  // namespace

TEST_CASE("route_token picks the top k of the softmax in descending order and renormalizes where asked") {
  const std::vector<double> logits{0.5, 2.0, -1.0, 3.0, 1.0, 2.5};
  const std::vector<ExpertChoice> plain = route_token(logits, 3, false);
  REQUIRE(plain.size() == 3);
  CHECK(plain[0].expert == 3);
  CHECK(plain[1].expert == 5);
  CHECK(plain[2].expert == 1);
  CHECK(plain[0].weight == doctest::Approx(softmax_at(logits, 3)).epsilon(1e-12));
  CHECK(plain[2].weight == doctest::Approx(softmax_at(logits, 1)).epsilon(1e-12));

  const std::vector<ExpertChoice> normalized = route_token(logits, 3, true);
  double sum = 0;
  for (const ExpertChoice& c : normalized) sum += c.weight;
  CHECK(sum == doctest::Approx(1.0).epsilon(1e-12));
  // Renormalized over the chosen ones: the softmax of their logits alone (Mixtral's form).
  const double chosen = std::exp(3.0) + std::exp(2.5) + std::exp(2.0);
  CHECK(normalized[0].weight == doctest::Approx(std::exp(3.0) / chosen).epsilon(1e-12));
  CHECK(normalized[1].weight == doctest::Approx(std::exp(2.5) / chosen).epsilon(1e-12));
  CHECK(normalized[1].expert == 5);

  // Every expert chosen: the softmax itself, or weights summing to 1 either way.
  const std::vector<ExpertChoice> all = route_token(logits, 6, false);
  CHECK(all.back().expert == 2);
  CHECK(all.back().weight == doctest::Approx(softmax_at(logits, 2)).epsilon(1e-12));
}

TEST_CASE("route_token breaks a tie by the lower expert index, and shifted logits route the same") {
  const std::vector<double> tied{1.0, 4.0, 0.0, 4.0, 4.0, 2.0};
  const std::vector<ExpertChoice> chosen = route_token(tied, 2, false);
  CHECK(chosen[0].expert == 1);
  CHECK(chosen[1].expert == 3);
  CHECK(chosen[0].weight == chosen[1].weight);
  CHECK(route_token(tied, 3, true)[2].expert == 4);
  // Large logits of one offset: the softmax subtracts the largest, so nothing overflows.
  std::vector<double> shifted = tied;
  for (double& l : shifted) l += 1000;
  const std::vector<ExpertChoice> same = route_token(shifted, 2, false);
  CHECK(same[0].expert == 1);
  CHECK(same[0].weight == doctest::Approx(chosen[0].weight).epsilon(1e-12));
}

TEST_CASE("route_token refuses no logits, a top k outside 1..experts and a logit that is not finite") {
  const std::vector<double> logits{1.0, 2.0};
  CHECK_THROWS_WITH_AS((void)route_token(logits, 3, true), doctest::Contains("top_k 3 is not 1 to the 2 experts"),
                       UsageError);
  CHECK_THROWS_AS((void)route_token(logits, 0, true), UsageError);
  CHECK_THROWS_AS((void)route_token({}, 1, true), UsageError);
  const std::vector<double> nan{1.0, std::nan("")};
  CHECK_THROWS_WITH_AS((void)route_token(nan, 1, true), doctest::Contains("router logit 1 is not finite"), UsageError);
}

namespace {

/// `n` uniform values in [-scale, scale), rounded to T, from a generator seeded by `seed`.
template <class T>
std::vector<T> uniform(std::size_t n, float scale, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<T> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) out.push_back(T::from_float(dist(gen)));
  return out;
}

/// A quiet NaN of T, the poison written where a kernel must write.
template <class T>
T moe_poison() {
  return T::from_float(std::nanf(""));
}

LaunchConfig launch(unsigned gx, unsigned gy, unsigned bx, unsigned by, unsigned bz = 1) {
  return {{gx, gy, 1}, {bx, by, bz}, 0};
}

/// The relative bound of T's kernels against float64 of the same rounded inputs (a rounding to T at the end).
template <class T>
constexpr double route_tolerance = std::same_as<T, half> ? 5e-3 : 2e-2;

/// ||got - ref|| / ||ref|| and max |got - ref| / max |ref| both within route_tolerance<T>; a NaN (an unwritten poison)
/// fails.
template <class T>
void check_close(const std::vector<T>& got, const std::vector<double>& ref) {
  REQUIRE(got.size() == ref.size());
  double err = 0;
  double norm = 0;
  double worst = 0;
  double largest = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = got[i].to_float();
    REQUIRE_MESSAGE(std::isfinite(g), "element " << i << " is not finite (unwritten?)");
    err += (g - ref[i]) * (g - ref[i]);
    norm += ref[i] * ref[i];
    worst = std::max(worst, std::abs(g - ref[i]));
    largest = std::max(largest, std::abs(ref[i]));
  }
  CHECK(std::sqrt(err / norm) < route_tolerance<T>);
  CHECK(worst / largest < route_tolerance<T>);
}

/// row . x in float64, `cols` elements each.
template <class T>
double dot(const std::vector<T>& m, std::size_t row, const std::vector<T>& x, std::size_t at, int cols) {
  double acc = 0;
  for (int c = 0; c < cols; ++c) {
    acc += static_cast<double>(m[row * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c)].to_float()) *
           x[at + static_cast<std::size_t>(c)].to_float();
  }
  return acc;
}

/// The plan's layout (kernels/nn/moe.cu): [0] the count n, [1 + u] the distinct experts, then [u][8] pairs.
constexpr std::size_t kPlanPairs = 1 + 128;

/// What moe_route wrote for a step: each row's experts and weights, and the plan.
struct Routes {
  DeviceBuffer<int> ids;
  DeviceBuffer<float> weights;
  DeviceBuffer<int> plan;
};

/// moe_route of `logits` ([batch][experts]) on one block of `threads`, into poisoned buffers.
template <class T>
Routes route(const BasicKernels<T>& k, const std::vector<T>& logits, int experts, int top_k, bool normalize, int batch,
             unsigned threads) {
  Stream& s = lgtest::stream();
  const auto dlogits = lgtest::to_device(s, logits);
  const auto n = static_cast<std::size_t>(batch) * static_cast<std::size_t>(top_k);
  Routes r{lgtest::to_device(s, std::vector<int>(n, -7)), lgtest::to_device(s, std::vector<float>(n, std::nanf(""))),
           lgtest::to_device(s, std::vector<int>(kMoePlanInts, -7))};
  k.moe_route.launch(s, launch(1, 1, threads, 1), dlogits.cview(), r.ids.view(), r.weights.view(), r.plan.view(),
                     experts, top_k, normalize ? 1 : 0, batch);
  return r;
}

/// The plan moe_route must write for `ids` ([batch][top_k]): the distinct experts in the order of their first pair,
/// and for each and each row the pair that chose it or -1 (the entries a plan of `batch` rows defines).
std::vector<int> expected_plan(const std::vector<int>& ids, int top_k, int batch) {
  std::vector<int> distinct;
  for (const int e : ids) {
    if (std::find(distinct.begin(), distinct.end(), e) == distinct.end()) distinct.push_back(e);
  }
  std::vector<int> plan(kMoePlanInts, -7);
  plan[0] = static_cast<int>(distinct.size());
  for (std::size_t u = 0; u < distinct.size(); ++u) {
    plan[1 + u] = distinct[u];
    for (int b = 0; b < batch; ++b) {
      int pair = -1;
      for (int slot = 0; slot < top_k; ++slot) {
        if (ids[static_cast<std::size_t>(b * top_k + slot)] == distinct[u]) pair = b * top_k + slot;
      }
      plan[kPlanPairs + u * 8 + static_cast<std::size_t>(b)] = pair;
    }
  }
  return plan;
}

/// The defined entries of `plan` (what expected_plan writes; the rest is left as it was).
std::vector<int> defined_part(std::vector<int> plan, int batch) {
  const auto n = static_cast<std::size_t>(plan[0]);
  for (std::size_t i = 1; i < plan.size(); ++i) {
    const bool expert = i < 1 + n;
    const bool pair =
        i >= kPlanPairs && (i - kPlanPairs) / 8 < n && (i - kPlanPairs) % 8 < static_cast<std::size_t>(batch);
    if (!expert && !pair) plan[i] = -7;
  }
  return plan;
}

/// A mixture of experts' layer: stacked random weights and a batch of normed rows, on the host and the device.
template <class T>
struct Experts {
  int experts;
  int width;
  int d;
  int batch;
  std::vector<T> w1;  ///< gate_proj, [experts][width][d]
  std::vector<T> w3;  ///< up_proj, [experts][width][d]
  std::vector<T> w2;  ///< down_proj, [experts][d][width]
  std::vector<T> h;   ///< the normed rows, [batch][d]
  DeviceBuffer<T> dw1;
  DeviceBuffer<T> dw3;
  DeviceBuffer<T> dw2;
  DeviceBuffer<T> dh;

  Experts(int experts_, int width_, int d_, int batch_, std::uint32_t seed)
      : experts(experts_),
        width(width_),
        d(d_),
        batch(batch_),
        w1(uniform<T>(static_cast<std::size_t>(experts) * width * d, 1.0F / std::sqrt(float(d)), seed)),
        w3(uniform<T>(w1.size(), 1.0F / std::sqrt(float(d)), seed + 1)),
        w2(uniform<T>(w1.size(), 1.0F / std::sqrt(float(width)), seed + 2)),
        h(uniform<T>(static_cast<std::size_t>(batch) * d, 1.0F, seed + 3)),
        dw1(lgtest::to_device(lgtest::stream(), w1)),
        dw3(lgtest::to_device(lgtest::stream(), w3)),
        dw2(lgtest::to_device(lgtest::stream(), w2)),
        dh(lgtest::to_device(lgtest::stream(), h)) {}

  /// act of pair (row b, expert e) in float64: silu(W1_e h_b) * (W3_e h_b).
  [[nodiscard]] std::vector<double> act(int b, int e) const {
    std::vector<double> out(static_cast<std::size_t>(width));
    for (int i = 0; i < width; ++i) {
      const std::size_t row = static_cast<std::size_t>(e) * width + i;
      const std::size_t at = static_cast<std::size_t>(b) * d;
      out[static_cast<std::size_t>(i)] = lgtest::silu(dot(w1, row, h, at, d)) * dot(w3, row, h, at, d);
    }
    return out;
  }
};

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

/// How run_experts launches the expert kernels.
struct ExpertLaunch {
  bool tensor_cores = false;  ///< the _mma variants (for every batch, 1 included), else the fp32 one for the batch
  /// Blocks (32, K, R) of the fp32 variants or (32, warps) of the _mma ones and their grids' x and y; 0: moe_config's.
  unsigned warps_k = 0;
  unsigned groups_r = 1;
  unsigned gx = 0;
  unsigned gy = 0;
  /// One row: moe_gate_up_staged (routing the row itself), then moe_down_staged over `staged_rows` rows of d per
  /// block (0: moe_down_staged_config's), instead of moe_route, moe_gate_up and moe_down. gy, where not 0, is then
  /// moe_gate_up_staged's grid height (its blocks take the slots y-stride; the config's is top k).
  bool staged = false;
  int staged_rows = 0;
};

/// What a layer's experts gave: the route's weights, act, the new x, and moe_down's counters after it.
template <class T>
struct ExpertsOut {
  std::vector<int> ids;
  std::vector<int> plan;
  std::vector<float> weights;
  std::vector<T> act;
  std::vector<T> x;
  std::vector<unsigned> counters;
  std::vector<float> partial;  ///< moe_down's fp32 products (moe_down_staged leaves the poison)
};

/// Routes logits choosing `ids` ([batch][top_k]), or `router` ([batch][experts]) where given (the ids are then what
/// it chooses), then runs moe_gate_up and moe_down on residual `x`.
template <class T>
ExpertsOut<T> run_experts(const Experts<T>& m, const std::vector<int>& ids, int top_k, const std::vector<T>& x,
                          const ExpertLaunch& how, const std::vector<T>& router = {}) {
  Stream& s = lgtest::stream();
  const BasicKernels<T> k(lgtest::nn_kernels(), KernelOptions{.tensor_cores = how.tensor_cores});
  const std::vector<T> logits = router.empty() ? logits_choosing<T>(ids, m.experts, top_k) : router;
  const Routes r = route(k, logits, m.experts, top_k, true, m.batch, 256);
  if (router.empty()) REQUIRE(lgtest::to_host(s, r.ids.cview()) == ids);
  const auto pairs = static_cast<std::size_t>(m.batch) * static_cast<std::size_t>(top_k);
  auto act = lgtest::to_device(s, std::vector<T>(pairs * static_cast<std::size_t>(m.width), moe_poison<T>()));
  auto partial = lgtest::to_device(s, std::vector<float>(pairs * static_cast<std::size_t>(m.d), std::nanf("")));
  auto counters = lgtest::to_device(s, std::vector<unsigned>(static_cast<std::size_t>(m.d), 0U));
  auto dxs = lgtest::to_device(s, x);
  const int distinct = std::min(m.batch * top_k, m.experts);
  const auto config = [&](int rows, int cols) {
    if (how.warps_k == 0) return k.moe_config(rows, cols, m.batch, distinct);
    return how.tensor_cores ? launch(how.gx, how.gy, 32, how.warps_k)
                            : launch(how.gx, how.gy, 32, how.warps_k, how.groups_r);
  };
  // The tensor-core variant for every batch (variant(2) is NAME_mma), else the fp32 variant of the batch.
  const int variant = how.tensor_cores ? 2 : m.batch;
  if (how.staged) {
    REQUIRE(m.batch == 1);
    // Routed by the two kernels themselves, into buffers of their own, poisoned as route()'s.
    const auto dlogits = lgtest::to_device(s, logits);
    const auto n = static_cast<std::size_t>(top_k);
    auto staged_ids = lgtest::to_device(s, std::vector<int>(n, -7));
    auto staged_weights = lgtest::to_device(s, std::vector<float>(n, std::nanf("")));
    auto staged_plan = lgtest::to_device(s, std::vector<int>(kMoePlanInts, -7));
    LaunchConfig gate_up = k.moe_gate_up_staged_config(m.width, m.d, distinct);
    if (how.gy > 0) gate_up.grid.y = how.gy;
    k.moe_gate_up_staged.launch(s, gate_up, m.dw1.cview(), m.dw3.cview(), m.dh.cview(), dlogits.cview(),
                                staged_ids.view(), staged_weights.view(), staged_plan.view(), act.view(), m.experts,
                                m.width, m.d, top_k, 1);
    LaunchConfig down = k.moe_down_staged_config(m.d, m.width, m.experts, top_k, 1);
    if (how.staged_rows > 0) {
      const int rows = how.staged_rows;
      down.grid = {static_cast<unsigned>((m.d + rows - 1) / rows), 1, 1};
      down.block = {256, 1, 1};
      down.shared_bytes =
          static_cast<unsigned>(top_k * (rows * m.width * static_cast<int>(sizeof(T)) + 4 * m.width + 4 * rows));
    }
    REQUIRE(down.grid.x != 0);
    REQUIRE(static_cast<int>(down.shared_bytes) <= k.shared_memory_optin - 1024);
    k.moe_down_staged.launch(s, down, m.dw2.cview(), act.cview(), dlogits.cview(), dxs.view(), m.experts, m.width, m.d,
                             top_k, 1);
    return {lgtest::to_host(s, staged_ids.cview()),
            lgtest::to_host(s, staged_plan.cview()),
            lgtest::to_host(s, staged_weights.cview()),
            lgtest::to_host(s, act.cview()),
            lgtest::to_host(s, dxs.cview()),
            lgtest::to_host(s, counters.cview()),
            lgtest::to_host(s, partial.cview())};
  }
  k.moe_gate_up.variant(variant).launch(s, config(m.width, m.d), m.dw1.cview(), m.dw3.cview(), m.dh.cview(),
                                        r.plan.cview(), act.view(), m.experts, m.width, m.d, top_k, m.batch);
  // moe_down_config: the fp32 variants' grid for d / 4 rows where they take short rows four at a time.
  const LaunchConfig down =
      how.warps_k == 0 ? k.moe_down_config(m.d, m.width, m.batch, distinct) : config(m.d, m.width);
  k.moe_down.variant(variant).launch(s, down, m.dw2.cview(), act.cview(), r.plan.cview(), r.weights.cview(),
                                     partial.view(), counters.view(), dxs.view(), m.experts, m.width, m.d, top_k,
                                     m.batch);
  return {lgtest::to_host(s, r.ids.cview()),  lgtest::to_host(s, r.plan.cview()), lgtest::to_host(s, r.weights.cview()),
          lgtest::to_host(s, act.cview()),    lgtest::to_host(s, dxs.cview()),    lgtest::to_host(s, counters.cview()),
          lgtest::to_host(s, partial.cview())};
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE_TEMPLATE(
      "moe_route chooses and weighs each row's experts as route_token does on the same logits, and plans their reads",
      T, half, bfloat16) {
    const BasicKernels<T> k(lgtest::nn_kernels());
    struct Shape {
      int experts, top_k, batch;
      bool normalize;
      unsigned block;
      float scale;  // of the logits: small ones round to ties often, large ones make the softmax peaked
    };
    for (const Shape& shape :
         {Shape{8, 2, 1, true, 256, 2.0F}, Shape{128, 8, 8, true, 256, 2.0F}, Shape{64, 8, 3, false, 128, 4.0F},
          Shape{60, 4, 5, true, 1024, 1.0F}, Shape{1024, 16, 2, false, 256, 3.0F}, Shape{8, 4, 8, true, 32, 2.0F},
          Shape{16, 16, 8, false, 64, 0.05F}}) {
      CAPTURE(shape.experts);
      CAPTURE(shape.top_k);
      CAPTURE(shape.batch);
      CAPTURE(shape.block);
      const auto logits = uniform<T>(static_cast<std::size_t>(shape.batch) * shape.experts, shape.scale,
                                     11U + static_cast<unsigned>(shape.experts));
      const Routes r = route(k, logits, shape.experts, shape.top_k, shape.normalize, shape.batch, shape.block);
      const auto got_ids = lgtest::to_host(lgtest::stream(), r.ids.cview());
      const auto got_weights = lgtest::to_host(lgtest::stream(), r.weights.cview());
      for (int b = 0; b < shape.batch; ++b) {
        CAPTURE(b);
        std::vector<double> row;
        for (int e = 0; e < shape.experts; ++e)
          row.push_back(logits[static_cast<std::size_t>(b * shape.experts + e)].to_float());
        // Distinct logits of T are far apart for fp32's softmax, so its order is float64's exactly, ties included.
        const std::vector<ExpertChoice> want = route_token(row, shape.top_k, shape.normalize);
        for (int j = 0; j < shape.top_k; ++j) {
          const auto at = static_cast<std::size_t>(b * shape.top_k + j);
          CHECK(got_ids[at] == want[static_cast<std::size_t>(j)].expert);
          // Each weight rounded to T: within a rounding of float64's.
          CHECK(got_weights[at] ==
                doctest::Approx(want[static_cast<std::size_t>(j)].weight).epsilon(route_tolerance<T>));
          CHECK(static_cast<float>(T::from_float(got_weights[at]).to_float()) == got_weights[at]);
        }
      }
      const auto plan = lgtest::to_host(lgtest::stream(), r.plan.cview());
      CHECK(defined_part(plan, shape.batch) == expected_plan(got_ids, shape.top_k, shape.batch));
    }
  }

  TEST_CASE_TEMPLATE("moe_route breaks exact ties by the lower expert index and renormalizes the chosen ones", T, half,
                     bfloat16) {
    const BasicKernels<T> k(lgtest::nn_kernels());
    // Experts 1 and 3 tie at the top.
    const std::vector<float> values{2.0F, 4.0F, -2.0F, 4.0F, 3.0F, 1.0F};
    std::vector<T> logits;
    for (const float v : values) logits.push_back(T::from_float(v));
    const Routes r = route(k, logits, 6, 3, true, 1, 64);
    CHECK(lgtest::to_host(lgtest::stream(), r.ids.cview()) == std::vector<int>{1, 3, 4});
    const auto got = lgtest::to_host(lgtest::stream(), r.weights.cview());
    const std::vector<ExpertChoice> want = route_token(std::vector<double>(values.begin(), values.end()), 3, true);
    for (std::size_t j = 0; j < 3; ++j) CHECK(got[j] == doctest::Approx(want[j].weight).epsilon(route_tolerance<T>));
    CHECK(got[0] == got[1]);
    const auto plan = lgtest::to_host(lgtest::stream(), r.plan.cview());
    CHECK(plan[0] == 3);
    CHECK(std::vector<int>(plan.begin() + 1, plan.begin() + 4) == std::vector<int>{1, 3, 4});
    CHECK(std::vector<int>{plan[kPlanPairs], plan[kPlanPairs + 8], plan[kPlanPairs + 16]} == std::vector<int>{0, 1, 2});
  }

  TEST_CASE_TEMPLATE(
      "moe_gate_up and moe_down add each row's weighted expert SwiGLUs to the residual as float64 does, on both row "
      "loops",
      T, half, bfloat16) {
    struct Shape {
      int experts, width, d, top_k;
      std::vector<int> ids;  // [batch][top_k]; rows share experts or not
    };
    const std::vector<ExpertLaunch> launches{{false, 0, 1, 0, 0},  // fp32, moe_config's shape
                                             {true, 0, 1, 0, 0},   // tensor cores, moe_config's shape
                                             {false, 2, 2, 3, 2},  // fp32, 2 warps a row, grids smaller than the work
                                             {true, 4, 1, 3, 1}};  // tensor cores, 4 warps, small grids
    for (const Shape& shape :
         {Shape{8, 256, 256, 2, {3, 5}}, Shape{8, 200, 512, 2, {3, 5, 5, 0, 1, 3, 7, 6, 3, 2, 4, 5, 0, 7, 5, 3}},
          Shape{16, 96, 1032, 4, {15, 0, 8, 2, 2, 8, 0, 15, 1, 9, 4, 3}},
          Shape{4, 64, 128, 4, {0, 1, 2, 3, 3, 2, 1, 0}}, Shape{64, 128, 256, 8, {}}}) {
      std::vector<int> ids = shape.ids;
      if (ids.empty()) {  // 8 rows of 8 distinct experts each, 64 pairs over the 64 experts: few shared
        std::mt19937 gen(3);
        for (int b = 0; b < 8; ++b) {
          std::vector<int> all(static_cast<std::size_t>(shape.experts));
          for (int e = 0; e < shape.experts; ++e) all[static_cast<std::size_t>(e)] = e;
          std::shuffle(all.begin(), all.end(), gen);
          ids.insert(ids.end(), all.begin(), all.begin() + shape.top_k);
        }
      }
      const int top_k = shape.top_k;
      const int batch = static_cast<int>(ids.size()) / top_k;
      CAPTURE(batch);
      CAPTURE(shape.width);
      CAPTURE(shape.d);
      const Experts<T> m(shape.experts, shape.width, shape.d, batch, 100U + static_cast<unsigned>(shape.width));
      const std::vector<T> x = uniform<T>(static_cast<std::size_t>(batch) * shape.d, 1.0F, 9U);
      std::vector<double> act_ref;
      for (int j = 0; j < batch * top_k; ++j) {
        const std::vector<double> a = m.act(j / top_k, ids[static_cast<std::size_t>(j)]);
        act_ref.insert(act_ref.end(), a.begin(), a.end());
      }
      for (const ExpertLaunch& how : launches) {
        CAPTURE(how.tensor_cores);
        CAPTURE(how.warps_k);
        const ExpertsOut<T> got = run_experts(m, ids, top_k, x, how);
        check_close(got.act, act_ref);
        // moe_down from the act it was given: x + sum of weight * W2_e act; its counters back at zero.
        CHECK(std::all_of(got.counters.begin(), got.counters.end(), [](unsigned c) { return c == 0; }));
        std::vector<double> out_ref;
        for (int b = 0; b < batch; ++b) {
          for (int r = 0; r < shape.d; ++r) {
            double sum = x[static_cast<std::size_t>(b) * shape.d + r].to_float();
            for (int slot = 0; slot < top_k; ++slot) {
              const auto j = static_cast<std::size_t>(b * top_k + slot);
              const std::size_t row = static_cast<std::size_t>(ids[j]) * shape.d + r;
              sum += got.weights[j] * dot(m.w2, row, got.act, j * shape.width, shape.width);
            }
            out_ref.push_back(sum);
          }
        }
        check_close(got.x, out_ref);

        // Each row alone, on the same variant family, gets the bits it got in the batch, whichever rows shared its
        // experts' reads.
        for (int b = 0; b < batch; ++b) {
          CAPTURE(b);
          Experts<T> alone(shape.experts, shape.width, shape.d, 1, 100U + static_cast<unsigned>(shape.width));
          alone.h.assign(m.h.begin() + static_cast<std::ptrdiff_t>(b) * shape.d,
                         m.h.begin() + static_cast<std::ptrdiff_t>(b + 1) * shape.d);
          alone.dh = lgtest::to_device(lgtest::stream(), alone.h);
          const auto first = static_cast<std::ptrdiff_t>(b * top_k);
          const std::vector<int> row_ids(ids.begin() + first, ids.begin() + first + top_k);
          const std::vector<T> row_x(x.begin() + static_cast<std::ptrdiff_t>(b) * shape.d,
                                     x.begin() + static_cast<std::ptrdiff_t>(b + 1) * shape.d);
          const ExpertsOut<T> one = run_experts(alone, row_ids, top_k, row_x, how);
          CHECK(std::equal(one.x.begin(), one.x.end(), got.x.begin() + static_cast<std::ptrdiff_t>(b) * shape.d,
                           [](T a, T c) { return a.bits == c.bits; }));
          CHECK(std::equal(one.act.begin(), one.act.end(), got.act.begin() + first * shape.width,
                           [](T a, T c) { return a.bits == c.bits; }));
        }
      }
    }
  }

  TEST_CASE_TEMPLATE(
      "moe_gate_up_staged and moe_down_staged route one row and give it moe_route's, moe_gate_up's and moe_down's "
      "bits, "
      "however many rows of d a block owns",
      T, half, bfloat16) {
    struct Shape {
      int experts, width, d, top_k;
      std::vector<int> ids;
    };
    // Qwen3-30B-A3B's expert width and d with 8 of its experts; rows of d that blocks share unevenly (1032 = 7 * 147
    // + 3); few slots; one slot; Qwen3-30B-A3B's 128 experts and 8 slots (four probabilities a lane when routing).
    for (const Shape& shape : {Shape{8, 768, 2048, 8, {5, 0, 7, 3, 1, 6, 2, 4}}, Shape{16, 96, 1032, 4, {15, 0, 8, 2}},
                               Shape{12, 136, 520, 6, {11, 4, 0, 9, 2, 7}}, Shape{8, 200, 512, 2, {3, 5}},
                               Shape{4, 64, 128, 1, {2}}, Shape{128, 64, 256, 8, {127, 0, 64, 31, 32, 95, 96, 63}}}) {
      CAPTURE(shape.experts);
      CAPTURE(shape.width);
      CAPTURE(shape.d);
      const Experts<T> m(shape.experts, shape.width, shape.d, 1, 300U + static_cast<unsigned>(shape.width));
      const std::vector<T> x = uniform<T>(static_cast<std::size_t>(shape.d), 1.0F, 19U);
      // Logits that choose shape.ids by clear margins, then random ones (their ids whatever moe_route makes of them).
      for (const bool random_router : {false, true}) {
        CAPTURE(random_router);
        const std::vector<T> router = random_router ? uniform<T>(static_cast<std::size_t>(shape.experts), 2.0F,
                                                                 500U + static_cast<unsigned>(shape.experts))
                                                    : std::vector<T>{};
        const ExpertsOut<T> plain = run_experts(m, shape.ids, shape.top_k, x, ExpertLaunch{}, router);
        std::vector<double> out_ref;
        for (int r = 0; r < shape.d; ++r) {
          double sum = x[static_cast<std::size_t>(r)].to_float();
          for (int slot = 0; slot < shape.top_k; ++slot) {
            const auto j = static_cast<std::size_t>(slot);
            const std::size_t row = static_cast<std::size_t>(plain.ids[j]) * shape.d + r;
            sum += plain.weights[j] * dot(m.w2, row, plain.act, j * shape.width, shape.width);
          }
          out_ref.push_back(sum);
        }
        check_close(plain.x, out_ref);
        const BasicKernels<T> k(lgtest::nn_kernels());
        // Rows of d per moe_down_staged block (0: its config's); the last pass with moe_gate_up_staged's grid 3
        // blocks high instead of top k: blocks then take up to three slots y-stride, or none where there are fewer.
        for (const auto& [rows, slots_y] :
             {std::pair{0, 0U}, std::pair{1, 0U}, std::pair{7, 0U}, std::pair{16, 0U}, std::pair{0, 3U}}) {
          CAPTURE(rows);
          CAPTURE(slots_y);
          const long long bytes = static_cast<long long>(shape.top_k) *
                                  (static_cast<long long>(rows) * shape.width * static_cast<long long>(sizeof(T)) +
                                   4LL * shape.width + 4LL * rows);
          if ((rows == 0 &&
               k.moe_down_staged_config(shape.d, shape.width, shape.experts, shape.top_k, 1).grid.x == 0) ||
              bytes > k.shared_memory_optin - 1024) {
            MESSAGE("moe_down_staged does not run this shape so on this GPU");
            continue;
          }
          ExpertLaunch how;
          how.staged = true;
          how.staged_rows = rows;
          how.gy = slots_y;
          const ExpertsOut<T> staged = run_experts(m, shape.ids, shape.top_k, x, how, router);
          CHECK(staged.ids == plain.ids);
          CHECK(staged.plan == plain.plan);
          CHECK(std::equal(staged.weights.begin(), staged.weights.end(), plain.weights.begin(), [](float a, float c) {
            return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(c);
          }));
          CHECK(std::equal(staged.act.begin(), staged.act.end(), plain.act.begin(),
                           [](T a, T c) { return a.bits == c.bits; }));
          CHECK(
              std::equal(staged.x.begin(), staged.x.end(), plain.x.begin(), [](T a, T c) { return a.bits == c.bits; }));
          CHECK(std::all_of(staged.counters.begin(), staged.counters.end(), [](unsigned c) { return c == 0; }));
          CHECK(std::all_of(staged.partial.begin(), staged.partial.end(), [](float f) { return std::isnan(f); }));
        }
      }
    }
  }

  TEST_CASE_TEMPLATE("moe_down_staged runs one row only, one block a multiprocessor", T, half, bfloat16) {
    const BasicKernels<T> k(lgtest::nn_kernels());
    if (k.multiprocessors >= 128 && k.shared_memory_optin >= 227 * 1024) {  // an H100 or H200
      CHECK(k.moe_down_staged_config(2048, 768, 128, 8, 1).grid.x == 128);  // Qwen3-30B-A3B: 16 rows of d a block
    }
    CHECK(k.moe_down_staged_config(2048, 768, 128, 8, 2).grid.x == 0);
    CHECK(k.moe_down_staged_config(2048, 768, 256, 8, 1).grid.x == 0);  // more experts than the kernels route
    CHECK(k.moe_down_staged_config(1024, 4096, 8, 1, 1).grid.x == 0);   // moe_down sums such rows over two warps
    // A second wave of blocks would load its rows only after the first: moe_down runs it instead.
    CHECK(k.moe_down_staged_config(1 << 16, 768, 128, 8, 1).grid.x == 0);
    const LaunchConfig gate_up = k.moe_gate_up_staged_config(768, 2048, 8);
    CHECK(gate_up.grid.x * gate_up.grid.y <= 3U * static_cast<unsigned>(k.multiprocessors));
  }
}
