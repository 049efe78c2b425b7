#include "post_processor.hpp"

namespace lazygraph::nn::tokenizer {

PostProcessor::PostProcessor(const JsonAt& json) { add(json); }

void PostProcessor::add(const JsonAt& json) {
  const std::string& type = json.type();
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    const JsonAt list = json.at("processors");
    for (std::size_t i = 0; i < list.array_size(); ++i) add(list.at(i));
    return;
  }
  if (type != "TemplateProcessing") {
    throw json.at("type").error("the post-processor '" + type +
                                "' is not implemented (TemplateProcessing, ByteLevel and Sequence are)");
  }
  const JsonAt single = json.at("single");
  const std::optional<JsonAt> specials = json.find("special_tokens");
  std::vector<std::vector<int>> pieces;
  bool has_sequence = false;
  for (std::size_t i = 0; i < single.array_size(); ++i) {
    const JsonAt piece = single.at(i);
    if (const std::optional<JsonAt> sequence = piece.find("Sequence")) {
      if (sequence->at("id").string() != "A") throw sequence->at("id").error("a single template has only A");
      pieces.emplace_back();
      has_sequence = true;
    } else if (const std::optional<JsonAt> special = piece.find("SpecialToken")) {
      const JsonAt id = special->at("id");
      const std::string& name = id.string();
      if (!specials.has_value() || !specials->object().contains(name)) {
        throw id.error("the special token '" + name + "' is not in post_processor.special_tokens");
      }
      const JsonAt entry = specials->at(name);
      const JsonAt ids = entry.at("ids");
      std::vector<int> values;
      for (std::size_t k = 0; k < ids.array_size(); ++k) {
        const long long value = ids.at(k).integer();
        if (value < 0 || value >= (1LL << 30)) throw ids.at(k).error("is not a token id");
        values.push_back(static_cast<int>(value));
      }
      if (values.empty()) throw ids.error("is empty");
      pieces.push_back(std::move(values));
    } else {
      throw piece.error("is neither {\"Sequence\": ...} nor {\"SpecialToken\": ...}");
    }
  }
  if (!has_sequence) throw single.error("has no {\"Sequence\": {\"id\": \"A\"}}: the text would be dropped");
  templates_.push_back(std::move(pieces));
}

std::vector<int> PostProcessor::process(std::vector<int> ids) const {
  for (const auto& pieces : templates_) {
    std::vector<int> out;
    for (const std::vector<int>& piece : pieces) {
      if (piece.empty()) {
        out.insert(out.end(), ids.begin(), ids.end());
      } else {
        out.insert(out.end(), piece.begin(), piece.end());
      }
    }
    ids = std::move(out);
  }
  return ids;
}

}  // namespace lazygraph::nn::tokenizer
