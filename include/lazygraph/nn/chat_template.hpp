#pragma once
/// \file
/// ChatTemplate: a model's chat template (the Jinja `chat_template` of a Hugging Face tokenizer_config.json, or a
/// chat_template.jinja) rendered for a conversation, as transformers' apply_chat_template(..., tokenize=False)
/// renders it. No C++ Jinja engine is packaged in Debian; lazygraph runs the subset of Jinja that the chat templates
/// of Llama 3.x, Qwen 2.5 / 3, Mistral, Gemma 3 and Phi-4 use (docs/chat_templates.md lists it) in transformers'
/// environment (trim_blocks, lstrip_blocks, loop controls, its tojson, raise_exception and strftime_now). Anything
/// outside the subset is refused when the template is loaded, by name and place, never while rendering.
///
/// Bounded on hostile input: the template is read with config.json's limits (16 MiB, a regular file) and nests at
/// most 100 levels; a render stops at 64 MiB of output, at RenderOptions::max_steps loop iterations and macro calls,
/// or 1000 levels of recursion (macros calling macros).
///
/// Thread safety: a ChatTemplate is immutable once loaded; render() may be called from several threads at once.

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lazygraph/driver/error.hpp"

namespace lazygraph::nn {

/// A chat template that is missing, outside the supported subset, or failed to render (the template called
/// raise_exception, or used an undefined value where Jinja refuses one). The message names the file and the JSON
/// key it was read from, the line and column in the template when the problem has a place there, and what is wrong:
/// "file x/tokenizer_config.json: key chat_template: line 3, column 12: the filter 'wordwrap' is not supported".
class ChatTemplateError : public Error {
 public:
  /// Builds the message "file <file>: key <key>: line <line>, column <column>: <problem>", without the key when
  /// `key` is empty (a chat_template.jinja) and without the line and column when `line` is 0.
  ChatTemplateError(std::filesystem::path file, std::string key, std::size_t line, std::size_t column,
                    std::string_view problem, bool raised = false);

  /// The file of the template (or what from_source was given to name it).
  [[nodiscard]] const std::filesystem::path& file() const noexcept { return file_; }
  /// The JSON key the template was read from ("chat_template"); empty for a chat_template.jinja.
  [[nodiscard]] const std::string& key() const noexcept { return key_; }
  /// The line of the template the problem is at, from 1; 0 when it has no place in the template.
  [[nodiscard]] std::size_t line() const noexcept { return line_; }
  /// The column (byte in the line, from 1); 0 when line() is.
  [[nodiscard]] std::size_t column() const noexcept { return column_; }
  /// Whether the template itself refused the conversation by calling raise_exception (its message is in what()).
  [[nodiscard]] bool raised() const noexcept { return raised_; }

 private:
  std::filesystem::path file_;
  std::string key_;
  std::size_t line_;
  std::size_t column_;
  bool raised_;
};

/// One message of a conversation: its role ("system", "user", "assistant", "tool") and its text.
struct ChatMessage {
  std::string role;     ///< "system", "user", "assistant", "tool", ...
  std::string content;  ///< the message's text (UTF-8)
};

/// What a render passes to the template besides the messages.
struct RenderOptions {
  /// add_generation_prompt: end with the header of the assistant's turn.
  bool add_generation_prompt = false;
  /// The tools (a JSON array of function schemas), as apply_chat_template's `tools`; empty: none (the template
  /// sees `tools` as None, as transformers passes it).
  std::string tools_json;
  /// Further variables, a JSON object (e.g. {"enable_thinking": false} for Qwen3, {"date_string": "26 Jul 2024"}
  /// for Llama 3.x), as apply_chat_template's keyword arguments; empty: none.
  std::string variables_json;
  /// The most loop iterations and macro calls the render may take before it fails (2^20 by default: real templates
  /// take a few per message).
  std::size_t max_steps = std::size_t{1} << 20U;
};

/// A parsed chat template with the special tokens it is rendered with.
class ChatTemplate {
 public:
  /// The chat template of the model in `folder`: its chat_template.jinja if present, else tokenizer_config.json's
  /// `chat_template` (a string, or a list of {"name", "template"} from which `name` is taken: "default" unless
  /// asked otherwise). The special tokens bos_token and eos_token come from tokenizer_config.json (a string, or an
  /// object with "content") when it has them, as transformers passes them to the template. Throws CheckpointError
  /// naming the file when chat_template.jinja or tokenizer_config.json cannot be read with config.json's limits (a
  /// regular file of at most 16 MiB), or tokenizer_config.json is not a JSON object (at most 2^20 values, no key
  /// twice) or has a bos_token / eos_token of another type; ChatTemplateError naming the file when there is no
  /// template, no template of that name, or the template is outside the supported subset.
  [[nodiscard]] static ChatTemplate load(const std::filesystem::path& folder, std::string_view name = "default");

  /// A template from its text, rendered with `bos_token` and `eos_token`; `file` names it in errors. Throws
  /// ChatTemplateError as load() does for a template outside the subset.
  [[nodiscard]] static ChatTemplate from_source(std::string source, std::string bos_token = {},
                                                std::string eos_token = {},
                                                std::filesystem::path file = "<chat template>");

  /// The prompt the template makes of `messages_json`, a JSON array of message objects (role, content, and what
  /// the template reads besides: tool_calls, tool_call_id, reasoning_content, ...), with the variables transformers
  /// passes: messages, tools, documents (None), add_generation_prompt, bos_token and eos_token (each left undefined
  /// when empty: the model has none), and `options`' variables. Throws ChatTemplateError when messages_json is not a
  /// JSON array in UTF-8 (of at most 64 levels and 2^22 values; no key twice in an object), tools_json not an array,
  /// variables_json not an object, or the render fails (raise_exception: raised() is true and what() holds the
  /// template's message).
  [[nodiscard]] std::string render(std::string_view messages_json, const RenderOptions& options = {}) const;

  /// render() for messages of a role and a text each.
  [[nodiscard]] std::string render(const std::vector<ChatMessage>& messages, const RenderOptions& options = {}) const;

  /// The template's text, as read.
  [[nodiscard]] const std::string& source() const noexcept;
  /// The file it was read from (or from_source's name).
  [[nodiscard]] const std::filesystem::path& file() const noexcept;
  /// The bos_token it renders with (empty when the model has none).
  [[nodiscard]] const std::string& bos_token() const noexcept;
  /// The eos_token it renders with (empty when the model has none).
  [[nodiscard]] const std::string& eos_token() const noexcept;

 private:
  struct State;  // the parsed template and its tokens (src/nn/chat_template.cpp)
  explicit ChatTemplate(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  /// Parses `source`; `file` and `key` name it in errors.
  static ChatTemplate compile(std::string source, std::filesystem::path file, std::string key, std::string bos,
                              std::string eos);
  std::shared_ptr<const State> state_;
};

}  // namespace lazygraph::nn
