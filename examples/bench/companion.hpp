#pragma once
/// \file
/// Running a benchmark's Python companion (torch_moe.py, torch_serving.py): the PyTorch side of a comparison, which
/// writes its results to a file the benchmark then reads. A companion that fails is a note in the benchmark's table,
/// not an error of the benchmark.

#include <sys/wait.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "cli.hpp"

namespace bench {

/// What a companion left: the lines of its result file, or why there are none.
struct CompanionResult {
  std::vector<std::string> lines;  ///< its result file's lines (empty when it wrote none)
  std::string failure;             ///< empty when it wrote the file; else "NAME wrote nothing (why; ...)"
};

/// Runs `command` (printed first), which is to write `file` (removed before, its folder made), and reads the file.
/// `name` names the companion in the failure note.
inline CompanionResult run_companion(const std::string& name, const std::string& command,
                                     const std::filesystem::path& file) {
  std::filesystem::create_directories(file.parent_path());
  std::filesystem::remove(file);
  std::printf("  running: %s\n", command.c_str());
  std::fflush(stdout);
  const int status = std::system(command.c_str());
  CompanionResult result;
  std::ifstream in(file);
  if (!in) {
    const std::string why = status == -1        ? "could not start python3"
                            : WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status)) +
                                                      (WEXITSTATUS(status) == example::exit_skipped ? ": skipped" : "")
                                                : "ended by a signal";
    result.failure = name + " wrote nothing (" + why + "; its output is above)";
    return result;
  }
  for (std::string line; std::getline(in, line);) result.lines.push_back(line);
  return result;
}

/// One result line of a companion, "KEY N NAME X NAME Y NOTE...": N a count (batch, requests), X and Y two figures
/// ("-" for none), the note the rest of the line.
struct CompanionLine {
  int count = 0;
  std::optional<double> first;
  std::optional<double> second;
  std::string note;
};

/// `text` as a figure: nullopt for "-"; false when it is neither "-" nor a whole number (a companion's malformed line).
inline bool parse_companion_figure(const std::string& text, std::optional<double>& out) {
  if (text == "-") return true;
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return false;
  out = value;
  return true;
}

/// `line` read as a CompanionLine, or nullopt when it is not one (a figure that is not a number included: a companion's
/// malformed line is left out of the table, not an error of the benchmark) or its key is not `key`.
inline std::optional<CompanionLine> parse_companion_line(const std::string& line, const std::string& key) {
  std::istringstream words(line);
  std::string got;
  CompanionLine out;
  std::string first_name;
  std::string first;
  std::string second_name;
  std::string second;
  if (!(words >> got >> out.count >> first_name >> first >> second_name >> second) || got != key) return std::nullopt;
  if (!parse_companion_figure(first, out.first) || !parse_companion_figure(second, out.second)) return std::nullopt;
  std::getline(words, out.note);
  const std::size_t start = out.note.find_first_not_of(' ');
  out.note = start == std::string::npos ? "" : out.note.substr(start);
  return out;
}

}  // namespace bench
