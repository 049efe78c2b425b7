#include "lazygraph/kernels/kernel_declaration.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <utility>

#include "lazygraph/driver/error.hpp"

namespace lazygraph {

namespace {

// ---- Tokens: just enough C++ lexing to find declarations. ----

enum class TokenKind { identifier, literal, punctuation };

struct Token {
  TokenKind kind;
  std::string_view text;
  int line;
};

bool is_identifier_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_'; }
bool is_identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

/// The line number a `#line N` (or `# N "file"`) directive gives the line after it; nullopt for other directives.
std::optional<int> line_directive(std::string_view directive) {
  const auto skip_blanks = [&] {
    while (!directive.empty() && (directive.front() == ' ' || directive.front() == '\t')) directive.remove_prefix(1);
  };
  directive.remove_prefix(1);  // '#'
  skip_blanks();
  if (directive.starts_with("line")) {
    directive.remove_prefix(4);
    skip_blanks();
  }
  int number = 0;
  std::size_t digits = 0;
  for (; digits < directive.size() && std::isdigit(static_cast<unsigned char>(directive[digits])) != 0; ++digits) {
    if (number > 100'000'000) return std::nullopt;
    number = number * 10 + (directive[digits] - '0');
  }
  if (digits == 0 || (digits < directive.size() && !std::isspace(static_cast<unsigned char>(directive[digits])))) {
    return std::nullopt;
  }
  return number;
}

/// Splits `text` into identifiers, literals and punctuation (`::` is one token), dropping whitespace, comments
/// and preprocessor lines (with their backslash continuations). A `#line` directive numbers the lines after it.
std::vector<Token> tokenize(std::string_view text) {
  std::vector<Token> tokens;
  std::size_t i = 0;
  int line = 1;
  bool line_start = true;  // only whitespace (or comments) so far on this line
  const std::size_t n = text.size();
  const auto count_lines = [&](std::size_t from, std::size_t to) {
    line += static_cast<int>(std::count(text.begin() + static_cast<std::ptrdiff_t>(from),
                                        text.begin() + static_cast<std::ptrdiff_t>(to), '\n'));
  };
  while (i < n) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = true;
      ++i;
    } else if (std::isspace(static_cast<unsigned char>(c)) != 0) {
      ++i;
    } else if (c == '/' && i + 1 < n && text[i + 1] == '/') {
      while (i < n && text[i] != '\n') ++i;
    } else if (c == '/' && i + 1 < n && text[i + 1] == '*') {
      const std::size_t end = text.find("*/", i + 2);
      const std::size_t stop = end == std::string_view::npos ? n : end + 2;
      count_lines(i, stop);
      i = stop;
    } else if (c == '#' && line_start) {
      const std::size_t start = i;
      while (i < n && text[i] != '\n') {
        if (text[i] == '\\' && i + 1 < n && text[i + 1] == '\n') {
          ++line;
          ++i;
        }
        ++i;
      }
      if (const std::optional<int> next = line_directive(text.substr(start, i - start))) line = *next - 1;
    } else if (c == '"' || c == '\'') {
      const std::size_t start = i++;
      while (i < n && text[i] != c && text[i] != '\n') i += text[i] == '\\' ? 2 : 1;
      i = std::min(i + 1, n);
      tokens.push_back({TokenKind::literal, text.substr(start, i - start), line});
      line_start = false;
    } else if (is_identifier_start(c)) {
      const std::size_t start = i;
      while (i < n && is_identifier_char(text[i])) ++i;
      tokens.push_back({TokenKind::identifier, text.substr(start, i - start), line});
      line_start = false;
    } else if (std::isdigit(static_cast<unsigned char>(c)) != 0) {
      const std::size_t start = i;  // a pp-number, digit separators included
      while (i < n && (is_identifier_char(text[i]) || text[i] == '.' || text[i] == '\'')) ++i;
      tokens.push_back({TokenKind::literal, text.substr(start, i - start), line});
      line_start = false;
    } else {
      const std::size_t len = (c == ':' && i + 1 < n && text[i + 1] == ':') ? 2 : 1;
      tokens.push_back({TokenKind::punctuation, text.substr(i, len), line});
      i += len;
      line_start = false;
    }
  }
  return tokens;
}

bool is(const std::vector<Token>& t, std::size_t i, std::string_view text) { return i < t.size() && t[i].text == text; }

/// The index just past the bracket that closes the one at `open`, or t.size() when it is never closed.
std::size_t skip_balanced(const std::vector<Token>& t, std::size_t open) {
  const std::string_view o = t[open].text;
  const std::string_view c = o == "(" ? ")" : o == "[" ? "]" : o == "{" ? "}" : ">";
  int depth = 0;
  for (std::size_t i = open; i < t.size(); ++i) {
    if (t[i].text == o) ++depth;
    if (t[i].text == c && --depth == 0) return i + 1;
  }
  return t.size();
}

/// Specifiers and attributes that may stand between `__global__` and the kernel's name; those taking
/// arguments are followed by a parenthesised list.
constexpr std::array<std::string_view, 12> declaration_attributes = {
    "__launch_bounds__", "__cluster_dims__", "__maxnreg__", "__attribute__", "__declspec", "alignas",
    "__noinline__",      "__forceinline__",  "inline",      "static",        "__host__",   "__device__"};

std::size_t skip_attributes(const std::vector<Token>& t, std::size_t i) {
  while (i < t.size()) {
    if (std::find(declaration_attributes.begin(), declaration_attributes.end(), t[i].text) !=
        declaration_attributes.end()) {
      ++i;
      if (is(t, i, "(")) i = skip_balanced(t, i);
    } else if (is(t, i, "[") && is(t, i + 1, "[")) {
      i = skip_balanced(t, i);
    } else {
      return i;
    }
  }
  return i;
}

// ---- Parameter types. ----

constexpr std::array<std::string_view, 10> builtin_words = {"signed", "unsigned", "short", "long",   "int",
                                                            "char",   "bool",     "float", "double", "void"};
constexpr std::array<std::string_view, 8> ignored_words = {"const",  "volatile", "__restrict__", "__restrict",
                                                           "struct", "class",    "enum",         "__grid_constant__"};

bool is_builtin_word(std::string_view w) {
  return std::find(builtin_words.begin(), builtin_words.end(), w) != builtin_words.end();
}

/// Typedefs spelled as the LP64 builtin they stand for (host and NVRTC agree on LP64 Linux), and the half
/// and bfloat16 types as the device spellings of the host's lazygraph::half and lazygraph::bfloat16.
std::string_view alias_of(std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 18> aliases = {{
      {"size_t", "unsigned long"},
      {"ptrdiff_t", "long"},
      {"intptr_t", "long"},
      {"uintptr_t", "unsigned long"},
      {"int8_t", "signed char"},
      {"uint8_t", "unsigned char"},
      {"int16_t", "short"},
      {"uint16_t", "unsigned short"},
      {"int32_t", "int"},
      {"uint32_t", "unsigned int"},
      {"int64_t", "long"},
      {"uint64_t", "unsigned long"},
      {"half_t", "half_t"},
      {"half", "half_t"},
      {"__half", "half_t"},
      {"bf16_t", "bf16_t"},
      {"__nv_bfloat16", "bf16_t"},
      {"nv_bfloat16", "bf16_t"},
  }};
  for (const auto& [from, to] : aliases) {
    if (from == name) return to;
  }
  return name;
}

/// The builtin named by a multiset of type keywords ("unsigned long long int" -> "unsigned long long"), or
/// nothing for a combination that names no type.
std::optional<std::string> builtin_type(const std::vector<std::string>& words) {
  const auto count = [&](std::string_view w) { return std::count(words.begin(), words.end(), w); };
  const auto is_signed = count("signed");
  const auto is_unsigned = count("unsigned");
  const auto longs = count("long");
  const auto shorts = count("short");
  const auto ints = count("int");
  const auto chars = count("char");
  const auto others = count("bool") + count("float") + count("double") + count("void");
  const bool long_double = longs == 1 && count("double") == 1;
  const auto kinds = shorts + (longs > 0 ? 1 : 0) + chars + others - (long_double ? 1 : 0);
  if (is_signed + is_unsigned > 1 || ints > 1 || longs > 2 || kinds > 1) return std::nullopt;
  if (others > 0) {
    if (is_signed + is_unsigned + ints + shorts + (long_double ? 0 : longs) > 0) return std::nullopt;
    if (long_double) return "long double";
    for (const std::string_view w : {"bool", "float", "double", "void"}) {
      if (count(w) > 0) return std::string(w);
    }
  }
  if (chars > 0) {
    if (ints > 0) return std::nullopt;
    return is_unsigned > 0 ? "unsigned char" : is_signed > 0 ? "signed char" : "char";
  }
  const std::string sign = is_unsigned > 0 ? "unsigned " : "";
  if (shorts > 0) return sign + "short";
  if (longs == 2) return sign + "long long";
  if (longs == 1) return sign + "long";
  return sign + "int";
}

[[noreturn]] void unreadable(std::string_view parameter, std::string_view why) {
  while (!parameter.empty() && std::isspace(static_cast<unsigned char>(parameter.back())) != 0) {
    parameter.remove_suffix(1);
  }
  throw UsageError("cannot read the kernel parameter `" + std::string(parameter) + "`: " + std::string(why));
}

}  // namespace

std::string canonical_parameter_type(std::string_view parameter) {
  std::vector<Token> tokens = tokenize(parameter);
  // A default argument does not change the type.
  if (auto eq = std::find_if(tokens.begin(), tokens.end(), [](const Token& t) { return t.text == "="; });
      eq != tokens.end()) {
    tokens.erase(eq, tokens.end());
  }
  // Split at '*' into levels: level 0 holds the specifiers, level k the qualifiers of the k-th pointer (and,
  // in the last level, the name). Each word is an identifier, possibly qualified ("lg::half_t").
  std::vector<std::vector<std::string>> levels(1);
  std::vector<bool> level_const(1, false);
  bool joining = false;     // the previous token was "::": the next identifier continues the word
  bool after_name = false;  // the previous token was an identifier that a "::" may continue
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const Token& t = tokens[i];
    const bool was_after_name = std::exchange(after_name, false);
    if (t.text == "*") {
      levels.emplace_back();
      level_const.push_back(false);
      joining = false;
    } else if (t.text == "::") {
      if (!was_after_name) levels.back().emplace_back();  // a leading "::"
      levels.back().back().append("::");
      joining = true;
    } else if (t.text == "<") {
      const std::size_t end = skip_balanced(tokens, i);
      std::string args;
      for (std::size_t j = i; j < end; ++j) {
        args.append(tokens[j].text);
        if (tokens[j].text == ",") args.push_back(' ');
      }
      if (levels.back().empty()) unreadable(parameter, "a template argument list without a template name");
      levels.back().back().append(args);
      i = end - 1;
      joining = false;
    } else if (t.text == "&") {
      unreadable(parameter, "reference parameters are not supported; pass a pointer or a value");
    } else if (t.text == "[") {
      unreadable(parameter, "array parameters are not supported; declare a pointer");
    } else if (t.text == "(" || t.text == ")" || t.text == "." || t.text == ",") {
      unreadable(parameter, "function pointers and variadic parameters are not supported");
    } else if (t.kind != TokenKind::identifier) {
      unreadable(parameter, "unexpected `" + std::string(t.text) + "`");
    } else if (t.text == "const") {
      level_const.back() = true;
    } else if (std::find(ignored_words.begin(), ignored_words.end(), t.text) != ignored_words.end() ||
               t.text == "typename") {
      joining = false;
    } else if (joining) {
      levels.back().back().append(t.text);
      joining = false;
      after_name = true;
    } else {
      levels.back().emplace_back(t.text);
      after_name = true;
    }
  }

  // The name, when present, is the last word of the last level, after a complete type.
  std::vector<std::string>& last = levels.back();
  if (levels.size() > 1) {
    if (last.size() > 1) unreadable(parameter, "more than one name after the last '*'");
    if (!last.empty() && is_builtin_word(last.front())) unreadable(parameter, "a type keyword after a '*'");
  } else if (last.size() >= 2 && !is_builtin_word(last.back())) {
    last.pop_back();
  }

  // The base type: builtin keywords, or one (possibly qualified) name.
  const std::vector<std::string>& spec = levels.front();
  if (spec.empty()) unreadable(parameter, "no type");
  std::string base;
  if (std::all_of(spec.begin(), spec.end(), [](const std::string& w) { return is_builtin_word(w); })) {
    const std::optional<std::string> builtin = builtin_type(spec);
    if (!builtin) unreadable(parameter, "not a builtin type");
    base = *builtin;
  } else {
    if (spec.size() != 1) unreadable(parameter, "a type name mixed with other words");
    std::string_view name = spec.front();
    const std::string_view head = name.substr(0, name.find('<'));
    if (const auto colons = head.rfind("::"); colons != std::string_view::npos) name.remove_prefix(colons + 2);
    if (name.empty()) unreadable(parameter, "no type");
    base = std::string(alias_of(name));
  }

  // Pointers: west const for the innermost pointee ("const float*"), east const beyond ("const float* const*").
  std::string type = (levels.size() > 1 && level_const[0] ? "const " : "") + base;
  for (std::size_t k = 1; k < levels.size(); ++k) {
    type += k >= 2 && level_const[k - 1] ? " const*" : "*";
  }
  return type;
}

namespace {

/// The declaration whose name is token k (its parameter list follows), its parameters read canonically.
KernelDeclaration read_declaration(const std::vector<Token>& t, std::size_t k, std::string_view file,
                                   std::size_t& close) {
  KernelDeclaration d;
  d.name = std::string(t[k].text);
  d.file = std::string(file);
  d.line = t[k].line;
  const std::size_t open = k + 1;
  close = skip_balanced(t, open);  // just past ')'
  // Split at commas outside nested brackets; each parameter is its source text (tokens re-joined by spaces,
  // which the canonical spelling ignores).
  std::vector<std::string> parameters(1);
  int nested = 0;
  for (std::size_t j = open + 1; j + 1 < close; ++j) {
    const std::string_view s = t[j].text;
    if (s == "(" || s == "[" || s == "{" || s == "<") ++nested;
    if (s == ")" || s == "]" || s == "}" || s == ">") --nested;
    if (s == "," && nested == 0) {
      parameters.emplace_back();
      continue;
    }
    parameters.back().append(s).push_back(' ');
  }
  if (parameters.size() == 1 && (parameters[0].empty() || parameters[0] == "void ")) parameters.clear();
  for (std::size_t p = 0; p < parameters.size(); ++p) {
    try {
      d.parameter_types.push_back(canonical_parameter_type(parameters[p]));
    } catch (const UsageError& e) {
      d.problem = "parameter " + std::to_string(p) + ": " + e.what();
      break;
    }
  }
  return d;
}

}  // namespace

std::vector<KernelDeclaration> parse_kernel_declarations(std::string_view text, std::string_view file) {
  const std::vector<Token> t = tokenize(text);
  std::vector<KernelDeclaration> found;
  std::vector<int> extern_c_blocks;                      // brace depths inside which `extern "C" {` holds
  std::size_t extern_c_global = std::string_view::npos;  // the `__global__` an `extern "C"` just introduced
  std::size_t extern_c_from = 0;                         // the attributes after an `extern "C"`: [from, to)
  std::size_t extern_c_to = 0;
  int depth = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i].text == "{") {
      ++depth;
      continue;
    }
    if (t[i].text == "}") {
      if (!extern_c_blocks.empty() && extern_c_blocks.back() == depth) extern_c_blocks.pop_back();
      --depth;
      continue;
    }
    if (t[i].text == "extern" && is(t, i + 1, "\"C\"")) {
      if (is(t, i + 2, "{")) {
        extern_c_blocks.push_back(++depth);
        i += 2;
      } else if (const std::size_t k = skip_attributes(t, i + 2); is(t, k, "__global__")) {
        extern_c_global = k;  // attributes may stand between the two
      } else {
        extern_c_from = i + 2;  // `extern "C" __device__ ...`: a tile function, perhaps
        extern_c_to = k;
      }
      continue;
    }
    const bool in_extern_c_block = !extern_c_blocks.empty() && extern_c_blocks.back() == depth;
    if (t[i].text == "__device__" && (in_extern_c_block || (i >= extern_c_from && i < extern_c_to))) {
      // A tile function: `extern "C" __device__ void NAME(lg::Tile tile, ...)` (kernels/include/lazygraph/tile.cuh).
      std::size_t k = i + 1;
      while (k < t.size() && (is(t, k, "__device__") || is(t, k, "__forceinline__") || is(t, k, "__noinline__") ||
                              is(t, k, "inline") || is(t, k, "static"))) {
        ++k;
      }
      if (!is(t, k, "void") || k + 2 >= t.size() || t[k + 1].kind != TokenKind::identifier || !is(t, k + 2, "(")) {
        continue;
      }
      std::size_t close = 0;
      KernelDeclaration d = read_declaration(t, k + 1, file, close);
      i = close - 1;
      if (!d.problem.empty() || d.parameter_types.empty() || d.parameter_types.front() != "Tile") continue;
      d.parameter_types.erase(d.parameter_types.begin());
      d.tile = true;
      found.push_back(std::move(d));
      continue;
    }
    if (t[i].text != "__global__") continue;
    const bool after_extern_c = i == extern_c_global;
    if (!after_extern_c && !in_extern_c_block) continue;

    std::size_t k = skip_attributes(t, i + 1);
    if (!is(t, k, "void")) continue;  // not a kernel this reader understands; lookup reports it
    k = skip_attributes(t, k + 1);
    if (k >= t.size() || t[k].kind != TokenKind::identifier || !is(t, k + 1, "(")) continue;

    std::size_t close = 0;
    found.push_back(read_declaration(t, k, file, close));
    i = close - 1;
  }
  return found;
}

void check_kernel_signature(const KernelDeclaration& declared, std::span<const std::string> signature_types,
                            std::string_view signature) {
  const std::string where =
      "kernel " + declared.name + " (" + declared.file + ":" + std::to_string(declared.line) + ")";
  if (!declared.problem.empty()) {
    throw UsageError(where + ": its declaration cannot be checked, " + declared.problem + "; " +
                     std::string(kernel_declaration_rule));
  }
  const auto list = [](std::span<const std::string> types) {
    std::string s = "(";
    for (std::size_t i = 0; i < types.size(); ++i) s += (i > 0 ? ", " : "") + types[i];
    return s + ")";
  };
  if (signature_types.size() != declared.parameter_types.size()) {
    throw UsageError(where + ": the signature " + std::string(signature) + " has " +
                     std::to_string(signature_types.size()) + " parameters, but " + declared.file + " declares " +
                     std::to_string(declared.parameter_types.size()) + ": " + list(declared.parameter_types) +
                     "; make the Kernel signature list the declared parameter types in order");
  }
  for (std::size_t i = 0; i < signature_types.size(); ++i) {
    if (signature_types[i] != declared.parameter_types[i]) {
      throw UsageError(where + ": parameter " + std::to_string(i) + " is declared `" + declared.parameter_types[i] +
                       "` in " + declared.file + ", but the signature " + std::string(signature) + " has `" +
                       signature_types[i] + "`; write `" + declared.parameter_types[i] +
                       "` there (a pointer the kernel declares const is read-only, one it declares non-const is "
                       "written), or change the kernel's declaration");
    }
  }
}

KernelDeclarations::KernelDeclarations(std::span<const KernelSource> sources) {
  for (const KernelSource& source : sources) {
    for (KernelDeclaration& d : parse_kernel_declarations(source.text, source.name)) {
      std::string name = d.name;
      by_name_.try_emplace(std::move(name), std::move(d));
    }
  }
}

const KernelDeclaration* KernelDeclarations::find(std::string_view kernel) const {
  const auto it = by_name_.find(kernel);
  return it == by_name_.end() ? nullptr : &it->second;
}

const KernelDeclaration& KernelDeclarations::require(std::string_view kernel, std::string_view where) const {
  if (const KernelDeclaration* d = find(kernel)) return *d;
  throw UsageError("kernel " + std::string(kernel) + " (in " + std::string(where) +
                   "): no declaration of it was found to check its parameter types against; " +
                   std::string(kernel_declaration_rule));
}

}  // namespace lazygraph
