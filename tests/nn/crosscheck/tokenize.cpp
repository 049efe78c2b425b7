// tokenize: lazygraph::nn::Tokenizer over a JSONL file of inputs, for crosscheck_tokenizers.py, which compares what
// it writes with the `tokenizers` library.
//
// Usage: tokenize TOKENIZER INPUT.jsonl OUTPUT.jsonl
// TOKENIZER is a folder or a file, as Tokenizer::load takes it. Each input line is an object with either
//   "text": a string (JSON-escaped UTF-8), or "bytes_b64": the text's bytes in base64 (for bytes that are not UTF-8),
//   or "ids": a list of ids to decode;
// and each output line, in the same order, holds for a text: "ids" (add_special_tokens), "ids_no_special",
// "ids_split_special" (split_special_tokens, no special tokens added), "decoded" and "decoded_skip" (decoding "ids"
// with and without special tokens); or "error" (TokenizerError's message) when the text is refused; for ids:
// "decoded" and "decoded_skip". Exit status 0, or 1 with a message when the files cannot be used.
#include <lazygraph/nn/tokenizer.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace {

/// The bytes `text` (base64, padded) encodes. \throws std::invalid_argument for a character outside the alphabet.
std::string from_base64(const std::string& text) {
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  for (const char c : text) {
    unsigned value = 0;
    if (c >= 'A' && c <= 'Z') {
      value = static_cast<unsigned>(c - 'A');
    } else if (c >= 'a' && c <= 'z') {
      value = static_cast<unsigned>(c - 'a' + 26);
    } else if (c >= '0' && c <= '9') {
      value = static_cast<unsigned>(c - '0' + 52);
    } else if (c == '+') {
      value = 62;
    } else if (c == '/') {
      value = 63;
    } else if (c == '=') {
      break;
    } else {
      throw std::invalid_argument(std::string("not base64: '") + c + "'");
    }
    buffer = (buffer << 6U) | value;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buffer >> static_cast<unsigned>(bits)) & 0xFFU);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: tokenize TOKENIZER INPUT.jsonl OUTPUT.jsonl\n");
    return 2;
  }
  try {
    namespace nn = lazygraph::nn;
    const nn::Tokenizer tokenizer = nn::Tokenizer::load(argv[1]);
    std::ifstream in(argv[2]);
    std::ofstream out(argv[3]);
    if (!in || !out) throw std::runtime_error("cannot open the input or the output file");
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json input = nlohmann::json::parse(line);
      nlohmann::json result;
      if (input.contains("ids")) {
        const auto ids = input.at("ids").get<std::vector<int>>();
        result["decoded"] = tokenizer.decode(ids);
        result["decoded_skip"] = tokenizer.decode(ids, true);
      } else {
        const std::string text = input.contains("bytes_b64") ? from_base64(input.at("bytes_b64").get<std::string>())
                                                             : input.at("text").get<std::string>();
        try {
          const std::vector<int> ids = tokenizer.encode(text);
          result["ids"] = ids;
          result["ids_no_special"] = tokenizer.encode(text, {.add_special_tokens = false});
          result["ids_split_special"] =
              tokenizer.encode(text, {.add_special_tokens = false, .split_special_tokens = true});
          result["decoded"] = tokenizer.decode(ids);
          result["decoded_skip"] = tokenizer.decode(ids, true);
        } catch (const nn::TokenizerError& e) {
          result = {{"error", e.what()}};
        }
      }
      out << result.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict) << '\n';
    }
    if (!out.flush()) throw std::runtime_error("cannot write the output file");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenize: %s\n", e.what());
    return 1;
  }
  return 0;
}
