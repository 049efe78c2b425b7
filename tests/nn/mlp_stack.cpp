// The SwiGLU stack as one persistent launch (nn/mlp_stack.hpp): float64 agreement on fresh inputs for shapes that
// leave partial work items and every split, a batch equal row by row to batches of one, counters that come back to
// zero (replays, and the same op twice in one graph), weights kept alive by the op, and the errors of bad input.
#include <doctest/doctest.h>

#include <optional>
#include <tuple>
#include <vector>

#include <lazygraph/nn/mlp.hpp>
#include <lazygraph/nn/mlp_stack.hpp>
#include <lazygraph/nn/reference.hpp>
#include "common/gpu.hpp"
#include "common/nn.hpp"

namespace lg = lazygraph;
namespace nn = lazygraph::nn;
using lg::half;

namespace {

using lgtest::random_halves;

/// Seeded weights of `config`, as nn::Mlp and mlp_reference make them.
std::vector<nn::SwigluWeights> weights_of(const nn::Kernels& k, const nn::MlpConfig& config) {
  std::vector<nn::SwigluWeights> layers;
  layers.reserve(static_cast<std::size_t>(config.layers));
  for (int l = 0; l < config.layers; ++l) {
    layers.push_back(nn::generate_swiglu_weights(lgtest::stream(), k, config.seed, l, config.d, config.ffn));
  }
  return layers;
}

nn::MlpConfig shape(int d, int ffn, int layers) {
  nn::MlpConfig c;
  c.d = d;
  c.ffn = ffn;
  c.layers = layers;
  return c;
}

/// Runs `stack` once on `x` (batch rows) and returns x afterwards.
std::vector<half> run(const nn::MlpStack& stack, const std::vector<half>& x, int ffn, int batch) {
  lg::DeviceBuffer<half> dx = lgtest::to_device(lgtest::stream(), x);
  lg::DeviceBuffer<half> act(lgtest::device(), static_cast<std::size_t>(ffn) * static_cast<std::size_t>(batch));
  stack.op(dx.view(), act.view(), batch).sync_on(lgtest::stream());
  return lgtest::to_host(lgtest::stream(), dx.cview());
}

}  // namespace

TEST_CASE("the stack kernel's split rule gives long rows two warps and spreads short phases over more warps") {
  // 132 SMs x 3 blocks x 8 warps resident.
  const int resident = 132 * 3 * 8;
  const nn::MlpStackSplit small = nn::mlp_stack_split({}, 512, 1536, resident);
  CHECK(small.a == 2);  // 1536 rows: 2 warps each fill 3072 of 3168 warps; 4 would leave 128 columns per warp
  CHECK(small.b == 4);  // 512 rows of 1536 columns: 4 warps each, 384 columns per warp
  const nn::MlpStackSplit large = nn::mlp_stack_split({}, 4096, 11008, resident);
  CHECK(large.a == 1);                                               // 11008 rows of 4096 columns
  CHECK(large.b == 2);                                               // rows of 11008 columns
  CHECK(nn::mlp_stack_split({8, 1}, 4096, 11008, resident).a == 8);  // an explicit split stays
  CHECK_THROWS_WITH_AS((void)nn::mlp_stack_split({3, 0}, 512, 1536, resident), doctest::Contains("a = 3"),
                       lg::UsageError);
}

TEST_SUITE("gpu") {
  TEST_CASE("the persistent stack matches float64 on shapes with partial items, for every split") {
    const nn::Kernels k(lgtest::nn_kernels());
    for (const auto& s :
         {std::tuple{512, 1536, 16}, std::tuple{328, 904, 3}, std::tuple{64, 8200, 2}, std::tuple{2048, 5632, 2}}) {
      const int d = std::get<0>(s);
      const int ffn = std::get<1>(s);
      const nn::MlpConfig config = shape(d, ffn, std::get<2>(s));
      CAPTURE(d);
      CAPTURE(ffn);
      const auto w = weights_of(k, config);
      for (const nn::MlpStackSplit split : {nn::MlpStackSplit{}, nn::MlpStackSplit{1, 1}, nn::MlpStackSplit{2, 8},
                                            nn::MlpStackSplit{8, 2}, nn::MlpStackSplit{4, 4}}) {
        CAPTURE(split.a);
        CAPTURE(split.b);
        const nn::MlpStack stack(lgtest::stream(), k, w, d, ffn, config.eps, split);
        const std::vector<half> x = random_halves(static_cast<std::size_t>(d));
        const std::vector<double> want = nn::mlp_reference(config, nn::widen(x));
        const std::vector<half> y = run(stack, x, ffn, 1);
        CHECK(nn::relative_error(nn::widen(y), want) < 1e-2);
        CHECK(nn::relative_error(nn::widen(x), want) > 0.05);  // the layers changed x measurably
      }
    }
  }

  TEST_CASE("a batch through the persistent stack gives each row exactly what a batch of one gives it") {
    const nn::Kernels k(lgtest::nn_kernels());
    const nn::MlpConfig config = shape(256, 768, 3);
    const auto w = weights_of(k, config);
    const nn::MlpStack stack(lgtest::stream(), k, w, config.d, config.ffn, config.eps);
    for (const int batch : {2, 3, 8}) {
      CAPTURE(batch);
      const std::vector<half> x = random_halves(static_cast<std::size_t>(batch) * static_cast<std::size_t>(config.d));
      const std::vector<half> y = run(stack, x, config.ffn, batch);
      int differ = 0;
      for (int b = 0; b < batch; ++b) {
        const auto row = static_cast<std::ptrdiff_t>(b) * config.d;
        const std::vector<half> one =
            run(stack, std::vector<half>(x.begin() + row, x.begin() + row + config.d), config.ffn, 1);
        for (int i = 0; i < config.d; ++i) differ += one[static_cast<std::size_t>(i)].bits != y[row + i].bits ? 1 : 0;
      }
      CHECK(differ == 0);
    }
  }

  TEST_CASE("the persistent stack's counters return to zero: replays and the same op twice in one graph") {
    const nn::Kernels k(lgtest::nn_kernels());
    const nn::MlpConfig config = shape(256, 1024, 4);
    const auto w = weights_of(k, config);
    const nn::MlpStack stack(lgtest::stream(), k, w, config.d, config.ffn, config.eps);
    const std::vector<half> x = random_halves(256);
    const std::vector<half> once = run(stack, x, config.ffn, 1);
    const std::vector<half> twice = run(stack, once, config.ffn, 1);

    lg::DeviceBuffer<half> dx(lgtest::device(), 256);
    lg::DeviceBuffer<half> act(lgtest::device(), 1024);
    const auto input = lgtest::to_device(lgtest::stream(), x);
    auto graph = lg::CudaGraph<>::capture(
        lgtest::stream(),
        lg::copy(dx.view(), input.cview()) >> stack.op(dx.view(), act.view()) >> stack.op(dx.view(), act.view()));
    int differ = 0;
    for (int replay = 0; replay < 50; ++replay) {
      graph.launch();
      const std::vector<half> y = lgtest::to_host(lgtest::stream(), dx.cview());
      for (std::size_t i = 0; i < y.size(); ++i) differ += y[i].bits != twice[i].bits ? 1 : 0;
    }
    CHECK(differ == 0);
  }

  TEST_CASE("the persistent Mlp module matches float64, equals its eager op and launches early or not alike") {
    nn::MlpConfig config = shape(512, 1536, 6);
    config.persistent = true;
    nn::Mlp early(lgtest::stream(), lgtest::nn_kernels(), config);
    CHECK(early.graph().node_count() == 4U);  // staging in, the input copy, the stack, staging out
    config.early_launch = false;
    nn::Mlp plain(lgtest::stream(), lgtest::nn_kernels(), config);
    config.persistent = false;
    nn::Mlp kernels(lgtest::stream(), lgtest::nn_kernels(), config);
    for (int round = 0; round < 2; ++round) {
      const std::vector<half> x = random_halves(512);
      const std::vector<double> want = nn::mlp_reference(config, nn::widen(x));
      const std::vector<half> a = early.forward(x);
      const std::vector<half> b = plain.forward(x);
      CHECK(nn::relative_error(nn::widen(a), want) < 1e-2);
      CHECK(nn::relative_error(nn::widen(kernels.forward(x)), want) < 1e-2);
      int differ = 0;
      for (std::size_t i = 0; i < a.size(); ++i) differ += a[i].bits != b[i].bits ? 1 : 0;
      CHECK(differ == 0);

      const auto input = lgtest::to_device(lgtest::stream(), x);
      lg::DeviceBuffer<half> out(lgtest::device(), 512);
      early.persistent_op(input.cview(), out.view()).sync_on(lgtest::stream());
      const std::vector<half> eager = lgtest::to_host(lgtest::stream(), out.cview());
      differ = 0;
      for (std::size_t i = 0; i < a.size(); ++i) differ += a[i].bits != eager[i].bits ? 1 : 0;
      CHECK(differ == 0);
    }
  }

  TEST_CASE("a persistent stack's op keeps the stack's table and weights alive") {
    const nn::Kernels k(lgtest::nn_kernels());
    const nn::MlpConfig config = shape(256, 512, 2);
    const std::vector<half> x = random_halves(256);
    const std::vector<double> want = nn::mlp_reference(config, nn::widen(x));
    lg::DeviceBuffer<half> dx = lgtest::to_device(lgtest::stream(), x);
    lg::DeviceBuffer<half> act(lgtest::device(), 512);
    std::optional<nn::MlpStack::Op> op;
    {
      const auto w = weights_of(k, config);
      const nn::MlpStack stack(lgtest::stream(), k, w, config.d, config.ffn, config.eps);
      op.emplace(stack.op(dx.view(), act.view()));
    }  // the weights and the stack are gone; the op holds them
    op->sync_on(lgtest::stream());
    CHECK(nn::relative_error(nn::widen(lgtest::to_host(lgtest::stream(), dx.cview())), want) < 1e-2);
  }

  TEST_CASE("a persistent stack refuses bad shapes, batches and spans, naming them") {
    const nn::Kernels k(lgtest::nn_kernels());
    const nn::MlpConfig config = shape(256, 512, 2);
    const auto w = weights_of(k, config);
    const std::span<const nn::SwigluWeights> none;
    CHECK_THROWS_WITH_AS(nn::MlpStack(lgtest::stream(), k, none, 256, 512, 1e-5F), doctest::Contains("no layers"),
                         lg::UsageError);
    CHECK_THROWS_WITH_AS(nn::MlpStack(lgtest::stream(), k, w, 256, 520, 1e-5F),
                         doctest::Contains("layer 0 w1 has 131072 elements"), lg::UsageError);
    CHECK_THROWS_WITH_AS(nn::MlpStack(lgtest::stream(), k, w, 250, 512, 1e-5F), doctest::Contains("multiples of 8"),
                         lg::UsageError);
    CHECK_THROWS_AS(nn::MlpStack(lgtest::stream(), k, w, 256, 512, 1e-5F, {3, 1}), lg::UsageError);
    const nn::MlpStack stack(lgtest::stream(), k, w, 256, 512, 1e-5F);
    lg::DeviceBuffer<half> x(lgtest::device(), 512);
    lg::DeviceBuffer<half> act(lgtest::device(), 512);
    CHECK_THROWS_WITH_AS((void)stack.op(x.view(), act.view(), 0), doctest::Contains("batch 0"), lg::UsageError);
    CHECK_THROWS_WITH_AS((void)stack.op(x.view(), act.view(), 9), doctest::Contains("batch 9"), lg::UsageError);
    CHECK_THROWS_WITH_AS((void)stack.op(x.view(), act.view(), 2), doctest::Contains("act of 1024 elements"),
                         lg::UsageError);
    CHECK(stack.grid(1) >= static_cast<unsigned>(lgtest::device().sm_count()));
    CHECK(stack.layers() == 2);
  }
}
