// Sampling: the float64 rule (host) and the sample kernel and the decoder against it (gpu).
#include <doctest/doctest.h>

#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/kernels.hpp>
#include <lazygraph/nn/sampling.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "common/gpu.hpp"
#include "common/sampling_boundary.hpp"
#include "common/small_decoder.hpp"

using namespace lazygraph;
using namespace lazygraph::nn;

TEST_CASE("Sampling::validate names a bad temperature or top_k") {
  CHECK_NOTHROW(Sampling{}.validate());
  CHECK_NOTHROW((Sampling{0.7F, 40, 3}.validate()));
  CHECK_THROWS_WITH_AS((Sampling{-0.5F, 0, 0}.validate()), doctest::Contains("temperature -0.5"), UsageError);
  CHECK_THROWS_AS((Sampling{std::numeric_limits<float>::infinity(), 0, 0}.validate()), UsageError);
  CHECK_THROWS_WITH_AS((Sampling{1.0F, -2, 0}.validate()), doctest::Contains("top_k -2"), UsageError);
}

TEST_CASE("the float64 sampling rule: top-k with ties kept, NaN never, index order, u at the ends") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> l{1.0, 3.0, nan, 2.0, 3.0, -1.0};
  CHECK(sample_reference(l, 1, 1.0, 0.0) == 1);     // top-1: the two 3.0s tie, both kept; u = 0 takes the first
  CHECK(sample_reference(l, 1, 1.0, 0.999) == 4);   // and u near 1 the last
  CHECK(sample_reference(l, 0, 1.0, 0.0) == 0);     // every logit: index order, the first candidate
  CHECK(sample_reference(l, 0, 1.0, 0.9999) == 5);  // the last candidate
  const std::vector<double> p = sampling_probabilities(l, 3, 0.5);  // 3.0, 3.0, 2.0
  CHECK(p[0] == 0.0);
  CHECK(p[2] == 0.0);
  CHECK(p[5] == 0.0);
  const double e = std::exp(-2.0);  // (2 - 3) / 0.5
  CHECK(p[1] == doctest::Approx(1.0 / (2.0 + e)));
  CHECK(p[3] == doctest::Approx(e / (2.0 + e)));
  CHECK(std::accumulate(p.begin(), p.end(), 0.0) == doctest::Approx(1.0));
  CHECK(sample_reference(std::vector<double>{nan, nan}, 0, 1.0, 0.5) == -1);
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> with_inf{1.0, inf, 2.0, inf};
  CHECK(sample_reference(with_inf, 0, 1.0, 0.25) == 1);  // the two +inf logits share the probability
  CHECK(sample_reference(with_inf, 0, 1.0, 0.75) == 3);
  CHECK(sampling_probabilities(with_inf, 0, 1.0)[3] == 0.5);
  // A hotter temperature flattens the distribution.
  const std::vector<double> two{0.0, 1.0};
  CHECK(sampling_probabilities(two, 0, 2.0)[1] < sampling_probabilities(two, 0, 0.5)[1]);
}

TEST_CASE("the GPU sampling checks accept a draw across boundaries within fp32 drift of u, and nothing else") {
  // Tokens 0 and 2 hold half the probability each; token 1 almost none (e^-30), token 3 none (top-3 drops it).
  const std::vector<double> l{0.0, -30.0, 0.0, -40.0};
  const double u = 0.5 + 1e-6;  // the float64 rule passes token 1 by a hair: token 2
  REQUIRE(sample_reference(l, 3, 1.0, u) == 2);
  CHECK(lgtest::neighbour_at_boundary(l, 3, 1.0, u, 0, 2));          // fp32 sums a little high: token 0, across token 1
  CHECK(lgtest::neighbour_at_boundary(l, 3, 1.0, u, 1, 2));          // or token 1 itself
  CHECK_FALSE(lgtest::neighbour_at_boundary(l, 3, 1.0, 0.3, 0, 2));  // a draw far from every boundary
  CHECK_FALSE(lgtest::neighbour_at_boundary(l, 3, 1.0, u, 3, 2));    // a token of no probability
  CHECK_FALSE(lgtest::neighbour_at_boundary(l, 3, 1.0, u, 2, 2));    // not a different token
}

TEST_CASE("sampling_uniform is in [0, 1), repeatable, and differs across seeds, positions and sequences") {
  CHECK(sampling_uniform(1, 5, 0) == sampling_uniform(1, 5, 0));
  CHECK(sampling_uniform(1, 5, 0) != sampling_uniform(2, 5, 0));
  CHECK(sampling_uniform(1, 5, 0) != sampling_uniform(1, 6, 0));
  CHECK(sampling_uniform(1, 5, 0) != sampling_uniform(1, 5, 1));
  double lo = 1.0;
  double hi = 0.0;
  for (int p = 0; p < 10000; ++p) {
    const double u = sampling_uniform(7, p, 0);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  CHECK(lo >= 0.0);
  CHECK(lo < 0.01);
  CHECK(hi < 1.0);
  CHECK(hi > 0.99);
}

namespace {

std::vector<double> widened(const std::vector<half>& h) {
  std::vector<double> out;
  for (const half v : h) out.push_back(v.to_float());
  return out;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("the sample kernel draws what the float64 rule draws, for batches, top-k and temperatures") {
    Stream& s = lgtest::stream();
    const Kernels k(lgtest::nn_kernels());
    int draws = 0;
    int near = 0;
    for (const int n : {1000, 32000}) {
      for (const int rows : {1, 8}) {
        std::vector<half> logits;
        for (const float f : lgtest::random_floats(static_cast<std::size_t>(n) * rows)) {
          logits.push_back(half::from_float(4.0F * f));
        }
        const auto dl = lgtest::to_device(s, logits);
        std::vector<int> positions(static_cast<std::size_t>(rows));
        std::vector<int> slots(static_cast<std::size_t>(rows));
        for (int r = 0; r < rows; ++r) {
          positions[static_cast<std::size_t>(r)] = 100 + 7 * r;
          slots[static_cast<std::size_t>(r)] = r;
        }
        const auto dp = lgtest::to_device(s, positions);
        const auto ds = lgtest::to_device(s, slots);
        for (const int top_k : {1, 40, 0}) {
          for (const float t : {0.7F, 1.0F, 1.5F}) {
            for (const unsigned seed : {1U, 99U}) {
              auto out = lgtest::to_device(s, std::vector<int>(static_cast<std::size_t>(rows), -7));
              k.sample.launch(s, {{static_cast<unsigned>(rows), 1, 1}, {1024, 1, 1}, 0}, dl.cview(), out.view(),
                              dp.cview(), ds.cview(), n, top_k, t, seed);
              const std::vector<int> got = lgtest::to_host(s, out.cview());
              k.sample.launch(s, {{static_cast<unsigned>(rows), 1, 1}, {1024, 1, 1}, 0}, dl.cview(), out.view(),
                              dp.cview(), ds.cview(), n, top_k, t, seed);
              CHECK(lgtest::to_host(s, out.cview()) == got);  // repeatable
              for (int r = 0; r < rows; ++r) {
                CAPTURE(n);
                CAPTURE(r);
                CAPTURE(top_k);
                CAPTURE(t);
                const std::vector<half> row(logits.begin() + static_cast<std::ptrdiff_t>(r) * n,
                                            logits.begin() + static_cast<std::ptrdiff_t>(r + 1) * n);
                const std::vector<double> l = widened(row);
                const double u = sampling_uniform(seed, positions[static_cast<std::size_t>(r)], r);
                const int want = sample_reference(l, top_k, t, u);
                ++draws;
                const int g = got[static_cast<std::size_t>(r)];
                REQUIRE(g >= 0);
                REQUIRE(g < n);
                if (top_k > 0) {  // among the top_k values (ties kept)
                  std::vector<double> sorted = l;
                  std::sort(sorted.begin(), sorted.end(), std::greater<>());
                  CHECK(l[static_cast<std::size_t>(g)] >= sorted[static_cast<std::size_t>(top_k - 1)]);
                }
                if (g != want) {
                  ++near;
                  CAPTURE(g);  // what the kernel drew, the float64 rule's token and the draw
                  CAPTURE(want);
                  CAPTURE(u);
                  CHECK(lgtest::neighbour_at_boundary(l, top_k, t, u, g, want));
                }
              }
            }
          }
        }
      }
    }
    MESSAGE(draws << " draws, " << near << " at an fp32/fp64 boundary");
    CHECK(near * 100 <= draws);
  }

  TEST_CASE("the sample kernel draws among +inf logits only when there are some") {
    Stream& s = lgtest::stream();
    const Kernels k(lgtest::nn_kernels());
    const int n = 2000;
    std::vector<half> logits;
    for (const float f : lgtest::random_floats(n)) logits.push_back(half::from_float(f));
    logits[300] = half{0x7c00};  // +inf
    logits[1700] = half{0x7c00};
    const auto dl = lgtest::to_device(s, logits);
    const auto ds = lgtest::to_device(s, std::vector<int>{0});
    int seen300 = 0;
    for (int p = 0; p < 40; ++p) {
      const auto dp = lgtest::to_device(s, std::vector<int>{p});
      auto out = lgtest::to_device(s, std::vector<int>{-7});
      k.sample.launch(s, {{1, 1, 1}, {1024, 1, 1}, 0}, dl.cview(), out.view(), dp.cview(), ds.cview(), n, 0, 1.0F, 3U);
      const int got = lgtest::to_host(s, out.cview())[0];
      REQUIRE((got == 300 || got == 1700));
      CHECK(got == sample_reference(widened(logits), 0, 1.0, sampling_uniform(3, p, 0)));
      seen300 += got == 300 ? 1 : 0;
    }
    CHECK(seen300 > 0);
    CHECK(seen300 < 40);
  }

  TEST_CASE("temperature 0 is the argmax kernel's choice") {
    Stream& s = lgtest::stream();
    const Kernels k(lgtest::nn_kernels());
    const int n = 4096;
    std::vector<half> logits;
    for (const float f : lgtest::random_floats(static_cast<std::size_t>(n) * 3)) logits.push_back(half::from_float(f));
    const auto dl = lgtest::to_device(s, logits);
    const auto dp = lgtest::to_device(s, std::vector<int>{0, 1, 2});
    auto a = lgtest::to_device(s, std::vector<int>{-7, -7, -7});
    auto b = lgtest::to_device(s, std::vector<int>{-7, -7, -7});
    k.argmax.launch(s, {{3, 1, 1}, {1024, 1, 1}, 0}, dl.cview(), a.view(), n);
    k.sample.launch(s, {{3, 1, 1}, {1024, 1, 1}, 0}, dl.cview(), b.view(), dp.cview(), dp.cview(), n, 40, 0.0F, 5U);
    CHECK(lgtest::to_host(s, a.cview()) == lgtest::to_host(s, b.cview()));
  }

  TEST_CASE("the sample kernel's frequencies follow the distribution (chi-square, 20000 draws)") {
    Stream& s = lgtest::stream();
    const Kernels k(lgtest::nn_kernels());
    const int n = 16;
    const int draws = 20000;
    std::vector<half> logits;
    for (int i = 0; i < n; ++i) logits.push_back(half::from_float(0.25F * static_cast<float>(i % 7) - 0.5F));
    std::vector<half> all;
    for (int d = 0; d < draws; ++d) all.insert(all.end(), logits.begin(), logits.end());
    std::vector<int> positions(draws);
    std::iota(positions.begin(), positions.end(), 0);
    const auto dl = lgtest::to_device(s, all);
    const auto dp = lgtest::to_device(s, positions);
    const auto ds = lgtest::to_device(s, std::vector<int>(draws, 0));
    auto out = lgtest::to_device(s, std::vector<int>(draws, -1));
    const int top_k = 10;  // ties at the 10th value are kept
    const float t = 0.8F;
    k.sample.launch(s, {{static_cast<unsigned>(draws), 1, 1}, {32, 1, 1}, 0}, dl.cview(), out.view(), dp.cview(),
                    ds.cview(), n, top_k, t, 2024U);
    const std::vector<int> got = lgtest::to_host(s, out.cview());
    const std::vector<double> p = sampling_probabilities(widened(logits), top_k, t);
    std::vector<int> count(n, 0);
    for (const int g : got) {
      REQUIRE(g >= 0);
      REQUIRE(g < n);
      ++count[static_cast<std::size_t>(g)];
    }
    double chi2 = 0.0;
    int cells = 0;
    for (int i = 0; i < n; ++i) {
      const double expected = p[static_cast<std::size_t>(i)] * draws;
      if (expected == 0.0) {
        CHECK(count[static_cast<std::size_t>(i)] == 0);  // not a candidate: never drawn
        continue;
      }
      chi2 +=
          (count[static_cast<std::size_t>(i)] - expected) * (count[static_cast<std::size_t>(i)] - expected) / expected;
      ++cells;
    }
    // At most 15 degrees of freedom: P(chi2 > 50) < 1e-5, so this fails by chance essentially never.
    MESSAGE("chi-square " << chi2 << " over " << cells << " cells");
    CHECK(chi2 < 50.0);
  }

  TEST_CASE("a sampling decoder repeats its tokens, and a sequence draws the same alone or in a batch") {
    const DecoderConfig c = lgtest::small_decoder(2, 3);
    Decoder d(lgtest::stream(), lgtest::nn_kernels(), c);
    CHECK_THROWS_AS(d.set_sampling({-1.0F, 0, 0}), UsageError);
    d.set_sampling({1.2F, 50, 77});
    const auto run_alone = [&] {
      d.reset();
      std::vector<int> tokens;
      int t = 5;
      for (int p = 0; p < 12; ++p) tokens.push_back(t = d.forward({t, p}));
      return tokens;
    };
    const std::vector<int> first = run_alone();
    CHECK(run_alone() == first);
    d.reset();
    std::vector<int> batch_first;
    std::vector<int> current{5, 9, 9};
    for (int p = 0; p < 12; ++p) {
      current = d.forward_batch(std::vector<TokenAt>{{current[0], p}, {current[1], p}, {current[2], p}});
      batch_first.push_back(current[0]);
      // Sequences 1 and 2 start alike but draw with their own slots, so they part ways.
    }
    CHECK(batch_first == first);
    d.set_sampling({});  // greedy again
    d.reset();
    Decoder greedy(lgtest::stream(), lgtest::nn_kernels(), c);
    CHECK(d.forward({5, 0}) == greedy.forward({5, 0}));
  }
}
