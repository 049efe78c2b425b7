// NCCL all-reduce (out of place) as a graph node (issue 16) against NCCL called eagerly, in one run: latency and bus
// bandwidth per message size, on every GPU of the machine (one rank per GPU, Communicator::create_all). Eager: each
// rank's ncclAllReduce issued in one NCCL group from one thread, back to back. Graph: a MultiDeviceGraph whose graphs
// hold `per_graph` all-reduces in a row, replayed back to back; per all-reduce = replay time / per_graph. Times are
// medians of 31 samples between CUDA events on rank 0's stream (every rank's stream is waited for after each
// sample). "symmetric": the same graph on buffers in NCCL symmetric memory (SymmetricBuffer: NCCL 2.27+ runs its
// symmetric kernels there), "-" where this NCCL has none. Bus bandwidth as nccl-tests defines it: bytes * 2 (ranks - 1)
// / ranks / time; with one rank NCCL copies (no bus), so the table gives the copy's bytes (read + written) per second
// instead. The device-to-device copy ceiling of rank 0 is measured in the same run.
#include <lazygraph/detail/driver/nccl_api.hpp>  // group_start/group_end: eager all-reduces of every rank at once
#include <lazygraph/lazygraph.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "ceiling.hpp"
#include "cli.hpp"

namespace lg = lazygraph;

namespace {

constexpr int per_graph = 20;

struct Rank {
  lg::Stream stream;
  lg::DeviceBuffer<float> data;
  lg::DeviceBuffer<float> out;
};

/// Seconds per all-reduce of `submit()` (work on every rank's stream, `calls` all-reduces), timed on rank 0's stream.
template <class F>
double per_call(std::vector<Rank>& ranks, int reps, int calls, F&& submit) {
  const auto wait_all = [&] {
    for (Rank& r : ranks) r.stream.synchronize();
  };
  return bench::median_seconds(
             ranks[0].stream, reps, [&](int) { submit(); }, wait_all) /
         calls;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr const char* usage =
      "usage: bench_nccl\n"
      "NCCL all-reduce (float32, sum) as a captured graph node vs NCCL called eagerly, on every GPU of this machine\n"
      "(one rank each): microseconds per all-reduce and bus bandwidth per message size, medians of 31 samples.\n"
      "A benchmark, not a test. Exit status: 0 done, 1 failed, 2 usage error, 77 skipped (no GPU or no NCCL; the\n"
      "reason is printed).\n";
  if (auto code = example::handle_arguments(argc, argv, usage)) return *code;
  if (example::skip_without_gpu("bench_nccl")) return example::exit_skipped;
  std::string why;
  if (!lg::nccl_available(&why)) {
    std::printf("bench_nccl: skipped, no NCCL: %s\n", why.c_str());
    return example::exit_skipped;
  }
  try {
    std::vector<lg::Device> devices;
    devices.reserve(static_cast<std::size_t>(lg::Device::count()));
    for (int d = 0; d < lg::Device::count(); ++d) devices.push_back(lg::Device::get(d));
    const std::vector<lg::Communicator> comms = lg::Communicator::create_all(devices);
    const int n_ranks = static_cast<int>(comms.size());
    std::printf("bench_nccl: %d x %s, NCCL %s (%s)\n", n_ranks, devices[0].name().c_str(), lg::nccl_version().c_str(),
                lg::nccl_library().c_str());
    const std::size_t max_elements = 64ULL << 20U;  // 256 MB of float
    std::vector<Rank> ranks;
    for (const lg::Device& d : devices) {
      lg::Stream s(d);
      auto data = lg::ones<float>(max_elements).sync_on(s);
      auto out = lg::empty<float>(max_elements).sync_on(s);
      ranks.push_back({std::move(s), std::move(data), std::move(out)});
    }
    std::string no_symmetric;
    std::vector<lg::SymmetricBuffer<float>> sym_data;
    std::vector<lg::SymmetricBuffer<float>> sym_out;
    if (lg::SymmetricBuffer<float>::supported(&no_symmetric)) {
      sym_data = lg::SymmetricBuffer<float>::create_all(comms, max_elements);
      sym_out = lg::SymmetricBuffer<float>::create_all(comms, max_elements);
      for (std::size_t r = 0; r < sym_data.size(); ++r) {
        lg::copy(sym_data[r].view(), ranks[r].data.cview()).sync_on(ranks[r].stream);
      }
    } else {
      std::printf("no symmetric memory: %s\n", no_symmetric.c_str());
    }
    const double ceiling = bench::copy_ceiling(ranks[0].stream);
    std::printf("copy ceiling (rank 0, 1 GiB device to device, read + written): %.2f TB/s\n\n", ceiling * 1e-12);
    std::printf(
        "| bytes | eager us | graph us | graph / eager | eager %s GB/s | graph %s GB/s | graph / eager bw | symmetric "
        "graph us | symmetric / eager |\n",
        n_ranks > 1 ? "bus" : "copy", n_ranks > 1 ? "bus" : "copy");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    for (std::size_t bytes = 1024; bytes <= (256ULL << 20U); bytes *= 4) {
      const std::size_t n = bytes / sizeof(float);
      std::vector<lg::CollectiveOp<float>> ops;  // out of place: with one rank, in place would be no work at all
      for (int r = 0; r < n_ranks; ++r) {
        Rank& rank = ranks[static_cast<std::size_t>(r)];
        ops.push_back(lg::all_reduce<float>(comms[static_cast<std::size_t>(r)], rank.data.cview().subspan(0, n),
                                            rank.out.view().subspan(0, n)));
      }
      const double eager = per_call(ranks, bytes <= (1U << 20U) ? 50 : 5, 1, [&] {
        lg::detail::nccl::group_start();
        for (int r = 0; r < n_ranks; ++r) {
          lg::ExecContext ctx(ranks[static_cast<std::size_t>(r)].stream, false);
          ops[static_cast<std::size_t>(r)].execute(ctx);
        }
        lg::detail::nccl::group_end("bench_nccl's eager all-reduces");
      });
      lg::MultiDeviceGraph graph = lg::MultiDeviceGraph::capture(comms, [&](int r, lg::Scope& s) {
        for (int i = 0; i < per_graph; ++i) {
          s.record(ops[static_cast<std::size_t>(r)]);
        }
      });
      const double captured = per_call(ranks, bytes <= (1U << 20U) ? 5 : 1, per_graph, [&] {
        for (int r = 0; r < n_ranks; ++r) graph.graph(r).launch_on(ranks[static_cast<std::size_t>(r)].stream);
      });
      std::string symmetric = "- | -";
      if (!sym_data.empty()) {
        lg::MultiDeviceGraph sym_graph = lg::MultiDeviceGraph::capture(comms, [&](int r, lg::Scope& s) {
          const auto i = static_cast<std::size_t>(r);
          for (int k = 0; k < per_graph; ++k) {
            s.record(
                lg::all_reduce<float>(comms[i], sym_data[i].cview().subspan(0, n), sym_out[i].view().subspan(0, n)));
          }
        });
        const double t = per_call(ranks, bytes <= (1U << 20U) ? 5 : 1, per_graph, [&] {
          for (int r = 0; r < n_ranks; ++r) sym_graph.graph(r).launch_on(ranks[static_cast<std::size_t>(r)].stream);
        });
        char cell[64];
        std::snprintf(cell, sizeof cell, "%.2f | %.3f", t * 1e6, t / eager);
        symmetric = cell;
      }
      const double factor = n_ranks > 1 ? 2.0 * (n_ranks - 1) / n_ranks : 2.0;  // bus bytes, or read + written
      const double b = static_cast<double>(bytes) * factor;
      std::printf("| %zu | %.2f | %.2f | %.3f | %.1f | %.1f | %.3f | %s |\n", bytes, eager * 1e6, captured * 1e6,
                  captured / eager, b / eager * 1e-9, b / captured * 1e-9, eager / captured, symmetric.c_str());
    }
    if (n_ranks == 1) {
      std::printf(
          "\none rank: NCCL copies the buffer instead of running its ring; run on two or more GPUs for the "
          "bus numbers.\n");
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_nccl: %s\n", e.what());
    return 1;
  }
}
