#include "unicode.hpp"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <new>

namespace lazygraph::nn::tokenizer {

std::size_t utf8_sequence(std::string_view text, std::size_t at, std::size_t& max) noexcept {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  max = 1;
  if (lead < 0x80U) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80U;
  unsigned char high = 0xBFU;
  if (lead >= 0xC2U && lead <= 0xDFU) {
    length = 2;
  } else if (lead >= 0xE0U && lead <= 0xEFU) {
    length = 3;
    if (lead == 0xE0U) low = 0xA0U;
    if (lead == 0xEDU) high = 0x9FU;  // no surrogates
  } else if (lead >= 0xF0U && lead <= 0xF4U) {
    length = 4;
    if (lead == 0xF0U) low = 0x90U;
    if (lead == 0xF4U) high = 0x8FU;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  for (std::size_t k = 1; k < length; ++k) {
    if (at + k >= text.size()) return 0;
    const unsigned char b = byte(at + k);
    const bool ok = k == 1 ? (b >= low && b <= high) : (b >= 0x80U && b <= 0xBFU);
    if (!ok) return 0;
    max = k + 1;
  }
  return length;
}

std::optional<std::size_t> first_invalid_utf8(std::string_view text) noexcept {
  std::size_t at = 0;
  while (at < text.size()) {
    // ASCII runs first: most text is ASCII.
    if (static_cast<unsigned char>(text[at]) < 0x80U) {
      ++at;
      continue;
    }
    std::size_t max = 0;
    const std::size_t length = utf8_sequence(text, at, max);
    if (length == 0) return at;
    at += length;
  }
  return std::nullopt;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t at = 0;
  while (at < bytes.size()) {
    std::size_t max = 0;
    const std::size_t length = utf8_sequence(bytes, at, max);
    if (length == 0) {
      out += "\xEF\xBF\xBD";
      at += max;
    } else {
      out.append(bytes.substr(at, length));
      at += length;
    }
  }
  return out;
}

char32_t next_code_point(std::string_view text, std::size_t& at) noexcept {
  const auto b = [&](std::size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(text[i])); };
  const char32_t lead = b(at);
  if (lead < 0x80U) {
    at += 1;
    return lead;
  }
  if (lead < 0xE0U) {
    const char32_t c = ((lead & 0x1FU) << 6U) | (b(at + 1) & 0x3FU);
    at += 2;
    return c;
  }
  if (lead < 0xF0U) {
    const char32_t c = ((lead & 0x0FU) << 12U) | ((b(at + 1) & 0x3FU) << 6U) | (b(at + 2) & 0x3FU);
    at += 3;
    return c;
  }
  const char32_t c =
      ((lead & 0x07U) << 18U) | ((b(at + 1) & 0x3FU) << 12U) | ((b(at + 2) & 0x3FU) << 6U) | (b(at + 3) & 0x3FU);
  at += 4;
  return c;
}

bool is_whitespace(char32_t c) noexcept {
  // The White_Space property is these 25 code points (PropList.txt); utf8proc has no property for it.
  if (c <= 0x20U) return c == 0x20U || (c >= 0x09U && c <= 0x0DU);
  switch (c) {
    case 0x85U:
    case 0xA0U:
    case 0x1680U:
    case 0x2028U:
    case 0x2029U:
    case 0x202FU:
    case 0x205FU:
    case 0x3000U:
      return true;
    default:
      return c >= 0x2000U && c <= 0x200AU;
  }
}

bool is_numeric(char32_t c) noexcept {
  if (c < 0x80U) return c >= '0' && c <= '9';
  const utf8proc_category_t category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return category == UTF8PROC_CATEGORY_ND || category == UTF8PROC_CATEGORY_NL || category == UTF8PROC_CATEGORY_NO;
}

bool is_word(char32_t c) noexcept {
  if (c < 0x80U) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (c == 0x200CU || c == 0x200DU) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

std::string normalize(std::string_view text, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::nfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::nfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::nfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::nfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  // ASCII is in every normal form already.
  bool ascii = true;
  for (const char ch : text) ascii = ascii && static_cast<unsigned char>(ch) < 0x80U;
  if (ascii) return std::string(text);
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &result, static_cast<utf8proc_option_t>(options));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
  if (length < 0) {
    if (length == UTF8PROC_ERROR_NOMEM) throw std::bad_alloc();
    return std::string(text);  // not reached: the text was checked to be UTF-8
  }
  return {reinterpret_cast<const char*>(result), static_cast<std::size_t>(length)};
}

std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t at = 0;
  while (at < text.size()) {
    const char32_t c = next_code_point(text, at);
    if (c == 0x130U) {  // the one character whose lowercase is two (SpecialCasing.txt): i and a combining dot
      out += "i\xCC\x87";
      continue;
    }
    append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
  }
  return out;
}

}  // namespace lazygraph::nn::tokenizer
