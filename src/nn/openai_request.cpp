#include "lazygraph/nn/openai_request.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace lazygraph::nn {
namespace {

using nlohmann::json;

/// `text` with every byte outside printable ASCII written as \xNN, so that a message quoting a client's bytes stays
/// ASCII (and valid JSON when the server returns it).
std::string ascii_escaped(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20U && byte < 0x7FU) {
      out += c;
    } else {
      constexpr const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[byte >> 4U];
      out += hex[byte & 0xFU];
    }
  }
  return out;
}

/// A SAX reader that builds nothing and keeps the path of the value being read ("messages[1].content"), so that a
/// parse error can name the field it happened in.
class PathTracker final : public nlohmann::json_sax<json> {
 public:
  bool null() override { return value(); }
  bool boolean(bool /*unused*/) override { return value(); }
  bool number_integer(number_integer_t /*unused*/) override { return value(); }
  bool number_unsigned(number_unsigned_t /*unused*/) override { return value(); }
  bool number_float(number_float_t /*unused*/, const string_t& /*unused*/) override { return value(); }
  bool string(string_t& /*unused*/) override { return value(); }
  bool binary(binary_t& /*unused*/) override { return value(); }
  bool start_object(std::size_t /*unused*/) override {
    stack_.push_back({.array = false, .index = 0, .key = {}});
    return true;
  }
  bool key(string_t& k) override {
    stack_.back().key = k;
    return true;
  }
  bool end_object() override { return end(); }
  bool start_array(std::size_t /*unused*/) override {
    stack_.push_back({.array = true, .index = 0, .key = {}});
    return true;
  }
  bool end_array() override { return end(); }
  bool parse_error(std::size_t position, const std::string& /*unused*/, const nlohmann::detail::exception& e) override {
    position_ = position;
    what_ = e.what();
    return false;
  }

  /// The path of the value being read when the error came; empty at the top level.
  [[nodiscard]] std::string path() const {
    std::string out;
    for (const Frame& f : stack_) {
      if (f.array) {
        out += "[" + std::to_string(f.index) + "]";
      } else if (!f.key.empty()) {
        out += (out.empty() ? "" : ".") + ascii_escaped(f.key);
      }
    }
    return out;
  }
  [[nodiscard]] std::size_t position() const noexcept { return position_; }
  [[nodiscard]] const std::string& what() const noexcept { return what_; }

 private:
  struct Frame {
    bool array = false;
    std::size_t index = 0;  ///< an array's: values read so far (the index of the one being read)
    std::string key;        ///< an object's: the last key read
  };
  bool value() {
    if (!stack_.empty() && stack_.back().array) ++stack_.back().index;
    return true;
  }
  bool end() {
    stack_.pop_back();
    return value();
  }

  std::vector<Frame> stack_;
  std::size_t position_ = 0;
  std::string what_;
};

/// The body as JSON. \throws RequestError naming "body", or the field whose string is not UTF-8.
json parse_json_body(std::string_view body) {
  try {
    return json::parse(body);
  } catch (const json::parse_error&) {
    PathTracker tracker;
    static_cast<void>(json::sax_parse(body, &tracker));
    const std::string path = tracker.path();
    if (tracker.what().find("UTF-8") != std::string::npos) {
      throw RequestError(path.empty() ? "body" : path,
                         "the string is not valid UTF-8 (byte " + std::to_string(tracker.position()) + " of the body)");
    }
    std::string why = tracker.what();
    if (const std::size_t dash = why.find(" - "); dash != std::string::npos) why.erase(0, dash + 3);
    throw RequestError("body", "malformed JSON at byte " + std::to_string(tracker.position()) +
                                   (path.empty() ? "" : " (in " + path + ")") + ": " + ascii_escaped(why));
  }
}

/// The JSON type of `v`, in words.
std::string type_of(const json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_null()) return "null";
  if (v.is_array()) return "an array";
  return "an object";
}

/// `v` as a short text for a message (long values cut).
std::string shown(const json& v) {
  std::string text = v.dump(-1, ' ', true, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  return text;
}

/// An integer field in [low, high]. \throws RequestError naming it.
std::int64_t integer_in(const json& v, const std::string& field, std::int64_t low, std::int64_t high) {
  if (!v.is_number_integer()) throw RequestError(field, "must be an integer, not " + type_of(v) + " " + shown(v));
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(high)) {
    throw RequestError(field, "must be at most " + std::to_string(high) + ", not " + shown(v));
  }
  const auto x = v.get<std::int64_t>();
  if (x < low) throw RequestError(field, "must be at least " + std::to_string(low) + ", not " + shown(v));
  if (x > high) throw RequestError(field, "must be at most " + std::to_string(high) + ", not " + shown(v));
  return x;
}

/// A number field. \throws RequestError naming it when it is not a finite number.
double finite_number(const json& v, const std::string& field) {
  if (!v.is_number()) throw RequestError(field, "must be a number, not " + type_of(v) + " " + shown(v));
  const auto x = v.get<double>();
  if (!std::isfinite(x)) throw RequestError(field, "must be finite, not " + shown(v));
  return x;
}

/// Refuses a field that is present with another value than those that ask for nothing.
void refuse_unless(const json& body, const char* field, const auto& accepts, const char* why) {
  if (const auto it = body.find(field); it != body.end() && !it->is_null() && !accepts(*it)) {
    throw RequestError(field, std::string(why) + ", not " + shown(*it));
  }
}

void read_prompt(const json& body, OpenAiRequest& r) {
  const auto it = body.find("prompt");
  if (it == body.end()) throw RequestError("prompt", "is required (a string, or an array of token ids)");
  if (it->is_string()) {
    r.prompt = it->get<std::string>();
    if (r.prompt.empty()) throw RequestError("prompt", "must not be empty");
    return;
  }
  if (!it->is_array()) {
    throw RequestError("prompt", "must be a string or an array of token ids, not " + type_of(*it));
  }
  if (it->empty()) throw RequestError("prompt", "must not be empty");
  if (it->size() == 1 && (*it)[0].is_string()) {  // a list of one prompt, as some clients send it
    r.prompt = (*it)[0].get<std::string>();
    if (r.prompt.empty()) throw RequestError("prompt[0]", "must not be empty");
    return;
  }
  std::vector<int> ids;
  for (std::size_t i = 0; i < it->size(); ++i) {
    const std::string field = "prompt[" + std::to_string(i) + "]";
    if ((*it)[i].is_string()) {
      throw RequestError("prompt", "holds several strings: one prompt per request (n = 1), as a string or token ids");
    }
    ids.push_back(static_cast<int>(integer_in((*it)[i], field, 0, std::numeric_limits<int>::max())));
  }
  r.prompt_ids = std::move(ids);
}

void read_messages(const json& body, OpenAiRequest& r) {
  const auto it = body.find("messages");
  if (it == body.end()) throw RequestError("messages", "is required (an array of {\"role\", \"content\"} objects)");
  if (!it->is_array()) throw RequestError("messages", "must be an array of messages, not " + type_of(*it));
  if (it->empty()) throw RequestError("messages", "must hold at least one message");
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string field = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw RequestError(field, "must be an object with role and content, not " + type_of(m));
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) throw RequestError(field + ".role", "is required, a string");
    const auto content = m.find("content");
    if (content != m.end() && !content->is_string() && !content->is_null()) {
      throw RequestError(field + ".content", "must be a string or null, not " + type_of(*content));
    }
  }
  r.messages_json = it->dump();
}

void read_stop(const json& body, OpenAiRequest& r) {
  const auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return;
  if (it->is_string()) {
    r.stop.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    if (it->size() > 4) throw RequestError("stop", "holds " + std::to_string(it->size()) + " strings, at most 4");
    for (std::size_t i = 0; i < it->size(); ++i) {
      if (!(*it)[i].is_string()) {
        throw RequestError("stop[" + std::to_string(i) + "]", "must be a string, not " + type_of((*it)[i]));
      }
      r.stop.push_back((*it)[i].get<std::string>());
    }
  } else {
    throw RequestError("stop", "must be a string or an array of strings, not " + type_of(*it));
  }
  for (std::size_t i = 0; i < r.stop.size(); ++i) {
    if (r.stop[i].empty())
      throw RequestError(it->is_string() ? "stop" : "stop[" + std::to_string(i) + "]", "must not be empty");
  }
}

void read_sampling(const json& body, OpenAiRequest& r) {
  if (const auto it = body.find("temperature"); it != body.end() && !it->is_null()) {
    const double t = finite_number(*it, "temperature");
    if (t < 0.0 || t > std::numeric_limits<float>::max()) {
      throw RequestError("temperature", "must be 0 (greedy) or more, not " + shown(*it));
    }
    r.sampling.temperature = static_cast<float>(t);
    if (t > 0.0 && !(r.sampling.temperature >= std::numeric_limits<float>::min())) {
      throw RequestError("temperature", "must be 0 or at least 1.18e-38, not " + shown(*it));
    }
  }
  if (const auto it = body.find("top_p"); it != body.end() && !it->is_null()) {
    const double p = finite_number(*it, "top_p");
    if (!(p > 0.0 && p <= 1.0)) throw RequestError("top_p", "must be in (0, 1], not " + shown(*it));
    r.sampling.top_p = std::max(static_cast<float>(p), std::numeric_limits<float>::min());
  }
  if (const auto it = body.find("top_k"); it != body.end() && !it->is_null()) {
    r.sampling.top_k = static_cast<int>(integer_in(*it, "top_k", 0, std::numeric_limits<int>::max()));
  }
  if (const auto it = body.find("seed"); it != body.end() && !it->is_null()) {
    r.sampling.seed = static_cast<std::uint32_t>(integer_in(*it, "seed", 0, 4294967295LL));
  }
}

void read_max_tokens(const json& body, OpenAiRequest& r, const OpenAiLimits& limits) {
  for (const char* field : {"max_tokens", "max_completion_tokens"}) {
    if (r.endpoint == OpenAiEndpoint::completions && std::string_view(field) == "max_completion_tokens") break;
    const auto it = body.find(field);
    if (it == body.end() || it->is_null()) continue;
    if (!it->is_number_integer()) {
      throw RequestError(field, "must be an integer, not " + type_of(*it) + " " + shown(*it));
    }
    if (it->is_number_unsigned() ? it->get<std::uint64_t>() > static_cast<std::uint64_t>(limits.context)
                                 : it->get<std::int64_t>() > limits.context) {
      throw RequestError(field, shown(*it) + " is more than the context of " + std::to_string(limits.context) +
                                    " positions (prompt included)");
    }
    r.max_tokens = static_cast<int>(integer_in(*it, field, 1, limits.context));
  }
}

void refuse_unsupported(const json& body) {
  refuse_unless(
      body, "n", [](const json& v) { return v.is_number_integer() && v.get<std::int64_t>() == 1; },
      "only 1 completion per request is served (n = 1)");
  refuse_unless(
      body, "best_of", [](const json& v) { return v.is_number_integer() && v.get<std::int64_t>() == 1; },
      "only 1 candidate per request is served (best_of = 1)");
  refuse_unless(
      body, "echo", [](const json& v) { return v.is_boolean() && !v.get<bool>(); },
      "echoing the prompt is not served (echo = false)");
  refuse_unless(
      body, "logprobs", [](const json& v) { return v.is_boolean() ? !v.get<bool>() : v.is_number_integer() && v == 0; },
      "log probabilities are not served");
  refuse_unless(
      body, "top_logprobs", [](const json& v) { return v.is_number_integer() && v == 0; },
      "log probabilities are not served");
  refuse_unless(
      body, "suffix", [](const json& v) { return v.is_string() && v.get<std::string>().empty(); },
      "a suffix is not served");
  refuse_unless(
      body, "logit_bias", [](const json& v) { return v.is_object() && v.empty(); }, "logit biases are not served");
  for (const char* penalty : {"presence_penalty", "frequency_penalty"}) {
    refuse_unless(
        body, penalty, [](const json& v) { return v.is_number() && v.get<double>() == 0.0; },
        "penalties are not served (0 only)");
  }
}

}  // namespace

OpenAiRequest parse_openai_request(std::string_view body, OpenAiEndpoint endpoint, const OpenAiLimits& limits) {
  if (body.size() > limits.max_body_bytes) {
    throw RequestError("body", "is " + std::to_string(body.size()) + " bytes, more than the limit of " +
                                   std::to_string(limits.max_body_bytes));
  }
  const json j = parse_json_body(body);
  if (!j.is_object()) throw RequestError("body", "must be a JSON object, not " + type_of(j));
  OpenAiRequest r;
  r.endpoint = endpoint;

  const auto model = j.find("model");
  if (model == j.end() || !model->is_string()) {
    throw RequestError("model", model == j.end() ? "is required" : "must be a string, not " + type_of(*model));
  }
  r.model = model->get<std::string>();
  bool known = false;
  std::string served;
  for (const std::string& name : limits.models) {
    known = known || name == r.model;
    served += (served.empty() ? "'" : ", '") + name + "'";
  }
  if (!known) {
    throw RequestError("model", "unknown model '" + ascii_escaped(r.model) + "'; this server serves " +
                                    (served.empty() ? "none" : served));
  }
  refuse_unsupported(j);
  if (endpoint == OpenAiEndpoint::completions) {
    read_prompt(j, r);
  } else {
    read_messages(j, r);
  }
  read_max_tokens(j, r, limits);
  read_sampling(j, r);
  read_stop(j, r);
  if (const auto it = j.find("stream"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) throw RequestError("stream", "must be true or false, not " + type_of(*it));
    r.stream = it->get<bool>();
  }
  return r;
}

}  // namespace lazygraph::nn
