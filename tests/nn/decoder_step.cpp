// The decode step's layers (nn/decoder_step.hpp) as a step graph holds them: the shared memory carveout each attention
// launch asks for, read back from the captured graph's kernel nodes. GPU only.
#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include <lazygraph/nn.hpp>

#include "common/gpu.hpp"
#include "common/nn.hpp"
#include "lazygraph/detail/driver/driver_api.hpp"

using namespace lazygraph;
using namespace lazygraph::nn;

namespace {

DecoderConfig small_config() {
  DecoderConfig c;
  c.d = 512;
  c.heads = 8;
  c.kv_heads = 2;
  c.layers = 3;
  c.ffn = 1024;
  c.vocab = 512;
  c.context = 256;
  c.max_batch = kMaxRows;
  c.prefill_chunk = 0;
  return c;
}

/// The carveouts the step graph of `rows` rows asks its kernels for, in percent (a launch without one reads 0).
std::vector<unsigned> carveouts(BasicDecoder<half>& decoder, int rows) {
  std::vector<unsigned> out;
  for (const auto& node :
       lazygraph::detail::driver::graph_kernel_attributes(decoder.graph(rows).shared_state()->template_graph())) {
    out.push_back(node.carveout);
  }
  return out;
}

std::size_t count_of(const std::vector<unsigned>& v, unsigned value) {
  std::size_t n = 0;
  for (const unsigned x : v) n += x == value ? 1 : 0;
  return n;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("the step's attention asks for the carveout measured fastest: half for more rows and the grouped kernels") {
    // One block a head on the contiguous cache: 0 (the most L1, which reads back as none) after the fused dense Q/K/V
    // of one row, 50 for more rows, the driver's split unfused; the paged cache's grouped kernels 50 at any row count.
    // Every other kernel keeps the driver's split. docs/decode_performance.md has the measurements.
    const int layers = small_config().layers;
    for (const int rows : {1, 2, 8}) {
      CAPTURE(rows);
      DecoderConfig fused = small_config();
      fused.attention_blocks = 1;
      BasicDecoder<half> contiguous(lgtest::stream(), lgtest::nn_kernels(), fused);
      const std::vector<unsigned> got = carveouts(contiguous, rows);
      CHECK(count_of(got, 50) == (rows > 1 ? static_cast<std::size_t>(layers) : 0U));
      CHECK(count_of(got, 0) + count_of(got, 50) == got.size());

      DecoderConfig unfused = fused;
      unfused.fused = false;
      BasicDecoder<half> plain(lgtest::stream(), lgtest::nn_kernels(), unfused);
      const std::vector<unsigned> none = carveouts(plain, rows);
      CHECK(count_of(none, 0) == none.size());

      DecoderConfig paged = small_config();
      paged.attention_blocks = 0;
      paged.kv_block_size = 16;
      paged.kv_blocks = kMaxRows * (paged.context / 16);
      BasicDecoder<half> grouped(lgtest::stream(), lgtest::nn_kernels(), paged);
      const std::vector<unsigned> half_split = carveouts(grouped, rows);
      CHECK(count_of(half_split, 50) == static_cast<std::size_t>(layers));
      CHECK(count_of(half_split, 0) + count_of(half_split, 50) == half_split.size());
    }
  }
}
