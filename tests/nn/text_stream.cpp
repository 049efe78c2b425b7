// Host tests of lazygraph::nn::TextStream: what it prints token by token is the decoded text, spaces included, and a
// character spelled over several byte tokens is printed once complete.
#include <doctest/doctest.h>

#include "common/tokenizer_files.hpp"

#include <lazygraph/nn/text_stream.hpp>

#include <string>
#include <vector>

using namespace lazygraph::nn;
using lgtest::Ids;

namespace {

/// What a stream prints for `tokens` after `prompt`, token by token ("|" between the pushes) and at the end.
std::string streamed(const Tokenizer& tokenizer, const Ids& prompt, const Ids& tokens) {
  TextStream stream(tokenizer, prompt);
  std::string out;
  for (const int token : tokens) out += stream.push(token) + "|";
  return out + stream.finish();
}

}  // namespace

TEST_CASE("a text stream prints each token's text with its space, and a character once its bytes are complete") {
  const lgtest::Loaded tok(lgtest::json_of(lgtest::metaspace()));
  // ▁ab ▁a, then é as <0xC3> <0xA9>, then ▁b. After a prompt of text, the first space is kept.
  const Ids generated{265, 262, 3 + 0xC3, 3 + 0xA9, 263};
  CHECK(streamed(*tok, Ids{1, 264}, generated) == " ab| a||é| b|");
  // From the start (a prompt of BOS only), the first piece's space is dropped, as decoding the whole does.
  CHECK(streamed(*tok, Ids{1}, generated) == "ab| a||é| b|");
  std::vector<int> all{1};
  all.insert(all.end(), generated.begin(), generated.end());
  CHECK(tok->decode(all, true) == "ab aé b");
  // An incomplete character at the end comes out as U+FFFD when the stream finishes; unknown ids print nothing.
  CHECK(streamed(*tok, Ids{1, 264}, Ids{3 + 0xC3, 100000}) == "||\xEF\xBF\xBD");
}

TEST_CASE("a text stream over a byte-level tokenizer prints spaces and multi-byte characters as decoding does") {
  lgtest::Parts p = lgtest::hello_world();
  p.model = lgtest::bpe({"h", "i", "Ġ", "Ã", "©", "Ġh"}, {"Ġ h"});
  const lgtest::Loaded tok(lgtest::json_of(p));
  CHECK(streamed(*tok, Ids{0}, Ids{5, 1, 3, 4, 2}) == " h|i||é| |");
}
