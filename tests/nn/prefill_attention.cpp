// nn::prefill_attention (the flash-attention kernels of kernels/nn/flash_attention.cu): the host checks without a GPU,
// the kernels' declarations and their compilation for sm_80 (sm_90: tests/nn/kernels.cpp); on a GPU, causal
// grouped-query attention against float64 with the cache before `start` filled randomly, and the cache write (the
// chunk's rows exactly, nothing else touched), the chunk read from device memory (one graph replayed for chunks of
// other starts, rows and slots; rows past the chunk neither read nor written); paged_prefill_attention's host checks,
// and on a GPU its bits and pool writes against the contiguous kernel's.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/gpu.hpp"
#include "common/nn.hpp"

#include <lazygraph/nn/prefill_attention.hpp>

using namespace lazygraph;

namespace {

static_assert(GraphNode<nn::PrefillAttentionOp<half>>, "a prefill attention op may be recorded into a graph");
static_assert(GraphNode<nn::PrefillAttentionOp<bfloat16>>);

/// A span at a made-up device address (never dereferenced: the host checks only look at addresses and sizes).
template <class T>
DeviceSpan<T> fake_span(CUdeviceptr address, std::size_t size) {
  return DeviceSpan<T>(address, size);
}

/// Spans of the right sizes for `s`, each at its own 1 GiB-aligned made-up address.
nn::PrefillAttentionSpans<half> fake_spans(const nn::PrefillAttentionShape& s) {
  const auto rows = static_cast<std::size_t>(s.rows);
  const auto q = rows * s.heads * s.head_dim;
  const auto kv = rows * s.kv_heads * s.head_dim;
  const auto cache = static_cast<std::size_t>(s.slots) * s.kv_heads * s.context * s.head_dim;
  constexpr CUdeviceptr gib = CUdeviceptr{1} << 30;
  return {fake_span<const half>(1 * gib, q),
          fake_span<const half>(2 * gib, kv),
          fake_span<const half>(3 * gib, kv),
          fake_span<half>(4 * gib, cache),
          fake_span<half>(5 * gib, cache),
          fake_span<half>(6 * gib, q),
          fake_span<const int>(7 * gib, nn::PrefillChunkLayout::size)};
}

nn::PrefillAttentionShape good_shape() {
  return {.rows = 100, .heads = 8, .kv_heads = 2, .head_dim = 64, .context = 256, .slots = 2};
}

nn::PrefillChunk good_chunk() { return {.start = 37, .rows = 100, .slot = 1}; }

/// The UsageError message check_prefill_chunk gives for `chunk` in good_shape().
std::string refusal(const nn::PrefillChunk& chunk) {
  try {
    nn::check_prefill_chunk(good_shape(), chunk);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

/// The UsageError message the checks give for `shape` (with spans of the right sizes).
std::string refusal(const nn::PrefillAttentionShape& shape) {
  try {
    nn::check_prefill_attention(fake_spans(shape), shape);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string refusal(const nn::PrefillAttentionSpans<half>& spans) {
  try {
    nn::check_prefill_attention(spans, good_shape());
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("prefill_attention accepts a well-formed chunk on the host, and in place (out == q)") {
  const auto shape = good_shape();
  CHECK_NOTHROW(nn::check_prefill_attention(fake_spans(shape), shape));
  auto in_place = fake_spans(shape);
  in_place.out = fake_span<half>(in_place.q.address(), in_place.q.size());
  CHECK_NOTHROW(nn::check_prefill_attention(in_place, shape));
  auto bf16_shape = shape;
  bf16_shape.head_dim = 128;
  const auto h = fake_spans(bf16_shape);
  const nn::PrefillAttentionSpans<bfloat16> b{fake_span<const bfloat16>(h.q.address(), h.q.size()),
                                              fake_span<const bfloat16>(h.k.address(), h.k.size()),
                                              fake_span<const bfloat16>(h.v.address(), h.v.size()),
                                              fake_span<bfloat16>(h.k_cache.address(), h.k_cache.size()),
                                              fake_span<bfloat16>(h.v_cache.address(), h.v_cache.size()),
                                              fake_span<bfloat16>(h.out.address(), h.out.size()),
                                              h.chunk};
  CHECK_NOTHROW(nn::check_prefill_attention(b, bf16_shape));
  CHECK_NOTHROW(nn::check_prefill_chunk(shape, good_chunk()));
  // Spans of more rows than the context (a bucket's padding past a short context) are fine: the chunk is bounded.
  auto tall = shape;
  tall.rows = 300;
  CHECK_NOTHROW(nn::check_prefill_attention(fake_spans(tall), tall));
}

TEST_CASE("prefill_attention refuses a head_dim other than 64 and 128, naming it") {
  for (const int head_dim : {32, 96, 256, 0}) {
    CAPTURE(head_dim);
    auto s = good_shape();
    s.head_dim = head_dim;
    const std::string message = refusal(s);
    CHECK(message.find("head_dim " + std::to_string(head_dim) + " is not supported") != std::string::npos);
    CHECK(message.find("64 and 128") != std::string::npos);
  }
}

TEST_CASE(
    "prefill_attention refuses spans of no rows, and a chunk that is empty, too long, before 0 or past the context") {
  auto s = good_shape();
  s.rows = 0;
  CHECK(refusal(s).find("rows is 0") != std::string::npos);
  s.rows = -3;
  CHECK(refusal(s).find("rows is -3") != std::string::npos);
  auto c = good_chunk();
  c.rows = 0;
  CHECK(refusal(c).find("rows is 0") != std::string::npos);
  c.rows = 101;
  CHECK(refusal(c).find("rows 101 exceed the 100 rows the launch's spans hold") != std::string::npos);
  c = good_chunk();
  c.start = -1;
  CHECK(refusal(c).find("start is -1") != std::string::npos);
  c = good_chunk();
  c.start = 200;  // 200 + 100 > 256
  CHECK(refusal(c).find("200 .. 299 leave the context of 256 positions") != std::string::npos);
  c.start = 156;  // exactly fills the context
  CHECK(refusal(c) == "(accepted)");
  c.start = 2147483600;  // start + rows overflows an int
  CHECK(refusal(c).find("leave the context") != std::string::npos);
}

TEST_CASE("prefill_attention refuses a slot outside the cache and heads that are not a multiple of kv_heads") {
  auto c = good_chunk();
  c.slot = 2;
  CHECK(refusal(c).find("slot 2 is outside the cache's slots 0 .. 1") != std::string::npos);
  c.slot = -1;
  CHECK(refusal(c).find("slot -1 is outside") != std::string::npos);
  auto s = good_shape();
  s.kv_heads = 3;
  CHECK(refusal(s).find("heads 8 is not a multiple of kv_heads 3") != std::string::npos);
  s.kv_heads = 0;
  CHECK(refusal(s).find("kv_heads 0 must both be at least 1") != std::string::npos);
}

TEST_CASE("prefill_attention refuses a span of the wrong size, naming it and the size the shape gives") {
  const auto good = fake_spans(good_shape());
  auto spans = good;
  spans.q = fake_span<const half>(good.q.address(), good.q.size() - 1);
  CHECK(refusal(spans).find("q has 51199 elements; rows x heads x head_dim = 51200 are expected") != std::string::npos);
  spans = good;
  spans.v = fake_span<const half>(good.v.address(), good.v.size() + 64);
  CHECK(refusal(spans).find("v has 12864 elements; rows x kv_heads x head_dim = 12800") != std::string::npos);
  spans = good;
  spans.k_cache = fake_span<half>(good.k_cache.address(), 1000);
  CHECK(refusal(spans).find("k_cache has 1000 elements; slots x kv_heads x context x head_dim = 65536") !=
        std::string::npos);
  spans = good;
  spans.out = {};
  CHECK(refusal(spans).find("out has 0 elements") != std::string::npos);
  spans = good;
  spans.chunk = fake_span<const int>(good.chunk.address(), 2);
  CHECK(refusal(spans).find("chunk has 2 elements; [start, rows, slot] = 3 are expected") != std::string::npos);
}

TEST_CASE("prefill_attention refuses a span that is not 16-byte aligned or overlaps another it must not") {
  const auto good = fake_spans(good_shape());
  auto spans = good;
  spans.k = fake_span<const half>(good.k.address() + 2, good.k.size());
  CHECK(refusal(spans).find("k is not 16-byte aligned (its address ends in 2)") != std::string::npos);
  spans = good;
  spans.v_cache = fake_span<half>(good.k_cache.address() + 4096, good.v_cache.size());
  CHECK(refusal(spans).find("k_cache overlaps v_cache") != std::string::npos);
  spans = good;
  spans.out = fake_span<half>(good.k.address(), good.out.size());
  CHECK(refusal(spans).find("out overlaps k") != std::string::npos);
  spans = good;
  spans.out = fake_span<half>(good.q.address() + 128, good.out.size());
  CHECK(refusal(spans).find("out overlaps q without being q itself") != std::string::npos);
  spans = good;
  spans.k = fake_span<const half>(good.k_cache.address(), good.k.size());  // the chunk's keys inside the cache
  CHECK(refusal(spans).find("k_cache overlaps k") != std::string::npos);
  spans = good;
  spans.chunk = fake_span<const int>(good.out.address() + 4, 3);  // the chunk where the kernel writes its output
  CHECK(refusal(spans).find("out overlaps chunk") != std::string::npos);
  spans = good;
  spans.chunk = fake_span<const int>(good.q.address() + 2, 3);  // ints need no 16-byte alignment; q is only read
  CHECK(refusal(spans) == "(accepted)");
}

namespace {

/// A paged layout for good_shape(): blocks of 16, a table reaching its context exactly, a pool of 40 blocks.
nn::PagedPrefillLayout good_layout() { return {.block_size = 16, .blocks = 40, .table_width = 16}; }

/// fake_spans(shape) with pools of `layout`'s size instead of the caches, and a table at its own made-up address.
struct PagedFakes {
  nn::PrefillAttentionSpans<half> spans;
  DeviceSpan<const int> table;
};
PagedFakes paged_fakes(const nn::PrefillAttentionShape& s, const nn::PagedPrefillLayout& l) {
  nn::PrefillAttentionSpans<half> spans = fake_spans(s);
  const auto pool = static_cast<std::size_t>(l.blocks) * s.kv_heads * l.block_size * s.head_dim;
  spans.k_cache = fake_span<half>(spans.k_cache.address(), pool);
  spans.v_cache = fake_span<half>(spans.v_cache.address(), pool);
  constexpr CUdeviceptr gib = CUdeviceptr{1} << 30;
  return {spans, fake_span<const int>(8 * gib, static_cast<std::size_t>(std::max(l.table_width, 0)))};
}

/// The UsageError message check_paged_prefill_attention gives, "(accepted)" for none.
std::string paged_refusal(const PagedFakes& f, const nn::PrefillAttentionShape& s, const nn::PagedPrefillLayout& l) {
  try {
    nn::check_paged_prefill_attention(f.spans, f.table, s, l);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("paged_prefill_attention accepts pools and a table of the layout's sizes and refuses others by name") {
  const auto s = good_shape();
  const auto l = good_layout();
  const PagedFakes good = paged_fakes(s, l);
  CHECK(paged_refusal(good, s, l) == "(accepted)");
  // The contiguous checks still hold: a head_dim the kernels lack, a span of the wrong size.
  auto bad_shape = s;
  bad_shape.head_dim = 96;
  CHECK(paged_refusal(paged_fakes(bad_shape, l), bad_shape, l).find("head_dim 96 is not supported") !=
        std::string::npos);
  auto f = good;
  f.spans.q = fake_span<const half>(good.spans.q.address(), 7);
  CHECK(paged_refusal(f, s, l).find("q has 7 elements") != std::string::npos);
  // The pools' size comes from the layout, not from slots and context.
  f = good;
  f.spans.v_cache = fake_span<half>(good.spans.v_cache.address(), good.spans.v_cache.size() - 64);
  CHECK(paged_refusal(f, s, l).find("v_cache has 81856 elements; blocks x kv_heads x block_size x head_dim = 81920") !=
        std::string::npos);
  auto layout = l;
  layout.block_size = 8;
  CHECK(paged_refusal(paged_fakes(s, layout), s, layout).find("block_size 8 is not 16 or 32") != std::string::npos);
  layout = l;
  layout.blocks = 0;
  CHECK(paged_refusal(paged_fakes(s, layout), s, layout).find("blocks is 0") != std::string::npos);
  layout = l;
  layout.table_width = 15;  // 240 positions, the context 256
  CHECK(paged_refusal(paged_fakes(s, layout), s, layout)
            .find("table_width 15 x block_size 16 = 240 positions do not reach the context of 256") !=
        std::string::npos);
  f = good;
  f.table = fake_span<const int>(good.table.address(), 17);
  CHECK(paged_refusal(f, s, l).find("table has 17 elements; table_width = 16 are expected") != std::string::npos);
  f = good;
  f.table = fake_span<const int>(good.spans.k_cache.address() + 64, 16);  // the table inside the pool it writes
  CHECK(paged_refusal(f, s, l).find("k_cache overlaps table") != std::string::npos);
  f = good;
  f.table = fake_span<const int>(good.spans.out.address(), 16);
  CHECK(paged_refusal(f, s, l).find("out overlaps table") != std::string::npos);
  f = good;
  f.table = fake_span<const int>(good.spans.q.address() + 4, 16);  // read only, and ints need no alignment
  CHECK(paged_refusal(f, s, l) == "(accepted)");
}

TEST_CASE_TEMPLATE("the paged flash-attention handles of nn::BasicKernels match their kernels' declarations", T, half,
                   bfloat16) {
  using K = nn::BasicKernels<T>;
  using Signature = void(const T*, const T*, const T*, T*, T*, T*, const int*, const int*, int, int, int, int, int, int,
                         int, float, int);
  static_assert(std::is_same_v<typename K::FlashAttentionPaged, Kernel<Signature>>);
  static_assert(GraphNode<nn::PagedPrefillAttentionOp<T>>, "a paged prefill attention op may be recorded into a graph");
  const KernelDeclarations d(nn::kernel_set().sources);
  for (const char* base :
       {"flash_attention_paged_d64", "flash_attention_paged_d128", "flash_attention_paged_rows64_d64"}) {
    const std::string name = std::string(base) + std::string(nn::kernel_suffix<T>);
    CAPTURE(name);
    CHECK_NOTHROW(d.template check<Signature>(name));
  }
}

TEST_CASE("varlen_prefill_attention refuses bad segments and spans on the host, naming them") {
  const auto s = good_shape();  // 100 rows, a context of 256
  const auto l = good_layout();
  constexpr int most = 4;
  PagedFakes f = paged_fakes(s, l);
  f.spans.chunk = {};
  constexpr CUdeviceptr gib = CUdeviceptr{1} << 30;
  const DeviceSpan<const int> segments = fake_span<const int>(9 * gib, nn::PrefillSegmentsLayout::size(most));
  const DeviceSpan<const int> tables =
      fake_span<const int>(10 * gib, static_cast<std::size_t>(most) * static_cast<std::size_t>(l.table_width));
  const auto refused = [&](const nn::PrefillAttentionSpans<half>& spans, DeviceSpan<const int> seg,
                           DeviceSpan<const int> tab, int max_segments) -> std::string {
    try {
      nn::check_varlen_prefill_attention(spans, seg, tab, s, l, max_segments);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  CHECK(refused(f.spans, segments, tables, most) == "(accepted)");
  auto with_chunk = f.spans;
  with_chunk.chunk = fake_span<const int>(7 * gib, 3);
  CHECK(refused(with_chunk, segments, tables, most).find("chunk has 3 elements; a varlen launch reads its segments") !=
        std::string::npos);
  CHECK(refused(f.spans, segments, tables, 0).find("max_segments is 0") != std::string::npos);
  CHECK(refused(f.spans, segments, tables, nn::kMaxPrefillSegments + 1).find("max_segments is 65") !=
        std::string::npos);
  CHECK(refused(f.spans, fake_span<const int>(9 * gib, 8), tables, most)
            .find("segments has 8 elements; 1 + 2 x max_segments = 9") != std::string::npos);
  CHECK(refused(f.spans, segments, fake_span<const int>(10 * gib, 63), most)
            .find("tables has 63 elements; max_segments x table_width = 64") != std::string::npos);
  CHECK(refused(f.spans, fake_span<const int>(f.spans.out.address(), 9), tables, most).find("out overlaps segments") !=
        std::string::npos);
  CHECK(refused(f.spans, segments, fake_span<const int>(f.spans.k_cache.address(), 64), most)
            .find("k_cache overlaps tables") != std::string::npos);

  // The segments' values, where the host knows them.
  const auto values = [&](std::vector<nn::PrefillChunk> v) -> std::string {
    try {
      nn::check_prefill_segments(s, v, most);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  CHECK(values({{.start = 0, .rows = 40}, {.start = 200, .rows = 56}, {.start = 3, .rows = 4}}) == "(accepted)");
  CHECK(values({}).find("0 segments; a launch takes 1 to 4") != std::string::npos);
  CHECK(values(std::vector<nn::PrefillChunk>(5, {.start = 0, .rows = 1})).find("5 segments") != std::string::npos);
  CHECK(values({{.start = 0, .rows = 40}, {.start = 0, .rows = 0}}).find("segment 1: rows is 0") != std::string::npos);
  CHECK(values({{.start = -1, .rows = 4}}).find("segment 0: start is -1") != std::string::npos);
  CHECK(values({{.start = 250, .rows = 7}}).find("segment 0: positions 250 .. 256 leave the context of 256") !=
        std::string::npos);
  CHECK(values({{.start = 0, .rows = 60}, {.start = 0, .rows = 41}})
            .find("the segments hold 101 rows in all, more than the 100") != std::string::npos);
}

TEST_CASE_TEMPLATE("the varlen flash-attention handles of nn::BasicKernels match their kernels' declarations", T, half,
                   bfloat16) {
  using K = nn::BasicKernels<T>;
  using Signature = void(const T*, const T*, const T*, T*, T*, T*, const int*, const int*, int, int, int, int, int, int,
                         int, int, float, int);
  static_assert(std::is_same_v<typename K::FlashAttentionVarlen, Kernel<Signature>>);
  static_assert(GraphNode<nn::VarlenPrefillAttentionOp<T>>, "a varlen prefill op may be recorded into a graph");
  const KernelDeclarations d(nn::kernel_set().sources);
  for (const char* base : {"flash_attention_paged_varlen_d64", "flash_attention_paged_varlen_d128"}) {
    const std::string name = std::string(base) + std::string(nn::kernel_suffix<T>);
    CAPTURE(name);
    CHECK_NOTHROW(d.template check<Signature>(name));
  }
}

TEST_CASE_TEMPLATE("the flash-attention handles of nn::BasicKernels match their kernels' declarations", T, half,
                   bfloat16) {
  using K = nn::BasicKernels<T>;
  using Signature = void(const T*, const T*, const T*, T*, T*, T*, const int*, int, int, int, int, int, float, int);
  static_assert(std::is_same_v<typename K::FlashAttention, Kernel<Signature>>);
  const KernelDeclarations d(nn::kernel_set().sources);
  for (const char* base : {"flash_attention_d64", "flash_attention_d128", "flash_attention_rows64_d64"}) {
    const std::string name = std::string(base) + std::string(nn::kernel_suffix<T>);
    CAPTURE(name);
    CHECK_NOTHROW(d.template check<Signature>(name));
    const KernelDeclaration* declared = d.find(name);
    REQUIRE(declared != nullptr);
    CHECK(declared->file == "nn/flash_attention.cu");
  }
}

// sm_90: "every nn kernel in kernels/nn/ compiles for sm_90 ..." (tests/nn/kernels.cpp) compiles this file with the
// same options; compiling it here again would only add to the host suite's time.
TEST_CASE("the flash-attention kernels compile with NVRTC for sm_80") {
  const auto& sources = nn::kernel_set().sources;
  const auto source = std::find_if(sources.begin(), sources.end(),
                                   [](const KernelSource& s) { return s.name == "nn/flash_attention.cu"; });
  REQUIRE(source != sources.end());
  std::vector<KernelSource> headers(core_kernel_headers().begin(), core_kernel_headers().end());
  headers.insert(headers.end(), nn::kernel_set().headers.begin(), nn::kernel_set().headers.end());
  const CompileResult r = nvrtc_compile(*source, headers, nvrtc_options(80, true), true);
  CHECK_MESSAGE(r.succeeded(), r.log());
}

namespace {

/// Values of T from floats (rounded once), and back as doubles.
template <class T>
std::vector<T> rounded(const std::vector<float>& f, float scale) {
  std::vector<T> out;
  out.reserve(f.size());
  for (const float x : f) out.push_back(T::from_float(scale * x));
  return out;
}

template <class T>
std::vector<T> random_elements(std::size_t n, float scale = 1.0F) {
  return rounded<T>(lgtest::random_floats(n), scale);
}

template <class T>
double wide(T x) {
  return static_cast<double>(x.to_float());
}

/// One test problem: a chunk's q, k, v (spans of shape.rows rows, of which chunk.rows are the chunk's) and a cache of
/// `slots` slots filled randomly everywhere.
template <class T>
struct Problem {
  nn::PrefillAttentionShape shape;
  nn::PrefillChunk chunk;
  std::vector<T> q, k, v, k_cache, v_cache;

  Problem(const nn::PrefillAttentionShape& s, const nn::PrefillChunk& c)
      : shape(s),
        chunk(c),
        // Queries up to 4 in magnitude: scores of standard deviation about 1.3 after the scale, so the softmax has
        // both flat and peaked rows, and a key wrongly included or left out moves the result past the tolerance.
        q(random_elements<T>(static_cast<std::size_t>(s.rows) * s.heads * s.head_dim, 4.0F)),
        k(random_elements<T>(static_cast<std::size_t>(s.rows) * s.kv_heads * s.head_dim)),
        v(random_elements<T>(k.size())),
        k_cache(random_elements<T>(static_cast<std::size_t>(s.slots) * s.kv_heads * s.context * s.head_dim)),
        v_cache(random_elements<T>(k_cache.size())) {}

  [[nodiscard]] std::size_t cache_at(int slot, int kv_head, int position) const {
    return ((static_cast<std::size_t>(slot) * shape.kv_heads + kv_head) * shape.context + position) * shape.head_dim;
  }
};

/// Causal GQA attention in float64 from the rounded inputs: keys and values below `start` from the cache as it was,
/// the chunk's own from k and v. [chunk rows][heads][head_dim].
template <class T>
std::vector<double> reference(const Problem<T>& p) {
  const auto& s = p.shape;
  const auto& c = p.chunk;
  const int group = s.heads / s.kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  std::vector<double> out(static_cast<std::size_t>(c.rows) * s.heads * s.head_dim);
  std::vector<double> w(static_cast<std::size_t>(c.start + c.rows));
  const auto key = [&](int g, int j) {
    return j < c.start ? &p.k_cache[p.cache_at(c.slot, g, j)]
                       : &p.k[(static_cast<std::size_t>(j - c.start) * s.kv_heads + g) * s.head_dim];
  };
  const auto value = [&](int g, int j) {
    return j < c.start ? &p.v_cache[p.cache_at(c.slot, g, j)]
                       : &p.v[(static_cast<std::size_t>(j - c.start) * s.kv_heads + g) * s.head_dim];
  };
  for (int r = 0; r < c.rows; ++r) {
    const int position = c.start + r;
    const int first = s.window > 0 ? std::max(0, position - s.window + 1) : 0;  // a sliding window's first key
    for (int h = 0; h < s.heads; ++h) {
      const int g = h / group;
      const T* q = &p.q[(static_cast<std::size_t>(r) * s.heads + h) * s.head_dim];
      double top = -std::numeric_limits<double>::infinity();
      for (int j = first; j <= position; ++j) {
        const T* kj = key(g, j);
        double dot = 0;
        for (int d = 0; d < s.head_dim; ++d) dot += wide(q[d]) * wide(kj[d]);
        w[j] = dot * scale;
        top = std::max(top, w[j]);
      }
      double sum = 0;
      for (int j = first; j <= position; ++j) {
        w[j] = std::exp(w[j] - top);
        sum += w[j];
      }
      double* o = &out[(static_cast<std::size_t>(r) * s.heads + h) * s.head_dim];
      for (int j = first; j <= position; ++j) {
        const T* vj = value(g, j);
        for (int d = 0; d < s.head_dim; ++d) o[d] += w[j] / sum * wide(vj[d]);
      }
    }
  }
  return out;
}

/// max |got - ref| / max |ref| over ref's elements (got may have more: the padding); infinite when got has a NaN or
/// an infinity among them.
template <class T>
double relative_error(const std::vector<T>& got, const std::vector<double>& ref) {
  double err = 0;
  double top = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = wide(got[i]);
    if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
    err = std::max(err, std::abs(g - ref[i]));
    top = std::max(top, std::abs(ref[i]));
  }
  return err / std::max(top, 1e-300);
}

template <class T>
constexpr double attention_tolerance = std::same_as<T, half> ? 1e-2 : 3e-2;

/// NaN in fp16 and bf16: what out is poisoned with, so that rows the kernel must not write are seen to stay so.
template <class T>
constexpr T poison_of = T{std::uint16_t{0x7fff}};

/// Entries of `got` (a cache after the launch) that differ bitwise from what they must hold: the chunk's k (or v) at
/// positions start .. start + rows - 1 of the slot, every other entry as it was. At most a few are reported.
template <class T>
int cache_mismatches(const char* which, const Problem<T>& p, const std::vector<T>& before, const std::vector<T>& chunk,
                     const std::vector<T>& got) {
  const auto& s = p.shape;
  const auto& c = p.chunk;
  std::vector<T> expected = before;
  for (int r = 0; r < c.rows; ++r) {
    for (int g = 0; g < s.kv_heads; ++g) {
      std::copy_n(&chunk[(static_cast<std::size_t>(r) * s.kv_heads + g) * s.head_dim], s.head_dim,
                  &expected[p.cache_at(c.slot, g, c.start + r)]);
    }
  }
  int bad = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (got[i].bits != expected[i].bits) {
      if (bad < 5) MESSAGE(which << " element " << i << " differs");
      ++bad;
    }
  }
  return bad;
}

/// Elements of out's rows past the chunk (the padding) that are no longer the poison.
template <class T>
int padding_written(const Problem<T>& p, const std::vector<T>& out) {
  const std::size_t row = static_cast<std::size_t>(p.shape.heads) * p.shape.head_dim;
  int written = 0;
  for (std::size_t i = static_cast<std::size_t>(p.chunk.rows) * row; i < out.size(); ++i) {
    written += out[i].bits != poison_of<T>.bits ? 1 : 0;
  }
  return written;
}

/// The chunk [start, rows, slot] in device memory.
DeviceBuffer<int> chunk_on_device(const nn::PrefillChunk& c) {
  return lgtest::to_device(lgtest::stream(), std::vector<int>{c.start, c.rows, c.slot});
}

/// Runs prefill_attention on `p` (eagerly, out poisoned with NaN first) and returns out and both caches; with `tile`
/// (64 or 128) launches the flash-attention kernel of that many rows per block itself instead of the one
/// prefill_attention picks for the chunk's length.
template <class T>
struct Result {
  std::vector<T> out, k_cache, v_cache;
};

template <class T>
Result<T> run(const nn::BasicKernels<T>& kernels, const Problem<T>& p, int tile = 0) {
  Stream& s = lgtest::stream();
  nn::check_prefill_chunk(p.shape, p.chunk);
  const auto q = lgtest::to_device(s, p.q);
  const auto k = lgtest::to_device(s, p.k);
  const auto v = lgtest::to_device(s, p.v);
  auto k_cache = lgtest::to_device(s, p.k_cache);
  auto v_cache = lgtest::to_device(s, p.v_cache);
  auto out = lgtest::to_device(s, std::vector<T>(p.q.size(), poison_of<T>));
  const auto chunk = chunk_on_device(p.chunk);
  if (tile == 0) {
    nn::prefill_attention(
        kernels, {q.cview(), k.cview(), v.cview(), k_cache.view(), v_cache.view(), out.view(), chunk.cview()}, p.shape)
        .sync_on(s);
  } else {
    const nn::PrefillAttentionShape& h = p.shape;
    const auto& kernel = h.head_dim == 128 ? kernels.flash_attention_d128
                         : tile == 128     ? kernels.flash_attention_d64
                                           : kernels.flash_attention_rows64_d64;
    kernel(kernels.flash_attention_config(h.rows, h.heads, h.head_dim, tile), q.cview(), k.cview(), v.cview(),
           k_cache.view(), v_cache.view(), out.view(), chunk.cview(), h.rows, h.heads, h.kv_heads, h.context, h.slots,
           static_cast<float>(1 / std::sqrt(static_cast<double>(h.head_dim))), h.window)
        .sync_on(s);
  }
  return {lgtest::to_host(s, out.cview()), lgtest::to_host(s, k_cache.cview()), lgtest::to_host(s, v_cache.cview())};
}

/// A Problem's slot laid out as a paged pool: the blocks of a shuffled table hold the slot's cache positions (the same
/// values), the pool's other blocks random values of their own.
template <class T>
struct PagedProblem {
  nn::PagedPrefillLayout layout;
  std::vector<int> table;
  std::vector<T> k_pool, v_pool;

  [[nodiscard]] std::size_t pool_at(const nn::PrefillAttentionShape& s, int kv_head, int position) const {
    const auto block = static_cast<std::size_t>(table[static_cast<std::size_t>(position / layout.block_size)]);
    return ((block * s.kv_heads + kv_head) * layout.block_size + position % layout.block_size) * s.head_dim;
  }
};

template <class T>
PagedProblem<T> paged_problem(const Problem<T>& p, int block_size, unsigned seed) {
  const auto& s = p.shape;
  PagedProblem<T> out;
  const int width = (s.context + block_size - 1) / block_size;
  out.layout = {.block_size = block_size, .blocks = width + 7, .table_width = width};
  std::vector<int> ids(static_cast<std::size_t>(out.layout.blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  ids.resize(static_cast<std::size_t>(width));
  out.table = ids;
  const std::size_t pool = static_cast<std::size_t>(out.layout.blocks) * s.kv_heads * block_size * s.head_dim;
  out.k_pool = random_elements<T>(pool);
  out.v_pool = random_elements<T>(pool);
  for (int g = 0; g < s.kv_heads; ++g) {
    for (int position = 0; position < s.context; ++position) {
      std::copy_n(&p.k_cache[p.cache_at(p.chunk.slot, g, position)], s.head_dim,
                  &out.k_pool[out.pool_at(s, g, position)]);
      std::copy_n(&p.v_cache[p.cache_at(p.chunk.slot, g, position)], s.head_dim,
                  &out.v_pool[out.pool_at(s, g, position)]);
    }
  }
  return out;
}

/// Runs paged_prefill_attention on `p` through `pp` (eagerly, out poisoned first): out and both pools.
template <class T>
Result<T> run_paged(const nn::BasicKernels<T>& kernels, const Problem<T>& p, const PagedProblem<T>& pp) {
  Stream& s = lgtest::stream();
  const auto q = lgtest::to_device(s, p.q);
  const auto k = lgtest::to_device(s, p.k);
  const auto v = lgtest::to_device(s, p.v);
  auto k_pool = lgtest::to_device(s, pp.k_pool);
  auto v_pool = lgtest::to_device(s, pp.v_pool);
  auto out = lgtest::to_device(s, std::vector<T>(p.q.size(), poison_of<T>));
  const auto chunk = chunk_on_device(p.chunk);
  const auto table = lgtest::to_device(s, pp.table);
  nn::paged_prefill_attention(
      kernels, {q.cview(), k.cview(), v.cview(), k_pool.view(), v_pool.view(), out.view(), chunk.cview()},
      table.cview(), p.shape, pp.layout)
      .sync_on(s);
  return {lgtest::to_host(s, out.cview()), lgtest::to_host(s, k_pool.cview()), lgtest::to_host(s, v_pool.cview())};
}

/// Elements of `got` (a pool after the launch) that differ bitwise from `before` with the slot's positions replaced by
/// `cache`'s (the contiguous kernel's cache after the same launch).
template <class T>
int pool_mismatches(const char* which, const Problem<T>& p, const PagedProblem<T>& pp, const std::vector<T>& before,
                    const std::vector<T>& cache, const std::vector<T>& got) {
  const auto& s = p.shape;
  std::vector<T> expected = before;
  for (int g = 0; g < s.kv_heads; ++g) {
    for (int position = 0; position < s.context; ++position) {
      std::copy_n(&cache[p.cache_at(p.chunk.slot, g, position)], s.head_dim, &expected[pp.pool_at(s, g, position)]);
    }
  }
  int bad = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (got[i].bits != expected[i].bits) {
      if (bad < 5) MESSAGE(which << " element " << i << " differs");
      ++bad;
    }
  }
  return bad;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE_TEMPLATE(
      "prefill_attention matches float64 causal GQA attention for odd chunk lengths, start 0 and 37, head_dim 64 (in "
      "tiles of 64 and of 128 rows) and 128, also over a sliding window, and writes exactly the chunk's rows of the "
      "cache",
      T, half, bfloat16) {
    if (lgtest::device().compute_capability().major < 8) {
      MESSAGE("skipped: the flash-attention kernels need compute capability 8.0 or newer");
      return;
    }
    const nn::BasicKernels<T> kernels(lgtest::nn_kernels());
    struct Kind {
      int head_dim, tile;
    };
    for (const Kind kind : {Kind{64, 64}, Kind{64, 128}, Kind{128, 64}}) {
      const int head_dim = kind.head_dim;
      // (start, rows, window): windows of 40 and 70 positions cut across the key tiles of 64 and the cache's part.
      for (const auto& [start, rows, window] :
           {std::tuple{0, 1, 0}, std::tuple{0, 17, 0}, std::tuple{0, 100, 0}, std::tuple{0, 129, 0},
            std::tuple{37, 1, 0}, std::tuple{37, 17, 0}, std::tuple{37, 100, 0}, std::tuple{37, 129, 0},
            std::tuple{37, 129, 40}, std::tuple{90, 100, 70}}) {
        {
          CAPTURE(head_dim);
          CAPTURE(kind.tile);
          CAPTURE(start);
          CAPTURE(rows);
          CAPTURE(window);
          // 6 query heads over 2 kv heads (groups of 3); slot 1 of 2, so slot 0 must stay untouched too.
          const Problem<T> p({.rows = rows,
                              .heads = 6,
                              .kv_heads = 2,
                              .head_dim = head_dim,
                              .context = 256,
                              .slots = 2,
                              .window = window},
                             {.start = start, .rows = rows, .slot = 1});
          const Result<T> got = run(kernels, p, kind.tile);
          const double err = relative_error(got.out, reference(p));
          CAPTURE(err);
          CHECK(err <= attention_tolerance<T>);
          CHECK(cache_mismatches("k_cache", p, p.k_cache, p.k, got.k_cache) == 0);
          CHECK(cache_mismatches("v_cache", p, p.v_cache, p.v, got.v_cache) == 0);
        }
      }
    }
  }

  TEST_CASE_TEMPLATE(
      "one captured prefill_attention graph replays for chunks of other starts, rows and slots read from device "
      "memory, never touching the rows past the chunk",
      T, half, bfloat16) {
    // Spans of a 128-row bucket; chunks of 100, 17 and 128 rows at starts 0, 37 and 5, slots 1, 0, 1: each replay
    // matches float64, writes only its rows of the cache, and leaves the padding rows of out as they were.
    if (lgtest::device().compute_capability().major < 8) {
      MESSAGE("skipped: the flash-attention kernels need compute capability 8.0 or newer");
      return;
    }
    const nn::BasicKernels<T> kernels(lgtest::nn_kernels());
    Stream& s = lgtest::stream();
    const nn::PrefillAttentionShape shape{
        .rows = 128, .heads = 8, .kv_heads = 2, .head_dim = 64, .context = 256, .slots = 2};
    const std::size_t q_size = static_cast<std::size_t>(128) * 8 * 64;
    const std::size_t kv_size = static_cast<std::size_t>(128) * 2 * 64;
    const std::size_t cache_size = static_cast<std::size_t>(2) * 2 * 256 * 64;
    DeviceBuffer<T> q(lgtest::device(), q_size);
    DeviceBuffer<T> k(lgtest::device(), kv_size);
    DeviceBuffer<T> v(lgtest::device(), kv_size);
    DeviceBuffer<T> k_cache(lgtest::device(), cache_size);
    DeviceBuffer<T> v_cache(lgtest::device(), cache_size);
    DeviceBuffer<T> out(lgtest::device(), q_size);
    DeviceBuffer<int> chunk(lgtest::device(), nn::PrefillChunkLayout::size);
    const auto op = [&] {
      return nn::prefill_attention(
          kernels, {q.cview(), k.cview(), v.cview(), k_cache.view(), v_cache.view(), out.view(), chunk.cview()}, shape);
    };
    // A first launch outside the capture raises the kernel's dynamic shared memory limit (a valid chunk over zeros,
    // then overwritten: it reads only what the test wrote).
    for (DeviceBuffer<T>* b : {&q, &k, &v, &k_cache, &v_cache}) fill(b->view(), T{}).sync_on(s);
    copy(chunk.view(), std::span<const int>(std::vector<int>{0, 1, 0})).sync_on(s);
    op().sync_on(s);
    auto graph = CudaGraph<>::capture(s, op());
    for (const nn::PrefillChunk c :
         {nn::PrefillChunk{0, 100, 1}, nn::PrefillChunk{37, 17, 0}, nn::PrefillChunk{5, 128, 1}}) {
      CAPTURE(c.start);
      CAPTURE(c.rows);
      CAPTURE(c.slot);
      const Problem<T> p(shape, c);
      nn::check_prefill_chunk(shape, c);
      copy(q.view(), std::span<const T>(p.q)).sync_on(s);
      copy(k.view(), std::span<const T>(p.k)).sync_on(s);
      copy(v.view(), std::span<const T>(p.v)).sync_on(s);
      copy(k_cache.view(), std::span<const T>(p.k_cache)).sync_on(s);
      copy(v_cache.view(), std::span<const T>(p.v_cache)).sync_on(s);
      fill(out.view(), poison_of<T>).sync_on(s);
      copy(chunk.view(), std::span<const int>(std::vector<int>{c.start, c.rows, c.slot})).sync_on(s);
      graph.launch();
      const std::vector<T> got = lgtest::to_host(s, out.cview());
      const double err = relative_error(got, reference(p));
      CAPTURE(err);
      CHECK(err <= attention_tolerance<T>);
      CHECK(padding_written(p, got) == 0);
      CHECK(cache_mismatches("k_cache", p, p.k_cache, p.k, lgtest::to_host(s, k_cache.cview())) == 0);
      CHECK(cache_mismatches("v_cache", p, p.v_cache, p.v, lgtest::to_host(s, v_cache.cview())) == 0);
    }
  }

  TEST_CASE_TEMPLATE(
      "prefill_attention over a 1112-token prompt in chunks of 200, 1, 311 and 600 (128-row tiles) equals float64", T,
      half, bfloat16) {
    // Each chunk attends what the chunks before it wrote into the cache: the cache the kernels wrote is the one the
    // next chunk reads. 32 heads over 4 kv heads (TinyLlama's), and multi-head (8 over 8) with head_dim 128.
    if (lgtest::device().compute_capability().major < 8) {
      MESSAGE("skipped: the flash-attention kernels need compute capability 8.0 or newer");
      return;
    }
    const nn::BasicKernels<T> kernels(lgtest::nn_kernels());
    struct Heads {
      int heads, kv_heads, head_dim;
    };
    // Few heads: the long prompt and its chunks are what this proves; more heads only multiply the float64 reference.
    for (const Heads h : {Heads{8, 2, 64}, Heads{4, 4, 128}}) {
      CAPTURE(h.heads);
      CAPTURE(h.head_dim);
      const int total = 1112;
      const nn::PrefillAttentionShape whole{
          .rows = total, .heads = h.heads, .kv_heads = h.kv_heads, .head_dim = h.head_dim, .context = 1152, .slots = 1};
      const Problem<T> p(whole, {.start = 0, .rows = total, .slot = 0});
      const std::vector<double> ref = reference(p);
      Stream& s = lgtest::stream();
      auto k_cache = lgtest::to_device(s, p.k_cache);
      auto v_cache = lgtest::to_device(s, p.v_cache);
      std::vector<T> out(p.q.size());
      const std::size_t q_row = static_cast<std::size_t>(h.heads) * h.head_dim;
      const std::size_t kv_row = static_cast<std::size_t>(h.kv_heads) * h.head_dim;
      int start = 0;
      for (const int rows : {200, 1, 311, 600}) {
        CAPTURE(start);
        const auto slice = [&](const std::vector<T>& all, std::size_t width) {
          return lgtest::to_device(s,
                                   std::vector<T>(all.begin() + static_cast<std::ptrdiff_t>(start * width),
                                                  all.begin() + static_cast<std::ptrdiff_t>((start + rows) * width)));
        };
        const auto q = slice(p.q, q_row);
        const auto k = slice(p.k, kv_row);
        const auto v = slice(p.v, kv_row);
        auto o = lgtest::to_device(s, std::vector<T>(static_cast<std::size_t>(rows) * q_row, poison_of<T>));
        auto shape = whole;
        shape.rows = rows;
        const auto chunk = chunk_on_device({.start = start, .rows = rows, .slot = 0});
        nn::prefill_attention(
            kernels, {q.cview(), k.cview(), v.cview(), k_cache.view(), v_cache.view(), o.view(), chunk.cview()}, shape)
            .sync_on(s);
        const auto got = lgtest::to_host(s, o.cview());
        std::copy(got.begin(), got.end(), out.begin() + static_cast<std::ptrdiff_t>(start * q_row));
        start += rows;
      }
      const double err = relative_error(out, ref);
      CAPTURE(err);
      CHECK(err <= attention_tolerance<T>);
      CHECK(cache_mismatches("k_cache", p, p.k_cache, p.k, lgtest::to_host(s, k_cache.cview())) == 0);
      CHECK(cache_mismatches("v_cache", p, p.v_cache, p.v, lgtest::to_host(s, v_cache.cview())) == 0);
    }
  }

  TEST_CASE_TEMPLATE(
      "paged_prefill_attention through a shuffled table gives prefill_attention's bits and writes the chunk's rows "
      "into the table's blocks only",
      T, half, bfloat16) {
    // The same problem through the contiguous kernel (slot 1 of 2) and through a pool whose shuffled blocks hold that
    // slot's positions: out must be the same bits (padding rows untouched), and the pool the contiguous cache's slot
    // after the launch, block by block, every block outside the table unchanged.
    if (lgtest::device().compute_capability().major < 8) {
      MESSAGE("skipped: the flash-attention kernels need compute capability 8.0 or newer");
      return;
    }
    const nn::BasicKernels<T> kernels(lgtest::nn_kernels());
    struct Case {
      int start, rows, window, block_size, context;
    };
    for (const int head_dim : {64, 128}) {
      // 600 rows take the tiles of 128 rows for head_dim 64; windows cut across blocks and key tiles.
      for (const Case c : {Case{0, 17, 0, 16, 256}, Case{37, 100, 0, 32, 256}, Case{37, 129, 40, 16, 256},
                           Case{90, 100, 70, 32, 256}, Case{5, 600, 0, 16, 768}}) {
        CAPTURE(head_dim);
        CAPTURE(c.start);
        CAPTURE(c.rows);
        CAPTURE(c.window);
        CAPTURE(c.block_size);
        const Problem<T> p({.rows = c.rows,
                            .heads = 6,
                            .kv_heads = 2,
                            .head_dim = head_dim,
                            .context = c.context,
                            .slots = 2,
                            .window = c.window},
                           {.start = c.start, .rows = c.rows, .slot = 1});
        const PagedProblem<T> pp = paged_problem(p, c.block_size, static_cast<unsigned>(c.start + c.rows));
        const Result<T> want = run(kernels, p);
        const Result<T> got = run_paged(kernels, p, pp);
        REQUIRE(got.out.size() == want.out.size());
        int differ = 0;
        for (std::size_t i = 0; i < got.out.size(); ++i) differ += got.out[i].bits != want.out[i].bits ? 1 : 0;
        CHECK(differ == 0);
        CHECK(pool_mismatches("k_pool", p, pp, pp.k_pool, want.k_cache, got.k_cache) == 0);
        CHECK(pool_mismatches("v_pool", p, pp, pp.v_pool, want.v_cache, got.v_cache) == 0);
      }
    }
  }

  TEST_CASE_TEMPLATE(
      "varlen_prefill_attention gives each packed segment paged_prefill_attention's attention through its own table "
      "and writes only its rows' keys and values",
      T, half, bfloat16) {
    // Four sequences' chunks packed in one launch (of up to 5 segments, the rows' spans 3 rows longer than the
    // segments'), each through a shuffled table of its own into one pool. Against float64 per segment, and against
    // paged_prefill_attention of the segment alone: the same pool contents, and the same bits wherever that kernel
    // takes the varlen kernel's tiles (head_dim 128; head_dim 64 above 512 rows); padding rows untouched.
    if (lgtest::device().compute_capability().major < 8) {
      MESSAGE("skipped: the flash-attention kernels need compute capability 8.0 or newer");
      return;
    }
    const nn::BasicKernels<T> kernels(lgtest::nn_kernels());
    Stream& st = lgtest::stream();
    constexpr int max_segments = 5;
    constexpr int context = 768;
    constexpr int padding = 3;
    for (const int head_dim : {64, 128}) {
      for (const int window : {0, 40}) {
        CAPTURE(head_dim);
        CAPTURE(window);
        const std::vector<nn::PrefillChunk> segs{
            {.start = 0, .rows = 17}, {.start = 37, .rows = 100}, {.start = 5, .rows = 600}, {.start = 200, .rows = 1}};
        std::vector<Problem<T>> problems;
        std::vector<PagedProblem<T>> paged;
        std::vector<Result<T>> alone;
        int total = 0;
        int blocks = 0;
        for (std::size_t i = 0; i < segs.size(); ++i) {
          problems.emplace_back(nn::PrefillAttentionShape{.rows = segs[i].rows,
                                                          .heads = 6,
                                                          .kv_heads = 2,
                                                          .head_dim = head_dim,
                                                          .context = context,
                                                          .slots = 1,
                                                          .window = window},
                                nn::PrefillChunk{.start = segs[i].start, .rows = segs[i].rows, .slot = 0});
          paged.push_back(paged_problem(problems.back(), 16, 100U + static_cast<unsigned>(i)));
          alone.push_back(run_paged(kernels, problems.back(), paged.back()));
          total += segs[i].rows;
          blocks += paged.back().layout.blocks;
        }
        const int width = paged[0].layout.table_width;
        const nn::PrefillAttentionShape shape{.rows = total + padding,
                                              .heads = 6,
                                              .kv_heads = 2,
                                              .head_dim = head_dim,
                                              .context = context,
                                              .slots = 1,
                                              .window = window};
        nn::check_prefill_segments(shape, segs, max_segments);
        // Packed q, k, v (random padding rows), one pool of every segment's blocks, each table moved to its blocks.
        std::vector<T> q;
        std::vector<T> k;
        std::vector<T> v;
        std::vector<T> k_pool;
        std::vector<T> v_pool;
        std::vector<T> k_want;
        std::vector<T> v_want;
        std::vector<int> tables(static_cast<std::size_t>(max_segments) * static_cast<std::size_t>(width), 0);
        std::vector<int> segments(nn::PrefillSegmentsLayout::size(max_segments), 0);
        segments[nn::PrefillSegmentsLayout::count] = static_cast<int>(segs.size());
        int first_block = 0;
        for (std::size_t i = 0; i < segs.size(); ++i) {
          q.insert(q.end(), problems[i].q.begin(), problems[i].q.end());
          k.insert(k.end(), problems[i].k.begin(), problems[i].k.end());
          v.insert(v.end(), problems[i].v.begin(), problems[i].v.end());
          k_pool.insert(k_pool.end(), paged[i].k_pool.begin(), paged[i].k_pool.end());
          v_pool.insert(v_pool.end(), paged[i].v_pool.begin(), paged[i].v_pool.end());
          k_want.insert(k_want.end(), alone[i].k_cache.begin(), alone[i].k_cache.end());
          v_want.insert(v_want.end(), alone[i].v_cache.begin(), alone[i].v_cache.end());
          for (int e = 0; e < width; ++e) {
            tables[i * static_cast<std::size_t>(width) + static_cast<std::size_t>(e)] =
                paged[i].table[static_cast<std::size_t>(e)] + first_block;
          }
          segments[nn::PrefillSegmentsLayout::start(static_cast<int>(i))] = segs[i].start;
          segments[nn::PrefillSegmentsLayout::rows(static_cast<int>(i))] = segs[i].rows;
          first_block += paged[i].layout.blocks;
        }
        const std::vector<T> q_pad = random_elements<T>(static_cast<std::size_t>(padding) * 6 * head_dim, 4.0F);
        const std::vector<T> kv_pad = random_elements<T>(static_cast<std::size_t>(padding) * 2 * head_dim);
        q.insert(q.end(), q_pad.begin(), q_pad.end());
        k.insert(k.end(), kv_pad.begin(), kv_pad.end());
        v.insert(v.end(), kv_pad.begin(), kv_pad.end());
        const auto d_q = lgtest::to_device(st, q);
        const auto d_k = lgtest::to_device(st, k);
        const auto d_v = lgtest::to_device(st, v);
        auto d_k_pool = lgtest::to_device(st, k_pool);
        auto d_v_pool = lgtest::to_device(st, v_pool);
        auto d_out = lgtest::to_device(st, std::vector<T>(q.size(), poison_of<T>));
        const auto d_segments = lgtest::to_device(st, segments);
        const auto d_tables = lgtest::to_device(st, tables);
        nn::varlen_prefill_attention(kernels,
                                     {d_q.cview(), d_k.cview(), d_v.cview(), d_k_pool.view(), d_v_pool.view(),
                                      d_out.view(), DeviceSpan<const int>{}},
                                     d_segments.cview(), d_tables.cview(), shape,
                                     {.block_size = 16, .blocks = blocks, .table_width = width}, max_segments)
            .sync_on(st);
        const std::vector<T> out = lgtest::to_host(st, d_out.cview());
        const std::size_t row = static_cast<std::size_t>(6) * static_cast<std::size_t>(head_dim);
        std::size_t at = 0;
        for (std::size_t i = 0; i < segs.size(); ++i) {
          CAPTURE(i);
          const auto rows = static_cast<std::size_t>(segs[i].rows);
          const std::vector<T> got(out.begin() + static_cast<std::ptrdiff_t>(at * row),
                                   out.begin() + static_cast<std::ptrdiff_t>((at + rows) * row));
          const double err = relative_error(got, reference(problems[i]));
          CAPTURE(err);
          CHECK(err <= attention_tolerance<T>);
          if (head_dim == 128 || segs[i].rows > nn::kFlashAttentionWideFrom) {
            int differ = 0;
            for (std::size_t e = 0; e < got.size(); ++e) differ += got[e].bits != alone[i].out[e].bits ? 1 : 0;
            CHECK(differ == 0);
          }
          at += rows;
        }
        int padding_written = 0;
        for (std::size_t e = at * row; e < out.size(); ++e) padding_written += out[e].bits != poison_of<T>.bits ? 1 : 0;
        CHECK(padding_written == 0);
        const std::vector<T> k_got = lgtest::to_host(st, d_k_pool.cview());
        const std::vector<T> v_got = lgtest::to_host(st, d_v_pool.cview());
        int pool_differ = 0;
        for (std::size_t e = 0; e < k_got.size(); ++e) {
          pool_differ += k_got[e].bits != k_want[e].bits ? 1 : 0;
          pool_differ += v_got[e].bits != v_want[e].bits ? 1 : 0;
        }
        CHECK(pool_differ == 0);
      }
    }
  }
}
