#pragma once
/// \file
/// GPT-2's byte-level alphabet: each byte is written as one printable character (the printable Latin-1 bytes as
/// themselves, the others as U+0100 and up, in order), so that a vocabulary of strings can hold any byte.

#include <array>
#include <string>
#include <string_view>

namespace lazygraph::nn::tokenizer {

/// The UTF-8 of the character each byte is written as.
[[nodiscard]] const std::array<std::string, 256>& byte_chars();
/// The byte a character stands for, or -1 for a character that stands for none.
[[nodiscard]] int char_byte(char32_t c) noexcept;
/// `text`'s bytes, each written as its character.
[[nodiscard]] std::string to_byte_chars(std::string_view text);

}  // namespace lazygraph::nn::tokenizer
