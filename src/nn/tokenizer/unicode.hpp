#pragma once
/// \file
/// UTF-8 as the tokenizer needs it: finding where text stops being UTF-8, Rust's lossy decoding (what `tokenizers`
/// gives for bytes that are not UTF-8), and the character classes and normalization forms of utf8proc (Debian
/// libutf8proc-dev), so that no Unicode table is written here.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include "../utf8.hpp"

namespace lazygraph::nn::tokenizer {

/// The offset of the first byte of `text` that does not begin or continue a well-formed UTF-8 character (an
/// unfinished character at the end counts), or nullopt when `text` is UTF-8.
[[nodiscard]] std::optional<std::size_t> first_invalid_utf8(std::string_view text) noexcept;

/// The bytes of well-formed UTF-8 that start at text[at] (1 to 4), or 0 when none does; `max` is set to the
/// number of bytes that begin a well-formed sequence when 0 is returned (at least 1: what one U+FFFD replaces).
[[nodiscard]] std::size_t utf8_sequence(std::string_view text, std::size_t at, std::size_t& max) noexcept;

/// `bytes` as text, each maximal ill-formed part replaced by U+FFFD (Rust's String::from_utf8_lossy).
[[nodiscard]] std::string utf8_lossy(std::string_view bytes);

/// The code point that starts at text[at] (well-formed UTF-8), advancing `at` past it.
[[nodiscard]] char32_t next_code_point(std::string_view text, std::size_t& at) noexcept;
/// Appends `c` in UTF-8 (shared with the chat-template engine).
using nn::append_utf8;
/// The bytes of the UTF-8 character starting with `lead`.
[[nodiscard]] constexpr std::size_t utf8_length(unsigned char lead) noexcept {
  return lead < 0x80U ? 1 : lead < 0xE0U ? 2 : lead < 0xF0U ? 3 : 4;
}

/// Unicode's White_Space property, as Rust's char::is_whitespace.
[[nodiscard]] bool is_whitespace(char32_t c) noexcept;
/// General category N* (Nd, Nl, No), as Rust's char::is_numeric.
[[nodiscard]] bool is_numeric(char32_t c) noexcept;
/// A word character as the regex crate's `\w` (what `tokenizers` tests single_word tokens with): letters, marks,
/// decimal and letter numbers, connector punctuation, the two joiners. (Its Alphabetic property also takes a few
/// dozen symbols, such as circled letters, which are left out.)
[[nodiscard]] bool is_word(char32_t c) noexcept;

/// A normalization form of utf8proc.
enum class NormalForm { nfc, nfd, nfkc, nfkd };
/// `text` (UTF-8) in `form`.
[[nodiscard]] std::string normalize(std::string_view text, NormalForm form);
/// `text` lowercased character by character (Rust's char::to_lowercase: U+0130 becomes "i̇").
[[nodiscard]] std::string lowercase(std::string_view text);

}  // namespace lazygraph::nn::tokenizer
