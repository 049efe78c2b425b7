#include "added_tokens.hpp"

#include <algorithm>
#include <unordered_map>

#include "unicode.hpp"

namespace lazygraph::nn::tokenizer {

namespace {

/// The last character of text[0, end), or nullopt at the start.
std::optional<char32_t> char_before(std::string_view text, std::size_t end) {
  if (end == 0) return std::nullopt;
  std::size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0U) == 0x80U) --start;
  return next_code_point(text, start);
}

std::optional<char32_t> char_at(std::string_view text, std::size_t at) {
  if (at >= text.size()) return std::nullopt;
  return next_code_point(text, at);
}

}  // namespace

AddedTokens::AddedTokens(const std::optional<JsonAt>& json, const Bpe& model, const Normalizer* normalizer) {
  size_ = model.size();
  if (!json.has_value()) return;
  std::unordered_map<std::string, std::size_t> index_of;  // content -> index in tokens_
  int next_id = static_cast<int>(model.vocabulary().size());
  for (std::size_t i = 0; i < json->array_size(); ++i) {
    const JsonAt entry = json->at(i);
    AddedToken t{};
    t.content = entry.at("content").string();
    if (t.content.empty()) continue;  // ignored, as tokenizers does
    if (first_invalid_utf8(t.content).has_value()) throw entry.at("content").error("is not UTF-8");
    t.special = entry.boolean("special", false);
    t.single_word = entry.boolean("single_word", false);
    t.lstrip = entry.boolean("lstrip", false);
    t.rstrip = entry.boolean("rstrip", false);
    t.normalized = entry.boolean("normalized", !t.special);
    if (const auto it = index_of.find(t.content); it != index_of.end()) {
      t.id = tokens_[it->second].id;  // the same content again: its properties replace the earlier ones
      tokens_[it->second] = t;
    } else {
      const std::optional<int> known = model.id_of(t.content);
      t.id = known.has_value() ? *known : next_id++;
      index_of.emplace(t.content, tokens_.size());
      tokens_.push_back(t);
    }
  }
  for (const AddedToken& t : tokens_) {
    if (t.special) specials_.insert(t.content);
  }
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    size_ = std::max(size_, t.id + 1);
    by_id_[t.id] = i;
    by_content_.emplace(t.content, static_cast<int>(i));
    std::string spelling = t.content;
    if (t.normalized && normalizer != nullptr) normalizer->normalize(spelling);
    if (spelling.empty()) continue;
    Patterns& patterns = t.normalized ? normalized_ : raw_;
    patterns.by_byte[static_cast<unsigned char>(spelling[0])].emplace_back(std::move(spelling), static_cast<int>(i));
    patterns.any = true;
  }
  for (Patterns* patterns : {&raw_, &normalized_}) {
    for (auto& list : patterns->by_byte) {
      std::stable_sort(list.begin(), list.end(),
                       [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    }
  }
}

std::vector<TextPart> AddedTokens::split(std::string_view text, bool normalized_pass, bool split_special) const {
  const Patterns& patterns = normalized_pass ? normalized_ : raw_;
  std::vector<TextPart> parts;
  if (!patterns.any) {
    parts.push_back({0, text.size(), -1});
    return parts;
  }
  std::size_t done = 0;  // text[0, done) is in parts
  std::size_t at = 0;
  while (at < text.size()) {
    // The longest pattern starting at `at`, if any (leftmost-longest, as an Aho-Corasick automaton would find).
    const auto& candidates = patterns.by_byte[static_cast<unsigned char>(text[at])];
    const std::pair<std::string, int>* found = nullptr;
    for (const auto& candidate : candidates) {
      if (text.compare(at, candidate.first.size(), candidate.first) == 0) {
        found = &candidate;
        break;
      }
    }
    if (found == nullptr) {
      ++at;
      continue;
    }
    const AddedToken& t = token(found->second);
    std::size_t start = at;
    std::size_t stop = at + found->first.size();
    at = stop;  // a match that is then skipped still consumes its text, as the automaton's iteration does
    if (split_special && t.special) continue;
    if (t.single_word) {
      const std::optional<char32_t> before = char_before(text, start);
      const std::optional<char32_t> after = char_at(text, stop);
      if ((before.has_value() && is_word(*before)) || (after.has_value() && is_word(*after))) continue;
    }
    if (t.lstrip) {
      std::size_t new_start = start;
      while (new_start > 0) {
        std::size_t back = new_start - 1;
        while (back > 0 && (static_cast<unsigned char>(text[back]) & 0xC0U) == 0x80U) --back;
        std::size_t next = back;
        if (!is_whitespace(next_code_point(text, next))) break;
        new_start = back;
      }
      start = std::max(new_start, done);
    }
    if (t.rstrip) {
      while (true) {
        std::size_t next = stop;
        if (next >= text.size() || !is_whitespace(next_code_point(text, next))) break;
        stop = next;
      }
      at = stop;
    }
    if (done < start) parts.push_back({done, start, -1});
    parts.push_back({start, stop, t.id});
    done = stop;
  }
  if (done != text.size()) parts.push_back({done, text.size(), -1});
  return parts;
}

const AddedToken* AddedTokens::find(int id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int> AddedTokens::id_of(std::string_view content) const {
  const auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[static_cast<std::size_t>(it->second)].id;
}

}  // namespace lazygraph::nn::tokenizer
