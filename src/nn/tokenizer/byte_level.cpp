#include "byte_level.hpp"

#include "unicode.hpp"

namespace lazygraph::nn::tokenizer {

namespace {

/// Whether GPT-2 writes byte `b` as itself: '!'..'~', 0xA1..0xAC and 0xAE..0xFF.
constexpr bool kept(unsigned b) noexcept {
  return (b >= 0x21U && b <= 0x7EU) || (b >= 0xA1U && b <= 0xACU) || b >= 0xAEU;
}

struct Tables {
  std::array<std::string, 256> chars;
  std::array<int, 512> bytes{};  // by code point (all are below 0x144)
  Tables() {
    bytes.fill(-1);
    unsigned next = 256;
    for (unsigned b = 0; b < 256; ++b) {
      const char32_t c = kept(b) ? b : next++;
      append_utf8(chars[b], c);
      bytes[c] = static_cast<int>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::array<std::string, 256>& byte_chars() { return tables().chars; }

int char_byte(char32_t c) noexcept { return c < 512U ? tables().bytes[c] : -1; }

std::string to_byte_chars(std::string_view text) {
  const auto& chars = tables().chars;
  std::string out(2 * text.size(), '\0');  // each character is one or two bytes of UTF-8
  std::size_t length = 0;
  for (const char ch : text) {
    const std::string& c = chars[static_cast<unsigned char>(ch)];
    out[length++] = c[0];
    if (c.size() > 1) out[length++] = c[1];
  }
  out.resize(length);
  return out;
}

}  // namespace lazygraph::nn::tokenizer
