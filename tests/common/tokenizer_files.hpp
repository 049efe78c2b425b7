#pragma once
// Small tokenizer.json files for the tests of nn::Tokenizer and nn::TextStream, built from their parts, and a
// tokenizer loaded from one.

#include <doctest/doctest.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <lazygraph/nn/tokenizer.hpp>

#include "common/files.hpp"
#include "common/temp_dir.hpp"

namespace lgtest {

using Ids = std::vector<int>;

/// `text` as a JSON string.
inline std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

/// A vocabulary object giving the tokens ids 0, 1, 2, ... in order.
inline std::string vocab_of(const std::vector<std::string>& tokens) {
  std::string out = "{";
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    out += (i > 0 ? "," : "") + quoted(tokens[i]) + ":" + std::to_string(i);
  }
  return out + "}";
}

/// A merges array of "a b" strings.
inline std::string merges_of(const std::vector<std::string>& merges) {
  std::string out = "[";
  for (std::size_t i = 0; i < merges.size(); ++i) out += (i > 0 ? "," : "") + quoted(merges[i]);
  return out + "]";
}

/// The parts of a tokenizer.json; null where a part is absent.
struct Parts {
  std::string model;
  std::string normalizer = "null";
  std::string pre_tokenizer = "null";
  std::string decoder = "null";
  std::string post_processor = "null";
  std::string added_tokens = "[]";
};

inline std::string json_of(const Parts& p) {
  return R"({"version":"1.0","truncation":null,"padding":null,"added_tokens":)" + p.added_tokens + R"(,"normalizer":)" +
         p.normalizer + R"(,"pre_tokenizer":)" + p.pre_tokenizer + R"(,"post_processor":)" + p.post_processor +
         R"(,"decoder":)" + p.decoder + R"(,"model":)" + p.model + "}";
}

inline std::string bpe(const std::vector<std::string>& vocab, const std::vector<std::string>& merges,
                       const std::string& options = "") {
  return R"({"type":"BPE",)" + options + (options.empty() ? "" : ",") + R"("vocab":)" + vocab_of(vocab) +
         R"(,"merges":)" + merges_of(merges) + "}";
}

/// A tokenizer loaded from `json`, written to a file of a temporary folder.
class Loaded {
 public:
  explicit Loaded(const std::string& json) {
    lgtest::write_file(dir_ / "tokenizer.json", json);
    tokenizer_.emplace(lazygraph::nn::Tokenizer::load(dir_.path()));
  }
  const lazygraph::nn::Tokenizer& operator*() const { return *tokenizer_; }
  const lazygraph::nn::Tokenizer* operator->() const { return &*tokenizer_; }

 private:
  lgtest::TempDir dir_{"tokenizer"};
  std::optional<lazygraph::nn::Tokenizer> tokenizer_;
};

inline const std::string kByteLevel =
    R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})";

// Llama 3's split pattern, as its tokenizer.json has it.
/// A tiny byte-level BPE: "hello" merges to one token, " world" to "Ġw" and letters.
inline Parts hello_world() {
  Parts p;
  p.model = bpe({"h", "e", "l", "o", "Ġ", "w", "r", "d", "he", "ll", "hell", "hello", "Ġw", "!"},
                {"h e", "l l", "he ll", "hell o", "Ġ w"});
  p.pre_tokenizer = kByteLevel;
  p.decoder = R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true})";
  return p;
}

/// GPT-2's byte-level alphabet: the character (UTF-8) each byte 0..255 is written as.
inline std::vector<std::string> byte_level_chars() {
  std::vector<std::string> chars;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool kept = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const int c = kept ? b : next++;
    std::string utf8;
    if (c < 0x80) {
      utf8 += static_cast<char>(c);
    } else {
      utf8 += static_cast<char>(0xC0 | (c >> 6));
      utf8 += static_cast<char>(0x80 | (c & 0x3F));
    }
    chars.push_back(utf8);
  }
  return chars;
}

/// "<0x00>" .. "<0xFF>".
inline std::vector<std::string> byte_tokens() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    tokens.emplace_back(name);
  }
  return tokens;
}

/// A SentencePiece-style BPE: <unk> <s> </s>, the 256 byte tokens (ids 3..258), then pieces; Metaspace
/// pre-tokenizer (prepend_scheme first) and decoder, byte fallback, BOS through TemplateProcessing.
inline Parts metaspace() {
  std::vector<std::string> vocab{"<unk>", "<s>", "</s>"};
  for (const std::string& b : byte_tokens()) vocab.push_back(b);
  for (const char* piece : {"▁", "a", "b", "▁a", "▁b", "ab", "▁ab"}) vocab.emplace_back(piece);  // 259..265
  Parts p;
  p.model = bpe(vocab, {"▁ a", "▁ b", "a b", "▁a b"},
                R"("unk_token":"<unk>","byte_fallback":true,"fuse_unk":true,"ignore_merges":false)");
  p.pre_tokenizer = R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":false})";
  p.decoder = R"({"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},)"
              R"({"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]})";
  p.post_processor =
      R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],)"
      R"("pair":[],"special_tokens":{"<s>":{"id":"<s>","ids":[1],"tokens":["<s>"]}}})";
  p.added_tokens =
      R"([{"id":0,"content":"<unk>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},)"
      R"({"id":1,"content":"<s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},)"
      R"({"id":2,"content":"</s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}])";
  return p;
}

}  // namespace lgtest
