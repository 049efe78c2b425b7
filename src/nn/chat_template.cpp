// ChatTemplate (chat_template.hpp): finding a model's template and special tokens, and rendering it through the
// engine in src/nn/jinja.
#include "lazygraph/nn/chat_template.hpp"

#include <system_error>
#include <utility>

#include "jinja/error.hpp"
#include "jinja/evaluator.hpp"
#include "jinja/json.hpp"
#include "jinja/parser.hpp"
#include "json_util.hpp"

namespace lazygraph::nn {

namespace {

std::string chat_template_message(const std::filesystem::path& file, const std::string& key, std::size_t line,
                                  std::size_t column, std::string_view problem) {
  std::string message = "file " + file.string() + ": ";
  if (!key.empty()) message += "key " + key + ": ";
  if (line != 0) message += "line " + std::to_string(line) + ", column " + std::to_string(column) + ": ";
  message += problem;
  return message;
}

/// The most JSON values a tokenizer_config.json may hold: 2^20 (Gemma 3's lists about 6,000 added tokens, some
/// 45,000 values).
constexpr std::size_t kMaxTokenizerConfigValues = std::size_t{1} << 20U;

}  // namespace

ChatTemplateError::ChatTemplateError(std::filesystem::path file, std::string key, std::size_t line, std::size_t column,
                                     std::string_view problem, bool raised)
    : Error(chat_template_message(file, key, line, column, problem)),
      file_(std::move(file)),
      key_(std::move(key)),
      line_(line),
      column_(column),
      raised_(raised) {}

struct ChatTemplate::State {
  std::string source;
  std::filesystem::path file;
  std::string key;
  std::string bos_token;
  std::string eos_token;
  jinja::Program program;

  [[noreturn]] void fail(const jinja::JinjaError& error, bool raised = false) const {
    throw ChatTemplateError(file, key, error.place().line, error.place().column, error.what(), raised);
  }
};

ChatTemplate ChatTemplate::compile(std::string source, std::filesystem::path file, std::string key, std::string bos,
                                   std::string eos) {
  auto loaded = std::make_shared<State>();
  loaded->file = std::move(file);
  loaded->key = std::move(key);
  loaded->bos_token = std::move(bos);
  loaded->eos_token = std::move(eos);
  try {
    loaded->program = jinja::parse(source);
  } catch (const jinja::JinjaError& error) {
    loaded->fail(error);
  }
  loaded->source = std::move(source);
  return ChatTemplate(std::move(loaded));
}

namespace {

/// A special token of tokenizer_config.json: a string, an object with "content", null or absent.
std::string special_token(const nlohmann::json& config, const std::string& key, const std::filesystem::path& file) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  throw CheckpointError(
      file, "",
      "the key " + key + " is not a string or an object with a string \"content\": " + detail::describe_json(*it));
}

}  // namespace

ChatTemplate ChatTemplate::load(const std::filesystem::path& folder, std::string_view name) {
  const std::filesystem::path config_path = folder / "tokenizer_config.json";
  const std::filesystem::path jinja_path = folder / "chat_template.jinja";
  std::error_code ec;
  const bool has_config = std::filesystem::exists(config_path, ec);
  const bool has_jinja = std::filesystem::exists(jinja_path, ec);
  nlohmann::json config = nlohmann::json::object();
  if (has_config) {
    config = detail::parse_json_strict(detail::read_text_file(config_path), config_path, "tokenizer_config.json", false,
                                       kMaxTokenizerConfigValues);
    if (!config.is_object()) {
      throw CheckpointError(config_path, "", "is not a JSON object: " + detail::describe_json(config));
    }
  }
  std::string bos = special_token(config, "bos_token", config_path);
  std::string eos = special_token(config, "eos_token", config_path);
  if (has_jinja) {
    return compile(detail::read_text_file(jinja_path), jinja_path, "", std::move(bos), std::move(eos));
  }
  const auto it = config.find("chat_template");
  if (!has_config || it == config.end() || it->is_null()) {
    throw ChatTemplateError(has_config ? config_path : jinja_path, "", 0, 0,
                            has_config ? "has no chat_template, and the folder has no chat_template.jinja"
                                       : "does not exist, nor does tokenizer_config.json: the model has no chat "
                                         "template");
  }
  if (it->is_string()) {
    return compile(it->get<std::string>(), config_path, "chat_template", std::move(bos), std::move(eos));
  }
  if (it->is_array()) {
    std::string names;
    for (std::size_t i = 0; i < it->size(); ++i) {
      const nlohmann::json& entry = (*it)[i];
      const auto entry_name = entry.is_object() ? entry.find("name") : entry.end();
      const auto entry_template = entry.is_object() ? entry.find("template") : entry.end();
      if (!entry.is_object() || entry_name == entry.end() || !entry_name->is_string() ||
          entry_template == entry.end() || !entry_template->is_string()) {
        throw ChatTemplateError(config_path, "chat_template[" + std::to_string(i) + "]", 0, 0,
                                "is not an object with a string \"name\" and a string \"template\"");
      }
      if (*entry_name == name) {
        return compile(entry_template->get<std::string>(), config_path, "chat_template[" + std::to_string(i) + "]",
                       std::move(bos), std::move(eos));
      }
      names += (names.empty() ? "'" : ", '") + entry_name->get<std::string>() + "'";
    }
    throw ChatTemplateError(config_path, "chat_template", 0, 0,
                            "has no template named '" + std::string(name) + "' (it has " +
                                (names.empty() ? std::string("none") : names) + ")");
  }
  throw ChatTemplateError(config_path, "chat_template", 0, 0,
                          "is not a string or a list of {\"name\", \"template\"}: " + detail::describe_json(*it));
}

ChatTemplate ChatTemplate::from_source(std::string source, std::string bos_token, std::string eos_token,
                                       std::filesystem::path file) {
  return compile(std::move(source), std::move(file), "", std::move(bos_token), std::move(eos_token));
}

std::string ChatTemplate::render(std::string_view messages_json, const RenderOptions& options) const {
  const auto& t = *state_;
  std::vector<std::pair<std::string, jinja::Value>> variables;
  try {
    jinja::Value messages = jinja::parse_json(messages_json, "the messages JSON");
    if (!messages.is_list()) {
      throw jinja::JinjaError({}, "the messages are not a JSON array of message objects but a JSON " +
                                      std::string(messages.is_dict() ? "object" : jinja::type_name(messages)));
    }
    jinja::Value tools = jinja::None{};
    if (!options.tools_json.empty()) {
      tools = jinja::parse_json(options.tools_json, "the tools JSON");
      if (!tools.is_list()) throw jinja::JinjaError({}, "the tools are not a JSON array");
    }
    variables.emplace_back("messages", std::move(messages));
    variables.emplace_back("tools", std::move(tools));
    variables.emplace_back("documents", jinja::None{});
    variables.emplace_back("add_generation_prompt", options.add_generation_prompt);
    // transformers passes the special tokens the tokenizer has; a missing one stays undefined.
    if (!t.bos_token.empty()) variables.emplace_back("bos_token", t.bos_token);
    if (!t.eos_token.empty()) variables.emplace_back("eos_token", t.eos_token);
    if (!options.variables_json.empty()) {
      const jinja::Value extra = jinja::parse_json(options.variables_json, "the variables JSON");
      if (!extra.is_dict()) throw jinja::JinjaError({}, "the variables are not a JSON object");
      for (const auto& [key, value] : extra.dict().items) variables.emplace_back(key, value);
    }
  } catch (const jinja::JinjaError& error) {
    throw ChatTemplateError(t.file, t.key, 0, 0, error.what());
  }
  try {
    return jinja::render(t.program, variables, options.max_steps);
  } catch (const jinja::RaisedError& error) {
    t.fail(error, true);
  } catch (const jinja::JinjaError& error) {
    t.fail(error);
  }
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const RenderOptions& options) const {
  jinja::JsonStyle style;
  std::vector<jinja::Value> list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    jinja::DictData message;
    message.items = {{"role", m.role}, {"content", m.content}};
    list.emplace_back(std::move(message));
  }
  return render(jinja::to_json(jinja::Value(std::move(list)), style), options);
}

const std::string& ChatTemplate::source() const noexcept { return state_->source; }
const std::filesystem::path& ChatTemplate::file() const noexcept { return state_->file; }
const std::string& ChatTemplate::bos_token() const noexcept { return state_->bos_token; }
const std::string& ChatTemplate::eos_token() const noexcept { return state_->eos_token; }

}  // namespace lazygraph::nn
