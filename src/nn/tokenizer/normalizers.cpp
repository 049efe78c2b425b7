#include "normalizers.hpp"

#include <vector>

#include "replace_pattern.hpp"
#include "unicode.hpp"

namespace lazygraph::nn::tokenizer {

namespace {

class UnicodeFormNormalizer final : public Normalizer {
 public:
  explicit UnicodeFormNormalizer(NormalForm form) : form_(form) {}
  void normalize(std::string& text) const override { text = tokenizer::normalize(text, form_); }

 private:
  NormalForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = lowercase(text); }
};

/// Removes whitespace (White_Space) at the left and/or right.
class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    std::size_t begin = 0;
    std::size_t end = text.size();
    if (left_) {
      while (begin < end) {
        std::size_t next = begin;
        if (!is_whitespace(next_code_point(text, next))) break;
        begin = next;
      }
    }
    if (right_) {
      while (end > begin) {
        std::size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0U) == 0x80U) --start;
        std::size_t next = start;
        if (!is_whitespace(next_code_point(text, next))) break;
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_;
  bool right_;
};

/// Puts a string in front of a text that is not empty.
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override { text = pattern_.replace(text, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

class NormalizerSequence final : public Normalizer {
 public:
  explicit NormalizerSequence(std::vector<std::unique_ptr<const Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    for (const auto& part : parts_) part->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<const Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<const Normalizer> make_normalizer(const JsonAt& json) {
  const std::string& type = json.type();
  if (type == "NFC") return std::make_unique<UnicodeFormNormalizer>(NormalForm::nfc);
  if (type == "NFD") return std::make_unique<UnicodeFormNormalizer>(NormalForm::nfd);
  if (type == "NFKC") return std::make_unique<UnicodeFormNormalizer>(NormalForm::nfkc);
  if (type == "NFKD") return std::make_unique<UnicodeFormNormalizer>(NormalForm::nfkd);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(json.boolean("strip_left", true), json.boolean("strip_right", true));
  }
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(json.at("prepend").string());
  if (type == "Replace")
    return std::make_unique<ReplaceNormalizer>(Pattern(json.at("pattern")), json.at("content").string());
  if (type == "Sequence") {
    const JsonAt list = json.at("normalizers");
    std::vector<std::unique_ptr<const Normalizer>> parts;
    for (std::size_t i = 0; i < list.array_size(); ++i) parts.push_back(make_normalizer(list.at(i)));
    return std::make_unique<NormalizerSequence>(std::move(parts));
  }
  throw json.at("type").error("the normalizer '" + type +
                              "' is not implemented (NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace and "
                              "Sequence are)");
}

}  // namespace lazygraph::nn::tokenizer
