// Graph overhead benchmark: a chain of N tiny kernels launched eagerly, as a hand-captured driver-API graph,
// and as a lazygraph graph; 4 independent chains recorded with all(...) versus serially; and the host time to
// build + record + instantiate. Replays are timed with CUDA events; every figure is the median of many
// samples. Compare numbers only within one run.
#include <lazygraph/detail/driver/driver_api.hpp>
#include <lazygraph/lazygraph.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "median.hpp"

namespace lg = lazygraph;
namespace drv = lazygraph::detail::driver;
using Axpy = lg::Kernel<void(float, const float*, float*, int)>;

namespace {

using bench::median;

constexpr int elements = 256;  // one block of 256 threads: launch overhead dominates

/// Median microseconds per kernel of `submit` (which enqueues `kernels` kernels on `s`), over `samples`
/// samples of `reps` submissions each, timed with events.
double time_per_kernel(const lg::Stream& s, int kernels, const std::function<void()>& submit, int samples = 41) {
  const int reps = std::max(1, 4000 / kernels);
  lg::Event start(s.device());
  lg::Event stop(s.device());
  for (int i = 0; i < reps; ++i) submit();  // warm up
  s.synchronize();
  std::vector<double> per_kernel;
  for (int k = 0; k < samples; ++k) {
    start.record(s);
    for (int i = 0; i < reps; ++i) submit();
    stop.record(s);
    stop.synchronize();
    per_kernel.push_back(1000.0 * lg::Event::elapsed_ms(start, stop) / (double(reps) * kernels));
  }
  return median(per_kernel);
}

/// Median host microseconds per node of `make_a` and of `make_b` (each builds, captures and instantiates a
/// graph), sampled alternately so that drift in the host's speed affects both alike.
std::pair<double, double> host_times_per_node(int nodes, const std::function<void()>& make_a,
                                              const std::function<void()>& make_b, int samples = 41) {
  const auto time = [&](const std::function<void()>& make) {
    const auto a = std::chrono::steady_clock::now();
    make();
    const auto b = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::micro>(b - a).count() / nodes;
  };
  std::vector<double> ta;
  std::vector<double> tb;
  ta.reserve(static_cast<std::size_t>(samples));
  tb.reserve(static_cast<std::size_t>(samples));
  for (int k = 0; k < samples; ++k) {
    ta.push_back(time(make_a));
    tb.push_back(time(make_b));
  }
  return {median(ta), median(tb)};
}

/// Median host microseconds of each of `variants` (one call each per sample), sampled in turn so that drift in
/// the host's speed affects all alike.
std::vector<double> host_medians(const std::vector<std::function<void()>>& variants, int samples) {
  std::vector<std::vector<double>> times(variants.size());
  for (auto& t : times) t.reserve(static_cast<std::size_t>(samples));
  for (const auto& v : variants) v();  // warm up
  for (int k = 0; k < samples; ++k) {
    for (std::size_t i = 0; i < variants.size(); ++i) {
      const auto a = std::chrono::steady_clock::now();
      variants[i]();
      const auto b = std::chrono::steady_clock::now();
      times[i].push_back(std::chrono::duration<double, std::micro>(b - a).count());
    }
  }
  std::vector<double> out;
  out.reserve(times.size());
  for (auto& t : times) out.push_back(median(t));
  return out;
}

/// The raw way: cuStreamBeginCapture, cuLaunchKernel N times, cuStreamEndCapture, instantiate, upload.
struct RawGraph {
  CUcontext ctx;
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  RawGraph(const lg::Stream& s, const Axpy& k, const std::vector<lg::DeviceSpan<float>>& ys,
           const lg::DeviceSpan<const float>& x, int per_chain)
      : ctx(s.device().context()) {
    drv::begin_capture(ctx, s.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    const drv::LaunchShape shape{{1, 1, 1}, {elements, 1, 1}, 0};
    for (const auto& y : ys) {
      float a = 1.0001F;
      const float* xp = x.data();
      float* yp = y.data();
      int n = elements;
      void* args[] = {&a, &xp, &yp, &n};
      for (int i = 0; i < per_chain; ++i) drv::launch_kernel(ctx, k.info()->function, shape, s.get(), args, "axpy");
    }
    drv::end_capture_no_throw(ctx, s.get(), &graph);
    exec = drv::graph_instantiate(ctx, graph, 0, "raw");
    drv::graph_upload(ctx, exec, s.get(), "raw");
    s.synchronize();
  }
  ~RawGraph() {
    drv::graph_exec_destroy_no_throw(ctx, exec);
    drv::graph_destroy_no_throw(graph);
  }
  RawGraph(const RawGraph&) = delete;
  RawGraph& operator=(const RawGraph&) = delete;
};

auto chain_of(const Axpy& k, const lg::DeviceSpan<const float>& x, const lg::DeviceSpan<float>& y, int count,
              float a = 1.0001F) {
  std::vector<decltype(k(lg::LaunchConfig{}, 0.0F, x, y, 0))> ops;
  ops.reserve(count);
  for (int i = 0; i < count; ++i) ops.push_back(k({{1, 1, 1}, {elements, 1, 1}, 0}, a, x, y, elements));
  return lg::chain(std::move(ops));
}

using AxpyScalar = lg::Kernel<void(const float*, const float*, float*, int)>;

/// A chain of `count` kernels whose `a` is read from `scale` (a DeviceScalar).
auto scalar_chain_of(const AxpyScalar& k, const lg::DeviceSpan<const float>& scale,
                     const lg::DeviceSpan<const float>& x, const lg::DeviceSpan<float>& y, int count) {
  std::vector<decltype(k(lg::LaunchConfig{}, scale, x, y, 0))> ops;
  ops.reserve(count);
  for (int i = 0; i < count; ++i) ops.push_back(k({{1, 1, 1}, {elements, 1, 1}, 0}, scale, x, y, elements));
  return lg::chain(std::move(ops));
}

/// A chain of `count` axpy kernels into `y`, except the last, into `last`: to change one node's arguments.
auto chain_ending_in(const Axpy& k, const lg::DeviceSpan<const float>& x, const lg::DeviceSpan<float>& y,
                     const lg::DeviceSpan<float>& last, int count) {
  std::vector<decltype(k(lg::LaunchConfig{}, 0.0F, x, y, 0))> ops;
  ops.reserve(count);
  for (int i = 0; i < count; ++i) {
    ops.push_back(k({{1, 1, 1}, {elements, 1, 1}, 0}, 1.0001F, x, i + 1 == count ? last : y, elements));
  }
  return lg::chain(std::move(ops));
}

/// The graph's whole life: building vs capturing, updating in place vs re-recording, a device scalar vs a new
/// graph per value; replay of a built graph vs a raw one.
void lifecycle_table(const lg::Device& gpu, const lg::Stream& s, const lg::KernelLibrary& kernels,
                     const lg::DeviceBuffer<float>& x) {
  const Axpy k = kernels.get<void(float, const float*, float*, int)>("axpy");
  const AxpyScalar ks = kernels.get<void(const float*, const float*, float*, int)>("axpy_scalar");
  lg::DeviceBuffer<float> ya = lg::zeros<float>(elements).sync_on(s);
  lg::DeviceBuffer<float> yb = lg::zeros<float>(elements).sync_on(s);
  lg::DeviceScalar<float> scale(s, 1.0F);
  const std::vector<lg::DeviceSpan<float>> one{ya.view()};

  std::printf("\ngraph lifecycle on %s (host medians: us per node for recording, us per graph for updates)\n\n",
              gpu.name().c_str());
  std::printf("%6s | %9s %9s %6s | %10s %9s %6s %9s %6s %9s %6s | %10s %10s %6s | %8s %8s %6s\n", "N", "capture",
              "build", "b/c", "re-record", "upd capt", "x", "upd built", "x", "upd one", "x", "re-rec+run", "set+run",
              "x", "raw rep", "built rep", "b/raw");
  for (const int n : {10, 100, 1000}) {
    const int samples = n >= 1000 ? 21 : 41;
    // 1. Recording: capture + instantiate + upload vs build + instantiate + upload (per node).
    const std::vector<double> rec =
        host_medians({[&] { auto g = lg::CudaGraph<>::capture(s, chain_of(k, x.cview(), ya.view(), n)); },
                      [&] { auto g = lg::CudaGraph<>::build(gpu, chain_of(k, x.cview(), ya.view(), n)); }},
                     samples);

    // 2. Re-parameterising: every kernel's y alternates between two buffers; "one" changes the last kernel only.
    auto captured = lg::CudaGraph<>::capture(s, chain_of(k, x.cview(), ya.view(), n));
    auto built = lg::CudaGraph<>::build(gpu, chain_of(k, x.cview(), ya.view(), n));
    auto built_one = lg::CudaGraph<>::build(gpu, chain_ending_in(k, x.cview(), ya.view(), ya.view(), n));
    bool flip_c = false;
    bool flip_b = false;
    bool flip_o = false;
    const auto check = [](const lg::UpdateResult& r) {
      if (!r) throw std::runtime_error(std::string("update_from refused: ") + r.message);
    };
    const std::vector<double> upd = host_medians(
        {[&] { auto g = lg::CudaGraph<>::capture(s, chain_of(k, x.cview(), (flip_c ? ya : yb).view(), n)); },
         [&] {
           flip_c = !flip_c;
           check(captured.update_from(chain_of(k, x.cview(), (flip_c ? yb : ya).view(), n)));
         },
         [&] {
           flip_b = !flip_b;
           check(built.update_from(chain_of(k, x.cview(), (flip_b ? yb : ya).view(), n)));
         },
         [&] {
           flip_o = !flip_o;
           check(built_one.update_from(chain_ending_in(k, x.cview(), ya.view(), (flip_o ? yb : ya).view(), n)));
         }},
        samples);

    // 3. A new value per replay: DeviceScalar set + replay vs a new graph with the value as an argument + replay.
    auto scaled = lg::CudaGraph<>::build(gpu, scalar_chain_of(ks, scale.cview(), x.cview(), ya.view(), n));
    float value = 1.0F;
    const std::vector<double> val =
        host_medians({[&] {
                        value += 1.0F;
                        auto g = lg::CudaGraph<>::capture(s, chain_of(k, x.cview(), ya.view(), n, value));
                        g.launch();
                      },
                      [&] {
                        value += 1.0F;
                        scaled.set(scale, value);
                        scaled.launch();
                      }},
                     samples);

    // 4. Replay: a built graph vs the raw driver-API graph of the same chain (device time per kernel).
    RawGraph raw(s, k, one, x.cview(), n);
    auto replayed = lg::CudaGraph<>::build(gpu, chain_of(k, x.cview(), ya.view(), n));
    double raw_replay = 0;
    double built_replay = 0;
    {
      std::vector<double> r;
      std::vector<double> b;
      for (int round = 0; round < 5; ++round) {  // alternated, so that clocks and temperature affect both alike
        r.push_back(time_per_kernel(
            s, n, [&] { drv::graph_launch(raw.ctx, raw.exec, s.get(), "raw"); }, 9));
        b.push_back(time_per_kernel(
            s, n, [&] { replayed.launch_on(s); }, 9));
      }
      raw_replay = median(r);
      built_replay = median(b);
    }

    std::printf(
        "%6d | %9.3f %9.3f %6.3f | %10.1f %9.1f %6.1f %9.1f %6.1f %9.1f %6.1f | %10.1f %10.1f %6.1f | %8.3f %8.3f "
        "%6.3f\n",
        n, rec[0] / n, rec[1] / n, rec[1] / rec[0], upd[0], upd[1], upd[0] / upd[1], upd[2], upd[0] / upd[2], upd[3],
        upd[0] / upd[3], val[0], val[1], val[0] / val[1], raw_replay, built_replay, built_replay / raw_replay);
  }
  std::printf(
      "\ncapture/build: us per node to record + instantiate + upload; b/c = build / capture (target <= 0.8).\n"
      "re-record: a new captured graph (us per graph); upd capt / upd built: update_from on a captured / built\n"
      "graph with every kernel's buffer changed; upd one: built, one kernel's buffer changed; x = re-record / "
      "that\n(target >= 10 for upd built). re-rec+run vs set+run: a new value per replay as a new graph vs a "
      "DeviceScalar.\nraw rep / built rep: replay, us per kernel (target b/raw within 1.03).\n");
}

/// Where recording and updating time goes, per node (host medians): the parts of build and capture, and of an
/// update_from on a built graph.
void breakdown_table(const lg::Device& gpu, const lg::Stream& s, const Axpy& k, const lg::DeviceBuffer<float>& x) {
  lg::DeviceBuffer<float> ya = lg::zeros<float>(elements).sync_on(s);
  lg::DeviceBuffer<float> yb = lg::zeros<float>(elements).sync_on(s);
  std::printf("\nwhere the time goes (host medians, us per node)\n\n%6s | %7s %7s %9s %8s | %9s %9s %9s | %9s %9s\n",
              "N", "op", "plan", "add nodes", "capture", "inst built", "inst capt", "upload", "update", "set params");
  for (const int n : {100, 1000}) {
    const int samples = 21;
    const auto op_a = chain_of(k, x.cview(), ya.view(), n);
    const auto op_b = chain_of(k, x.cview(), yb.view(), n);
    lg::detail::NodePlan plan_a;
    lg::detail::NodePlan plan_b;
    {
      lg::ExecContext ca(s, plan_a);
      op_a.execute(ca);
      lg::ExecContext cb(s, plan_b);
      op_b.execute(cb);
    }
    std::vector<CUgraphNode> nodes;
    const drv::Graph built = lg::detail::materialize(plan_a, nodes);
    drv::Graph captured;
    {
      lg::detail::CaptureSession session(s, lg::CaptureMode::this_thread);
      lg::ExecContext ctx(s, true);
      op_a.execute(ctx);
      captured = session.finish();
    }
    const drv::GraphExec exec = drv::GraphExec::instantiate(built, gpu.context(), "bench");
    auto graph = lg::CudaGraph<>::build(gpu, op_a);
    bool flip_u = false;
    bool flip_p = false;
    std::size_t changed = 0;
    const std::vector<double> t =
        host_medians({[&] { auto o = chain_of(k, x.cview(), ya.view(), n); },
                      [&] {
                        lg::detail::NodePlan p;
                        lg::ExecContext ctx(s, p);
                        op_a.execute(ctx);
                      },
                      [&] {
                        std::vector<CUgraphNode> ns;
                        auto g = lg::detail::materialize(plan_a, ns);
                      },
                      [&] {
                        lg::detail::CaptureSession session(s, lg::CaptureMode::this_thread);
                        lg::ExecContext ctx(s, true);
                        op_a.execute(ctx);
                        auto g = session.finish();
                      },
                      [&] { auto e = drv::GraphExec::instantiate(built, gpu.context(), "bench"); },
                      [&] { auto e = drv::GraphExec::instantiate(captured, gpu.context(), "bench"); },
                      [&] {
                        auto e = drv::GraphExec::instantiate(built, gpu.context(), "bench");
                        drv::graph_upload(gpu.context(), e.native_handle(), s.get(), "bench");
                        s.synchronize();
                      },
                      [&] {
                        flip_u = !flip_u;
                        (void)graph.update_from(flip_u ? op_b : op_a);
                      },
                      [&] {
                        flip_p = !flip_p;
                        (void)lg::detail::apply_plan(exec.native_handle(), nodes, flip_p ? plan_a : plan_b,
                                                     flip_p ? plan_b : plan_a, &changed);
                      }},
                     samples);
    std::printf("%6d | %7.3f %7.3f %9.3f %8.3f | %9.3f %9.3f %9.3f | %9.3f %9.3f\n", n, t[0] / n, t[1] / n, t[2] / n,
                t[3] / n, t[4] / n, t[5] / n, (t[6] - t[4]) / n, t[7] / n, t[8] / n);
  }
  std::printf(
      "\nop: making the chain op; plan: writing it down (build); add nodes: cuGraphAddNode for each; capture: "
      "recording it\nby stream capture; inst: instantiate; upload: the first upload + wait; update: update_from on "
      "a built graph\nwith every buffer changed (op made beforehand); set params: its cuGraphExecNodeSetParams "
      "calls alone.\n");
}

int run() {
  if (example::skip_without_gpu("bench_graph")) return example::exit_skipped;
  lg::Device gpu = lg::Device::first();
  lg::Stream s = gpu.create_stream();
  lg::KernelLibrary kernels(gpu);
  const Axpy k = kernels.get<void(float, const float*, float*, int)>("axpy");
  auto x = lg::ones<float>(elements).sync_on(s);
  std::vector<lg::DeviceBuffer<float>> y;
  y.reserve(4);
  for (int i = 0; i < 4; ++i) y.push_back(lg::zeros<float>(elements).sync_on(s));
  const std::vector<lg::DeviceSpan<float>> one{y[0].view()};
  const std::vector<lg::DeviceSpan<float>> four{y[0].view(), y[1].view(), y[2].view(), y[3].view()};

  std::printf("graph overhead on %s (medians; us per kernel or per node)\n\n", gpu.name().c_str());
  std::printf("%6s | %8s %9s %9s %7s | %9s %9s %7s | %10s %10s %7s\n", "N", "eager", "raw graph", "lazygraph", "lg/raw",
              "serial x4", "all() x4", "ser/all", "raw build", "lg build", "lg/raw");
  for (const int n : {10, 100, 1000}) {
    // Eager: N raw launches.
    const drv::LaunchShape shape{{1, 1, 1}, {elements, 1, 1}, 0};
    float a = 1.0001F;
    const float* xp = x.cview().data();
    float* yp = y[0].view().data();
    int count = elements;
    void* args[] = {&a, &xp, &yp, &count};
    const double eager = time_per_kernel(s, n, [&] {
      for (int i = 0; i < n; ++i) drv::launch_kernel(gpu.context(), k.info()->function, shape, s.get(), args, "axpy");
    });

    // Raw driver-API graph vs lazygraph graph of the same serial chain.
    RawGraph raw(s, k, one, x.cview(), n);
    const double raw_replay = time_per_kernel(s, n, [&] { drv::graph_launch(raw.ctx, raw.exec, s.get(), "raw"); });
    auto lazy = lg::CudaGraph<>::capture(s, chain_of(k, x.cview(), y[0].view(), n));
    const double lazy_replay = time_per_kernel(s, n, [&] { lazy.launch_on(s); });

    // 4 chains of N/4: serially recorded vs all(...).
    const int quarter = n / 4;
    auto serial = lg::CudaGraph<>::capture(
        s, chain_of(k, x.cview(), y[0].view(), quarter) >> chain_of(k, x.cview(), y[1].view(), quarter) >>
               chain_of(k, x.cview(), y[2].view(), quarter) >> chain_of(k, x.cview(), y[3].view(), quarter));
    auto parallel = lg::CudaGraph<>::capture(
        s, lg::all(chain_of(k, x.cview(), y[0].view(), quarter), chain_of(k, x.cview(), y[1].view(), quarter),
                   chain_of(k, x.cview(), y[2].view(), quarter), chain_of(k, x.cview(), y[3].view(), quarter)));
    const double serial_replay = time_per_kernel(s, 4 * quarter, [&] { serial.launch_on(s); });
    const double parallel_replay = time_per_kernel(s, 4 * quarter, [&] { parallel.launch_on(s); });

    // Host cost: build + capture + instantiate + upload.
    const auto [raw_build, lazy_build] = host_times_per_node(
        n, [&] { RawGraph g(s, k, one, x.cview(), n); },
        [&] { auto g = lg::CudaGraph<>::capture(s, chain_of(k, x.cview(), y[0].view(), n)); });

    std::printf("%6d | %8.3f %9.3f %9.3f %7.3f | %9.3f %9.3f %7.2f | %10.3f %10.3f %7.3f\n", n, eager, raw_replay,
                lazy_replay, lazy_replay / raw_replay, serial_replay, parallel_replay, serial_replay / parallel_replay,
                raw_build, lazy_build, lazy_build / raw_build);
  }
  s.synchronize();
  lifecycle_table(gpu, s, kernels, x);
  breakdown_table(gpu, s, k, x);
  s.synchronize();
  return 0;
}

constexpr const char* usage =
    "usage: bench_graph\n"
    "Prints tables: a chain of N tiny kernels launched eagerly, as a hand-captured driver-API graph and as a\n"
    "lazygraph graph; 4 chains with all(...) vs serially; host build+record+instantiate time per node; then the\n"
    "graph lifecycle: build vs capture, update_from vs re-recording, DeviceScalar vs a new graph per value.\n"
    "Exit status: 0 done, 1 failed, 77 skipped (no GPU; the reason is printed).\n";

}  // namespace

int main(int argc, char** argv) {
  if (auto code = example::handle_arguments(argc, argv, usage)) return *code;
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_graph: %s\n", e.what());
    return 1;
  }
}
