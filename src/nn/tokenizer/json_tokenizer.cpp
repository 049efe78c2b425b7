// The tokenizer.json pipeline, as `tokenizers`' TokenizerImpl::encode / decode for one sequence: added tokens out
// of the raw text, normalizer on each part between them, added tokens out of the normalized parts, pre-tokenizer,
// model on each piece, post-processor. Decoding: each id's token (added tokens first), special ones left out on
// request, then the decoder.

#include <memory>

#include "added_tokens.hpp"
#include "bpe.hpp"
#include "decoders.hpp"
#include "impl.hpp"
#include "json_reader.hpp"
#include "normalizers.hpp"
#include "post_processor.hpp"
#include "pre_tokenizers.hpp"
#include "regex.hpp"

namespace lazygraph::nn::tokenizer {

namespace {

class JsonTokenizer final : public Tokenizer::Impl {
 public:
  JsonTokenizer(const std::filesystem::path& file, const nlohmann::json& root) : Impl(file) {
    const JsonAt top(root, file, "");
    (void)top.object();
    if (const std::optional<std::string> version = top.string("version"); version.has_value() && *version != "1.0") {
      throw top.at("version").error("unknown tokenizer.json version '" + *version + "' (1.0 is known)");
    }
    for (const char* unsupported : {"truncation", "padding"}) {
      if (top.find(unsupported).has_value()) {
        throw top.at(unsupported).error("is not null: truncation and padding are not implemented");
      }
    }
    if (const std::optional<JsonAt> normalizer = top.find("normalizer")) normalizer_ = make_normalizer(*normalizer);
    if (const std::optional<JsonAt> pre = top.find("pre_tokenizer")) pre_tokenizer_ = make_pre_tokenizer(*pre);
    model_ = std::make_unique<Bpe>(top.at("model"));
    if (const std::optional<JsonAt> decoder = top.find("decoder")) decoder_ = make_decoder(*decoder);
    if (const std::optional<JsonAt> post = top.find("post_processor")) post_processor_.emplace(*post);
    added_.emplace(top.find("added_tokens"), *model_, normalizer_.get());
  }

  std::vector<int> encode(std::string_view text, EncodeOptions options) const override {
    try {
      return encode_pieces(text, options);
    } catch (const RegexError& e) {
      throw TokenizerError(file(), std::string("cannot encode the text: ") + e.what());
    }
  }

  std::vector<int> encode_pieces(std::string_view text, EncodeOptions options) const {
    std::vector<int> ids;
    ids.reserve(text.size() / 3 + 4);
    std::vector<Piece> pieces;
    for (const TextPart& raw : added_->split(text, false, options.split_special_tokens)) {
      if (raw.id >= 0) {
        ids.push_back(raw.id);
        continue;
      }
      std::string normalized(text.substr(raw.start, raw.end - raw.start));
      if (normalizer_) normalizer_->normalize(normalized);
      if (normalized.empty()) continue;
      for (const TextPart& part : added_->split(normalized, true, options.split_special_tokens)) {
        if (part.id >= 0) {
          ids.push_back(part.id);
          continue;
        }
        pieces.clear();
        pieces.push_back({normalized.substr(part.start, part.end - part.start), raw.start == 0 && part.start == 0});
        if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pieces);
        for (const Piece& piece : pieces) model_->tokenize(piece.text, ids);
      }
    }
    if (options.add_special_tokens && post_processor_.has_value()) return post_processor_->process(std::move(ids));
    return ids;
  }

  std::string decode(std::span<const int> ids, bool skip_special_tokens) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (const int id : ids) {
      const std::string* token = nullptr;
      if (const AddedToken* added = added_->find(id)) {
        token = &added->content;
      } else {
        token = model_->token_of(id);
      }
      if (token == nullptr) continue;  // unknown: nothing, as tokenizers
      if (skip_special_tokens && added_->is_special(*token)) continue;
      tokens.push_back(*token);
    }
    std::string text;
    if (decoder_) {
      decoder_->decode_chain(tokens);
      for (const std::string& token : tokens) text += token;
    } else {
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (i > 0) text += ' ';
        text += tokens[i];
      }
    }
    return text;
  }

  int size() const override { return std::max(model_->size(), added_->size()); }

  std::optional<int> id_of(std::string_view token) const override {
    if (const std::optional<int> id = added_->id_of(token)) return id;
    return model_->id_of(token);
  }

  std::optional<std::string> token_of(int id) const override {
    if (const AddedToken* added = added_->find(id)) return added->content;
    if (const std::string* token = model_->token_of(id)) return *token;
    return std::nullopt;
  }

  bool is_special(int id) const override {
    const std::optional<std::string> token = token_of(id);
    return token.has_value() && added_->is_special(*token);
  }

 private:
  std::unique_ptr<const Normalizer> normalizer_;
  std::unique_ptr<const PreTokenizer> pre_tokenizer_;
  std::unique_ptr<const Bpe> model_;
  std::unique_ptr<const Decoder> decoder_;
  std::optional<PostProcessor> post_processor_;
  std::optional<AddedTokens> added_;
};

}  // namespace

std::shared_ptr<const Tokenizer::Impl> load_json(const std::filesystem::path& file, std::size_t max_bytes) {
  const nlohmann::json root = read_tokenizer_json(file, max_bytes);
  return std::make_shared<const JsonTokenizer>(file, root);
}

}  // namespace lazygraph::nn::tokenizer
