// lazygraph-serve: serves a Hugging Face Llama-family checkpoint folder over OpenAI's HTTP API (cpp-httplib):
// /v1/completions and /v1/chat/completions (whole answers or server-sent events), /v1/models, /health and
// Prometheus /metrics, with the requests scheduled by nn::Engine over the decoder's batch steps (docs/serving.md).
// The decoder keeps its KV cache paged (the engine's pool is the cache) where the model allows it, else contiguous.
//
// Everything that needs no GPU is read first (the options, MODEL_DIR, the checkpoint's config and tensors, the
// tokenizer, the chat template, generation_config.json), so a mistake is reported the same way on any machine.
// Without a GPU the server still starts: /health answers 503 with the reason, and generation requests 503.
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <httplib.h>
#include <lazygraph/driver.hpp>
#include <lazygraph/nn/chat_template.hpp>
#include <lazygraph/nn/checkpoint.hpp>
#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/decoder_step_model.hpp>
#include <lazygraph/nn/engine.hpp>
#include <lazygraph/nn/generation_config.hpp>
#include <lazygraph/nn/kernels.hpp>
#include <lazygraph/nn/kv_block_pool.hpp>
#include <lazygraph/nn/tokenizer.hpp>

#include "serve/http_server.hpp"
#include "serve/openai_server.hpp"

#ifndef LAZYGRAPH_VERSION
#error "build with -DLAZYGRAPH_VERSION=\"x.y.z\" (tools/meson.build passes the Meson project version)"
#endif

namespace {

namespace fs = std::filesystem;
namespace nn = lazygraph::nn;

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;

constexpr const char* usage_text = R"(Usage: lazygraph-serve MODEL_DIR [options]

Serves a Hugging Face Llama-family checkpoint (MODEL_DIR: a folder with config.json and model.safetensors, or
shards with model.safetensors.index.json) over OpenAI's HTTP API, on a GPU:
  POST /v1/completions        {"model", "prompt" (text or token ids), "max_tokens", "temperature", "top_p",
                               "top_k", "seed", "stop", "stream"}
  POST /v1/chat/completions   {"model", "messages", ...}: rendered with the model's chat template
  GET  /v1/models             the model served (its name: --model-name)
  GET  /health                200 when it can serve; 503 with the reason when it cannot (no GPU) or drains
  GET  /metrics               Prometheus text: tokens/s, queue depth, KV blocks in use, time to first token, ...
"stream": true answers as server-sent events. A bad request is answered 400 naming the field; a full queue 429.
Without a GPU the server starts anyway and says why it cannot generate. SIGTERM or SIGINT stops accepting
requests, lets those in flight finish (at most --drain-timeout seconds, then cancels them) and exits 0.

Options (--name VALUE or --name=VALUE, each at most once):
  --host HOST        the address to listen on (default 127.0.0.1)
  --port N           the port, 0 to 65535 (default 8000; 0: any free port, printed at start)
  --model-name NAME  the name clients send as "model" (default: MODEL_DIR's folder name)
  --context N        positions per sequence, prompt included, 1 to 131072 with the paged KV cache (8192 with the
                     contiguous one) and at most the model's max_position_embeddings (default:
                     max_position_embeddings, at most 4096)
  --max-batch N      sequences decoded at once, 1 to 256 (default 8); above 8 needs the paged KV cache, whose steps
                     of more than 8 rows run on tensor cores (sm_80 or newer; quantized weights dequantized each step)
  --kv-cache MODE    auto (default): paged where the model allows it, else contiguous; paged: refuse a model it
                     cannot run; contiguous: max-batch x context positions
  --kv-blocks N      KV blocks in the pool, from 1 (default: max-batch x ceil(context / block size), what the
                     contiguous cache holds, or, paged, as many as fit in 90% of the GPU's memory beside the
                     weights if fewer); paged, the pool is the cache and bounds the positions of all sequences
                     together; contiguous, it only accounts them
  --kv-block-size N  positions per KV block, 16 or 32 (default 16)
  --max-queue N      requests waiting at most, from 1 (default 64); more are answered 429
  --max-prompt-tokens N
                     prompt tokens one step feeds at most, 0 (no limit) or more (default 8192); a longer prompt
                     is fed in parts over several steps and later prompts wait, so that neither a burst of
                     requests nor one long prompt holds the running ones' tokens
  --prefix-cache on|off
                     keep the whole KV blocks of prompts fed so that later prompts that begin with the same
                     tokens share them and feed only the rest (default off; the paged KV cache only)
  --max-body BYTES   the largest request body, from 1 (default 1048576); larger ones are answered 413
  --threads N        HTTP worker threads, 1 to 4096 (default 512; each streaming answer holds one)
  --drain-timeout S  seconds SIGTERM waits for requests in flight, 0 to 3600 (default 30)
  --device N         the GPU to run on, from 0 (default 0)
  --help, -h         print this text
  --version          print the lazygraph version

Exit status:
  0   after SIGTERM or SIGINT, once drained
  1   MODEL_DIR's config.json, weights, generation_config.json, tokenizer or chat template cannot be used (the
      message names the file), the address cannot be listened on, the GPU failed, or the GPU cannot hold one
      sequence's KV blocks beside the weights
  2   a bad command line: an unknown option, one given twice, a value out of range, a MODEL_DIR that does not
      exist or is not a folder, a --context beyond the model's or beyond 8192 on the contiguous KV cache, a
      --max-batch above 8 on the contiguous KV cache, --kv-cache paged for a model it cannot run, a --device
      this machine lacks
)";

/// A mistake on the command line: exit 2.
class UsageProblem : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Options {
  fs::path model_dir;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model_name;
  int context = 0;
  int max_batch = nn::kMaxRows;
  std::string kv_cache = "auto";  ///< auto, paged or contiguous
  int kv_blocks = 0;              ///< 0: max_batch whole contexts
  int kv_block_size = 16;
  int max_queue = 64;
  int max_prompt_tokens = 8192;  ///< nn::EngineOptions::max_prompt_tokens
  bool prefix_cache = false;     ///< nn::EngineOptions::cache_prefixes
  long long max_body = 1 << 20;
  int threads = 512;
  int drain_timeout = 30;
  int device = 0;
  bool help = false;
  bool version = false;
};

long long integer_option(std::string_view name, std::string_view text, long long low, long long high) {
  long long v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < low || v > high) {
    throw UsageProblem(std::string(name) + " must be an integer from " + std::to_string(low) + " to " +
                       std::to_string(high) + ", not '" + std::string(text) + "'");
  }
  return v;
}

Options parse_options(int argc, char** argv) {
  Options o;
  std::vector<std::string> seen;
  std::optional<fs::path> dir;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      o.help = true;
      continue;
    }
    if (arg == "--version") {
      o.version = true;
      continue;
    }
    if (!arg.starts_with("--")) {
      if (dir.has_value()) throw UsageProblem("a second MODEL_DIR '" + arg + "' (one model per server)");
      dir = arg;
      continue;
    }
    std::string value;
    bool has_value = false;
    if (const std::size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg.resize(eq);
      has_value = true;
    }
    static const std::vector<std::string> known = {
        "--host",         "--port",      "--model-name",    "--context",       "--max-batch",
        "--kv-cache",     "--kv-blocks", "--kv-block-size", "--max-queue",     "--max-prompt-tokens",
        "--prefix-cache", "--max-body",  "--threads",       "--drain-timeout", "--device"};
    if (std::find(known.begin(), known.end(), arg) == known.end()) throw UsageProblem("unknown option '" + arg + "'");
    if (std::find(seen.begin(), seen.end(), arg) != seen.end()) throw UsageProblem(arg + " is given twice");
    seen.push_back(arg);
    if (!has_value) {
      if (i + 1 >= argc) throw UsageProblem(arg + " needs a value");
      value = argv[++i];
    }
    if (arg == "--host") {
      if (value.empty()) throw UsageProblem("--host must not be empty");
      o.host = value;
    } else if (arg == "--port") {
      o.port = static_cast<int>(integer_option(arg, value, 0, 65535));
    } else if (arg == "--model-name") {
      if (value.empty()) throw UsageProblem("--model-name must not be empty");
      o.model_name = value;
    } else if (arg == "--context") {
      o.context = static_cast<int>(integer_option(arg, value, 1, nn::kMaxPagedContext));
    } else if (arg == "--max-batch") {
      o.max_batch = static_cast<int>(integer_option(arg, value, 1, nn::kMaxWideRows));
    } else if (arg == "--kv-cache") {
      if (value != "auto" && value != "paged" && value != "contiguous") {
        throw UsageProblem("--kv-cache must be auto, paged or contiguous, not '" + value + "'");
      }
      o.kv_cache = value;
    } else if (arg == "--kv-blocks") {
      o.kv_blocks = static_cast<int>(integer_option(arg, value, 1, 1 << 24));
    } else if (arg == "--kv-block-size") {
      if (value != "16" && value != "32") throw UsageProblem("--kv-block-size must be 16 or 32, not '" + value + "'");
      o.kv_block_size = value == "16" ? 16 : 32;
    } else if (arg == "--max-queue") {
      o.max_queue = static_cast<int>(integer_option(arg, value, 1, 1 << 20));
    } else if (arg == "--max-prompt-tokens") {
      o.max_prompt_tokens = static_cast<int>(integer_option(arg, value, 0, 1 << 30));
    } else if (arg == "--prefix-cache") {
      if (value != "on" && value != "off") throw UsageProblem("--prefix-cache must be on or off, not '" + value + "'");
      o.prefix_cache = value == "on";
    } else if (arg == "--max-body") {
      o.max_body = integer_option(arg, value, 1, 1LL << 32);
    } else if (arg == "--threads") {
      o.threads = static_cast<int>(integer_option(arg, value, 1, 4096));
    } else if (arg == "--drain-timeout") {
      o.drain_timeout = static_cast<int>(integer_option(arg, value, 0, 3600));
    } else if (arg == "--device") {
      o.device = static_cast<int>(integer_option(arg, value, 0, 1 << 16));
    }
  }
  if (o.help || o.version) return o;
  if (!dir.has_value()) throw UsageProblem("MODEL_DIR is missing");
  o.model_dir = *dir;
  std::error_code ec;
  const fs::file_type type = fs::status(o.model_dir, ec).type();
  if (type == fs::file_type::not_found) throw UsageProblem("MODEL_DIR '" + o.model_dir.string() + "' does not exist");
  if (!ec && type != fs::file_type::directory) {
    throw UsageProblem("MODEL_DIR '" + o.model_dir.string() + "' is not a folder");
  }
  if (o.model_name.empty()) {
    const fs::path absolute = fs::weakly_canonical(fs::absolute(o.model_dir), ec);
    o.model_name = (ec ? o.model_dir : absolute).filename().string();
    if (o.model_name.empty()) o.model_name = "model";
  }
  return o;
}

/// What serving needs from MODEL_DIR, read without a GPU. \throws UsageProblem for a --context beyond the model's;
/// CheckpointError, TokenizerError for files that cannot be used.
struct Plan {
  lgserve::ServedModel served;
  nn::LoadOptions load;
  bool bf16 = false;
  int engine_kv_blocks = 0;  ///< EngineOptions::kv_blocks (0 with a paged cache: the decoder's pool)
  /// The weights' device memory, and with quantized experts the scratch of two expert stacks in 16 bits their prompts
  /// are dequantized into (nn::prefill_expert_scratch), allocated at the first prompt on tensor cores.
  std::size_t weight_bytes = 0;
};

/// Why the paged KV cache cannot serve `llama` as `o` asks, or empty when it can: only --kv-cache contiguous says so
/// here (what the decoder refuses on a paged cache, the persistent backend and the unfused block, is not what this
/// server runs; open() finds anything else).
std::string paged_refusal(const Options& o) {
  if (o.kv_cache == "contiguous") return "--kv-cache contiguous";
  return {};
}

/// The checkpoint opened for a paged decoder, or, where the paged cache cannot serve it and --kv-cache is auto, for
/// a contiguous one (plan.served says which, and why). \throws UsageProblem for --kv-cache paged on a model it
/// cannot run, and for a --context beyond kMaxContext on the contiguous cache.
nn::DecoderCheckpoint open_checkpoint(const Options& o, Plan& plan) {
  const int context = plan.load.context;
  const auto blocks_for = [&](int block_size) { return o.max_batch * ((context + block_size - 1) / block_size); };
  std::string refusal = paged_refusal(o);
  if (refusal.empty()) {
    nn::LoadOptions paged = plan.load;
    paged.kv_block_size = o.kv_block_size;
    paged.kv_blocks = o.kv_blocks > 0 ? o.kv_blocks : blocks_for(o.kv_block_size);
    paged.attention_blocks = 0;  // the grouped kernels, split as the library picks: long contexts need it
    try {
      nn::DecoderCheckpoint checkpoint = nn::DecoderCheckpoint::open(o.model_dir, paged);
      plan.load = paged;
      plan.served.kv_cache = "paged";
      plan.served.kv_blocks = paged.kv_blocks;
      return checkpoint;
    } catch (const nn::CheckpointError& e) {
      refusal = e.what();  // what the paged cache refuses, or a file that cannot be used (opened again below)
    }
  }
  if (o.kv_cache == "paged" || context > nn::kMaxContext || o.max_batch > nn::kMaxRows) {
    nn::LoadOptions contiguous = plan.load;
    contiguous.context = std::min(context, nn::kMaxContext);
    contiguous.max_batch = std::min(o.max_batch, nn::kMaxRows);
    (void)nn::DecoderCheckpoint::open(o.model_dir, contiguous);  // a file that cannot be used: exit 1 naming it
    if (o.kv_cache == "paged") throw UsageProblem("--kv-cache paged: " + refusal);
    if (o.max_batch > nn::kMaxRows) {
      throw UsageProblem("--max-batch " + std::to_string(o.max_batch) + " is more than " +
                         std::to_string(nn::kMaxRows) + ", which needs the paged KV cache (it is contiguous because " +
                         refusal + ")");
    }
    throw UsageProblem("--context " + std::to_string(context) + " is more than " + std::to_string(nn::kMaxContext) +
                       ", the most the contiguous KV cache holds (it is contiguous because " + refusal + ")");
  }
  nn::DecoderCheckpoint checkpoint = nn::DecoderCheckpoint::open(o.model_dir, plan.load);
  plan.served.kv_cache = "contiguous";
  plan.served.kv_cache_reason = refusal;
  plan.served.kv_blocks = o.kv_blocks > 0 ? o.kv_blocks : blocks_for(o.kv_block_size);
  plan.engine_kv_blocks = plan.served.kv_blocks;
  return checkpoint;
}

Plan plan_serving(const Options& o) {
  Plan plan;
  const nn::LlamaConfig llama = nn::LlamaConfig::load(o.model_dir / "config.json");
  if (o.context > llama.max_position_embeddings) {
    throw UsageProblem("--context " + std::to_string(o.context) + " is more than the model's " +
                       "max_position_embeddings (" + std::to_string(llama.max_position_embeddings) + " in " +
                       (o.model_dir / "config.json").string() + ")");
  }
  plan.load.context = o.context > 0 ? o.context : std::min(llama.max_position_embeddings, 4096);
  plan.load.max_batch = o.max_batch;
  plan.load.progress = true;
  plan.served.kv_block_size = o.kv_block_size;
  const nn::DecoderCheckpoint checkpoint = open_checkpoint(o, plan);
  plan.weight_bytes = checkpoint.device_bytes();
  if (const nn::DecoderConfig& c = checkpoint.config(); c.mixture_of_experts() && checkpoint.quantization().mlp) {
    plan.weight_bytes += std::size_t{2} * 2 * static_cast<std::size_t>(c.moe.experts) *
                         static_cast<std::size_t>(c.moe.expert_width) * static_cast<std::size_t>(c.d);
  }
  // K and V of every layer, in fp16 or bf16 (2 bytes).
  plan.served.kv_bytes_per_position = std::size_t{2} * 2 * static_cast<std::size_t>(checkpoint.config().layers) *
                                      static_cast<std::size_t>(checkpoint.config().kv_dim());
  plan.bf16 = checkpoint.llama_config().torch_dtype == "bfloat16";
  if (const auto& q = checkpoint.llama_config().quantization; q.has_value()) {
    const std::optional<nn::QuantizedFormat> format = q->attention ? q->attention : q->mlp ? q->mlp : q->lm_head;
    plan.bf16 = format.has_value() && format->scale_type == nn::ScaleType::bf16;
  }
  const nn::SpecialTokens special = nn::GenerationConfig::load(o.model_dir).special_tokens(checkpoint.llama_config());

  lgserve::ServedModel& m = plan.served;
  m.name = o.model_name;
  m.context = checkpoint.config().context;
  m.eos = special.eos;
  std::error_code ec;
  if (const fs::path json = o.model_dir / "tokenizer.json"; fs::exists(json, ec)) {
    m.tokenizer = nn::Tokenizer::from_json(json);
  } else if (const fs::path model = o.model_dir / "tokenizer.model";
             fs::exists(model, ec) && nn::Tokenizer::sentencepiece_supported()) {
    m.tokenizer = nn::Tokenizer::from_sentencepiece(model);
    m.bos = special.bos;
  }
  if (m.tokenizer.has_value() && m.tokenizer->size() > checkpoint.config().vocab) {
    throw nn::CheckpointError(m.tokenizer->file(), "",
                              std::to_string(m.tokenizer->size()) + " tokens, more than the model's vocabulary of " +
                                  std::to_string(checkpoint.config().vocab));
  }
  try {
    m.chat = nn::ChatTemplate::load(o.model_dir);
  } catch (const nn::ChatTemplateError& e) {
    m.no_chat = std::string("this model has no chat template lazygraph can use: ") + e.what();
  }
  return plan;
}

/// The engine thread's loop: steps while there is work, until `stop`.
void step_until(nn::Engine& engine, const std::atomic<bool>& stop) {
  while (!stop.load()) {
    if (!engine.step()) engine.wait_for_work(std::chrono::milliseconds(50));
  }
}

/// The decoder, its step model and engine on a GPU, and the thread that steps it.
struct GpuEngine {
  virtual ~GpuEngine() = default;
  virtual nn::Engine& engine() = 0;
};

template <nn::Element T>
struct GpuEngineOf final : GpuEngine {
  GpuEngineOf(const lazygraph::Device& device, const Options& o, const Plan& plan)
      : stream(device),
        library(nn::kernel_library(device)),
        decoder(nn::load_decoder<T>(stream, library, o.model_dir, plan.load)),
        model(decoder),
        engine_(model,
                nn::EngineOptions{.kv_blocks = plan.engine_kv_blocks,
                                  .block_size = o.kv_block_size,
                                  .max_queue = o.max_queue,
                                  .max_prompt_tokens = o.max_prompt_tokens,
                                  .cache_prefixes = o.prefix_cache},
                plan.served.tokenizer) {}
  nn::Engine& engine() override { return engine_; }

  lazygraph::Stream stream;
  lazygraph::KernelLibrary library;
  nn::BasicDecoder<T> decoder;
  nn::BasicDecoderStepModel<T> model;
  nn::Engine engine_;
};

/// SIGTERM and SIGINT, blocked in every thread from the start (the driver's threads included, which would otherwise
/// take them and end the process) and taken by one thread through sigwait.
sigset_t stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  return signals;
}

/// A paged pool of the default size shrunk to what fits `device` beside the weights (kv_blocks_that_fit: 90 % of its
/// memory, counting what is in use already). \throws std::runtime_error (exit 1) when not even one sequence of the
/// whole context fits.
void fit_kv_pool(const lazygraph::Device& device, const Options& o, Plan& plan) {
  const std::size_t block_bytes = static_cast<std::size_t>(o.kv_block_size) * plan.served.kv_bytes_per_position;
  const std::size_t free_bytes = device.free_memory();
  const int fit = nn::kv_blocks_that_fit({.total_bytes = device.total_memory(),
                                          .free_bytes = free_bytes,
                                          .weight_bytes = plan.weight_bytes,
                                          .block_bytes = block_bytes});
  if (fit >= plan.load.kv_blocks) return;
  const int one_sequence = (plan.served.context + o.kv_block_size - 1) / o.kv_block_size;
  const auto gib = [](std::size_t bytes) {
    char text[32] = {};
    std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / static_cast<double>(1U << 30U));
    return std::string(text);
  };
  const std::string gpu =
      "GPU " + std::to_string(o.device) + " (" + gib(device.total_memory()) + ", " + gib(free_bytes) + " free)";
  if (fit == 0) {  // the weights and what is in use leave nothing: no --context helps
    throw std::runtime_error(gpu + " has no room for one KV block beside the weights (" + gib(plan.weight_bytes) +
                             ") within 90% of its memory: free the GPU, or serve a smaller or quantized model");
  }
  if (fit < one_sequence) {
    throw std::runtime_error(gpu + " holds " + std::to_string(fit) + " KV blocks beside the weights (" +
                             gib(plan.weight_bytes) + "), fewer than the " + std::to_string(one_sequence) +
                             " one sequence of --context " + std::to_string(plan.served.context) +
                             " needs: lower --context");
  }
  std::fprintf(stderr,
               "lazygraph-serve: %d KV blocks fit GPU %d beside the weights (90%% of its memory), fewer than the %d "
               "of --max-batch x context: the pool holds %d\n",
               fit, o.device, plan.load.kv_blocks, fit);
  plan.load.kv_blocks = fit;
  plan.served.kv_blocks = fit;
}

int serve(const Options& o) {
  const sigset_t signals = stop_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  Plan plan = plan_serving(o);
  std::string unavailable;
  std::unique_ptr<GpuEngine> gpu;
  if (!lazygraph::gpu_available(&unavailable)) {
    unavailable = "no GPU to run on: " + unavailable;
  } else {
    const int count = lazygraph::Device::count();
    if (o.device >= count) {
      throw UsageProblem("--device " + std::to_string(o.device) + " is not a GPU of this machine, which has " +
                         std::to_string(count));
    }
    const lazygraph::Device device = lazygraph::Device::get(o.device);
    if (o.kv_blocks == 0 && plan.served.kv_cache == "paged") fit_kv_pool(device, o, plan);
    // Steps of 2 to 8 rows on tensor cores where the GPU has them: 8 rows about 1.5x a row's time instead of 2.5x. A
    // row's bits then depend on the batch it runs in, as they do anyway in a server (packed prompts, the wide step).
    plan.load.tensor_cores = device.compute_capability().major >= 8;
    std::fprintf(stderr, "lazygraph-serve: loading %s onto GPU %d (%s)\n", o.model_dir.c_str(), o.device,
                 device.name().c_str());
    if (plan.bf16) {
      gpu = std::make_unique<GpuEngineOf<lazygraph::bfloat16>>(device, o, plan);
    } else {
      gpu = std::make_unique<GpuEngineOf<lazygraph::half>>(device, o, plan);
    }
  }
  nn::Engine* engine = gpu != nullptr ? &gpu->engine() : nullptr;
  lgserve::OpenAiServer routes(plan.served, engine, unavailable, static_cast<std::size_t>(o.max_body));

  lgserve::HttpServer server;
  const auto threads = static_cast<std::size_t>(o.threads);
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server.set_read_timeout(5);
  server.set_write_timeout(5);
  server.set_keep_alive_timeout(1);
  socket_t listening = -1;  // the socket httplib binds: the last it sets options on
  server.set_socket_options([&listening](socket_t sock) {
    httplib::default_socket_options(sock);
    listening = sock;
  });
  routes.install(server);
  int port = o.port;
  if (o.port == 0) {
    port = server.bind_to_any_port(o.host);
  } else if (!server.bind_to_port(o.host, o.port)) {
    port = -1;
  }
  // httplib listens with a backlog of 5 connections (CPPHTTPLIB_LISTEN_BACKLOG, fixed when Debian built it), so
  // clients connecting by the thousand waited for the kernel to retry their SYNs (seconds): listening again on the
  // bound socket raises the backlog.
  if (port >= 0 && listening >= 0) ::listen(listening, SOMAXCONN);
  if (port < 0) {
    std::fprintf(stderr,
                 "lazygraph-serve: cannot listen on %s:%d (address in use, or not an address of this "
                 "machine)\n",
                 o.host.c_str(), o.port);
    return kExitRuntime;
  }

  // SIGTERM and SIGINT reach this thread, through sigwait: it drains and stops the server.
  std::atomic<bool> stop_engine = false;
  std::atomic<bool> signalled = false;
  std::thread stepper;
  if (engine != nullptr) stepper = std::thread([&] { step_until(*engine, stop_engine); });
  std::thread waiter([&] {
    int got = 0;
    sigwait(&signals, &got);
    signalled = true;
    std::fprintf(stderr, "lazygraph-serve: %s: draining\n", got == SIGTERM ? "SIGTERM" : "SIGINT");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.drain_timeout);
    const auto drained = [&] { return (engine == nullptr || engine->idle()) && routes.active() == 0; };
    if (engine != nullptr) engine->close();
    while (!drained() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!drained() && engine != nullptr) {
      std::fprintf(stderr, "lazygraph-serve: cancelling the requests still running after %d s\n", o.drain_timeout);
      engine->cancel_all();
      const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (!drained() && std::chrono::steady_clock::now() < grace) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    server.stop();
  });

  if (o.prefix_cache && plan.served.kv_cache != "paged") {
    std::fprintf(stderr,
                 "lazygraph-serve: --prefix-cache on is ignored: prefixes are shared on the paged KV cache only\n");
  }
  std::fprintf(stderr, "lazygraph-serve: serving '%s' (context %d; %s) on http://%s:%d/%s\n", plan.served.name.c_str(),
               plan.served.context, plan.served.kv_cache_summary().c_str(), o.host.c_str(), port,
               engine != nullptr ? "" : (" -- cannot generate: " + unavailable).c_str());
  std::printf("listening on %s:%d\n", o.host.c_str(), port);
  std::fflush(stdout);
  const bool listened = server.listen_after_bind();
  if (!signalled) kill(getpid(), SIGTERM);  // listening failed: wake the waiter, which finds nothing to drain
  waiter.join();
  stop_engine = true;
  if (stepper.joinable()) stepper.join();
  if (!listened) {
    std::fprintf(stderr, "lazygraph-serve: the server stopped listening on %s:%d unexpectedly\n", o.host.c_str(), port);
    return kExitRuntime;
  }
  std::fprintf(stderr, "lazygraph-serve: stopped\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse_options(argc, argv);
  } catch (const UsageProblem& e) {
    std::fprintf(stderr, "lazygraph-serve: %s; see lazygraph-serve --help\n", e.what());
    return kExitUsage;
  }
  if (options.help) {
    std::fputs(usage_text, stdout);
    return 0;
  }
  if (options.version) {
    std::printf("lazygraph-serve (lazygraph %s)\n", LAZYGRAPH_VERSION);
    return 0;
  }
  try {
    return serve(options);
  } catch (const UsageProblem& e) {
    std::fprintf(stderr, "lazygraph-serve: %s\n", e.what());
    return kExitUsage;
  } catch (const lazygraph::UsageError& e) {
    std::fprintf(stderr, "lazygraph-serve: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {  // CheckpointError, TokenizerError, CudaError, ...
    std::fprintf(stderr, "lazygraph-serve: %s\n", e.what());
    return kExitRuntime;
  }
}
