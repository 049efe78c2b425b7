// Checkpoints at the speed of the seeded decoders: for each checkpoint folder given (e.g. written by Hugging Face
// transformers, examples/bench/hf_checkpoints.py), loads it, builds the seeded decoder of the same DecoderConfig,
// and times one step of each (a replay of its step graph, CUDA events, the median of 31 samples of 50 replays,
// the two alternated five times) against the copy ceiling measured in the same run. The weights' values do not
// change what a step does, so the two times must agree: a loaded model that decodes slower is a loader bug.
#include <lazygraph/lazygraph.hpp>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include <lazygraph/nn/checkpoint.hpp>
#include <lazygraph/nn/decoder.hpp>
#include "ceiling.hpp"
#include "cli.hpp"

namespace lg = lazygraph;
namespace nn = lazygraph::nn;

namespace {

constexpr const char* usage = R"(usage: bench_checkpoint DIR [DIR...]

For each checkpoint folder (config.json + safetensors), times a decode step of the decoder loaded from it against
the seeded decoder of the same config (KV cache of 1024 positions), as graph replays, and prints a table: weight
bytes, both step times (median us), their ratio, and each step's weight bytes over its time as a fraction of the
copy ceiling measured in the same run. A bf16 checkpoint loads as a bf16 decoder, others as fp16.
Exit status: 0 done (after the table), 1 failed (a checkpoint cannot be loaded), 2 usage error (no DIR, or an
unknown option), 77 skipped (no GPU; the reason is printed).
)";

struct Row {
  std::string name;
  std::size_t bytes = 0;
  double seeded_us = 0;
  double loaded_us = 0;
};

/// Median microseconds of a step of `a` and of `b`, alternated: five rounds of each, the median of the rounds.
template <class Decoder>
std::pair<double, double> time_pair(const lg::Stream& s, Decoder& a, Decoder& b) {
  (void)a.forward({1, 100});  // io: a token at position 100 (the attention of a short prompt)
  (void)b.forward({1, 100});
  std::vector<double> ta;
  std::vector<double> tb;
  for (int round = 0; round < 5; ++round) {
    ta.push_back(bench::median_seconds(s, 50, [&](int) { a.graph(1).launch_on(s); }) * 1e6);
    tb.push_back(bench::median_seconds(s, 50, [&](int) { b.graph(1).launch_on(s); }) * 1e6);
  }
  return {bench::median(ta), bench::median(tb)};
}

template <nn::Element T>
Row measure(const lg::Stream& s, const lg::KernelLibrary& library, const std::filesystem::path& dir) {
  nn::LoadOptions options;
  options.context = 1024;
  options.progress = false;
  const nn::DecoderCheckpoint checkpoint = nn::DecoderCheckpoint::open(dir, options);
  nn::BasicDecoder<T> loaded(s, library, checkpoint.config(), checkpoint.template upload<T>(s));
  nn::BasicDecoder<T> seeded(s, library, checkpoint.config());
  const auto [seeded_us, loaded_us] = time_pair(s, seeded, loaded);
  return {dir.filename().string() + (std::same_as<T, lg::half> ? " fp16" : " bf16"), checkpoint.config().weight_bytes(),
          seeded_us, loaded_us};
}

}  // namespace

int main(int argc, char** argv) {
  if (const auto code = example::handle_arguments(argc, argv, usage, 64)) return *code;
  if (argc < 2) {
    std::fprintf(stderr, "no checkpoint folder given\n%s", usage);
    return example::exit_usage;
  }
  if (example::skip_without_gpu("bench_checkpoint")) return example::exit_skipped;
  try {
    const lg::Device gpu = lg::Device::first();
    const lg::Stream s = gpu.create_stream();
    const lg::KernelLibrary library = nn::kernel_library(gpu);
    const double ceiling = bench::copy_ceiling(s);
    std::vector<Row> rows;
    for (int i = 1; i < argc; ++i) {
      const std::filesystem::path dir = argv[i];
      const bool bf16 = nn::LlamaConfig::load(dir).torch_dtype == "bfloat16";
      rows.push_back(bf16 ? measure<lg::bfloat16>(s, library, dir) : measure<lg::half>(s, library, dir));
    }
    std::printf("%s, copy ceiling %.2f TB/s\n", gpu.name().c_str(), ceiling / 1e12);
    std::printf("%-34s %10s %12s %12s %8s %10s %10s\n", "checkpoint", "weights", "seeded us", "loaded us", "loaded/",
                "seeded of", "loaded of");
    std::printf("%-34s %10s %12s %12s %8s %10s %10s\n", "", "", "", "", "seeded", "ceiling", "ceiling");
    for (const Row& r : rows) {
      const auto fraction = [&](double us) { return static_cast<double>(r.bytes) / (us * 1e-6) / ceiling; };
      std::printf("%-34s %8.2f GB %12.1f %12.1f %8.3f %10.2f %10.2f\n", r.name.c_str(),
                  static_cast<double>(r.bytes) / 1e9, r.seeded_us, r.loaded_us, r.loaded_us / r.seeded_us,
                  fraction(r.seeded_us), fraction(r.loaded_us));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_checkpoint: %s\n", e.what());
    return 1;
  }
  return 0;
}
