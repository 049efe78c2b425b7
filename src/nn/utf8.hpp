#pragma once
// UTF-8 writing shared by the tokenizer (src/nn/tokenizer/) and the chat-template engine (src/nn/jinja/).
#include <cstdint>
#include <string>

namespace lazygraph::nn {

/// Appends code point `c` (at most U+10FFFF; the caller checks) to `out` in UTF-8.
inline void append_utf8(std::string& out, char32_t c) {
  const auto byte = [&](std::uint32_t b) { out += static_cast<char>(b); };
  const auto cp = static_cast<std::uint32_t>(c);
  if (cp < 0x80U) {
    byte(cp);
  } else if (cp < 0x800U) {
    byte(0xC0U | (cp >> 6U));
    byte(0x80U | (cp & 0x3FU));
  } else if (cp < 0x10000U) {
    byte(0xE0U | (cp >> 12U));
    byte(0x80U | ((cp >> 6U) & 0x3FU));
    byte(0x80U | (cp & 0x3FU));
  } else {
    byte(0xF0U | (cp >> 18U));
    byte(0x80U | ((cp >> 12U) & 0x3FU));
    byte(0x80U | ((cp >> 6U) & 0x3FU));
    byte(0x80U | (cp & 0x3FU));
  }
}

}  // namespace lazygraph::nn
