// The tensor-parallel decoder (nn/tensor_parallel_decoder.hpp): how a config splits (host); on the GPU, one rank
// bit-identical to the Decoder, fused and unfused, and, on a machine with two or more GPUs, two ranks against the
// Decoder, fused and unfused (skipped, saying so, with one GPU).
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn.hpp>

#include <vector>

#include "common/gpu.hpp"
#include "common/nccl.hpp"
#include "common/nn.hpp"
#include "common/small_decoder.hpp"

namespace lg = lazygraph;
using lg::half;

TEST_CASE("a tensor-parallel decoder needs heads, kv heads and vocab to divide among the ranks, and one sequence") {
  lg::nn::DecoderConfig c = lgtest::small_decoder(2);  // 4 heads, 2 kv heads, vocab 512, ffn 256
  CHECK_NOTHROW(lg::nn::check_tensor_parallel(c, 1));
  CHECK_NOTHROW(lg::nn::check_tensor_parallel(c, 2));
  CHECK_THROWS_WITH_AS(lg::nn::check_tensor_parallel(c, 4), doctest::Contains("kv heads 2 do not divide"),
                       lg::UsageError);
  CHECK_THROWS_WITH_AS(lg::nn::check_tensor_parallel(c, 3), doctest::Contains("heads 4 do not divide"), lg::UsageError);
  c.kv_heads = 0;
  c.vocab = 513;
  CHECK_THROWS_WITH_AS(lg::nn::check_tensor_parallel(c, 2), doctest::Contains("vocab 513 does not divide"),
                       lg::UsageError);
  c = lgtest::small_decoder(0, 2);
  CHECK_THROWS_WITH_AS(lg::nn::check_tensor_parallel(c, 1), doctest::Contains("one sequence (max_batch 1)"),
                       lg::UsageError);
}

TEST_SUITE("gpu") {
  TEST_CASE("a tensor-parallel decoder of one rank computes the Decoder's logits and tokens bit for bit") {
    if (!lgtest::have_nccl()) return;
    for (const bool fused : {true, false}) {
      CAPTURE(fused);
      lg::nn::DecoderConfig c = lgtest::small_decoder(2);
      c.fused = fused;
      c.ordering = lg::nn::DecoderOrdering::serial;
      const std::vector<lg::Communicator> comms =
          lg::Communicator::create_all(std::vector<lg::Device>{lgtest::device()});
      const std::vector<const lg::KernelLibrary*> libraries{&lgtest::nn_kernels()};
      lg::nn::TensorParallelDecoder tp(comms, libraries, c);
      lg::nn::Decoder one(lgtest::stream(), lgtest::nn_kernels(), c);
      int token = 7;
      for (int position = 0; position < 12; ++position) {
        CAPTURE(position);
        const int got = tp.forward({token, position});
        const int want = one.forward({token, position});
        REQUIRE(got == want);
        const std::vector<half> a = tp.logits();
        const std::vector<half> b = one.logits();
        for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(a[i].bits == b[i].bits);
        token = got;
      }
      CHECK_THROWS_AS(tp.forward({c.vocab, 0}), lg::UsageError);
    }
  }

  TEST_CASE("a tensor-parallel decoder over two GPUs follows the Decoder within fp16 rounding") {
    if (!lgtest::have_nccl()) return;
    if (lg::Device::count() < 2) {
      MESSAGE("skipped: two GPUs needed for two ranks; this machine has " << lg::Device::count());
      return;
    }
    for (const bool fused : {true, false}) {
      CAPTURE(fused);
      lg::nn::DecoderConfig c = lgtest::small_decoder(2);
      c.fused = fused;
      const std::vector<lg::Device> devices{lg::Device::get(0), lg::Device::get(1)};
      const std::vector<lg::Communicator> comms = lg::Communicator::create_all(devices);
      const lg::KernelLibrary first = lg::nn::kernel_library(devices[0]);
      const lg::KernelLibrary second = lg::nn::kernel_library(devices[1]);
      const std::vector<const lg::KernelLibrary*> libraries{&first, &second};
      lg::nn::TensorParallelDecoder tp(comms, libraries, c);
      lg::nn::Decoder one(lgtest::stream(), lgtest::nn_kernels(), c);
      const std::vector<int> tokens{5, 77, 300, 12, 9, 401, 33, 250};
      for (int position = 0; position < static_cast<int>(tokens.size()); ++position) {
        (void)tp.forward({tokens[static_cast<std::size_t>(position)], position});  // the same inputs for both
        (void)one.forward({tokens[static_cast<std::size_t>(position)], position});
        CAPTURE(position);
        CHECK(lg::nn::relative_error(lg::nn::widen(tp.logits()), lg::nn::widen(one.logits())) < 1e-2);
      }
    }
  }
}
