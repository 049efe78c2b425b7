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
#include "common/nn.hpp"
#include "common/sampling_boundary.hpp"
#include "common/small_decoder.hpp"

using namespace lazygraph;
using namespace lazygraph::nn;

TEST_CASE("Sampling::validate names a bad temperature, top_k or top_p") {
  CHECK_NOTHROW(Sampling{}.validate());
  CHECK(Sampling{}.top_p == 1.0F);  // off by default
  CHECK_NOTHROW((Sampling{0.7F, 40, 3}.validate()));
  CHECK_NOTHROW((Sampling{0.7F, 40, 3, 0.9F}.validate()));
  CHECK_NOTHROW((Sampling{0.7F, 0, 3, 1.0F}.validate()));
  CHECK_NOTHROW((Sampling{0.0F, 0, 3, 0.5F}.validate()));  // greedy ignores it, but it must still be valid
  CHECK_THROWS_WITH_AS((Sampling{-0.5F, 0, 0}.validate()), doctest::Contains("temperature -0.5"), UsageError);
  CHECK_THROWS_AS((Sampling{std::numeric_limits<float>::infinity(), 0, 0}.validate()), UsageError);
  CHECK_THROWS_WITH_AS((Sampling{1.0F, -2, 0}.validate()), doctest::Contains("top_k -2"), UsageError);
  CHECK_THROWS_WITH_AS((Sampling{1.0F, 0, 0, 0.0F}.validate()), doctest::Contains("top_p 0"), UsageError);
  CHECK_THROWS_WITH_AS((Sampling{1.0F, 0, 0, -0.1F}.validate()), doctest::Contains("top_p -0.1"), UsageError);
  CHECK_THROWS_WITH_AS((Sampling{1.0F, 0, 0, 1.5F}.validate()), doctest::Contains("top_p 1.5"), UsageError);
  CHECK_THROWS_WITH_AS((Sampling{1.0F, 0, 0, std::numeric_limits<float>::quiet_NaN()}.validate()),
                       doctest::Contains("top_p"), UsageError);
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

TEST_CASE("the float64 top-p rule: the fewest most probable candidates reaching top_p, ties kept, renormalised") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Weights 1, 1/e, 1/e, 1/e^2 (total 1.8711): probabilities 0.5344, 0.1966, 0.1966, 0.0723.
  const std::vector<double> l{2.0, 1.0, 1.0, 0.0, nan};
  const double e = std::exp(-1.0);
  std::vector<double> p = sampling_probabilities(l, 0, 1.0, 0.5);  // 0.5344 >= 0.5: the top token alone
  CHECK(p == std::vector<double>{1.0, 0.0, 0.0, 0.0, 0.0});
  p = sampling_probabilities(l, 0, 1.0, 0.6);  // 0.5344 < 0.6: both 1.0s join (ties kept), 0.9277 >= 0.6
  CHECK(p[0] == doctest::Approx(1.0 / (1.0 + 2.0 * e)));
  CHECK(p[1] == doctest::Approx(e / (1.0 + 2.0 * e)));
  CHECK(p[2] == p[1]);
  CHECK(p[3] == 0.0);
  CHECK(p[4] == 0.0);
  CHECK(sampling_probabilities(l, 0, 1.0, 0.92)[3] == 0.0);  // 0.9277 still reaches 0.92
  // 0.9277 < 0.95: all four
  CHECK(sampling_probabilities(l, 0, 1.0, 0.95) == sampling_probabilities(l, 0, 1.0));
  CHECK(sampling_probabilities(l, 0, 1.0, 1.0) == sampling_probabilities(l, 0, 1.0));
  CHECK(sample_reference(l, 0, 1.0, 0.99, 0.5) == 0);  // whatever u
  CHECK(sample_reference(l, 0, 1.0, 0.0, 0.5) == 0);
  CHECK(sample_reference(l, 0, 1.0, 0.99, 0.6) == 2);  // the last of the nucleus
  CHECK(sample_reference(l, 0, 1.0, 0.99, 0.95) == 3);
  CHECK(sample_reference(l, 0, 1.0, 0.7, 0.6) == 1);  // 0.576 <= 0.7 < 0.788: token 1 of the renormalised three
  // After top-k: top-2 keeps 2.0 and both 1.0s, where 2.0 alone holds 0.576 >= 0.55; over all four it holds 0.534.
  CHECK(sampling_probabilities(l, 2, 1.0, 0.55) == std::vector<double>{1.0, 0.0, 0.0, 0.0, 0.0});
  CHECK(sampling_probabilities(l, 0, 1.0, 0.55)[1] > 0.0);
  // After the temperature: at 0.5 the weights are 1, e^-2, e^-2, e^-4 and 2.0 alone holds 0.776 >= 0.75.
  CHECK(sampling_probabilities(l, 0, 0.5, 0.75) == std::vector<double>{1.0, 0.0, 0.0, 0.0, 0.0});
  CHECK(sampling_probabilities(l, 0, 1.0, 0.75)[2] > 0.0);
  // The smallest nucleus is the largest value, with its ties.
  const std::vector<double> tie{3.0, 1.0, 3.0};
  CHECK(sampling_probabilities(tie, 0, 1.0, 1e-6) == std::vector<double>{0.5, 0.0, 0.5});
  CHECK(sample_reference(tie, 0, 1.0, 0.75, 1e-6) == 2);
  // +inf logits hold all the probability: they are the nucleus, sharing it.
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> with_inf{1.0, inf, 2.0, inf};
  CHECK(sampling_probabilities(with_inf, 0, 1.0, 0.3) == std::vector<double>{0.0, 0.5, 0.0, 0.5});
  CHECK(sample_reference(with_inf, 0, 1.0, 0.75, 0.3) == 3);
  CHECK(sample_reference(std::vector<double>{nan, nan}, 0, 1.0, 0.5, 0.5) == -1);
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

using lgtest::widened;

/// lgtest::neighbour_at_boundary for the rule with `top_p`.
bool neighbour_at_boundary_p(const std::vector<double>& logits, int top_k, double t, double top_p, double u, int got,
                             int want) {
  const std::vector<double> p = sampling_probabilities(logits, top_k, t, top_p);
  const int lower = std::min(got, want);
  const int upper = std::max(got, want);
  if (lower < 0 || static_cast<std::size_t>(upper) >= p.size() || lower == upper) return false;
  if (p[static_cast<std::size_t>(lower)] <= 0.0 || p[static_cast<std::size_t>(upper)] <= 0.0) return false;
  double boundary = 0.0;
  for (int i = 0; i <= lower; ++i) boundary += p[static_cast<std::size_t>(i)];
  for (int i = lower + 1; i <= upper; ++i) {
    if (std::abs(boundary - u) >= 1e-4) return false;
    boundary += p[static_cast<std::size_t>(i)];
  }
  return true;
}

/// Whether the kernel may draw `got` where the float64 rule draws another token: across a boundary of the prefix
/// sums within fp32 drift of u (neighbour_at_boundary), or, with top_p < 1, because the nucleus's last value holds
/// a cumulative probability within 1e-6 of top_p, where the kernel's fp32 weights may put it on the other side.
bool near_miss(const std::vector<double>& logits, int top_k, double t, double top_p, double u, int got) {
  const auto near = [&](double p) {
    const int want = sample_reference(logits, top_k, t, u, p);
    return got == want || neighbour_at_boundary_p(logits, top_k, t, p, u, got, want);
  };
  return near(top_p) || (top_p < 1.0 && (near(top_p - 1e-6) || near(top_p + 1e-6)));
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("the sample kernel draws what the float64 rule draws, for batches, top-k, top-p and temperatures") {
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
            for (const float top_p : {1.0F, 0.9F, 0.3F}) {
              for (const unsigned seed : {1U, 99U}) {
                auto out = lgtest::to_device(s, std::vector<int>(static_cast<std::size_t>(rows), -7));
                k.sample.launch(s, {{static_cast<unsigned>(rows), 1, 1}, {1024, 1, 1}, 0}, dl.cview(), out.view(),
                                dp.cview(), ds.cview(), n, top_k, t, seed, top_p);
                const std::vector<int> got = lgtest::to_host(s, out.cview());
                k.sample.launch(s, {{static_cast<unsigned>(rows), 1, 1}, {1024, 1, 1}, 0}, dl.cview(), out.view(),
                                dp.cview(), ds.cview(), n, top_k, t, seed, top_p);
                CHECK(lgtest::to_host(s, out.cview()) == got);  // repeatable
                for (int r = 0; r < rows; ++r) {
                  CAPTURE(n);
                  CAPTURE(r);
                  CAPTURE(top_k);
                  CAPTURE(t);
                  CAPTURE(top_p);
                  const std::vector<half> row(logits.begin() + static_cast<std::ptrdiff_t>(r) * n,
                                              logits.begin() + static_cast<std::ptrdiff_t>(r + 1) * n);
                  const std::vector<double> l = widened(row);
                  const double u = sampling_uniform(seed, positions[static_cast<std::size_t>(r)], r);
                  const int want = sample_reference(l, top_k, t, u, top_p);
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
                    if (top_p == 1.0F) {
                      CHECK(lgtest::neighbour_at_boundary(l, top_k, t, u, g, want));
                    } else {
                      CHECK(near_miss(l, top_k, t, top_p, u, g));
                    }
                  }
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
      k.sample.launch(s, {{1, 1, 1}, {1024, 1, 1}, 0}, dl.cview(), out.view(), dp.cview(), ds.cview(), n, 0, 1.0F, 3U,
                      1.0F);
      const int got = lgtest::to_host(s, out.cview())[0];
      REQUIRE((got == 300 || got == 1700));
      CHECK(got == sample_reference(widened(logits), 0, 1.0, sampling_uniform(3, p, 0)));
      seen300 += got == 300 ? 1 : 0;
      // A nucleus of any size holds both (all the probability is theirs), and draws the same.
      k.sample.launch(s, {{1, 1, 1}, {1024, 1, 1}, 0}, dl.cview(), out.view(), dp.cview(), ds.cview(), n, 0, 1.0F, 3U,
                      0.2F);
      CHECK(lgtest::to_host(s, out.cview())[0] == got);
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
    k.sample.launch(s, {{3, 1, 1}, {1024, 1, 1}, 0}, dl.cview(), b.view(), dp.cview(), dp.cview(), n, 40, 0.0F, 5U,
                    1.0F);
    CHECK(lgtest::to_host(s, a.cview()) == lgtest::to_host(s, b.cview()));
    k.sample.launch(s, {{3, 1, 1}, {1024, 1, 1}, 0}, dl.cview(), b.view(), dp.cview(), dp.cview(), n, 40, 0.0F, 5U,
                    0.5F);
    CHECK(lgtest::to_host(s, a.cview()) == lgtest::to_host(s, b.cview()));  // top_p changes nothing when greedy
  }

  TEST_CASE("a nucleus that holds only the largest logit is greedy, for fp16 and bf16") {
    Stream& s = lgtest::stream();
    const Kernels k(lgtest::nn_kernels());
    const BasicKernels<bfloat16> kb(lgtest::nn_kernels());
    const int n = 32000;
    const int rows = 4;
    std::vector<half> logits;
    std::vector<bfloat16> logits_bf16;
    for (const float f : lgtest::random_floats(static_cast<std::size_t>(n) * rows)) {
      logits.push_back(half::from_float(4.0F * f));
      logits_bf16.push_back(bfloat16::from_float(4.0F * f));
    }
    const std::vector<int> winners{77, 154, 231, 308};
    for (int r = 0; r < rows; ++r) {  // a clear winner per row: 12 against at most 4
      logits[static_cast<std::size_t>(r * n + winners[static_cast<std::size_t>(r)])] = half::from_float(12.0F);
      logits_bf16[static_cast<std::size_t>(r * n + winners[static_cast<std::size_t>(r)])] = bfloat16::from_float(12.0F);
    }
    // Each other logit weighs e^-8 of the winner at most, but there are 31999 of them: at t 1 they weigh
    // 31999 * sinh(4) / 4 * e^-12 = 1.34 (in expectation; within 1 % for random rows) against the winner's 1, so the
    // winner holds 0.43 of the probability. A nucleus of 0.3 is the winner alone (one of 0.95 would be ~9700
    // tokens), and without the nucleus the winner is drawn under half the time: 12 draws of winners (of each type,
    // 3 seeds x 4 rows) are its doing, by chance about 0.43^12 = 4e-5.
    const float top_p = 0.3F;
    const auto row_of = [&](const auto& all, int r) {
      return widened(std::vector(all.begin() + static_cast<std::ptrdiff_t>(r) * n,
                                 all.begin() + static_cast<std::ptrdiff_t>(r + 1) * n));
    };
    for (int r = 0; r < rows; ++r) {  // the premise, by the float64 rule
      for (const std::vector<double>& l : {row_of(logits, r), row_of(logits_bf16, r)}) {
        const auto w = static_cast<std::size_t>(winners[static_cast<std::size_t>(r)]);
        REQUIRE(std::max_element(l.begin(), l.end()) - l.begin() == winners[static_cast<std::size_t>(r)]);
        const double share = sampling_probabilities(l, 0, 1.0)[w];
        CAPTURE(r);
        CAPTURE(share);
        REQUIRE(share > 0.35);
        REQUIRE(share < 0.5);
        REQUIRE(sampling_probabilities(l, 0, 1.0, top_p)[w] == 1.0);
      }
    }
    const auto dl = lgtest::to_device(s, logits);
    const auto dlb = lgtest::to_device(s, logits_bf16);
    const std::vector<int> positions{3, 4, 5, 6};
    const auto dp = lgtest::to_device(s, positions);
    const auto ds = lgtest::to_device(s, std::vector<int>{0, 1, 2, 3});
    const LaunchConfig per_row{{rows, 1, 1}, {1024, 1, 1}, 0};
    for (const unsigned seed : {1U, 2U, 3U}) {
      CAPTURE(seed);
      auto out = lgtest::to_device(s, std::vector<int>(rows, -7));
      k.sample.launch(s, per_row, dl.cview(), out.view(), dp.cview(), ds.cview(), n, 0, 1.0F, seed, top_p);
      const std::vector<int> got = lgtest::to_host(s, out.cview());
      kb.sample.launch(s, per_row, dlb.cview(), out.view(), dp.cview(), ds.cview(), n, 0, 1.0F, seed, top_p);
      const std::vector<int> got_bf16 = lgtest::to_host(s, out.cview());
      for (int r = 0; r < rows; ++r) {
        CAPTURE(r);
        const double u = sampling_uniform(seed, positions[static_cast<std::size_t>(r)], r);
        CAPTURE(u);
        const auto i = static_cast<std::size_t>(r);
        {
          INFO("fp16; the float64 rule draws ", sample_reference(row_of(logits, r), 0, 1.0, u, top_p),
               ", and without the nucleus ", sample_reference(row_of(logits, r), 0, 1.0, u));
          CHECK(got[i] == winners[i]);  // the drawn token == the largest logit's
        }
        {
          INFO("bf16; the float64 rule draws ", sample_reference(row_of(logits_bf16, r), 0, 1.0, u, top_p),
               ", and without the nucleus ", sample_reference(row_of(logits_bf16, r), 0, 1.0, u));
          CHECK(got_bf16[i] == winners[i]);
        }
      }
    }
    // bf16 against the float64 rule, with a nucleus of many tokens (t 4 flattens the distribution).
    int draws = 0;
    int near = 0;
    for (unsigned seed = 1; seed <= 10; ++seed) {
      auto out = lgtest::to_device(s, std::vector<int>(rows, -7));
      kb.sample.launch(s, per_row, dlb.cview(), out.view(), dp.cview(), ds.cview(), n, 0, 4.0F, seed, 0.8F);
      const std::vector<int> got = lgtest::to_host(s, out.cview());
      for (int r = 0; r < rows; ++r) {
        std::vector<double> l;
        for (int i = 0; i < n; ++i) l.push_back(logits_bf16[static_cast<std::size_t>(r * n + i)].to_float());
        const double u = sampling_uniform(seed, 3 + r, r);
        const int g = got[static_cast<std::size_t>(r)];
        ++draws;
        const int want = sample_reference(l, 0, 4.0, u, 0.8);
        if (g != want) {
          ++near;
          CAPTURE(seed);
          CAPTURE(r);
          CAPTURE(g);  // what the kernel drew, the float64 rule's token and the draw
          CAPTURE(want);
          CAPTURE(u);
          CHECK(near_miss(l, 0, 4.0, 0.8, u, g));
        }
      }
    }
    CHECK(near * 10 <= draws);
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
    const int top_k = 10;  // ties at the 10th value are kept
    const float t = 0.8F;
    // The 16 logits are -0.5 and -0.25 three times each, then 0, 0.25, 0.5, 0.75 and 1.0 twice each (indices i and
    // i + 7): the top 10 are the ten >= 0. top_p 0.7 keeps the values 1.0, 0.75 and 0.5 of those (cumulative 0.34,
    // 0.59, 0.77 at t 0.8): the six logits at indices 4, 5, 6, 11, 12 and 13.
    for (const float top_p : {1.0F, 0.7F}) {
      CAPTURE(top_p);
      auto out = lgtest::to_device(s, std::vector<int>(draws, -1));
      k.sample.launch(s, {{static_cast<unsigned>(draws), 1, 1}, {32, 1, 1}, 0}, dl.cview(), out.view(), dp.cview(),
                      ds.cview(), n, top_k, t, 2024U, top_p);
      const std::vector<int> got = lgtest::to_host(s, out.cview());
      const std::vector<double> p = sampling_probabilities(widened(logits), top_k, t, top_p);
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
        const double c = count[static_cast<std::size_t>(i)];
        chi2 += (c - expected) * (c - expected) / expected;
        ++cells;
      }
      // At most 15 degrees of freedom: P(chi2 > 50) < 1e-5, so this fails by chance essentially never.
      MESSAGE("top_p " << top_p << ": chi-square " << chi2 << " over " << cells << " cells");
      CHECK(chi2 < 50.0);
      CHECK(cells == (top_p < 1.0F ? 6 : 10));
      for (int i = 0; i < n; ++i) {  // which ones: the float64 rule's candidates, and the draws of each
        const auto at = static_cast<std::size_t>(i);
        const double v = logits[at].to_float();
        CAPTURE(i);
        CAPTURE(v);
        CAPTURE(count[at]);
        CHECK((p[at] > 0.0) == (top_p < 1.0F ? v >= 0.5 : v >= 0.0));
      }
    }
  }

  TEST_CASE("a greedy decoder of a large vocabulary gives each row the argmax of its logits (argmax_cluster's path)") {
    // 20000 logits a row: at least kArgmaxClusterFrom, so on sm_90 and newer the step, the batch step and a prompt's
    // first token take their tokens from argmax_cluster (nn::next_tokens); elsewhere from sample, by the same rule.
    DecoderConfig c = lgtest::small_decoder(2, 3);
    c.vocab = 20000;
    const Kernels k(lgtest::nn_kernels());
    if (!k.greedy_by_cluster(c.vocab)) MESSAGE("this GPU has no clusters: the tokens come from sample");
    Decoder d(lgtest::stream(), lgtest::nn_kernels(), c);
    // The lowest index of the largest logit (no logit here is NaN).
    const auto argmax_of = [](const std::vector<half>& logits) {
      int best = 0;
      for (int i = 1; i < static_cast<int>(logits.size()); ++i) {
        if (logits[static_cast<std::size_t>(i)].to_float() > logits[static_cast<std::size_t>(best)].to_float()) {
          best = i;
        }
      }
      return best;
    };
    int t = 7;
    for (int p = 0; p < 4; ++p) {
      CAPTURE(p);
      const int next = d.forward({t, p});
      CHECK(next == argmax_of(d.logits()));
      t = next;
    }
    const std::vector<int> batch = d.forward_batch(std::vector<TokenAt>{{3, 4}, {11, 4}, {19999, 4}});
    REQUIRE(batch.size() == 3);
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      CHECK(batch[static_cast<std::size_t>(r)] == argmax_of(d.logits(r)));
    }
    const std::vector<int> prompt{1, 2, 3, 4, 5};
    const int first = d.prefill(prompt, 0, 1);
    CHECK(first == argmax_of(d.logits()));
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

  TEST_CASE("a decoder sampling with top_p repeats, draws alike alone and in a batch, and through generate") {
    const DecoderConfig c = lgtest::small_decoder(2, 2);
    Decoder d(lgtest::stream(), lgtest::nn_kernels(), c);
    CHECK_THROWS_WITH_AS(d.set_sampling({1.0F, 0, 0, 0.0F}), doctest::Contains("top_p 0"), UsageError);
    d.set_sampling({1.5F, 0, 11, 0.9F});
    CHECK(d.sampling().top_p == 0.9F);
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
    std::vector<int> current{5, 5};
    std::vector<int> batch_first;
    for (int p = 0; p < 12; ++p) {
      current = d.forward_batch(std::vector<TokenAt>{{current[0], p}, {current[1], p}});
      batch_first.push_back(current[0]);
    }
    CHECK(batch_first == first);
    d.reset();
    CHECK(d.generate(5, 12) == first);
  }
}
