// 07 generate: the decoder of 05_decode generates up to 256 tokens two ways — forward() per token (a graph replay
// and a host round trip each) and generate() (ONE replay: a WHILE loop on the GPU runs every step, appends the
// token and stops at the stop token) — checks that both give the same tokens, and prints tokens/s of each.
//   usage: 07_generate [steps]
#include <lazygraph/lazygraph.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include <lazygraph/nn/decoder.hpp>
#include "cli.hpp"

namespace lg = lazygraph;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

constexpr const char* usage =
    "usage: 07_generate [STEPS]\n"
    "A Llama-style decoder generates up to STEPS tokens (default 256, at most 1024) with forward() per token and\n"
    "with generate() (one graph replay, a WHILE loop on the GPU, stopping at a stop token); checks that both give\n"
    "the same tokens and prints tokens/s of each.\n"
    "Exit status: 0 checked, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

/// Generates `steps` tokens both ways and compares them; returns the exit status.
int run(int steps) {
  if (example::skip_without_gpu("07_generate")) return example::exit_skipped;
  lg::Device gpu = lg::Device::first();
  lg::Stream stream = gpu.create_stream();
  lg::KernelLibrary kernels = lg::nn::kernel_library(gpu);
  lg::nn::Decoder decoder(stream, kernels, {});
  std::printf("device: %s; decoder d 512, 8 layers, vocab 4096\n", gpu.name().c_str());

  // The host loop: one replay per token, each waiting for its token before the next.
  const int first = 1;
  std::vector<int> forward_tokens;
  int token = first;
  Clock::time_point start = Clock::now();
  for (int p = 0; p < steps; ++p) forward_tokens.push_back(token = decoder.forward({token, p}));
  const double forward_s = seconds_since(start);

  // Stop at the token the host loop produced two thirds of the way in: generate() must stop at its first
  // occurrence, returning it last.
  const int stop = forward_tokens[static_cast<std::size_t>(steps * 2 / 3)];
  const auto first_stop = std::find(forward_tokens.begin(), forward_tokens.end(), stop);
  const std::vector<int> want(forward_tokens.begin(), first_stop + 1);

  decoder.reset();
  (void)decoder.generate(first, steps, stop);  // captures the loop graph once
  decoder.reset();
  start = Clock::now();
  const std::vector<int> generated = decoder.generate(first, steps, stop);
  const double generate_s = seconds_since(start);

  const bool same = generated == want;
  std::printf("forward() per token: %d tokens in %.2f ms, %.0f tokens/s\n", steps, forward_s * 1e3, steps / forward_s);
  std::printf("generate(), stop token %d: %zu tokens in %.2f ms, %.0f tokens/s (one graph replay)\n", stop,
              generated.size(), generate_s * 1e3, static_cast<double>(generated.size()) / generate_s);
  std::printf("tokens: %s (first ones:", same ? "the same both ways" : "DIFFERENT");
  for (std::size_t i = 0; i < std::min<std::size_t>(8, generated.size()); ++i) std::printf(" %d", generated[i]);
  std::printf(" ...)\n");
  return same ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return example::main_of(argc, argv, "07_generate", usage, 1,
                          [&] { return run(std::clamp(argc > 1 ? std::atoi(argv[1]) : 256, 1, 1024)); });
}
