#pragma once
/// \file
/// tokenizer.json's `added_tokens`: tokens matched whole in the text before the model sees it, never split. As
/// `tokenizers` does: the ones with `normalized: false` are found in the raw text, then each part between them is
/// normalized and the ones with `normalized: true` are found in it, spelled as the normalizer writes them; the
/// leftmost match wins, the longest of those starting there; `single_word` ones only between non-word characters;
/// `lstrip` / `rstrip` ones take the whitespace before / after them.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bpe.hpp"
#include "json_reader.hpp"
#include "normalizers.hpp"

namespace lazygraph::nn::tokenizer {

/// One added token.
struct AddedToken {
  int id;
  std::string content;
  bool special;
  bool single_word;
  bool lstrip;
  bool rstrip;
  bool normalized;
};

/// A part of a text: an added token (id >= 0) or text still to encode (id -1).
struct TextPart {
  std::size_t start;
  std::size_t end;
  int id;
};

class AddedTokens {
 public:
  /// The added tokens `json` (tokenizer.json's "added_tokens", may be null) lists, their ids as `tokenizers` gives
  /// them: the model's id when the model has the content, else the next free id after the model's, in order.
  /// \throws TokenizerError naming the key when an entry is malformed.
  AddedTokens(const std::optional<JsonAt>& json, const Bpe& model, const Normalizer* normalizer);

  /// The parts of `text`, matching the tokens with `normalized` equal to `normalized_pass` (special tokens are
  /// skipped when `split_special`).
  [[nodiscard]] std::vector<TextPart> split(std::string_view text, bool normalized_pass, bool split_special) const;

  /// The token with `id`, or nullptr.
  [[nodiscard]] const AddedToken* find(int id) const;
  /// The id of the added token `content`.
  [[nodiscard]] std::optional<int> id_of(std::string_view content) const;
  /// Whether the token `content` is a special one.
  [[nodiscard]] bool is_special(std::string_view content) const { return specials_.contains(std::string(content)); }
  /// One more than the largest id (0 without added tokens).
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return tokens_.empty(); }

 private:
  /// The patterns of one pass: by first byte, longest first.
  struct Patterns {
    std::vector<std::pair<std::string, int>> by_byte[256];  // (spelling, index into tokens_)
    bool any = false;
  };
  [[nodiscard]] const AddedToken& token(int index) const { return tokens_[static_cast<std::size_t>(index)]; }

  std::vector<AddedToken> tokens_;
  Patterns raw_;
  Patterns normalized_;
  std::unordered_set<std::string> specials_;
  std::unordered_map<int, std::size_t> by_id_;  // into tokens_
  Vocabulary by_content_;                       // content -> index into tokens_
  int size_ = 0;
};

}  // namespace lazygraph::nn::tokenizer
