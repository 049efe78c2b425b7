// The tensor-parallel MLP (nn/tensor_parallel.hpp): how a config splits (host); on the GPU, one rank over the
// NCCL path bit-identical to Mlp, and, on a machine with two or more GPUs, two ranks against Mlp and the float64
// reference (skipped, saying so, with one GPU).
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn.hpp>

#include <vector>

#include "common/gpu.hpp"
#include "common/nccl.hpp"
#include "common/nn.hpp"

namespace lg = lazygraph;
using lg::half;

TEST_CASE("a tensor-parallel MLP needs ffn to split into shards of a multiple of 8") {
  lg::nn::MlpConfig config;
  config.d = 256;
  config.ffn = 512;
  CHECK_NOTHROW(lg::nn::check_tensor_parallel(config, 1));
  CHECK_NOTHROW(lg::nn::check_tensor_parallel(config, 4));
  CHECK_NOTHROW(lg::nn::check_tensor_parallel(config, 64));
  config.ffn = 520;
  CHECK_NOTHROW(lg::nn::check_tensor_parallel(config, 1));
  CHECK_THROWS_WITH_AS(lg::nn::check_tensor_parallel(config, 2),
                       doctest::Contains("ffn 520 does not split into 2 shards of a multiple of 8"), lg::UsageError);
  CHECK_THROWS_AS(lg::nn::check_tensor_parallel(config, 0), lg::UsageError);
  config.ffn = 12;
  CHECK_THROWS_AS(lg::nn::check_tensor_parallel(config, 1), lg::UsageError);  // not a multiple of 8 at all
}

namespace {

lg::nn::MlpConfig small_config() {
  lg::nn::MlpConfig config;
  config.d = 256;
  config.ffn = 768;
  config.layers = 3;
  config.seed = 99;
  return config;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("a tensor-parallel MLP of one rank computes Mlp's bits, through the all-reduce in its graph") {
    if (!lgtest::have_nccl()) return;
    const lg::nn::MlpConfig config = small_config();
    const std::vector<lg::Communicator> comms = lg::Communicator::create_all(std::vector<lg::Device>{lgtest::device()});
    const std::vector<const lg::KernelLibrary*> libraries{&lgtest::nn_kernels()};
    lg::nn::TensorParallelMlp tp(comms, libraries, config);
    lg::nn::Mlp mlp(lgtest::stream(), lgtest::nn_kernels(), config);
    CHECK(tp.ranks() == 1);
    for (int round = 0; round < 2; ++round) {
      const std::vector<half> x = lgtest::random_halves(static_cast<std::size_t>(config.d));
      const std::vector<half> got = tp.forward(x);
      const std::vector<half> want = mlp.forward(x);
      for (std::size_t i = 0; i < want.size(); ++i) REQUIRE(got[i].bits == want[i].bits);
      CHECK(lg::nn::relative_error(lg::nn::widen(got), lg::nn::widen(x)) > 0.05);  // the blocks changed x
    }
    CHECK_THROWS_AS(tp.forward(std::vector<half>(255)), lg::UsageError);
  }

  TEST_CASE("a tensor-parallel MLP over two GPUs matches Mlp within fp16 rounding and the float64 reference") {
    if (!lgtest::have_two_ranks()) return;
    const lg::nn::MlpConfig config = small_config();
    const std::vector<lg::Device> devices{lg::Device::get(0), lg::Device::get(1)};
    const std::vector<lg::Communicator> comms = lg::Communicator::create_all(devices);
    lg::KernelLibrary second = lg::nn::kernel_library(devices[1]);
    const lg::KernelLibrary first = lg::nn::kernel_library(devices[0]);
    const std::vector<const lg::KernelLibrary*> libraries{&first, &second};
    lg::nn::Mlp mlp(lgtest::stream(), lgtest::nn_kernels(), config);
    // x in NCCL symmetric memory (its symmetric kernels) where this NCCL has it, and in plain device memory.
    for (const bool symmetric : {true, false}) {
      CAPTURE(symmetric);
      lg::nn::TensorParallelMlp tp(comms, libraries, config, {.symmetric_memory = symmetric});
      CHECK(tp.symmetric_memory() == (symmetric && lg::SymmetricBuffer<half>::supported()));
      for (int round = 0; round < 2; ++round) {
        const std::vector<half> x = lgtest::random_halves(static_cast<std::size_t>(config.d));
        const std::vector<half> got = tp.forward(x);
        const std::vector<double> want = lg::nn::mlp_reference(config, lg::nn::widen(x));
        CHECK(lg::nn::relative_error(lg::nn::widen(got), want) < 1e-2);
        CHECK(lg::nn::relative_error(lg::nn::widen(got), lg::nn::widen(mlp.forward(x))) < 5e-3);
      }
    }
  }
}
