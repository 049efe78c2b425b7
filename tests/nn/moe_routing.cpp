// A mixture of experts' routing (nn/moe_routing.hpp): the float64 reference on hand-made logits (host), and the MoE
// kernels of kernels/nn/moe.cu against float64 computed from the same rounded inputs, in fp16 and bf16 (gpu suite):
// moe_route against route_token, moe_gate_up and moe_down against the experts' SwiGLU sums, every row of a batch
// giving the bits it gets alone.
#include <doctest/doctest.h>

#include <algorithm>
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

LaunchConfig launch(unsigned gx, unsigned gy, unsigned bx, unsigned by) { return {{gx, gy, 1}, {bx, by, 1}, 0}; }

/// The relative bound of T's kernels against float64 of the same rounded inputs (a rounding to T at the end).
template <class T>
constexpr double route_tolerance = std::same_as<T, half> ? 5e-3 : 2e-2;

/// T's relative rounding unit, 2^-(significand bits - 1): two values closer than a few of it may round either way.
template <class T>
constexpr double unit = std::same_as<T, half> ? 1.0 / 1024 : 1.0 / 128;

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

/// Runs moe_gate_up then moe_down for `ids` and `weights` ([batch][top_k]) on residual `x`; returns act and the new
/// x. Launch shapes: R warps a block, grids of gx (gate_up: gx x pairs) and dx blocks; 0 means one row per warp.
template <class T>
std::pair<std::vector<T>, std::vector<T>> run_experts(const Experts<T>& m, const std::vector<int>& ids,
                                                      const std::vector<float>& weights, int top_k,
                                                      const std::vector<T>& x, unsigned warps, unsigned gx,
                                                      unsigned dx) {
  Stream& s = lgtest::stream();
  const BasicKernels<T> k(lgtest::nn_kernels());
  const auto dids = lgtest::to_device(s, ids);
  const auto dweights = lgtest::to_device(s, weights);
  auto act = lgtest::to_device(s, std::vector<T>(static_cast<std::size_t>(m.batch) * top_k * m.width, moe_poison<T>()));
  auto dxs = lgtest::to_device(s, x);
  const auto pairs = static_cast<unsigned>(m.batch * top_k);
  const unsigned up_blocks = gx > 0 ? gx : static_cast<unsigned>((m.width + warps - 1) / warps);
  const unsigned down_blocks = dx > 0 ? dx : static_cast<unsigned>((m.d + warps - 1) / warps);
  k.moe_gate_up.launch(s, launch(up_blocks, pairs, 32, warps), m.dw1.cview(), m.dw3.cview(), m.dh.cview(), dids.cview(),
                       act.view(), m.experts, m.width, m.d, top_k, m.batch);
  k.moe_down.launch(s, launch(down_blocks, 1, 32, warps), m.dw2.cview(), act.cview(), dids.cview(), dweights.cview(),
                    dxs.view(), m.experts, m.width, m.d, top_k, m.batch);
  return {lgtest::to_host(s, act.cview()), lgtest::to_host(s, dxs.cview())};
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE_TEMPLATE("moe_route chooses and weighs each row's experts as route_token does on its rounded logits", T,
                     half, bfloat16) {
    Stream& s = lgtest::stream();
    const BasicKernels<T> k(lgtest::nn_kernels());
    struct Shape {
      int experts, d, top_k, batch;
      bool normalize;
      unsigned block;
    };
    int checked = 0;
    int rows = 0;
    for (const Shape& shape :
         {Shape{8, 256, 2, 1, true, 256}, Shape{128, 2048, 8, 8, true, 256}, Shape{64, 512, 8, 3, false, 128},
          Shape{60, 256, 4, 5, true, 1024}, Shape{1024, 64, 16, 2, false, 256}}) {
      CAPTURE(shape.experts);
      CAPTURE(shape.top_k);
      CAPTURE(shape.batch);
      const auto router = uniform<T>(static_cast<std::size_t>(shape.experts) * shape.d,
                                     2.0F / std::sqrt(float(shape.d)), 11U + static_cast<unsigned>(shape.experts));
      const auto h = uniform<T>(static_cast<std::size_t>(shape.batch) * shape.d, 1.0F, 7U);
      const auto drouter = lgtest::to_device(s, router);
      const auto dh = lgtest::to_device(s, h);
      const std::size_t n = static_cast<std::size_t>(shape.batch) * shape.top_k;
      auto ids = lgtest::to_device(s, std::vector<int>(n, -1));
      auto weights = lgtest::to_device(s, std::vector<float>(n, std::nanf("")));
      k.moe_route.launch(s, launch(static_cast<unsigned>(shape.batch), 1, shape.block, 1), drouter.cview(), dh.cview(),
                         ids.view(), weights.view(), shape.experts, shape.d, shape.top_k, shape.normalize ? 1 : 0,
                         shape.batch);
      const auto got_ids = lgtest::to_host(s, ids.cview());
      const auto got_weights = lgtest::to_host(s, weights.cview());
      for (int b = 0; b < shape.batch; ++b) {
        CAPTURE(b);
        ++rows;
        std::vector<double> logits;
        for (int e = 0; e < shape.experts; ++e) {  // rounded to T, as the router's Linear returns it
          const double l = dot(router, static_cast<std::size_t>(e), h, static_cast<std::size_t>(b) * shape.d, shape.d);
          logits.push_back(T::from_float(static_cast<float>(l)).to_float());
        }
        const std::vector<ExpertChoice> want = route_token(logits, shape.top_k, shape.normalize);
        // The choice is compared where the last chosen logit and the best unchosen one are more than two rounding
        // units of T apart: the kernel's fp32 sum rounds to the T value float64's does, or (rarely, at a rounding
        // boundary) to its neighbour, so only closer logits may swap places.
        std::vector<double> sorted = logits;
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        const double kth = sorted[static_cast<std::size_t>(shape.top_k) - 1];
        const bool clear = shape.top_k == shape.experts ||
                           kth - sorted[static_cast<std::size_t>(shape.top_k)] > 2 * unit<T> * std::abs(kth);
        if (!clear) continue;
        ++checked;
        std::vector<int> want_set;
        std::vector<int> got_set;
        for (int j = 0; j < shape.top_k; ++j) {
          want_set.push_back(want[static_cast<std::size_t>(j)].expert);
          got_set.push_back(got_ids[static_cast<std::size_t>(b * shape.top_k + j)]);
        }
        // In descending order: the same sequence, but chosen ones of (nearly) equal logits may swap.
        std::vector<int> want_sorted = want_set;
        std::vector<int> got_sorted = got_set;
        std::sort(want_sorted.begin(), want_sorted.end());
        std::sort(got_sorted.begin(), got_sorted.end());
        CHECK(want_sorted == got_sorted);
        for (int j = 0; j < shape.top_k; ++j) {
          const int e = got_set[static_cast<std::size_t>(j)];
          const auto it = std::find_if(want.begin(), want.end(), [&](const ExpertChoice& c) { return c.expert == e; });
          if (it == want.end()) continue;
          CHECK(got_weights[static_cast<std::size_t>(b * shape.top_k + j)] ==
                doctest::Approx(it->weight).epsilon(2 * route_tolerance<T>));
          if (j > 0) {  // descending probabilities
            CHECK(got_weights[static_cast<std::size_t>(b * shape.top_k + j)] <=
                  got_weights[static_cast<std::size_t>(b * shape.top_k + j - 1)]);
          }
        }
      }
    }
    // Most rows have a clear margin (about 2 in 3 in bf16, more in fp16): the test compares, it does not skip.
    CHECK(checked * 3 >= rows);
  }

  TEST_CASE_TEMPLATE("moe_route breaks exact ties by the lower expert index and renormalizes the chosen ones", T, half,
                     bfloat16) {
    Stream& s = lgtest::stream();
    const BasicKernels<T> k(lgtest::nn_kernels());
    const int experts = 6;
    const int d = 256;
    // h all 1/16 and each router row a constant c_e: logit_e = 16 c_e exactly. Experts 1 and 3 tie at the top.
    const std::vector<float> c{0.125F, 0.25F, -0.125F, 0.25F, 0.1875F, 0.0625F};
    std::vector<T> router;
    for (int e = 0; e < experts; ++e) router.insert(router.end(), d, T::from_float(c[static_cast<std::size_t>(e)]));
    const auto drouter = lgtest::to_device(s, router);
    const auto dh = lgtest::to_device(s, std::vector<T>(d, T::from_float(0.0625F)));
    auto ids = lgtest::to_device(s, std::vector<int>(3, -1));
    auto weights = lgtest::to_device(s, std::vector<float>(3, 0.0F));
    k.moe_route.launch(s, launch(1, 1, 64, 1), drouter.cview(), dh.cview(), ids.view(), weights.view(), experts, d, 3,
                       1, 1);
    CHECK(lgtest::to_host(s, ids.cview()) == std::vector<int>{1, 3, 4});
    const auto got = lgtest::to_host(s, weights.cview());
    std::vector<double> logits;
    for (const float v : c) logits.push_back(16.0 * v);
    const std::vector<ExpertChoice> want = route_token(logits, 3, true);
    for (std::size_t j = 0; j < 3; ++j) CHECK(got[j] == doctest::Approx(want[j].weight).epsilon(2 * route_tolerance<T>));
    CHECK(got[0] == got[1]);
  }

  TEST_CASE_TEMPLATE("moe_gate_up and moe_down add each row's weighted expert SwiGLUs to the residual as float64 does",
                     T, half, bfloat16) {
    struct Shape {
      int experts, width, d, top_k;
      unsigned warps, gx, dx;
      std::vector<int> ids;  // [batch][top_k]; rows share experts
    };
    for (const Shape& shape : {Shape{8, 256, 256, 2, 8, 0, 0, {3, 5}},
                               Shape{8, 200, 512, 2, 8, 0, 0, {3, 5, 5, 0, 1, 3, 7, 6, 3, 2, 4, 5, 0, 7, 5, 3}},
                               Shape{16, 96, 1032, 4, 4, 3, 5, {15, 0, 8, 2, 2, 8, 0, 15, 1, 9, 4, 3}},
                               Shape{4, 64, 128, 4, 1, 1, 2, {0, 1, 2, 3, 3, 2, 1, 0}}}) {
      const int top_k = shape.top_k;
      const int batch = static_cast<int>(shape.ids.size()) / top_k;
      CAPTURE(batch);
      CAPTURE(shape.width);
      CAPTURE(shape.d);
      const Experts<T> m(shape.experts, shape.width, shape.d, batch, 100U + static_cast<unsigned>(shape.width));
      std::mt19937 gen(5);
      std::uniform_real_distribution<float> share(0.05F, 1.0F);
      std::vector<float> weights;
      for (std::size_t j = 0; j < shape.ids.size(); ++j) weights.push_back(share(gen));
      const std::vector<T> x = uniform<T>(static_cast<std::size_t>(batch) * shape.d, 1.0F, 9U);
      const auto [act, out] = run_experts(m, shape.ids, weights, top_k, x, shape.warps, shape.gx, shape.dx);

      std::vector<double> act_ref;
      for (int j = 0; j < batch * top_k; ++j) {
        const std::vector<double> a = m.act(j / top_k, shape.ids[static_cast<std::size_t>(j)]);
        act_ref.insert(act_ref.end(), a.begin(), a.end());
      }
      check_close(act, act_ref);
      // moe_down from the act it was given: x + sum of weight * W2_e act.
      std::vector<double> out_ref;
      for (int b = 0; b < batch; ++b) {
        for (int r = 0; r < shape.d; ++r) {
          double sum = x[static_cast<std::size_t>(b) * shape.d + r].to_float();
          for (int s = 0; s < top_k; ++s) {
            const auto j = static_cast<std::size_t>(b * top_k + s);
            const std::size_t row = static_cast<std::size_t>(shape.ids[j]) * shape.d + r;
            sum += weights[j] * dot(m.w2, row, act, j * shape.width, shape.width);
          }
          out_ref.push_back(sum);
        }
      }
      check_close(out, out_ref);

      // Each row alone gets the bits it got in the batch, whichever rows shared its experts' reads.
      for (int b = 0; b < batch; ++b) {
        CAPTURE(b);
        Experts<T> alone(shape.experts, shape.width, shape.d, 1, 100U + static_cast<unsigned>(shape.width));
        alone.h.assign(m.h.begin() + static_cast<std::ptrdiff_t>(b) * shape.d,
                       m.h.begin() + static_cast<std::ptrdiff_t>(b + 1) * shape.d);
        alone.dh = lgtest::to_device(lgtest::stream(), alone.h);
        const auto first = static_cast<std::ptrdiff_t>(b * top_k);
        const std::vector<int> row_ids(shape.ids.begin() + first, shape.ids.begin() + first + top_k);
        const std::vector<float> row_weights(weights.begin() + first, weights.begin() + first + top_k);
        const std::vector<T> row_x(x.begin() + static_cast<std::ptrdiff_t>(b) * shape.d,
                                   x.begin() + static_cast<std::ptrdiff_t>(b + 1) * shape.d);
        const auto [act1, out1] = run_experts(alone, row_ids, row_weights, top_k, row_x, shape.warps, 0, 0);
        CHECK(std::equal(out1.begin(), out1.end(), out.begin() + static_cast<std::ptrdiff_t>(b) * shape.d,
                         [](T a, T c) { return a.bits == c.bits; }));
        CHECK(std::equal(act1.begin(), act1.end(), act.begin() + first * shape.width,
                         [](T a, T c) { return a.bits == c.bits; }));
      }
    }
  }
}
