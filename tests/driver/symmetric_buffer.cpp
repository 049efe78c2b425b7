// SymmetricBuffer (driver/symmetric_buffer.hpp): refused without NCCL's symmetric memory or with ranks
// missing (host, no-nccl); on the GPU, one rank's buffer is ordinary device memory that collectives and kernels
// use, and with two GPUs an all-reduce on the two ranks' buffers (NCCL's symmetric kernels) equals float64.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <string>
#include <vector>

#include "common/gpu.hpp"
#include "common/nccl.hpp"

using namespace lazygraph;

TEST_CASE("SymmetricBuffer::create_all refuses no communicators and an empty buffer before touching NCCL") {
  CHECK_THROWS_WITH_AS(SymmetricBuffer<float>::create_all(std::span<const Communicator>{}, 8),
                       doctest::Contains("no communicators"), UsageError);
  CHECK_THROWS_WITH_AS(SymmetricBuffer<float>::create_all(std::span<const Communicator>{}, 0),
                       doctest::Contains("count 0"), UsageError);
}

TEST_SUITE("no-nccl") {
  TEST_CASE("without NCCL there is no symmetric memory, and the reason says where NCCL was looked for") {
    std::string why;
    CHECK_FALSE(SymmetricBuffer<half>::supported(&why));
    CHECK(why.find("cannot load NCCL") != std::string::npos);  // and from where (another test may have moved it)
  }
}

namespace {

/// Whether this NCCL has symmetric memory; otherwise false after a MESSAGE saying why.
bool have_symmetric() {
  if (!lgtest::have_nccl()) return false;
  std::string why;
  if (SymmetricBuffer<float>::supported(&why)) return true;
  MESSAGE("skipped: " << why);
  return false;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("one rank's SymmetricBuffer is zeroed device memory that copies, kernels and a captured all_reduce use") {
    if (!have_symmetric()) return;
    const std::vector<Communicator> comms = Communicator::create_all(std::vector<Device>{lgtest::device()});
    const Stream& s = lgtest::stream();
    const std::size_t n = 4096 + 3;
    const std::vector<float> x0 = lgtest::random_floats(n);
    const std::vector<float> y0 = lgtest::random_floats(n);
    std::vector<SymmetricBuffer<float>> y = SymmetricBuffer<float>::create_all(comms, n);
    REQUIRE(y.size() == 1);
    CHECK(y[0].size() == n);
    CHECK(y[0].device().ordinal() == lgtest::device().ordinal());
    CHECK(lgtest::to_host(s, y[0].cview()) == std::vector<float>(n, 0.0F));  // zeroed when created
    const DeviceBuffer<float> x = lgtest::to_device(s, x0);
    DeviceBuffer<float> out(s.device(), n);
    copy_async(s, y[0].view(), std::span<const float>(y0));
    const auto axpy = lgtest::axpy();  // loaded before the capture
    CudaGraph<> graph = CudaGraph<>::scope(s, [&](Scope& sc) {
      sc.record(axpy(grid_for(n, 256), 0.5F, x.cview(), y[0].view(), static_cast<int>(n)) >>
                all_reduce<float>(comms[0], y[0].cview(), out.view()));
    });
    for (int replay = 1; replay <= 2; ++replay) {
      graph.launch();
      const std::vector<double> want = lgtest::axpy_reference(0.5F, x0, y0, replay);
      const std::vector<float> got = lgtest::to_host(s, out.view());
      for (std::size_t i = 0; i < n; ++i) REQUIRE(got[i] == static_cast<float>(want[i]));
    }
    // A buffer outlives its handle while a span of it does (the graph above recorded one).
    const DeviceSpan<float> kept = y[0].view();
    y.clear();
    copy_async(s, kept, std::span<const float>(x0));
    CHECK(lgtest::to_host(s, kept) == x0);
  }

  TEST_CASE("SymmetricBuffer::create makes one rank's buffer, registered with its peers (here none)") {
    if (!lgtest::have_nccl()) return;
    std::string why;
    if (!SymmetricBuffer<float>::supported(&why)) {
      MESSAGE("skipped: " << why);
      return;
    }
    const std::vector<Communicator> comms = Communicator::create_all(std::vector<Device>{lgtest::device()});
    CHECK_THROWS_WITH_AS(SymmetricBuffer<float>::create(comms[0], 0), doctest::Contains("count 0"), UsageError);
    const SymmetricBuffer<float> b = SymmetricBuffer<float>::create(comms[0], 1000);
    CHECK(b.size() == 1000);
    const Stream stream(lgtest::device());
    CHECK(lgtest::to_host(stream, b.cview()) == std::vector<float>(1000, 0.0F));  // zeroed when created
    const auto values = lgtest::random_floats(1000);
    copy(b.view(), std::span<const float>(values)).sync_on(stream);
    all_reduce(comms[0], b.view()).sync_on(stream);  // one rank: the sum is the buffer itself
    CHECK(lgtest::to_host(stream, b.cview()) == values);
  }

  TEST_CASE("over two GPUs: an all_reduce of SymmetricBuffers equals float64; ranks must all be there") {
    if (!have_symmetric()) return;
    if (Device::count() < 2) {
      MESSAGE("skipped: two GPUs needed for two ranks; this machine has " << Device::count());
      return;
    }
    const std::vector<Communicator> comms =
        Communicator::create_all(std::vector<Device>{Device::get(0), Device::get(1)});
    CHECK_THROWS_WITH_AS(SymmetricBuffer<half>::create_all(std::span<const Communicator>(comms).subspan(1), 8),
                         doctest::Contains("every rank of one Communicator::create_all"), UsageError);
    const std::size_t n = 4096;  // a decode step's all-reduce: d halves
    std::vector<SymmetricBuffer<half>> x = SymmetricBuffer<half>::create_all(comms, n);
    std::vector<std::vector<half>> x0;
    for (std::size_t r = 0; r < 2; ++r) {
      x0.push_back(lgtest::random_halves(n));
      const Stream s(x[r].device());
      copy_async(s, x[r].view(), std::span<const half>(x0[r]));
      s.synchronize();
    }
    MultiDeviceGraph graph = MultiDeviceGraph::capture(comms, [&](int rank, Scope& sc) {
      sc.record(all_reduce(comms[static_cast<std::size_t>(rank)], x[static_cast<std::size_t>(rank)].view()));
    });
    graph.launch();
    for (std::size_t r = 0; r < 2; ++r) {
      const Stream s(x[r].device());
      const std::vector<half> got = lgtest::to_host(s, x[r].view());
      for (std::size_t i = 0; i < n; ++i) {
        // NCCL's symmetric kernels add in fp32 and round once: the float64 sum rounded to fp16, within its rounding.
        const double want = static_cast<double>(x0[0][i].to_float()) + static_cast<double>(x0[1][i].to_float());
        REQUIRE(std::abs(static_cast<double>(got[i].to_float()) - want) <= std::abs(want) * 1e-3 + 1e-7);
      }
    }
  }
}
