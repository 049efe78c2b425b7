#pragma once
/// \file
/// tokenizer.json's post-processors for one sequence: TemplateProcessing (the "single" template: special tokens
/// around the text, e.g. Llama 3's `<|begin_of_text|>` $A), ByteLevel (changes offsets only, so no ids) and
/// Sequence. Pair templates are not read: encode takes one text.

#include <memory>
#include <vector>

#include "json_reader.hpp"

namespace lazygraph::nn::tokenizer {

/// The ids of a text with what the post-processor adds around them.
class PostProcessor {
 public:
  /// The post-processor `json` describes. \throws TokenizerError naming the key: an unknown or unimplemented type
  /// (by name), a template piece that is neither a SpecialToken nor the Sequence, a special token the template
  /// names that special_tokens does not define.
  explicit PostProcessor(const JsonAt& json);
  /// `ids` with the template's special tokens around them.
  [[nodiscard]] std::vector<int> process(std::vector<int> ids) const;

 private:
  void add(const JsonAt& json);
  /// The template, in order: the ids of a special token, or (empty) where the text goes. Sequence processors
  /// compose: each one's template applies to what the previous one made.
  std::vector<std::vector<std::vector<int>>> templates_;
};

}  // namespace lazygraph::nn::tokenizer
