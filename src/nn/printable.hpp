#pragma once
/// \file
/// How nn's error messages show a name read from a file (which may hold any byte). Not installed.

#include <string>
#include <string_view>

namespace lazygraph::nn::detail {

/// `text` as messages show it: each control character (below 0x20, and 0x7f) written as \xNN.
inline std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20U || byte == 0x7fU) {
      constexpr std::string_view kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[byte >> 4U];
      out += kHex[byte & 0xfU];
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace lazygraph::nn::detail
