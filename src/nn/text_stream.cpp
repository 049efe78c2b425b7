#include <lazygraph/nn/text_stream.hpp>

#include <string_view>

namespace lazygraph::nn {

namespace {

/// U+FFFD in UTF-8: what an incomplete or invalid byte sequence decodes to.
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace

TextStream::TextStream(Tokenizer tokenizer, std::span<const int> prompt)
    : tokenizer_(std::move(tokenizer)), anchor_(find_anchor()) {
  begun_ = anchor_.has_value() && !decode(prompt).empty();
  if (!begun_) ids_.assign(prompt.begin(), prompt.end());
  printed_ = ids_.size();
}

std::optional<int> TextStream::find_anchor() const {
  // A token whose text starts with a visible character, is whole UTF-8, and is the same twice in a row as alone
  // twice: decoding it before other tokens changes neither its text nor theirs. Not a byte token ("<0x21>"):
  // byte decoders read a run of them together, so one before a character's first byte would spoil it.
  const int size = tokenizer_.size();
  for (int id = 0; id < size; ++id) {
    if (tokenizer_.is_special(id)) continue;
    const std::optional<std::string> token = tokenizer_.token_of(id);
    if (!token.has_value() || (token->size() == 6 && token->starts_with("<0x") && token->ends_with('>'))) continue;
    const std::string alone = decode(std::span<const int>(&id, 1));
    if (alone.empty() || static_cast<unsigned char>(alone.front()) <= ' ' ||
        alone.find(kReplacement) != std::string::npos) {
      continue;
    }
    const int twice[2] = {id, id};
    if (decode(twice) == alone + alone) return id;
  }
  return std::nullopt;
}

std::string TextStream::push(int token) {
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
    before = decode(window);
    window.insert(window.end(), ids_.begin(), ids_.end());
    now = decode(window);
  } else {
    before = decode(std::span<const int>(ids_).first(printed_));
    now = decode(ids_);
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

}  // namespace lazygraph::nn
