// lazygraph-run: runs a Hugging Face Llama-family checkpoint folder on the GPU — a prompt in (text through the
// folder's tokenizer.json or SentencePiece tokenizer.model, a conversation through the folder's chat template, or
// token ids), tokens or text out as they are generated (or one JSON object at the end, --json), then how long
// loading, the first token and each decode step took.
//
// Everything that needs no GPU is checked first (the options, MODEL_DIR, the checkpoint's config and tensors,
// generation_config.json, the tokenizer, the prompt), so a mistake is reported the same way on any machine; only
// then is a GPU required, and --device checked against the GPUs there are.
#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <lazygraph/driver.hpp>
#include <lazygraph/nn/chat_template.hpp>
#include <lazygraph/nn/checkpoint.hpp>
#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/generation_config.hpp>
#include <lazygraph/nn/kernels.hpp>
#include <lazygraph/nn/sampling.hpp>
#include <lazygraph/nn/stop_strings.hpp>
#include <lazygraph/nn/text_stream.hpp>
#include <lazygraph/nn/tokenizer.hpp>

#include <nlohmann/json.hpp>

#ifndef LAZYGRAPH_VERSION
#error "build with -DLAZYGRAPH_VERSION=\"x.y.z\" (tools/meson.build passes the Meson project version)"
#endif

namespace {

namespace fs = std::filesystem;
namespace nn = lazygraph::nn;
using nn::TextStream;
using nn::Tokenizer;
using nn::TokenizerError;

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoGpu = 77;

constexpr int kDefaultMaxTokens = 128;

constexpr const char* usage_text = R"(Usage: lazygraph-run MODEL_DIR [PROMPT] [options]

Runs a Hugging Face Llama-family checkpoint (MODEL_DIR: a folder with config.json and model.safetensors, or
shards with model.safetensors.index.json) on a GPU: feeds it the prompt, prints the tokens it generates as
they come (stdout), then one line on stderr: load time, time to the first token, decode tokens/s, tokens made.

The prompt is either
  PROMPT           text, tokenized with MODEL_DIR/tokenizer.json (Hugging Face tokenizers, as Llama 3,
                   Qwen2/3, Gemma 3, Mistral and Phi-4 ship; its post-processor adds what the model expects
                   in front, such as Llama 3's <|begin_of_text|>, unless --no-bos), else with
                   MODEL_DIR/tokenizer.model (SentencePiece, as Llama 1/2 ship; at most 64 MiB; this build:
                   SENTENCEPIECE_STATE; bos_token_id of generation_config.json, else config.json, is put in
                   front unless --no-bos). The generated text is printed without the prompt as it comes, each
                   character once complete.
  --chat           with PROMPT: PROMPT is a user's message, rendered with the model's chat template
                   (MODEL_DIR/chat_template.jinja, else tokenizer_config.json's chat_template, as transformers'
                   apply_chat_template with add_generation_prompt) and tokenized with tokenizer.json, the
                   template writing the special tokens itself; --system TEXT puts a system message first
  --messages FILE  a conversation instead of PROMPT: a JSON array of messages ({"role": ..., "content": ...},
                   and what the template reads besides), rendered and tokenized as --chat does
  --ids 1,2,3      token ids, used as given (no BOS added); the generated ids are printed, space-separated.

Options (--name VALUE or --name=VALUE; each at most once but --stop):
  --max-tokens N   generate at most N tokens (default 128); generation also stops at an end-of-sequence
                   token (eos_token_id of generation_config.json, else of config.json: one id or a list;
                   not printed) and when the KV cache is full
  --ignore-eos     do not stop at end-of-sequence tokens
  --stop STRING    stop when the generated text contains STRING, which is not printed (a text prompt only;
                   may be given several times: the first to appear stops)
  --chat-vars JSON further variables of the chat template, a JSON object, e.g. '{"enable_thinking": false}'
                   for Qwen3 (with --chat or --messages)
  --json           print no text while generating; at the end, one JSON object on stdout: "prompt" (its
                   ids), "tokens" (the generated ids, the end-of-sequence one left out), "text" (for a text
                   PROMPT: what would have been printed), "stop" ("eos", "max_tokens", "context", or "stop"
                   with "stop_string" naming it), "timings" ("load_s", "first_token_ms",
                   "decode_tokens_per_s", null after one token)
  --temperature T  sample at temperature T, 0 or from 1.18e-38 to 3.4e38 (default 0: greedy, the most
                   probable token each step)
  --top-k K        sample among the K most probable tokens (ties kept; default 0: all)
  --top-p P        then among the fewest most probable tokens whose probabilities reach P, in (0, 1]
                   (default 1: all); --top-k and --top-p change nothing at temperature 0
  --seed S         seed of the random draws, 0 to 4294967295 (default 0): the same seed, prompt and
                   options give the same tokens
  --context N      positions the KV cache holds, prompt included, 1 to 8192 and at most the model's
                   max_position_embeddings (default: max_position_embeddings, at most 4096)
  --dtype fp16|bf16  the element type of weights, activations and KV cache (default: bf16 when the
                   checkpoint's torch_dtype or dtype is bfloat16, else fp16; a quantized checkpoint's
                   is its scales' type)
  --device N       the GPU to run on, from 0 (default 0; lazygraph-info lists them)
  --no-bos         do not put bos_token_id in front of a text prompt
  --help, -h       print this text
  --version        print the lazygraph version and whether this build reads SentencePiece models
  --               what follows is the prompt even if it starts with '-'

Checkpoints of 256 MB and more show a progress bar on stderr while they load. "load" covers the kernels,
the weights and capturing the decode step; "first token" the prompt (prefill); tokens/s the steps after it.

Exit status:
  0   after generating
  1   MODEL_DIR's config.json, weights, generation_config.json, tokenizer.json, tokenizer.model or chat
      template cannot be used, or the GPU failed (the message names the file and the key or tensor, or the
      problem)
  2   a bad command line or prompt: an unknown option, one given twice, a value out of range, a
      MODEL_DIR that does not exist or is not a folder, a --context beyond the model's, a --device this
      machine lacks, a token id outside the vocabulary, a prompt longer than the context or not UTF-8,
      a text prompt where MODEL_DIR has no tokenizer.json and no tokenizer.model this build reads, --stop
      with --ids, a --messages file that is not a JSON array of messages, a conversation the chat template
      refuses (its own message) (the message names the option or path as given)
  77  no GPU to run on (no CUDA driver or no device: the reason is printed), after everything else but
      --device was checked

Environment:
  LAZYGRAPH_CUDA_DRIVER  the driver library to load instead of libcuda.so.1
  LAZYGRAPH_CACHE_DIR    the kernel cache directory (lazygraph-info shows where it is)
)";

/// A mistake on the command line or in the prompt: exit 2.
class UsageProblem : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A file of the model folder that cannot be used: exit 1.
class ModelProblem : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Options {
  fs::path model_dir;
  std::optional<std::string> prompt;
  std::optional<std::vector<int>> ids;
  int max_tokens = kDefaultMaxTokens;
  nn::Sampling sampling;
  int context = 0;           // --context; 0: the model's (plan_run)
  int device = 0;            // --device
  std::optional<bool> bf16;  // --dtype; unset: the checkpoint's
  bool bos = true;
  bool ignore_eos = false;
  std::vector<std::string> stops;        // --stop, in order
  bool json = false;                     // --json
  bool chat = false;                     // --chat: the prompt is a user's message
  std::optional<std::string> system;     // --system
  std::optional<fs::path> messages;      // --messages
  std::optional<std::string> chat_vars;  // --chat-vars
  bool help = false;
  bool version = false;
};

// ---- the command line -------------------------------------------------------------------------------------

/// "FLAG must be WHAT, not 'TEXT'": the one sentence every bad value gets.
UsageProblem bad_value(std::string_view flag, std::string_view what, std::string_view text) {
  return UsageProblem(std::string(flag) + " must be " + std::string(what) + ", not '" + std::string(text) + "'");
}

template <class Int>
Int parse_integer(std::string_view flag, std::string_view text, Int low, Int high, std::string_view why = {}) {
  Int value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || text.empty() || value < low || value > high) {
    throw bad_value(flag, "an integer from " + std::to_string(low) + " to " + std::to_string(high) + std::string(why),
                    text);
  }
  return value;
}

/// A decimal number as the user wrote it.
struct Number {
  double value = 0;        // what it reads as in double (for one too small: 0 or less, of its sign)
  bool too_small = false;  // not 0, but closer to 0 than double holds
  float single = 0;        // the text rounded once to float, as a C++ literal 0.9F is; 0 beyond float's range
};

/// `text` as a number (from_chars' general format: no leading '+' or spaces), or nullopt when it is none, or
/// infinite, NaN or too large for double.
std::optional<Number> parse_number(std::string_view text) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || end != text.data() + text.size()) return std::nullopt;
  if (error == std::errc::result_out_of_range) {
    // from_chars leaves `value` unset: strtod (same grammar here) says which way it went.
    const double near = std::strtod(std::string(text).c_str(), nullptr);
    if (std::isinf(near)) return std::nullopt;
    return Number{near, true, 0.0F};
  }
  if (error != std::errc{} || !std::isfinite(value)) return std::nullopt;
  float single = 0;
  if (std::from_chars(text.data(), text.data() + text.size(), single).ec != std::errc{}) single = 0;
  return Number{value, false, single};
}

/// --temperature: 0 (greedy), or a positive number whose reciprocal float holds (the sampler multiplies by 1 / T).
float parse_temperature(std::string_view text) {
  const std::optional<Number> n = parse_number(text);
  if (n.has_value() && n->value == 0.0 && !n->too_small) return 0.0F;
  if (!n.has_value() || !(n->value >= std::numeric_limits<float>::min() &&
                          n->value <= static_cast<double>(std::numeric_limits<float>::max()))) {
    throw bad_value("--temperature", "0 (greedy) or a number from 1.18e-38 to 3.4e38", text);
  }
  return n->single;
}

/// --top-p: in (0, 1]. A p below float's smallest normal number keeps the most probable token(s) alone, as
/// that number does, so it becomes that number.
float parse_top_p(std::string_view text) {
  const std::optional<Number> n = parse_number(text);
  if (!n.has_value() || !((n->value > 0.0 || (n->too_small && !std::signbit(n->value))) && n->value <= 1.0)) {
    throw bad_value("--top-p", "in (0, 1]", text);
  }
  return std::max(n->single, std::numeric_limits<float>::min());
}

std::vector<int> parse_ids(std::string_view text) {
  std::vector<int> ids;
  std::size_t at = 0;
  while (true) {
    const std::size_t comma = text.find(',', at);
    const std::string_view item =
        text.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at);
    int id = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || error != std::errc{} || end != item.data() + item.size() || id < 0) {
      throw UsageProblem("--ids must be token ids (integers from 0) separated by commas, such as 1,15043,3186, not '" +
                         std::string(text) + "' ('" + std::string(item) + "' is not one)");
    }
    ids.push_back(id);
    if (comma == std::string_view::npos) return ids;
    at = comma + 1;
  }
}

Options parse_options(int argc, char** argv) {
  Options o;
  std::vector<std::string_view> positional;
  std::vector<std::string_view> given;  // the options with a value seen so far
  bool options_end = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (options_end || arg == "-" || !arg.starts_with("-")) {
      positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_end = true;
      continue;
    }
    if (arg == "--help" || arg == "-h") {
      o.help = true;
      return o;
    }
    if (arg == "--version") {
      o.version = true;
      continue;
    }
    if (arg == "--no-bos") {
      o.bos = false;
      continue;
    }
    if (arg == "--ignore-eos") {
      o.ignore_eos = true;
      continue;
    }
    if (arg == "--json") {
      o.json = true;
      continue;
    }
    if (arg == "--chat") {
      o.chat = true;
      continue;
    }
    // Options with a value: "--name VALUE" or "--name=VALUE".
    std::string_view name = arg;
    std::optional<std::string_view> value;
    if (const std::size_t eq = arg.find('='); eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    constexpr std::string_view valued[] = {"--ids",    "--max-tokens", "--temperature", "--top-k",  "--top-p",
                                           "--seed",   "--context",    "--dtype",       "--device", "--stop",
                                           "--system", "--messages",   "--chat-vars"};
    if (std::find(std::begin(valued), std::end(valued), name) == std::end(valued)) {
      throw UsageProblem("unknown option '" + std::string(arg) + "'");
    }
    if (name != "--stop" && std::find(given.begin(), given.end(), name) != given.end()) {
      throw UsageProblem(std::string(name) + " is given twice: give it once");
    }
    given.push_back(name);
    if (!value.has_value()) {
      if (i + 1 >= argc) throw UsageProblem(std::string(name) + " needs a value");
      value = argv[++i];
    }
    if (name == "--ids") {
      o.ids = parse_ids(*value);
    } else if (name == "--max-tokens") {
      o.max_tokens = parse_integer<int>(name, *value, 1, std::numeric_limits<int>::max());
    } else if (name == "--temperature") {
      o.sampling.temperature = parse_temperature(*value);
    } else if (name == "--top-k") {
      o.sampling.top_k = parse_integer<int>(name, *value, 0, std::numeric_limits<int>::max());
    } else if (name == "--top-p") {
      o.sampling.top_p = parse_top_p(*value);
    } else if (name == "--seed") {
      o.sampling.seed = parse_integer<std::uint32_t>(name, *value, 0, std::numeric_limits<std::uint32_t>::max());
    } else if (name == "--context") {
      o.context = parse_integer<int>(name, *value, 1, nn::kMaxContext, " (the most positions a KV cache holds)");
    } else if (name == "--device") {
      o.device = parse_integer<int>(name, *value, 0, std::numeric_limits<int>::max());
    } else if (name == "--stop") {
      if (value->empty()) throw bad_value("--stop", "a string of at least one character", *value);
      o.stops.emplace_back(*value);
    } else if (name == "--system") {
      o.system = std::string(*value);
    } else if (name == "--messages") {
      if (value->empty()) throw bad_value("--messages", "a file", *value);
      o.messages = fs::path(*value);
    } else if (name == "--chat-vars") {
      o.chat_vars = std::string(*value);
    } else if (name == "--dtype") {
      if (*value != "fp16" && *value != "bf16") throw bad_value("--dtype", "fp16 or bf16", *value);
      o.bf16 = *value == "bf16";
    }
  }
  if (o.version) return o;
  if (positional.empty()) throw UsageProblem("no MODEL_DIR given");
  if (positional.size() > 2) {
    throw UsageProblem("too many arguments: '" + std::string(positional[2]) +
                       "' (quote a prompt of several words: lazygraph-run MODEL_DIR \"the prompt\")");
  }
  o.model_dir = fs::path(positional[0]);
  if (positional.size() == 2) o.prompt = std::string(positional[1]);
  if (o.prompt.has_value() && o.ids.has_value()) throw UsageProblem("give a PROMPT or --ids, not both");
  if (o.messages.has_value() && (o.prompt.has_value() || o.ids.has_value())) {
    throw UsageProblem("give --messages or a prompt (PROMPT or --ids), not both");
  }
  if (o.messages.has_value() && o.chat) throw UsageProblem("give --messages or --chat, not both");
  if (o.chat && !o.prompt.has_value()) throw UsageProblem("--chat needs a PROMPT, the user's message");
  if (o.system.has_value() && !o.chat) throw UsageProblem("--system needs --chat (and a PROMPT)");
  if (o.chat_vars.has_value() && !o.chat && !o.messages.has_value()) {
    throw UsageProblem("--chat-vars needs --chat or --messages");
  }
  if (o.ids.has_value() && !o.stops.empty()) {
    throw UsageProblem("--stop needs a text prompt: with --ids the output is token ids, not text");
  }
  if (!o.prompt.has_value() && !o.ids.has_value() && !o.messages.has_value()) {
    throw UsageProblem("no prompt: give PROMPT (text), --messages FILE (a conversation) or --ids (token ids)");
  }
  return o;
}

// ---- generating ---------------------------------------------------------------------------------------------

/// What the run needs once the host side has checked everything.
struct Plan {
  Options options;
  nn::DecoderConfig config;  // of the checkpoint (context as it will load)
  std::vector<int> prompt;
  std::optional<Tokenizer> tokenizer;  // set for a text prompt: the output is text
  nn::SpecialTokens special;
};

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// Where the generated tokens go: printed as they come (ids, or text through a TextStream and the stop strings), or
/// kept for the JSON object printed at the end (--json).
class Output {
 public:
  explicit Output(const Plan& plan) : json_(plan.options.json) {
    if (!plan.tokenizer.has_value()) return;
    text_.emplace(*plan.tokenizer, plan.prompt);
    stops_.emplace(plan.options.stops);
  }
  /// Takes one generated token (not an end-of-sequence one).
  void push(int token) {
    tokens_.push_back(token);
    if (text_.has_value()) {
      write(stops_->push(text_->push(token)));
    } else if (!json_) {
      std::printf(tokens_.size() == 1 ? "%d" : " %d", token);
      std::fflush(stdout);
    }
  }
  /// Whether a stop string appeared: generation ends.
  [[nodiscard]] bool stopped() const { return stops_.has_value() && stops_->stopped(); }
  /// Prints what is held back, and the newline that ends the output.
  void finish() {
    if (text_.has_value() && !stopped()) {
      write(stops_->push(text_->finish()));
      if (!stopped()) write(stops_->finish());
    }
    if (!json_ && (!tokens_.empty() || text_.has_value())) std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  [[nodiscard]] const std::vector<int>& tokens() const { return tokens_; }
  /// The stop string that ended generation (stopped() only).
  [[nodiscard]] const std::string& stop_string() const { return stops_->which(); }
  /// The text printed (or, with --json, that would have been), when the prompt was text.
  [[nodiscard]] std::optional<std::string> text() const {
    if (!text_.has_value()) return std::nullopt;
    return text_written_;
  }

 private:
  void write(const std::string& piece) {
    text_written_ += piece;
    if (json_ || piece.empty()) return;
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  }

  bool json_;
  std::optional<TextStream> text_;
  std::optional<nn::StopStrings> stops_;
  std::vector<int> tokens_;
  std::string text_written_;
};

template <nn::Element T>
int generate(const Plan& plan, const lazygraph::Device& device) {
  const Options& o = plan.options;  // its context resolved (plan_run)
  const Clock::time_point start = Clock::now();
  const lazygraph::Stream stream(device);
  const lazygraph::KernelLibrary library = nn::kernel_library(device);
  nn::LoadOptions load;
  load.context = o.context;
  load.progress = true;
  nn::BasicDecoder<T> decoder = nn::load_decoder<T>(stream, library, o.model_dir, load);
  decoder.set_sampling(o.sampling);
  // Capture the one-row step now (a step at position 0, which the prompt then overwrites), so that the decode
  // rate measures steps and not the capture.
  (void)decoder.forward({plan.prompt.front(), 0});
  const Clock::time_point loaded = Clock::now();

  const int context = decoder.config().context;
  const auto is_eos = [&](int token) {
    return !o.ignore_eos &&
           std::find(plan.special.eos.begin(), plan.special.eos.end(), token) != plan.special.eos.end();
  };
  Output output(plan);
  int token = decoder.prefill(plan.prompt);
  const Clock::time_point first = Clock::now();
  int made = 1;
  int position = static_cast<int>(plan.prompt.size());
  const char* why = nullptr;   // for people
  const char* stop = nullptr;  // for --json
  while (true) {
    if (is_eos(token)) {
      why = "end of sequence";
      stop = "eos";
      break;
    }
    output.push(token);
    if (output.stopped()) {
      why = "--stop";
      stop = "stop";
      break;
    }
    if (made >= o.max_tokens) {
      why = "--max-tokens";
      stop = "max_tokens";
      break;
    }
    if (position >= context) {
      why = "context full";
      stop = "context";
      break;
    }
    token = decoder.forward({token, position++});
    ++made;
  }
  const Clock::time_point end = Clock::now();
  output.finish();

  const double load_s = seconds_between(start, loaded);
  const double first_ms = 1000.0 * seconds_between(loaded, first);
  const std::optional<double> rate =
      made > 1 ? std::optional<double>((made - 1) / seconds_between(first, end)) : std::nullopt;
  if (o.json) {
    nlohmann::json result = {{"prompt", plan.prompt},
                             {"tokens", output.tokens()},
                             {"stop", stop},
                             {"timings",
                              {{"load_s", load_s},
                               {"first_token_ms", first_ms},
                               {"decode_tokens_per_s", rate.has_value() ? nlohmann::json(*rate) : nlohmann::json()}}}};
    if (const std::optional<std::string> text = output.text()) result["text"] = *text;
    if (output.stopped()) result["stop_string"] = output.stop_string();
    const std::string line = result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
  }
  std::string rate_text;
  if (rate.has_value()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, ", %.1f tokens/s", *rate);
    rate_text = buf;
  }
  std::fprintf(stderr, "load %.2f s, first token %.1f ms%s (%d token%s, %s)\n", load_s, first_ms, rate_text.c_str(),
               made, made == 1 ? "" : "s", why);
  return 0;
}

/// MODEL_DIR as the user gave it, checked to be a folder. \throws UsageProblem naming it when it does not exist or
/// is something else (a file given for its folder). Other failures to look it up are the loader's to report.
void check_model_dir(const fs::path& dir) {
  std::error_code ec;
  const fs::file_type type = fs::status(dir, ec).type();
  if (type == fs::file_type::not_found) throw UsageProblem("MODEL_DIR '" + dir.string() + "' does not exist");
  if (!ec && type != fs::file_type::directory) {
    throw UsageProblem("MODEL_DIR '" + dir.string() +
                       "' is not a folder: give the checkpoint's folder, which holds config.json and the weights");
  }
}

/// The KV cache's positions: --context, checked against the model's config.json, or by default
/// max_position_embeddings, at most 4096 (a sliding window bounds what a layer attends, not the context).
/// \throws UsageProblem naming --context.
int context_of(const Options& o, const nn::LlamaConfig& llama) {
  const std::string source = (o.model_dir / "config.json").string();
  if (o.context == 0) {
    return std::min(llama.max_position_embeddings, 4096);
  }
  if (o.context > llama.max_position_embeddings) {
    throw UsageProblem("--context " + std::to_string(o.context) + " is more than the model's " +
                       "max_position_embeddings (" + std::to_string(llama.max_position_embeddings) + " in " + source +
                       ")");
  }
  return o.context;
}

/// MODEL_DIR's tokenizer.json, else its tokenizer.model. \throws UsageProblem when it has neither, or only a
/// tokenizer.model this build cannot read; TokenizerError when the file cannot be used.
Tokenizer load_tokenizer(const fs::path& model_dir) {
  std::error_code ec;
  if (const fs::path json = model_dir / "tokenizer.json"; fs::exists(json, ec)) return Tokenizer::from_json(json);
  const fs::path model = model_dir / "tokenizer.model";
  if (!fs::exists(model, ec)) {
    throw UsageProblem(model_dir.string() +
                       " has neither tokenizer.json nor tokenizer.model to tokenize a text prompt with: pass the "
                       "prompt as token ids with --ids 1,2,3");
  }
  if (!Tokenizer::sentencepiece_supported()) {
    throw UsageProblem(model.string() +
                       " is a SentencePiece model, and this lazygraph-run was built without SentencePiece: pass the "
                       "prompt as token ids with --ids 1,2,3 (or rebuild lazygraph with libsentencepiece-dev "
                       "installed)");
  }
  return Tokenizer::from_sentencepiece(model);
}

/// The largest --messages file read: 16 MiB, as a config.json (a conversation of a whole context is far less).
constexpr std::uintmax_t kMaxMessagesBytes = std::uintmax_t{16} << 20U;

/// The conversation as a JSON array: --messages FILE's text, or --system and the PROMPT as messages.
/// \throws UsageProblem naming --messages when the file cannot be read or is too large; the template checks the JSON.
std::string conversation_json(const Options& o) {
  if (!o.messages.has_value()) {
    nlohmann::json messages = nlohmann::json::array();
    if (o.system.has_value()) messages.push_back({{"role", "system"}, {"content", *o.system}});
    messages.push_back({{"role", "user"}, {"content", *o.prompt}});
    return messages.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  }
  const fs::path& file = *o.messages;
  std::error_code ec;
  const fs::file_status status = fs::status(file, ec);
  if (ec || !fs::is_regular_file(status)) {
    throw UsageProblem("--messages '" + file.string() + "' is not a file that can be read" +
                       (ec ? " (" + ec.message() + ")" : ""));
  }
  if (fs::file_size(file, ec) > kMaxMessagesBytes || ec) {
    throw UsageProblem("--messages '" + file.string() + "' is larger than 16 MiB");
  }
  std::ifstream in(file, std::ios::binary);
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (!in && !in.eof()) throw UsageProblem("--messages '" + file.string() + "' could not be read");
  return text;
}

/// The prompt text the model's chat template makes of the conversation, ending with the assistant's header.
/// \throws UsageProblem when the conversation or --chat-vars is refused (naming the option), ModelProblem when the
/// template is missing or outside what lazygraph runs, CheckpointError for tokenizer_config.json.
std::string render_conversation(const Options& o) {
  const std::string messages = conversation_json(o);
  nn::ChatTemplate chat_template = [&] {
    try {
      return nn::ChatTemplate::load(o.model_dir);
    } catch (const nn::ChatTemplateError& e) {
      throw ModelProblem(e.what());
    }
  }();
  nn::RenderOptions options;
  options.add_generation_prompt = true;
  if (o.chat_vars.has_value()) options.variables_json = *o.chat_vars;
  try {
    return chat_template.render(messages, options);
  } catch (const nn::ChatTemplateError& e) {
    // The conversation's problems are the user's (the template refusing it, a malformed --messages or --chat-vars),
    // as are those of a render that fails on this conversation.
    const std::string source = o.messages.has_value() ? "--messages '" + o.messages->string() + "'" : "--chat";
    throw UsageProblem(source + ": " + e.what());
  }
}

/// Everything that needs no GPU: MODEL_DIR, the checkpoint's config and tensors, the special tokens, the tokenizer
/// and the prompt. \throws UsageProblem, ModelProblem, TokenizerError, nn::CheckpointError.
Plan plan_run(const Options& o) {
  check_model_dir(o.model_dir);
  Plan plan;
  plan.options = o;
  const nn::LlamaConfig llama = nn::LlamaConfig::load(o.model_dir / "config.json");
  plan.options.context = context_of(o, llama);
  nn::LoadOptions load;
  load.context = plan.options.context;
  const nn::DecoderCheckpoint checkpoint = nn::DecoderCheckpoint::open(o.model_dir, load);
  plan.config = checkpoint.config();
  if (!plan.options.bf16.has_value()) plan.options.bf16 = checkpoint.llama_config().torch_dtype == "bfloat16";
  if (const auto& q = checkpoint.llama_config().quantization; q.has_value()) {
    // Quantized weights' scales are of the decoder's element type: that type, whatever torch_dtype says.
    const std::optional<nn::QuantizedFormat> format = q->attention ? q->attention : q->mlp ? q->mlp : q->lm_head;
    const bool bf16_scales = format.has_value() && format->scale_type == nn::ScaleType::bf16;
    if (!o.bf16.has_value()) {
      plan.options.bf16 = bf16_scales;
    } else if (*o.bf16 != bf16_scales) {
      throw UsageProblem(std::string("--dtype ") + (*o.bf16 ? "bf16" : "fp16") + ": the checkpoint's weights are " +
                         "quantized with " + (bf16_scales ? "bf16" : "fp16") + " scales, which only a " +
                         (bf16_scales ? "bf16" : "fp16") + " decoder reads; leave --dtype out");
    }
  }
  plan.special = nn::GenerationConfig::load(o.model_dir).special_tokens(checkpoint.llama_config());

  if (o.ids.has_value()) {
    plan.prompt = *o.ids;
  } else {
    plan.tokenizer = load_tokenizer(o.model_dir);
    const fs::path& file = plan.tokenizer->file();
    const bool chat = o.chat || o.messages.has_value();
    if (chat && file.extension() == ".model") {
      throw UsageProblem((o.chat ? std::string("--chat") : std::string("--messages")) + " needs " +
                         (o.model_dir / "tokenizer.json").string() +
                         ": a chat template writes special tokens as text, which a SentencePiece model reads as text");
    }
    if (plan.tokenizer->size() > plan.config.vocab) {
      throw ModelProblem(file.string() + ": " + std::to_string(plan.tokenizer->size()) +
                         " tokens, more than the model's vocabulary of " + std::to_string(plan.config.vocab));
    }
    // tokenizer.json: its post-processor adds what the model expects (BOS or nothing), as transformers does.
    // tokenizer.model: bos_token_id, as Llama tokenizers do.
    const bool json = file.extension() != ".model";
    if (!json && o.bos && plan.special.bos.has_value()) plan.prompt.push_back(*plan.special.bos);
    // A conversation: the template's text, whose special tokens (BOS among them, where the model wants it) the
    // template writes, tokenized without adding any, as apply_chat_template does.
    const std::string text = chat ? render_conversation(o) : *o.prompt;
    std::vector<int> text_ids;
    try {
      text_ids = plan.tokenizer->encode(text, {.add_special_tokens = json && o.bos && !chat});
    } catch (const TokenizerError& e) {
      // Text that is not UTF-8 is the prompt's problem; the message's file is the tokenizer's.
      std::string_view why = e.what();
      if (const std::string prefix = file.string() + ": "; why.starts_with(prefix)) why.remove_prefix(prefix.size());
      throw UsageProblem((chat ? "the conversation as rendered: " : "PROMPT: ") + std::string(why));
    }
    plan.prompt.insert(plan.prompt.end(), text_ids.begin(), text_ids.end());
    if (plan.prompt.empty()) {
      throw UsageProblem("the prompt is empty and there is no bos_token_id to start from: give some text");
    }
  }
  try {
    nn::check_prompt(plan.config, plan.prompt, 0, 0);
  } catch (const lazygraph::UsageError& e) {
    std::string what = e.what();
    if (const std::string_view prefix = "Decoder::prefill: "; what.starts_with(prefix)) what.erase(0, prefix.size());
    throw UsageProblem(what + (o.ids.has_value() ? "" : " (the prompt as tokenized)"));
  }
  return plan;
}

std::string sampling_text(const nn::Sampling& s) {
  if (!(s.temperature > 0.0F)) return "greedy";
  const auto number = [](float x) {
    std::array<char, 32> text{};
    std::snprintf(text.data(), text.size(), "%g", static_cast<double>(x));
    return std::string(text.data());
  };
  std::string text = "temperature " + number(s.temperature);
  if (s.top_k > 0) text += ", top-k " + std::to_string(s.top_k);
  if (s.top_p < 1.0F) text += ", top-p " + number(s.top_p);
  return text + ", seed " + std::to_string(s.seed);
}

/// The GPU --device names. \throws UsageProblem when this machine has no such GPU; DriverUnavailable, NoDevice.
lazygraph::Device device_of(const Options& o) {
  const int count = lazygraph::Device::count();
  if (o.device >= count) {
    throw UsageProblem("--device " + std::to_string(o.device) + " is not a GPU of this machine, which has " +
                       std::to_string(count) + " (--device 0" +
                       (count > 1 ? " to " + std::to_string(count - 1) : std::string()) + ")");
  }
  return lazygraph::Device::get(o.device);
}

int run(const Options& o) {
  const Plan plan = plan_run(o);
  std::string why;
  if (!lazygraph::gpu_available(&why)) {
    std::fprintf(stderr, "lazygraph-run: no GPU to run on: %s\n", why.c_str());
    return kExitNoGpu;
  }
  const lazygraph::Device device = device_of(o);
  const nn::DecoderConfig& c = plan.config;
  std::fprintf(stderr,
               "lazygraph-run: %s on GPU %d (%s): %d layers, d %d, %d heads (%d kv), vocab %d, context %d, %s; %s; "
               "prompt %zu tokens\n",
               o.model_dir.c_str(), device.ordinal(), device.name().c_str(), c.layers, c.d, c.heads, c.kv_head_count(),
               c.vocab, c.context, *plan.options.bf16 ? "bf16" : "fp16", sampling_text(o.sampling).c_str(),
               plan.prompt.size());
  if (o.sampling.temperature == 0.0F && (o.sampling.top_k != 0 || o.sampling.top_p != 1.0F)) {
    std::fprintf(stderr, "lazygraph-run: note: --top-k and --top-p change nothing at temperature 0 (greedy)\n");
  }
  return *plan.options.bf16 ? generate<lazygraph::bfloat16>(plan, device) : generate<lazygraph::half>(plan, device);
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse_options(argc, argv);
  } catch (const UsageProblem& e) {
    std::fprintf(stderr, "lazygraph-run: %s; see lazygraph-run --help\n", e.what());
    return kExitUsage;
  }
  if (options.help) {
    std::string text = usage_text;
    const std::string marker = "SENTENCEPIECE_STATE";
    text.replace(text.find(marker), marker.size(),
                 Tokenizer::sentencepiece_supported() ? "supported" : "NOT supported, so use --ids");
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  if (options.version) {
    std::printf("lazygraph-run (lazygraph %s), SentencePiece tokenizer: %s\n", LAZYGRAPH_VERSION,
                Tokenizer::sentencepiece_supported() ? "yes" : "no");
    return 0;
  }
  try {
    return run(options);
  } catch (const UsageProblem& e) {
    std::fprintf(stderr, "lazygraph-run: %s\n", e.what());
    return kExitUsage;
  } catch (const lazygraph::UsageError& e) {
    std::fprintf(stderr, "lazygraph-run: %s\n", e.what());
    return kExitUsage;
  } catch (const lazygraph::DriverUnavailable& e) {
    std::fprintf(stderr, "lazygraph-run: no GPU to run on: %s\n", e.what());
    return kExitNoGpu;
  } catch (const lazygraph::NoDevice& e) {
    std::fprintf(stderr, "lazygraph-run: no GPU to run on: %s\n", e.what());
    return kExitNoGpu;
  } catch (const std::exception& e) {  // CheckpointError, ModelProblem, TokenizerError, CudaError, ...
    std::fprintf(stderr, "lazygraph-run: %s\n", e.what());
    return kExitRuntime;
  }
}
