#pragma once
/// \file
/// tokenizer.json's pre-tokenizers: ByteLevel, Split, Metaspace, Digits and Sequence, each cutting the pieces of a
/// text further (and ByteLevel rewriting them in its alphabet), as `tokenizers` does.

#include <memory>
#include <vector>

#include "json_reader.hpp"
#include "pieces.hpp"

namespace lazygraph::nn::tokenizer {

/// Cuts (and may rewrite) pieces; the model then encodes each piece alone.
class PreTokenizer {
 public:
  PreTokenizer() = default;
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;
  virtual ~PreTokenizer() = default;
  /// Replaces `pieces` by what they are cut into.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

/// The pre-tokenizer `json` describes. \throws TokenizerError naming the key: an unknown or unimplemented type (by
/// name), a missing or mistyped member, an unknown behavior or prepend_scheme, a regex PCRE2 refuses.
[[nodiscard]] std::unique_ptr<const PreTokenizer> make_pre_tokenizer(const JsonAt& json);

}  // namespace lazygraph::nn::tokenizer
