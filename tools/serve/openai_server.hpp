#pragma once
// The HTTP side of lazygraph-serve: OpenAI's /v1/completions and /v1/chat/completions (whole answers or server-sent
// events), /v1/models, /health and Prometheus /metrics, over an nn::Engine that runs elsewhere (or none, when there
// is no GPU: every route but /v1/completions' work then answers, and /health says why it cannot serve).

#include <atomic>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <lazygraph/nn/chat_template.hpp>
#include <lazygraph/nn/engine.hpp>
#include <lazygraph/nn/openai_request.hpp>
#include <lazygraph/nn/tokenizer.hpp>

namespace httplib {
class Server;
}

namespace lgserve {

/// What the server knows of its model, read from MODEL_DIR without a GPU.
struct ServedModel {
  std::string name;                                   ///< the name clients send as "model"
  int context = 0;                                    ///< positions per sequence
  std::optional<lazygraph::nn::Tokenizer> tokenizer;  ///< tokenizer.json, else tokenizer.model; none: ids only
  std::optional<int> bos;                             ///< put in front of text by a tokenizer.model (SentencePiece)
  std::optional<lazygraph::nn::ChatTemplate> chat;    ///< the chat template, when MODEL_DIR has a usable one
  std::string no_chat;                                ///< why there is none (what /v1/chat/completions answers)
  std::vector<int> eos;                               ///< the end-of-sequence ids that stop a request
  std::string kv_cache;                               ///< "paged" (the pool is the cache) or "contiguous"
  std::string kv_cache_reason;                        ///< why the cache is contiguous (empty when paged)
  int kv_blocks = 0;                                  ///< blocks in the pool
  int kv_block_size = 16;                             ///< positions per block
  std::size_t kv_bytes_per_position = 0;              ///< K and V of every layer

  /// One line on the KV cache: paged with its pool's blocks and bytes, or contiguous and why.
  [[nodiscard]] std::string kv_cache_summary() const;
};

/// The routes, over an engine that a thread of the caller steps.
class OpenAiServer {
 public:
  /// Serves `model` through `engine`; a null engine answers 503 with `unavailable` (why it cannot serve).
  OpenAiServer(ServedModel model, lazygraph::nn::Engine* engine, std::string unavailable, std::size_t max_body_bytes);

  /// Installs the routes, the error handler and the body limit on `server`.
  void install(httplib::Server& server);

  /// Requests whose answer is still being written (for draining at shutdown).
  [[nodiscard]] int active() const noexcept { return active_.load(); }

  /// The Prometheus text of /metrics.
  [[nodiscard]] std::string metrics() const;

 private:
  /// The prompt's token ids for `r`. \throws RequestError naming the prompt or messages.
  [[nodiscard]] std::vector<int> prompt_of(const lazygraph::nn::OpenAiRequest& r) const;

  ServedModel model_;
  lazygraph::nn::Engine* engine_;
  std::string unavailable_;
  lazygraph::nn::OpenAiLimits limits_;
  std::atomic<int> active_ = 0;
};

}  // namespace lgserve
