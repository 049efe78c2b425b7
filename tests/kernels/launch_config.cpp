// LaunchConfig and grid_for (host); launches of thread block clusters and with a shared memory carveout, eagerly and in
// graphs (whose kernel nodes carry them, read back through the driver), and their refusals (gpu).
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/gpu.hpp"
#include "lazygraph/detail/driver/driver_api.hpp"

using namespace lazygraph;

TEST_CASE("grid_for covers n elements with whole blocks, and at least one block") {
  static_assert(grid_for(1000, 256).grid.x == 4);
  static_assert(grid_for(1024, 256).grid.x == 4);
  static_assert(grid_for(1025, 256).grid.x == 5);
  CHECK(grid_for(0, 128).grid.x == 1);
  CHECK(grid_for(10, 128, 512).shared_bytes == 512);
  CHECK(grid_for(10, 128).block.volume() == 128);
}

TEST_CASE("grid_for refuses a grid of more than 2^32 - 1 blocks instead of truncating it") {
  CHECK(grid_for((std::size_t{1} << 32U) - 1, 1).grid.x == 0xffffffffU);
  CHECK_THROWS_WITH_AS((void)grid_for(std::size_t{1} << 32U, 1), doctest::Contains("grid-stride loop"), UsageError);
  CHECK_THROWS_AS((void)grid_for(std::size_t{1} << 45U, 256), UsageError);  // 2^37 blocks
  CHECK_THROWS_AS((void)grid_for(~std::size_t{0}, 1024), UsageError);       // n + block - 1 would wrap
}

TEST_CASE("early() switches on programmatic dependent launch and changes nothing else") {
  constexpr LaunchConfig plain = grid_for(1000, 128, 64);
  static_assert(!plain.early_launch);
  constexpr LaunchConfig e = early(plain);
  static_assert(e.early_launch);
  static_assert(e.grid.x == plain.grid.x && e.block.x == plain.block.x && e.shared_bytes == plain.shared_bytes);
}

TEST_CASE("a launch configuration has no clusters unless it asks for them") {
  constexpr LaunchConfig plain = grid_for(1000, 128);
  static_assert(plain.cluster.volume() == 1);
  static_assert(early(plain).cluster.volume() == 1);
  static_assert(kMaxClusterBlocks == 8);
}

TEST_CASE("a launch configuration leaves the shared memory carveout to the kernel unless it asks for one") {
  constexpr LaunchConfig plain = grid_for(1000, 128, 64);
  static_assert(plain.shared_carveout == -1);
  static_assert(early(plain).shared_carveout == -1);
  constexpr LaunchConfig l1 = with_shared_carveout(early(plain), 0);
  static_assert(l1.shared_carveout == 0 && l1.early_launch);
  static_assert(l1.grid.x == plain.grid.x && l1.block.x == plain.block.x && l1.shared_bytes == plain.shared_bytes);
}

namespace {

// Block b of a cluster of n keeps in[b] in shared memory; after the cluster barrier it adds every block's value of its
// cluster in rank order (read from their shared memory) into out[b], then waits for the others' reads before it ends.
const char* const kClusterSource = R"(#include "lazygraph/cluster.cuh"
extern "C" __global__ void cluster_sum(float* out, const float* in) {
  __shared__ float mine;
  lg::wait_for_prior_grids();
  if (threadIdx.x == 0) mine = in[blockIdx.x];
  lg::cluster_sync();
  float sum = 0.0f;
  for (unsigned r = 0; r < lg::cluster_blocks(); ++r) sum += lg::load_from_block(&mine, r);
  lg::cluster_arrive();
  if (threadIdx.x == 0) out[blockIdx.x] = sum + static_cast<float>(lg::cluster_rank()) * 1000.0f;
  lg::cluster_wait();
}
)";

// out[i] = in[i] * 2 + 1, reading `in` through a shared memory copy of the block's part.
const char* const kCarveoutSource = R"(extern "C" __global__ void twice_plus_one(float* out, const float* in, int n) {
  extern __shared__ float part[];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  part[threadIdx.x] = i < n ? in[i] : 0.0f;
  __syncthreads();
  if (i < n) out[i] = part[threadIdx.x] * 2.0f + 1.0f;
}
)";

KernelLibrary& cluster_library() {
  static KernelLibrary lib = [] {
    KernelLibraryOptions opts;
    opts.kernel_sets = {KernelSet{"cluster_test", {{"cluster_sum.cu", kClusterSource}}, {}},
                        KernelSet{"carveout_test", {{"twice_plus_one.cu", kCarveoutSource}}, {}}};
    return KernelLibrary(lgtest::device(), std::move(opts));
  }();
  return lib;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("blocks launched in clusters share their shared memory, eagerly, captured and built into a graph") {
    if (lgtest::device().compute_capability().major < 9) {
      MESSAGE("skipped: thread block clusters need sm_90 or newer");
      return;
    }
    Stream& s = lgtest::stream();
    const auto sum = cluster_library().get<void(float*, const float*)>("cluster_sum");
    const int blocks = 48;
    std::vector<float> in(blocks);
    for (int b = 0; b < blocks; ++b) in[static_cast<std::size_t>(b)] = static_cast<float>(b + 1);
    const auto din = lgtest::to_device(s, in);
    // All three launch attributes at once too: clusters, early launch and a carveout.
    for (const unsigned n : {2U, 4U, 8U}) {
      for (const bool early_launch : {false, true}) {
        for (const int carveout : {-1, 50}) {
          CAPTURE(n);
          CAPTURE(early_launch);
          CAPTURE(carveout);
          LaunchConfig config{{blocks, 1, 1}, {64, 1, 1}, 0};
          config.cluster = {n, 1, 1};
          config.early_launch = early_launch;
          config.shared_carveout = carveout;
          std::vector<float> want(blocks);
          for (int b = 0; b < blocks; ++b) {
            const int first = b / static_cast<int>(n) * static_cast<int>(n);
            float total = 0.0F;
            for (int r = 0; r < static_cast<int>(n); ++r) total += in[static_cast<std::size_t>(first + r)];
            want[static_cast<std::size_t>(b)] = total + static_cast<float>(b % static_cast<int>(n)) * 1000.0F;
          }
          const auto check = [&](const char* how, const std::function<void(DeviceBuffer<float>&)>& run) {
            CAPTURE(how);
            auto out = lgtest::to_device(s, std::vector<float>(blocks, -1.0F));
            run(out);
            CHECK(lgtest::to_host(s, out.cview()) == want);
          };
          check("eagerly", [&](DeviceBuffer<float>& out) { sum.launch(s, config, out.view(), din.cview()); });
          check("captured", [&](DeviceBuffer<float>& out) {
            auto graph = CudaGraph<>::capture(s, sum(config, out.view(), din.cview()));
            graph.launch();
            s.synchronize();
          });
          check("built", [&](DeviceBuffer<float>& out) {
            auto graph = CudaGraph<>::build(lgtest::device(), sum(config, out.view(), din.cview()));
            graph.launch();
            s.synchronize();
          });
        }
      }
    }
  }

  TEST_CASE(
      "updating a graph to other clusters is refused by name, or makes a new graph when asked, built or captured") {
    if (lgtest::device().compute_capability().major < 9) {
      MESSAGE("skipped: thread block clusters need sm_90 or newer");
      return;
    }
    Stream& s = lgtest::stream();
    const auto sum = cluster_library().get<void(float*, const float*)>("cluster_sum");
    const auto in = lgtest::to_device(s, std::vector<float>(16, 1.0F));
    auto out = lgtest::to_device(s, std::vector<float>(16, 0.0F));
    const auto config = [](unsigned n) {
      LaunchConfig c{{16, 1, 1}, {64, 1, 1}, 0};
      c.cluster = {n, 1, 1};
      return c;
    };
    // Block b's sum is its cluster's size (every input 1) plus 1000 times its rank.
    const auto expect = [&](unsigned n) {
      CAPTURE(n);
      std::vector<float> want(16);
      for (unsigned b = 0; b < 16; ++b) want[b] = static_cast<float>(n) + static_cast<float>(b % n) * 1000.0F;
      CHECK(lgtest::to_host(s, out.cview()) == want);
    };
    for (const bool built : {true, false}) {
      CAPTURE(built);
      auto graph = built ? CudaGraph<>::build(lgtest::device(), sum(config(2), out.view(), in.cview()))
                         : CudaGraph<>::capture(s, sum(config(2), out.view(), in.cview()));
      // In place, the driver would keep the old clusters (cuGraphExecUpdate accepts the capture and keeps them).
      const UpdateResult refused = graph.update_from(sum(config(4), out.view(), in.cview()));
      CHECK(refused.status == UpdateStatus::parameters_changed);
      CHECK(refused.message.find("other clusters") != std::string::npos);
      graph.launch();
      expect(2);  // still the graph it was
      const UpdateResult remade = graph.update_from(sum(config(4), out.view(), in.cview()), {true});
      CHECK(remade.status == UpdateStatus::reinstantiated);
      graph.launch();
      expect(4);
    }
    // The same inside a child graph, whose kernels the parent's update compares too.
    const auto child = [&](unsigned n) {
      return CudaGraph<>::build(lgtest::device(), sum(config(n), out.view(), in.cview()));
    };
    const auto two = child(2);
    const auto four = child(4);
    for (const bool built : {true, false}) {
      CAPTURE(built);
      auto graph =
          built ? CudaGraph<>::build(lgtest::device(), child_graph(two)) : CudaGraph<>::capture(s, child_graph(two));
      const UpdateResult refused = graph.update_from(child_graph(four));
      CHECK(refused.status == UpdateStatus::parameters_changed);
      CHECK(refused.message.find("other clusters") != std::string::npos);
      graph.launch();
      expect(2);
      CHECK(graph.update_from(child_graph(four), {true}).status == UpdateStatus::reinstantiated);
      graph.launch();
      expect(4);
    }
  }

  TEST_CASE("a cluster shape the launch cannot take is a UsageError naming it, before anything runs") {
    if (lgtest::device().compute_capability().major < 9) {
      MESSAGE("skipped: thread block clusters need sm_90 or newer");
      return;
    }
    Stream& s = lgtest::stream();
    const auto sum = cluster_library().get<void(float*, const float*)>("cluster_sum");
    auto out = lgtest::to_device(s, std::vector<float>(16, 0.0F));
    const auto in = lgtest::to_device(s, std::vector<float>(16, 1.0F));
    LaunchConfig uneven{{12, 1, 1}, {64, 1, 1}, 0};
    uneven.cluster = {8, 1, 1};
    CHECK_THROWS_WITH_AS(sum.launch(s, uneven, out.view(), in.cview()), doctest::Contains("do not divide the grid"),
                         UsageError);
    LaunchConfig large{{16, 1, 1}, {64, 1, 1}, 0};
    large.cluster = {16, 1, 1};
    CHECK_THROWS_WITH_AS(sum.launch(s, large, out.view(), in.cview()), doctest::Contains("cluster (16, 1, 1)"),
                         UsageError);
    LaunchConfig zero{{16, 1, 1}, {64, 1, 1}, 0};
    zero.cluster = {0, 1, 1};
    CHECK_THROWS_WITH_AS(sum.launch(s, zero, out.view(), in.cview()), doctest::Contains("cluster dimension is zero"),
                         UsageError);
  }

  TEST_CASE("a launch with a shared memory carveout computes as without, eagerly, captured and built into a graph") {
    Stream& s = lgtest::stream();
    const auto twice = cluster_library().get<void(float*, const float*, int)>("twice_plus_one");
    const int n = 1000;
    const std::vector<float> in = lgtest::random_floats(n);
    std::vector<float> want(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) want[i] = in[i] * 2.0F + 1.0F;
    const auto din = lgtest::to_device(s, in);
    for (const int carveout : {0, 25, 100}) {
      CAPTURE(carveout);
      const LaunchConfig config = with_shared_carveout(grid_for(n, 128, 128 * 4), carveout);
      const auto check = [&](const char* how, const std::function<void(DeviceBuffer<float>&)>& run) {
        CAPTURE(how);
        auto out = lgtest::to_device(s, std::vector<float>(in.size(), -1.0F));
        run(out);
        CHECK(lgtest::to_host(s, out.cview()) == want);
      };
      check("eagerly", [&](DeviceBuffer<float>& out) { twice.launch(s, config, out.view(), din.cview(), n); });
      check("early", [&](DeviceBuffer<float>& out) { twice.launch(s, early(config), out.view(), din.cview(), n); });
      check("captured", [&](DeviceBuffer<float>& out) {
        auto graph = CudaGraph<>::capture(s, twice(config, out.view(), din.cview(), n));
        graph.launch();
        s.synchronize();
      });
      check("built", [&](DeviceBuffer<float>& out) {
        auto graph = CudaGraph<>::build(lgtest::device(), twice(config, out.view(), din.cview(), n));
        graph.launch();
        s.synchronize();
      });
    }
  }

  TEST_CASE(
      "updating a graph to another shared memory carveout is refused by name, or makes a new graph when asked, built "
      "or captured") {
    Stream& s = lgtest::stream();
    const auto twice = cluster_library().get<void(float*, const float*, int)>("twice_plus_one");
    const int n = 256;
    const std::vector<float> in = lgtest::random_floats(n);
    std::vector<float> want(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) want[i] = in[i] * 2.0F + 1.0F;
    const auto din = lgtest::to_device(s, in);
    auto out = lgtest::to_device(s, std::vector<float>(in.size(), -1.0F));
    auto other = lgtest::to_device(s, std::vector<float>(in.size(), -1.0F));
    const auto config = [](int carveout) { return with_shared_carveout(grid_for(256, 128, 128 * 4), carveout); };
    for (const bool built : {true, false}) {
      CAPTURE(built);
      auto graph = built ? CudaGraph<>::build(lgtest::device(), twice(config(25), out.view(), din.cview(), n))
                         : CudaGraph<>::capture(s, twice(config(25), out.view(), din.cview(), n));
      // The same carveout updates in place (a captured graph's nodes read back as they were recorded).
      const UpdateResult same = graph.update_from(twice(config(25), other.view(), din.cview(), n));
      CHECK(same.status == UpdateStatus::applied);
      // In place, the driver might keep the old carveout: another one (or none, which a node reads back as 0) is
      // refused.
      for (const int changed : {0, 50, -1}) {
        CAPTURE(changed);
        const UpdateResult refused = graph.update_from(twice(config(changed), out.view(), din.cview(), n));
        CHECK(refused.status == UpdateStatus::parameters_changed);
        CHECK(refused.message.find("shared memory carveout") != std::string::npos);
      }
      graph.launch();
      s.synchronize();
      CHECK(lgtest::to_host(s, other.cview()) == want);  // still the graph it was, updated to `other`
      const UpdateResult remade = graph.update_from(twice(config(50), out.view(), din.cview(), n), {true});
      CHECK(remade.status == UpdateStatus::reinstantiated);
      graph.launch();
      s.synchronize();
      CHECK(lgtest::to_host(s, out.cview()) == want);
      copy(out.view(), std::vector<float>(in.size(), -1.0F)).sync_on(s);
      copy(other.view(), std::vector<float>(in.size(), -1.0F)).sync_on(s);
    }
  }

  TEST_CASE(
      "a child graph's kernel of another shared memory carveout is refused by the parent's update, built or captured") {
    Stream& s = lgtest::stream();
    const auto twice = cluster_library().get<void(float*, const float*, int)>("twice_plus_one");
    const int n = 256;
    const std::vector<float> in = lgtest::random_floats(n);
    std::vector<float> want(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) want[i] = in[i] * 2.0F + 1.0F;
    const auto din = lgtest::to_device(s, in);
    auto out = lgtest::to_device(s, std::vector<float>(in.size(), -1.0F));
    const auto child = [&](int carveout) {
      return CudaGraph<>::build(lgtest::device(), twice(with_shared_carveout(grid_for(n, 128, 128 * 4), carveout),
                                                        out.view(), din.cview(), n));
    };
    const auto quarter = child(25);
    const auto half = child(50);
    const auto quarter_again = child(25);
    for (const bool built : {true, false}) {
      CAPTURE(built);
      auto graph = built ? CudaGraph<>::build(lgtest::device(), child_graph(quarter))
                         : CudaGraph<>::capture(s, child_graph(quarter));
      CHECK(graph.update_from(child_graph(quarter_again)).status == UpdateStatus::applied);
      const UpdateResult refused = graph.update_from(child_graph(half));
      CHECK(refused.status == UpdateStatus::parameters_changed);
      CHECK(refused.message.find("carveout") != std::string::npos);
      CHECK(graph.update_from(child_graph(half), {true}).status == UpdateStatus::reinstantiated);
      graph.launch();
      s.synchronize();
      CHECK(lgtest::to_host(s, out.cview()) == want);
      copy(out.view(), std::vector<float>(in.size(), -1.0F)).sync_on(s);
    }
  }

  TEST_CASE(
      "a graph's kernel nodes carry the launch's carveout and clusters, built, captured and inside a child graph") {
    Stream& s = lgtest::stream();
    const auto twice = cluster_library().get<void(float*, const float*, int)>("twice_plus_one");
    const int n = 256;
    const auto din = lgtest::to_device(s, lgtest::random_floats(n));
    auto out = lgtest::to_device(s, std::vector<float>(n, -1.0F));
    const auto attributes = [](const CudaGraph<>& g) {
      return detail::driver::graph_kernel_attributes(g.shared_state()->template_graph());
    };
    using Attributes = detail::driver::KernelNodeAttributes;
    const auto op = [&](int carveout) {
      return twice(with_shared_carveout(grid_for(n, 128, 128 * 4), carveout), out.view(), din.cview(), n);
    };
    for (const int carveout : {25, 100}) {
      CAPTURE(carveout);
      const auto built = CudaGraph<>::build(lgtest::device(), op(carveout) >> op(-1));
      const auto captured = CudaGraph<>::capture(s, op(carveout) >> op(-1));
      // None reads back as 0.
      const std::vector<Attributes> want{{{1, 1, 1}, static_cast<unsigned>(carveout)}, {{1, 1, 1}, 0}};
      CHECK(attributes(built) == want);
      CHECK(attributes(captured) == want);
      const auto parent = CudaGraph<>::capture(s, op(-1) >> child_graph(built));
      const std::vector<Attributes> nested{{{1, 1, 1}, 0}, want[0], want[1]};
      CHECK(attributes(parent) == nested);
    }
    if (lgtest::device().compute_capability().major < 9) {
      MESSAGE("clusters not read back: thread block clusters need sm_90 or newer");
      return;
    }
    const auto sum = cluster_library().get<void(float*, const float*)>("cluster_sum");
    LaunchConfig config{{16, 1, 1}, {64, 1, 1}, 0};
    config.cluster = {4, 1, 1};
    config.shared_carveout = 50;
    config.early_launch = true;
    const auto built = CudaGraph<>::build(lgtest::device(), op(-1) >> sum(config, out.view(), din.cview()));
    CHECK(attributes(built) == std::vector<Attributes>{{{1, 1, 1}, 0}, {{4, 1, 1}, 50}});
  }

  TEST_CASE("a shared memory carveout outside 0 to 100 (or -1) is a UsageError naming it, before anything runs") {
    Stream& s = lgtest::stream();
    const auto twice = cluster_library().get<void(float*, const float*, int)>("twice_plus_one");
    auto out = lgtest::to_device(s, std::vector<float>(128, -1.0F));
    const auto in = lgtest::to_device(s, std::vector<float>(128, 1.0F));
    for (const int bad : {101, -2}) {
      CAPTURE(bad);
      const LaunchConfig config = with_shared_carveout(grid_for(128, 128, 128 * 4), bad);
      CHECK_THROWS_WITH_AS(twice.launch(s, config, out.view(), in.cview(), 128), doctest::Contains("carveout"),
                           UsageError);
      CHECK_THROWS_WITH_AS((void)CudaGraph<>::build(lgtest::device(), twice(config, out.view(), in.cview(), 128)),
                           doctest::Contains("carveout"), UsageError);
    }
    CHECK(lgtest::to_host(s, out.cview()) == std::vector<float>(128, -1.0F));
  }
}
