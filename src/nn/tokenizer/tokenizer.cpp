#include <lazygraph/nn/tokenizer.hpp>

#include <system_error>

#include "impl.hpp"
#include "unicode.hpp"

namespace lazygraph::nn {

namespace fs = std::filesystem;

TokenizerError::TokenizerError(fs::path file, std::string_view problem)
    : Error(file.string() + ": " + std::string(problem)), file_(std::move(file)) {}

Tokenizer Tokenizer::load(const fs::path& folder_or_file) {
  std::error_code ec;
  if (fs::is_directory(folder_or_file, ec)) {
    if (const fs::path json = folder_or_file / "tokenizer.json"; fs::exists(json, ec)) return from_json(json);
    if (const fs::path model = folder_or_file / "tokenizer.model"; fs::exists(model, ec)) {
      return from_sentencepiece(model);
    }
    throw TokenizerError(folder_or_file, "has neither tokenizer.json nor tokenizer.model");
  }
  if (folder_or_file.extension() == ".model") return from_sentencepiece(folder_or_file);
  return from_json(folder_or_file);
}

Tokenizer Tokenizer::from_json(const fs::path& file) { return Tokenizer(tokenizer::load_json(file, max_json_bytes)); }

Tokenizer Tokenizer::from_sentencepiece(const fs::path& file) {
  return Tokenizer(tokenizer::load_sentencepiece(file, max_model_bytes));
}

bool Tokenizer::sentencepiece_supported() noexcept { return tokenizer::have_sentencepiece(); }

std::vector<int> Tokenizer::encode(std::string_view text, EncodeOptions options) const {
  if (const std::optional<std::size_t> bad = tokenizer::first_invalid_utf8(text)) {
    throw TokenizerError(impl_->file(), "the text to encode is not UTF-8: byte " + std::to_string(*bad) + " (of " +
                                            std::to_string(text.size()) +
                                            ") does not begin or continue a "
                                            "character");
  }
  return impl_->encode(text, options);
}

std::string Tokenizer::decode(std::span<const int> ids, bool skip_special_tokens) const {
  return impl_->decode(ids, skip_special_tokens);
}

int Tokenizer::size() const { return impl_->size(); }

std::optional<int> Tokenizer::id_of(std::string_view token) const { return impl_->id_of(token); }

std::optional<std::string> Tokenizer::token_of(int id) const { return impl_->token_of(id); }

bool Tokenizer::is_special(int id) const { return impl_->is_special(id); }

const fs::path& Tokenizer::file() const { return impl_->file(); }

}  // namespace lazygraph::nn
