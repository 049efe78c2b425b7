#include "pre_tokenizers.hpp"

#include <string>

#include "byte_level.hpp"
#include "regex.hpp"
#include "replace_pattern.hpp"
#include "unicode.hpp"

namespace lazygraph::nn::tokenizer {

namespace {

/// GPT-2's pattern, which ByteLevel's use_regex cuts with.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// The ranges of the characters of `text` for which `match` holds, each alone.
template <class Predicate>
std::vector<std::pair<std::size_t, std::size_t>> char_matches(const std::string& text, Predicate match) {
  std::vector<std::pair<std::size_t, std::size_t>> found;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t start = at;
    if (match(next_code_point(text, at))) found.emplace_back(start, at);
  }
  return found;
}

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_.emplace(kGpt2Pattern);
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size());
    for (Piece& piece : pieces) {
      if (add_prefix_space_ && !piece.text.starts_with(' ')) piece.text.insert(0, 1, ' ');
      if (regex_.has_value()) {
        const std::size_t first = out.size();
        split_piece(piece, segments_of(regex_->find_all(piece.text), piece.text.size()), SplitBehavior::isolated, out);
        for (std::size_t i = first; i < out.size(); ++i) out[i].text = to_byte_chars(out[i].text);
        continue;
      }
      out.push_back({to_byte_chars(piece.text), piece.at_start});
    }
    pieces = std::move(out);
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> regex_;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size() * 4);
    for (const Piece& piece : pieces) {
      std::vector<Segment> segments = segments_of(pattern_.find_all(piece.text), piece.text.size());
      if (invert_) {
        for (Segment& s : segments) s.match = !s.match;
      }
      split_piece(piece, std::move(segments), behavior_, out);
    }
    pieces = std::move(out);
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

enum class PrependScheme { first, always, never };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size() * 4);
    for (Piece& piece : pieces) {
      std::string text;
      text.reserve(piece.text.size() + 8);
      for (const char ch : piece.text) {
        if (ch == ' ') {
          text += replacement_;
        } else {
          text += ch;
        }
      }
      const bool prepend = scheme_ == PrependScheme::always || (scheme_ == PrependScheme::first && piece.at_start);
      if (prepend && !text.starts_with(replacement_)) text.insert(0, replacement_);
      Piece replaced{std::move(text), piece.at_start};
      if (!split_) {
        out.push_back(std::move(replaced));
        continue;
      }
      std::vector<std::pair<std::size_t, std::size_t>> found;
      for (std::size_t at = replaced.text.find(replacement_); at != std::string::npos;
           at = replaced.text.find(replacement_, at + replacement_.size())) {
        found.emplace_back(at, at + replacement_.size());
      }
      split_piece(replaced, segments_of(found, replaced.text.size()), SplitBehavior::merged_with_next, out);
    }
    pieces = std::move(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class DigitsPreTokenizer final : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size() * 2);
    for (const Piece& piece : pieces) {
      split_piece(piece, segments_of(char_matches(piece.text, is_numeric), piece.text.size()),
                  individual_ ? SplitBehavior::isolated : SplitBehavior::contiguous, out);
    }
    pieces = std::move(out);
  }

 private:
  bool individual_;
};

class PreTokenizerSequence final : public PreTokenizer {
 public:
  explicit PreTokenizerSequence(std::vector<std::unique_ptr<const PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& part : parts_) part->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<const PreTokenizer>> parts_;
};

SplitBehavior behavior_of(const JsonAt& json) {
  const std::string& name = json.string();
  if (name == "Removed") return SplitBehavior::removed;
  if (name == "Isolated") return SplitBehavior::isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (name == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (name == "Contiguous") return SplitBehavior::contiguous;
  throw json.error("unknown behavior '" + name +
                   "' (Removed, Isolated, MergedWithPrevious, MergedWithNext and Contiguous are known)");
}

/// A single character: what Metaspace's replacement must be.
const std::string& one_character(const JsonAt& json) {
  const std::string& text = json.string();
  if (text.empty() || first_invalid_utf8(text).has_value() ||
      utf8_length(static_cast<unsigned char>(text[0])) != text.size()) {
    throw json.error("is not one character");
  }
  return text;
}

}  // namespace

std::unique_ptr<const PreTokenizer> make_pre_tokenizer(const JsonAt& json) {
  const std::string& type = json.type();
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(json.boolean("add_prefix_space", true),
                                                   json.boolean("use_regex", true));
  }
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(Pattern(json.at("pattern")), behavior_of(json.at("behavior")),
                                               json.boolean("invert", false));
  }
  if (type == "Metaspace") {
    std::string replacement = one_character(json.at("replacement"));
    PrependScheme scheme = json.boolean("add_prefix_space", true) ? PrependScheme::always : PrependScheme::never;
    if (const std::optional<JsonAt> named = json.find("prepend_scheme")) {
      const std::string& name = named->string();
      if (name == "first") {
        scheme = PrependScheme::first;
      } else if (name == "always") {
        scheme = PrependScheme::always;
      } else if (name == "never") {
        scheme = PrependScheme::never;
      } else {
        throw named->error("unknown prepend_scheme '" + name + "' (first, always and never are known)");
      }
    }
    return std::make_unique<MetaspacePreTokenizer>(std::move(replacement), scheme, json.boolean("split", true));
  }
  if (type == "Digits") return std::make_unique<DigitsPreTokenizer>(json.boolean("individual_digits", false));
  if (type == "Sequence") {
    const JsonAt list = json.at("pretokenizers");
    std::vector<std::unique_ptr<const PreTokenizer>> parts;
    for (std::size_t i = 0; i < list.array_size(); ++i) parts.push_back(make_pre_tokenizer(list.at(i)));
    return std::make_unique<PreTokenizerSequence>(std::move(parts));
  }
  throw json.at("type").error("the pre-tokenizer '" + type +
                              "' is not implemented (ByteLevel, Split, Metaspace, Digits and Sequence are)");
}

}  // namespace lazygraph::nn::tokenizer
