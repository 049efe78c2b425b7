// Host tests of lazygraph::nn::ChatTemplate: the stored chat templates of Llama 3.1 / 3.2, Qwen 2.5, Qwen3, Mistral
// Nemo, Gemma 3 and Phi-4 render byte for byte what jinja2 renders in transformers' environment
// (tests/nn/crosscheck/render_chat_templates.py wrote the expected renders), so do the engine's feature snippets and
// a few hundred random templates over the subset; loading from a model folder; and one test per refusal.
#include <doctest/doctest.h>

#include "chat_template_data.hpp"
#include "common/files.hpp"
#include "common/temp_dir.hpp"

#include <lazygraph/nn/chat_template.hpp>
#include <lazygraph/nn/checkpoint_error.hpp>

// The expected renders are JSON; nlohmann-json (header-only, Debian's nlohmann-json3-dev in /usr/include) is what
// liblazygraph_nn is built with. Not through its Meson dependency, whose -I/usr/include would change every nn test's
// command line.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

using namespace lazygraph::nn;
namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

namespace {

const fs::path kData = LAZYGRAPH_CHAT_TEMPLATE_DATA;

const ordered_json& renders() {
  static const ordered_json stored = ordered_json::parse(lgtest::read_file(kData / "renders.json"));
  return stored;
}

/// The part of a Python error message after its type ("TemplateError: text" gives "text").
std::string python_message(const std::string& error) {
  const std::size_t colon = error.find(": ");
  return colon == std::string::npos ? error : error.substr(colon + 2);
}

/// Checks one stored render: the output, or a failure (with the template's own message when it raised).
void check_render(const ChatTemplate& chat, const ordered_json& row, const std::string& messages,
                  const RenderOptions& options) {
  if (row.contains("output")) {
    CHECK(chat.render(messages, options) == row["output"].get<std::string>());
    return;
  }
  try {
    (void)chat.render(messages, options);
    FAIL("the render succeeded where jinja2 failed with: " << row["error"].get<std::string>());
  } catch (const ChatTemplateError& e) {
    CHECK(e.raised() == row["raised"].get<bool>());
    if (row["raised"].get<bool>()) {
      CHECK(std::string(e.what()).find(python_message(row["error"].get<std::string>())) != std::string::npos);
    }
  }
}

RenderOptions generation_prompt() {
  RenderOptions options;
  options.add_generation_prompt = true;
  return options;
}

RenderOptions with_tools(std::string tools) {
  RenderOptions options;
  options.tools_json = std::move(tools);
  return options;
}

RenderOptions with_variables(std::string variables) {
  RenderOptions options;
  options.variables_json = std::move(variables);
  return options;
}

/// The message of the ChatTemplateError that from_source throws for `source`; fails when it throws nothing.
std::string refusal(const std::string& source) {
  try {
    (void)ChatTemplate::from_source(source, "", "", "t.jinja");
  } catch (const ChatTemplateError& e) {
    CHECK(e.file() == "t.jinja");
    return e.what();
  }
  FAIL("the template was accepted: " << source);
  return {};
}

/// The message of the ChatTemplateError that rendering `source` throws.
std::string render_failure(const std::string& source, const std::string& messages = "[]",
                           const RenderOptions& options = {}) {
  const ChatTemplate chat = ChatTemplate::from_source(source, "", "", "t.jinja");
  try {
    (void)chat.render(messages, options);
  } catch (const ChatTemplateError& e) {
    return e.what();
  }
  FAIL("the render succeeded: " << source);
  return {};
}

}  // namespace

TEST_SUITE("host") {
  TEST_CASE("the stored chat templates render what jinja2 renders in transformers' environment") {
    std::map<std::string, ChatTemplate> templates;
    std::size_t checked = 0;
    for (const ordered_json& row : renders()["templates"]) {
      const std::string name = row["template"].get<std::string>();
      if (templates.count(name) == 0) {
        const auto token = [&](const char* key) { return row[key].is_null() ? "" : row[key].get<std::string>(); };
        templates.emplace(name, ChatTemplate::from_source(lgtest::read_file(kData / (name + ".jinja")),
                                                          token("bos_token"), token("eos_token"), name + ".jinja"));
      }
      RenderOptions options;
      options.add_generation_prompt = row["add_generation_prompt"].get<bool>();
      if (!row["tools"].is_null()) options.tools_json = row["tools"].dump();
      options.variables_json = row["variables"].dump();
      CAPTURE(name);
      CAPTURE(row["conversation"].get<std::string>());
      CAPTURE(options.add_generation_prompt);
      check_render(templates.at(name), row, row["messages"].dump(), options);
      ++checked;
    }
    CHECK(templates.size() == 7);
    CHECK(checked >= 160);
  }

  TEST_CASE("each feature of the subset renders what jinja2 renders") {
    for (const ordered_json& row : renders()["snippets"]) {
      const std::string source = row["source"].get<std::string>();
      CAPTURE(source);
      const ChatTemplate chat = ChatTemplate::from_source(source, "", "", "snippet.jinja");
      RenderOptions options;
      options.variables_json = row["variables"].dump();
      // The variables are the whole context: a snippet's `messages` would be one of them.
      check_render(chat, row, "[]", options);
    }
  }

  TEST_CASE("random templates over the subset render what jinja2 renders") {
    const std::string variables = renders()["generated_variables"].dump();
    std::size_t outputs = 0;
    for (const ordered_json& row : renders()["generated"]) {
      const std::string source = row["source"].get<std::string>();
      CAPTURE(source);
      RenderOptions options;
      options.variables_json = variables;
      check_render(ChatTemplate::from_source(source, "", "", "generated.jinja"), row, "[]", options);
      outputs += row.contains("output") ? 1 : 0;
    }
    CHECK(outputs >= 200);
  }

  TEST_CASE("a chat template renders a vector of messages as the same JSON would") {
    const ChatTemplate chat = ChatTemplate::from_source(lgtest::read_file(kData / "qwen2.5.jinja"));
    const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hi \"there\"\n"}};
    CHECK(chat.render(messages, generation_prompt()) ==
          chat.render(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \"there\"\n"}])",
                      generation_prompt()));
  }

  TEST_CASE("load reads tokenizer_config.json's chat_template and special tokens from a model folder") {
    const lgtest::TempDir dir;
    lgtest::write_file(dir.path() / "tokenizer_config.json", R"({
      "bos_token": {"content": "<s>", "lstrip": false},
      "eos_token": "</s>",
      "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}{% endfor %}"
    })");
    const ChatTemplate chat = ChatTemplate::load(dir.path());
    CHECK(chat.bos_token() == "<s>");
    CHECK(chat.eos_token() == "</s>");
    CHECK(chat.file() == dir.path() / "tokenizer_config.json");
    CHECK(chat.render(std::vector<ChatMessage>{{"user", "hi"}}) == "<s>[user]hi</s>");
  }

  TEST_CASE("load takes a named template from a list, and chat_template.jinja before tokenizer_config.json") {
    const lgtest::TempDir dir;
    lgtest::write_file(dir.path() / "tokenizer_config.json", R"({"chat_template": [
      {"name": "default", "template": "default:{{ messages|length }}"},
      {"name": "tool_use", "template": "tools:{{ tools|length }}"}]})");
    CHECK(ChatTemplate::load(dir.path()).render("[{}]") == "default:1");
    CHECK(ChatTemplate::load(dir.path(), "tool_use").render("[]", with_tools("[1, 2]")) == "tools:2");
    try {
      (void)ChatTemplate::load(dir.path(), "rag");
      FAIL("a missing name was accepted");
    } catch (const ChatTemplateError& e) {
      CHECK(std::string(e.what()).find("no template named 'rag' (it has 'default', 'tool_use')") != std::string::npos);
    }
    lgtest::write_file(dir.path() / "chat_template.jinja", "from the jinja file\n");
    const ChatTemplate chat = ChatTemplate::load(dir.path());
    CHECK(chat.file() == dir.path() / "chat_template.jinja");
    CHECK(chat.render("[]") == "from the jinja file");  // Jinja drops one newline at the end
  }

  TEST_CASE("load refuses a folder without a chat template, naming the file") {
    const lgtest::TempDir dir;
    CHECK_THROWS_WITH_AS((void)ChatTemplate::load(dir.path()), doctest::Contains("chat_template.jinja"),
                         ChatTemplateError);
    lgtest::write_file(dir.path() / "tokenizer_config.json", R"({"eos_token": "</s>"})");
    CHECK_THROWS_WITH_AS((void)ChatTemplate::load(dir.path()), doctest::Contains("has no chat_template"),
                         ChatTemplateError);
    lgtest::write_file(dir.path() / "tokenizer_config.json", R"({"chat_template": 5})");
    CHECK_THROWS_WITH_AS((void)ChatTemplate::load(dir.path()), doctest::Contains("key chat_template"),
                         ChatTemplateError);
    lgtest::write_file(dir.path() / "tokenizer_config.json", R"({"chat_template": "x", "chat_template": "y"})");
    CHECK_THROWS_AS((void)ChatTemplate::load(dir.path()), CheckpointError);
    lgtest::write_file(dir.path() / "tokenizer_config.json", R"({"chat_template": "x", "bos_token": 1})");
    CHECK_THROWS_WITH_AS((void)ChatTemplate::load(dir.path()), doctest::Contains("the key bos_token is not a string"),
                         CheckpointError);
    lgtest::write_file(dir.path() / "tokenizer_config.json", R"({"chat_template": "x"})");
    fs::create_directory(dir.path() / "chat_template.jinja");
    CHECK_THROWS_WITH_AS((void)ChatTemplate::load(dir.path()), doctest::Contains("is not a regular file (a folder)"),
                         CheckpointError);
    fs::remove(dir.path() / "chat_template.jinja");
    lgtest::write_file(dir.path() / "chat_template.jinja", "x");
    fs::resize_file(dir.path() / "chat_template.jinja", std::uintmax_t{1} << 30U);  // 1 GiB, sparse: refused unread
    CHECK_THROWS_WITH_AS((void)ChatTemplate::load(dir.path()), doctest::Contains("is larger than the 16777216 bytes"),
                         CheckpointError);
    fs::remove(dir.path() / "chat_template.jinja");
    lgtest::write_file(dir.path() / "tokenizer_config.json", R"({"chat_template": "{% include 'x' %}"})");
    CHECK_THROWS_WITH_AS((void)ChatTemplate::load(dir.path()),
                         doctest::Contains("tokenizer_config.json: key chat_template: line 1, column 1: the 'include' "
                                           "tag is not supported"),
                         ChatTemplateError);
  }

  TEST_CASE("a template with a tag outside the subset is refused at load, naming the tag and its place") {
    for (const char* tag :
         {"include", "extends", "import", "from", "call", "filter", "block", "with", "raw", "autoescape", "do"}) {
      CAPTURE(tag);
      const std::string message = refusal("line one\n  {% " + std::string(tag) + " x %}{% endfor %}");
      CAPTURE(message);
      CHECK(message.find("file t.jinja: line 2, column 3: the '" + std::string(tag) + "' tag is not supported") !=
            std::string::npos);
    }
  }

  TEST_CASE("an unknown filter, test, method or function is refused at load, by name") {
    CHECK(refusal("{{ x | wordwrap(10) }}").find("line 1, column 8: the filter 'wordwrap' is not supported") !=
          std::string::npos);
    CHECK(refusal("{% if x is prime %}{% endif %}").find("the test 'prime' is not supported") != std::string::npos);
    CHECK(refusal("{{ x.format(1) }}").find("the method 'format' is not supported") != std::string::npos);
    CHECK(refusal("{{ loop.cycle('a', 'b') }}").find("the method 'cycle' is not supported") != std::string::npos);
    CHECK(refusal("{{ lipsum(2) }}").find("the function 'lipsum' is not supported") != std::string::npos);
    CHECK(refusal("{% for x in y recursive %}{% endfor %}").find("recursive loops") != std::string::npos);
    // A macro defined later in the template is known when loading; calling it before its definition fails as in
    // Jinja.
    const ChatTemplate late = ChatTemplate::from_source("{{ m() }}{% macro m() %}x{% endmacro %}");
    CHECK_THROWS_WITH_AS((void)late.render("[]"), doctest::Contains("'m' is undefined"), ChatTemplateError);
  }

  TEST_CASE("an unterminated block, tag, comment or string is refused at load with the place it opened") {
    CHECK(refusal("a\n{% for x in y %}body")
              .find("line 2, column 1: the 'for' block opened here is not closed: "
                    "expected '{% endfor %}'") != std::string::npos);
    CHECK(refusal("{% if x %}{% else %}").find("the 'if' block opened here is not closed") != std::string::npos);
    CHECK(refusal("{{ x ").find("line 1, column 1: the '{{' opened here is not closed") != std::string::npos);
    CHECK(refusal("ok {# note").find("column 4: the comment opened here is not closed") != std::string::npos);
    CHECK(refusal("{{ 'abc }}").find("the string opened here is not closed") != std::string::npos);
    CHECK(refusal("{% endif %}").find("unexpected '{% endif %}'") != std::string::npos);
    CHECK(refusal("{% break %}").find("'break' is outside a for loop") != std::string::npos);
    CHECK(refusal("{{ x + }}").find("expected an expression, found '}}'") != std::string::npos);
    CHECK(refusal("{{ x $ y }}").find("unexpected character '$'") != std::string::npos);
  }

  TEST_CASE("a template nested deeper than the limit is refused in bounded time") {
    std::string blocks;
    for (int i = 0; i < 150; ++i) blocks += "{% if true %}";
    CHECK(refusal(blocks).find("nests deeper than 100 levels") != std::string::npos);
    CHECK(refusal("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}")
              .find("nests deeper than 100 levels") != std::string::npos);
    CHECK(refusal("{{ " + std::string(5000, '-') + "1 }}").find("nests deeper") != std::string::npos);
    const std::string brackets = refusal("{{ " + std::string(5000, '[') + "1" + std::string(5000, ']') + " }}");
    CAPTURE(brackets);
    CHECK(brackets.find("nests deeper") != std::string::npos);
  }

  TEST_CASE("raise_exception stops the render with the template's message and place") {
    const ChatTemplate gemma =
        ChatTemplate::from_source(lgtest::read_file(kData / "gemma3.jinja"), "<bos>", "<eos>", "gemma3.jinja");
    try {
      (void)gemma.render(std::vector<ChatMessage>{{"user", "a"}, {"user", "b"}});
      FAIL("two user turns in a row were rendered");
    } catch (const ChatTemplateError& e) {
      CHECK(e.raised());
      CHECK(e.line() == 19);
      CHECK(
          std::string(e.what()) ==
          "file gemma3.jinja: line 19, column 12: Conversation roles must alternate user/assistant/user/assistant/...");
    }
  }

  TEST_CASE("a render that uses an undefined value as Jinja refuses fails, naming it") {
    const std::string message = render_failure("{{ messages[0].content.upper() }}", R"([{"role": "user"}])");
    CHECK(message.find("line 1, column") != std::string::npos);
    CHECK(message.find("'dict object' has no attribute 'content'") != std::string::npos);
    CHECK(render_failure("{{ nope + 1 }}").find("'nope' is undefined") != std::string::npos);
  }

  TEST_CASE("messages that are not a JSON array of objects are refused, naming them") {
    const ChatTemplate chat = ChatTemplate::from_source("{{ messages|length }}", "", "", "t.jinja");
    CHECK_THROWS_WITH_AS((void)chat.render(R"({"role": "user"})"),
                         doctest::Contains("the messages are not a JSON array of message objects but a JSON object"),
                         ChatTemplateError);
    CHECK_THROWS_WITH_AS((void)chat.render("[{"), doctest::Contains("the messages JSON is not valid JSON"),
                         ChatTemplateError);
    CHECK_THROWS_WITH_AS((void)chat.render(std::string("[\"a\xff\"]")), doctest::Contains("not valid JSON"),
                         ChatTemplateError);
    CHECK_THROWS_WITH_AS((void)chat.render(std::string(200, '[') + std::string(200, ']')),
                         doctest::Contains("nests deeper than 64"), ChatTemplateError);
    CHECK_THROWS_WITH_AS((void)chat.render(R"([{"a": 1, "a": 2}])"), doctest::Contains("the key \"a\" twice"),
                         ChatTemplateError);
    CHECK_THROWS_WITH_AS((void)chat.render("[]", with_tools("{}")),
                         doctest::Contains("the tools are not a JSON "
                                           "array"),
                         ChatTemplateError);
    CHECK_THROWS_WITH_AS((void)chat.render("[]", with_variables("[]")),
                         doctest::Contains("the variables are not a JSON object"), ChatTemplateError);
  }

  TEST_CASE("a render is bounded in output, loop iterations and macro recursion") {
    RenderOptions few_steps;
    few_steps.max_steps = 1000;
    CHECK(render_failure("{% for i in range(40) %}{% for j in range(40) %}{% endfor %}{% endfor %}", "[]", few_steps)
              .find("line 1, column 25: the render took more than 1000 loop iterations") != std::string::npos);
    CHECK(ChatTemplate::from_source("{% for i in range(30) %}{% for j in range(30) %}{% endfor %}{% endfor %}")
              .render("[]", few_steps) == "");
    CHECK(render_failure("{{ 'x' * 100000000 }}").find("more than 67108864 bytes") != std::string::npos);
    const std::string output = render_failure("{% set s = 'x' * 34000000 %}{{ s }}{{ s }}");
    CAPTURE(output);
    CHECK(output.find("line 1, column 36: the render's output would exceed 67108864 bytes") != std::string::npos);
    CHECK(render_failure("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")
              .find("macro calls nest deeper than 64 levels") != std::string::npos);
    // A macro whose body nests 90 blocks deep, calling itself: the recursion as a whole is bounded.
    std::string deep = "{% macro f(n) %}";
    for (int i = 0; i < 90; ++i) deep += "{% if true %}";
    deep += "{{ f(n + 1) }}";
    for (int i = 0; i < 90; ++i) deep += "{% endif %}";
    CHECK(render_failure(deep + "{% endmacro %}{{ f(0) }}").find("the render nests deeper than 1000 levels") !=
          std::string::npos);
  }
}
