#include "decoders.hpp"

#include "byte_level.hpp"
#include "replace_pattern.hpp"
#include "unicode.hpp"

namespace lazygraph::nn::tokenizer {

namespace {

constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";

/// Each token's characters back to their bytes (a token with a character outside the alphabet keeps its own
/// bytes), all joined, then read as UTF-8 with U+FFFD for what is not.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    std::string token_bytes;
    for (const std::string& token : tokens) {
      token_bytes.clear();
      bool mapped = true;
      std::size_t at = 0;
      while (at < token.size()) {
        const int b = char_byte(next_code_point(token, at));
        if (b < 0) {
          mapped = false;
          break;
        }
        token_bytes += static_cast<char>(b);
      }
      bytes += mapped ? token_bytes : token;
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

/// The replacement character as spaces; in the first token, dropped instead (unless prepend_scheme is never).
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string& token = tokens[i];
      std::string out;
      out.reserve(token.size());
      std::size_t at = 0;
      while (at < token.size()) {
        if (token.compare(at, replacement_.size(), replacement_) == 0) {
          if (i != 0 || !strip_first_) out += ' ';
          at += replacement_.size();
        } else {
          out += token[at++];
        }
      }
      token = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

/// "<0xAB>" tokens to their bytes: each run of them as UTF-8, or U+FFFD for each byte when the run is not UTF-8.
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    const auto flush = [&] {
      if (run.empty()) return;
      if (first_invalid_utf8(run).has_value()) {
        for (std::size_t i = 0; i < run.size(); ++i) out.emplace_back(kReplacementCharacter);
      } else {
        out.push_back(run);
      }
      run.clear();
    };
    for (std::string& token : tokens) {
      if (const std::optional<unsigned char> b = byte_of(token)) {
        run += static_cast<char>(*b);
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens = std::move(out);
  }

 private:
  /// The byte of "<0xAB>" (two hexadecimal digits, either case, as Rust's u8::from_str_radix reads them: "+A"
  /// too).
  static std::optional<unsigned char> byte_of(const std::string& token) {
    if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return std::nullopt;
    const auto digit = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int high = digit(token[3]);
    const int low = digit(token[4]);
    if (token[3] == '+' && low >= 0) return static_cast<unsigned char>(low);
    if (high < 0 || low < 0) return std::nullopt;
    return static_cast<unsigned char>(high * 16 + low);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (const std::string& token : tokens) joined += token;
    tokens.clear();
    tokens.push_back(std::move(joined));
  }
};

/// Removes up to `start` leading and `stop` trailing copies of one character from each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, std::size_t start, std::size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      std::vector<std::size_t> starts;  // of each character
      std::size_t at = 0;
      while (at < token.size()) {
        starts.push_back(at);
        at += utf8_length(static_cast<unsigned char>(token[at]));
      }
      starts.push_back(token.size());
      const std::size_t chars = starts.size() - 1;
      const auto is_content = [&](std::size_t i) {
        return token.compare(starts[i], starts[i + 1] - starts[i], content_) == 0;
      };
      std::size_t first = 0;
      while (first < start_ && first < chars && is_content(first)) ++first;
      std::size_t last = chars;  // exclusive
      for (std::size_t i = 0; i < stop_ && i < chars; ++i) {
        const std::size_t index = chars - i - 1;
        if (!is_content(index)) break;
        last = index;
      }
      token = first < last ? token.substr(starts[first], starts[last] - starts[first]) : std::string();
    }
  }

 private:
  std::string content_;
  std::size_t start_;
  std::size_t stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) token = pattern_.replace(token, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class DecoderSequence final : public Decoder {
 public:
  explicit DecoderSequence(std::vector<std::unique_ptr<const Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& part : parts_) part->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<const Decoder>> parts_;
};

std::size_t count_of(const JsonAt& json, std::string_view key) {
  const JsonAt member = json.at(key);
  const long long value = member.integer();
  if (value < 0) throw member.error("is negative");
  return static_cast<std::size_t>(value);
}

}  // namespace

std::unique_ptr<const Decoder> make_decoder(const JsonAt& json) {
  const std::string& type = json.type();
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    const std::string& replacement = json.at("replacement").string();
    bool strip_first = json.boolean("add_prefix_space", true);
    if (const std::optional<std::string> scheme = json.string("prepend_scheme")) strip_first = *scheme != "never";
    return std::make_unique<MetaspaceDecoder>(replacement, strip_first);
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    const JsonAt content = json.at("content");
    const std::string& text = content.string();
    if (text.empty() || utf8_length(static_cast<unsigned char>(text[0])) != text.size()) {
      throw content.error("is not one character");
    }
    return std::make_unique<StripDecoder>(text, count_of(json, "start"), count_of(json, "stop"));
  }
  if (type == "Replace")
    return std::make_unique<ReplaceDecoder>(Pattern(json.at("pattern")), json.at("content").string());
  if (type == "Sequence") {
    const JsonAt list = json.at("decoders");
    std::vector<std::unique_ptr<const Decoder>> parts;
    for (std::size_t i = 0; i < list.array_size(); ++i) parts.push_back(make_decoder(list.at(i)));
    return std::make_unique<DecoderSequence>(std::move(parts));
  }
  throw json.at("type").error("the decoder '" + type +
                              "' is not implemented (ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace and "
                              "Sequence are)");
}

}  // namespace lazygraph::nn::tokenizer
