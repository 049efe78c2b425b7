#pragma once
/// \file
/// A regular expression of a tokenizer.json (a Split pre-tokenizer's, a Replace's), through PCRE2 with Unicode
/// properties (PCRE2_UTF | PCRE2_UCP), compiled once (JIT where PCRE2 has it) and shared by every thread.

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lazygraph::nn::tokenizer {

/// PCRE2 could not finish a match (a limit on backtracking or on the JIT's stack was reached).
class RegexError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A compiled pattern. Matching is const and thread-safe.
class Regex {
 public:
  /// Compiles `pattern`. \throws std::invalid_argument with PCRE2's message and the offset in the pattern.
  explicit Regex(std::string_view pattern);
  /// The [start, end) byte ranges of the non-overlapping matches in `text` (UTF-8), left to right; after an empty
  /// match the search goes on one character later. \throws RegexError when PCRE2 gives up on a match.
  [[nodiscard]] std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
};

}  // namespace lazygraph::nn::tokenizer
