#pragma once
/// \file
/// tokenizer.json's decoders: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace and Sequence, each turning
/// the list of token strings into another, as `tokenizers`' decode_chain; the text is their concatenation.

#include <memory>
#include <string>
#include <vector>

#include "json_reader.hpp"

namespace lazygraph::nn::tokenizer {

class Decoder {
 public:
  Decoder() = default;
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;
  virtual ~Decoder() = default;
  /// Rewrites the token strings.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

/// The decoder `json` describes. \throws TokenizerError naming the key: an unknown or unimplemented type (by name),
/// a missing or mistyped member, a regex PCRE2 refuses.
[[nodiscard]] std::unique_ptr<const Decoder> make_decoder(const JsonAt& json);

}  // namespace lazygraph::nn::tokenizer
