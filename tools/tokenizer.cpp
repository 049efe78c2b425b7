#include "tokenizer.hpp"

#include <algorithm>
#include <system_error>

#ifndef LAZYGRAPH_HAVE_SENTENCEPIECE
#error "build with -DLAZYGRAPH_HAVE_SENTENCEPIECE=0 or 1 (tools/meson.build passes whether SentencePiece was found)"
#endif

#if LAZYGRAPH_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace lazygraph_run {

namespace {

/// U+FFFD in UTF-8: what SentencePiece decodes an incomplete or invalid byte sequence to.
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace

#if LAZYGRAPH_HAVE_SENTENCEPIECE

struct Tokenizer::Model {
  sentencepiece::SentencePieceProcessor processor;
};

bool Tokenizer::supported() noexcept { return true; }

Tokenizer Tokenizer::load(const std::filesystem::path& model_file) {
  std::error_code ec;
  // A FIFO or a device would block or never end; SentencePiece reads the whole file.
  if (!std::filesystem::is_regular_file(model_file, ec)) {
    throw TokenizerError(model_file.string() + ": not a regular file");
  }
  auto model = std::make_shared<Model>();
  const sentencepiece::util::Status status = model->processor.Load(model_file.string());
  if (!status.ok()) {
    throw TokenizerError(model_file.string() + ": not a SentencePiece model (" + status.ToString() +
                         "); Llama 3 and other tiktoken models ship a tokenizer.model SentencePiece cannot read");
  }
  return Tokenizer(std::move(model));
}

std::vector<int> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const sentencepiece::util::Status status = model_->processor.Encode(text, &ids);
  if (!status.ok()) throw TokenizerError("cannot tokenize the prompt: " + status.ToString());
  return ids;
}

std::string Tokenizer::decode(std::span<const int> ids) const {
  std::string text;
  const sentencepiece::util::Status status = model_->processor.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!status.ok()) throw TokenizerError("cannot decode tokens: " + status.ToString());
  return text;
}

int Tokenizer::size() const { return model_->processor.GetPieceSize(); }

std::optional<int> Tokenizer::plain_piece() const {
  const sentencepiece::SentencePieceProcessor& p = model_->processor;
  for (int id = 0; id < p.GetPieceSize(); ++id) {
    if (p.IsControl(id) || p.IsUnknown(id) || p.IsByte(id) || p.IsUnused(id)) continue;
    if (p.IdToPiece(id).starts_with("\xE2\x96\x81")) continue;  // U+2581, SentencePiece's space
    const std::string text = decode(std::vector<int>{id});
    if (!text.empty() && static_cast<unsigned char>(text.front()) > ' ') return id;
  }
  return std::nullopt;
}

#else

struct Tokenizer::Model {};

bool Tokenizer::supported() noexcept { return false; }

Tokenizer Tokenizer::load(const std::filesystem::path& model_file) {
  throw TokenizerError(model_file.string() + ": this lazygraph-run was built without SentencePiece");
}

std::vector<int> Tokenizer::encode(std::string_view /*text*/) const { return {}; }

std::string Tokenizer::decode(std::span<const int> /*ids*/) const { return {}; }

int Tokenizer::size() const { return 0; }

std::optional<int> Tokenizer::plain_piece() const { return std::nullopt; }

#endif

TextStream::TextStream(Tokenizer tokenizer, std::span<const int> prompt)
    : tokenizer_(std::move(tokenizer)), anchor_(tokenizer_.plain_piece()) {
  begun_ = anchor_.has_value() && !tokenizer_.decode(prompt).empty();
  if (!begun_) ids_.assign(prompt.begin(), prompt.end());
  printed_ = ids_.size();
}

std::string TextStream::push(int token) {
  // An id past the tokenizer's pieces (a model's vocabulary padded beyond its tokenizer) has no text.
  if (token >= 0 && token < tokenizer_.size()) ids_.push_back(token);
  return emit(false);
}

std::string TextStream::finish() { return emit(true); }

std::string TextStream::emit(bool final) {
  if (printed_ == ids_.size()) return {};
  std::string before;
  std::string now;
  if (begun_) {
    std::vector<int> window{*anchor_};
    before = tokenizer_.decode(window);
    window.insert(window.end(), ids_.begin(), ids_.end());
    now = tokenizer_.decode(window);
  } else {
    before = tokenizer_.decode(std::span<const int>(ids_).first(printed_));
    now = tokenizer_.decode(ids_);
  }
  if (!final && now.ends_with(kReplacement)) return {};  // a character still incomplete: wait for its other bytes
  // `before` is a prefix of `now`; should decoding ever change earlier text, print from where they part.
  std::size_t common = 0;
  while (common < before.size() && common < now.size() && before[common] == now[common]) ++common;
  std::string text = now.substr(common);
  if (begun_) {
    ids_.clear();
  } else if (!now.empty() && anchor_.has_value()) {
    begun_ = true;
    ids_.clear();
  }
  printed_ = ids_.size();
  return text;
}

}  // namespace lazygraph_run
