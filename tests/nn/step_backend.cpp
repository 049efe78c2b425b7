// The backend seam (nn/step_backend.hpp): what the graph backend answers besides its step, on the host; on a GPU,
// that a decoder asks its backend, not its config, for a persistent program.
#include <doctest/doctest.h>

#include <type_traits>

#include <lazygraph/nn.hpp>

#include "common/gpu.hpp"
#include "common/nn.hpp"

using namespace lazygraph;
using namespace lazygraph::nn;

static_assert(std::is_abstract_v<StepBackend<half>>, "a backend is one of the factories' (its capture is its own)");
static_assert(!std::is_copy_constructible_v<StepBackend<half>>);

TEST_CASE("the graph backend has no rank and drops nothing when the sampling changes, in fp16 and bf16") {
  const std::unique_ptr<StepBackend<half>> f16 = make_graph_backend<half>();
  const std::unique_ptr<StepBackend<bfloat16>> bf16 = make_graph_backend<bfloat16>();
  REQUIRE(f16 != nullptr);
  REQUIRE(bf16 != nullptr);
  CHECK(f16->rank() == nullptr);
  CHECK(bf16->rank() == nullptr);
  f16->forget_sampling();
}

TEST_SUITE("gpu") {
  TEST_CASE("a decoder on the graph backend has no persistent program and no communicator") {
    DecoderConfig c;
    c.d = 128;
    c.heads = 4;
    c.layers = 2;
    c.ffn = 256;
    c.vocab = 512;
    c.context = 64;
    Decoder decoder(lgtest::stream(), lgtest::nn_kernels(), c);
    CHECK_THROWS_WITH_AS((void)decoder.persistent_program(1),
                         doctest::Contains("the decoder does not run on DecoderBackend::persistent"), UsageError);
    CHECK_THROWS_WITH_AS((void)decoder.persistent_program(0), doctest::Contains("rows (0) must be 1 to 8"), UsageError);
    CHECK(decoder.communicator() == nullptr);
    CHECK_FALSE(decoder.peer_all_reduce());
    const int next = decoder.forward({3, 0});
    CHECK(next >= 0);
    CHECK(next < c.vocab);
  }
}
