#include "lexer.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdlib>

#include "../utf8.hpp"
#include "value.hpp"

namespace lazygraph::nn::jinja {

SourceMap::SourceMap(std::string_view source) {
  line_starts_.push_back(0);
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\n') line_starts_.push_back(i + 1);
  }
}

Place SourceMap::place(std::size_t offset) const {
  const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  const auto line = static_cast<std::size_t>(it - line_starts_.begin());
  return {line, offset - line_starts_[line - 1] + 1};
}

std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

namespace {

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

/// Whether `text`, which holds no newline, is whitespace only (Python's \s) and not empty.
bool all_space(std::string_view text) {
  if (text.empty()) return false;
  for (std::size_t i = 0; i < text.size();) {
    const auto [cp, length] = decode_utf8(text, i);
    if (!is_py_space(cp)) return false;
    i += length;
  }
  return true;
}

class Lexer {
 public:
  Lexer(std::string_view source, const SourceMap& map) : s_(source), map_(map) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < s_.size()) {
      const std::size_t tag = find_tag(pos_);
      std::string_view text = s_.substr(pos_, tag - pos_);
      if (tag == s_.size()) {
        push_text(text, pos_);
        break;
      }
      const char kind = s_[tag + 1];
      const char sign = tag + 2 < s_.size() ? s_[tag + 2] : '\0';
      if (sign == '-') {
        text = py_strip(text, false, true);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks: not for {{
        const std::size_t newline = text.rfind('\n');
        const std::size_t line = newline == std::string_view::npos ? 0 : newline + 1;
        if ((line > 0 || line_starting) && all_space(text.substr(line))) text = text.substr(0, line);
      }
      push_text(text, pos_);
      pos_ = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        line_starting = comment(tag);
      } else {
        line_starting = tag_body(tag, kind == '{');
      }
    }
    push(Token::Kind::end, "", s_.size());
    return std::move(tokens_);
  }

 private:
  /// The offset of the next "{{", "{%" or "{#" from `from`, or the source's size.
  [[nodiscard]] std::size_t find_tag(std::size_t from) const {
    for (std::size_t i = s_.find('{', from); i != std::string_view::npos; i = s_.find('{', i + 1)) {
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return s_.size();
  }

  [[noreturn]] void fail(std::size_t offset, const std::string& problem) const {
    throw JinjaError(map_.place(offset), problem);
  }

  void push(Token::Kind kind, std::string text, std::size_t offset) {
    Token token;
    token.kind = kind;
    token.text = std::move(text);
    token.offset = offset;
    tokens_.push_back(std::move(token));
  }

  void push_text(std::string_view text, std::size_t offset) {
    if (!text.empty()) push(Token::Kind::text, std::string(text), offset);
  }

  /// After a tag's end: with `strip` all whitespace, with `trim` (trim_blocks) one newline. Returns whether what
  /// it consumed ends with a newline (Jinja's line_starting).
  bool after_end(bool strip, bool trim) {
    bool newline = false;
    if (strip) {
      const std::string_view rest = s_.substr(pos_);
      const std::size_t skipped = rest.size() - py_strip(rest, true, false).size();
      newline = skipped > 0 && s_[pos_ + skipped - 1] == '\n';
      pos_ += skipped;
    } else if (trim && pos_ < s_.size() && s_[pos_] == '\n') {
      ++pos_;
      newline = true;
    }
    return newline;
  }

  bool comment(std::size_t start) {
    const std::size_t end = s_.find("#}", pos_);
    if (end == std::string_view::npos) fail(start, "the comment opened here is not closed with '#}'");
    const char sign = end > pos_ ? s_[end - 1] : '\0';
    pos_ = end + 2;
    return after_end(sign == '-', sign != '+');
  }

  /// The tokens of a {{ }} or {% %} tag whose opening ends before pos_.
  bool tag_body(std::size_t start, bool variable) {
    push(variable ? Token::Kind::variable_begin : Token::Kind::block_begin, "", start);
    const char close = variable ? '}' : '%';
    std::size_t depth = 0;  // open brackets: an end marker inside them is a closing brace (Jinja's balancing)
    for (;;) {
      while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_])) != 0) ++pos_;
      if (pos_ >= s_.size()) {
        fail(start, variable ? "the '{{' opened here is not closed with '}}'"
                             : "the '{%' opened here is not closed "
                               "with '%}'");
      }
      const std::string_view rest = s_.substr(pos_);
      if (depth == 0) {
        const char sign = rest[0];
        const std::size_t marker = (sign == '-' || sign == '+') ? 1 : 0;
        if (rest.size() >= marker + 2 && rest[marker] == close && rest[marker + 1] == '}' &&
            !(variable && sign == '+')) {
          push(variable ? Token::Kind::variable_end : Token::Kind::block_end, "", pos_);
          pos_ += marker + 2;
          return after_end(sign == '-', !variable && sign != '+');
        }
      }
      const char c = rest[0];
      if (is_name_start(c)) {
        std::size_t n = 1;
        while (n < rest.size() && is_name_char(rest[n])) ++n;
        push(Token::Kind::name, std::string(rest.substr(0, n)), pos_);
        pos_ += n;
      } else if (is_digit(c)) {
        number();
      } else if (c == '\'' || c == '"') {
        string_literal(c);
      } else {
        static constexpr std::array<std::string_view, 24> kOps = {"//", "**", "==", "!=", "<=", ">=", "+", "-",
                                                                  "*",  "/",  "%",  "~",  "<",  ">",  "=", "(",
                                                                  ")",  "[",  "]",  "{",  "}",  ",",  ".", ":"};
        std::string_view op;
        for (const std::string_view candidate : kOps) {
          if (rest.substr(0, candidate.size()) == candidate) {
            op = candidate;
            break;
          }
        }
        if (op.empty() && c == '|') op = "|";
        if (op.empty()) {
          fail(pos_,
               "unexpected character '" + std::string(rest.substr(0, decode_utf8(rest, 0).second)) + "' inside a tag");
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        push(Token::Kind::op, std::string(op), pos_);
        pos_ += op.size();
      }
    }
  }

  /// Digits with optional underscores, as Jinja's integer and float rules read them.
  std::string digits() {
    std::string out;
    while (pos_ < s_.size() && (is_digit(s_[pos_]) ||
                                (s_[pos_] == '_' && pos_ + 1 < s_.size() && is_digit(s_[pos_ + 1]) && !out.empty()))) {
      if (s_[pos_] != '_') out += s_[pos_];
      ++pos_;
    }
    return out;
  }

  void number() {
    const std::size_t start = pos_;
    const bool after_dot = start > 0 && s_[start - 1] == '.';  // foo.0.1: attributes 0 and 1, not a float
    std::string text = digits();
    bool is_float = false;
    if (!after_dot && pos_ + 1 < s_.size() && s_[pos_] == '.' && is_digit(s_[pos_ + 1])) {
      ++pos_;
      text += "." + digits();
      is_float = true;
    }
    if (!after_dot && pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      std::size_t p = pos_ + 1;
      if (p < s_.size() && (s_[p] == '+' || s_[p] == '-')) ++p;
      if (p < s_.size() && is_digit(s_[p])) {
        text += "e" + std::string(s_.substr(pos_ + 1, p - pos_ - 1));
        pos_ = p;
        text += digits();
        is_float = true;
      }
    }
    Token token;
    token.offset = start;
    token.text = text;
    if (is_float) {
      token.kind = Token::Kind::floating;
      token.floating = std::strtod(text.c_str(), nullptr);
    } else {
      token.kind = Token::Kind::integer;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), token.integer);
      if (error != std::errc{} || end != text.data() + text.size())
        fail(start, "the integer " + text + " is too large");
    }
    tokens_.push_back(std::move(token));
  }

  /// A string literal with Python's escapes (\n, \t, \\, \', \", \xNN, \uNNNN, \UNNNNNNNN, octal; an unknown
  /// escape stays as written).
  void string_literal(char quote) {
    const std::size_t start = pos_;
    std::string value;
    ++pos_;
    for (;;) {
      if (pos_ >= s_.size()) fail(start, "the string opened here is not closed");
      const char c = s_[pos_];
      if (c == quote) {
        ++pos_;
        break;
      }
      if (c != '\\') {
        value += c;
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= s_.size()) fail(start, "the string opened here is not closed");
      const char e = s_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case '\n':
          break;  // a backslash before a newline joins the lines
        case 'x':
        case 'u':
        case 'U': {
          const std::size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          std::uint32_t cp = 0;
          const auto [end, error] = pos_ + n <= s_.size()
                                        ? std::from_chars(s_.data() + pos_, s_.data() + pos_ + n, cp, 16)
                                        : std::from_chars_result{nullptr, std::errc::invalid_argument};
          if (error != std::errc{} || end != s_.data() + pos_ + n || cp > 0x10ffffU) {
            fail(pos_ - 2, std::string("the escape \\") + e + " needs " + std::to_string(n) + " hex digits");
          }
          append_utf8(value, cp);
          pos_ += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            std::uint32_t cp = static_cast<std::uint32_t>(e - '0');
            for (int k = 0; k < 2 && pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '7'; ++k) {
              cp = cp * 8 + static_cast<std::uint32_t>(s_[pos_++] - '0');
            }
            append_utf8(value, cp);
          } else {
            value += '\\';
            value += e;
          }
      }
    }
    push(Token::Kind::string, std::move(value), start);
  }

  std::string_view s_;
  const SourceMap& map_;
  std::size_t pos_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const SourceMap& map) { return Lexer(source, map).run(); }

}  // namespace lazygraph::nn::jinja
