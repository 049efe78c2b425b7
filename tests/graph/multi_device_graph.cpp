// MultiDeviceGraph (graph/multi_device_graph.hpp): one graph per rank, recorded on a thread per rank,
// launched together, waited for with a bound. On a one-GPU machine with one rank; with two GPUs also two ranks,
// whose every collective is checked against a float64 reference (the one-rank cases only see NCCL copy), and
// whose different recordings are refused before launch. The comparison itself is tested on the host
// (tests/driver/communicator.cpp).
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/gpu.hpp"
#include "common/nccl.hpp"

using namespace lazygraph;
using namespace std::chrono_literals;

namespace {

/// A communicator of the first two GPUs, never used before: its ranks connect at their first collective. Empty
/// after a MESSAGE saying why when this machine cannot have one.
std::vector<Communicator> fresh_two_ranks() {
  if (!lgtest::have_two_ranks()) return {};
  return Communicator::create_all(std::vector<Device>{Device::get(0), Device::get(1)});
}

/// One rank's buffers for every kind of collective, n elements each (2n where the kind needs ranks x n).
struct RankData {
  RankData(const Device& d, std::size_t n)
      : x(d, n),
        sum(d, n),
        max(d, n),
        gathered(d, 2 * n),
        scatter_in(d, 2 * n),
        scattered(d, n),
        broadcast(d, n),
        exchanged(d, n),
        counts(d, n),
        count_sum(d, n) {}
  DeviceBuffer<float> x, sum, max, gathered, scatter_in, scattered, broadcast, exchanged;
  DeviceBuffer<std::int32_t> counts, count_sum;
};

/// Lets the kernel after it start at once (griddepcontrol.launch_dependents), then spins `cycles` before it copies
/// `in` to `out`: a kernel launched early after it that does not wait for it (griddepcontrol.wait) reads `out`
/// before the copy, as NCCL 2.28's symmetric kernels would (ops/collective.cpp).
constexpr const char* late_copy_source = R"(#include "lazygraph/half.cuh"
extern "C" __global__ void late_copy(const lg::half_t* in, lg::half_t* out, int n, long long cycles) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const long long start = clock64();
  while (clock64() - start < cycles) {}
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = in[i];
}
)";

/// Small integers as halves: every sum of two is exact in fp16, so a reduction equals its reference bit for bit.
std::vector<half> random_small_integers(std::size_t n) {
  const std::vector<float> u = lgtest::random_floats(n);
  std::vector<half> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = half::from_float(std::round(u[i] * 512.0F));
  return out;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("a MultiDeviceGraph of every GPU's rank records, launches and waits with a bound") {
    if (!lgtest::have_nccl()) return;
    const std::vector<Communicator> comms = Communicator::create_all(std::vector<Device>{lgtest::device()});
    const Stream& s = lgtest::stream();
    const std::size_t n = 777;
    const std::vector<float> x0 = lgtest::random_floats(n);
    DeviceBuffer<float> x = lgtest::to_device(s, x0);
    DeviceBuffer<float> y(s.device(), n);
    MultiDeviceGraph graph = MultiDeviceGraph::capture(comms, [&](int rank, Scope& sc) {
      sc.record(fill(y.view(), 0.0F) >> all_gather<float>(comms[static_cast<std::size_t>(rank)], x.view(), y.view()));
    });
    CHECK(graph.size() == 1);
    graph.launch();
    CHECK(lgtest::to_host(s, y.view()) == x0);
    fill(y.view(), 0.0F).sync_on(s);
    graph.launch_async();
    graph.synchronize_for(10s);
    CHECK(lgtest::to_host(s, y.view()) == x0);
    CHECK_THROWS_WITH_AS(MultiDeviceGraph::capture(std::span<const Communicator>{}, [](int, Scope&) {}),
                         doctest::Contains("no communicators"), UsageError);
  }

  TEST_CASE("a rank whose recording throws fails the whole capture with its error") {
    if (!lgtest::have_nccl()) return;
    const std::vector<Communicator> comms = Communicator::create_all(std::vector<Device>{lgtest::device()});
    CHECK_THROWS_WITH_AS(MultiDeviceGraph::capture(comms, [](int, Scope&) { throw UsageError("rank's own error"); }),
                         doctest::Contains("rank's own error"), UsageError);
    CHECK_FALSE(comms[0].aborted());  // it failed alone: nobody waited for it
  }

  TEST_CASE("over two GPUs: a communicator's first collectives are captured; each kind equals its reference") {
    const std::vector<Communicator> comms = fresh_two_ranks();
    if (comms.empty()) return;
    const std::size_t n = 1000 + 3;
    std::vector<Stream> streams;
    std::vector<RankData> data;
    for (const Communicator& c : comms) {
      streams.emplace_back(c.device());
      data.emplace_back(c.device(), n);
    }
    // Everything a rank does, the other does too, in the same order: the clique comparison passes.
    MultiDeviceGraph graph = MultiDeviceGraph::capture(comms, [&](int rank, Scope& sc) {
      const Communicator& c = comms[static_cast<std::size_t>(rank)];
      RankData& d = data[static_cast<std::size_t>(rank)];
      const int other = 1 - rank;
      sc.record(all_reduce<float>(c, d.x.view(), d.sum.view()) >>
                all_reduce<float>(c, d.x.view(), d.max.view(), ReduceOp::max) >>
                all_gather<float>(c, d.x.view(), d.gathered.view()) >>
                reduce_scatter<float>(c, d.scatter_in.view(), d.scattered.view()) >>
                broadcast<float>(c, d.x.view(), d.broadcast.view(), 1) >>
                send_recv<float>(c, d.x.view(), other, d.exchanged.view(), other) >>
                all_reduce<std::int32_t>(c, d.counts.view(), d.count_sum.view()));
    });
    REQUIRE(graph.size() == 2);
    for (int replay = 0; replay < 2; ++replay) {  // fresh inputs each replay: the graph reads them anew
      std::vector<std::vector<float>> x;
      std::vector<std::vector<float>> scatter_in;
      std::vector<std::vector<std::int32_t>> counts;
      for (std::size_t r = 0; r < 2; ++r) {
        x.push_back(lgtest::random_floats(n));
        scatter_in.push_back(lgtest::random_floats(2 * n));
        std::vector<std::int32_t> c(n);
        for (std::size_t i = 0; i < n; ++i) c[i] = static_cast<std::int32_t>((x[r][i] * 1e6F)) + replay;
        counts.push_back(std::move(c));
        copy_async(streams[r], data[r].x.view(), std::span<const float>(x[r]));
        copy_async(streams[r], data[r].scatter_in.view(), std::span<const float>(scatter_in[r]));
        copy_async(streams[r], data[r].counts.view(), std::span<const std::int32_t>(counts[r]));
        streams[r].synchronize();
      }
      graph.launch();
      for (std::size_t r = 0; r < 2; ++r) {
        const Stream& s = streams[r];
        const std::size_t other = 1 - r;
        // A sum of two floats is exact in float64; NCCL's float sum is that value rounded once.
        const std::vector<float> sum = lgtest::to_host(s, data[r].sum.view());
        const std::vector<float> max = lgtest::to_host(s, data[r].max.view());
        const std::vector<float> gathered = lgtest::to_host(s, data[r].gathered.view());
        const std::vector<float> scattered = lgtest::to_host(s, data[r].scattered.view());
        const std::vector<std::int32_t> count_sum = lgtest::to_host(s, data[r].count_sum.view());
        for (std::size_t i = 0; i < n; ++i) {
          REQUIRE(sum[i] == static_cast<float>(static_cast<double>(x[0][i]) + static_cast<double>(x[1][i])));
          REQUIRE(max[i] == std::max(x[0][i], x[1][i]));
          REQUIRE(gathered[i] == x[0][i]);
          REQUIRE(gathered[n + i] == x[1][i]);
          REQUIRE(scattered[i] == static_cast<float>(static_cast<double>(scatter_in[0][r * n + i]) +
                                                     static_cast<double>(scatter_in[1][r * n + i])));
          REQUIRE(count_sum[i] == counts[0][i] + counts[1][i]);
        }
        CHECK(lgtest::to_host(s, data[r].broadcast.view()) == x[1]);
        CHECK(lgtest::to_host(s, data[r].exchanged.view()) == x[other]);
      }
    }
  }

  TEST_CASE("over two GPUs: an all_reduce inside a while_ body runs every iteration on both ranks") {
    const std::vector<Communicator> comms = fresh_two_ranks();
    if (comms.empty()) return;
    const std::size_t n = 4096 + 3;
    const unsigned iterations = 7;
    std::vector<Stream> streams;
    std::vector<KernelLibrary> libraries;
    std::vector<LoopBound> bounds;
    std::vector<DeviceBuffer<float>> y;
    std::vector<std::vector<float>> y0;
    libraries.reserve(comms.size());  // the bounds' guard kernels belong to them: no reallocation
    for (const Communicator& c : comms) {
      streams.emplace_back(c.device());
      libraries.emplace_back(c.device());
      bounds.emplace_back(libraries.back(), iterations);
      y0.push_back(lgtest::random_floats(n));
      y.push_back(lgtest::to_device(streams.back(), y0.back()));
    }
    // The bodies never clear their conditions: each loop runs `iterations` times, reducing in place each time.
    // NCCL's event nodes in the bodies become empty nodes (conditional.hpp): the loops instantiate and run.
    MultiDeviceGraph graph = MultiDeviceGraph::capture(comms, [&](int rank, Scope& sc) {
      const auto r = static_cast<std::size_t>(rank);
      const Condition more = sc.condition(1);
      sc.record(while_(more, all_reduce(comms[r], y[r].view()), bounds[r]));
    });
    graph.launch();
    // After the first iteration both ranks hold float(y0 + y1) (one rounding); every later one doubles it exactly.
    const double scale = std::ldexp(1.0, static_cast<int>(iterations) - 1);
    for (std::size_t r = 0; r < 2; ++r) {
      CHECK(bounds[r].iterations(streams[r]) == iterations);
      const std::vector<float> got = lgtest::to_host(streams[r], y[r].view());
      for (std::size_t i = 0; i < n; ++i) {
        const auto sum = static_cast<float>(static_cast<double>(y0[0][i]) + static_cast<double>(y0[1][i]));
        REQUIRE(got[i] == static_cast<float>(sum * scale));
      }
    }
  }

  TEST_CASE("over two GPUs: ranks that record different collectives are refused before launch, naming both") {
    const std::vector<Communicator> comms = fresh_two_ranks();
    if (comms.empty()) return;
    DeviceBuffer<float> a(comms[0].device(), 64);
    DeviceBuffer<float> b(comms[1].device(), 64);
    const auto record = [&](std::size_t rank1_count) {
      return MultiDeviceGraph::capture(comms, [&, rank1_count](int rank, Scope& sc) {
        if (rank == 0) sc.record(all_reduce<float>(comms[0], a.view()));
        if (rank == 1) sc.record(all_reduce<float>(comms[1], b.view().subspan(0, rank1_count)));
      });
    };
    // The first collectives connect the ranks, which wait for each other there: a rank refused before it connects
    // would leave the other waiting until the communicators are aborted. Connected, nobody waits in NCCL.
    record(64).launch();
    // Rank 1 reduces fewer elements: NCCL would read past its data or hang; the comparison stops it first.
    CHECK_THROWS_WITH_AS(record(32), doctest::Contains("all_reduce sum of 64 float32"), UsageError);
    CHECK_FALSE(comms[0].aborted());
    CHECK_FALSE(comms[1].aborted());
    MultiDeviceGraph again = record(64);  // the communicators still work
    again.launch();
    again.synchronize_for(10s);
  }

  TEST_CASE("over two GPUs: a collective in symmetric memory reads what the kernel launched early before it wrote") {
    // NCCL 2.28 launches its symmetric kernels early without waiting for the kernel before them; the collective
    // orders itself after that kernel (ops/collective.cpp). Here the kernel before it lets its dependents start at
    // once and writes its output about 100 us later: a collective that started early would reduce stale data.
    const std::vector<Communicator> comms = fresh_two_ranks();
    if (comms.empty()) return;
    std::string why;
    if (!SymmetricBuffer<half>::supported(&why)) {
      MESSAGE("skipped: " << why);
      return;
    }
    const std::size_t n = 8192 + 8;
    const std::size_t rounds = 6;
    const long long cycles = 200'000;
    std::vector<SymmetricBuffer<half>> x = SymmetricBuffer<half>::create_all(comms, n);
    std::vector<SymmetricBuffer<half>> sum = SymmetricBuffer<half>::create_all(comms, n);
    std::vector<Stream> streams;
    std::vector<KernelLibrary> libraries;
    std::vector<DeviceBuffer<half>> in;
    for (const Communicator& c : comms) {
      streams.emplace_back(c.device());
      libraries.emplace_back(c.device(), lgtest::own_kernels({{"late_copy.cu", late_copy_source}},
                                                             lgtest::scratch_directory("late-copy")));
      in.emplace_back(c.device(), n);
    }
    const LaunchConfig config = early(grid_for(n, 256));
    const auto record = [&](std::size_t r) {
      const auto late_copy = libraries[r].get<void(const half*, half*, int, long long)>("late_copy");
      return late_copy(config, in[r].cview(), x[r].view(), static_cast<int>(n), cycles) >>
             all_reduce<half>(comms[r], x[r].cview(), sum[r].view());
    };
    // Per round and rank: the inputs, then what each rank's sum holds.
    std::vector<std::vector<std::vector<half>>> inputs(2 * rounds);
    for (auto& round : inputs) round = {random_small_integers(n), random_small_integers(n)};
    std::vector<std::vector<std::vector<half>>> got(2 * rounds, std::vector<std::vector<half>>(2));
    // Eagerly, one thread per rank.
    lgtest::on_rank_threads(2, [&](std::size_t r) {
      for (std::size_t i = 0; i < rounds; ++i) {
        copy(in[r].view(), std::span<const half>(inputs[i][r])).sync_on(streams[r]);
        record(r).sync_on(streams[r]);
        got[i][r] = lgtest::to_host(streams[r], sum[r].cview());
      }
    });
    // Captured, replayed with each round's inputs.
    MultiDeviceGraph graph = MultiDeviceGraph::capture(
        comms, [&](int rank, Scope& sc) { sc.record(record(static_cast<std::size_t>(rank))); });
    // The kernel's edge to what follows it is a full one (an early launch there would be a programmatic edge).
    for (int r = 0; r < 2; ++r) CHECK(graph.graph(r).edge_counts().programmatic == 0);
    for (std::size_t i = rounds; i < 2 * rounds; ++i) {
      for (std::size_t r = 0; r < 2; ++r) copy(in[r].view(), std::span<const half>(inputs[i][r])).sync_on(streams[r]);
      graph.launch();
      for (std::size_t r = 0; r < 2; ++r) got[i][r] = lgtest::to_host(streams[r], sum[r].cview());
    }
    for (std::size_t k = 0; k < got.size(); ++k) {
      for (std::size_t r = 0; r < 2; ++r) {
        CAPTURE(k);  // rounds from `rounds` on are graph replays
        CAPTURE(r);
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < n; ++i) {
          const float expect = inputs[k][0][i].to_float() + inputs[k][1][i].to_float();
          wrong += got[k][r][i].to_float() != expect ? 1 : 0;
        }
        CHECK(wrong == 0);
      }
    }
  }
}
