// 05 decode: a Llama-style decoder (lazygraph::nn, default config: d 512, 8 heads, 8 layers, ffn 1536, vocab
// 4096, context 1024) generates 256 tokens greedily. Each token is one replay of the same CUDA graph: the token
// and the position are copied into device memory first, no recapture. The first steps' logits are checked
// against a float64 CPU implementation of the same model; then the generation is timed.
//   usage: 05_decode [steps] [checked steps]
#include <lazygraph/lazygraph.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/reference.hpp>
#include "cli.hpp"

namespace lg = lazygraph;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

/// Runs `steps` greedy steps from `first` at positions 0, 1, ...; returns the tokens chosen.
std::vector<int> generate(lazygraph::nn::Decoder& decoder, int first, int steps) {
  std::vector<int> tokens;
  tokens.reserve(static_cast<std::size_t>(steps));
  int token = first;
  for (int p = 0; p < steps; ++p) {
    token = decoder.forward({token, p});
    tokens.push_back(token);
  }
  return tokens;
}

constexpr const char* usage =
    "usage: 05_decode [STEPS [CHECKED]]\n"
    "A Llama-style decoder generates STEPS tokens (default 256), one graph replay each; the first CHECKED\n"
    "steps (default 4) are checked against float64; prints tokens/s.\n"
    "Exit status: 0 checked, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

/// Checks the first `checked` steps against float64, then times `steps` tokens; returns the exit status.
int run(int steps, int checked) {
  if (example::skip_without_gpu("05_decode")) return example::exit_skipped;
  lg::Device gpu = lg::Device::first();
  lg::Stream stream = gpu.create_stream();
  std::printf("device: %s, sm_%d, %d SMs\n", gpu.name().c_str(), gpu.compute_capability().as_int(), gpu.sm_count());
  lg::KernelLibrary kernels = lg::nn::kernel_library(gpu);  // the core and the nn kernel sets

  const lazygraph::nn::DecoderConfig config;
  const Clock::time_point built = Clock::now();
  lazygraph::nn::Decoder decoder(stream, kernels, config);
  std::printf(
      "decoder: d %d, %d heads, %d layers, ffn %d, vocab %d, context %d; %.1f MB of fp16 weights; graph of "
      "%zu nodes; weights generated and step captured in %.0f ms\n",
      config.d, config.heads, config.layers, config.ffn, config.vocab, config.context,
      static_cast<double>(config.weight_bytes()) / 1e6, decoder.graph().node_count(), seconds_since(built) * 1e3);

  // 1. The first steps against float64, following the tokens the GPU chooses.
  const int first_token = 1;
  lazygraph::nn::DecoderReference reference(config);
  int failures = 0;
  std::vector<int> checked_tokens;
  int token = first_token;
  for (int p = 0; p < checked; ++p) {
    const int next = decoder.forward({token, p});
    const std::vector<double> got = lazygraph::nn::widen(decoder.logits());
    const std::vector<double> want = reference.step(token, p);
    const double error = lazygraph::nn::relative_error(got, want);
    const int best = lazygraph::nn::argmax(want);
    // A different token is only acceptable where float64 itself sees a near tie (within fp16 rounding).
    const double gap = want[static_cast<std::size_t>(best)] - want[static_cast<std::size_t>(next)];
    const bool token_ok = next == best || gap < 1e-2;
    std::printf("step %d: token %4d -> %4d (float64: %4d), logits relative error %.2e %s\n", p, token, next, best,
                error, error <= 1e-2 && token_ok ? "ok" : "FAILED");
    failures += error <= 1e-2 && token_ok ? 0 : 1;
    checked_tokens.push_back(next);
    token = next;
  }

  // 2. Generation, timed: a warm-up, then `steps` tokens from position 0 (each one replay and one host sync).
  decoder.reset();
  generate(decoder, first_token, 16);
  decoder.reset();
  const Clock::time_point start = Clock::now();
  const std::vector<int> tokens = generate(decoder, first_token, steps);
  const double elapsed = seconds_since(start);
  for (std::size_t i = 0; i < checked_tokens.size() && i < tokens.size(); ++i) {
    if (tokens[i] != checked_tokens[i]) {
      std::printf("generation is not reproducible: step %zu chose %d, the checked run %d\n", i, tokens[i],
                  checked_tokens[i]);
      ++failures;
      break;
    }
  }
  std::printf("generated %d tokens in %.2f ms: %.0f tokens/s, %.1f us per token\n", steps, elapsed * 1e3,
              steps / elapsed, elapsed * 1e6 / steps);
  std::printf("tokens:");
  for (std::size_t i = 0; i < tokens.size() && i < 24; ++i) std::printf(" %d", tokens[i]);
  std::printf("%s\n", tokens.size() > 24 ? " ..." : "");
  if (failures > 0) {
    std::printf("decode: %d check(s) FAILED\n", failures);
    return 1;
  }
  std::printf("decode: all checks passed\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return example::main_of(argc, argv, "05_decode", usage, 2,
                          [&] { return run(argc > 1 ? std::atoi(argv[1]) : 256, argc > 2 ? std::atoi(argv[2]) : 4); });
}
