// Graph overhead benchmark: a chain of N tiny kernels launched eagerly, as a hand-captured driver-API graph,
// and as a lazygraph graph; 4 independent chains recorded with all(...) versus serially; and the host time to
// build + record + instantiate. Then the graph's life, a section each: build vs capture, update_from (captured,
// built, one kernel changed) vs re-capturing, a DeviceScalar vs a new graph per value, built replay vs raw; and
// where recording and updating time goes. Replays are timed with CUDA events, host work with steady_clock,
// alternating between the variants compared; every figure is the median of many samples. Compare numbers only
// within one run.
//
// Unlike the examples, this benchmark includes private headers on purpose: its baselines are the raw driver calls
// lazygraph makes (eager cuLaunchKernel, a hand-captured cuStreamBeginCapture graph, cuGraphInstantiate and
// cuGraphUpload alone), taken from the library's own driver layer (detail/driver/driver_api.hpp) so that both sides
// load the same driver the same way, and its breakdown times the graph layer's internal steps (NodePlan,
// materialize, CaptureSession, apply_plan, from lazygraph::detail), which no public call exposes one by one. Code
// of your own needs only the public headers.
#include <lazygraph/detail/driver/driver_api.hpp>
#include <lazygraph/lazygraph.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <optional>
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

/// Microseconds per kernel of `submit` (which enqueues `kernels` kernels on `s`), one per sample, over
/// `samples` samples of `reps` submissions each, timed with events on `s` (after a warm-up).
std::vector<double> kernel_samples(const lg::Stream& s, int kernels, const std::function<void()>& submit, int samples) {
  const int reps = std::max(1, 4000 / kernels);
  lg::Event start(s.device());
  lg::Event stop(s.device());
  for (int i = 0; i < reps; ++i) submit();  // warm up
  s.synchronize();
  std::vector<double> per_kernel;
  per_kernel.reserve(static_cast<std::size_t>(samples));
  for (int k = 0; k < samples; ++k) {
    start.record(s);
    for (int i = 0; i < reps; ++i) submit();
    stop.record(s);
    stop.synchronize();
    per_kernel.push_back(1000.0 * lg::Event::elapsed_ms(start, stop) / (double(reps) * kernels));
  }
  return per_kernel;
}

/// Median microseconds per kernel of `submit` (see kernel_samples).
double time_per_kernel(const lg::Stream& s, int kernels, const std::function<void()>& submit, int samples = 41) {
  return median(kernel_samples(s, kernels, submit, samples));
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

/// Host microseconds that `f()` takes.
template <class F>
double micros(F&& f) {
  const auto a = std::chrono::steady_clock::now();
  std::forward<F>(f)();
  const auto b = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(b - a).count();
}

/// A variant that times itself: returns the host microseconds of the part it measures, so that what it does
/// around that part (destroying the graph it made, say) is not counted.
using Timed = std::function<double()>;

/// The medians of timed_medians, and how many samples each is the median of.
struct HostMedians {
  std::vector<double> us;
  int samples = 0;
};

/// Median host microseconds of each of `variants`, sampled in turn (one call each per sample) so that drift in
/// the host's speed affects all alike. After one warm-up call each, takes as many samples as fit in `budget_s`
/// seconds at the warm-up's pace, at least `min_samples` and at most `max_samples`.
HostMedians timed_medians(const std::vector<Timed>& variants, int max_samples, double budget_s = 2.0,
                          int min_samples = 15) {
  const double warm_up_us = micros([&] {
    for (const auto& v : variants) (void)v();
  });
  const double fit = budget_s * 1e6 / std::max(warm_up_us, 1.0);
  const int samples = std::clamp(static_cast<int>(std::min(fit, double(max_samples))), min_samples, max_samples);
  std::vector<std::vector<double>> times(variants.size());
  for (auto& t : times) t.reserve(static_cast<std::size_t>(samples));
  for (int k = 0; k < samples; ++k) {
    for (std::size_t i = 0; i < variants.size(); ++i) times[i].push_back(variants[i]());
  }
  HostMedians out;
  out.samples = samples;
  for (auto& t : times) out.us.push_back(median(t));
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

/// Host microseconds that `make()` takes to return; destroying what it returned (a graph, say) is not counted.
template <class Make>
double micros_to_make(Make&& make) {
  const auto a = std::chrono::steady_clock::now();
  [[maybe_unused]] const auto made = std::forward<Make>(make)();
  const auto b = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(b - a).count();
}

/// Host microseconds of `graph.update_from(op)`. \throws std::runtime_error when the update was refused.
template <class Graph, class Op>
double micros_to_update(Graph& graph, const Op& op) {
  lg::UpdateResult r;
  const double us = micros([&] { r = graph.update_from(op); });
  if (r.status != lg::UpdateStatus::applied) {
    throw std::runtime_error(std::string("update_from did not apply: ") + lg::to_string(r.status) + ": " + r.message);
  }
  return us;
}

/// One line of a section of the lifecycle table.
struct Row {
  std::string name;
  int nodes = 0;
  double value = 0;
  double ratio = 0;
  int samples = 0;
  std::string target;  ///< what the ratio should be, e.g. "<= 0.80"; empty for none
  bool met = true;
};

/// A header line saying what the values and ratios are, and its rows.
struct Section {
  std::string title;
  std::vector<Row> rows;
};

/// A row without a target.
Row row(std::string name, int nodes, double value, double ratio, int samples) {
  Row r;
  r.name = std::move(name);
  r.nodes = nodes;
  r.value = value;
  r.ratio = ratio;
  r.samples = samples;
  return r;
}

/// `row` with a target: its ratio at most (`at_most`) or at least `limit`.
Row with_target(Row row, bool at_most, double limit) {
  char text[32];
  std::snprintf(text, sizeof text, "%s %.2f", at_most ? "<=" : ">=", limit);
  row.target = text;
  row.met = at_most ? row.ratio <= limit : row.ratio >= limit;
  return row;
}

void print_section(const Section& section) {
  std::printf("\n%s\n  %-36s %5s %10s %8s %7s  %s\n", section.title.c_str(), "variant", "N", "value", "ratio",
              "samples", "target");
  for (const Row& r : section.rows) {
    const std::string target = r.target.empty() ? std::string() : "  " + r.target + (r.met ? " ok" : " MISSED");
    std::printf("  %-36s %5d %10.3f %8.3f %7d%s\n", r.name.c_str(), r.nodes, r.value, r.ratio, r.samples,
                target.c_str());
  }
}

/// The graph's whole life, one section each: recording (build vs capture), re-parameterising (update_from vs
/// re-capturing), a new value per replay (a DeviceScalar vs a new graph), and replaying (built vs raw).
void lifecycle_table(const lg::Device& gpu, const lg::Stream& s, const lg::KernelLibrary& kernels,
                     const lg::DeviceBuffer<float>& x) {
  const Axpy k = kernels.get<void(float, const float*, float*, int)>("axpy");
  const AxpyScalar ks = kernels.get<void(const float*, const float*, float*, int)>("axpy_scalar");
  lg::DeviceBuffer<float> ya = lg::zeros<float>(elements).sync_on(s);
  lg::DeviceBuffer<float> yb = lg::zeros<float>(elements).sync_on(s);
  lg::DeviceScalar<float> scale(s, 1.0F);
  const std::vector<lg::DeviceSpan<float>> one{ya.view()};

  Section record{"recording: record + instantiate + upload, host us per node (ratio: this / capture)", {}};
  Section update{"updating every kernel's y (two buffers, alternated), host us per graph (ratio: re-capture / this)",
                 {}};
  Section scalar{"a new scalar value, then replay and wait, host us per value (ratio: re-capture / this)", {}};
  Section replay{"replaying, device us per kernel (CUDA events; ratio: this / raw)", {}};
  for (const int n : {10, 100, 1000}) {
    const int max_samples = n >= 1000 ? 101 : 201;
    // The ops are made beforehand: the timings are of recording, instantiating and updating alone.
    const auto op_a = chain_of(k, x.cview(), ya.view(), n);
    const auto op_b = chain_of(k, x.cview(), yb.view(), n);
    const auto last_a = chain_ending_in(k, x.cview(), ya.view(), ya.view(), n);  // only the last kernel differs
    const auto last_b = chain_ending_in(k, x.cview(), ya.view(), yb.view(), n);

    // 1. Capture + instantiate + upload vs build + instantiate + upload (destroying the graph not counted).
    const HostMedians rec =
        timed_medians({[&] { return micros_to_make([&] { return lg::CudaGraph<>::capture(s, op_a); }); },
                       [&] { return micros_to_make([&] { return lg::CudaGraph<>::build(gpu, op_a); }); }},
                      max_samples);
    record.rows.push_back(row("capture", n, rec.us[0] / n, 1.0, rec.samples));
    record.rows.push_back(with_target(row("build", n, rec.us[1] / n, rec.us[1] / rec.us[0], rec.samples), true, 0.8));

    // 2. A new captured graph vs update_from on a captured graph, a built one, and a built one where one kernel's
    // arguments change. Each variant alternates between the a and b ops, so that every update changes arguments.
    auto captured = lg::CudaGraph<>::capture(s, op_a);
    auto built = lg::CudaGraph<>::build(gpu, op_a);
    auto built_last = lg::CudaGraph<>::build(gpu, last_a);
    bool flip_r = false;
    bool flip_c = false;
    bool flip_b = false;
    bool flip_l = false;
    const HostMedians upd =
        timed_medians({[&] {
                         flip_r = !flip_r;
                         return micros_to_make([&] { return lg::CudaGraph<>::capture(s, flip_r ? op_b : op_a); });
                       },
                       [&] {
                         flip_c = !flip_c;
                         return micros_to_update(captured, flip_c ? op_b : op_a);
                       },
                       [&] {
                         flip_b = !flip_b;
                         return micros_to_update(built, flip_b ? op_b : op_a);
                       },
                       [&] {
                         flip_l = !flip_l;
                         return micros_to_update(built_last, flip_l ? last_b : last_a);
                       }},
                      max_samples);
    update.rows.push_back(row("re-capture + instantiate + upload", n, upd.us[0], 1.0, upd.samples));
    update.rows.push_back(row("update_from, captured", n, upd.us[1], upd.us[0] / upd.us[1], upd.samples));
    update.rows.push_back(
        with_target(row("update_from, built", n, upd.us[2], upd.us[0] / upd.us[2], upd.samples), false, 10.0));
    update.rows.push_back(
        row("update_from, built, 1 kernel changed", n, upd.us[3], upd.us[0] / upd.us[3], upd.samples));

    // 3. A new value per replay: a new captured graph with the value as a kernel argument, then launch() (which
    // waits), vs graph.set(scalar, value) on a built graph whose kernels read the value, then launch().
    auto scaled = lg::CudaGraph<>::build(gpu, scalar_chain_of(ks, scale.cview(), x.cview(), ya.view(), n));
    float value_r = 1.0F;
    float value_s = 1.0F;
    const HostMedians val =
        timed_medians({[&] {
                         value_r = 3.0F - value_r;  // 2, 1, 2, ...: a new value every time
                         return micros_to_make([&] {
                           auto g = lg::CudaGraph<>::capture(s, chain_of(k, x.cview(), ya.view(), n, value_r));
                           g.launch();
                           return g;
                         });
                       },
                       [&] {
                         value_s = 3.0F - value_s;
                         return micros([&] {
                           scaled.set(scale, value_s);
                           scaled.launch();
                         });
                       }},
                      max_samples);
    scalar.rows.push_back(row("re-capture, value as argument, launch", n, val.us[0], 1.0, val.samples));
    scalar.rows.push_back(row("DeviceScalar: set + launch (built)", n, val.us[1], val.us[0] / val.us[1], val.samples));

    // 4. Replay of the raw driver-API graph vs lazygraph's captured and built graphs of the same chain, launched
    // on `s`, and the built one on its own stream (where launch_on records no event). Rounds alternate the
    // variants, so that clocks and temperature affect all alike.
    RawGraph raw(s, k, one, x.cview(), n);
    auto replay_c = lg::CudaGraph<>::capture(s, op_a);
    auto replay_b = lg::CudaGraph<>::build(gpu, op_a);
    const lg::Stream& own = replay_b.stream();
    struct Replayed {
      const lg::Stream* stream;  // where it is launched, and timed
      std::function<void()> launch;
    };
    const std::vector<Replayed> replayed{
        {&s, [&] { drv::graph_launch(raw.ctx, raw.exec, s.get(), "raw"); }},
        {&s, [&] { replay_c.launch_on(s); }},
        {&s, [&] { replay_b.launch_on(s); }},
        {&own, [&] { replay_b.launch_on(own); }},
    };
    std::vector<std::vector<double>> rep(replayed.size());
    for (int round = 0; round < 5; ++round) {
      for (std::size_t i = 0; i < replayed.size(); ++i) {
        const std::vector<double> samples = kernel_samples(*replayed[i].stream, n, replayed[i].launch, 9);
        rep[i].insert(rep[i].end(), samples.begin(), samples.end());
      }
    }
    const double raw_us = median(rep[0]);
    const int rep_samples = static_cast<int>(rep[0].size());
    replay.rows.push_back(row("raw driver-API graph", n, raw_us, 1.0, rep_samples));
    replay.rows.push_back(row("captured, launch_on(s)", n, median(rep[1]), median(rep[1]) / raw_us, rep_samples));
    replay.rows.push_back(
        with_target(row("built, launch_on(s)", n, median(rep[2]), median(rep[2]) / raw_us, rep_samples), true, 1.03));
    replay.rows.push_back(
        row("built, launch_on(its own stream)", n, median(rep[3]), median(rep[3]) / raw_us, rep_samples));
  }
  s.synchronize();

  std::printf(
      "\ngraph lifecycle on %s: a chain of N axpy kernels; medians of the samples shown, host ones taken\n"
      "alternately between the variants of one section and N\n",
      gpu.name().c_str());
  for (const Section* section : {&record, &update, &scalar, &replay}) print_section(*section);
  std::printf(
      "\nHost times leave out making the op (but for the new value of the re-capture in the scalar section) and\n"
      "destroying the graph. Updates are update_from with default UpdateOptions and must apply in place.\n");
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

/// Kernels for the control-flow table: set a condition from device memory, count loop iterations.
const char* const control_source = R"(#include "lazygraph/condition.cuh"
extern "C" __global__ void set_from(lg::Condition c, const unsigned* v) { lg::set_condition(c, *v); }
extern "C" __global__ void count_to(lg::Condition c, unsigned* hits, unsigned target) {
  *hits += 1;
  lg::set_condition(c, *hits < target ? 1u : 0u);
}
extern "C" __global__ void bump(unsigned* hits) { *hits += 1; }
extern "C" __global__ void copy_words(const unsigned* src, unsigned* dst, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[i] = src[i];
}
)";

/// What device-side control flow costs: an IF whose condition is false (graph [set, if_(c, bump)] minus graph [set]),
/// and one WHILE iteration (a loop of N iterations of a one-thread kernel, per iteration) against a chain of N
/// such kernels (the same work, unrolled into the graph).
void control_flow_table(const lg::Device& gpu, const lg::Stream& s) {
  lg::KernelLibraryOptions options;
  options.kernel_sets = {lg::core_kernels(), lg::KernelSet{"bench", {{"control_bench.cu", control_source}}, {}}};
  const lg::KernelLibrary lib(gpu, std::move(options));
  const auto set_from = lib.get<void(lg::Condition, const unsigned*)>("set_from");
  const auto count_to = lib.get<void(lg::Condition, unsigned*, unsigned)>("count_to");
  const auto bump = lib.get<void(unsigned*)>("bump");
  const lg::LaunchConfig one{{1, 1, 1}, {1, 1, 1}, 0};
  auto zero = lg::zeros<unsigned>(1).sync_on(s);
  auto hits = lg::zeros<unsigned>(1).sync_on(s);
  const int n = 1000;

  auto set_only = lg::CudaGraph<>::capture(s, bump(one, hits.view()));  // one 1-thread kernel, no condition
  auto if_false = lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) {
    const lg::Condition c = sc.condition();
    sc.record(set_from(one, c, zero.cview()) >> lg::if_(c, bump(one, hits.view())));
  });
  auto two_kernels = lg::CudaGraph<>::capture(s, bump(one, hits.view()) >> bump(one, hits.view()));
  auto loop = lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) {
    const lg::Condition c = sc.condition(1);
    // Unbounded: the body ends the loop itself, and no guard kernel adds to the iteration.
    sc.record(lg::fill(hits.view(), 0U) >>
              lg::while_unbounded(c, count_to(one, c, hits.view(), static_cast<unsigned>(n))));
  });
  std::vector<lg::LaunchOp<unsigned*>> bumps;
  for (int i = 0; i < n; ++i) bumps.push_back(bump(one, hits.view()));
  auto chain = lg::CudaGraph<>::capture(s, lg::chain(std::move(bumps)));

  const double set_us = time_per_kernel(s, 1, [&] { set_only.launch_on(s); });
  const double if_us = time_per_kernel(s, 1, [&] { if_false.launch_on(s); });
  const double two_us = time_per_kernel(s, 1, [&] { two_kernels.launch_on(s); });
  const double chain_us = time_per_kernel(s, n, [&] { chain.launch_on(s); });
  const double loop_us = time_per_kernel(s, n, [&] { loop.launch_on(s); });
  std::array<unsigned, 1> iterations{};  // the last replay's: the loop graph zeroes `hits` first
  lg::copy_async(s, std::span<unsigned>(iterations), hits.cview());
  s.synchronize();
  std::printf("\ndevice-side control flow on %s (graph replays, medians)\n  %-62s %10s\n", gpu.name().c_str(),
              "variant", "us");
  const auto line = [](const char* what, double us) { std::printf("  %-62s %10.3f\n", what, us); };
  line("graph [one 1-thread kernel], per replay", set_us);
  line("graph [kernel setting a condition, if_ false], per replay", if_us);
  line("graph [two 1-thread kernels], per replay", two_us);
  line("  an IF that is false costs (captured)", if_us - set_us);
  line("  an IF that is false costs, against a second kernel", if_us - two_us);
  line("WHILE of 1000 iterations of one 1-thread kernel, per iteration", loop_us);
  line("chain of 1000 such kernels in one graph, per kernel", chain_us);
  line("  one WHILE iteration beyond a chained kernel", loop_us - chain_us);
  std::printf("  %-62s %10u\n", "iterations the loop ran (1000)", iterations[0]);
}

/// What host I/O inside a graph costs, for the small inputs and outputs of a model's forward pass: a one-kernel
/// graph alone, and with its input copied in from pinned staging and its output copied out to it, three ways:
/// memcpy nodes with host memory (copy engines), memcpy nodes that address the pinned memory through its device
/// mapping (unified addressing), and a copy kernel that reads and writes the mapped memory.
void staging_table(const lg::Device& gpu, const lg::Stream& s) {
  lg::KernelLibraryOptions options;
  options.kernel_sets = {lg::core_kernels(), lg::KernelSet{"bench", {{"control_bench.cu", control_source}}, {}}};
  const lg::KernelLibrary lib(gpu, std::move(options));
  const auto bump = lib.get<void(unsigned*)>("bump");
  const auto copy_words = lib.get<void(const unsigned*, unsigned*, int)>("copy_words");
  const lg::LaunchConfig one{{1, 1, 1}, {1, 1, 1}, 0};
  std::printf("\nhost I/O inside a graph on %s (graph replays, medians, us)\n  %-8s %9s %12s %12s %12s\n",
              gpu.name().c_str(), "bytes", "kernel", "+memcpy host", "+memcpy map", "+copy kernel");
  for (const int bytes : {1024, 8192, 65536}) {
    const int words = bytes / 4;
    lg::StagingBuffer<unsigned> in(gpu, static_cast<std::size_t>(words));
    lg::StagingBuffer<unsigned> out(gpu, static_cast<std::size_t>(words));
    auto dev_in = lg::zeros<unsigned>(static_cast<std::size_t>(words)).sync_on(s);
    auto dev_out = lg::zeros<unsigned>(static_cast<std::size_t>(words)).sync_on(s);
    // The pinned memory as the device sees it (unified addressing: the same address).
    const lg::DeviceSpan<unsigned> mapped_in(reinterpret_cast<CUdeviceptr>(in.span().data()),
                                             static_cast<std::size_t>(words), in.cview().owner());
    const lg::DeviceSpan<unsigned> mapped_out(reinterpret_cast<CUdeviceptr>(out.span().data()),
                                              static_cast<std::size_t>(words), out.view().owner());
    const lg::LaunchConfig spread{{static_cast<unsigned>((words + 255) / 256), 1, 1}, {256, 1, 1}, 0};
    auto kernel = lg::CudaGraph<>::capture(s, bump(one, dev_out.view()));
    auto host_copies = lg::CudaGraph<>::capture(
        s, lg::copy(dev_in.view(), in.cview()) >> bump(one, dev_out.view()) >> lg::copy(out.view(), dev_out.cview()));
    auto mapped_copies =
        lg::CudaGraph<>::capture(s, lg::copy(dev_in.view(), mapped_in.as_const()) >> bump(one, dev_out.view()) >>
                                        lg::copy(mapped_out, dev_out.cview()));
    auto kernel_copies = lg::CudaGraph<>::capture(s, copy_words(spread, mapped_in.as_const(), dev_in.view(), words) >>
                                                         bump(one, dev_out.view()) >>
                                                         copy_words(spread, dev_out.cview(), mapped_out, words));
    std::printf("  %-8d %9.3f %12.3f %12.3f %12.3f\n", bytes, time_per_kernel(s, 1, [&] { kernel.launch_on(s); }),
                time_per_kernel(s, 1, [&] { host_copies.launch_on(s); }),
                time_per_kernel(s, 1, [&] { mapped_copies.launch_on(s); }),
                time_per_kernel(s, 1, [&] { kernel_copies.launch_on(s); }));
  }
}

/// What a GraphCache adds to a replay on the host (a hit: a hash lookup and a move to the front of the LRU list), what
/// a miss costs (capture, instantiate, upload), and the graph memory of 16 graphs with scratch memory, in one pool and
/// each on its own.
void cache_and_pool_table(const lg::Device& gpu, const lg::Stream& s, const Axpy& k, const lg::DeviceBuffer<float>& x) {
  auto y = lg::zeros<float>(elements).sync_on(s);
  const auto make = [&](const int& key) {
    return lg::CudaGraph<>::capture(s, chain_of(k, x.cview(), y.view(), 1 + key % 2));
  };
  lg::GraphCache<int> cache(8, make);
  for (int key = 0; key < 8; ++key) (void)cache.get(key);
  auto direct = make(3);
  std::vector<double> t_direct;
  std::vector<double> t_cached;
  constexpr int samples = 4001;
  for (int i = 0; i < samples; ++i) {
    if (i % 64 == 0) s.synchronize();  // keep the launch queue short: a full queue blocks the launch being timed
    t_direct.push_back(micros([&] { direct.launch_on(s); }));
    t_cached.push_back(micros([&] { cache.get(i % 8).launch_on(s); }));
  }
  s.synchronize();
  std::vector<double> t_miss;
  for (int i = 0; i < 21; ++i) {
    cache.clear();
    t_miss.push_back(micros([&] { (void)cache.get(i); }));
  }
  const double hit = median(t_cached);
  const double bare = median(t_direct);
  std::printf("\ngraph cache on %s (host us per call, medians of %d)\n", gpu.name().c_str(), samples);
  std::printf("  %-34s %9.3f\n  %-34s %9.3f\n  %-34s %9.3f   (target <= 1 us: %s)\n  %-34s %9.1f\n",
              "replay (launch_on)", bare, "cache hit + replay", hit, "hit - replay", hit - bare,
              hit - bare <= 1.0 ? "met" : "NOT met", "miss: capture+instantiate+upload", median(t_miss));

  // Graph memory: 16 graphs with 32..62 MiB of scratch each, each filling all of it.
  constexpr std::size_t mib = std::size_t{1} << 20;
  auto out = lg::zeros<float>(16).sync_on(s);
  const auto filler = [&](std::size_t bytes, std::size_t slot, const std::optional<lg::GraphPool>& pool) {
    lg::GraphOptions options;
    options.pool = pool;
    return lg::CudaGraph<>::build(
        gpu,
        [&](lg::Scope& sc) {
          lg::DeviceSpan<float> t = sc.scratch<float>(bytes / sizeof(float));
          sc.record(lg::fill(t, 1.0F) >> lg::copy(out.view().subspan(slot, 1), t.subspan(0, 1).as_const()));
        },
        options);
  };
  lg::GraphPool pool(gpu);
  std::vector<lg::CudaGraph<>> pooled;
  std::vector<lg::CudaGraph<>> alone;
  std::size_t sum = 0;
  for (std::size_t i = 0; i < 16; ++i) {
    const std::size_t bytes = (32 + 2 * i) * mib;
    sum += bytes;
    pooled.push_back(filler(bytes, i, pool));
    alone.push_back(filler(bytes, i, std::nullopt));
  }
  const auto reserved_after = [&](const std::function<void()>& launch) {
    gpu.synchronize();
    pool.trim();
    pool.reset_peaks();
    launch();
    gpu.synchronize();
    return static_cast<double>(pool.usage().reserved_peak) / static_cast<double>(mib);
  };
  const double largest = reserved_after([&] { alone.back().launch(); });
  const double in_pool = reserved_after([&] {
    for (auto& g : pooled) g.launch_on(pool.stream());
  });
  const double own_streams = reserved_after([&] {
    for (auto& g : alone) g.launch_on(g.stream());
  });
  std::printf(
      "\ngraph memory of 16 graphs with 32..62 MiB of scratch each (%zu MiB in all) on %s (reserved peak, MiB)\n",
      sum / mib, gpu.name().c_str());
  std::printf("  %-34s %9.1f\n  %-34s %9.1f   %.2fx the largest   (target <= 1.2x: %s)\n  %-34s %9.1f   %.2fx\n",
              "the largest alone", largest, "16 in one GraphPool", in_pool, in_pool / largest,
              in_pool <= 1.2 * largest ? "met" : "NOT met", "16 without a pool, own streams", own_streams,
              own_streams / largest);
  pool.trim();
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
  std::printf("%6s | %8s %9s %9s %7s | %9s %9s %11s %7s %9s | %10s %10s %7s\n", "N", "eager", "raw graph", "lazygraph",
              "lg/raw", "serial x4", "all() x4", "dataflow x4", "ser/all", "df/all", "raw build", "lg build", "lg/raw");
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
    // The same 4N/4 kernels as one flat list in program order, round robin over the four outputs: dataflow()
    // infers the four chains from what each kernel reads and writes.
    std::vector<decltype(k(lg::LaunchConfig{}, 0.0F, x.cview(), y[0].view(), 0))> flat;
    flat.reserve(static_cast<std::size_t>(4 * quarter));
    for (int i = 0; i < 4 * quarter; ++i) {
      flat.push_back(
          k({{1, 1, 1}, {elements, 1, 1}, 0}, 1.0001F, x.cview(), y[static_cast<std::size_t>(i % 4)].view(), elements));
    }
    auto inferred = lg::CudaGraph<>::capture(s, lg::dataflow(std::move(flat)));
    const double inferred_replay = time_per_kernel(s, 4 * quarter, [&] { inferred.launch_on(s); });

    // Host cost: build + capture + instantiate + upload.
    const auto [raw_build, lazy_build] = host_times_per_node(
        n, [&] { RawGraph g(s, k, one, x.cview(), n); },
        [&] { auto g = lg::CudaGraph<>::capture(s, chain_of(k, x.cview(), y[0].view(), n)); });

    std::printf("%6d | %8.3f %9.3f %9.3f %7.3f | %9.3f %9.3f %11.3f %7.2f %9.3f | %10.3f %10.3f %7.3f\n", n, eager,
                raw_replay, lazy_replay, lazy_replay / raw_replay, serial_replay, parallel_replay, inferred_replay,
                serial_replay / parallel_replay, inferred_replay / parallel_replay, raw_build, lazy_build,
                lazy_build / raw_build);
  }
  s.synchronize();
  lifecycle_table(gpu, s, kernels, x);
  breakdown_table(gpu, s, k, x);
  control_flow_table(gpu, s);
  staging_table(gpu, s);
  cache_and_pool_table(gpu, s, k, x);
  s.synchronize();
  return 0;
}

constexpr const char* usage =
    "usage: bench_graph\n"
    "Prints tables: a chain of N tiny kernels launched eagerly, as a hand-captured driver-API graph and as a\n"
    "lazygraph graph; 4 chains with all(...) vs serially vs dataflow() of the kernels as one flat list; host\n"
    "build+record+instantiate time per node; then the\n"
    "graph lifecycle, a section each: build vs capture, update_from vs re-capturing, DeviceScalar vs a new\n"
    "graph per value, built replay vs raw (with the targets, and whether they are met); then where recording\n"
    "and updating time goes; then what an IF that is false and a WHILE iteration cost on the device; host I/O\n"
    "inside a graph; what a GraphCache hit adds to a replay; and the graph memory of 16 graphs with scratch\n"
    "memory in one GraphPool vs without.\n"
    "Exit status: 0 done, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

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
