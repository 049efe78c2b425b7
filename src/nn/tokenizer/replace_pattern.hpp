#pragma once
/// \file
/// A pattern of tokenizer.json ({"String": s} or {"Regex": r}) that Replace normalizers and decoders and Split
/// pre-tokenizers find in text.

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "json_reader.hpp"
#include "regex.hpp"

namespace lazygraph::nn::tokenizer {

/// A literal string or a regex.
class Pattern {
 public:
  /// The pattern of `json`. \throws TokenizerError naming the key when it is neither form or the regex is refused.
  explicit Pattern(const JsonAt& json) {
    if (const std::optional<JsonAt> literal = json.find("String")) {
      literal_ = literal->string();
    } else if (const std::optional<JsonAt> regex = json.find("Regex")) {
      try {
        regex_.emplace(regex->string());
      } catch (const std::invalid_argument& e) {
        throw regex->error(e.what());
      }
    } else {
      throw json.error("is neither {\"String\": ...} nor {\"Regex\": ...}");
    }
  }
  /// The [start, end) ranges of the non-overlapping matches in `text`, in order (an empty literal matches nothing).
  [[nodiscard]] std::vector<std::pair<std::size_t, std::size_t>> find_all(const std::string& text) const {
    if (regex_.has_value()) return regex_->find_all(text);
    std::vector<std::pair<std::size_t, std::size_t>> found;
    if (literal_.empty()) return found;
    for (std::size_t at = text.find(literal_); at != std::string::npos;
         at = text.find(literal_, at + literal_.size())) {
      found.emplace_back(at, at + literal_.size());
    }
    return found;
  }
  /// `text` with each match replaced by `content`.
  [[nodiscard]] std::string replace(const std::string& text, const std::string& content) const {
    const auto found = find_all(text);
    if (found.empty()) return text;
    std::string out;
    out.reserve(text.size());
    std::size_t previous = 0;
    for (const auto& [start, end] : found) {
      out.append(text, previous, start - previous);
      out += content;
      previous = end;
    }
    out.append(text, previous);
    return out;
  }

 private:
  std::string literal_;
  std::optional<Regex> regex_;
};

}  // namespace lazygraph::nn::tokenizer
