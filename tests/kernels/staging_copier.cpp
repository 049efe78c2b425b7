// KernelStagingCopier (kernels/staging_copier.hpp): staging copies by kernel where the bytes are whole words,
// by memcpy elsewhere, the same bytes either way, counted as host transfers either way.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

TEST_SUITE("gpu") {
  TEST_CASE("a staging copy with the kernel copier moves the bytes a memcpy does, whole words or not") {
    const auto copier = std::make_shared<const KernelStagingCopier>(lgtest::kernels());
    for (const std::size_t n : {std::size_t{4096}, std::size_t{1001}}) {  // 1001 halves: not whole words, memcpy
      CAPTURE(n);
      const std::vector<float> values = lgtest::random_floats(n);
      StagingBuffer<half> in(lgtest::device(), n);
      StagingBuffer<half> out(lgtest::device(), n);
      for (std::size_t i = 0; i < n; ++i) in.span()[i] = half::from_float(values[i]);
      DeviceBuffer<half> d(lgtest::device(), n);
      auto graph = CudaGraph<>::build(lgtest::device(), StagedUploadOp<half>(d.view(), in.cview(), copier) >>
                                                            StagedDownloadOp<half>(out.view(), d.cview(), copier));
      graph.launch();
      CHECK(std::memcmp(out.span().data(), in.span().data(), n * sizeof(half)) == 0);
      CHECK(graph.transfers().bytes_to_device_per_replay == n * sizeof(half));
      CHECK(graph.transfers().bytes_to_host_per_replay == n * sizeof(half));
      const bool whole_words = n * sizeof(half) % 4 == 0;
      const auto kinds = graph.node_kinds();
      CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::kernel) == (whole_words ? 2 : 0));
      CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::memcpy) == (whole_words ? 0 : 2));
    }
  }
}
