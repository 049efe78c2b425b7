#pragma once
/// \file
/// Python's case mappings of str (upper, lower, capitalize, title, islower, isupper) and Jinja's `title` filter, on
/// UTF-8 text, through the C library's Unicode tables (glibc's C.UTF-8 locale, used through towupper_l and friends,
/// so the process's locale is neither read nor changed). One code point maps to one, but for "ß", which upper-cases
/// to "SS" as in Python; Python's other expansions (ligatures, a few Greek and Armenian letters) are not made.
/// Private to src/nn.

#include <string>
#include <string_view>

namespace lazygraph::nn::jinja {

[[nodiscard]] std::string to_upper(std::string_view text);
[[nodiscard]] std::string to_lower(std::string_view text);
/// str.capitalize(): the first character upper case, the rest lower case.
[[nodiscard]] std::string capitalize(std::string_view text);
/// str.title(): upper case after a character without case, lower case after one with.
[[nodiscard]] std::string py_title(std::string_view text);
/// Jinja's `title` filter: upper case at the start and after whitespace, '-', '(', '{', '[' or '<'; lower elsewhere.
[[nodiscard]] std::string jinja_title(std::string_view text);
/// str.islower() (`lower` true) or str.isupper(): some character has case, and all that have are of that case.
[[nodiscard]] bool all_cased(std::string_view text, bool lower);

}  // namespace lazygraph::nn::jinja
