// Persistent programs (kernels/persistent_program.hpp) against their own graph form (the same tile code, one
// early-launched kernel per call) and against the library's gemv kernels in a graph, in one run:
//   - a chain of tiny dependent calls: what one boundary costs (a counter wait vs a kernel boundary);
//   - chains of fp16 matrix-vector products shaped like SwiGLU MLP stacks (d -> ffn -> d per layer, the ffn
//     half without its second matrix): how close each gets to the copy ceiling measured in the same run.
// Every figure is the median of 31 samples of 20 replays, timed with CUDA events. The persistent and graph-form
// outputs are compared bit for bit, the library's against them within fp16 rounding.
#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn/kernels.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ceiling.hpp"
#include "cli.hpp"
#include "median.hpp"
#include "tile_profile.hpp"

namespace lg = lazygraph;

namespace {

const char* const kTiles = R"(#include "lazygraph/element.cuh"
#include "lazygraph/tile.cuh"
// out[i] = in[i] * 0.5 + 1 over the tile's share of n elements: an op whose cost is its boundary.
extern "C" __device__ void bump(lg::Tile tile, const float* in, float* out, int n) {
  tile.wait();
  const int per = (n + static_cast<int>(tile.count()) - 1) / static_cast<int>(tile.count());
  const int begin = static_cast<int>(tile.index()) * per;
  for (int i = begin + static_cast<int>(threadIdx.x); i < min(n, begin + per); i += static_cast<int>(tile.threads())) {
    out[i] = in[i] * 0.5f + 1.0f;
  }
}
// The x chunk c (8 values) as floats: fp16 or fp32 x.
__device__ __forceinline__ void load_x(const lg::half_t* x, int c, float (&b)[8]) { lg::unpack8(lg::load8(x + 8 * c), b); }
__device__ __forceinline__ void load_x(const float* x, int c, float (&b)[8]) {
  const float4 lo = *reinterpret_cast<const float4*>(x + 8 * c);
  const float4 hi = *reinterpret_cast<const float4*>(x + 8 * c + 4);
  b[0] = lo.x; b[1] = lo.y; b[2] = lo.z; b[3] = lo.w; b[4] = hi.x; b[5] = hi.y; b[6] = hi.z; b[7] = hi.w;
}
// W[r] . x for this warp's row r of the tile's 8 (a warp each; 256 threads), fp32 sums, on every lane. The first
// kSteps 16-byte chunks of each lane's row are loaded before the wait: weights no call writes.
template <class X>
__device__ __forceinline__ float row_dot(const lg::Tile& tile, const lg::half_t* w, const X* x, int row, int cols) {
  constexpr int kSteps = 8;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int chunks = cols / 8;
  const lg::half_t* wr = w + static_cast<long long>(row) * cols;
  lg::Pack8<lg::half_t> wv[kSteps];
#pragma unroll
  for (int u = 0; u < kSteps; ++u) wv[u] = lg::load8_streaming(wr + 8 * min(lane + 32 * u, chunks - 1));
  tile.wait();
  float acc = 0.0f;
  for (int base = 0; base < chunks; base += 32 * kSteps) {
    if (base > 0) {
#pragma unroll
      for (int u = 0; u < kSteps; ++u) wv[u] = lg::load8_streaming(wr + 8 * min(base + lane + 32 * u, chunks - 1));
    }
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      const int c = base + lane + 32 * u;
      if (c < chunks) {
        float a[8];
        float b[8];
        lg::unpack8(wv[u], a);
        load_x(x, c, b);
#pragma unroll
        for (int k = 0; k < 8; ++k) acc = fmaf(a[k], b[k], acc);
      }
    }
  }
  return lg::warp_sum(acc);
}
// out[r] = (accumulate ? out[r] : 0) + W[r] . x for the tile's 8 rows.
extern "C" __device__ void matvec(lg::Tile tile, const lg::half_t* w, const lg::half_t* x, lg::half_t* out, int rows,
                                  int cols, int accumulate) {
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int row = min(static_cast<int>(tile.index()) * 8 + warp, rows - 1);
  const float acc = row_dot(tile, w, x, row, cols);
  if (threadIdx.x % 32 == 0 && static_cast<int>(tile.index()) * 8 + warp < rows) {
    out[row] = lg::to_half((accumulate != 0 ? lg::to_float(out[row]) : 0.0f) + acc);
  }
}
// out[r] = W[r] . x for the tile's 8 rows, x in fp32 (the residual of the split chain), out fp16.
extern "C" __device__ void matvec_x32(lg::Tile tile, const lg::half_t* w, const float* x, lg::half_t* out, int rows,
                                      int cols) {
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int row = min(static_cast<int>(tile.index()) * 8 + warp, rows - 1);
  const float acc = row_dot(tile, w, x, row, cols);
  if (threadIdx.x % 32 == 0 && static_cast<int>(tile.index()) * 8 + warp < rows) out[row] = lg::to_half(acc);
}
// x[r] += W[r][k * split .. (k + 1) * split) . h[...] for the tile's 8 rows r (tile.block().x) and column slice k
// (tile.block().y), added atomically: a tile needs only its slice of h, so it waits for the few tiles that wrote it.
extern "C" __device__ void matvec_split(lg::Tile tile, const lg::half_t* w, const lg::half_t* h, float* x, int rows,
                                        int cols, int split) {
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const uint3 place = tile.block();
  const int row = min(static_cast<int>(place.x) * 8 + warp, rows - 1);
  const int first = static_cast<int>(place.y) * split / 8;  // chunks
  const int chunks = min(split, cols - static_cast<int>(place.y) * split) / 8;
  const lg::half_t* wr = w + static_cast<long long>(row) * cols + 8LL * first;
  constexpr int kSteps = 8;  // split <= 2048 columns: 256 chunks, 8 per lane
  lg::Pack8<lg::half_t> wv[kSteps];
#pragma unroll
  for (int u = 0; u < kSteps; ++u) wv[u] = lg::load8_streaming(wr + 8 * min(lane + 32 * u, chunks - 1));
  tile.wait();
  float acc = 0.0f;
#pragma unroll
  for (int u = 0; u < kSteps; ++u) {
    const int c = lane + 32 * u;
    if (c < chunks) {
      float a[8];
      float b[8];
      lg::unpack8(wv[u], a);
      lg::unpack8(lg::load8(h + 8 * (first + c)), b);
#pragma unroll
      for (int k = 0; k < 8; ++k) acc = fmaf(a[k], b[k], acc);
    }
  }
  acc = lg::warp_sum(acc);
  if (lane == 0 && static_cast<int>(place.x) * 8 + warp < rows) atomicAdd(x + row, acc);
}
)";

using Gemv = lg::Kernel<void(const lg::half*, const lg::half*, lg::half*, int, int, int)>;

/// Median microseconds of one replay of `graph`.
template <class G>
double replay_us(const lg::Stream& s, G& graph) {
  return 1e6 * bench::median_seconds(
                   s, 20, [&](int) { graph.launch_on(s); },
                   [&] {
                     graph.synchronize();
                     s.synchronize();
                   });
}

std::vector<lg::half> random_halves(std::size_t n, unsigned seed, float scale) {
  std::vector<lg::half> out(n);
  unsigned state = seed * 2654435761U + 1U;
  for (auto& h : out) {
    state = state * 1664525U + 1013904223U;
    h = lg::half::from_float(scale * (static_cast<float>(state >> 8U) / 8388608.0F - 1.0F));
  }
  return out;
}

std::vector<lg::half> to_host(const lg::Stream& s, lg::DeviceSpan<const lg::half> src) {
  std::vector<lg::half> out(src.size());
  lg::copy_async(s, std::span<lg::half>(out), src);
  s.synchronize();
  return out;
}

struct Shape {
  int d;
  int ffn;
  int layers;
};

/// Per tile function of a profiled run: its tiles, the mean microseconds before, in and after the wait, and the
/// run's span.
void print_profile(const char* what, const Shape& shape, const std::vector<lg::PersistentCallProfile>& calls) {
  double span = 0;
  for (const bench::TileFunctionTime& t : bench::by_tile_function(calls, span)) {
    std::printf(
        "<!-- profile %s (%d, %d, %d), span %.1f us: %s %.0f tiles, before wait %.2f us, waiting %.2f, after "
        "%.2f -->\n",
        what, shape.d, shape.ffn, shape.layers, span, t.name.c_str(), t.tiles, t.before / t.tiles, t.waiting / t.tiles,
        t.after / t.tiles);
  }
}

}  // namespace

constexpr const char* usage =
    "usage: bench_persistent\n"
    "Prints tables: persistent programs (docs/persistent.md) against their graph form and the library's gemv\n"
    "kernels -- a chain of tiny dependent calls, and matrix-vector chains of four MLP shapes with and without\n"
    "partial waits and as the library's own tensor-core tiles -- each against the device-to-device copy bandwidth\n"
    "measured in the same run, and where each tile function's time goes. A benchmark, not a test.\n"
    "Exit status: 0 done, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

int main(int argc, char** argv) {
  if (auto code = example::handle_arguments(argc, argv, usage)) return *code;
  if (example::skip_without_gpu("bench_persistent")) return example::exit_skipped;
  try {
    lg::Device gpu = lg::Device::first();
    lg::Stream s(gpu);
    lg::KernelLibraryOptions options;
    options.kernel_sets = {lg::nn::kernel_set(), lg::KernelSet{"bench", {{"bench_tiles.cu", kTiles}}, {}}};
    lg::KernelLibrary lib(gpu, std::move(options));
    const double ceiling = bench::copy_ceiling(s);
    std::printf("%s, copy ceiling %.2f TB/s\n\n", gpu.name().c_str(), ceiling * 1e-12);

    // Tiny dependent calls: the cost of a boundary.
    const auto bump = lib.tile<void(const float*, float*, int)>("bump");
    std::printf(
        "| chain of tiny calls | calls | tiles each | poll pause ns | persistent us | graph form us | per boundary: "
        "persistent / graph us |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    for (const unsigned tiles : {1U, 132U}) {
      for (const unsigned pause : {0U, 32U, 200U}) {
        constexpr int calls = 64;
        const int n = static_cast<int>(tiles) * 256;
        auto a = lg::ones<float>(static_cast<std::size_t>(n)).sync_on(s);
        auto b = lg::ones<float>(static_cast<std::size_t>(n)).sync_on(s);
        std::vector<lg::TileCall> list;
        for (int k = 0; k < calls; ++k) {
          list.push_back(k % 2 == 0 ? bump({{tiles, 1, 1}}, a.cview(), b.view(), n)
                                    : bump({{tiles, 1, 1}}, b.cview(), a.view(), n));
        }
        lg::PersistentOptions popt;
        popt.poll_pause_ns = pause;
        const lg::PersistentProgram program(s, std::move(list), popt);
        auto persistent = lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) { sc.record(program.op()); });
        auto graph_form = lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) { sc.record(program.graph_op()); });
        const double p = replay_us(s, persistent);
        const double g = replay_us(s, graph_form);
        program.check(s);
        std::printf("| bump | %d | %u | %u | %.1f | %.1f | %.2f / %.2f |\n", calls, tiles, pause, p, g, p / calls,
                    g / calls);
      }
    }

    // Matrix-vector chains.
    const auto matvec = lib.tile<void(const lg::half*, const lg::half*, lg::half*, int, int, int)>("matvec");
    const Gemv gemv = lib.get<void(const lg::half*, const lg::half*, lg::half*, int, int, int)>("gemv");
    const Gemv gemv_add = lib.get<void(const lg::half*, const lg::half*, lg::half*, int, int, int)>("gemv_add");
    const auto matvec_x32 = lib.tile<void(const lg::half*, const float*, lg::half*, int, int)>("matvec_x32");
    const auto matvec_split = lib.tile<void(const lg::half*, const lg::half*, float*, int, int, int)>("matvec_split");
    // The library's own tensor-core gemv, as kernels in a graph and as tile functions in a persistent program.
    const Gemv gemv_mma = lib.get<void(const lg::half*, const lg::half*, lg::half*, int, int, int)>("gemv_mma");
    const Gemv gemv_add_mma = lib.get<void(const lg::half*, const lg::half*, lg::half*, int, int, int)>("gemv_add_mma");
    const auto gemv_tile = lib.tile<void(const lg::half*, const lg::half*, lg::half*, int, int, int)>("gemv_mma_tile");
    const auto gemv_add_tile =
        lib.tile<void(const lg::half*, const lg::half*, lg::half*, int, int, int)>("gemv_add_mma_tile");
    std::printf(
        "\n| matvec chain (d, ffn, layers) | weights MB | persistent us | of ceiling | graph form us | of ceiling "
        "| library gemv graph us | of ceiling | persistent, split down us | of ceiling | library mma graph us "
        "| of ceiling | library mma tiles, persistent us | of ceiling | persistent = graph form "
        "| library vs persistent | library vs split | mma graph = mma persistent |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const Shape shape :
         {Shape{512, 1536, 16}, Shape{1024, 4096, 8}, Shape{2048, 5632, 6}, Shape{4096, 11008, 4}}) {
      const auto d = static_cast<std::size_t>(shape.d);
      const auto ffn = static_cast<std::size_t>(shape.ffn);
      std::vector<lg::DeviceBuffer<lg::half>> w1;
      std::vector<lg::DeviceBuffer<lg::half>> w2;
      for (int l = 0; l < shape.layers; ++l) {
        const float scale = 1.0F / std::sqrt(static_cast<float>(d));
        for (auto* list : {&w1, &w2}) {
          // W2 small enough that x stays in fp16's range over the layers (no norm between them here).
          const auto host = random_halves(d * ffn, static_cast<unsigned>(2 * l + (list == &w2 ? 1 : 0)),
                                          list == &w2 ? 0.2F * scale : scale);
          list->emplace_back(gpu, d * ffn);
          lg::copy_async(s, list->back().view(), std::span<const lg::half>(host));
        }
      }
      const auto x0 = random_halves(d, 99, 1.0F);
      auto x = lg::empty<lg::half>(d).sync_on(s);
      auto h = lg::empty<lg::half>(ffn).sync_on(s);
      const auto set_x = [&] {
        lg::copy_async(s, x.view(), std::span<const lg::half>(x0));
        s.synchronize();
      };
      std::vector<lg::TileCall> list;
      for (int l = 0; l < shape.layers; ++l) {
        list.push_back(matvec({{static_cast<unsigned>((ffn + 7) / 8), 1, 1}}, w1[l].cview(), x.cview(), h.view(),
                              shape.ffn, shape.d, 0));
        list.push_back(matvec({{static_cast<unsigned>((d + 7) / 8), 1, 1}}, w2[l].cview(), h.cview(), x.view(), shape.d,
                              shape.ffn, 1));
      }
      const lg::PersistentProgram program(s, list);
      const auto config = [](std::size_t rows) {
        return lg::early(lg::LaunchConfig{{static_cast<unsigned>((rows + 7) / 8), 1, 1}, {32, 1, 8}, 0});
      };
      // The split chain: the residual in fp32, the down projection in column slices of 2048 added atomically, each
      // tile saying what it touches, so a slice's tiles wait only for the tiles of h they read.
      constexpr int split = 2048;
      auto x32 = lg::empty<float>(d).sync_on(s);
      std::vector<lg::TileCall> split_list;
      const CUdeviceptr xa = x32.cview().address();
      const CUdeviceptr ha = h.cview().address();
      const unsigned up_tiles = static_cast<unsigned>((ffn + 7) / 8);
      const unsigned down_rows = static_cast<unsigned>((d + 7) / 8);
      const unsigned down_slices = static_cast<unsigned>((ffn + split - 1) / split);
      for (int l = 0; l < shape.layers; ++l) {
        split_list.push_back(matvec_x32({{up_tiles, 1, 1}}, w1[l].cview(), x32.cview(), h.view(), shape.ffn, shape.d)
                                 .with_tile_accesses([=](unsigned t, lg::AccessSet& a) {
                                   a.read(xa, d * sizeof(float), "up");
                                   a.write(ha + 8 * t * sizeof(lg::half),
                                           std::min<std::size_t>(8, ffn - 8 * t) * sizeof(lg::half), "up");
                                 }));
        split_list.push_back(
            matvec_split({{down_rows, down_slices, 1}}, w2[l].cview(), h.cview(), x32.view(), shape.d, shape.ffn, split)
                .with_tile_accesses([=](unsigned t, lg::AccessSet& a) {
                  const std::size_t r = t % down_rows;
                  const std::size_t k = t / down_rows;
                  a.read(ha + k * split * sizeof(lg::half),
                         std::min<std::size_t>(split, ffn - k * split) * sizeof(lg::half), "down");
                  a.write(xa + 8 * r * sizeof(float), std::min<std::size_t>(8, d - 8 * r) * sizeof(float), "down");
                }));
      }
      const lg::PersistentProgram split_program(s, split_list);
      auto split_graph = lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) { sc.record(split_program.op()); });
      auto persistent = lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) { sc.record(program.op()); });
      auto graph_form = lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) { sc.record(program.graph_op()); });
      auto library = lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) {
        for (int l = 0; l < shape.layers; ++l) {
          sc.record(gemv(config(ffn), w1[l].cview(), x.cview(), h.view(), shape.ffn, shape.d, 1));
          sc.record(gemv_add(config(d), w2[l].cview(), h.cview(), x.view(), shape.d, shape.ffn, 1));
        }
      });
      const auto mma_config = [](std::size_t rows) {
        return lg::early(lg::LaunchConfig{{static_cast<unsigned>((rows + 7) / 8), 1, 1}, {32, 8, 1}, 0});
      };
      auto library_mma = lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) {
        for (int l = 0; l < shape.layers; ++l) {
          sc.record(gemv_mma(mma_config(ffn), w1[l].cview(), x.cview(), h.view(), shape.ffn, shape.d, 1));
          sc.record(gemv_add_mma(mma_config(d), w2[l].cview(), h.cview(), x.view(), shape.d, shape.ffn, 1));
        }
      });
      std::vector<lg::TileCall> mma_list;
      for (int l = 0; l < shape.layers; ++l) {
        mma_list.push_back(gemv_tile({{static_cast<unsigned>((ffn + 7) / 8), 1, 1}}, w1[l].cview(), x.cview(), h.view(),
                                     shape.ffn, shape.d, 1));
        mma_list.push_back(gemv_add_tile({{static_cast<unsigned>((d + 7) / 8), 1, 1}}, w2[l].cview(), h.cview(),
                                         x.view(), shape.d, shape.ffn, 1));
      }
      const lg::PersistentProgram mma_program(s, mma_list);
      // Variants: two blocks per multiprocessor (the dispatch's registers capped at 128, as the kernels'
      // __launch_bounds__ ask) and the next tile's weights prefetched before each tile (prefetch_next).
      std::vector<double> mma_variants;
      for (const auto& [per_sm, prefetch] : {std::pair{2U, false}, std::pair{1U, true}, std::pair{2U, true}}) {
        lg::PersistentOptions o;
        o.min_blocks_per_sm = per_sm;
        o.prefetch_next = prefetch;
        const lg::PersistentProgram variant(s, mma_list, o);
        auto graph = lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) { sc.record(variant.op()); });
        mma_variants.push_back(replay_us(s, graph));
        variant.check(s);
      }
      auto mma_persistent = lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) { sc.record(mma_program.op()); });
      set_x();
      library_mma.launch();
      const auto out_mg = to_host(s, x.cview());
      set_x();
      mma_persistent.launch();
      mma_program.check(s);
      const auto out_mp = to_host(s, x.cview());
      const bool mma_same = std::memcmp(out_mg.data(), out_mp.data(), d * sizeof(lg::half)) == 0;
      // One pass of each from the same x, compared.
      set_x();
      persistent.launch();
      program.check(s);
      const auto out_p = to_host(s, x.cview());
      set_x();
      graph_form.launch();
      const auto out_g = to_host(s, x.cview());
      set_x();
      library.launch();
      const auto out_l = to_host(s, x.cview());
      std::vector<float> x0f;
      for (const lg::half v : x0) x0f.push_back(v.to_float());
      lg::copy_async(s, x32.view(), std::span<const float>(x0f));
      split_graph.launch();
      split_program.check(s);
      std::vector<float> out_s(d);
      lg::copy_async(s, std::span<float>(out_s), x32.cview());
      s.synchronize();
      double err = 0;
      double split_err = 0;
      double scale = 0;
      for (std::size_t i = 0; i < d; ++i) {
        err = std::max(err, std::abs(static_cast<double>(out_l[i].to_float()) - out_p[i].to_float()));
        split_err = std::max(split_err, std::abs(static_cast<double>(out_l[i].to_float()) - out_s[i]));
        scale = std::max(scale, std::abs(static_cast<double>(out_l[i].to_float())));
      }
      const bool same = std::memcmp(out_p.data(), out_g.data(), d * sizeof(lg::half)) == 0;
      const double p = replay_us(s, persistent);
      const double g = replay_us(s, graph_form);
      const double l = replay_us(s, library);
      const double sp = replay_us(s, split_graph);
      const double mg = replay_us(s, library_mma);
      const double mp = replay_us(s, mma_persistent);
      mma_program.check(s);
      program.check(s);
      split_program.check(s);
      const double bytes = 2.0 * static_cast<double>(d * ffn) * sizeof(lg::half) * shape.layers;
      const auto frac = [&](double us) { return bytes / (us * 1e-6) / ceiling; };
      std::printf(
          "| (%d, %d, %d) | %.1f | %.1f | %.2f | %.1f | %.2f | %.1f | %.2f | %.1f | %.2f | %.1f | %.2f | %.1f | %.2f "
          "| %s | %.1e | %.1e | %s |\n",
          shape.d, shape.ffn, shape.layers, bytes * 1e-6, p, frac(p), g, frac(g), l, frac(l), sp, frac(sp), mg,
          frac(mg), mp, frac(mp), same ? "yes" : "NO", err / scale, split_err / scale, mma_same ? "yes" : "NO");
      std::printf("<!-- mma tiles (%d, %d, %d): 2 per SM %.1f us, prefetch_next %.1f us, both %.1f us -->\n", shape.d,
                  shape.ffn, shape.layers, mma_variants[0], mma_variants[1], mma_variants[2]);
      std::printf("<!-- first values: library %g %g, persistent %g %g, split %g %g -->\n", out_l[0].to_float(),
                  out_l[1].to_float(), out_p[0].to_float(), out_p[1].to_float(), out_s[0], out_s[1]);
      // Where the time goes, per tile function: profiled copies of both programs, one run each.
      lg::PersistentOptions profiled;
      profiled.profile = true;
      for (const auto* calls : {&list, &split_list, &mma_list}) {
        const lg::PersistentProgram p2(s, *calls, profiled);
        p2.op().sync_on(s);
        p2.check(s);
        print_profile(calls == &list         ? "persistent"
                      : calls == &split_list ? "split"
                                             : "mma tiles",
                      shape, p2.profile(s));
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_persistent: %s\n", e.what());
    return 1;
  }
}
