#include "parser.hpp"

#include <set>
#include <utility>
#include <vector>

#include "builtins.hpp"
#include "error.hpp"
#include "lexer.hpp"

namespace lazygraph::nn::jinja {

namespace {

/// A call the template makes, checked once the whole template (and so every macro) is known.
struct CallSite {
  std::string name;
  std::size_t offset;
};

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const SourceMap& map) : t_(tokens), map_(map) {}

  Body run() {
    Body body = parse_body({});
    for (const CallSite& call : calls_) {
      if (!is_global_function(call.name) && macros_.count(call.name) == 0) {
        fail(call.offset, "the function '" + call.name + "' is not supported (only macros of the template and " +
                              "raise_exception, strftime_now, namespace, range and dict can be called)");
      }
    }
    return body;
  }

 private:
  // ---- tokens
  [[nodiscard]] const Token& peek(std::size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token& next() {
    const Token& token = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return token;
  }
  [[nodiscard]] bool at_op(std::string_view op, std::size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::op && peek(ahead).text == op;
  }
  [[nodiscard]] bool at_name(std::string_view name, std::size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::name && peek(ahead).text == name;
  }
  bool skip_op(std::string_view op) {
    if (!at_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(std::size_t offset, const std::string& problem) const {
    throw JinjaError(map_.place(offset), problem);
  }
  [[nodiscard]] static std::string describe(const Token& token) {
    switch (token.kind) {
      case Token::Kind::end:
        return "the end of the template";
      case Token::Kind::block_end:
        return "'%}'";
      case Token::Kind::variable_end:
        return "'}}'";
      case Token::Kind::string:
        return "a string";
      case Token::Kind::integer:
      case Token::Kind::floating:
        return "the number " + token.text;
      default:
        return "'" + token.text + "'";
    }
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail(peek().offset, "expected '" + std::string(op) + "', found " + describe(peek()));
  }
  std::string expect_name(std::string_view what) {
    if (peek().kind != Token::Kind::name)
      fail(peek().offset, "expected " + std::string(what) + ", found " + describe(peek()));
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != Token::Kind::block_end) fail(peek().offset, "expected '%}', found " + describe(peek()));
    next();
  }

  /// Counts one level of nesting while alive.
  class Depth {
   public:
    Depth(Parser& p, std::size_t offset) : p_(p) {
      if (++p_.depth_ > kMaxNesting) {
        p_.fail(offset, "the template nests deeper than " + std::to_string(kMaxNesting) + " levels");
      }
    }
    Depth(const Depth&) = delete;
    Depth& operator=(const Depth&) = delete;
    ~Depth() { --p_.depth_; }

   private:
    Parser& p_;
  };

  // ---- statements
  /// Statements until a block tag named in `ends` (left unread: the parser stands on its name) or the end of the
  /// template (an error when `ends` is not empty).
  Body parse_body(const std::set<std::string>& ends) {
    Body body;
    for (;;) {
      const Token& token = peek();
      if (token.kind == Token::Kind::end) {
        if (!ends.empty()) {
          std::string end = "end" + opened_.back().first;
          fail(opened_.back().second,
               "the '" + opened_.back().first + "' block opened here is not closed: expected '{% " + end + " %}'");
        }
        return body;
      }
      if (token.kind == Token::Kind::text) {
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::text;
        node->offset = token.offset;
        node->text = next().text;
        body.push_back(std::move(node));
      } else if (token.kind == Token::Kind::variable_begin) {
        next();
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::output;
        node->offset = token.offset;
        node->expr = parse_expression();
        if (peek().kind != Token::Kind::variable_end) fail(peek().offset, "expected '}}', found " + describe(peek()));
        next();
        body.push_back(std::move(node));
      } else if (token.kind == Token::Kind::block_begin) {
        const std::size_t start = token.offset;
        next();
        if (peek().kind != Token::Kind::name) fail(peek().offset, "expected a tag name, found " + describe(peek()));
        const std::string& name = peek().text;
        if (ends.count(name) != 0) return body;
        body.push_back(parse_statement(start));
      } else {
        fail(token.offset, "unexpected " + describe(token));
      }
    }
  }

  std::unique_ptr<Node> parse_statement(std::size_t start) {
    const Depth depth(*this, start);
    const Token& tag = next();
    const std::string name = tag.text;
    auto node = std::make_unique<Node>();
    node->offset = start;
    if (name == "for") return parse_for(std::move(node));
    if (name == "if") return parse_if(std::move(node));
    if (name == "set") return parse_set(std::move(node));
    if (name == "macro") return parse_macro(std::move(node));
    if (name == "break" || name == "continue") {
      if (loops_ == 0) fail(tag.offset, "'" + name + "' is outside a for loop");
      node->kind = name == "break" ? Node::Kind::break_loop : Node::Kind::continue_loop;
      expect_block_end();
      return node;
    }
    if (name == "generation") {  // transformers' AssistantTracker: renders its body in place
      expect_block_end();
      node->kind = Node::Kind::scope;
      node->body = parse_closed("generation", {"endgeneration"}, node->offset);
      next();
      expect_block_end();
      return node;
    }
    static const std::set<std::string> kEnds = {"endfor", "endif",    "elif",         "else",
                                                "endset", "endmacro", "endgeneration"};
    if (kEnds.count(name) != 0) fail(tag.offset, "unexpected '{% " + name + " %}': no block here to end or continue");
    fail(start, "the '" + name + "' tag is not supported by lazygraph's chat template engine");
  }

  /// The body of a block named `what` up to one of `ends`, remembering where it opened for the error.
  Body parse_closed(const std::string& what, const std::set<std::string>& ends, std::size_t offset) {
    opened_.emplace_back(what, offset);
    Body body = parse_body(ends);
    opened_.pop_back();
    return body;
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> targets;
    const bool parenthesized = skip_op("(");
    do {
      targets.push_back(expect_name("a variable name"));
    } while (skip_op(","));
    if (parenthesized) expect_op(")");
    return targets;
  }

  std::unique_ptr<Node> parse_for(std::unique_ptr<Node> node) {
    node->kind = Node::Kind::for_loop;
    node->targets = parse_targets();
    if (!skip_name("in")) fail(peek().offset, "expected 'in' in the for tag, found " + describe(peek()));
    node->expr = parse_tuple(false);
    if (skip_name("if")) node->filter = parse_expression();
    if (at_name("recursive")) fail(peek().offset, "recursive loops are not supported");
    expect_block_end();
    ++loops_;
    node->body = parse_closed("for", {"endfor", "else"}, node->offset);
    --loops_;
    if (next().text == "else") {
      expect_block_end();
      node->else_body = parse_closed("for", {"endfor"}, node->offset);
      next();
    }
    expect_block_end();
    return node;
  }

  std::unique_ptr<Node> parse_if(std::unique_ptr<Node> node) {
    node->kind = Node::Kind::if_chain;
    for (;;) {
      ExprPtr condition = parse_tuple(true);
      expect_block_end();
      Body body = parse_closed("if", {"elif", "else", "endif"}, node->offset);
      node->branches.emplace_back(std::move(condition), std::move(body));
      const std::string& tag = next().text;
      if (tag == "elif") continue;
      if (tag == "else") {
        expect_block_end();
        node->else_body = parse_closed("if", {"endif"}, node->offset);
        next();
      }
      expect_block_end();
      return node;
    }
  }

  std::unique_ptr<Node> parse_set(std::unique_ptr<Node> node) {
    const std::size_t at = peek().offset;
    std::string first = expect_name("a variable name");
    if (skip_op(".")) {
      node->kind = Node::Kind::set;
      node->targets = {std::move(first)};
      node->attribute = expect_name("an attribute name");
      expect_op("=");
      node->expr = parse_tuple(true);
      expect_block_end();
      return node;
    }
    node->targets = {std::move(first)};
    while (skip_op(",")) node->targets.push_back(expect_name("a variable name"));
    if (skip_op("=")) {
      node->kind = Node::Kind::set;
      node->expr = parse_tuple(true);
      expect_block_end();
      return node;
    }
    if (node->targets.size() != 1) fail(at, "a block set assigns one variable");
    if (at_op("|")) fail(peek().offset, "filters on a block set are not supported");
    expect_block_end();
    node->kind = Node::Kind::set_block;
    node->body = parse_closed("set", {"endset"}, node->offset);
    next();
    expect_block_end();
    return node;
  }

  std::unique_ptr<Node> parse_macro(std::unique_ptr<Node> node) {
    node->kind = Node::Kind::macro;
    node->macro = std::make_unique<MacroNode>();
    node->macro->name = expect_name("the macro's name");
    expect_op("(");
    bool defaults = false;
    while (!skip_op(")")) {
      if (!node->macro->params.empty()) expect_op(",");
      if (skip_op(")")) break;
      std::string param = expect_name("a parameter name");
      ExprPtr fallback;
      if (skip_op("=")) {
        fallback = parse_expression();
        defaults = true;
      } else if (defaults) {
        fail(peek().offset, "a parameter without a default follows one with a default");
      }
      node->macro->params.emplace_back(std::move(param), std::move(fallback));
    }
    expect_block_end();
    macros_.insert(node->macro->name);
    const std::size_t loops = std::exchange(loops_, 0);  // break/continue cannot leave a macro
    node->macro->body = parse_closed("macro", {"endmacro"}, node->offset);
    loops_ = loops;
    next();
    if (peek().kind == Token::Kind::name && peek().text == node->macro->name) next();
    expect_block_end();
    return node;
  }

  // ---- expressions
  ExprPtr make(Expr::Kind kind, std::size_t offset, std::string name = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->offset = offset;
    e->name = std::move(name);
    return e;
  }

  /// An expression, or several separated by commas as a tuple (a list here).
  ExprPtr parse_tuple(bool with_condition) {
    const std::size_t start = peek().offset;
    ExprPtr first = with_condition ? parse_expression() : parse_or();
    if (!at_op(",")) return first;
    auto list = make(Expr::Kind::list, start);
    list->negated = true;  // a tuple
    list->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (peek().kind == Token::Kind::block_end || peek().kind == Token::Kind::variable_end) break;
      list->args.push_back(with_condition ? parse_expression() : parse_or());
    }
    return list;
  }

  ExprPtr parse_expression() {
    const Depth depth(*this, peek().offset);
    ExprPtr value = parse_or();
    while (at_name("if")) {
      const std::size_t at = next().offset;
      auto cond = make(Expr::Kind::condition, at);
      cond->args.push_back(parse_or());
      cond->args.push_back(std::move(value));
      cond->args.push_back(skip_name("else") ? parse_expression() : nullptr);
      value = std::move(cond);
    }
    return value;
  }

  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b, std::size_t offset) {
    auto e = make(Expr::Kind::binary, offset, std::move(op));
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (at_name("or")) {
      const std::size_t at = next().offset;
      left = binary("or", std::move(left), parse_and(), at);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (at_name("and")) {
      const std::size_t at = next().offset;
      left = binary("and", std::move(left), parse_not(), at);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      const Depth depth(*this, peek().offset);
      auto e = make(Expr::Kind::logical_not, next().offset);
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const std::size_t start = peek().offset;
    ExprPtr left = parse_math1();
    ExprPtr chain;  // a < b < c: (a < b) and (b < c), b evaluated twice (it has no side effects)
    for (;;) {
      std::string op;
      if (peek().kind == Token::Kind::op && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                             peek().text == "<=" || peek().text == ">" || peek().text == ">=")) {
        op = next().text;
      } else if (at_name("in")) {
        next();
        op = "in";
      } else if (at_name("not") && at_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      const std::size_t at = peek().offset;
      ExprPtr right = parse_math1();
      ExprPtr left_copy = clone(*right);
      ExprPtr comparison = binary(op, std::move(left), std::move(right), at);
      chain = chain ? binary("and", std::move(chain), std::move(comparison), start) : std::move(comparison);
      left = std::move(left_copy);
    }
    return chain ? std::move(chain) : std::move(left);
  }

  /// A deep copy of `e` (for the middle term of a comparison chain).
  static ExprPtr clone(const Expr& e) {
    auto c = std::make_unique<Expr>();
    c->kind = e.kind;
    c->offset = e.offset;
    c->value = e.value;
    c->name = e.name;
    c->negated = e.negated;
    for (const auto& a : e.args) c->args.push_back(a ? clone(*a) : nullptr);
    for (const auto& [k, v] : e.kwargs) c->kwargs.emplace_back(k, clone(*v));
    return c;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (at_op("+") || at_op("-")) {
      const Token& op = next();
      left = binary(op.text, std::move(left), parse_concat(), op.offset);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (at_op("~")) {
      const std::size_t at = next().offset;
      left = binary("~", std::move(left), parse_math2(), at);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token& op = next();
      left = binary(op.text, std::move(left), parse_pow(), op.offset);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (at_op("**")) {
      const std::size_t at = next().offset;
      left = binary("**", std::move(left), parse_unary(true), at);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    const Depth depth(*this, peek().offset);
    ExprPtr node;
    if (at_op("-") || at_op("+")) {
      const Token& op = next();
      node = make(op.text == "-" ? Expr::Kind::negate : Expr::Kind::plus, op.offset);
      node->args.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filters(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& token = peek();
    switch (token.kind) {
      case Token::Kind::name: {
        next();
        auto e = make(Expr::Kind::literal, token.offset);
        if (token.text == "true" || token.text == "True") {
          e->value = true;
        } else if (token.text == "false" || token.text == "False") {
          e->value = false;
        } else if (token.text == "none" || token.text == "None") {
          e->value = None{};
        } else {
          e->kind = Expr::Kind::name;
          e->name = token.text;
        }
        return e;
      }
      case Token::Kind::string: {
        auto e = make(Expr::Kind::literal, token.offset);
        std::string text;
        while (peek().kind == Token::Kind::string) text += next().text;  // adjacent strings join
        e->value = std::move(text);
        return e;
      }
      case Token::Kind::integer: {
        next();
        auto e = make(Expr::Kind::literal, token.offset);
        e->value = token.integer;
        return e;
      }
      case Token::Kind::floating: {
        next();
        auto e = make(Expr::Kind::literal, token.offset);
        e->value = token.floating;
        return e;
      }
      case Token::Kind::op:
        if (token.text == "(") {
          next();
          if (skip_op(")")) {
            auto empty = make(Expr::Kind::list, token.offset);
            empty->negated = true;  // ()
            return empty;
          }
          ExprPtr inner = parse_tuple(true);
          expect_op(")");
          return inner;
        }
        if (token.text == "[") {
          next();
          auto list = make(Expr::Kind::list, token.offset);
          while (!skip_op("]")) {
            if (!list->args.empty()) {
              expect_op(",");
              if (skip_op("]")) break;
            }
            list->args.push_back(parse_expression());
          }
          return list;
        }
        if (token.text == "{") {
          next();
          auto dict = make(Expr::Kind::dict, token.offset);
          while (!skip_op("}")) {
            if (!dict->args.empty()) {
              expect_op(",");
              if (skip_op("}")) break;
            }
            dict->args.push_back(parse_expression());
            expect_op(":");
            dict->args.push_back(parse_expression());
          }
          return dict;
        }
        break;
      default:
        break;
    }
    fail(token.offset, "expected an expression, found " + describe(token));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    for (;;) {
      if (at_op(".")) {
        const std::size_t at = next().offset;
        if (peek().kind == Token::Kind::integer) {
          auto item = make(Expr::Kind::item, at);
          item->args.push_back(std::move(node));
          auto index = make(Expr::Kind::literal, peek().offset);
          index->value = next().integer;
          item->args.push_back(std::move(index));
          node = std::move(item);
          continue;
        }
        auto attr = make(Expr::Kind::attr, at, expect_name("an attribute name"));
        attr->args.push_back(std::move(node));
        node = std::move(attr);
      } else if (at_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const std::size_t at = next().offset;
    ExprPtr parts[3];
    std::size_t colons = 0;
    for (;;) {
      if (at_op("]")) break;
      if (skip_op(":")) {
        if (++colons > 2) fail(peek().offset, "a slice has at most two ':'");
        continue;
      }
      if (parts[colons]) fail(peek().offset, "expected ':' or ']', found " + describe(peek()));
      parts[colons] = parse_expression();
    }
    expect_op("]");
    if (colons == 0) {
      if (!parts[0]) fail(at, "an empty subscript");
      auto item = make(Expr::Kind::item, at);
      item->args.push_back(std::move(node));
      item->args.push_back(std::move(parts[0]));
      return item;
    }
    auto slice = make(Expr::Kind::slice, at);
    slice->args.push_back(std::move(node));
    for (auto& part : parts) slice->args.push_back(std::move(part));
    return slice;
  }

  /// (args, name=value) after a callee, a filter or a test.
  void parse_arguments(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!skip_op(")")) {
      if (!first) {
        expect_op(",");
        if (skip_op(")")) break;
      }
      first = false;
      if (at_op("*") || at_op("**")) fail(peek().offset, "*args and **kwargs in calls are not supported");
      if (peek().kind == Token::Kind::name && at_op("=", 1)) {
        std::string key = next().text;
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!e.kwargs.empty()) fail(peek().offset, "a positional argument follows a keyword argument");
        e.args.push_back(parse_expression());
      }
    }
  }

  ExprPtr parse_call(ExprPtr callee) {
    const std::size_t at = peek().offset;
    if (callee->kind == Expr::Kind::attr) {
      if (!is_method(callee->name)) {
        fail(callee->offset, "the method '" + callee->name + "' is not supported");
      }
    } else if (callee->kind == Expr::Kind::name) {
      calls_.push_back({callee->name, callee->offset});
    } else {
      fail(at, "only functions, macros and methods can be called");
    }
    auto call = make(Expr::Kind::call, callee->offset);
    call->args.push_back(std::move(callee));
    parse_arguments(*call);
    return call;
  }

  ExprPtr parse_filters(ExprPtr node) {
    for (;;) {
      if (at_op("|")) {
        next();
        const std::size_t at = peek().offset;
        std::string name = expect_name("a filter name");
        while (skip_op(".")) name += "." + expect_name("a filter name");
        if (!is_filter(name)) fail(at, "the filter '" + name + "' is not supported");
        auto filter = make(Expr::Kind::filter, at, std::move(name));
        filter->args.push_back(std::move(node));
        if (at_op("(")) parse_arguments(*filter);
        node = std::move(filter);
      } else if (at_name("is")) {
        next();
        const bool negated = skip_name("not");
        const std::size_t at = peek().offset;
        std::string name;
        // A name (none, true and false are test names here, not literals), or == and !=.
        if (peek().kind == Token::Kind::name || at_op("==") || at_op("!=")) {
          name = next().text;
        } else {
          fail(at, "expected a test name, found " + describe(peek()));
        }
        if (!is_test(name)) fail(at, "the test '" + name + "' is not supported");
        auto test = make(Expr::Kind::test, at, std::move(name));
        test->negated = negated;
        test->args.push_back(std::move(node));
        if (at_op("(")) {
          parse_arguments(*test);
        } else if (starts_test_argument()) {
          test->args.push_back(parse_postfix(parse_primary()));
        }
        node = std::move(test);
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  /// Whether the token after a test's name is its one argument without parentheses (`is divisibleby 3`).
  [[nodiscard]] bool starts_test_argument() const {
    const Token& token = peek();
    if (token.kind == Token::Kind::string || token.kind == Token::Kind::integer ||
        token.kind == Token::Kind::floating) {
      return true;
    }
    if (token.kind == Token::Kind::op) return token.text == "[" || token.text == "{";
    return token.kind == Token::Kind::name && token.text != "else" && token.text != "or" && token.text != "and" &&
           token.text != "if" && token.text != "in" && token.text != "not" && token.text != "is";
  }

  const std::vector<Token>& t_;
  const SourceMap& map_;
  std::size_t i_ = 0;
  std::size_t depth_ = 0;
  std::size_t loops_ = 0;
  std::vector<std::pair<std::string, std::size_t>> opened_;
  std::vector<CallSite> calls_;
  std::set<std::string> macros_;
};

}  // namespace

Program parse(std::string_view source) {
  Program program;
  program.source = normalize_newlines(source);
  const SourceMap map(program.source);
  const std::vector<Token> tokens = tokenize(program.source, map);
  program.body = Parser(tokens, map).run();
  return program;
}

}  // namespace lazygraph::nn::jinja
