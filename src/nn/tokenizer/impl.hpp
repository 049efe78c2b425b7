#pragma once
/// \file
/// What a kind of tokenizer implements behind nn::Tokenizer: tokenizer.json (json_tokenizer.cpp) and SentencePiece
/// (sentencepiece.cpp).

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <lazygraph/nn/tokenizer.hpp>

namespace lazygraph::nn {

class Tokenizer::Impl {
 public:
  explicit Impl(std::filesystem::path file) : file_(std::move(file)) {}
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  virtual ~Impl() = default;
  /// `text` is UTF-8 (checked by Tokenizer::encode).
  [[nodiscard]] virtual std::vector<int> encode(std::string_view text, EncodeOptions options) const = 0;
  [[nodiscard]] virtual std::string decode(std::span<const int> ids, bool skip_special_tokens) const = 0;
  [[nodiscard]] virtual int size() const = 0;
  [[nodiscard]] virtual std::optional<int> id_of(std::string_view token) const = 0;
  [[nodiscard]] virtual std::optional<std::string> token_of(int id) const = 0;
  [[nodiscard]] virtual bool is_special(int id) const = 0;
  [[nodiscard]] const std::filesystem::path& file() const noexcept { return file_; }

 private:
  std::filesystem::path file_;
};

namespace tokenizer {

/// A tokenizer.json of at most `max_bytes` bytes (Tokenizer::max_json_bytes; tests pass less).
[[nodiscard]] std::shared_ptr<const Tokenizer::Impl> load_json(const std::filesystem::path& file,
                                                               std::size_t max_bytes);
/// A tokenizer.model of at most `max_bytes` bytes.
[[nodiscard]] std::shared_ptr<const Tokenizer::Impl> load_sentencepiece(const std::filesystem::path& file,
                                                                        std::size_t max_bytes);
/// Whether load_sentencepiece can work in this build.
[[nodiscard]] bool have_sentencepiece() noexcept;

}  // namespace tokenizer

}  // namespace lazygraph::nn
