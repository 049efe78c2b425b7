#pragma once
/// \file
/// nn::TextStream: the text of generated tokens, printed as they come, each character only once it is complete.

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lazygraph/nn/tokenizer.hpp"

namespace lazygraph::nn {

/// Turns a sequence of generated tokens into the text to print after each one. Decoding a token alone gets its text
/// wrong: SentencePiece and Metaspace decoders drop the space of the first piece they decode ("▁the" alone is
/// "the"), and byte tokens spell a character over several tokens. So the tokens not yet printed are decoded after a
/// fixed token of plain text (the anchor, whose text is then cut off), once the sequence's text has begun; before
/// that, from the start of the sequence. Text ending in an incomplete character (U+FFFD at the end) is held back
/// until it completes. Special tokens print nothing.
class TextStream {
 public:
  /// Generation continues `prompt`.
  TextStream(Tokenizer tokenizer, std::span<const int> prompt);
  /// The text `token` completes (possibly empty). An id the tokenizer does not know (a model's vocabulary padded
  /// beyond its tokenizer) prints nothing.
  [[nodiscard]] std::string push(int token);
  /// Whatever is still held back (an incomplete character, as U+FFFD), at the end of generation.
  [[nodiscard]] std::string finish();

 private:
  /// The text of the tokens not yet printed, then forgets them; empty, keeping them, while that text ends in an
  /// incomplete character, unless `final`.
  [[nodiscard]] std::string emit(bool final);
  [[nodiscard]] std::string decode(std::span<const int> ids) const { return tokenizer_.decode(ids, true); }
  /// A token of plain text whose text does not change next to others (the anchor), or nullopt when there is none.
  [[nodiscard]] std::optional<int> find_anchor() const;

  Tokenizer tokenizer_;
  std::optional<int> anchor_;
  bool begun_ = false;       ///< whether the sequence's text so far (prompt included) is not empty
  std::vector<int> ids_;     ///< before begun_: the whole sequence; after: the tokens not yet printed
  std::size_t printed_ = 0;  ///< ids_[0, printed_) are printed (or are the prompt)
};

}  // namespace lazygraph::nn
