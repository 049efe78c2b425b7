#pragma once
/// \file
/// nn::Tokenizer: text to token ids and back, from a checkpoint's `tokenizer.json` (Hugging Face tokenizers: byte-level
/// BPE as GPT-2, Llama 3 and Qwen; BPE with byte fallback and Metaspace as Mistral, TinyLlama and Gemma) or its
/// `tokenizer.model` (SentencePiece, when lazygraph was built with libsentencepiece), behind one interface.

#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lazygraph/driver/error.hpp"

namespace lazygraph::nn {

/// A tokenizer file cannot be used (it is missing, too large, malformed, or uses a part this library does not
/// implement, named in the message), or a text cannot be encoded (it is not UTF-8: the message gives the byte
/// offset). The message starts with the file, then names the JSON key or the position.
class TokenizerError : public Error {
 public:
  /// Builds the message "<file>: <problem>".
  TokenizerError(std::filesystem::path file, std::string_view problem);
  /// The tokenizer file the problem is about.
  [[nodiscard]] const std::filesystem::path& file() const noexcept { return file_; }

 private:
  std::filesystem::path file_;
};

/// How Tokenizer::encode treats a text.
struct EncodeOptions {
  /// Add what the tokenizer adds around a text (tokenizer.json's post-processor, e.g. Llama 3's
  /// `<|begin_of_text|>`; a SentencePiece model's BOS), as transformers does by default.
  bool add_special_tokens = true;
  /// Encode special tokens written in the text as ordinary text (`"<|eot_id|>"` becomes several pieces). By
  /// default they are matched as whole tokens, never split. A SentencePiece model never matches them in text.
  bool split_special_tokens = false;
};

/// Text to token ids and back, as the checkpoint's own tokenizer does it. A value: copies share the loaded model.
/// Encoding and decoding are `const` and may run on several threads at once.
///
/// tokenizer.json: the BPE model (merges as "a b" strings or ["a","b"] pairs, ignore_merges, byte_fallback,
/// unk_token, fuse_unk, continuing_subword_prefix, end_of_word_suffix); the normalizers NFC, NFD, NFKC, NFKD,
/// Lowercase, Strip, Prepend, Replace and Sequence; the pre-tokenizers ByteLevel, Split, Metaspace, Digits and
/// Sequence; the decoders ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace and Sequence; the post-processors
/// TemplateProcessing (single sequences), ByteLevel and Sequence; added tokens with single_word, lstrip, rstrip and
/// normalized. Any other type is refused by name when the file is loaded. Ids are those the `tokenizers` library
/// gives (docs/tokenizer.md says how that is checked).
class Tokenizer {
 public:
  /// The largest tokenizer.json read: 256 MiB (Llama 3's is 9 MB, Gemma 3's 33 MB), refused before reading.
  static constexpr std::size_t max_json_bytes = std::size_t{256} << 20U;
  /// The largest tokenizer.model read: 64 MiB (Llama 2's is 0.5 MB, Gemma's 4 MB).
  static constexpr std::size_t max_model_bytes = std::size_t{64} << 20U;

  /// A folder: its `tokenizer.json`, else its `tokenizer.model`; a file: by its name (a name ending in `.model` is
  /// SentencePiece, any other tokenizer.json). \throws TokenizerError naming the folder when it has neither file,
  /// or what from_json / from_sentencepiece throw.
  [[nodiscard]] static Tokenizer load(const std::filesystem::path& folder_or_file);
  /// A Hugging Face tokenizer.json. \throws TokenizerError naming the file and the JSON key: it cannot be read, is
  /// not a regular file, is over max_json_bytes, is not JSON (or nests deeper than 64 levels, or repeats a key),
  /// names a type this library does not implement, or is inconsistent (a merge of tokens not in the vocabulary, a
  /// regex PCRE2 refuses, a template naming an unknown special token).
  [[nodiscard]] static Tokenizer from_json(const std::filesystem::path& file);
  /// A SentencePiece model. \throws TokenizerError naming the file: it cannot be read, is over max_model_bytes,
  /// SentencePiece refuses it, or this build has no SentencePiece (sentencepiece_supported()).
  [[nodiscard]] static Tokenizer from_sentencepiece(const std::filesystem::path& file);
  /// Whether this build can load tokenizer.model files.
  [[nodiscard]] static bool sentencepiece_supported() noexcept;

  /// The ids of `text`. \throws TokenizerError giving the byte offset when `text` is not UTF-8.
  [[nodiscard]] std::vector<int> encode(std::string_view text, EncodeOptions options = {}) const;
  /// The text of `ids`. Ids the tokenizer does not know decode to nothing; bytes that do not form UTF-8 (a
  /// character cut between ids) decode to U+FFFD, as the `tokenizers` library does. `skip_special_tokens` leaves
  /// special tokens out (a SentencePiece model's control tokens always decode to nothing).
  [[nodiscard]] std::string decode(std::span<const int> ids, bool skip_special_tokens = false) const;

  /// One more than the largest id this tokenizer can give (the model's and the added tokens').
  [[nodiscard]] int size() const;
  /// The id of the token spelled `token` (the added tokens', then the model's vocabulary), if there is one.
  [[nodiscard]] std::optional<int> id_of(std::string_view token) const;
  /// The token of `id` as the vocabulary spells it ("Ġthe", "▁the", "<0x0A>"), or nullopt for an unknown id.
  [[nodiscard]] std::optional<std::string> token_of(int id) const;
  /// Whether `id` is a special token (tokenizer.json's `"special": true`; SentencePiece's control tokens).
  [[nodiscard]] bool is_special(int id) const;
  /// The file this tokenizer was loaded from.
  [[nodiscard]] const std::filesystem::path& file() const;

  /// What a kind of tokenizer implements (src/nn/tokenizer/). Not for users.
  class Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace lazygraph::nn
