// Persistent programs (kernels/persistent_program.hpp): tile-function calls run in one persistent kernel compute what
// running them one after another computes, as their graph form does; a stuck counter ends the kernel with a
// TimeoutError instead of a hang; a tile that forgets to wait is reported; more blocks than fit are refused (gpu).
#include <doctest/doctest.h>

#include <lazygraph/kernels/persistent_program.hpp>
#include <lazygraph/lazygraph.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {

const char* const kPersistentTiles = R"(#include "lazygraph/condition.cuh"
#include "lazygraph/tile.cuh"
// out[i] = a * in[(i + shift) % n] + b over the tile's share of i: every tile reads what other tiles of the call
// that wrote `in` wrote, so the call must wait for all of that call.
extern "C" __device__ void rotate_scale(lg::Tile tile, const float* in, float* out, int n, int shift, float a,
                                        float b) {
  tile.wait();
  const int per = (n + static_cast<int>(tile.count()) - 1) / static_cast<int>(tile.count());
  const int begin = static_cast<int>(tile.index()) * per;
  const int end = min(n, begin + per);
  for (int i = begin + static_cast<int>(threadIdx.x); i < end; i += static_cast<int>(tile.threads())) {
    out[i] = a * in[(i + shift) % n] + b;
  }
}
// out[i] = 2 * in[i] + 1 over slice `tile` of `per` elements: a tile reads and writes its own slice only.
extern "C" __device__ void slice_scale(lg::Tile tile, const float* in, float* out, int per) {
  tile.wait();
  const int begin = static_cast<int>(tile.index()) * per;
  for (int i = static_cast<int>(threadIdx.x); i < per; i += static_cast<int>(tile.threads())) {
    out[begin + i] = 2.0f * in[begin + i] + 1.0f;
  }
}
// Counts *left down by one and continues the loop of `c` while it is above zero (an ordinary kernel).
extern "C" __global__ void count_down(lg::Condition c, unsigned* left) {
  *left -= 1u;
  lg::set_condition(c, *left > 0u ? 1u : 0u);
}
// Sets *done once *flag is nonzero, or after bound_ns: a producer that may not finish in time.
extern "C" __device__ void wait_flag(lg::Tile tile, const unsigned* flag, unsigned* done,
                                     unsigned long long bound_ns) {
  tile.wait();
  if (threadIdx.x == 0) {
    const unsigned long long start = lg::detail::global_time_ns();
    while (*static_cast<const volatile unsigned*>(flag) == 0u && lg::detail::global_time_ns() - start < bound_ns) {
    }
    *done = 1u;
  }
}
// Writes without waiting: a broken tile function.
extern "C" __device__ void no_wait(lg::Tile tile, float* out) {
  if (threadIdx.x == 0) out[tile.index()] = 1.0f;
}
// out[tile] = its place in a 3-D tile grid, passed through the tile's dynamic shared memory.
extern "C" __device__ void grid_place(lg::Tile tile, unsigned* out) {
  tile.wait();
  unsigned* shared = reinterpret_cast<unsigned*>(tile.shared());
  const uint3 p = tile.block();
  const uint3 g = tile.grid();
  if (threadIdx.x == 0) shared[0] = p.x + 100u * p.y + 10000u * p.z + 1000000u * (g.x * g.y * g.z == tile.count());
  __syncthreads();
  if (threadIdx.x == 1 % tile.threads()) out[tile.index()] = shared[0];
}
// out[2 tile] = the tile's index, passed through the last word of its dynamic shared memory; out[2 tile + 1] = the
// bytes it says it has.
extern "C" __device__ void last_shared_word(lg::Tile tile, unsigned* out) {
  tile.wait();
  unsigned* shared = reinterpret_cast<unsigned*>(tile.shared());
  const unsigned last = tile.shared_bytes() / 4 - 1;
  if (threadIdx.x == 0) shared[last] = tile.index() + 7u;
  __syncthreads();
  if (threadIdx.x == 1 % tile.threads()) {
    out[2 * tile.index()] = shared[last];
    out[2 * tile.index() + 1] = tile.shared_bytes();
  }
}
)";

KernelLibrary& persistent_library() {
  static KernelLibrary lib = [] {
    KernelLibraryOptions opts = lgtest::own_kernels({{"persistent_tiles.cu", kPersistentTiles}});
    return KernelLibrary(lgtest::device(), std::move(opts));
  }();
  return lib;
}

using RotateScaleTile = TileFunction<void(const float*, float*, int, int, float, float)>;

struct ChainStep {
  int from;
  int to;
  int shift;
  float a;
  float b;
};

// 12 calls over 4 buffers: call k reads buffer k % 4 and writes buffer (k + 1) % 4, so each call depends on the one
// before it (read after write) and on the one three before (write after read).
std::vector<ChainStep> persistent_chain() {
  std::vector<ChainStep> steps;
  for (int k = 0; k < 12; ++k) steps.push_back({k % 4, (k + 1) % 4, 1 + 37 * k, 0.5F + 0.1F * k, 0.25F - 0.05F * k});
  return steps;
}

std::vector<std::vector<double>> chain_reference(const std::vector<std::vector<float>>& start,
                                                 const std::vector<ChainStep>& steps) {
  std::vector<std::vector<double>> v;
  for (const auto& b : start) v.emplace_back(b.begin(), b.end());
  const auto n = static_cast<int>(v[0].size());
  for (const ChainStep& s : steps) {
    std::vector<double> out(v[s.to]);
    for (int i = 0; i < n; ++i) out[i] = s.a * v[s.from][(i + s.shift) % n] + s.b;
    v[s.to] = out;
  }
  return v;
}

std::vector<TileCall> chain_calls(const RotateScaleTile& f, std::vector<DeviceBuffer<float>>& bufs,
                                  const std::vector<ChainStep>& steps, int n, unsigned tiles) {
  std::vector<TileCall> out;
  for (const ChainStep& s : steps) {
    out.push_back(f({{tiles, 1, 1}}, bufs[s.from].cview(), bufs[s.to].view(), n, s.shift, s.a, s.b));
  }
  return out;
}

bool same_float_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("the generated kernel includes each function's file once, dispatches by index, checks the host's sizes") {
  auto file = std::make_shared<const KernelSource>(KernelSource{"mine/tiles.cu", "// tiles"});
  auto headers = std::make_shared<const std::vector<KernelSource>>(std::vector<KernelSource>{{"mine/util.cuh", "//"}});
  detail::TileInfo a;
  a.name = "first";
  a.file = file;
  a.headers = headers;
  a.prefetch = "first_prefetch";
  detail::TileInfo b = a;
  b.name = "second";
  b.prefetch.clear();
  const std::vector<const detail::TileInfo*> functions{&a, &b};
  const std::vector<std::vector<unsigned>> sizes{{8, 4}, {}};
  const std::string src = detail::persistent_source(functions, sizes, 128, 2);
  CHECK(src.find("#include \"mine/tiles.cu\"") != std::string::npos);
  CHECK(src.find("#include \"mine/tiles.cu\"") == src.rfind("#include \"mine/tiles.cu\""));
  // The files' variant tables' kernels are left out (kernel_variants.py guards them): only their tile functions run.
  CHECK(src.find("#define LAZYGRAPH_TILES_ONLY") < src.find("#include \"mine/tiles.cu\""));
  CHECK(src.find("case 0: lg::call_tile(&first, tile, args)") != std::string::npos);
  CHECK(src.find("case 1: lg::call_tile(&second, tile, args)") != std::string::npos);
  CHECK(src.find("lg::check_tile_parameters<8u, 4u>(&first)") != std::string::npos);
  CHECK(src.find("case 0: lg::call_tile(&first_prefetch, tile, args)") != std::string::npos);  // in lazygraph_prefetch
  CHECK(src.find("second_prefetch") == std::string::npos);
  CHECK(src.find("__launch_bounds__(128, 2) lazygraph_persistent") != std::string::npos);
  CHECK(src.find("lazygraph_tile_1(const unsigned char* args)") != std::string::npos);
  const std::vector<KernelSource> all = detail::persistent_headers(functions);
  CHECK(std::count_if(all.begin(), all.end(), [](const KernelSource& h) { return h.name == "mine/tiles.cu"; }) == 1);
  CHECK(std::count_if(all.begin(), all.end(), [](const KernelSource& h) { return h.name == "lazygraph/tile.cuh"; }) ==
        1);
  detail::TileInfo c = a;
  c.name = "third";
  c.headers =
      std::make_shared<const std::vector<KernelSource>>(std::vector<KernelSource>{{"mine/util.cuh", "// other"}});
  const std::vector<const detail::TileInfo*> clash{&a, &c};
  CHECK_THROWS_WITH_AS(detail::persistent_headers(clash), doctest::Contains("mine/util.cuh"), UsageError);
}

TEST_CASE("tile arguments are packed at multiples of their alignment, as the kernel reads them") {
  const std::vector<unsigned char> packed =
      detail::pack_tile_arguments(std::tuple<char, double, int, half>{'x', 2.5, 7, half(1.0F)});
  REQUIRE(packed.size() == 22);
  double d = 0;
  int i = 0;
  std::memcpy(&d, packed.data() + 8, sizeof d);
  std::memcpy(&i, packed.data() + 16, sizeof i);
  CHECK(packed[0] == 'x');
  CHECK(d == 2.5);
  CHECK(i == 7);
}

TEST_SUITE("gpu") {
  TEST_CASE("a persistent program computes what its calls in order compute, as its graph form does, replay by replay") {
    Stream& s = lgtest::stream();
    const auto f = persistent_library().tile<void(const float*, float*, int, int, float, float)>("rotate_scale");
    constexpr int n = 50000;
    const std::vector<ChainStep> steps = persistent_chain();
    for (const unsigned tiles : {1U, 7U, 300U}) {
      CAPTURE(tiles);
      std::vector<std::vector<float>> start;
      std::vector<DeviceBuffer<float>> bufs;
      for (int b = 0; b < 4; ++b) {
        start.push_back(lgtest::random_floats(n));
        bufs.push_back(lgtest::to_device(s, start.back()));
      }
      const PersistentProgram program(s, chain_calls(f, bufs, steps, n, tiles));
      CHECK(program.blocks() >= 1);
      CHECK(program.blocks() <= 12 * tiles);
      // Call k waits for call k - 1 (it reads what that wrote) and, from k = 3 on, for call k - 3 (it overwrites
      // what that read), unless implied: k - 3 precedes k - 1 in the chain, so one edge each.
      for (std::size_t k = 1; k < steps.size(); ++k)
        CHECK(program.schedule().after[k] == std::vector<std::uint32_t>{static_cast<std::uint32_t>(k - 1)});

      // Eagerly: the persistent op, then the graph form from the same start.
      program.op().sync_on(s);
      program.check(s);
      const auto want = chain_reference(start, steps);
      std::vector<std::vector<float>> persistent;
      for (int b = 0; b < 4; ++b) {
        persistent.push_back(lgtest::to_host(s, bufs[b].cview()));
        CHECK(lgtest::relative_error(persistent.back(), want[b]) < 1e-5);
        copy_async(s, bufs[b].view(), std::span<const float>(start[b]));
      }
      program.graph_op().sync_on(s);
      for (int b = 0; b < 4; ++b) CHECK(same_float_bits(lgtest::to_host(s, bufs[b].cview()), persistent[b]));

      // Recorded into a graph and replayed on fresh inputs.
      auto graph = CudaGraph<>::scope(s, [&](Scope& sc) { sc.record(program.op()); });
      for (int replay = 0; replay < 3; ++replay) {
        for (int b = 0; b < 4; ++b) {
          start[b] = lgtest::random_floats(n);
          graph.update(copy(bufs[b].view(), lgtest::to_device(s, start[b]).cview()));
        }
        graph.launch();
        program.check(s);
        const auto again = chain_reference(start, steps);
        for (int b = 0; b < 4; ++b) CHECK(lgtest::relative_error(lgtest::to_host(s, bufs[b].cview()), again[b]) < 1e-5);
      }
    }
  }

  TEST_CASE(
      "tiles that say what they touch wait only for the tiles they read, and compute what the calls in order do") {
    Stream& s = lgtest::stream();
    const auto slices = persistent_library().tile<void(const float*, float*, int)>("slice_scale");
    const auto whole = persistent_library().tile<void(const float*, float*, int, int, float, float)>("rotate_scale");
    constexpr unsigned tiles = 64;
    constexpr int per = 512;
    constexpr int n = static_cast<int>(tiles) * per;
    const std::vector<float> a0 = lgtest::random_floats(n);
    auto a = lgtest::to_device(s, a0);
    DeviceBuffer<float> b(lgtest::device(), n);
    DeviceBuffer<float> c(lgtest::device(), n);
    const auto sliced = [&](const DeviceBuffer<float>& from, DeviceBuffer<float>& to) {
      const CUdeviceptr in = from.cview().address();
      const CUdeviceptr out = to.cview().address();
      return slices({{tiles, 1, 1}}, from.cview(), to.view(), per).with_tile_accesses([=](unsigned t, AccessSet& acc) {
        acc.read(in + t * per * sizeof(float), per * sizeof(float), "slice_scale");
        acc.write(out + t * per * sizeof(float), per * sizeof(float), "slice_scale");
      });
    };
    // a -> b -> c by slices, then c -> a whole (a rotation), then a -> b by slices again.
    const PersistentProgram program(
        s, {sliced(a, b), sliced(b, c), whole({{tiles, 1, 1}}, c.cview(), a.view(), n, 5, 0.5F, 0.0F), sliced(a, b)});
    for (unsigned t = 0; t < tiles; ++t) {
      REQUIRE(program.schedule().waits_of(1, t).size() == 1);
      CHECK(program.schedule().waits_of(1, t)[0] == detail::TileWait{0, t, 1});
    }
    CHECK(program.schedule().waits_of(3, 7).size() == 1);
    CHECK(program.schedule().waits_of(3, 7)[0].first == detail::kWholeCall);
    for (int run = 0; run < 3; ++run) {
      copy_async(s, a.view(), std::span<const float>(a0));
      program.op().sync_on(s);
      program.check(s);
      std::vector<double> want_b(n);
      std::vector<double> want_c(n);
      std::vector<double> want_a(n);
      for (int i = 0; i < n; ++i) want_c[i] = 2.0 * (2.0 * a0[i] + 1.0) + 1.0;
      for (int i = 0; i < n; ++i) want_a[i] = 0.5 * want_c[(i + 5) % n];
      for (int i = 0; i < n; ++i) want_b[i] = 2.0 * want_a[i] + 1.0;
      CHECK(lgtest::relative_error(lgtest::to_host(s, c.cview()), want_c) < 1e-6);
      CHECK(lgtest::relative_error(lgtest::to_host(s, a.cview()), want_a) < 1e-6);
      CHECK(lgtest::relative_error(lgtest::to_host(s, b.cview()), want_b) < 1e-6);
    }
  }

  TEST_CASE("a persistent program is the body of a while_ loop, iteration after iteration, replay after replay") {
    Stream& s = lgtest::stream();
    const auto f = persistent_library().tile<void(const float*, float*, int, int, float, float)>("rotate_scale");
    const auto count_down = persistent_library().get<void(Condition, unsigned*)>("count_down");
    constexpr int n = 4096;
    const std::vector<float> x0 = lgtest::random_floats(n);
    auto x = lgtest::to_device(s, x0);
    DeviceBuffer<float> y(lgtest::device(), n);
    auto left = lgtest::to_device(s, std::vector<unsigned>{0});
    const LoopBound bound(persistent_library(), 100);
    const PersistentProgram program(s, {f({{8, 1, 1}}, x.cview(), y.view(), n, 3, 0.5F, 1.0F),
                                        f({{8, 1, 1}}, y.cview(), x.view(), n, 5, 1.5F, -0.25F)});
    const LaunchConfig one{{1, 1, 1}, {1, 1, 1}, 0};
    auto g = CudaGraph<>::scope(s, [&](Scope& sc) {
      const Condition c = sc.condition(1);
      sc.record(while_(c, program.op() >> count_down(one, c, left.view()), bound));
    });
    for (const unsigned k : {3U, 1U, 7U}) {
      CAPTURE(k);
      g.update(copy(x.view(), lgtest::to_device(s, x0).cview()));
      g.update(copy(left.view(), lgtest::to_device(s, std::vector<unsigned>{k}).cview()));
      g.launch();
      program.check(s);
      std::vector<double> want(x0.begin(), x0.end());
      for (unsigned it = 0; it < k; ++it) {
        std::vector<double> mid(n);
        for (int i = 0; i < n; ++i) mid[i] = 0.5 * want[(i + 3) % n] + 1.0;
        for (int i = 0; i < n; ++i) want[i] = 1.5 * mid[(i + 5) % n] - 0.25;
      }
      CHECK(lgtest::relative_error(lgtest::to_host(s, x.cview()), want) < 1e-5);
      CHECK(bound.iterations(s) == k);
    }
  }

  TEST_CASE("a profiled program says, per call, how long its tiles waited and worked") {
    Stream& s = lgtest::stream();
    const auto f = persistent_library().tile<void(const float*, float*, int, int, float, float)>("rotate_scale");
    constexpr int n = 1 << 16;
    auto x = lgtest::to_device(s, lgtest::random_floats(n));
    DeviceBuffer<float> y(lgtest::device(), n);
    PersistentOptions options;
    options.profile = true;
    const PersistentProgram program(s,
                                    {f({{32, 1, 1}}, x.cview(), y.view(), n, 1, 1.0F, 0.0F),
                                     f({{32, 1, 1}}, y.cview(), x.view(), n, 1, 1.0F, 0.0F)},
                                    options);
    program.op().sync_on(s);
    program.check(s);
    const std::vector<PersistentCallProfile> p = program.profile(s);
    REQUIRE(p.size() == 2);
    CHECK(p[0].name == "rotate_scale");
    CHECK(p[0].tiles == 32);
    CHECK(p[0].first_start >= 0.0);
    CHECK(p[0].last_end > p[0].first_start);
    CHECK(p[1].last_end >= p[0].last_end);  // the second call's tiles wait for all of the first
    CHECK(p[1].waiting >= 0.0);
    CHECK(p[0].after_wait > 0.0);
    const PersistentProgram plain(s, {f({{32, 1, 1}}, x.cview(), y.view(), n, 1, 1.0F, 0.0F)});
    CHECK_THROWS_AS((void)plain.profile(s), UsageError);
  }

  TEST_CASE("a tile grid of three dimensions and dynamic shared memory reach every tile") {
    Stream& s = lgtest::stream();
    const auto f = persistent_library().tile<void(unsigned*)>("grid_place");
    DeviceBuffer<unsigned> out(lgtest::device(), 24);
    const PersistentProgram program(s, {f({{4, 3, 2}, 64}, out.view())});
    program.op().sync_on(s);
    program.check(s);
    const std::vector<unsigned> got = lgtest::to_host(s, out.cview());
    for (unsigned z = 0; z < 2; ++z) {
      for (unsigned y = 0; y < 3; ++y) {
        for (unsigned x = 0; x < 4; ++x) CHECK(got[x + 4 * (y + 3 * z)] == x + 100 * y + 10000 * z + 1000000);
      }
    }
  }

  TEST_CASE("a tile gets the dynamic shared memory its call asks, beyond the default 48 KiB, in both forms") {
    Stream& s = lgtest::stream();
    const auto f = persistent_library().tile<void(unsigned*)>("last_shared_word");
    constexpr unsigned bytes = 96 * 1024;
    DeviceBuffer<unsigned> out(lgtest::device(), 2 * 5);
    const PersistentProgram program(s, {f({{5, 1, 1}, bytes}, out.view())});
    for (const bool persistent : {true, false}) {
      CAPTURE(persistent);
      fill(out.view(), 0U).sync_on(s);
      if (persistent) {
        program.op().sync_on(s);
      } else {
        program.graph_op().sync_on(s);
      }
      program.check(s);
      const std::vector<unsigned> got = lgtest::to_host(s, out.cview());
      for (unsigned t = 0; t < 5; ++t) {
        CHECK(got[2 * t] == t + 7);
        CHECK(got[2 * t + 1] == bytes);
      }
    }
  }

  TEST_CASE(
      "a stuck counter ends the persistent kernel with a TimeoutError naming the calls, and the program runs again") {
    Stream& s = lgtest::stream();
    const auto stuck = persistent_library().tile<void(const unsigned*, unsigned*, unsigned long long)>("wait_flag");
    const auto f = persistent_library().tile<void(const float*, float*, int, int, float, float)>("rotate_scale");
    auto flag = lgtest::to_device(s, std::vector<unsigned>{0});
    auto done = lgtest::to_device(s, std::vector<unsigned>{0});
    auto x = lgtest::to_device(s, lgtest::random_floats(1000));
    DeviceBuffer<float> y(lgtest::device(), 1000);
    PersistentOptions options;
    options.timeout = std::chrono::milliseconds(50);
    // Call 1 reads `done`, which call 0 writes only once the flag is set (or after 1 s): call 1 times out first.
    const PersistentProgram program(
        s,
        {stuck({{1, 1, 1}}, flag.cview(), done.view(), 1'000'000'000ULL),
         f({{4, 1, 1}}, x.cview(), y.view(), 1000, 3, 2.0F, 1.0F), stuck({{1, 1, 1}}, done.cview(), done.view(), 0ULL)},
        options);
    const auto start = std::chrono::steady_clock::now();
    program.op().sync_on(s);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
    try {
      program.check(s);
      FAIL("no TimeoutError");
    } catch (const TimeoutError& e) {
      const std::string what = e.what();
      CHECK(what.find("call 2 (wait_flag)") != std::string::npos);
      CHECK(what.find("for call 0 (wait_flag)") != std::string::npos);
      CHECK(what.find("0 of its 1 tiles") != std::string::npos);
    }
    // Collected: with the flag set, the program runs through.
    copy_async(s, flag.view(), std::span<const unsigned>(std::vector<unsigned>{1}));
    program.op().sync_on(s);
    CHECK_NOTHROW(program.check(s));
    CHECK(lgtest::to_host(s, done.cview())[0] == 1U);
  }

  TEST_CASE("a tile function that returns without waiting is reported by name") {
    Stream& s = lgtest::stream();
    const auto f = persistent_library().tile<void(float*)>("no_wait");
    DeviceBuffer<float> out(lgtest::device(), 8);
    const PersistentProgram program(s, {f({{8, 1, 1}}, out.view())});
    program.op().sync_on(s);
    CHECK_THROWS_WITH_AS(program.check(s), doctest::Contains("(no_wait) returned without calling tile.wait()"),
                         UsageError);
  }

  TEST_CASE("a program refuses more blocks than can be resident, and signatures that differ from the declaration") {
    Stream& s = lgtest::stream();
    const auto f = persistent_library().tile<void(float*)>("no_wait");
    DeviceBuffer<float> out(lgtest::device(), 8);
    PersistentOptions options;
    options.blocks = 1U << 20;
    CHECK_THROWS_WITH_AS(PersistentProgram(s, {f({{8, 1, 1}}, out.view())}, options),
                         doctest::Contains("can be resident at once"), UsageError);
    CHECK_THROWS_WITH_AS((void)persistent_library().tile<void(const float*)>("no_wait"),
                         doctest::Contains("parameter 0"), UsageError);
    CHECK_THROWS_WITH_AS((void)persistent_library().tile<void(float*)>("nothing"),
                         doctest::Contains("unknown tile function"), UsageError);
    CHECK_THROWS_AS((void)f({{0, 1, 1}}, out.view()), UsageError);
  }
}
