// Host tests of lazygraph::nn::rope_frequencies: the plain rule, linear scaling, and Llama 3.1's rule on Llama 3.2 1B's
// settings (which frequencies are kept, which divided, and the blend between), and the refusals.
#include <doctest/doctest.h>

#include <lazygraph/driver/error.hpp>
#include <lazygraph/nn/rope.hpp>

#include <cmath>
#include <numbers>
#include <vector>

using namespace lazygraph;
using namespace lazygraph::nn;

TEST_CASE("the plain rule gives theta^(-2i / head_dim), and linear scaling divides it by the factor") {
  const std::vector<double> plain = rope_frequencies(10000.0, {}, 8);
  REQUIRE(plain.size() == 4);
  CHECK(plain[0] == 1.0);
  CHECK(plain[1] == doctest::Approx(0.1).epsilon(1e-15));
  CHECK(plain[2] == doctest::Approx(0.01).epsilon(1e-15));
  CHECK(plain[3] == doctest::Approx(0.001).epsilon(1e-15));
  const std::vector<double> linear = rope_frequencies(10000.0, {.type = RopeType::linear, .factor = 4.0}, 8);
  for (std::size_t i = 0; i < plain.size(); ++i) CHECK(linear[i] == doctest::Approx(plain[i] / 4.0).epsilon(1e-15));
}

TEST_CASE("llama3 keeps short wavelengths, divides long ones by the factor and blends the band between") {
  // Llama 3.2 1B: theta 500000, head_dim 64, factor 32, low 1, high 4, trained on 8192 positions: wavelengths under
  // 8192 / 4 = 2048 positions are kept, those over 8192 / 1 divided by 32.
  const RopeScaling llama32{.type = RopeType::llama3,
                            .factor = 32.0,
                            .low_freq_factor = 1.0,
                            .high_freq_factor = 4.0,
                            .original_max_position_embeddings = 8192};
  const std::vector<double> plain = rope_frequencies(500000.0, {}, 64);
  const std::vector<double> scaled = rope_frequencies(500000.0, llama32, 64);
  REQUIRE(scaled.size() == 32);
  int kept = 0;
  int divided = 0;
  int blended = 0;
  for (std::size_t i = 0; i < scaled.size(); ++i) {
    const double wavelength = 2 * std::numbers::pi / plain[i];
    CAPTURE(i);
    CAPTURE(wavelength);
    if (wavelength < 2048) {
      CHECK(scaled[i] == plain[i]);
      ++kept;
    } else if (wavelength > 8192) {
      CHECK(scaled[i] == doctest::Approx(plain[i] / 32).epsilon(1e-15));
      ++divided;
    } else {
      // Between the two: 8192 / wavelength runs from 1 (all divided) to 4 (all kept).
      const double smooth = (8192 / wavelength - 1.0) / 3.0;
      CHECK(scaled[i] == doctest::Approx((1 - smooth) * plain[i] / 32 + smooth * plain[i]).epsilon(1e-15));
      CHECK(scaled[i] < plain[i]);
      CHECK(scaled[i] > plain[i] / 32);
      ++blended;
    }
  }
  // With these settings pairs 0-14 are kept, 15-17 blended and 18-31 divided (wavelength 2 pi theta^(2i / 64)).
  CHECK(kept == 15);
  CHECK(blended == 3);
  CHECK(divided == 14);
}

TEST_CASE("invalid RoPE settings are refused with the value") {
  CHECK_THROWS_WITH_AS((void)rope_frequencies(0.0, {}, 8), doctest::Contains("theta (0.000000) must be finite"),
                       UsageError);
  CHECK_THROWS_WITH_AS((void)rope_frequencies(10000.0, {}, 7), doctest::Contains("head_dim (7) must be even"),
                       UsageError);
  CHECK_THROWS_WITH_AS((void)rope_frequencies(10000.0, {.type = RopeType::linear, .factor = 0.0}, 8),
                       doctest::Contains("factor (0.000000) must be finite and positive"), UsageError);
  CHECK_THROWS_WITH_AS(
      (void)rope_frequencies(10000.0,
                             {.type = RopeType::llama3, .factor = 8, .low_freq_factor = 4, .high_freq_factor = 4}, 8),
      doctest::Contains("low_freq_factor"), UsageError);
}
