#pragma once
/// \file
/// tokenizer.json's normalizers: NFC, NFD, NFKC, NFKD (utf8proc), Lowercase, Strip, Prepend, Replace (a string or
/// a regex) and Sequence, as `tokenizers` applies them to each part of a text between added tokens.

#include <memory>
#include <string>

#include "json_reader.hpp"

namespace lazygraph::nn::tokenizer {

/// Rewrites a piece of text (UTF-8 in, UTF-8 out).
class Normalizer {
 public:
  Normalizer() = default;
  Normalizer(const Normalizer&) = delete;
  Normalizer& operator=(const Normalizer&) = delete;
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

/// The normalizer `json` describes. \throws TokenizerError naming the key: an unknown or unimplemented type (by
/// name), a missing or mistyped member, a regex PCRE2 refuses.
[[nodiscard]] std::unique_ptr<const Normalizer> make_normalizer(const JsonAt& json);

}  // namespace lazygraph::nn::tokenizer
