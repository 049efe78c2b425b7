// nn::PagedAttention (kernels/nn/paged_attention.cu, paged_attention_grouped.cu): the host checks and the choice of
// splits without a GPU; on a GPU, attention through shuffled block tables against float64 (rows at position 0, at a
// block boundary and near 5000, rows of one sequence appending in the same launch), the bits of the contiguous cache's
// kernels for the same keys and values (and the grouped kernels over the contiguous cache the paged grouped kernels'
// bits), the split kernel against the unsplit one, the grouped kernel (the wide step's: splits of each row's own
// positions, padding rows) against float64, and a captured graph replayed after its tables changed.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/gpu.hpp"
#include "common/nn.hpp"

#include <lazygraph/nn/paged_attention.hpp>

using namespace lazygraph;

namespace {

static_assert(GraphNode<nn::PagedAttention<half>::AttentionOp>, "a paged attention op may be recorded into a graph");
static_assert(GraphNode<nn::PagedAttention<bfloat16>::SplitOp>);
static_assert(GraphNode<nn::PagedAttention<half>::AppendOp>);

template <class T>
DeviceSpan<T> fake_span(CUdeviceptr address, std::size_t size) {
  return DeviceSpan<T>(address, size);
}

constexpr CUdeviceptr gib = CUdeviceptr{1} << 30;

nn::PagedAttentionShape good_shape() {
  return {.rows = 4, .heads = 8, .kv_heads = 2, .head_dim = 64, .block_size = 16, .blocks = 100, .table_width = 32};
}

/// A cache of the right sizes for `s` at made-up 1 GiB-aligned addresses (never dereferenced).
nn::PagedKvCache<half> fake_cache(const nn::PagedAttentionShape& s) {
  const auto pool = static_cast<std::size_t>(s.blocks) * s.kv_heads * s.block_size * s.head_dim;
  return {fake_span<half>(1 * gib, pool), fake_span<half>(2 * gib, pool),
          fake_span<const int>(3 * gib, static_cast<std::size_t>(s.rows)),
          fake_span<const int>(4 * gib, static_cast<std::size_t>(s.rows) * s.table_width)};
}

std::size_t q_size(const nn::PagedAttentionShape& s) { return static_cast<std::size_t>(s.rows) * s.heads * s.head_dim; }

/// The message check_paged_attend (or, with splits > 0, check_paged_attend_split) gives; "(accepted)" for none.
std::string attend_refusal(const nn::PagedAttentionShape& s, const nn::PagedKvCache<half>& cache, int splits = 0,
                           DeviceSpan<const half> q = {}, DeviceSpan<half> out = {}) {
  if (q.size() == 0) q = fake_span<const half>(5 * gib, q_size(s));
  if (out.size() == 0) out = fake_span<half>(6 * gib, q_size(s));
  try {
    if (splits == 0) {
      nn::check_paged_attend(s, q, out, cache);
    } else {
      const auto partials = fake_span<float>(7 * gib, nn::PagedAttention<half>::split_partials(s, splits));
      const auto counters = fake_span<unsigned>(8 * gib, static_cast<std::size_t>(s.rows) * s.heads);
      nn::check_paged_attend_split(s, q, out, partials, counters, cache, splits);
    }
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

/// The signature of a Kernel handle type.
template <class Handle>
struct SignatureOfHandle;
template <class Signature>
struct SignatureOfHandle<Kernel<Signature>> {
  using type = Signature;
};
template <class Handle>
using SignatureOf = typename SignatureOfHandle<Handle>::type;

std::string shape_refusal(const nn::PagedAttentionShape& s) { return attend_refusal(s, fake_cache(s)); }

}  // namespace

TEST_CASE("paged attention accepts well-formed spans on the host, unsplit, split and appending") {
  const auto s = good_shape();
  CHECK(attend_refusal(s, fake_cache(s)) == "(accepted)");
  CHECK(attend_refusal(s, fake_cache(s), 8) == "(accepted)");
  const auto kv = static_cast<std::size_t>(s.rows) * s.kv_heads * s.head_dim;
  CHECK_NOTHROW(
      nn::check_paged_append(s, fake_span<const half>(5 * gib, kv), fake_span<const half>(6 * gib, kv), fake_cache(s)));
  auto b32 = s;
  b32.block_size = 32;
  CHECK(shape_refusal(b32) == "(accepted)");
}

TEST_CASE("paged attention refuses a shape the kernels cannot serve, naming the field and its value") {
  const auto with = [](auto change) {
    auto s = good_shape();
    change(s);
    return shape_refusal(s);
  };
  for (const int head_dim : {0, 12, 264}) {
    CAPTURE(head_dim);
    CHECK(with([&](auto& s) { s.head_dim = head_dim; }).find("head_dim " + std::to_string(head_dim) + " is not") !=
          std::string::npos);
  }
  for (const int block_size : {8, 64, 0}) {
    CAPTURE(block_size);
    CHECK(with([&](auto& s) {
            s.block_size = block_size;
          }).find("block_size " + std::to_string(block_size) + " is not 16 or 32") != std::string::npos);
  }
  CHECK(with([](auto& s) { s.heads = 7; }).find("heads 7 is not a multiple of kv_heads 2") != std::string::npos);
  CHECK(with([](auto& s) { s.blocks = 0; }).find("blocks is 0") != std::string::npos);
  CHECK(with([](auto& s) { s.table_width = 0; }).find("table_width is 0") != std::string::npos);
  CHECK(with([](auto& s) { s.rows = 0; }).find("rows is 0") != std::string::npos);
  CHECK(with([](auto& s) { s.window = -1; }).find("window is -1") != std::string::npos);
  CHECK(with([](auto& s) { s.scale = -1; }).find("scale") != std::string::npos);
}

TEST_CASE("paged attention refuses spans of the wrong size, alignment or overlap, naming the span") {
  const auto s = good_shape();
  auto cache = fake_cache(s);
  cache.k_pool = fake_span<half>(1 * gib, cache.k_pool.size() - 1);
  CHECK(attend_refusal(s, cache).find("k_pool has") != std::string::npos);
  cache = fake_cache(s);
  cache.v_pool = fake_span<half>(2 * gib + 8, cache.v_pool.size());
  CHECK(attend_refusal(s, cache).find("v_pool is not 16-byte aligned") != std::string::npos);
  cache = fake_cache(s);
  cache.tables = fake_span<const int>(4 * gib, cache.tables.size() + 1);
  CHECK(attend_refusal(s, cache).find("tables has 129 elements; rows x table_width = 128") != std::string::npos);
  cache = fake_cache(s);
  cache.positions = fake_span<const int>(3 * gib, 3);
  CHECK(attend_refusal(s, cache).find("positions has 3 elements") != std::string::npos);
  CHECK(attend_refusal(s, fake_cache(s), 0, fake_span<const half>(5 * gib + 2, q_size(s)))
            .find("q is not 16-byte aligned") != std::string::npos);
  CHECK(attend_refusal(s, fake_cache(s), 0, {}, fake_span<half>(1 * gib, q_size(s))).find("out overlaps k_pool") !=
        std::string::npos);
  CHECK(attend_refusal(s, fake_cache(s), 0, {}, fake_span<half>(6 * gib, q_size(s) + 8)).find("out has") !=
        std::string::npos);
  const auto kv = static_cast<std::size_t>(s.rows) * s.kv_heads * s.head_dim;
  CHECK_THROWS_WITH_AS(nn::check_paged_append(s, fake_span<const half>(5 * gib, kv - 1),
                                              fake_span<const half>(6 * gib, kv), fake_cache(s)),
                       doctest::Contains("k has"), UsageError);
}

TEST_CASE("paged rope_append accepts the stacked projection of the shape's rows and refuses a span that does not fit") {
  const nn::PagedAttentionShape s = good_shape();
  const std::size_t width = static_cast<std::size_t>(s.heads + 2 * s.kv_heads) * s.head_dim;
  const auto qkv = fake_span<const half>(5 * gib, static_cast<std::size_t>(s.rows) * width);
  const auto q = fake_span<half>(6 * gib, q_size(s));
  const auto count = fake_span<const int>(7 * gib, 1);
  const auto frequencies = fake_span<const float>(8 * gib, static_cast<std::size_t>(s.head_dim / 2));
  const auto bias = fake_span<const half>(9 * gib, width);
  const auto refusal = [&](DeviceSpan<const half> qkv_, DeviceSpan<const half> bias_, DeviceSpan<half> q_,
                           DeviceSpan<const int> count_, DeviceSpan<const float> frequencies_) -> std::string {
    try {
      nn::check_paged_rope_append(s, qkv_, bias_, q_, fake_cache(s), count_, frequencies_);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  CHECK(refusal(qkv, {}, q, count, frequencies) == "(accepted)");
  CHECK(refusal(qkv, bias, q, count, frequencies) == "(accepted)");
  CHECK(refusal(qkv.subspan(0, qkv.size() - 8), {}, q, count, frequencies).find("qkv has") != std::string::npos);
  CHECK(refusal(qkv, bias.subspan(0, 8), q, count, frequencies).find("bias has 8 elements") != std::string::npos);
  CHECK(refusal(qkv, {}, q.subspan(0, 64), count, frequencies).find("q has 64 elements") != std::string::npos);
  CHECK(refusal(qkv, {}, q, fake_span<const int>(7 * gib, 2), frequencies).find("count has 2 elements") !=
        std::string::npos);
  CHECK(refusal(qkv, {}, q, count, frequencies.subspan(0, 31)).find("frequencies has 31 elements") !=
        std::string::npos);
  CHECK(refusal(qkv, {}, fake_span<half>(5 * gib, q_size(s)), count, frequencies).find("q overlaps qkv") !=
        std::string::npos);
}

TEST_CASE("paged qk_norm_rope_append takes gains of a head or of the whole q and k, and refuses others by name") {
  const nn::PagedAttentionShape s = good_shape();
  const std::size_t width = static_cast<std::size_t>(s.heads + 2 * s.kv_heads) * s.head_dim;
  const auto qkv = fake_span<const half>(5 * gib, static_cast<std::size_t>(s.rows) * width);
  const auto q = fake_span<half>(6 * gib, q_size(s));
  const auto count = fake_span<const int>(7 * gib, 1);
  const auto frequencies = fake_span<const float>(8 * gib, static_cast<std::size_t>(s.head_dim / 2));
  const auto head = static_cast<std::size_t>(s.head_dim);
  const auto refusal = [&](std::size_t q_gain, std::size_t k_gain, bool whole) -> std::string {
    try {
      nn::check_paged_qk_norm_rope_append(s, qkv, {}, fake_span<const half>(9 * gib, q_gain),
                                          fake_span<const half>(10 * gib, k_gain), q, fake_cache(s), count, frequencies,
                                          whole);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  CHECK(refusal(head, head, false) == "(accepted)");
  const auto heads = static_cast<std::size_t>(s.heads);
  const auto kv_heads = static_cast<std::size_t>(s.kv_heads);
  CHECK(refusal(heads * head, kv_heads * head, true) == "(accepted)");
  CHECK(refusal(heads * head, head, false).find("q_gain has") != std::string::npos);
  CHECK(refusal(heads * head, head, true).find("k_gain has") != std::string::npos);
  // The stacked projection's checks are rope_append's.
  CHECK_THROWS_WITH_AS(nn::check_paged_qk_norm_rope_append(
                           s, qkv.subspan(0, 8), {}, fake_span<const half>(9 * gib, head),
                           fake_span<const half>(10 * gib, head), q, fake_cache(s), count, frequencies, false),
                       doctest::Contains("qkv has 8 elements"), UsageError);
}

TEST_CASE("paged attention sends long tables to the split kernel and refuses splits it cannot run") {
  auto s = good_shape();
  s.table_width = 4096;  // 65536 positions: 256 KiB of scores
  CHECK(attend_refusal(s, fake_cache(s)).find("use attend_split") != std::string::npos);
  CHECK(attend_refusal(s, fake_cache(s), 64) == "(accepted)");
  CHECK(attend_refusal(s, fake_cache(s), 1).find("bytes of shared memory per block") != std::string::npos);
  const auto g = good_shape();
  CHECK(attend_refusal(g, fake_cache(g), 513).find("splits 513 is outside") != std::string::npos);
  CHECK(attend_refusal(g, fake_cache(g), -1).find("splits -1 is outside") != std::string::npos);
}

TEST_CASE_TEMPLATE("the paged handles match their kernels' declarations in kernels/nn/paged_attention.cu", T, half,
                   bfloat16) {
  using P = nn::PagedAttention<T>;
  const KernelDeclarations d(nn::kernel_set().sources);
  const std::string suffix(nn::kernel_suffix<T>);
  CHECK_NOTHROW(d.check<SignatureOf<typename P::AppendKernel>>("kv_append_paged" + suffix));
  CHECK_NOTHROW(d.check<SignatureOf<typename P::AttentionKernel>>("attention_paged" + suffix));
  CHECK_NOTHROW(d.check<SignatureOf<typename P::SplitKernel>>("attention_paged_split" + suffix));
  CHECK_NOTHROW(d.check<SignatureOf<typename P::RopeAppendKernel>>("rope_append_paged" + suffix));
  CHECK_NOTHROW(d.check<SignatureOf<typename P::QkNormAppendKernel>>("qk_norm_rope_append_paged" + suffix));
  for (const char* heads : {"_h4", "_h8"}) {
    CHECK_NOTHROW(d.check<SignatureOf<typename P::GroupedKernel>>("attention_paged_grouped" + suffix + heads));
  }
  for (const char* dim : {"_d64", "_d128"}) {
    CHECK_NOTHROW(d.check<SignatureOf<typename P::GroupedKernel>>("attention_paged_grouped_mma" + suffix + dim));
    CHECK_NOTHROW(d.check<SignatureOf<typename P::GroupedKernel>>("attention_paged_grouped_mma8" + suffix + dim));
    CHECK_NOTHROW(d.check<SignatureOf<typename P::GroupedSlotsKernel>>("attention_grouped_mma" + suffix + dim));
    CHECK_NOTHROW(d.check<SignatureOf<typename P::GroupedSlotsKernel>>("attention_grouped_mma8" + suffix + dim));
  }
  // The wrong element type is refused: the check can fail.
  CHECK_THROWS(d.check<SignatureOf<typename P::AttentionKernel>>(std::string("attention_paged") +
                                                                 (suffix.empty() ? "_bf16" : "")));
}

TEST_CASE("paged_attention_splits fills the GPU from the longest position, within its bounds") {
  // 132 SMs, about four blocks each: 528 blocks; at most 4096 positions a split while splits are left.
  CHECK(nn::paged_attention_splits(32768, 32, 132) == 17);      // 32 heads of one row: ceil(528 / 32)
  CHECK(nn::paged_attention_splits(32768, 32 * 64, 132) == 8);  // 64 rows fill the GPU, but 32768 / 4096 = 8
  CHECK(nn::paged_attention_splits(4096, 32 * 64, 132) == 1);
  CHECK(nn::paged_attention_splits(1024, 32, 132) == 4);  // at least 256 positions a split
  CHECK(nn::paged_attention_splits(100, 32, 132) == 1);
  CHECK(nn::paged_attention_splits(131072, 1, 132) == nn::paged_max_splits);
  CHECK(nn::paged_attention_splits(131072, 256, 132) == 32);
  CHECK(nn::paged_attention_splits(1 << 20, 32, 132) == nn::paged_max_splits);
  CHECK_THROWS_WITH_AS((void)nn::paged_attention_splits(0, 32, 132), doctest::Contains("capacity 0"), UsageError);
  CHECK_THROWS_AS((void)nn::paged_attention_splits(1024, 0, 132), UsageError);
}

TEST_CASE("paged_grouped_splits gives about eight blocks per SM over the rows' kv heads, within its bounds") {
  // 132 SMs: 1056 blocks wanted. Llama-3.2-1B's 32 heads over 8 kv heads: one block per (row, kv head).
  CHECK(nn::paged_grouped_splits(16, 32, 8, 64, 132) == 9);   // 128 blocks a split
  CHECK(nn::paged_grouped_splits(64, 32, 8, 64, 132) == 3);   // 512
  CHECK(nn::paged_grouped_splits(256, 32, 8, 64, 132) == 1);  // 2048: the grid fills the GPU unsplit
  // A group of 16: one block of 16 heads on tensor cores (head_dim 64 or 128), two of 8 on CUDA cores.
  CHECK(nn::paged_grouped_splits(32, 16, 1, 128, 132) == 33);  // 32 blocks a split
  CHECK(nn::paged_grouped_splits(32, 16, 1, 96, 132) == 17);   // 64
  // A group of 32 (32 heads over 1) takes two blocks of 16 on tensor cores.
  CHECK(nn::paged_grouped_splits(16, 32, 1, 64, 132) == 33);
  CHECK(nn::paged_grouped_splits(1, 8, 8, 64, 132) == nn::paged_max_splits);
  CHECK_THROWS_WITH_AS((void)nn::paged_grouped_splits(0, 32, 8, 64, 132), doctest::Contains("rows 0"), UsageError);
  CHECK_THROWS_AS((void)nn::paged_grouped_splits(16, 30, 8, 64, 132), UsageError);
  CHECK_THROWS_AS((void)nn::paged_grouped_splits(16, 32, 8, 64, 0), UsageError);
}

TEST_CASE("paged_grouped_wave_splits comes nearest half a wave of resident blocks, 1 to 32 splits") {
  // 132 SMs holding 4 blocks each (head_dim 64 on an H200): half a wave is 264 blocks; 8 kv heads, one block each a
  // split.
  CHECK(nn::paged_grouped_wave_splits(1, 32, 8, 64, 132, 4) == 32);  // 33 would fill it: at most 32
  CHECK(nn::paged_grouped_wave_splits(2, 32, 8, 64, 132, 4) == 16);  // 256 and 272 blocks tie: the fewer
  CHECK(nn::paged_grouped_wave_splits(4, 32, 8, 64, 132, 4) == 8);
  CHECK(nn::paged_grouped_wave_splits(8, 32, 8, 64, 132, 4) == 4);
  CHECK(nn::paged_grouped_wave_splits(16, 32, 8, 64, 132, 4) == 2);
  CHECK(nn::paged_grouped_wave_splits(32, 32, 8, 64, 132, 4) == 1);  // 256 blocks
  CHECK(nn::paged_grouped_wave_splits(64, 32, 8, 64, 132, 4) == 1);  // more than half a wave: still 1
  CHECK(nn::paged_grouped_wave_splits(256, 32, 8, 64, 132, 4) == 1);
  // TinyLlama's 4 kv heads of groups of 8 (one block a kv head: a block serves 16 query heads on tensor cores).
  CHECK(nn::paged_grouped_wave_splits(16, 32, 4, 64, 132, 4) == 4);
  CHECK(nn::paged_grouped_wave_splits(64, 32, 4, 64, 132, 4) == 1);
  // Three resident (head_dim 128): half a wave is 198, and the nearest split count is taken, not the fewer.
  CHECK(nn::paged_grouped_wave_splits(1, 32, 8, 128, 132, 3) == 25);  // 200 blocks
  CHECK(nn::paged_grouped_wave_splits(2, 32, 8, 128, 132, 3) == 12);  // 192 blocks (13 would be 208)
  CHECK(nn::paged_grouped_wave_splits(8, 32, 8, 128, 132, 3) == 3);
  CHECK(nn::paged_grouped_wave_splits(16, 32, 8, 128, 132, 3) == 2);  // 256 blocks, nearer 198 than 128
  CHECK(nn::paged_grouped_wave_splits(32, 32, 8, 128, 132, 3) == 1);
  // No occupancy known: paged_grouped_splits.
  CHECK(nn::paged_grouped_wave_splits(1, 32, 8, 64, 132, 0) == nn::paged_grouped_splits(1, 32, 8, 64, 132));
  CHECK(nn::paged_grouped_wave_splits(1, 8, 1, 64, 132, 4) == nn::paged_wave_max_splits);
  CHECK_THROWS_WITH_AS((void)nn::paged_grouped_wave_splits(1, 32, 8, 64, 132, -1), doctest::Contains("resident -1"),
                       UsageError);
  CHECK_THROWS_AS((void)nn::paged_grouped_wave_splits(0, 32, 8, 64, 132, 3), UsageError);
}

TEST_CASE("paged attend_grouped checks its spans on the host, naming the one that does not fit") {
  const auto s = good_shape();
  const auto cache = fake_cache(s);
  const auto refusal = [&](int splits, std::size_t partials, std::size_t counters, std::size_t count,
                           std::uint64_t out_at = 6 * gib) {
    try {
      nn::check_paged_attend_grouped(s, fake_span<const half>(5 * gib, q_size(s)), fake_span<half>(out_at, q_size(s)),
                                     fake_span<float>(7 * gib, partials), fake_span<unsigned>(8 * gib, counters), cache,
                                     fake_span<const int>(9 * gib, count), splits);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const std::size_t counters = static_cast<std::size_t>(s.rows) * s.heads;
  for (const int splits : {1, 3, 64}) {
    CAPTURE(splits);
    CHECK(refusal(splits, nn::PagedAttention<half>::split_partials(s, splits), counters, 1) == "(accepted)");
  }
  CHECK(refusal(0, 1, counters, 1).find("splits 0 is outside 1 .. 65535") != std::string::npos);
  CHECK(refusal(3, nn::PagedAttention<half>::split_partials(s, 2), counters, 1).find("partials has") !=
        std::string::npos);
  CHECK(refusal(1, nn::PagedAttention<half>::split_partials(s, 1), counters - 1, 1).find("counters has") !=
        std::string::npos);
  CHECK(refusal(1, nn::PagedAttention<half>::split_partials(s, 1), counters, 2).find("count has 2 elements") !=
        std::string::npos);
  CHECK(
      refusal(1, nn::PagedAttention<half>::split_partials(s, 1), counters, 1, 7 * gib).find("out overlaps partials") !=
      std::string::npos);
}

TEST_CASE("attend_grouped_slots checks the contiguous cache and its spans on the host, naming what does not fit") {
  nn::PagedAttentionShape s{.rows = 4, .heads = 8, .kv_heads = 2, .head_dim = 64};  // no block fields: not read
  const int context = 100;
  const int slot_count = 6;
  const auto cache_size = static_cast<std::size_t>(slot_count) * s.kv_heads * context * s.head_dim;
  const auto rows = static_cast<std::size_t>(s.rows);
  const auto counters = rows * static_cast<std::size_t>(s.heads);
  const auto refusal = [&](const nn::PagedAttentionShape& shape, nn::SlotKvCache<half> cache, std::size_t partials,
                           std::size_t count, int splits = 3, std::uint64_t out_at = 6 * gib) {
    try {
      nn::check_slot_attend_grouped(shape, fake_span<const half>(5 * gib, q_size(shape)),
                                    fake_span<half>(out_at, q_size(shape)), fake_span<float>(7 * gib, partials),
                                    fake_span<unsigned>(8 * gib, counters), cache, fake_span<const int>(9 * gib, count),
                                    splits);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const nn::SlotKvCache<half> cache{fake_span<const half>(1 * gib, cache_size),
                                    fake_span<const half>(2 * gib, cache_size),
                                    fake_span<const int>(3 * gib, rows),
                                    fake_span<const int>(4 * gib, rows),
                                    context,
                                    slot_count};
  const std::size_t partials = nn::PagedAttention<half>::split_partials(s, 3);
  CHECK(refusal(s, cache, partials, 1) == "(accepted)");
  nn::PagedAttentionShape other_dim = s;
  other_dim.head_dim = 96;
  CHECK(refusal(other_dim, cache, nn::PagedAttention<half>::split_partials(other_dim, 3), 1)
            .find("head_dim 96 is not 64 or 128") != std::string::npos);
  nn::PagedAttentionShape odd_heads = s;
  odd_heads.heads = 7;
  CHECK(refusal(odd_heads, cache, partials, 1).find("heads 7 is not a multiple of kv_heads 2") != std::string::npos);
  nn::SlotKvCache<half> short_cache = cache;
  short_cache.v_cache = fake_span<const half>(2 * gib, cache_size - 8);
  CHECK(refusal(s, short_cache, partials, 1).find("v_cache has") != std::string::npos);
  nn::SlotKvCache<half> no_context = cache;
  no_context.context = 0;
  CHECK(refusal(s, no_context, partials, 1).find("context 0 and slot_count 6") != std::string::npos);
  nn::SlotKvCache<half> few_slots = cache;
  few_slots.slots = fake_span<const int>(4 * gib, rows - 1);
  CHECK(refusal(s, few_slots, partials, 1).find("slots has 3 elements") != std::string::npos);
  CHECK(refusal(s, cache, partials, 2).find("count has 2 elements") != std::string::npos);
  CHECK(refusal(s, cache, partials, 1, 0).find("splits 0 is outside") != std::string::npos);
  CHECK(refusal(s, cache, partials - 1, 1).find("partials has") != std::string::npos);
  CHECK(refusal(s, cache, partials, 1, 3, 3 * gib).find("out overlaps positions") != std::string::npos);
}

namespace {

template <class T>
std::vector<T> random_elements(std::size_t n, float scale = 1.0F) {
  const auto f = lgtest::random_floats(n);
  std::vector<T> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = T::from_float(scale * f[i]);
  return out;
}

/// A batch over a paged cache: sequences with shuffled block tables, rows (sequence, position) that append their
/// position, every earlier position of each sequence written beforehand; everything else in the pools is poisoned
/// with values that would dominate any result that read them.
template <class T>
struct PagedBatch {
  nn::PagedAttentionShape shape;
  std::vector<int> row_sequence{};
  std::vector<int> positions{};
  int sequences = 0;
  std::vector<std::vector<T>> k_seq{};  ///< per sequence [kv_heads][capacity][head_dim]
  std::vector<std::vector<T>> v_seq{};
  std::vector<std::int32_t> tables{};  ///< per row: its sequence's table, padded with -1
  std::vector<T> k_pool{};             ///< before the rows' appends
  std::vector<T> v_pool{};
  std::vector<T> k_new{};  ///< [rows][kv_heads][head_dim]
  std::vector<T> v_new{};
  std::vector<T> q{};  ///< [rows][heads][head_dim]

  [[nodiscard]] std::size_t seq_at(int h, int p, int d) const {
    return (static_cast<std::size_t>(h) * static_cast<std::size_t>(shape.capacity()) + static_cast<std::size_t>(p)) *
               static_cast<std::size_t>(shape.head_dim) +
           static_cast<std::size_t>(d);
  }
};

/// `rows`: (sequence, position); the rows of one sequence must hold consecutive positions (they are appended in the
/// launch; the positions before the first are written beforehand).
template <class T>
PagedBatch<T> make_batch(int heads, int kv_heads, int head_dim, int block_size,
                         const std::vector<std::pair<int, int>>& rows, std::mt19937& rng, float key_scale = 4.0F) {
  PagedBatch<T> b;
  for (const auto& [seq, pos] : rows) {
    b.row_sequence.push_back(seq);
    b.positions.push_back(pos);
    b.sequences = std::max(b.sequences, seq + 1);
  }
  std::vector<int> length(static_cast<std::size_t>(b.sequences), 0);  // positions held, appended rows included
  std::vector<int> first_new(static_cast<std::size_t>(b.sequences), std::numeric_limits<int>::max());
  for (const auto& [seq, pos] : rows) {
    length[seq] = std::max(length[seq], pos + 1);
    first_new[seq] = std::min(first_new[seq], pos);
  }
  int width = 0;
  int needed = 0;
  for (const int len : length) {
    width = std::max(width, (len + block_size - 1) / block_size);
    needed += (len + block_size - 1) / block_size;
  }
  width += 1;  // a padded entry (-1) past every table
  b.shape = {.rows = static_cast<int>(rows.size()),
             .heads = heads,
             .kv_heads = kv_heads,
             .head_dim = head_dim,
             .block_size = block_size,
             .blocks = needed + 5,  // spare blocks, poisoned
             .table_width = width};
  std::vector<int> ids(static_cast<std::size_t>(b.shape.blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::vector<int>> seq_table(static_cast<std::size_t>(b.sequences));
  std::size_t next = 0;
  for (int s = 0; s < b.sequences; ++s) {
    seq_table[s].assign(static_cast<std::size_t>(width), -1);
    for (int i = 0; i < (length[s] + block_size - 1) / block_size; ++i) seq_table[s][i] = ids[next++];
  }
  const auto cap = static_cast<std::size_t>(b.shape.capacity());
  const std::size_t pool = static_cast<std::size_t>(b.shape.blocks) * kv_heads * block_size * head_dim;
  b.k_pool.assign(pool, T::from_float(1000.0F));
  b.v_pool.assign(pool, T::from_float(30000.0F));
  for (int s = 0; s < b.sequences; ++s) {
    b.k_seq.push_back(random_elements<T>(static_cast<std::size_t>(kv_heads) * cap * head_dim, key_scale));
    b.v_seq.push_back(random_elements<T>(static_cast<std::size_t>(kv_heads) * cap * head_dim));
    for (int h = 0; h < kv_heads; ++h) {
      for (int p = 0; p < first_new[s]; ++p) {
        const auto block = static_cast<std::size_t>(seq_table[s][p / block_size]);
        for (int d = 0; d < head_dim; ++d) {
          const std::size_t at =
              ((block * kv_heads + h) * block_size + static_cast<std::size_t>(p % block_size)) * head_dim + d;
          b.k_pool[at] = b.k_seq[s][b.seq_at(h, p, d)];
          b.v_pool[at] = b.v_seq[s][b.seq_at(h, p, d)];
        }
      }
    }
  }
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const int s = b.row_sequence[r];
    b.tables.insert(b.tables.end(), seq_table[s].begin(), seq_table[s].end());
    for (int h = 0; h < kv_heads; ++h) {
      for (int d = 0; d < head_dim; ++d) {
        b.k_new.push_back(b.k_seq[s][b.seq_at(h, b.positions[r], d)]);
        b.v_new.push_back(b.v_seq[s][b.seq_at(h, b.positions[r], d)]);
      }
    }
  }
  b.q = random_elements<T>(q_size(b.shape));
  return b;
}

/// The float64 attention of every row and head, over positions f..p of its sequence.
template <class T>
std::vector<double> reference(const PagedBatch<T>& b) {
  const auto& s = b.shape;
  const int group = s.heads / s.kv_heads;
  const double scale = s.scale > 0 ? s.scale : 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  std::vector<double> out(q_size(s), 0.0);
  for (int r = 0; r < s.rows; ++r) {
    const int p = b.positions[r];
    const int first = s.window > 0 ? std::max(0, p - s.window + 1) : 0;
    const auto& k = b.k_seq[b.row_sequence[r]];
    const auto& v = b.v_seq[b.row_sequence[r]];
    for (int h = 0; h < s.heads; ++h) {
      const int g = h / group;
      const std::size_t q0 = (static_cast<std::size_t>(r) * s.heads + h) * s.head_dim;
      std::vector<double> score(static_cast<std::size_t>(p + 1 - first));
      for (int j = first; j <= p; ++j) {
        double dot = 0;
        for (int d = 0; d < s.head_dim; ++d) dot += double(b.q[q0 + d].to_float()) * k[b.seq_at(g, j, d)].to_float();
        score[j - first] = scale * dot;
      }
      const double m = *std::max_element(score.begin(), score.end());
      double sum = 0;
      for (double& sc : score) sum += (sc = std::exp(sc - m));
      for (int j = first; j <= p; ++j) {
        for (int d = 0; d < s.head_dim; ++d) out[q0 + d] += score[j - first] / sum * v[b.seq_at(g, j, d)].to_float();
      }
    }
  }
  return out;
}

/// The largest over the (row, head) vectors of `head_dim` elements of max |got - ref| / max |ref| within the vector
/// (so that a long row's small outputs are judged on their own scale); infinite for a NaN or infinity.
template <class T>
double max_relative_error(const std::vector<T>& got, const std::vector<double>& ref, int head_dim) {
  double worst = 0;
  for (std::size_t v0 = 0; v0 < ref.size(); v0 += static_cast<std::size_t>(head_dim)) {
    double diff = 0;
    double top = 1e-300;
    for (std::size_t i = v0; i < v0 + static_cast<std::size_t>(head_dim); ++i) {
      const double g = got[i].to_float();
      if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
      diff = std::max(diff, std::abs(g - ref[i]));
      top = std::max(top, std::abs(ref[i]));
    }
    worst = std::max(worst, diff / top);
  }
  return worst;
}

template <class T>
std::vector<double> widen(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = v[i].to_float();
  return out;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

/// A batch on the device, ready to append and attend.
template <class T>
struct DeviceBatch {
  explicit DeviceBatch(const PagedBatch<T>& b)
      : k_pool(lgtest::to_device(lgtest::stream(), b.k_pool)),
        v_pool(lgtest::to_device(lgtest::stream(), b.v_pool)),
        positions(lgtest::to_device(lgtest::stream(), b.positions)),
        tables(lgtest::to_device(lgtest::stream(), b.tables)),
        k_new(lgtest::to_device(lgtest::stream(), b.k_new)),
        v_new(lgtest::to_device(lgtest::stream(), b.v_new)),
        q(lgtest::to_device(lgtest::stream(), b.q)),
        out(lgtest::to_device(lgtest::stream(), std::vector<T>(b.q.size(), T::from_float(NAN)))) {}
  [[nodiscard]] nn::PagedKvCache<T> cache() {
    return {k_pool.view(), v_pool.view(), positions.cview(), tables.cview()};
  }
  DeviceBuffer<T> k_pool;
  DeviceBuffer<T> v_pool;
  DeviceBuffer<int> positions;
  DeviceBuffer<int> tables;
  DeviceBuffer<T> k_new;
  DeviceBuffer<T> v_new;
  DeviceBuffer<T> q;
  DeviceBuffer<T> out;
};

/// fp16 rounds to 2^-11, bf16 to 2^-8 (two bf16 results of one value differ by at most 2^-7 of it): the error of an
/// attention output vector relative to its largest element stays below this.
template <class T>
constexpr double tolerance = std::is_same_v<T, half> ? 5e-3 : 1.6e-2;

/// Appends, then attends unsplit and split (several splits), each against float64; the split results also against
/// the unsplit one.
template <class T>
void check_against_float64(PagedBatch<T>& b) {
  Stream& s = lgtest::stream();
  const nn::PagedAttention<T> paged(lgtest::nn_kernels());
  DeviceBatch<T> d(b);
  paged.append(b.shape, d.k_new.cview(), d.v_new.cview(), d.cache()).sync_on(s);
  // The append wrote each row's k and v at its position through its table, and nothing else.
  auto k_want = b.k_pool;
  auto v_want = b.v_pool;
  const auto& sh = b.shape;
  for (int r = 0; r < sh.rows; ++r) {
    const int p = b.positions[r];
    const auto block = static_cast<std::size_t>(
        b.tables[static_cast<std::size_t>(r) * sh.table_width + static_cast<std::size_t>(p / sh.block_size)]);
    for (int h = 0; h < sh.kv_heads; ++h) {
      for (int e = 0; e < sh.head_dim; ++e) {
        const std::size_t at =
            ((block * sh.kv_heads + h) * sh.block_size + static_cast<std::size_t>(p % sh.block_size)) * sh.head_dim + e;
        const std::size_t from = (static_cast<std::size_t>(r) * sh.kv_heads + h) * sh.head_dim + e;
        k_want[at] = b.k_new[from];
        v_want[at] = b.v_new[from];
      }
    }
  }
  CHECK(same_bits(lgtest::to_host(s, d.k_pool.cview()), k_want));
  CHECK(same_bits(lgtest::to_host(s, d.v_pool.cview()), v_want));
  const auto ref = reference(b);
  paged.attend(b.shape, d.q.cview(), d.out.view(), d.cache()).sync_on(s);
  const auto unsplit = lgtest::to_host(s, d.out.cview());
  CHECK(max_relative_error(unsplit, ref, b.shape.head_dim) < tolerance<T>);
  for (const int splits : {2, 7, nn::paged_attention_splits(b.shape.capacity(), b.shape.rows * b.shape.heads, 132)}) {
    CAPTURE(splits);
    DeviceBuffer<float> partials(lgtest::device(), nn::PagedAttention<T>::split_partials(b.shape, splits));
    auto counters =
        lgtest::to_device(s, std::vector<unsigned>(static_cast<std::size_t>(b.shape.rows) * b.shape.heads, 0U));
    auto split_out = lgtest::to_device(s, std::vector<T>(b.q.size(), T::from_float(NAN)));
    for (int launch = 0; launch < 2; ++launch) {  // the counters go back to zero
      paged.attend_split(b.shape, d.q.cview(), split_out.view(), partials.view(), counters.view(), d.cache(), splits)
          .sync_on(s);
      const auto split = lgtest::to_host(s, split_out.cview());
      CHECK(max_relative_error(split, ref, b.shape.head_dim) < tolerance<T>);
      CHECK(max_relative_error(split, widen(unsplit), b.shape.head_dim) < tolerance<T>);
    }
    const auto left = lgtest::to_host(s, counters.cview());
    CHECK(std::count(left.begin(), left.end(), 0U) == static_cast<long>(left.size()));
  }
  // The wide step's kernel: each row's own positions in 1, 3, 7 and the chosen number of ranges, in blocks of 4 and
  // of 8 warps (on tensor cores; the CUDA-core kernels have 4 either way); again with the last two rows as padding
  // (count = rows - 2), which get zeros while the others keep their bits.
  const int rows = b.shape.rows;
  for (const auto& [splits, warps] :
       {std::pair{1, 4}, std::pair{3, 8}, std::pair{7, 4}, std::pair{7, 8},
        std::pair{nn::paged_grouped_splits(rows, b.shape.heads, b.shape.kv_heads, b.shape.head_dim, 132), 4},
        std::pair{nn::paged_grouped_splits(rows, b.shape.heads, b.shape.kv_heads, b.shape.head_dim, 132), 8}}) {
    CAPTURE(splits);
    CAPTURE(warps);
    if (!paged.grouped_fits(b.shape, warps)) {
      MESSAGE("skipped: blocks of 8 warps need more shared memory than this GPU gives a block");
      continue;
    }
    DeviceBuffer<float> partials(lgtest::device(), nn::PagedAttention<T>::split_partials(b.shape, splits));
    auto counters = lgtest::to_device(s, std::vector<unsigned>(static_cast<std::size_t>(rows) * b.shape.heads, 0U));
    auto grouped_out = lgtest::to_device(s, std::vector<T>(b.q.size(), T::from_float(NAN)));
    std::vector<T> first;
    for (const int count : {rows, rows, rows - 2}) {  // twice whole: the counters go back to zero
      CAPTURE(count);
      const auto count_on_device = lgtest::to_device(s, std::vector<int>{count});
      paged
          .attend_grouped(b.shape, d.q.cview(), grouped_out.view(), partials.view(), counters.view(), d.cache(),
                          count_on_device.cview(), splits, warps)
          .sync_on(s);
      const auto grouped = lgtest::to_host(s, grouped_out.cview());
      const std::size_t real = static_cast<std::size_t>(count) * b.shape.heads * b.shape.head_dim;
      CHECK(max_relative_error(std::vector<T>(grouped.begin(), grouped.begin() + static_cast<std::ptrdiff_t>(real)),
                               std::vector<double>(ref.begin(), ref.begin() + static_cast<std::ptrdiff_t>(real)),
                               b.shape.head_dim) < tolerance<T>);
      if (first.empty()) {
        first = grouped;
      } else {
        CHECK(std::memcmp(grouped.data(), first.data(), real * sizeof(T)) == 0);  // deterministic
      }
      CHECK(std::all_of(grouped.begin() + static_cast<std::ptrdiff_t>(real), grouped.end(),
                        [](T x) { return x.to_float() == 0.0F; }));
    }
    const auto left = lgtest::to_host(s, counters.cview());
    CHECK(std::count(left.begin(), left.end(), 0U) == static_cast<long>(left.size()));
  }
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("grouped_warps gives blocks of 8 warps only to rows cut into 8 splits or more whose grid fits their wave") {
    if (lgtest::device().compute_capability().major < 8) {
      MESSAGE("skipped: the grouped kernels run on tensor cores from compute capability 8.0");
      return;
    }
    const nn::PagedAttention<half> paged(lgtest::nn_kernels());
    const nn::PagedAttentionShape one{
        .rows = 1, .heads = 32, .kv_heads = 8, .head_dim = 64, .blocks = 1, .table_width = 1};
    // Fewer than 8 splits: long ranges a block, 4 warps whatever the grid.
    CHECK(paged.grouped_warps(one, 1) == 4);
    CHECK(paged.grouped_warps(one, 7) == 4);
    // One row in 32 splits: 256 blocks, 8 warps where they fit a wave of the 8-warp kernel.
    const bool fits =
        paged.grouped_fits(one, 8) && 8 * 32 <= paged.grouped_resident(one, 8) * lgtest::device().sm_count();
    CHECK(paged.grouped_warps(one, 32) == (fits ? 8 : 4));
    // A grid past that wave (256 rows of 8 kv heads in 8 splits) and head_dim 128 keep 4 warps.
    nn::PagedAttentionShape many = one;
    many.rows = 256;
    CHECK(paged.grouped_warps(many, 8) == 4);
    nn::PagedAttentionShape wide_heads = one;
    wide_heads.head_dim = 128;
    CHECK(paged.grouped_warps(wide_heads, 32) == 4);
  }

  TEST_CASE_TEMPLATE(
      "paged rope_append writes each counted row's rotated q and its k and v through its table and nothing for the "
      "rows past the count",
      T, half, bfloat16) {
    // 8 rows of a bucket, 5 counted (the rest padding, at valid positions through valid tables), at positions 0, 15,
    // 16, 127 and 77 through shuffled tables; biases on. Against float64 from the same rounded inputs: q, k rotated at
    // each row's position (theta^(-2i / head_dim) per pair, as the kernel reads the table in float) plus its bias, v
    // plus its bias. q and the pools start poisoned: every element but the counted rows' must keep its poison.
    Stream& s = lgtest::stream();
    const nn::PagedAttention<T> paged(lgtest::nn_kernels());
    const nn::PagedAttentionShape sh{
        .rows = 8, .heads = 4, .kv_heads = 2, .head_dim = 64, .block_size = 16, .blocks = 70, .table_width = 8};
    const int count = 5;
    const std::vector<int> positions{0, 15, 16, 127, 77, 3, 40, 100};
    const auto q_dim = static_cast<std::size_t>(sh.heads * sh.head_dim);
    const auto kv_dim = static_cast<std::size_t>(sh.kv_heads * sh.head_dim);
    const std::size_t width = q_dim + 2 * kv_dim;
    const auto rows = static_cast<std::size_t>(sh.rows);
    const std::vector<T> qkv = random_elements<T>(rows * width, 2.0F);
    const std::vector<T> bias = random_elements<T>(width, 0.5F);
    std::vector<int> tables(static_cast<std::size_t>(sh.blocks));
    std::iota(tables.begin(), tables.end(), 0);
    std::mt19937 rng(29U);
    std::shuffle(tables.begin(), tables.end(), rng);
    tables.resize(rows * static_cast<std::size_t>(sh.table_width));
    std::vector<float> frequencies(static_cast<std::size_t>(sh.head_dim / 2));
    for (std::size_t i = 0; i < frequencies.size(); ++i) {
      frequencies[i] = static_cast<float>(std::pow(10000.0, -2.0 * static_cast<double>(i) / sh.head_dim));
    }
    const T poison = T::from_float(1000.0F);
    const std::size_t pool = static_cast<std::size_t>(sh.blocks) * kv_dim * static_cast<std::size_t>(sh.block_size);
    auto d_qkv = lgtest::to_device(s, qkv);
    auto d_bias = lgtest::to_device(s, bias);
    auto d_q = lgtest::to_device(s, std::vector<T>(rows * q_dim, poison));
    auto d_k = lgtest::to_device(s, std::vector<T>(pool, poison));
    auto d_v = lgtest::to_device(s, std::vector<T>(pool, poison));
    const auto d_positions = lgtest::to_device(s, positions);
    const auto d_tables = lgtest::to_device(s, tables);
    const auto d_count = lgtest::to_device(s, std::vector<int>{count});
    const auto d_frequencies = lgtest::to_device(s, frequencies);
    const nn::PagedKvCache<T> cache{d_k.view(), d_v.view(), d_positions.cview(), d_tables.cview()};
    paged.rope_append(sh, d_qkv.cview(), d_bias.cview(), d_q.view(), cache, d_count.cview(), d_frequencies.cview())
        .sync_on(s);
    const std::vector<T> q = lgtest::to_host(s, d_q.cview());
    const std::vector<T> k = lgtest::to_host(s, d_k.cview());
    const std::vector<T> v = lgtest::to_host(s, d_v.cview());
    const double bound = std::same_as<T, half> ? 2e-3 : 1e-2;
    // The counted rows' values: row r's stacked element `col` (biased, and rotated in q and k).
    const auto want = [&](std::size_t r, std::size_t col) {
      const auto value = [&](std::size_t c) {
        return static_cast<double>(qkv[r * width + c].to_float()) + static_cast<double>(bias[c].to_float());
      };
      const std::size_t in_part = col < q_dim ? col : (col - q_dim) % kv_dim;
      if (col >= q_dim + kv_dim) return value(col);  // v
      const std::size_t pair = (in_part % static_cast<std::size_t>(sh.head_dim)) / 2;
      const double angle =
          static_cast<double>(static_cast<float>(positions[r]) * frequencies[pair]);  // as the kernel, in float
      const std::size_t even = col - col % 2;
      const double x0 = value(even);
      const double x1 = value(even + 1);
      return col % 2 == 0 ? x0 * std::cos(angle) - x1 * std::sin(angle) : x0 * std::sin(angle) + x1 * std::cos(angle);
    };
    std::vector<bool> written(pool, false);
    int wrong = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t col = 0; col < q_dim; ++col) {
        const T got = q[r * q_dim + col];
        if (r >= static_cast<std::size_t>(count)) {
          wrong += got.bits != poison.bits ? 1 : 0;
        } else {
          const double w = want(r, col);
          wrong += std::abs(got.to_float() - w) > bound * (1.0 + std::abs(w)) ? 1 : 0;
        }
      }
      if (r >= static_cast<std::size_t>(count)) continue;
      const auto p = static_cast<std::size_t>(positions[r]);
      const auto bs = static_cast<std::size_t>(sh.block_size);
      const auto block = static_cast<std::size_t>(tables[r * static_cast<std::size_t>(sh.table_width) + p / bs]);
      for (std::size_t c = 0; c < kv_dim; ++c) {
        const std::size_t h = c / static_cast<std::size_t>(sh.head_dim);
        const std::size_t at = ((block * static_cast<std::size_t>(sh.kv_heads) + h) * bs + p % bs) *
                                   static_cast<std::size_t>(sh.head_dim) +
                               c % static_cast<std::size_t>(sh.head_dim);
        written[at] = true;
        const double wk = want(r, q_dim + c);
        const double wv = want(r, q_dim + kv_dim + c);
        wrong += std::abs(k[at].to_float() - wk) > bound * (1.0 + std::abs(wk)) ? 1 : 0;
        wrong += std::abs(v[at].to_float() - wv) > bound * (1.0 + std::abs(wv)) ? 1 : 0;
      }
    }
    CHECK(wrong == 0);
    std::size_t touched = 0;
    for (std::size_t i = 0; i < pool; ++i) {
      if (!written[i]) touched += (k[i].bits != poison.bits ? 1 : 0) + (v[i].bits != poison.bits ? 1 : 0);
    }
    CHECK(touched == 0);
  }

  TEST_CASE_TEMPLATE(
      "paged attention through shuffled block tables matches float64, at position 0, a block boundary and 5000", T,
      half, bfloat16) {
    std::random_device device;
    const unsigned seed = device();
    CAPTURE(seed);
    std::mt19937 rng(seed);
    // attend_grouped's kernels: mma_d64 for (32, 8, 64), (16, 2, 64) and (40, 2, 64) (a group of 20: blocks of 16 and
    // 4 heads), mma_d128 for (32, 8, 128), (28, 2, 128) and (32, 2, 128) (16 heads, the most shared memory), _h4 for
    // head_dim 96, 256 and 200, _h8 for (24, 2, 80) (a group of 12: blocks of 8 and 4 heads).
    for (const auto& [heads, kv_heads, head_dim, block_size] :
         {std::tuple{32, 8, 64, 16}, std::tuple{32, 8, 128, 32}, std::tuple{8, 8, 96, 16}, std::tuple{4, 1, 256, 32},
          std::tuple{8, 2, 200, 16}, std::tuple{28, 2, 128, 16}, std::tuple{16, 2, 64, 32}, std::tuple{40, 2, 64, 16},
          std::tuple{32, 2, 128, 32}, std::tuple{24, 2, 80, 32}}) {
      CAPTURE(heads);
      CAPTURE(kv_heads);
      CAPTURE(head_dim);
      CAPTURE(block_size);
      // Rows: a fresh sequence at 0, one at a block boundary, one near 5000, and two rows of one sequence appending
      // consecutive positions in the same launch (the second attends the first's new key).
      auto b = make_batch<T>(heads, kv_heads, head_dim, block_size,
                             {{0, 0}, {1, block_size}, {2, 4999}, {3, 37}, {3, 38}, {4, block_size - 1}}, rng);
      check_against_float64(b);
      b.shape.window = 50;  // a sliding window, over a block boundary
      check_against_float64(b);
    }
  }

  TEST_CASE_TEMPLATE("paged attention gives the contiguous cache's bits for the same keys and values", T, half,
                     bfloat16) {
    Stream& s = lgtest::stream();
    std::random_device device;
    const unsigned seed = device();
    CAPTURE(seed);
    std::mt19937 rng(seed);
    const nn::PagedAttention<T> paged(lgtest::nn_kernels());
    const nn::BasicKernels<T> contiguous(lgtest::nn_kernels());
    for (const auto& [heads, kv_heads, head_dim, block_size] :
         {std::tuple{32, 8, 64, 16}, std::tuple{32, 8, 128, 32}, std::tuple{4, 4, 256, 16}}) {
      CAPTURE(heads);
      CAPTURE(head_dim);
      CAPTURE(block_size);
      auto b = make_batch<T>(heads, kv_heads, head_dim, block_size, {{0, 700}, {1, 0}, {2, 2 * block_size}}, rng);
      const auto& sh = b.shape;
      const int context = static_cast<int>(sh.capacity());
      // The contiguous cache [sequences][kv_heads][context][head_dim], slot = sequence, positions before the rows'
      // written, the rest poisoned as the pool's.
      const std::size_t per_slot = static_cast<std::size_t>(sh.kv_heads) * context * sh.head_dim;
      std::vector<T> k_cache(per_slot * b.sequences, T::from_float(1000.0F));
      std::vector<T> v_cache(per_slot * b.sequences, T::from_float(30000.0F));
      for (int r = 0; r < sh.rows; ++r) {
        const int seq = b.row_sequence[r];
        for (int h = 0; h < sh.kv_heads; ++h) {
          for (int p = 0; p < b.positions[r]; ++p) {
            for (int d = 0; d < sh.head_dim; ++d) {
              const std::size_t at = seq * per_slot + b.seq_at(h, p, d);
              k_cache[at] = b.k_seq[seq][b.seq_at(h, p, d)];
              v_cache[at] = b.v_seq[seq][b.seq_at(h, p, d)];
            }
          }
        }
      }
      auto dk = lgtest::to_device(s, k_cache);
      auto dv = lgtest::to_device(s, v_cache);
      const auto slots = lgtest::to_device(s, b.row_sequence);
      DeviceBatch<T> d(b);
      contiguous.kv_append.launch(s, {{64, 1, 1}, {256, 1, 1}, 0}, d.k_new.cview(), d.v_new.cview(), dk.view(),
                                  dv.view(), d.positions.cview(), slots.cview(), sh.kv_heads, sh.head_dim, context,
                                  b.sequences, sh.rows);
      paged.append(sh, d.k_new.cview(), d.v_new.cview(), d.cache()).sync_on(s);
      const float scale = 1.0F / std::sqrt(static_cast<float>(sh.head_dim));
      b.shape.scale = scale;  // the same float for both kernels
      auto out = lgtest::to_device(s, std::vector<T>(b.q.size(), T::from_float(NAN)));
      contiguous.attention.launch(s, contiguous.attention_config(sh.heads, sh.head_dim, sh.rows, context), d.q.cview(),
                                  dk.cview(), dv.cview(), out.view(), d.positions.cview(), slots.cview(), sh.heads,
                                  sh.kv_heads, sh.head_dim, context, b.sequences, scale, 0);
      paged.attend(sh, d.q.cview(), d.out.view(), d.cache()).sync_on(s);
      const auto want = lgtest::to_host(s, out.cview());
      CHECK(same_bits(lgtest::to_host(s, d.out.cview()), want));
      CHECK(max_relative_error(want, reference(b), sh.head_dim) < tolerance<T>);
      for (const int splits : {3, 16}) {
        CAPTURE(splits);
        const auto partial_floats = nn::PagedAttention<T>::split_partials(sh, splits);
        DeviceBuffer<float> partials(lgtest::device(), partial_floats);
        DeviceBuffer<float> contiguous_partials(lgtest::device(), partial_floats);
        const std::vector<unsigned> zeros(static_cast<std::size_t>(sh.rows) * sh.heads, 0U);
        auto counters = lgtest::to_device(s, zeros);
        auto contiguous_counters = lgtest::to_device(s, zeros);
        contiguous.attention_split.launch(
            s, contiguous.attention_split_config(sh.heads, sh.rows, context, splits, sh.head_dim), d.q.cview(),
            dk.cview(), dv.cview(), out.view(), contiguous_partials.view(), contiguous_counters.view(),
            d.positions.cview(), slots.cview(), sh.heads, sh.kv_heads, sh.head_dim, context, b.sequences, scale, 0);
        paged.attend_split(sh, d.q.cview(), d.out.view(), partials.view(), counters.view(), d.cache(), splits)
            .sync_on(s);
        CHECK(same_bits(lgtest::to_host(s, d.out.cview()), lgtest::to_host(s, out.cview())));
      }
      // The grouped kernels over the contiguous cache give the paged grouped kernels' bits for the same splits and
      // warps (the tensor-core ones: head_dim 64 and 128), and float64's values within rounding.
      if (sh.head_dim != 64 && sh.head_dim != 128) continue;
      const auto count = lgtest::to_device(s, std::vector<int>{sh.rows});
      const nn::SlotKvCache<T> slot_cache{dk.cview(),    dv.cview(), d.positions.cview(),
                                          slots.cview(), context,    b.sequences};
      for (const auto& [splits, warps] : {std::pair{1, 4}, std::pair{3, 4}, std::pair{16, 4}, std::pair{16, 8}}) {
        CAPTURE(splits);
        CAPTURE(warps);
        if (!paged.grouped_fits(sh, warps)) continue;
        const auto partial_floats = nn::PagedAttention<T>::split_partials(sh, splits);
        DeviceBuffer<float> partials(lgtest::device(), partial_floats);
        const std::vector<unsigned> zeros(static_cast<std::size_t>(sh.rows) * sh.heads, 0U);
        auto counters = lgtest::to_device(s, zeros);
        paged
            .attend_grouped(sh, d.q.cview(), d.out.view(), partials.view(), counters.view(), d.cache(), count.cview(),
                            splits, warps)
            .sync_on(s);
        paged
            .attend_grouped_slots(sh, d.q.cview(), out.view(), partials.view(), counters.view(), slot_cache,
                                  count.cview(), splits, warps)
            .sync_on(s);
        const auto grouped = lgtest::to_host(s, out.cview());
        CHECK(same_bits(grouped, lgtest::to_host(s, d.out.cview())));
        CHECK(max_relative_error(grouped, reference(b), sh.head_dim) < tolerance<T>);
      }
    }
  }

  TEST_CASE(
      "a captured paged append and attention graph, launched early, replays with the tables, positions, keys and "
      "values "
      "last copied in") {
    Stream& s = lgtest::stream();
    std::random_device device;
    const unsigned seed = device();
    CAPTURE(seed);
    std::mt19937 rng(seed);
    const nn::PagedAttention<half> paged(lgtest::nn_kernels());  // early launches: programmatic edges in the graph
    // Two batches of the same shape over one pool: b's sequences in blocks [0, n), c's in [n, 2n) (c's tables
    // shifted), so that the pool holds both and only what is copied in chooses. Rows 1 and 2 are one sequence, the
    // second attending the key the first appends in the same replay.
    auto b = make_batch<half>(8, 2, 64, 16, {{0, 300}, {1, 17}, {1, 18}}, rng);
    auto c = make_batch<half>(8, 2, 64, 16, {{0, 299}, {1, 16}, {1, 17}}, rng);
    REQUIRE(b.shape.blocks == c.shape.blocks);
    REQUIRE(b.shape.table_width == c.shape.table_width);
    c.q = b.q;
    const int n = b.shape.blocks;
    auto shape = b.shape;
    shape.blocks = 2 * n;
    std::vector<half> k_pool = b.k_pool;
    std::vector<half> v_pool = b.v_pool;
    k_pool.insert(k_pool.end(), c.k_pool.begin(), c.k_pool.end());
    v_pool.insert(v_pool.end(), c.v_pool.begin(), c.v_pool.end());
    for (auto& id : c.tables) id = id < 0 ? id : id + n;
    auto dk = lgtest::to_device(s, k_pool);
    auto dv = lgtest::to_device(s, v_pool);
    auto positions = lgtest::to_device(s, b.positions);
    auto tables = lgtest::to_device(s, b.tables);
    auto k_new = lgtest::to_device(s, b.k_new);
    auto v_new = lgtest::to_device(s, b.v_new);
    const auto q = lgtest::to_device(s, b.q);
    auto out = lgtest::to_device(s, std::vector<half>(b.q.size(), half::from_float(NAN)));
    auto split_out = lgtest::to_device(s, std::vector<half>(b.q.size(), half::from_float(NAN)));
    const int splits = 4;
    DeviceBuffer<float> partials(lgtest::device(), nn::PagedAttention<half>::split_partials(shape, splits));
    auto counters = lgtest::to_device(s, std::vector<unsigned>(static_cast<std::size_t>(shape.rows) * shape.heads, 0U));
    const nn::PagedKvCache<half> cache{dk.view(), dv.view(), positions.cview(), tables.cview()};
    auto graph = CudaGraph<>::scope(s, [&](Scope& scope) {
      scope.record(paged.append(shape, k_new.cview(), v_new.cview(), cache));
      scope.record(paged.attend(shape, q.cview(), out.view(), cache));
      scope.record(
          paged.attend_split(shape, q.cview(), split_out.view(), partials.view(), counters.view(), cache, splits));
    });
    graph.launch();
    CHECK(max_relative_error(lgtest::to_host(s, out.cview()), reference(b), 64) < tolerance<half>);
    CHECK(max_relative_error(lgtest::to_host(s, split_out.cview()), reference(b), 64) < tolerance<half>);
    copy(tables.view(), std::span<const int>(c.tables)).sync_on(s);
    copy(positions.view(), std::span<const int>(c.positions)).sync_on(s);
    copy(k_new.view(), std::span<const half>(c.k_new)).sync_on(s);
    copy(v_new.view(), std::span<const half>(c.v_new)).sync_on(s);
    graph.launch();
    CHECK(max_relative_error(lgtest::to_host(s, out.cview()), reference(c), 64) < tolerance<half>);
    CHECK(max_relative_error(lgtest::to_host(s, split_out.cview()), reference(c), 64) < tolerance<half>);
  }
}
