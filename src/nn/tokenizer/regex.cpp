#define PCRE2_CODE_UNIT_WIDTH 8
#include "regex.hpp"

#include <pcre2.h>
#include <utf8proc.h>

#include <array>
#include <cstdint>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "unicode.hpp"

namespace lazygraph::nn::tokenizer {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  explicit Code(pcre2_code* c) : code(c) {}
  Code(const Code&) = delete;
  Code& operator=(const Code&) = delete;
  ~Code() { pcre2_code_free(code); }
};

namespace {

/// Match data for one thread (PCRE2 match data is not shareable). Only the whole match is read: a pattern with more
/// groups than it holds still matches (pcre2_match returns 0 and sets the first pair).
struct MatchData {
  pcre2_match_data* data = nullptr;
  MatchData() : data(pcre2_match_data_create(16, nullptr)) {}
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
  ~MatchData() { pcre2_match_data_free(data); }
};

/// The White_Space characters as class members: what `\s` means to Oniguruma, the regex engine of `tokenizers`.
/// PCRE2's `\s` also matches U+180E, which Unicode 6.3 took out of White_Space.
constexpr std::string_view kWhiteSpace =
    R"(\t\n\x0B\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

/// `pattern` with `\s` and `\S` spelled as White_Space classes (inside a class, `\s` as its members; `\S` inside a
/// class is left to PCRE2). Quoted runs (`\Q...\E`) and POSIX classes (`[:alpha:]`) are copied as they are.
std::string with_white_space(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  std::size_t class_start = 0;  // where the class's first member goes in `out` (after "[" or "[^")
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (next == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else if (next == 'Q') {
        const std::size_t end = pattern.find("\\E", i + 1);
        const std::size_t stop = end == std::string_view::npos ? pattern.size() : end + 2;
        out += '\\';
        out.append(pattern.substr(i, stop - i));
        i = stop - 1;
      } else {
        out += '\\';
        out += next;
      }
      continue;
    }
    out += c;
    if (!in_class && c == '[') {
      in_class = true;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      class_start = out.size();
    } else if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const std::size_t end = pattern.find(":]", i + 2);
      if (end != std::string_view::npos) {
        out.append(pattern.substr(i + 1, end + 1 - i));
        i = end + 1;
      }
    } else if (in_class && c == ']' && out.size() - 1 != class_start) {  // a "]" first in a class is a member
      in_class = false;
    }
  }
  return out;
}

/// `pattern` compiled for UTF-8 with Unicode properties. \throws std::invalid_argument with PCRE2's message.
pcre2_code* compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                                   &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw std::invalid_argument("PCRE2 refuses the regex at offset " + std::to_string(offset) + ": " +
                                reinterpret_cast<const char*>(message));
  }
  return code;
}

/// The characters that utf8proc's Unicode assigns and PCRE2's does not (Debian 12: Unicode 15.0 and 14.0; U+317CB of
/// CJK extension H, the Kaktovik numerals U+1D2C0..U+1D2D3, ...), each with a stand-in that PCRE2 knows: the first
/// code point of the same general category and UTF-8 length that both libraries assign. A pattern reads a character
/// it does not know as unassigned (no `\p{L}`, no `\p{N}`), where the engine of `tokenizers` (Unicode 15) reads
/// its category; matched as its stand-in instead, it is classified as there, since tokenizer.json's patterns test
/// general categories, White_Space and ASCII literals (a literal range holding the stand-in, or a script property,
/// would still tell them apart). Found once per process, by PCRE2 itself: a pass of `\p{Cn}` over every character
/// utf8proc assigns. Empty where PCRE2 is as new as utf8proc.
class StandIns {
 public:
  static const StandIns& get() {
    static const StandIns instance;
    return instance;
  }
  /// Whether there is any such character.
  [[nodiscard]] bool any() const noexcept { return !stand_in_.empty(); }
  /// The stand-in of `c`, or 0 when `c` needs none.
  [[nodiscard]] char32_t of(char32_t c) const noexcept {
    if ((newer_[c >> 6U] >> (c & 63U) & 1U) == 0U) return 0;
    const auto it = stand_in_.find(c);
    return it == stand_in_.end() ? 0 : it->second;
  }

 private:
  static constexpr char32_t kEnd = 0x110000;

  StandIns() : newer_(kEnd / 64, 0) {
    const auto category = [](char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); };
    const auto assigned = [&](char32_t c) {
      const utf8proc_category_t k = category(c);
      return k != UTF8PROC_CATEGORY_CN && k != UTF8PROC_CATEGORY_CS && k != UTF8PROC_CATEGORY_CO;
    };
    std::vector<char32_t> known;  // every character utf8proc assigns (private use and surrogates aside), in order
    std::string all;              // the same in UTF-8
    for (char32_t c = 0x80; c < kEnd; ++c) {
      if (!assigned(c)) continue;
      known.push_back(c);
      append_utf8(all, c);
    }
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(R"(\p{Cn})"), PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (code == nullptr) return;  // no Unicode properties in this PCRE2: no pattern using them compiles either
    pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(all.data());
    bool found = false;
    for (std::size_t at = 0; at < all.size();) {
      if (pcre2_match(code, subject, all.size(), at, PCRE2_NO_UTF_CHECK, data, nullptr) < 0) break;
      std::size_t start = pcre2_get_ovector_pointer(data)[0];
      const char32_t c = next_code_point(all, start);
      newer_[c >> 6U] |= std::uint64_t{1} << (c & 63U);
      found = true;
      at = start;
    }
    pcre2_match_data_free(data);
    pcre2_code_free(code);
    if (!found) return;
    // The stand-in of each (category, UTF-8 length): the first character both know.
    std::array<std::array<char32_t, 5>, 32> first{};
    for (const char32_t c : known) {
      if ((newer_[c >> 6U] >> (c & 63U) & 1U) != 0U) continue;
      char32_t& slot = first.at(static_cast<std::size_t>(category(c))).at(utf8_bytes(c));
      if (slot == 0) slot = c;
    }
    for (const char32_t c : known) {
      if ((newer_[c >> 6U] >> (c & 63U) & 1U) == 0U) continue;
      const char32_t stand_in = first.at(static_cast<std::size_t>(category(c))).at(utf8_bytes(c));
      if (stand_in != 0) stand_in_.emplace(c, stand_in);
    }
  }

  static std::size_t utf8_bytes(char32_t c) noexcept { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

  std::vector<std::uint64_t> newer_;                 ///< a bit per code point: utf8proc assigns it, PCRE2 not
  std::unordered_map<char32_t, char32_t> stand_in_;  ///< of each such character that has one
};

/// `text` with every character PCRE2 does not know replaced by its stand-in (the same number of bytes, so that
/// offsets are the text's); empty when there is none.
std::string with_stand_ins(std::string_view text) {
  const StandIns& stand_ins = StandIns::get();
  if (!stand_ins.any()) return {};
  std::string out;
  for (std::size_t at = 0; at < text.size();) {
    if (static_cast<unsigned char>(text[at]) < 0x80U) {
      ++at;
      continue;
    }
    const std::size_t start = at;
    const char32_t c = next_code_point(text, at);
    const char32_t stand_in = stand_ins.of(c);
    if (stand_in == 0) continue;
    if (out.empty()) out.assign(text);
    std::string bytes;
    append_utf8(bytes, stand_in);
    out.replace(start, bytes.size(), bytes);
  }
  return out;
}

}  // namespace

Regex::Regex(std::string_view pattern) {
  // The pattern as written first, so that an error's offset is the user's; then as it runs.
  pcre2_code_free(compile(pattern));
  auto owned = std::make_shared<Code>(compile(with_white_space(pattern)));
  owned->jit = pcre2_jit_compile(owned->code, PCRE2_JIT_COMPLETE) == 0;
  code_ = std::move(owned);
}

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(std::string_view text) const {
  thread_local MatchData match;
  std::vector<std::pair<std::size_t, std::size_t>> found;
  std::size_t at = 0;
  // Characters newer than PCRE2's Unicode are matched as stand-ins of their category (StandIns); the matches'
  // offsets are the text's, as each stand-in has its character's length.
  const std::string substituted = with_stand_ins(text);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(substituted.empty() ? text.data() : substituted.data());
  while (at <= text.size()) {
    // The text was checked to be UTF-8 once, when encoding began.
    const int rc = code_->jit
                       ? pcre2_jit_match(code_->code, subject, text.size(), at, 0, match.data, nullptr)
                       : pcre2_match(code_->code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, match.data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof message);
      throw RegexError("PCRE2 gave up matching at byte " + std::to_string(at) + ": " +
                       reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
    const std::size_t start = ovector[0];
    const std::size_t end = ovector[1];
    if (end > start) {
      found.emplace_back(start, end);
      at = end;
    } else {  // empty: nothing to keep; go on after the next character
      if (start >= text.size()) break;
      at = start + utf8_length(static_cast<unsigned char>(text[start]));
    }
  }
  return found;
}

}  // namespace lazygraph::nn::tokenizer
