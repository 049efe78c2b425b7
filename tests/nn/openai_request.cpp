// Host tests of lazygraph::nn::parse_openai_request: the fields lazygraph-serve reads from OpenAI completion and chat
// bodies, and every refusal naming its field.
#include <doctest/doctest.h>

#include <lazygraph/nn/openai_request.hpp>

#include <string>
#include <vector>

using lazygraph::nn::OpenAiEndpoint;
using lazygraph::nn::OpenAiLimits;
using lazygraph::nn::OpenAiRequest;
using lazygraph::nn::parse_openai_request;
using lazygraph::nn::RequestError;

namespace {

OpenAiLimits test_limits() {
  OpenAiLimits l;
  l.max_body_bytes = 4096;
  l.context = 512;
  l.models = {"tiny"};
  return l;
}

OpenAiRequest completion_body(const std::string& body) {
  return parse_openai_request(body, OpenAiEndpoint::completions, test_limits());
}

OpenAiRequest chat_body(const std::string& body) {
  return parse_openai_request(body, OpenAiEndpoint::chat_completions, test_limits());
}

/// The field and message of the RequestError a completion body (or a chat body) gets; "" when it is accepted.
std::string openai_refusal(const std::string& body, OpenAiEndpoint endpoint = OpenAiEndpoint::completions) {
  try {
    static_cast<void>(parse_openai_request(body, endpoint, test_limits()));
  } catch (const RequestError& e) {
    const std::string what = e.what();
    CHECK(what.starts_with(e.field() + ": "));
    return what;
  }
  return "";
}

}  // namespace

TEST_CASE("a completion body gives its prompt, limits, sampling, stop strings and stream flag") {
  const OpenAiRequest r = completion_body(
      R"({"model": "tiny", "prompt": "Once upon", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 40,)"
      R"( "seed": 4294967295, "stop": "\n", "stream": true, "n": 1, "user": "someone", "logprobs": null})");
  CHECK(r.endpoint == OpenAiEndpoint::completions);
  CHECK(r.model == "tiny");
  CHECK(r.prompt == "Once upon");
  CHECK_FALSE(r.prompt_ids.has_value());
  CHECK(r.max_tokens == 7);
  CHECK(r.sampling.temperature == 0.5F);
  CHECK(r.sampling.top_p == 0.9F);
  CHECK(r.sampling.top_k == 40);
  CHECK(r.sampling.seed == 4294967295U);
  CHECK(r.stop == std::vector<std::string>{"\n"});
  CHECK(r.stream);

  const OpenAiRequest ids = completion_body(R"({"model": "tiny", "prompt": [1, 2, 3], "stop": ["a", "bc"]})");
  CHECK(ids.prompt_ids == std::vector<int>{1, 2, 3});
  CHECK_FALSE(ids.max_tokens.has_value());
  CHECK(ids.sampling.temperature == 0.0F);
  CHECK(ids.stop == std::vector<std::string>{"a", "bc"});
  CHECK_FALSE(ids.stream);
  CHECK(completion_body(R"({"model": "tiny", "prompt": ["one"]})").prompt == "one");
}

TEST_CASE("a chat body gives its messages as JSON for the chat template") {
  const OpenAiRequest r = chat_body(R"({"model": "tiny", "messages": [{"role": "system", "content": "Be brief."},)"
                                    R"( {"role": "user", "content": "Hi"}], "max_completion_tokens": 9})");
  CHECK(r.endpoint == OpenAiEndpoint::chat_completions);
  CHECK(r.messages_json == R"([{"content":"Be brief.","role":"system"},{"content":"Hi","role":"user"}])");
  CHECK(r.max_tokens == 9);
}

TEST_CASE("malformed JSON, a body over the limit or not an object is refused naming the body") {
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": )").starts_with("body: malformed JSON at byte 29 (in prompt)"));
  CHECK(openai_refusal(R"({"model": "tiny" "prompt": "x"})").starts_with("body: malformed JSON at byte"));
  CHECK(openai_refusal("[1, 2]") == "body: must be a JSON object, not an array");
  const std::string big = R"({"model": "tiny", "prompt": ")" + std::string(5000, 'a') + R"("})";
  CHECK(openai_refusal(big) == "body: is " + std::to_string(big.size()) + " bytes, more than the limit of 4096");
}

TEST_CASE("a string that is not UTF-8 is refused naming the field it is in") {
  CHECK(openai_refusal("{\"model\": \"tiny\", \"prompt\": \"ab\xff\"}")
            .starts_with("prompt: the string is not valid UTF-8"));
  CHECK(openai_refusal(
            "{\"model\": \"tiny\", \"messages\": [{\"role\": \"user\", \"content\": \"ok\"}, {\"role\": \"user\", "
            "\"content\": \"\xc3(\"}]}",
            OpenAiEndpoint::chat_completions)
            .starts_with("messages[1].content: the string is not valid UTF-8"));
  CHECK(openai_refusal("{\"model\": \"tiny\", \"prompt\": \"x\", \"stop\": [\"a\", \"\xe2\x82\"]}")
            .starts_with("stop[1]: the string is not valid UTF-8"));
}

TEST_CASE("max_tokens of 0, negative, beyond the context or not an integer is refused by name") {
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "max_tokens": 0})") ==
        "max_tokens: must be at least 1, not 0");
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "max_tokens": -3})") ==
        "max_tokens: must be at least 1, not -3");
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "max_tokens": 513})") ==
        "max_tokens: 513 is more than the context of 512 positions (prompt included)");
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "max_tokens": 99999999999999999999})")
            .starts_with("max_tokens: "));
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "max_tokens": 2.5})") ==
        "max_tokens: must be an integer, not a number 2.5");
  CHECK(
      openai_refusal(R"({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0})",
                     OpenAiEndpoint::chat_completions) == "max_completion_tokens: must be at least 1, not 0");
}

TEST_CASE("an unknown or missing model is refused naming the models served") {
  CHECK(openai_refusal(R"({"model": "gpt-4", "prompt": "x"})") ==
        "model: unknown model 'gpt-4'; this server serves 'tiny'");
  CHECK(openai_refusal(R"({"prompt": "x"})") == "model: is required");
  CHECK(openai_refusal(R"({"model": 3, "prompt": "x"})") == "model: must be a string, not an integer");
}

TEST_CASE("n other than 1 and options asking for what is not served are refused by name") {
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "n": 2})") ==
        "n: only 1 completion per request is served (n = 1), not 2");
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "best_of": 3})").starts_with("best_of: "));
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "echo": true})").starts_with("echo: "));
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "logprobs": 5})").starts_with("logprobs: "));
  CHECK(
      openai_refusal(R"({"model": "tiny", "prompt": "x", "presence_penalty": 0.5})").starts_with("presence_penalty: "));
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "logit_bias": {"1": 2}})").starts_with("logit_bias: "));
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "n": 1, "best_of": 1, "echo": false, "logprobs": false})")
            .empty());
}

TEST_CASE("prompts, messages, sampling values and stop strings out of range are refused by name") {
  CHECK(openai_refusal(R"({"model": "tiny"})") == "prompt: is required (a string, or an array of token ids)");
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": ""})") == "prompt: must not be empty");
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": 5})") ==
        "prompt: must be a string or an array of token ids, not an integer");
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": [1, -2]})") == "prompt[1]: must be at least 0, not -2");
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": ["a", "b"]})").starts_with("prompt: holds several strings"));
  CHECK(openai_refusal(R"({"model": "tiny", "messages": []})", OpenAiEndpoint::chat_completions) ==
        "messages: must hold at least one message");
  CHECK(openai_refusal(R"({"model": "tiny", "messages": [{"content": "x"}]})", OpenAiEndpoint::chat_completions) ==
        "messages[0].role: is required, a string");
  CHECK(openai_refusal(R"({"model": "tiny", "messages": [{"role": "user", "content": 1}]})",
                       OpenAiEndpoint::chat_completions) ==
        "messages[0].content: must be a string or null, not an integer");
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x"})", OpenAiEndpoint::chat_completions)
            .starts_with("messages: "));
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "temperature": -1})") ==
        "temperature: must be 0 (greedy) or more, not -1");
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "temperature": "hot"})") ==
        "temperature: must be a number, not a string \"hot\"");
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "top_p": 0})") == "top_p: must be in (0, 1], not 0");
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "top_k": -1})") == "top_k: must be at least 0, not -1");
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "seed": 4294967296})") ==
        "seed: must be at most 4294967295, not 4294967296");
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "stop": ""})") == "stop: must not be empty");
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "stop": ["a", 1]})") ==
        "stop[1]: must be a string, not an integer");
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]})") ==
        "stop: holds 5 strings, at most 4");
  CHECK(openai_refusal(R"({"model": "tiny", "prompt": "x", "stream": "yes"})") ==
        "stream: must be true or false, not a string");
}
