#pragma once
/// \file
/// tokenizer.json's BPE model: a vocabulary, merges ranked by their order, and the options of `tokenizers`' BPE
/// (ignore_merges, byte_fallback, unk_token, fuse_unk, continuing_subword_prefix, end_of_word_suffix). A word is
/// merged rank by rank with a priority queue over its adjacent pairs (O(n log n) in its characters), and words
/// seen before come from a cache.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "json_reader.hpp"

namespace lazygraph::nn::tokenizer {

/// Hashes strings and string views alike, so that maps keyed by std::string are searched without a copy. Not
/// noexcept on purpose: libstdc++ then keeps each node's hash, instead of hashing the keys of a bucket's chain again
/// on every search (which took a seventh of the encoding time).
struct StringHash {
  using is_transparent = void;
  [[nodiscard]] std::size_t operator()(std::string_view text) const {  // NOLINT(performance-noexcept-*)
    return std::hash<std::string_view>{}(text);
  }
};

/// A map from token text to id searchable by string_view.
using Vocabulary = std::unordered_map<std::string, int, StringHash, std::equal_to<>>;

class Bpe {
 public:
  /// The most words the cache keeps, and the longest word (in bytes, exclusive) it keeps: as `tokenizers`.
  static constexpr std::size_t kCacheWords = 10000;
  static constexpr std::size_t kCacheWordBytes = 256;

  /// The model `json` describes (tokenizer.json's "model"). \throws TokenizerError naming the key: a type other
  /// than BPE (by name), a vocabulary that is not an object of ids, a merge that is not "a b" or ["a", "b"], a merge
  /// of a token (or into a token) not in the vocabulary, a dropout above 0.
  explicit Bpe(const JsonAt& json);
  Bpe(const Bpe&) = delete;
  Bpe& operator=(const Bpe&) = delete;
  ~Bpe() = default;

  /// Appends the ids of `word` (a pre-tokenized piece, not empty) to `ids`. \throws TokenizerError when a
  /// character is not in the vocabulary and unk_token names a token that is not either.
  void tokenize(std::string_view word, std::vector<int>& ids) const;

  [[nodiscard]] std::optional<int> id_of(std::string_view token) const;
  /// The token of `id`, or nullptr.
  [[nodiscard]] const std::string* token_of(int id) const;
  /// One more than the largest id.
  [[nodiscard]] int size() const noexcept { return static_cast<int>(tokens_.size()); }
  /// The whole vocabulary.
  [[nodiscard]] const Vocabulary& vocabulary() const noexcept { return vocab_; }

 private:
  struct Merge {
    int rank;
    int id;
  };
  void merge_word(std::string_view word, std::vector<int>& ids) const;
  [[nodiscard]] const Merge* find_merge(int left, int right) const;

  std::filesystem::path file_;
  Vocabulary vocab_;
  std::vector<std::string> tokens_;  ///< by id; ids missing from the vocabulary hold an empty string
  std::vector<bool> known_;          ///< by id: whether the vocabulary has it
  std::unordered_map<std::uint64_t, Merge> merges_;
  std::optional<std::string> unk_token_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string prefix_;               ///< continuing_subword_prefix
  std::string suffix_;               ///< end_of_word_suffix
  std::array<int, 256> byte_ids_{};  ///< the ids of "<0x00>".."<0xFF>", -1 where missing
  /// The ids of the characters below U+0800 (one or two bytes: every character of the byte-level alphabet), -1
  /// where the vocabulary lacks one; empty when affixes change how characters are spelled. Saves a search of the
  /// vocabulary (a cache miss in a large one) per character.
  std::vector<int> char_ids_;

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int>, StringHash, std::equal_to<>> cache_;
};

}  // namespace lazygraph::nn::tokenizer
