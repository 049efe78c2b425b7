#include "text_case.hpp"

#include <clocale>
#include <cstdint>
#include <cwctype>

#include "../utf8.hpp"
#include "value.hpp"

namespace lazygraph::nn::jinja {

namespace {

/// glibc's C.UTF-8 locale for the wide-character case functions; null where the C library lacks it (then only
/// ASCII letters change case).
locale_t utf8_locale() {
  static const locale_t locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
  return locale;
}

std::uint32_t map_case(std::uint32_t cp, bool upper) {
  if (cp == 0xffffffffU) return cp;
  if (const locale_t locale = utf8_locale(); locale != nullptr) {
    return static_cast<std::uint32_t>(upper ? towupper_l(static_cast<wint_t>(cp), locale)
                                            : towlower_l(static_cast<wint_t>(cp), locale));
  }
  if (upper && cp >= 'a' && cp <= 'z') return cp - 'a' + 'A';
  if (!upper && cp >= 'A' && cp <= 'Z') return cp - 'A' + 'a';
  return cp;
}

bool is_upper(std::uint32_t cp) {
  if (cp == 0xffffffffU) return false;
  if (const locale_t locale = utf8_locale(); locale != nullptr) return iswupper_l(static_cast<wint_t>(cp), locale) != 0;
  return cp >= 'A' && cp <= 'Z';
}

bool is_lower(std::uint32_t cp) {
  if (cp == 0xffffffffU) return false;
  if (const locale_t locale = utf8_locale(); locale != nullptr) return iswlower_l(static_cast<wint_t>(cp), locale) != 0;
  return cp >= 'a' && cp <= 'z';
}

/// `text` with each code point upper-cased where upper(index, cp, previous) says so and lower-cased elsewhere;
/// bytes that are not UTF-8 are kept as they are.
template <class Upper>
std::string remap(std::string_view text, Upper upper) {
  std::string out;
  out.reserve(text.size());
  std::uint32_t previous = 0xffffffffU;
  for (std::size_t i = 0, index = 0; i < text.size(); ++index) {
    const auto [cp, length] = decode_utf8(text, i);
    const bool up = cp != 0xffffffffU && upper(index, cp, previous);
    if (cp == 0xffffffffU) {
      out.append(text.substr(i, length));
    } else if (cp == 0xdfU && up) {  // Python's one full mapping a German text meets: 'ß'.upper() == 'SS'
      out += upper(index + 1, 'S', 'S') ? "SS" : "Ss";
    } else {
      append_utf8(out, map_case(cp, up));
    }
    previous = cp;
    i += length;
  }
  return out;
}

}  // namespace

std::string to_upper(std::string_view text) {
  return remap(text, [](std::size_t, std::uint32_t, std::uint32_t) { return true; });
}

std::string to_lower(std::string_view text) {
  return remap(text, [](std::size_t, std::uint32_t, std::uint32_t) { return false; });
}

std::string capitalize(std::string_view text) {
  return remap(text, [](std::size_t index, std::uint32_t, std::uint32_t) { return index == 0; });
}

std::string py_title(std::string_view text) {
  return remap(text, [](std::size_t index, std::uint32_t, std::uint32_t previous) {
    return index == 0 || !(is_upper(previous) || is_lower(previous));
  });
}

std::string jinja_title(std::string_view text) {
  return remap(text, [](std::size_t index, std::uint32_t, std::uint32_t previous) {
    return index == 0 || is_py_space(previous) || previous == '-' || previous == '(' || previous == '{' ||
           previous == '[' || previous == '<';
  });
}

bool all_cased(std::string_view text, bool lower) {
  bool cased = false;
  for (std::size_t i = 0; i < text.size();) {
    const auto [cp, length] = decode_utf8(text, i);
    i += length;
    if (lower ? is_upper(cp) : is_lower(cp)) return false;
    cased = cased || is_upper(cp) || is_lower(cp);
  }
  return cased;
}

}  // namespace lazygraph::nn::jinja
