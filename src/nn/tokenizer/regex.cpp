#define PCRE2_CODE_UNIT_WIDTH 8
#include "regex.hpp"

#include <pcre2.h>

#include <stdexcept>

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
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
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
