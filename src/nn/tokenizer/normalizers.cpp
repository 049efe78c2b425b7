#include "normalizers.hpp"

#include <vector>

#include "replace_pattern.hpp"
#include "unicode.hpp"

namespace lazygraph::nn::tokenizer {

namespace {

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(NormalForm form) : form_(form) {}
  void normalize(std::string& text) const override { text = tokenizer::normalize(text, form_); }

 private:
  NormalForm form_;
};

class Lowercase final : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = lowercase(text); }
};

/// Removes whitespace (White_Space) at the left and/or right.
class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
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
class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class Replace final : public Normalizer {
 public:
  Replace(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override { text = pattern_.replace(text, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<const Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    for (const auto& part : parts_) part->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<const Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<const Normalizer> make_normalizer(const JsonAt& json) {
  const std::string& type = json.type();
  if (type == "NFC") return std::make_unique<UnicodeForm>(NormalForm::nfc);
  if (type == "NFD") return std::make_unique<UnicodeForm>(NormalForm::nfd);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(NormalForm::nfkc);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(NormalForm::nfkd);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip") {
    return std::make_unique<Strip>(json.boolean("strip_left", true), json.boolean("strip_right", true));
  }
  if (type == "Prepend") return std::make_unique<Prepend>(json.at("prepend").string());
  if (type == "Replace") return std::make_unique<Replace>(Pattern(json.at("pattern")), json.at("content").string());
  if (type == "Sequence") {
    const JsonAt list = json.at("normalizers");
    std::vector<std::unique_ptr<const Normalizer>> parts;
    for (std::size_t i = 0; i < list.array_size(); ++i) parts.push_back(make_normalizer(list.at(i)));
    return std::make_unique<Sequence>(std::move(parts));
  }
  throw json.at("type").error("the normalizer '" + type +
                              "' is not implemented (NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace and "
                              "Sequence are)");
}

}  // namespace lazygraph::nn::tokenizer
