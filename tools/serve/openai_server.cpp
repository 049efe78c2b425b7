#include "serve/openai_server.hpp"

#include "serve/http_server.hpp"

#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <memory>
#include <mutex>
#include <sstream>
#include <utility>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace lgserve {
namespace {

namespace nn = lazygraph::nn;
using nlohmann::json;

/// A JSON text that is valid whatever bytes a string holds (invalid UTF-8 replaced).
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

/// An OpenAI-style error body.
void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = {}) {
  const char* type = status == 429 ? "rate_limit_exceeded" : status >= 500 ? "server_error" : "invalid_request_error";
  json error = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) error["param"] = param;
  res.status = status;
  res.set_content(dump({{"error", error}}), "application/json");
}

/// The events of one request, from the engine's thread to the thread writing its answer.
class Channel {
 public:
  void push(const nn::GenerationEvent& e) {
    const std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(e);
    if (e.finished.has_value()) finished_ = true;
    ready_.notify_all();
  }
  /// The events so far (waiting up to `timeout` for one).
  std::deque<nn::GenerationEvent> take(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait_for(lock, timeout, [&] { return !events_.empty(); });
    return std::exchange(events_, {});
  }
  [[nodiscard]] bool finished() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return finished_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<nn::GenerationEvent> events_;
  bool finished_ = false;
};

/// OpenAI's finish_reason for a request that ended normally.
const char* finish_reason(nn::FinishReason r) {
  switch (r) {
    case nn::FinishReason::stop_token:
    case nn::FinishReason::stop_string:
      return "stop";
    default:
      return "length";  // max_tokens, a full context, or a pool too small for the sequence alone
  }
}

/// Whether a request ended without a normal answer (cancelled at shutdown, or the model failed).
bool failed(nn::FinishReason r) { return r == nn::FinishReason::cancelled || r == nn::FinishReason::error; }

/// Decrements a counter when the answer it counts is written.
struct ActiveGuard {
  explicit ActiveGuard(std::atomic<int>& n) : n_(&n) { ++*n_; }
  ActiveGuard(const ActiveGuard&) = delete;
  ActiveGuard& operator=(const ActiveGuard&) = delete;
  ActiveGuard(ActiveGuard&&) = delete;
  ActiveGuard& operator=(ActiveGuard&&) = delete;
  ~ActiveGuard() { --*n_; }
  std::atomic<int>* n_;
};

std::int64_t now_seconds() { return static_cast<std::int64_t>(std::time(nullptr)); }

}  // namespace

std::string ServedModel::kv_cache_summary() const {
  if (kv_cache != "paged") return "contiguous KV cache: " + kv_cache_reason;
  const std::size_t bytes =
      static_cast<std::size_t>(kv_blocks) * static_cast<std::size_t>(kv_block_size) * kv_bytes_per_position;
  return "paged KV cache of " + std::to_string(kv_blocks) + " blocks of " + std::to_string(kv_block_size) +
         " positions, " + std::to_string((bytes + (std::size_t{1} << 20U) - 1) >> 20U) + " MiB";
}

OpenAiServer::OpenAiServer(ServedModel model, nn::Engine* engine, std::string unavailable, std::size_t max_body_bytes)
    : model_(std::move(model)), engine_(engine), unavailable_(std::move(unavailable)) {
  limits_.max_body_bytes = max_body_bytes;
  limits_.context = model_.context;
  limits_.models = {model_.name};
}

std::vector<int> OpenAiServer::prompt_of(const nn::OpenAiRequest& r) const {
  if (r.prompt_ids.has_value()) return *r.prompt_ids;
  const bool chat = r.endpoint == nn::OpenAiEndpoint::chat_completions;
  const char* field = chat ? "messages" : "prompt";
  if (!model_.tokenizer.has_value()) {
    throw nn::RequestError(field,
                           "this server has no tokenizer (MODEL_DIR has neither tokenizer.json nor a "
                           "tokenizer.model this build reads): send the prompt as token ids");
  }
  const bool json_tokenizer = model_.tokenizer->file().extension() != ".model";
  std::string text = r.prompt;
  if (chat) {
    if (!model_.chat.has_value()) throw nn::RequestError("messages", model_.no_chat);
    if (!json_tokenizer) {
      throw nn::RequestError("messages",
                             "a chat needs MODEL_DIR/tokenizer.json: a SentencePiece model reads a "
                             "template's special tokens as text");
    }
    nn::RenderOptions options;
    options.add_generation_prompt = true;
    try {
      text = model_.chat->render(r.messages_json, options);
    } catch (const nn::ChatTemplateError& e) {
      throw nn::RequestError("messages", e.what());
    }
  }
  std::vector<int> ids;
  if (!json_tokenizer && model_.bos.has_value()) ids.push_back(*model_.bos);
  try {
    const std::vector<int> more = model_.tokenizer->encode(text, {.add_special_tokens = json_tokenizer && !chat});
    ids.insert(ids.end(), more.begin(), more.end());
  } catch (const nn::TokenizerError& e) {
    throw nn::RequestError(field, e.what());
  }
  return ids;
}

std::string OpenAiServer::metrics() const {
  const nn::EngineStats s = engine_ != nullptr ? engine_->stats() : nn::EngineStats{};
  std::ostringstream out;
  const auto metric = [&](const char* name, const char* type, const char* help, auto value) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n'
        << name << ' ' << value << '\n';
  };
  metric("lazygraph_up", "gauge", "1 when the server can generate, 0 when it cannot (see /health).",
         engine_ != nullptr ? 1 : 0);
  metric("lazygraph_queue_depth", "gauge", "Requests waiting for a slot (preempted ones included).", s.queued);
  metric("lazygraph_running_requests", "gauge", "Requests in a slot.", s.running);
  metric("lazygraph_kv_blocks_used", "gauge", "KV-cache blocks held by sequences.", s.kv_blocks_used);
  metric("lazygraph_kv_blocks_cached", "gauge", "KV-cache blocks only cached prompt prefixes hold (--prefix-cache).",
         s.kv_blocks_cached);
  metric("lazygraph_kv_blocks_total", "gauge", "KV-cache blocks in the pool.",
         engine_ != nullptr ? s.kv_blocks_total : model_.kv_blocks);
  out << "# HELP lazygraph_kv_cache_info How the KV cache is kept: paged (the pool is the cache) or contiguous "
         "(the pool accounts max_batch x context positions; /health says why).\n"
         "# TYPE lazygraph_kv_cache_info gauge\n"
      << "lazygraph_kv_cache_info{kv_cache=\"" << model_.kv_cache << "\",block_size=\"" << model_.kv_block_size
      << "\"} 1\n";
  metric("lazygraph_tokens_per_second", "gauge", "Tokens generated per second over the last 10 seconds.",
         s.tokens_per_second);
  metric("lazygraph_generated_tokens_total", "counter", "Tokens generated.", s.generated_tokens);
  metric("lazygraph_prompt_tokens_total", "counter", "Prompt tokens fed (recomputed ones included).", s.prompt_tokens);
  metric("lazygraph_cached_prompt_tokens_total", "counter", "Prompt tokens not fed: shared from a cached prefix.",
         s.cached_prompt_tokens);
  metric("lazygraph_requests_submitted_total", "counter", "Requests accepted.", s.submitted);
  metric("lazygraph_requests_finished_total", "counter", "Requests ended, for any reason.", s.finished);
  metric("lazygraph_requests_cancelled_total", "counter",
         "Requests cancelled: their client went away, or the drain at shutdown timed out.", s.cancelled);
  metric("lazygraph_requests_rejected_total", "counter", "Requests refused with 429 (queue full) or 503 (draining).",
         s.rejected);
  metric("lazygraph_preemptions_total", "counter", "Sequences preempted when the KV pool ran out.", s.preemptions);
  metric("lazygraph_steps_total", "counter", "Model steps.", s.steps);
  out << "# HELP lazygraph_step_seconds Wall time of the engine's steps that ran the model, the engine's host work "
         "included.\n"
         "# TYPE lazygraph_step_seconds summary\n"
      << "lazygraph_step_seconds_sum " << s.step_seconds_sum << '\n'
      << "lazygraph_step_seconds_count " << s.steps << '\n';
  metric("lazygraph_model_step_seconds_total", "counter",
         "Of lazygraph_step_seconds, the time in the model's steps (the rest is the engine's host work).",
         s.model_seconds_sum);
  out << "# HELP lazygraph_time_to_first_token_seconds From a request's submission to its first token.\n"
         "# TYPE lazygraph_time_to_first_token_seconds summary\n"
      << "lazygraph_time_to_first_token_seconds_sum " << s.first_token_seconds_sum << '\n'
      << "lazygraph_time_to_first_token_seconds_count " << s.first_token_count << '\n';
  return out.str();
}

void OpenAiServer::install(httplib::Server& server) {
  // A body over the limit is refused by httplib with 413 before it is read; the error handler names the field.
  server.set_payload_max_length(limits_.max_body_bytes);
  server.set_error_handler(httplib::Server::Handler([this](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) {
      if (res.status == 413) {
        send_error(res, 413, "body: more than the limit of " + std::to_string(limits_.max_body_bytes) + " bytes",
                   "body");
      } else {
        send_error(res, res.status, "HTTP " + std::to_string(res.status));
      }
    }
  }));

  server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    json health;
    if (engine_ == nullptr) {
      res.status = 503;
      health = {{"status", "unavailable"}, {"reason", unavailable_}};
    } else if (engine_->closed()) {
      res.status = 503;
      health = {{"status", "draining"}, {"reason", "the server is shutting down"}};
    } else {
      health = {{"status", "ok"}, {"model", model_.name}};
    }
    health["kv_cache"] = model_.kv_cache;
    if (!model_.kv_cache_reason.empty()) health["kv_cache_reason"] = model_.kv_cache_reason;
    health["kv_blocks"] = model_.kv_blocks;
    health["kv_block_size"] = model_.kv_block_size;
    res.set_content(dump(health), "application/json");
  });
  server.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json data = json::array({{{"id", model_.name},
                                    {"object", "model"},
                                    {"created", 0},
                                    {"owned_by", "lazygraph"},
                                    {"max_model_len", model_.context}}});
    res.set_content(dump({{"object", "list"}, {"data", data}}), "application/json");
  });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics(), "text/plain; version=0.0.4");
  });

  for (const auto endpoint : {nn::OpenAiEndpoint::completions, nn::OpenAiEndpoint::chat_completions}) {
    const bool chat = endpoint == nn::OpenAiEndpoint::chat_completions;
    server.Post(chat ? "/v1/chat/completions" : "/v1/completions", [this, endpoint, chat](const httplib::Request& req,
                                                                                          httplib::Response& res) {
      nn::OpenAiRequest r;
      nn::GenerationRequest g;
      try {
        r = nn::parse_openai_request(req.body, endpoint, limits_);
        g.prompt = prompt_of(r);
        if (static_cast<int>(g.prompt.size()) > model_.context) {
          throw nn::RequestError(chat ? "messages" : "prompt",
                                 std::to_string(g.prompt.size()) + " tokens" + (chat ? " as rendered" : "") +
                                     ", more than the context of " + std::to_string(model_.context) + " positions");
        }
        if (engine_ == nullptr) {
          send_error(res, 503, "this server cannot generate: " + unavailable_);
          return;
        }
      } catch (const nn::RequestError& e) {
        send_error(res, 400, e.what(), e.field());
        return;
      }
      g.max_tokens = r.max_tokens.value_or(0);
      g.sampling = r.sampling;
      g.stop_tokens = model_.eos;
      g.stop_strings = r.stop;
      auto channel = std::make_shared<Channel>();
      g.on_event = [channel](const nn::GenerationEvent& e) { channel->push(e); };
      std::optional<nn::RequestId> id;
      try {
        id = engine_->submit(std::move(g));
      } catch (const nn::RequestError& e) {
        send_error(res, 400, e.what(), e.field());
        return;
      }
      if (!id.has_value()) {
        if (engine_->closed()) {
          send_error(res, 503, "the server is shutting down");
        } else {
          send_error(res, 429, "the queue is full: try again later");
        }
        return;
      }
      const std::string object_id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(*id);
      const std::int64_t created = now_seconds();
      const std::string name = model_.name;

      if (!r.stream) {
        // The answer is written at the end; meanwhile the connection is checked between events (every 200 ms at
        // most), and a client that went away cancels its request, which frees its slot and blocks at the next step.
        const ActiveGuard guard(active_);
        const socket_t connection = current_connection();
        bool gone = false;
        std::string text;
        std::vector<int> tokens;
        nn::GenerationEvent last;
        while (!last.finished.has_value()) {
          for (nn::GenerationEvent& e : channel->take(std::chrono::milliseconds(200))) {
            text += e.text;
            if (e.token.has_value()) tokens.push_back(*e.token);
            last = std::move(e);
          }
          if (!gone && !last.finished.has_value() && connection >= 0 && peer_closed(connection)) {
            gone = true;
            engine_->cancel(*id);
          }
        }
        if (gone) return;  // nobody to answer
        if (failed(*last.finished)) {
          send_error(res, *last.finished == nn::FinishReason::error ? 500 : 503,
                     *last.finished == nn::FinishReason::error
                         ? "the model failed: " + last.error
                         : "the request was cancelled: the server is shutting down");
          return;
        }
        json choice = {{"index", 0}, {"finish_reason", finish_reason(*last.finished)}, {"logprobs", nullptr}};
        if (chat) {
          choice["message"] = {{"role", "assistant"}, {"content", text}};
        } else {
          choice["text"] = text;
          choice["token_ids"] = tokens;
        }
        const json usage = {{"prompt_tokens", last.prompt_tokens},
                            {"completion_tokens", last.completion_tokens},
                            {"total_tokens", last.prompt_tokens + last.completion_tokens}};
        res.set_content(dump({{"id", object_id},
                              {"object", chat ? "chat.completion" : "text_completion"},
                              {"created", created},
                              {"model", name},
                              {"choices", json::array({choice})},
                              {"usage", usage}}),
                        "application/json");
        return;
      }

      // Server-sent events: a chunk per event, then [DONE]. A client that goes away (a write fails, or its socket is
      // no longer writable: HttpServer's check sees a closed connection) cancels its request; so does a server
      // stopping before the end.
      ++active_;
      auto first = std::make_shared<bool>(true);
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [channel, chat, object_id, created, name, first](std::size_t, httplib::DataSink& sink) {
            if (!sink.is_writable()) return false;
            for (const nn::GenerationEvent& e : channel->take(std::chrono::milliseconds(100))) {
              if (e.finished.has_value() && failed(*e.finished)) {
                const std::string message = *e.finished == nn::FinishReason::error
                                                ? "the model failed: " + e.error
                                                : "the request was cancelled: the server is shutting down";
                const std::string chunk =
                    "data: " + dump({{"error", {{"message", message}, {"type", "server_error"}}}}) + "\n\n";
                if (!sink.write(chunk.data(), chunk.size())) return false;
                sink.done();
                return true;
              }
              json choice = {{"index", 0}, {"finish_reason", nullptr}};
              if (e.finished.has_value()) choice["finish_reason"] = finish_reason(*e.finished);
              if (chat) {
                choice["delta"] = {{"content", e.text}};
                if (*first) choice["delta"]["role"] = "assistant";
              } else {
                choice["text"] = e.text;
                choice["logprobs"] = nullptr;
              }
              *first = false;
              const std::string chunk = "data: " +
                                        dump({{"id", object_id},
                                              {"object", chat ? "chat.completion.chunk" : "text_completion"},
                                              {"created", created},
                                              {"model", name},
                                              {"choices", json::array({choice})}}) +
                                        "\n\n";
              if (!sink.write(chunk.data(), chunk.size())) return false;
              if (e.finished.has_value()) {
                const std::string done = "data: [DONE]\n\n";
                if (!sink.write(done.data(), done.size())) return false;
                sink.done();
                return true;
              }
            }
            return true;
          },
          [this, channel, id = *id](bool) {
            if (!channel->finished()) engine_->cancel(id);
            --active_;
          });
    });
  }
}

}  // namespace lgserve
