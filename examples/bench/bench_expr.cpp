// Fused elementwise expressions (issue 14): an elementwise chain of k = 1..8 steps on 1M and 16M elements, as k
// separate assign kernels (each step's result written to memory and read back by the next) vs one fused expression,
// both recorded into a graph and replayed; plus what a new expression costs to generate and compile, and what an op
// of an expression already compiled costs. Medians of many samples, timed with CUDA events; bandwidth as a fraction
// of the device-to-device copy ceiling measured in the same run.
#include <lazygraph/lazygraph.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>  // setenv, mkdtemp (POSIX, declared by glibc's stdlib.h)
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ceiling.hpp"
#include "cli.hpp"
#include "median.hpp"

namespace lg = lazygraph;
using lg::half;

namespace {

using bench::median;
using bench::median_seconds;

/// Step j of the chain: cheap arithmetic (a multiply-add, or a clamp and a scale), so that even eight fused steps
/// stay bound by memory, not by arithmetic.
template <int J, class X>
auto step(const X& x) {
  if constexpr (J % 2 == 0) {
    return x * (1.0F - 0.001F * J) + 0.01F * (J + 1);
  } else {
    return lg::max(x, -0.5F - 0.01F * J) * (1.0F + 0.001F * J);
  }
}

/// Steps 0..K-1 applied to x, as one expression.
template <int K, class X>
auto chain(const X& x) {
  if constexpr (K == 0) {
    return x;
  } else {
    return step<K - 1>(chain<K - 1>(x));
  }
}

template <class T>
lg::DeviceBuffer<T> random_buffer(const lg::Stream& s, std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<T> h(n);
  for (T& v : h) {
    if constexpr (std::is_same_v<T, float>) {
      v = dist(rng);
    } else {
      v = T::from_float(dist(rng));
    }
  }
  return lg::from_host(h).sync_on(s);
}

/// Buffers of one size: the input, two buffers the separate steps alternate between, and the output.
template <class T>
struct Buffers {
  Buffers(const lg::Stream& s, std::size_t n)
      : x(random_buffer<T>(s, n, 1)),
        a(lg::empty<T>(n).sync_on(s)),
        b(lg::empty<T>(n).sync_on(s)),
        out(lg::empty<T>(n).sync_on(s)) {}
  lg::DeviceBuffer<T> x;
  lg::DeviceBuffer<T> a;
  lg::DeviceBuffer<T> b;
  lg::DeviceBuffer<T> out;
};

/// Step J as its own assign: reads step J-1's result (x for the first), writes its own (out for the last). Steps
/// alternate between buffers a and b, so that no step is in place.
template <class T, int J, int K>
auto separate_step(Buffers<T>& buf) {
  const lg::DeviceSpan<const T> in = J == 0 ? buf.x.cview() : (J % 2 == 1 ? buf.a.cview() : buf.b.cview());
  const lg::DeviceSpan<T> out = J == K - 1 ? buf.out.view() : (J % 2 == 0 ? buf.a.view() : buf.b.view());
  if constexpr (std::is_same_v<T, float>) {
    return lg::assign(out, step<J>(in));
  } else {
    return lg::assign(out, lg::cast<T>(step<J>(lg::cast<float>(in))));
  }
}

template <class T, int K, int... J>
auto separate_chain(const lg::Device& device, Buffers<T>& buf, std::integer_sequence<int, J...> /*steps*/) {
  (separate_step<T, J, K>(buf).prepare(device), ...);  // compile before the capture
  return (separate_step<T, J, K>(buf) >> ...);
}

template <class T, int K>
auto fused_chain(const lg::Device& device, Buffers<T>& buf) {
  auto op = lg::assign(buf.out.view(), lg::cast<T>(chain<K>(lg::cast<float>(buf.x.cview()))));
  op.prepare(device);
  return op;
}

const char* type_name(float /*unused*/) { return "float"; }
const char* type_name(half /*unused*/) { return "half"; }

template <class T, int K>
void time_chain(const lg::Stream& s, Buffers<T>& buf, std::size_t n, double copy_bw, double t_copy) {
  auto separate =
      lg::CudaGraph<>::capture(s, separate_chain<T, K>(s.device(), buf, std::make_integer_sequence<int, K>{}));
  auto fused = lg::CudaGraph<>::capture(s, fused_chain<T, K>(s.device(), buf));
  const int reps = std::max(3, static_cast<int>((1ULL << 30U) / (n * sizeof(T) * 2 * K)));
  const double t_separate = median_seconds(s, reps, [&](int) { separate.launch_on(s); });
  const double t_fused = median_seconds(s, reps, [&](int) { fused.launch_on(s); });
  const double bytes_separate = 2.0 * static_cast<double>(n * sizeof(T)) * K;
  const double bytes_fused = 2.0 * static_cast<double>(n * sizeof(T));
  const double speedup = t_separate / t_fused;
  std::printf("| %s | %zuM | %d | %.1f | %.0f | %.0f%% | %.1f | %.0f | %.0f%% | %.1f | %.2f | %.2fx | %s |\n",
              type_name(T{}), n >> 20U, K, t_separate * 1e6, bytes_separate / 1e6,
              100.0 * bytes_separate / t_separate / copy_bw, t_fused * 1e6, bytes_fused / 1e6,
              100.0 * bytes_fused / t_fused / copy_bw, t_copy * 1e6, t_copy / t_fused, speedup,
              K < 3 ? "-" : (speedup >= K - 0.5 ? "yes" : "NO"));
  std::fflush(stdout);
}

template <class T, int... K>
void time_chains(const lg::Stream& s, std::size_t n, double copy_bw, std::integer_sequence<int, K...> /*ks*/) {
  Buffers<T> buf(s, n);
  // The ceiling for these bytes: a device-to-device copy of the n elements, the same bytes read and written as the
  // fused kernel's (a copy this small does not reach the 1 GiB copy's bandwidth: its start and end cost the same).
  auto copy = lg::CudaGraph<>::capture(s, lg::copy(buf.out.view(), buf.x.cview()));
  const int reps = std::max(3, static_cast<int>((1ULL << 30U) / (n * sizeof(T) * 2)));
  const double t_copy = median_seconds(s, reps, [&](int) { copy.launch_on(s); });
  (time_chain<T, K + 1>(s, buf, n, copy_bw, t_copy), ...);
}

/// Milliseconds `f()` takes, once.
template <class F>
double milliseconds(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

/// The cost of a new expression: generating its source, compiling it with NVRTC and loading it (first use), and of
/// an op of an expression already loaded (building the op and looking the kernel up), and of one in the disk cache.
void compile_costs(const lg::Stream& s) {
  const std::size_t n = 1024;
  lg::DeviceBuffer<float> x = random_buffer<float>(s, n, 3);
  lg::DeviceBuffer<float> y = random_buffer<float>(s, n, 4);
  lg::DeviceBuffer<float> out = lg::empty<float>(n).sync_on(s);
  const auto first = [&](float k) {
    return lg::assign(out.view(), lg::silu(x.cview()) * y.cview() + k * lg::tanh(x.cview()));
  };
  const auto second = [&](float k) { return lg::assign(out.view(), lg::exp(x.cview() - k) * y.cview()); };
  const auto third = [&](float k) { return lg::assign(out.view(), lg::select(x.cview() < y.cview(), x.cview(), k)); };
  const auto fourth = [&](float k) { return lg::assign(out.view(), lg::rsqrt(lg::abs(x.cview()) + k) - y.cview()); };
  // A first use is the op's first run on the GPU, waited for: generating, compiling, loading, and whatever the
  // driver defers to the first launch (with lazy module loading, putting the code on the GPU).
  const double first_ms = milliseconds([&] { first(2.0F).sync_on(s); });
  std::vector<double> new_ms{milliseconds([&] { second(1.0F).sync_on(s); }),
                             milliseconds([&] { third(1.0F).sync_on(s); }),
                             milliseconds([&] { fourth(1.0F).sync_on(s); })};
  const double run_ms = milliseconds([&] { fourth(2.0F).sync_on(s); });
  std::vector<double> reuse_ms;
  reuse_ms.reserve(1001);
  for (int i = 0; i < 1001; ++i) {
    reuse_ms.push_back(milliseconds([&] { second(static_cast<float>(i)).prepare(s.device()); }));
  }
  // What bounds the first use: NVRTC itself, an empty kernel to machine code (median of 3).
  const int arch = lg::nvrtc_target_architecture(s.device().compute_capability().as_int());
  const lg::KernelSource empty_kernel{"empty.cu",
                                      "extern \"C\" __global__ void empty_kernel(float* p) { p[0] = 1.0f; }\n"};
  std::vector<double> floor_ms;
  for (int i = 0; i < 3; ++i) {
    floor_ms.push_back(
        milliseconds([&] { (void)lg::nvrtc_compile(empty_kernel, {}, lg::nvrtc_options(arch, true), true).image(); }));
  }
  std::printf("\nNVRTC floor: an empty kernel to machine code %.1f ms\n", median(floor_ms));
  lg::clear_expression_cache();
  const double disk_ms = milliseconds([&] { second(5.0F).prepare(s.device()); });
  const lg::ExpressionCacheStats stats = lg::expression_cache_stats();
  std::printf(
      "\nfirst use of a new expression (codegen + NVRTC + load + its first run, waited for; target <= 60 ms):\n"
      "  first NVRTC use in the process %.1f ms; later new expressions, median of 3: %.1f ms (each: %.1f, %.1f, %.1f)\n"
      "  the same op run again, waited for: %.3f ms\n"
      "cached reuse (build the op + find the loaded kernel; target <= 1 ms): median %.4f ms\n"
      "disk cache hit (new process, or after clear_expression_cache): %.1f ms\n"
      "cache: %zu compiled, %zu disk hits, %zu memory hits, %.1f ms generating, compiling and loading\n",
      first_ms, median(new_ms), new_ms[0], new_ms[1], new_ms[2], run_ms, median(reuse_ms), disk_ms, stats.compiled,
      stats.disk_hits, stats.memory_hits, stats.compile_ms);
}

constexpr const char* usage =
    "usage: bench_expr\n"
    "Prints a table: an elementwise chain of k = 1..8 steps on 1M and 16M float and half elements, as k separate\n"
    "kernels (lg::assign per step) vs one fused expression, each recorded into a graph and replayed: time, bytes\n"
    "moved, fraction of the device-to-device copy ceiling measured in the same run, speedup; then the first-use\n"
    "compile time of a new expression and the cost of reusing a compiled one. Compiled kernels go to a fresh\n"
    "temporary cache directory (removed at the end), so every expression is compiled in this run. A benchmark,\n"
    "not a test. Exit status: 0 done, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

int run() {
  // A fresh disk cache: first uses below compile instead of loading an earlier run's kernels.
  std::string dir_template = (std::filesystem::temp_directory_path() / "lazygraph-bench-expr-XXXXXX").string();
  if (mkdtemp(dir_template.data()) == nullptr) throw std::runtime_error("cannot create a temporary directory");
  const std::filesystem::path cache_dir = dir_template;
  setenv("LAZYGRAPH_CACHE_DIR", cache_dir.c_str(), 1);
  struct RemoveDir {
    std::filesystem::path path;
    ~RemoveDir() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } remove_dir{cache_dir};

  lg::Device gpu = lg::Device::first();
  lg::Stream s = gpu.create_stream();
  const double copy_bw = bench::copy_ceiling(s);
  std::printf("fused elementwise chains on %s (%d SMs); device-to-device copy ceiling %.2f TB/s\n", gpu.name().c_str(),
              gpu.sm_count(), copy_bw * 1e-12);
  compile_costs(s);
  std::printf(
      "\nchain of k steps, graph replay; separate: k kernels, each reading and writing n elements; fused: one kernel\n"
      "reading and writing n elements; copy: a copy of the n elements (the same bytes as fused), graph replay.\n"
      "%% = bytes / time / the 1 GiB copy ceiling; copy / fused = the fraction of its bytes' copy time that fused\n"
      "reaches. targets at 16M: fused >= (k - 0.5)x faster for k >= 3, copy / fused >= 0.90\n"
      "| type | n | k | separate us | MB | %% ceiling | fused us | MB | %% ceiling | copy us | copy / fused | speedup |"
      " >= k - 0.5 |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::size_t n : {std::size_t{1} << 20U, std::size_t{16} << 20U}) {
    time_chains<float>(s, n, copy_bw, std::make_integer_sequence<int, 8>{});
    time_chains<half>(s, n, copy_bw, std::make_integer_sequence<int, 8>{});
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto code = example::handle_arguments(argc, argv, usage)) return *code;
  if (example::skip_without_gpu("bench_expr")) return example::exit_skipped;
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_expr: %s\n", e.what());
    return 1;
  }
}
