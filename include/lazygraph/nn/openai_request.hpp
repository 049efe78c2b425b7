#pragma once
/// \file
/// The bodies of OpenAI's `/v1/completions` and `/v1/chat/completions` requests, read and checked: what
/// lazygraph-serve (docs/serving.md) accepts, and each refusal as a RequestError naming the field.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lazygraph/nn/request_error.hpp"
#include "lazygraph/nn/sampling.hpp"

namespace lazygraph::nn {

/// Which OpenAI endpoint a body was sent to.
enum class OpenAiEndpoint {
  completions,       ///< /v1/completions: a `prompt`
  chat_completions,  ///< /v1/chat/completions: `messages`
};

/// What a server accepts: the limits a body is checked against.
struct OpenAiLimits {
  std::size_t max_body_bytes = std::size_t{1} << 20U;  ///< the largest body, in bytes
  int context = 4096;                                  ///< positions per sequence: max_tokens is at most this
  std::vector<std::string> models;                     ///< the model names served (`model` must be one)
};

/// A checked request body.
struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::completions;  ///< where the body was sent
  std::string model;                                      ///< one of OpenAiLimits::models
  std::string prompt;                          ///< completions: the prompt text (empty when prompt_ids holds it)
  std::optional<std::vector<int>> prompt_ids;  ///< completions: a prompt given as token ids (not yet checked
                                               ///< against the vocabulary)
  std::string messages_json;                   ///< chat: the `messages` array as JSON, for ChatTemplate::render
  std::optional<int> max_tokens;               ///< 1 to the context; nullopt: until a stop or a full context
  Sampling sampling;                           ///< temperature, top_k, top_p and seed (greedy by default)
  std::vector<std::string> stop;               ///< stop strings (none empty), at most 4 as OpenAI allows
  bool stream = false;                         ///< answer as server-sent events
};

/// Reads `body` as a request to `endpoint`, checked against `limits`. Accepted fields: `model` (required), `prompt`
/// (completions: a string, or an array of token ids), `messages` (chat: a non-empty array of objects with a string
/// `role` and a string or null `content`), `max_tokens` (chat also `max_completion_tokens`), `temperature`,
/// `top_p`, `top_k`, `seed`, `stop` (a string or an array of up to 4), `stream`, `n` (1 only); `best_of`,
/// `echo`, `logprobs`, `top_logprobs`, `suffix`, `logit_bias`, `presence_penalty` and `frequency_penalty` only at
/// the values that ask for nothing; other keys (`user`, `stream_options`, ...) are ignored.
/// \throws RequestError naming the field: "body" for a body over the limit, malformed JSON (with the byte offset), or
/// one that is not an object; the field whose string is not UTF-8 (e.g. "messages[0].content"); a missing, mistyped
/// or out-of-range field; an unknown model; n other than 1; a refused option.
[[nodiscard]] OpenAiRequest parse_openai_request(std::string_view body, OpenAiEndpoint endpoint,
                                                 const OpenAiLimits& limits);

}  // namespace lazygraph::nn
