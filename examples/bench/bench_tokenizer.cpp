// Encoding speed of nn::Tokenizer: encodes a text file line by line (as `tokenizers`' encode_batch over its lines,
// which crosscheck_tokenizers.py times beside it), on one core, five times over, and prints the best rate. The BPE
// cache starts empty on the first pass and is warm on the others, as in a program that tokenizes many prompts.
#include <lazygraph/nn/tokenizer.hpp>

#include "cli.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <exception>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace nn = lazygraph::nn;

namespace {

constexpr const char* usage = R"(usage: bench_tokenizer TOKENIZER TEXT_FILE

Encodes TEXT_FILE's lines with TOKENIZER (a tokenizer.json or tokenizer.model, or a folder with one) five times and
prints: the best rate in MB/s (10^6 bytes of text a second of wall time), the first pass's, the best per second of
this process's CPU time (what a busy machine's other work does not take), the bytes, the tokens. English text at
20 MB/s or more on one core is the target (issue 62).
Exit status: 0 done, 1 failed (the files cannot be used), 2 usage error.
)";

}  // namespace

int main(int argc, char** argv) {
  if (const std::optional<int> code = example::handle_arguments(argc, argv, usage, 2)) return *code;
  if (argc != 3) {
    std::fprintf(stderr, "bench_tokenizer: give TOKENIZER and TEXT_FILE\n%s", usage);
    return example::exit_usage;
  }
  try {
    const nn::Tokenizer tokenizer = nn::Tokenizer::load(argv[1]);
    std::ifstream in(argv[2], std::ios::binary);
    if (!in) throw std::runtime_error(std::string(argv[2]) + ": cannot open");
    std::vector<std::string> lines;
    std::size_t bytes = 0;
    for (std::string line; std::getline(in, line);) {
      line += '\n';
      bytes += line.size();
      lines.push_back(std::move(line));
    }
    double best = 0.0;
    double first = 0.0;
    double best_cpu = 0.0;
    std::size_t tokens = 0;
    for (int pass = 0; pass < 5; ++pass) {
      tokens = 0;
      const auto start = std::chrono::steady_clock::now();
      const std::clock_t cpu_start = std::clock();
      for (const std::string& line : lines) tokens += tokenizer.encode(line, {.add_special_tokens = false}).size();
      const double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double rate = static_cast<double>(bytes) / seconds / 1e6;
      if (pass == 0) first = rate;
      best = std::max(best, rate);
      best_cpu = std::max(best_cpu, static_cast<double>(bytes) / cpu / 1e6);
    }
    std::printf("%.1f MB/s (first pass %.1f MB/s; %.1f MB per CPU second; %zu bytes, %zu tokens)\n", best, first,
                best_cpu, bytes, tokens);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
    return 1;
  }
  return 0;
}
