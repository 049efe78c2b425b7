// NCCL collectives as ops (ops/collective.hpp): sizes and peers checked when built (host), and on the GPU
// every collective eager and captured on a communicator of one rank, exactly equal to what one rank's collective
// is (its own data). With one rank NCCL copies instead of running its ring kernels; the two-rank arithmetic of
// every kind is tested on the two-GPU machine (tests/graph/multi_device_graph.cpp), and here what goes wrong
// between two ranks: a stream of the other GPU, a rank whose peer never comes.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "common/gpu.hpp"
#include "common/nccl.hpp"

using namespace lazygraph;
using namespace std::chrono_literals;
using detail::CollectiveKind;

static_assert(GraphNode<CollectiveOp<float>> && !BuildableNode<CollectiveOp<float>>);
static_assert(GraphNode<PointToPointOp<half>> && !BuildableNode<PointToPointOp<half>>);
static_assert(CollectiveElement<half> && CollectiveElement<bfloat16> && CollectiveElement<std::int32_t>);
static_assert(!CollectiveElement<char16_t> && !CollectiveElement<bool>);

TEST_CASE("collective sizes are checked against the rule of each kind and the communicator's size") {
  CHECK_NOTHROW(detail::check_collective(CollectiveKind::all_reduce, 8, 8, 2, 0));
  CHECK_THROWS_WITH_AS(detail::check_collective(CollectiveKind::all_reduce, 8, 4, 2, 0),
                       doctest::Contains("all_reduce: send and recv must have the same size (send 8 elements, "
                                         "recv 4, 2 ranks)"),
                       UsageError);
  CHECK_NOTHROW(detail::check_collective(CollectiveKind::reduce_scatter, 8, 4, 2, 0));
  CHECK_THROWS_WITH_AS(detail::check_collective(CollectiveKind::reduce_scatter, 8, 8, 2, 0),
                       doctest::Contains("send must hold ranks x recv elements, 16"), UsageError);
  CHECK_NOTHROW(detail::check_collective(CollectiveKind::all_gather, 4, 8, 2, 0));
  CHECK_THROWS_WITH_AS(detail::check_collective(CollectiveKind::all_gather, 4, 4, 2, 0),
                       doctest::Contains("recv must hold ranks x send elements, 8"), UsageError);
  CHECK_THROWS_WITH_AS(detail::check_collective(CollectiveKind::broadcast, 4, 4, 2, 2),
                       doctest::Contains("root 2 is not a rank of a communicator of 2"), UsageError);
  CHECK_THROWS_AS(detail::check_collective(CollectiveKind::broadcast, 4, 4, 2, -1), UsageError);
  CHECK_THROWS_WITH_AS(detail::check_peer("send", 3, 2), doctest::Contains("send: peer 3 is not a rank"), UsageError);
}

TEST_CASE("a collective on another device's stream is refused, naming both devices") {
  CHECK_THROWS_WITH_AS(detail::check_collective_device("all_reduce", 1, 0, "rank 1 of 2 on device 1"),
                       doctest::Contains("all_reduce on a stream of device 0 with communicator rank 1 of 2 on device "
                                         "1"),
                       UsageError);
  CHECK_NOTHROW(detail::check_collective_device("all_reduce", 1, 1, "rank 1 of 2 on device 1"));
}

TEST_CASE("what the ranks compare names the kind, the reduction, the count, the type and the root") {
  using detail::nccl::DataType;
  CHECK(detail::collective_signature(CollectiveKind::all_reduce, DataType::float16, 1024, 1024, ReduceOp::sum, 0) ==
        "all_reduce sum of 1024 float16");
  CHECK(detail::collective_signature(CollectiveKind::all_gather, DataType::bfloat16, 8, 16, ReduceOp::sum, 0) ==
        "all_gather of 8 bfloat16");
  CHECK(detail::collective_signature(CollectiveKind::broadcast, DataType::int32, 4, 4, ReduceOp::sum, 1) ==
        "broadcast of 4 int32 from rank 1");
  CHECK(detail::collective_signature(CollectiveKind::reduce_scatter, DataType::float32, 8, 4, ReduceOp::max, 0) ==
        "reduce_scatter max of 4 float32");
}

namespace {

Communicator one_rank() { return Communicator::create_all(std::vector<Device>{lgtest::device()}).at(0); }

template <class T>
std::vector<T> fresh(std::size_t n) {
  const std::vector<float> f = lgtest::random_floats(n);
  std::vector<T> out;
  out.reserve(n);
  for (float v : f) {
    if constexpr (std::is_integral_v<T>) {
      out.push_back(static_cast<T>(v * 1000.0F));
    } else if constexpr (std::is_floating_point_v<T>) {
      out.push_back(v);
    } else {
      out.push_back(T::from_float(v));  // half, bfloat16 (T(v) would aggregate-initialise the bits)
    }
  }
  return out;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T>
void all_kinds_on_one_rank() {
  const Communicator comm = one_rank();
  const Stream& s = lgtest::stream();
  const std::size_t n = 1000 + 3;
  const std::vector<T> x = fresh<T>(n);
  DeviceBuffer<T> in = lgtest::to_device(s, x);
  DeviceBuffer<T> out(s.device(), n);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
    fill(out.view(), T{}).sync_on(s);
    all_reduce<T>(comm, in.view(), out.view(), op).sync_on(s);
    CHECK(same_bits(lgtest::to_host(s, out.view()), x));
  }
  fill(out.view(), T{}).sync_on(s);
  all_gather<T>(comm, in.view(), out.view()).sync_on(s);
  CHECK(same_bits(lgtest::to_host(s, out.view()), x));
  fill(out.view(), T{}).sync_on(s);
  reduce_scatter<T>(comm, in.view(), out.view()).sync_on(s);
  CHECK(same_bits(lgtest::to_host(s, out.view()), x));
  fill(out.view(), T{}).sync_on(s);
  broadcast<T>(comm, in.view(), out.view(), 0).sync_on(s);
  CHECK(same_bits(lgtest::to_host(s, out.view()), x));
  fill(out.view(), T{}).sync_on(s);
  send_recv<T>(comm, in.view(), 0, out.view(), 0).sync_on(s);
  CHECK(same_bits(lgtest::to_host(s, out.view()), x));
  all_reduce(comm, in.view()).sync_on(s);  // in place
  CHECK(same_bits(lgtest::to_host(s, in.view()), x));
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("every collective on one rank, eagerly, in half, bfloat16, float and int32: exactly its own data") {
    if (!lgtest::have_nccl()) return;
    all_kinds_on_one_rank<half>();
    all_kinds_on_one_rank<bfloat16>();
    all_kinds_on_one_rank<float>();
    all_kinds_on_one_rank<std::int32_t>();
  }

  TEST_CASE("a captured all_reduce between kernels replays with each replay's data, and keeps its communicator") {
    if (!lgtest::have_nccl()) return;
    const Stream& s = lgtest::stream();
    const std::size_t n = 4096 + 5;
    const std::vector<float> x0 = lgtest::random_floats(n);
    const std::vector<float> y0 = lgtest::random_floats(n);
    DeviceBuffer<float> x = lgtest::to_device(s, x0);
    DeviceBuffer<float> y = lgtest::to_device(s, y0);
    DeviceBuffer<float> z(s.device(), n);
    DeviceBuffer<float> w(s.device(), n);
    std::optional<CudaGraph<>> graph;
    {
      const Communicator comm = one_rank();  // the graph keeps it alive
      const auto axpy = lgtest::axpy();
      graph.emplace(CudaGraph<>::scope(s, [&](Scope& sc) {
        sc.record(axpy(grid_for(n, 256), 0.5F, x.cview(), y.view(), static_cast<int>(n)) >>
                  all_reduce<float>(comm, y.view(), z.view()) >>
                  all_reduce<float>(comm, z.view(), w.view(), ReduceOp::max));
      }));
    }
    for (int replay = 1; replay <= 3; ++replay) {
      graph->launch();
      const std::vector<double> expect = lgtest::axpy_reference(0.5F, x0, y0, replay);
      const std::vector<float> got = lgtest::to_host(s, w.view());
      for (std::size_t i = 0; i < n; ++i) REQUIRE(got[i] == static_cast<float>(expect[i]));
    }
  }

  TEST_CASE("a while_ body may hold collectives: each iteration reduces what the kernel before it wrote") {
    if (!lgtest::have_nccl()) return;
    const Stream& s = lgtest::stream();
    const std::size_t n = 2048 + 7;
    const std::vector<float> x0 = lgtest::random_floats(n);
    const std::vector<float> y0 = lgtest::random_floats(n);
    DeviceBuffer<float> x = lgtest::to_device(s, x0);
    DeviceBuffer<float> y = lgtest::to_device(s, y0);
    DeviceBuffer<float> z(s.device(), n);
    const Communicator comm = one_rank();
    const auto axpy = lgtest::axpy();
    const LoopBound bound(lgtest::kernels(), 6);
    // The body never clears the condition: the bound ends the loop after 6 iterations.
    CudaGraph<> graph = CudaGraph<>::scope(s, [&](Scope& sc) {
      const Condition more = sc.condition(1);
      sc.record(while_(more,
                       axpy(grid_for(n, 256), 0.5F, x.cview(), y.view(), static_cast<int>(n)) >>
                           all_reduce<float>(comm, y.view(), z.view()) >> copy(y.view(), z.cview()),
                       bound));
    });
    graph.launch();
    CHECK(bound.iterations(s) == 6);
    const std::vector<double> expect = lgtest::axpy_reference(0.5F, x0, y0, 6);
    const std::vector<float> got = lgtest::to_host(s, y.view());
    for (std::size_t i = 0; i < n; ++i) REQUIRE(got[i] == static_cast<float>(expect[i]));
  }

  TEST_CASE("a bounded wait that runs out aborts the communicator and names it; it then refuses collectives") {
    if (!lgtest::have_nccl()) return;
    const Communicator comm = one_rank();
    const Stream stream(lgtest::device());
    DeviceBuffer<float> a(stream.device(), 16);
    // Queued, not waited for: the stream stays busy for 300 ms. The context lives to the end of the test, since
    // destroying it waits for the call.
    ExecContext eager(stream, false);
    host_call("slow peer", [] { std::this_thread::sleep_for(300ms); }).execute(eager);
    CHECK_THROWS_WITH_AS(comm.wait(stream, 20ms), doctest::Contains("did not finish within 20 ms"), TimeoutError);
    CHECK(comm.aborted());
    CHECK_THROWS_WITH_AS(all_reduce(comm, a.view()).sync_on(stream), doctest::Contains("was aborted"), UsageError);
    stream.synchronize();
  }

  TEST_CASE("a collective reads its send span and writes its recv span: all() refuses it beside a reader of recv") {
    if (!lgtest::have_nccl()) return;
    const Communicator comm = one_rank();
    DeviceBuffer<float> a(lgtest::device(), 16);
    DeviceBuffer<float> b(lgtest::device(), 16);
    DeviceBuffer<float> c(lgtest::device(), 16);
    const AccessSet set = accesses_of(all_reduce<float>(comm, a.view(), b.view()));
    REQUIRE(set.entries().size() == 2);
    CHECK_FALSE(set.entries()[0].writes);
    CHECK(set.entries()[0].begin == a.view().address());
    CHECK(set.entries()[1].writes);
    CHECK(set.entries()[1].begin == b.view().address());
    CHECK_THROWS_WITH_AS((void)all(all_reduce<float>(comm, a.view(), b.view()), copy(c.view(), b.view())),
                         doctest::Contains("all_reduce"), UsageError);
    CHECK_NOTHROW((void)all(all_reduce<float>(comm, a.view(), b.view()), copy(c.view(), a.view())));
  }

  TEST_CASE("a collective op on a recording that cannot capture (CudaGraph::build) is refused") {
    if (!lgtest::have_nccl()) return;
    const Communicator comm = one_rank();
    DeviceBuffer<float> a(lgtest::device(), 16);
    CHECK_THROWS_AS(
        (void)CudaGraph<>::build(lgtest::device(), [&](Scope& sc) { sc.record(all_reduce(comm, a.view())); }),
        UsageError);
  }

  TEST_CASE(
      "over two GPUs: ranks made from an id, one thread each as one process per GPU would, all_reduce eagerly and in "
      "a captured graph replayed with new data") {
    // Communicator(device, rank, ranks, id) (ncclCommInitRank) must compute what create_all's ranks do.
    if (!lgtest::have_two_ranks()) return;
    const CommunicatorId id = CommunicatorId::create();
    const std::size_t n = 3000 + 7;
    const std::vector<std::vector<float>> first{lgtest::random_floats(n), lgtest::random_floats(n)};
    const std::vector<std::vector<float>> second{lgtest::random_floats(n), lgtest::random_floats(n)};
    std::vector<std::vector<float>> eager(2);
    std::vector<std::vector<float>> replayed(2);
    lgtest::on_rank_threads(2, [&](std::size_t i) {
      const int r = static_cast<int>(i);
      const Communicator comm(Device::get(r), r, 2, id);
      const Stream stream(comm.device());
      DeviceBuffer<float> data = lgtest::to_device(stream, first[i]);
      all_reduce(comm, data.view()).sync_on(stream);
      eager[i] = lgtest::to_host(stream, data.cview());
      auto graph = CudaGraph<>::capture(stream, all_reduce(comm, data.view()));
      copy(data.view(), std::span<const float>(second[i])).sync_on(stream);
      graph.launch();
      comm.wait(stream, 30s);
      replayed[i] = lgtest::to_host(stream, data.cview());
    });
    for (std::size_t r = 0; r < 2; ++r) {
      CAPTURE(r);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) {
        wrong += eager[r][i] != first[0][i] + first[1][i] ? 1 : 0;
        wrong += replayed[r][i] != second[0][i] + second[1][i] ? 1 : 0;
      }
      CHECK(wrong == 0);
    }
  }

  TEST_CASE("over two GPUs: a stream of the other GPU is refused; a rank left alone gets a TimeoutError, no hang") {
    if (!lgtest::have_two_ranks()) return;
    const std::vector<Communicator> comms =
        Communicator::create_all(std::vector<Device>{Device::get(0), Device::get(1)});
    std::vector<Stream> streams;
    streams.reserve(comms.size());
    for (const Communicator& c : comms) streams.emplace_back(c.device());
    const std::size_t n = 4096 + 1;
    const std::vector<std::vector<float>> x{lgtest::random_floats(n), lgtest::random_floats(n)};
    std::vector<DeviceBuffer<float>> data;
    for (std::size_t r = 0; r < 2; ++r) data.push_back(lgtest::to_device(streams[r], x[r]));

    CHECK_THROWS_WITH_AS(all_reduce(comms[0], data[1].view()).sync_on(streams[1]),
                         doctest::Contains("on a stream of device 1 with communicator rank 0 of 2 on device 0"),
                         UsageError);

    // Both ranks at once, eagerly, each from its own thread (as one process per GPU would): connected and summed.
    lgtest::on_rank_threads(2, [&](std::size_t r) { all_reduce(comms[r], data[r].view()).sync_on(streams[r]); });
    for (std::size_t r = 0; r < 2; ++r) {
      const std::vector<float> got = lgtest::to_host(streams[r], data[r].view());
      for (std::size_t i = 0; i < n; ++i) {
        REQUIRE(got[i] == static_cast<float>(static_cast<double>(x[0][i]) + static_cast<double>(x[1][i])));
      }
    }

    // Rank 1 never comes: rank 0's all_reduce waits on the GPU for it; the bounded wait aborts and says so.
    {
      ExecContext eager(streams[0], false);
      all_reduce(comms[0], data[0].view()).execute(eager);
    }
    CHECK_THROWS_WITH_AS(comms[0].wait(streams[0], 500ms), doctest::Contains("did not finish within 500 ms"),
                         TimeoutError);
    CHECK(comms[0].aborted());
    streams[0].synchronize();  // the aborted collective left the GPU
    comms[1].abort();          // its peer is gone: nothing it could do would finish
  }
}
