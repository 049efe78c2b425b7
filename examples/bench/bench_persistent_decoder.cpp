// The decoder on its two backends (DecoderConfig::backend), in one run: the step of one row at position 100 as a
// CUDA graph of kernels and as one persistent kernel, for the default decoder and the TinyLlama and Llama-3.2-1B
// shapes (seeded weights), each against two ceilings measured in the same run -- the device-to-device copy bandwidth
// and a read-only stream (a step mostly reads: a read-only stream can go faster than a copy) -- then where the
// persistent step's time goes, per tile function (profiled: before, in and after each tile's wait).
// Every figure is the median of 31 samples of 20 replays, timed with CUDA events. The two backends' logits are
// compared (within rounding: decoder_tiles.hpp). examples/bench/torch_persistent_decoder.py adds PyTorch's
// torch.cuda.graph step from the JSON this writes.
#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/kernels.hpp>
#include <lazygraph/nn/reference.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "ceiling.hpp"
#include "cli.hpp"
#include "model_shapes.hpp"
#include "tile_profile.hpp"

namespace lg = lazygraph;

namespace {

// A read-only stream: each thread sums 16-byte loads, grid-stride, and writes only if the sum is impossible, so that
// the loads are not optimised away and nothing is written.
const char* const kReadStream = R"(#include "lazygraph/kernel_common.cuh"
extern "C" __global__ void __launch_bounds__(512) read_stream(const unsigned* words, long long n, unsigned* sink) {
  const uint4* in = reinterpret_cast<const uint4*>(words);  // n 16-byte vectors
  unsigned acc = 0;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldcs(in + i);
    const uint4 b = __ldcs(in + i + stride);
    const uint4 c = __ldcs(in + i + 2 * stride);
    const uint4 d = __ldcs(in + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = __ldcs(in + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}
)";

/// Bytes per second a 1 GiB read-only stream reaches.
double read_ceiling(const lg::Stream& s, const lg::KernelLibrary& lib) {
  const std::size_t n = 64ULL << 20U;  // 16-byte vectors: 1 GiB
  auto data = lg::ones<unsigned>(4 * n).sync_on(s);
  auto sink = lg::ones<unsigned>(1).sync_on(s);
  const auto kernel = lib.get<void(const unsigned*, long long, unsigned*)>("read_stream");
  const unsigned blocks = 4U * static_cast<unsigned>(s.device().sm_count());
  const double seconds = bench::median_seconds(s, 5, [&](int) {
    kernel.launch(s, {{blocks, 1, 1}, {512, 1, 1}, 0}, data.cview(), static_cast<long long>(n), sink.view());
  });
  return static_cast<double>(n) * 16.0 / seconds;
}

/// Median microseconds of one replay of `graph`.
double replay_us(const lg::Stream& s, lg::CudaGraph<>& graph) {
  return 1e6 * bench::median_seconds(s, 20, [&](int) { graph.launch_on(s); });
}

struct Row {
  std::string name;
  lg::nn::DecoderConfig config;
  double graph_us = 0;
  double persistent_us = 0;
  double persistent8_us = 0;     ///< with a tile per 8 weight rows (DecoderConfig::persistent_tile_rows 8)
  double persistent_one_us = 0;  ///< with one block per multiprocessor (PersistentOptions::min_blocks_per_sm 1)
  double persistent_two_us = 0;  ///< with two
  double logits_error = 0;       ///< the persistent step's logits relative to the graph step's
  bool same_token = false;
};

/// Per tile function of a profiled step: its calls and tiles, the mean microseconds before, in and after each tile's
/// wait, and the busy time (tiles x mean time) as a share of all tiles' busy time.
void print_breakdown(const Row& row, const std::vector<lg::PersistentCallProfile>& calls, unsigned blocks) {
  double span = 0;
  const std::vector<bench::TileFunctionTime> by = bench::by_tile_function(calls, span);
  double busy = 0;
  double waiting = 0;
  for (const bench::TileFunctionTime& t : by) {
    busy += t.busy();
    waiting += t.waiting;
  }
  std::printf(
      "\nwhere the persistent step's time goes: %s, %u blocks, profiled step %.1f us (stamps add to it)\n"
      "| tile function | calls | tiles | before wait us | waiting us | after wait us | share of block time |\n"
      "|---|---|---|---|---|---|---|\n",
      row.name.c_str(), blocks, span);
  for (const bench::TileFunctionTime& t : by) {
    std::printf("| %s | %d | %.0f | %.2f | %.2f | %.2f | %.1f%% |\n", t.name.c_str(), t.calls, t.tiles,
                t.before / t.tiles, t.waiting / t.tiles, t.after / t.tiles, 100.0 * t.busy() / busy);
  }
  std::printf("blocks spent %.1f%% of their tile time waiting on counters, %.1f%% idle between tiles\n",
              100.0 * waiting / busy, 100.0 * std::max(0.0, 1.0 - busy / (span * blocks)));
}

}  // namespace

constexpr const char* usage =
    "usage: bench_persistent_decoder [DIR]\n"
    "Times the decoder's step of one row at position 100 on the graph backend and the persistent backend\n"
    "(DecoderConfig::backend) for the default decoder and the TinyLlama and Llama-3.2-1B shapes, against the copy\n"
    "ceiling and a read-only stream measured in the same run, and profiles the persistent step per tile function.\n"
    "Writes DIR/persistent_decoder.json (default DIR: .) for examples/bench/torch_persistent_decoder.py.\n"
    "Exit status: 0 done, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

int main(int argc, char** argv) {
  if (auto code = example::handle_arguments(argc, argv, usage, 1)) return *code;
  if (example::skip_without_gpu("bench_persistent_decoder")) return example::exit_skipped;
  const std::string dir = argc > 1 ? argv[1] : ".";
  try {
    lg::Device gpu = lg::Device::first();
    lg::Stream s(gpu);
    lg::KernelLibraryOptions options;
    options.kernel_sets = {lg::nn::kernel_set(), lg::KernelSet{"bench", {{"read_stream.cu", kReadStream}}, {}}};
    lg::KernelLibrary lib(gpu, std::move(options));
    const double copy = bench::copy_ceiling(s);
    const double read = read_ceiling(s, lib);
    std::printf("%s: copy ceiling %.2f TB/s, read-only stream %.2f TB/s\n\n", gpu.name().c_str(), copy * 1e-12,
                read * 1e-12);

    std::vector<Row> rows{{"default (d 512, 8 layers)", {}},
                          {"TinyLlama shape", bench::tinyllama().config},
                          {"Llama-3.2-1B shape", bench::llama32_1b().config}};
    constexpr int position = 100;
    for (Row& row : rows) {
      std::vector<lg::half> graph_logits;
      int graph_token = 0;
      {
        lg::nn::Decoder graph(s, lib, row.config);
        graph_token = graph.forward({7, position});
        graph_logits = graph.logits();
        row.graph_us = replay_us(s, graph.graph());
      }
      lg::nn::DecoderConfig c = row.config;
      c.backend = lg::nn::DecoderBackend::persistent;
      lg::nn::Decoder persistent(s, lib, c);
      row.same_token = persistent.forward({7, position}) == graph_token;
      row.logits_error = lg::nn::relative_error(lg::nn::widen(persistent.logits()), lg::nn::widen(graph_logits));
      row.persistent_us = replay_us(s, persistent.graph());
      (void)persistent.forward({7, position});  // collects an error of the timed replays, if any (throws)
      const auto variant = [&](const lg::nn::DecoderConfig& vc) {
        lg::nn::Decoder d(s, lib, vc);
        (void)d.forward({7, position});
        const double us = replay_us(s, d.graph());
        (void)d.forward({7, position});
        return us;
      };
      lg::nn::DecoderConfig v = c;
      v.persistent_tile_rows = 8;
      row.persistent8_us = variant(v);
      for (const unsigned per_sm : {1U, 2U}) {
        v = c;
        v.persistent.min_blocks_per_sm = per_sm;
        (per_sm == 1 ? row.persistent_one_us : row.persistent_two_us) = variant(v);
      }
    }
    std::printf(
        "| decoder | weights MB | graph step us | persistent step us | persistent / graph | graph of copy / read "
        "ceiling | persistent of copy / read ceiling | logits vs graph | same token | persistent, 8-row tiles us | 1 / "
        "2 "
        "blocks per SM us |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n");
    std::ofstream json(dir + "/persistent_decoder.json");
    json << "{\"gpu\": \"" << gpu.name() << "\", \"copy_ceiling\": " << copy << ", \"read_ceiling\": " << read
         << ", \"position\": " << position << ", \"decoders\": [";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      const double bytes = static_cast<double>(r.config.weight_bytes());
      const auto of = [&](double us, double ceiling) { return bytes / (us * 1e-6) / ceiling; };
      std::printf("| %s | %.0f | %.1f | %.1f | %.2f | %.2f / %.2f | %.2f / %.2f | %.1e | %s | %.1f | %.1f / %.1f |\n",
                  r.name.c_str(), bytes / 1e6, r.graph_us, r.persistent_us, r.persistent_us / r.graph_us,
                  of(r.graph_us, copy), of(r.graph_us, read), of(r.persistent_us, copy), of(r.persistent_us, read),
                  r.logits_error, r.same_token ? "yes" : "no", r.persistent8_us, r.persistent_one_us,
                  r.persistent_two_us);
      const lg::nn::DecoderConfig& c = r.config;
      json << (i > 0 ? ", " : "") << "{\"name\": \"" << r.name << "\", \"config\": {\"d\": " << c.d
           << ", \"heads\": " << c.heads << ", \"kv_heads\": " << c.kv_heads << ", \"layers\": " << c.layers
           << ", \"ffn\": " << c.ffn << ", \"vocab\": " << c.vocab << ", \"context\": " << c.context
           << ", \"theta\": " << c.theta << ", \"eps\": " << c.eps << ", \"seed\": " << c.seed
           << "}, \"weight_bytes\": " << bytes << ", \"graph_us\": " << r.graph_us
           << ", \"persistent_us\": " << r.persistent_us << "}";
    }
    json << "]}\n";

    for (const Row& row : rows) {
      lg::nn::DecoderConfig c = row.config;
      c.backend = lg::nn::DecoderBackend::persistent;
      c.persistent.profile = true;
      lg::nn::Decoder profiled(s, lib, c);
      (void)profiled.forward({7, position});
      (void)profiled.forward({7, position});  // the profile of a warm step
      const lg::PersistentProgram& program = profiled.persistent_program(1);
      print_breakdown(row, program.profile(s), program.blocks());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_persistent_decoder: %s\n", e.what());
    return 1;
  }
}
