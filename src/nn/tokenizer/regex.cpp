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

/// Match data for one thread, grown to the largest pattern it served (PCRE2 match data is not shareable).
struct MatchData {
  pcre2_match_data* data = nullptr;
  MatchData() : data(pcre2_match_data_create(16, nullptr)) {}
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
  ~MatchData() { pcre2_match_data_free(data); }
};

}  // namespace

Regex::Regex(std::string_view pattern) {
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
  auto owned = std::make_shared<Code>(code);
  owned->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
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
      throw std::runtime_error(std::string("PCRE2 failed to match: ") + reinterpret_cast<const char*>(message));
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
