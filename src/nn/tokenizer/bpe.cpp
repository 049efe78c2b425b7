#include "bpe.hpp"

#include <algorithm>
#include <cstdio>

#include "unicode.hpp"

namespace lazygraph::nn::tokenizer {

namespace {

std::uint64_t pair_key(int left, int right) noexcept {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32U) | static_cast<std::uint32_t>(right);
}

/// A symbol of a word being merged: a token and its neighbours (-1: none); len 0 once merged into its left.
struct Symbol {
  int id;
  int prev;
  int next;
  std::size_t len;
};

/// A pair that may merge: lower rank first, then leftmost.
struct Candidate {
  int rank;
  int pos;
  int id;
  friend bool operator<(const Candidate& a, const Candidate& b) noexcept {  // for a max-heap: "a after b"
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

}  // namespace

Bpe::Bpe(const JsonAt& json) : file_(json.file()) {
  const std::optional<JsonAt> type = json.find("type");
  if (type.has_value() && type->string() != "BPE") {
    throw type->error("the model '" + type->string() +
                      "' is not implemented (BPE is; WordPiece, Unigram and WordLevel are not)");
  }
  if (const std::optional<JsonAt> dropout = json.find("dropout")) {
    if (!dropout->value().is_number() || dropout->value().get<double>() != 0.0) {
      throw dropout->error("BPE dropout (random merges) is not implemented: it must be null");
    }
  }
  const JsonAt vocab = json.at("vocab");
  int largest = -1;
  vocab_.reserve(vocab.object().size());
  for (const auto& [token, id_json] : vocab.object()) {
    const JsonAt id_at(id_json, json.file(), vocab.path() + "." + token);
    const long long id = id_at.integer();
    if (id < 0 || id >= (1LL << 30)) throw id_at.error("the id " + std::to_string(id) + " is out of range");
    vocab_.emplace(token, static_cast<int>(id));
    largest = std::max(largest, static_cast<int>(id));
  }
  // Ids index a table: one far past the vocabulary's size would make a file of a few bytes cost gigabytes.
  if (largest >= 0 && static_cast<std::size_t>(largest) >= 2 * vocab_.size() + 1024) {
    throw vocab.error("the id " + std::to_string(largest) + " is far past the vocabulary's " +
                      std::to_string(vocab_.size()) + " tokens (ids are 0 to about its size)");
  }
  tokens_.resize(static_cast<std::size_t>(largest) + 1);  // largest + 1 tokens; 0 for an empty vocabulary
  known_.assign(tokens_.size(), false);
  for (const auto& [token, id] : vocab_) {
    tokens_[static_cast<std::size_t>(id)] = token;
    known_[static_cast<std::size_t>(id)] = true;
  }

  unk_token_ = json.string("unk_token");
  fuse_unk_ = json.boolean("fuse_unk", false);
  byte_fallback_ = json.boolean("byte_fallback", false);
  ignore_merges_ = json.boolean("ignore_merges", false);
  prefix_ = json.string("continuing_subword_prefix").value_or("");
  suffix_ = json.string("end_of_word_suffix").value_or("");
  for (unsigned b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_ids_[b] = id_of(name).value_or(-1);
  }

  if (prefix_.empty() && suffix_.empty()) {
    char_ids_.assign(0x800, -1);
    for (char32_t ch = 0; ch < 0x800; ++ch) {
      std::string text;
      append_utf8(text, ch);
      char_ids_[ch] = id_of(text).value_or(-1);
    }
  }

  const JsonAt merges = json.at("merges");
  const std::size_t count = merges.array_size();
  merges_.reserve(count);
  int rank = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const JsonAt merge = merges.at(i);
    std::string left;
    std::string right;
    if (merge.value().is_string()) {
      const std::string& line = merge.string();
      if (line.starts_with("#version")) continue;  // a header line of a merges.txt, skipped as tokenizers does
      const std::size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        throw merge.error("the merge \"" + line + "\" is not two tokens separated by one space");
      }
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else {
      if (merge.array_size() != 2) throw merge.error("a merge is a pair of tokens: [\"a\", \"b\"]");
      left = merge.at(std::size_t{0}).string();
      right = merge.at(std::size_t{1}).string();
    }
    const auto id_or_throw = [&](const std::string& token) {
      const std::optional<int> id = id_of(token);
      if (!id.has_value()) throw merge.error("the merge names the token '" + token + "', which is not in model.vocab");
      return *id;
    };
    const int left_id = id_or_throw(left);
    const int right_id = id_or_throw(right);
    if (right.size() < prefix_.size()) throw merge.error("the token '" + right + "' is shorter than the prefix");
    const int merged = id_or_throw(left + right.substr(prefix_.size()));
    merges_[pair_key(left_id, right_id)] = Merge{rank, merged};  // a later duplicate wins, as in tokenizers
    ++rank;
  }
}

std::optional<int> Bpe::id_of(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* Bpe::token_of(int id) const {
  if (id < 0 || id >= size() || !known_[static_cast<std::size_t>(id)]) return nullptr;
  return &tokens_[static_cast<std::size_t>(id)];
}

const Bpe::Merge* Bpe::find_merge(int left, int right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void Bpe::tokenize(std::string_view word, std::vector<int>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto it = vocab_.find(word); it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() < kCacheWordBytes;
  if (cacheable) {
    const std::lock_guard lock(cache_mutex_);
    if (const auto it = cache_.find(word); it != cache_.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int> merged;
  merge_word(word, merged);
  ids.insert(ids.end(), merged.begin(), merged.end());
  if (cacheable) {
    const std::lock_guard lock(cache_mutex_);
    if (cache_.size() < kCacheWords) cache_.emplace(std::string(word), std::move(merged));
  }
}

void Bpe::merge_word(std::string_view word, std::vector<int>& ids) const {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  const auto add = [&](int id, std::size_t len) {
    const int index = static_cast<int>(symbols.size());
    if (index > 0) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1, len});
  };
  std::optional<std::pair<int, std::size_t>> unk;  // a pending unknown (id, bytes)
  const auto unk_id = [&]() {
    const std::optional<int> id = id_of(*unk_token_);
    if (!id.has_value()) {
      throw TokenizerError(file_, "model.unk_token: '" + *unk_token_ + "' is not in model.vocab");
    }
    return *id;
  };
  std::string with_affixes;
  std::size_t at = 0;
  while (at < word.size()) {
    const std::size_t start = at;
    at += utf8_length(static_cast<unsigned char>(word[at]));
    std::string_view symbol = word.substr(start, at - start);
    const std::size_t byte_len = symbol.size();
    if (byte_len <= 2 && !char_ids_.empty()) {
      std::size_t next = start;
      const int id = char_ids_[next_code_point(word, next)];
      if (id >= 0) {
        if (unk.has_value()) {
          add(unk->first, unk->second);
          unk.reset();
        }
        add(id, byte_len);
        continue;
      }
    }
    if ((start > 0 && !prefix_.empty()) || (at >= word.size() && !suffix_.empty())) {
      with_affixes.assign(start > 0 ? prefix_ : std::string());
      with_affixes += symbol;
      if (at >= word.size()) with_affixes += suffix_;
      symbol = with_affixes;
    }
    if (const auto it = vocab_.find(symbol); it != vocab_.end()) {
      if (unk.has_value()) {
        add(unk->first, unk->second);
        unk.reset();
      }
      add(it->second, byte_len);
      continue;
    }
    if (byte_fallback_) {
      const bool all = std::all_of(symbol.begin(), symbol.end(),
                                   [&](char ch) { return byte_ids_[static_cast<unsigned char>(ch)] >= 0; });
      if (all) {
        for (const char ch : symbol) add(byte_ids_[static_cast<unsigned char>(ch)], 1);
        continue;
      }
    }
    if (unk_token_.has_value()) {
      if (unk.has_value() && fuse_unk_) {
        unk->second += byte_len;
      } else {
        if (unk.has_value()) add(unk->first, unk->second);
        unk.emplace(unk_id(), byte_len);
      }
    }
  }
  if (unk.has_value()) add(unk->first, unk->second);

  std::vector<Candidate> queue;
  queue.reserve(symbols.size());
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const Merge* m = find_merge(symbols[i].id, symbols[i + 1].id)) {
      queue.push_back({m->rank, static_cast<int>(i), m->id});
    }
  }
  std::make_heap(queue.begin(), queue.end());
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end());
    const Candidate top = queue.back();
    queue.pop_back();
    Symbol& current = symbols[static_cast<std::size_t>(top.pos)];
    if (current.len == 0 || current.next == -1) continue;
    const int next_pos = current.next;
    const Symbol right = symbols[static_cast<std::size_t>(next_pos)];
    const Merge* m = find_merge(current.id, right.id);
    if (m == nullptr || m->id != top.id) continue;  // stale: one of the two merged since
    current.id = top.id;
    current.len += right.len;
    current.next = right.next;
    symbols[static_cast<std::size_t>(next_pos)].len = 0;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.pos;
    if (current.prev >= 0) {
      if (const Merge* before = find_merge(symbols[static_cast<std::size_t>(current.prev)].id, current.id)) {
        queue.push_back({before->rank, current.prev, before->id});
        std::push_heap(queue.begin(), queue.end());
      }
    }
    if (current.next >= 0) {
      if (const Merge* after = find_merge(current.id, symbols[static_cast<std::size_t>(current.next)].id)) {
        queue.push_back({after->rank, top.pos, after->id});
        std::push_heap(queue.begin(), queue.end());
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (s.len != 0) ids.push_back(s.id);
  }
}

}  // namespace lazygraph::nn::tokenizer
