// OptionalLaunch (kernels/optional_launch.hpp): the side of a choose() that cannot be made (the nn decoder's quantized
// kernels when the weights are dense). Empty, it is a GraphNode that touches nothing and refuses to run; made, it is
// its launch, keeping its owner alive.
#include <doctest/doctest.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include <lazygraph/kernels/optional_launch.hpp>
#include <lazygraph/lazygraph.hpp>

#include "common/gpu.hpp"

using namespace lazygraph;

static_assert(GraphNode<OptionalLaunch<int, float>>, "an OptionalLaunch records as its launch does");
static_assert(BuildableNode<OptionalLaunch<int, float>>, "and builds without capture as its launch does");

TEST_CASE("optional_launch does not call make for the branch not taken, and the empty launch touches nothing") {
  bool called = false;
  const auto never = [&]() -> LaunchOp<int> {
    called = true;
    throw std::logic_error("make was called");
  };
  const OptionalLaunch<int> empty = optional_launch(false, never);
  CHECK_FALSE(called);
  CHECK_FALSE(empty.has_value());
  CHECK(accesses_of(empty).empty());
  CHECK_THROWS_AS((void)optional_launch(true, never), std::logic_error);
  CHECK(called);
}

TEST_SUITE("gpu") {
  TEST_CASE("an empty OptionalLaunch refuses to run, and a made one runs its launch") {
    const OptionalLaunch<int> empty;
    CHECK_THROWS_WITH_AS(empty.sync_on(lgtest::stream()), doctest::Contains("choose()"), UsageError);
    auto y = lgtest::to_device(lgtest::stream(), std::vector<float>(4, 0.0F));
    const auto axpy = lgtest::axpy();
    const auto x = lgtest::to_device(lgtest::stream(), std::vector<float>{1, 2, 3, 4});
    const auto made = optional_launch(true, [&] {
      return axpy({{1, 1, 1}, {32, 1, 1}, 0}, 2.0F, x.cview(), y.view(), 4);
    });
    CHECK(made.has_value());
    CHECK_FALSE(accesses_of(made).empty());
    made.sync_on(lgtest::stream());
    CHECK(lgtest::to_host(lgtest::stream(), y.cview()) == std::vector<float>{2, 4, 6, 8});
  }

  TEST_CASE("a graph that records an OptionalLaunch keeps its owner alive as long as the graph lives") {
    auto y = lgtest::to_device(lgtest::stream(), std::vector<float>(4, 0.0F));
    const auto x = lgtest::to_device(lgtest::stream(), std::vector<float>{1, 2, 3, 4});
    auto owner = std::make_shared<const int>(7);
    const std::weak_ptr<const int> watch = owner;
    std::optional<CudaGraph<>> graph;
    {
      const auto axpy = lgtest::axpy();
      const auto made = optional_launch(
          true,
          [&] {
            return axpy({{1, 1, 1}, {32, 1, 1}, 0}, 1.0F, x.cview(), y.view(), 4);
          },
          std::move(owner));
      graph.emplace(CudaGraph<>::capture(lgtest::stream(), made));
    }
    CHECK_FALSE(watch.expired());
    graph->launch();
    CHECK(lgtest::to_host(lgtest::stream(), y.cview()) == std::vector<float>{1, 2, 3, 4});
    graph.reset();
    CHECK(watch.expired());
  }
}
