#pragma once
// What every example and benchmark program does before its real work: answer `--help`, refuse arguments it
// does not take, and, without a GPU, say why and exit 77 — Meson's "skipped", so a test run counts the
// program as not run instead of passed.
#include <lazygraph/lazygraph.hpp>

#include <climits>
#include <cstdio>
#include <exception>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace example {

/// Exit code of a program that could not run here (Meson counts it as skipped, not passed).
inline constexpr int exit_skipped = 77;
/// Exit code for arguments the program does not take.
inline constexpr int exit_usage = 2;

/// "a,b,c" as integers, each at least `least`. \throws lazygraph::UsageError naming `what` and the item for anything
/// else, or for an empty list.
inline std::vector<int> integers(const std::string& text, const std::string& what, int least = INT_MIN) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < least) {
      throw lazygraph::UsageError(what + ": '" + item + "' is not an integer" +
                                  (least == INT_MIN ? std::string() : " of at least " + std::to_string(least)));
    }
    out.push_back(v);
  }
  if (out.empty()) throw lazygraph::UsageError(what + " needs at least one value");
  return out;
}

/// `usage` is the whole help text, starting with "usage: NAME ...". Returns an exit code when the program
/// must stop now: 0 after `--help` / `-h` (usage on stdout), exit_usage when there are more than
/// `max_positional` arguments or an unknown option (usage on stderr); nullopt to go on.
[[nodiscard]] inline std::optional<int> handle_arguments(int argc, char** argv, std::string_view usage,
                                                         int max_positional = 0) {
  int positional = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("%.*s", static_cast<int>(usage.size()), usage.data());
      return 0;
    }
    if (arg.starts_with("-") && arg.size() > 1) {
      std::fprintf(stderr, "unknown option %s\n%.*s", argv[i], static_cast<int>(usage.size()), usage.data());
      return exit_usage;
    }
    ++positional;
  }
  if (positional > max_positional) {
    std::fprintf(stderr, "too many arguments\n%.*s", static_cast<int>(usage.size()), usage.data());
    return exit_usage;
  }
  return std::nullopt;
}

/// What every example's main does: answer `--help` and refuse bad arguments (handle_arguments), then return
/// `run()`, or 1 after printing "NAME: what failed" on stderr when it throws.
template <class Run>
[[nodiscard]] int main_of(int argc, char** argv, const char* name, std::string_view usage, int max_positional,
                          Run&& run) {
  if (auto code = handle_arguments(argc, argv, usage, max_positional)) return *code;
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

/// True when there is no GPU to run on, after printing "PROGRAM: skipped, no GPU to run on: WHY".
[[nodiscard]] inline bool skip_without_gpu(const char* program) {
  std::string why;
  if (lazygraph::gpu_available(&why)) return false;
  std::printf("%s: skipped, no GPU to run on: %s\n", program, why.c_str());
  return true;
}

/// The main of a program whose options `parse(argc, argv)` reads into a std::variant<Options, int> (an int: exit with
/// it now, as after --help): a UsageError from parse is printed with `usage` and gives exit_usage; without a GPU,
/// where `needs_gpu`, skip_without_gpu and exit_skipped; else run(options), or 1 after printing "NAME: what failed"
/// when it throws.
template <class Options, class Parse, class Run>
[[nodiscard]] int main_of_options(int argc, char** argv, const char* name, const char* usage, bool needs_gpu,
                                  Parse&& parse, Run&& run) {
  std::variant<Options, int> parsed;
  try {
    parsed = parse(argc, argv);
  } catch (const lazygraph::UsageError& e) {
    std::fprintf(stderr, "%s: %s\n%s", name, e.what(), usage);
    return exit_usage;
  }
  if (const int* code = std::get_if<int>(&parsed)) return *code;
  if (needs_gpu && skip_without_gpu(name)) return exit_skipped;
  try {
    return run(std::get<Options>(parsed));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace example
