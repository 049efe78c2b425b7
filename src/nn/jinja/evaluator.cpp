#include "evaluator.hpp"

#include <unordered_map>

#include "builtins.hpp"
#include "error.hpp"
#include "lexer.hpp"

namespace lazygraph::nn::jinja {

namespace {

using Frame = std::unordered_map<std::string, Value>;

/// How a body ended: normally, or at {% break %} / {% continue %}.
enum class Flow { normal, break_loop, continue_loop };

class Evaluator {
 public:
  Evaluator(const Program& program, Frame globals, std::size_t max_steps)
      : map_(program.source), max_steps_(max_steps) {
    frames_.push_back(std::move(globals));
  }

  std::string run(const Body& body) {
    (void)render_body(body);
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(std::size_t offset, const std::string& problem) const {
    throw JinjaError(map_.place(offset), problem);
  }

  void step(std::size_t offset) {
    if (++steps_ > max_steps_) {
      fail(offset, "the render took more than " + std::to_string(max_steps_) + " loop iterations and macro calls");
    }
  }

  void emit(std::string_view text, std::size_t offset) {
    if (text.size() > kMaxOutputBytes - out_.size()) {
      fail(offset, "the render's output would exceed " + std::to_string(kMaxOutputBytes) + " bytes");
    }
    out_ += text;
  }

  // ---- variables
  [[nodiscard]] Value lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      const auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Undefined{"'" + name + "' is undefined"};
  }

  void assign(const std::vector<std::string>& targets, const Value& value, std::size_t offset) {
    if (targets.size() == 1) {
      frames_.back()[targets[0]] = value;
      return;
    }
    const std::vector<Value> items = value.is_list() ? value.list() : iterate(value);
    if (items.size() != targets.size()) {
      fail(offset, "cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()) +
                       " variables");
    }
    for (std::size_t i = 0; i < targets.size(); ++i) frames_.back()[targets[i]] = items[i];
  }

  /// Counts one level of the render's recursion while alive: bodies and expressions nest at most kMaxNesting deep
  /// each (the parser's limit), but macros calling macros multiply that; this bounds the stack whatever the mix.
  class Nest {
   public:
    Nest(Evaluator& e, std::size_t offset) : e_(e) {
      if (++e_.nesting_ > kMaxRenderNesting) {
        e_.fail(offset, "the render nests deeper than " + std::to_string(kMaxRenderNesting) +
                            " levels of blocks, expressions and macro calls");
      }
    }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
    ~Nest() { --e_.nesting_; }

   private:
    Evaluator& e_;
  };

  // ---- statements
  Flow render_body(const Body& body) {
    const Nest nest(*this, body.empty() ? 0 : body.front()->offset);
    for (const auto& node : body) {
      const Flow flow = render_node(*node);
      if (flow != Flow::normal) return flow;
    }
    return Flow::normal;
  }

  Flow render_node(const Node& node) {
    switch (node.kind) {
      case Node::Kind::text:
        emit(node.text, node.offset);
        break;
      case Node::Kind::output: {
        const Value value = eval(*node.expr);
        if (value.is_string()) {
          emit(value.as<std::string>(), node.offset);  // without to_str's copy
        } else {
          emit(to_str(value), node.offset);
        }
        break;
      }
      case Node::Kind::if_chain:
        for (const auto& [condition, body] : node.branches) {
          if (truthy(eval(*condition))) return render_body(body);
        }
        return render_body(node.else_body);
      case Node::Kind::for_loop:
        return render_for(node);
      case Node::Kind::set:
        if (!node.attribute.empty()) {
          const Value target = lookup(node.targets[0]);
          if (!target.is<NamespacePtr>()) {
            fail(node.offset, "cannot assign the attribute '" + node.attribute + "' of '" + node.targets[0] +
                                  "', which is not a namespace");
          }
          target.as<NamespacePtr>()->set(node.attribute, eval(*node.expr));
        } else {
          assign(node.targets, eval(*node.expr), node.offset);
        }
        break;
      case Node::Kind::set_block:
        assign(node.targets, capture(node.body), node.offset);
        break;
      case Node::Kind::macro:
        frames_.back()[node.macro->name] = Callable{node.macro.get(), node.macro->name};
        break;
      case Node::Kind::break_loop:
        return Flow::break_loop;
      case Node::Kind::continue_loop:
        return Flow::continue_loop;
      case Node::Kind::scope:
        return render_body(node.body);
    }
    return Flow::normal;
  }

  /// What `body` renders, as a string, instead of into the output.
  std::string capture(const Body& body) {
    std::string saved = std::move(out_);
    out_.clear();
    (void)render_body(body);
    std::string captured = std::move(out_);
    out_ = std::move(saved);
    if (captured.size() > kMaxOutputBytes - out_.size()) {
      throw JinjaError({}, "the render's output would exceed " + std::to_string(kMaxOutputBytes) + " bytes");
    }
    return captured;
  }

  Flow render_for(const Node& node) {
    const Value sequence = eval(*node.expr);
    if (!(sequence.is_list() || sequence.is_dict() || sequence.is_string() || sequence.is_undefined())) {
      fail(node.expr->offset, "'" + std::string(type_name(sequence)) + " object' is not iterable");
    }
    std::vector<Value> items = iterate(sequence);
    if (node.filter) {
      std::vector<Value> kept;
      for (Value& item : items) {
        step(node.offset);
        frames_.emplace_back();
        assign(node.targets, item, node.offset);
        const bool keep = truthy(eval(*node.filter));
        frames_.pop_back();
        if (keep) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return render_body(node.else_body);
    const auto length = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < length; ++i) {
      step(node.offset);
      frames_.emplace_back();
      DictData loop;
      loop.items = {{"index0", i},
                    {"index", i + 1},
                    {"revindex", length - i},
                    {"revindex0", length - i - 1},
                    {"first", i == 0},
                    {"last", i == length - 1},
                    {"length", length},
                    {"depth", std::int64_t{1}},
                    {"depth0", std::int64_t{0}}};
      if (i > 0) loop.items.emplace_back("previtem", items[static_cast<std::size_t>(i - 1)]);
      if (i + 1 < length) loop.items.emplace_back("nextitem", items[static_cast<std::size_t>(i + 1)]);
      frames_.back()["loop"] = Value(std::move(loop));
      assign(node.targets, items[static_cast<std::size_t>(i)], node.offset);
      const Flow flow = render_body(node.body);
      frames_.pop_back();
      if (flow == Flow::break_loop) break;
    }
    return Flow::normal;
  }

  // ---- expressions
  Value eval(const Expr& e) {
    const Nest nest(*this, e.offset);
    try {
      return eval_inner(e);
    } catch (const RaisedError& error) {
      if (error.place().line != 0) throw;
      throw RaisedError(map_.place(e.offset), error.what());
    } catch (const JinjaError& error) {
      if (error.place().line != 0) throw;
      throw JinjaError(map_.place(e.offset), error.what());
    }
  }

  Args eval_args(const Expr& e, std::size_t first) {
    Args args;
    for (std::size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
    for (const auto& [key, value] : e.kwargs) args.keyword.emplace_back(key, eval(*value));
    return args;
  }

  Value eval_inner(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::literal:
        return e.value;
      case Expr::Kind::name:
        return lookup(e.name);
      case Expr::Kind::list: {
        std::vector<Value> items;
        items.reserve(e.args.size());
        for (const auto& a : e.args) items.push_back(eval(*a));
        return e.negated ? make_tuple(std::move(items)) : Value(std::move(items));
      }
      case Expr::Kind::dict: {
        DictData dict;
        for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value key = eval(*e.args[i]);
          if (!key.is_string()) fail(e.args[i]->offset, "a dict key must be a str, not " + std::string(type_name(key)));
          dict.set(key.as<std::string>(), eval(*e.args[i + 1]));
        }
        return dict;
      }
      case Expr::Kind::attr:
        return get_attribute(eval(*e.args[0]), e.name);
      case Expr::Kind::item: {
        const Value object = eval(*e.args[0]);
        return get_item(object, eval(*e.args[1]));
      }
      case Expr::Kind::slice: {
        const Value object = eval(*e.args[0]);
        Value bounds[3];
        const Value* given[3] = {nullptr, nullptr, nullptr};
        for (std::size_t i = 0; i < 3; ++i) {
          if (e.args[i + 1]) {
            bounds[i] = eval(*e.args[i + 1]);
            given[i] = &bounds[i];
          }
        }
        return get_slice(object, given[0], given[1], given[2]);
      }
      case Expr::Kind::call:
        return eval_call(e);
      case Expr::Kind::filter: {
        const Value operand = eval(*e.args[0]);
        return apply_filter(e.name, operand, eval_args(e, 1));
      }
      case Expr::Kind::test: {
        const Value operand = eval(*e.args[0]);
        return apply_test(e.name, operand, eval_args(e, 1)) != e.negated;
      }
      case Expr::Kind::logical_not:
        return !truthy(eval(*e.args[0]));
      case Expr::Kind::negate:
      case Expr::Kind::plus: {
        Value operand = eval(*e.args[0]);
        if (operand.is_undefined()) fail_undefined(operand);
        if (operand.is<bool>()) {
          const std::int64_t one = e.kind == Expr::Kind::negate ? -1 : 1;
          return operand.as<bool>() ? one : std::int64_t{0};
        }
        if (e.kind == Expr::Kind::plus && operand.is_number()) return operand;
        if (operand.is<double>()) return -operand.as<double>();
        if (operand.is<std::int64_t>()) {
          if (operand.as<std::int64_t>() == INT64_MIN) {
            throw JinjaError({}, "an integer result does not fit in 64 bits");
          }
          return -operand.as<std::int64_t>();
        }
        throw JinjaError({}, "bad operand type for unary " + std::string(e.kind == Expr::Kind::negate ? "-" : "+") +
                                 ": '" + std::string(type_name(operand)) + "'");
      }
      case Expr::Kind::binary: {
        if (e.name == "and" || e.name == "or") {
          Value left = eval(*e.args[0]);
          if (truthy(left) == (e.name == "or")) return left;
          return eval(*e.args[1]);
        }
        const Value left = eval(*e.args[0]);
        const Value right = eval(*e.args[1]);
        if (e.name == "==") return equal(left, right);
        if (e.name == "!=") return !equal(left, right);
        return binary_op(e.name, left, right);
      }
      case Expr::Kind::condition:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        if (e.args[2]) return eval(*e.args[2]);
        return Undefined{"the condition of an 'if' without 'else' was false"};
    }
    return Undefined{};
  }

  Value eval_call(const Expr& e) {
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::Kind::attr) {
      const Value object = eval(*callee.args[0]);
      return call_method(object, callee.name, eval_args(e, 1));
    }
    const Value function = eval(callee);
    if (function.is_undefined()) fail_undefined(function);
    if (!function.is<Callable>()) {
      throw JinjaError({}, "'" + std::string(type_name(function)) + "' object is not callable");
    }
    const Callable& c = function.as<Callable>();
    Args args = eval_args(e, 1);
    if (c.macro == nullptr) return call_global(c.name, args);
    return call_macro(*c.macro, std::move(args), e.offset);
  }

  Value call_macro(const MacroNode& macro, Args args, std::size_t offset) {
    step(offset);
    if (call_depth_ >= kMaxCallDepth) {
      fail(offset, "macro calls nest deeper than " + std::to_string(kMaxCallDepth) + " levels");
    }
    if (args.positional.size() > macro.params.size()) {
      fail(offset,
           "macro '" + macro.name + "' takes not more than " + std::to_string(macro.params.size()) + " argument(s)");
    }
    // A macro sees the template's top-level variables and its own; not the caller's loop variables.
    std::vector<Frame> saved(std::make_move_iterator(frames_.begin() + 1), std::make_move_iterator(frames_.end()));
    frames_.resize(1);
    frames_.emplace_back();
    ++call_depth_;
    struct Restore {
      Evaluator& self;
      std::vector<Frame>& saved;
      ~Restore() {
        self.frames_.resize(1);
        for (Frame& f : saved) self.frames_.push_back(std::move(f));
        --self.call_depth_;
      }
    } restore{*this, saved};
    for (std::size_t i = 0; i < macro.params.size(); ++i) {
      const auto& [name, fallback] = macro.params[i];
      const Value* given = i < args.positional.size() ? &args.positional[i] : nullptr;
      for (const auto& [key, value] : args.keyword) {
        if (key != name) continue;
        if (given != nullptr) fail(offset, "macro '" + macro.name + "' got multiple values for argument '" + key + "'");
        given = &value;
      }
      frames_.back()[name] = given != nullptr ? *given
                             : fallback       ? eval(*fallback)
                                              : Value(Undefined{"the parameter '" + name + "' was not given"});
    }
    for (const auto& [key, value] : args.keyword) {
      bool known = false;
      for (const auto& param : macro.params) known = known || param.first == key;
      if (!known) fail(offset, "macro '" + macro.name + "' takes no keyword argument '" + key + "'");
    }
    return capture(macro.body);
  }

  SourceMap map_;
  std::size_t max_steps_;
  std::vector<Frame> frames_;
  std::string out_;
  std::size_t steps_ = 0;
  std::size_t call_depth_ = 0;
  std::size_t nesting_ = 0;
};

}  // namespace

std::string render(const Program& program, const std::vector<std::pair<std::string, Value>>& variables,
                   std::size_t max_steps) {
  Frame globals;
  for (const char* name : {"raise_exception", "strftime_now", "namespace", "range", "dict"}) {
    globals[name] = Callable{nullptr, name};
  }
  for (const auto& [name, value] : variables) globals.insert_or_assign(name, value);  // lists are shared, not copied
  return Evaluator(program, std::move(globals), max_steps).run(program.body);
}

}  // namespace lazygraph::nn::jinja
