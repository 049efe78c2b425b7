// lazygraph-run: runs a Hugging Face Llama-family checkpoint folder on the GPU — a prompt in (text through the
// folder's SentencePiece tokenizer.model, or token ids), tokens out as they are generated, then how long loading,
// the first token and each decode step took.
//
// Everything that needs no GPU is checked first (the options, the checkpoint's config and tensors, the tokenizer,
// the prompt), so a mistake is reported the same way on any machine; only then is a GPU required.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include <lazygraph/driver.hpp>
#include <lazygraph/nn/checkpoint.hpp>
#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/kernels.hpp>
#include <lazygraph/nn/sampling.hpp>

#include "tokenizer.hpp"

#ifndef LAZYGRAPH_VERSION
#error "build with -DLAZYGRAPH_VERSION=\"x.y.z\" (tools/meson.build passes the Meson project version)"
#endif

namespace {

namespace fs = std::filesystem;
namespace nn = lazygraph::nn;
using lazygraph_run::TextStream;
using lazygraph_run::Tokenizer;
using lazygraph_run::TokenizerError;

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoGpu = 77;

constexpr int kDefaultMaxTokens = 128;

constexpr const char* usage_text = R"(Usage: lazygraph-run MODEL_DIR [PROMPT] [options]

Runs a Hugging Face Llama-family checkpoint (MODEL_DIR: config.json and model.safetensors, or shards with
model.safetensors.index.json) on the first GPU: feeds it the prompt, prints the tokens it generates as they
come (stdout), then one line on stderr: load time, time to the first token, decode tokens/s, tokens made.

The prompt is either
  PROMPT           text, tokenized with MODEL_DIR/tokenizer.model (a SentencePiece model, as Llama 1/2,
                   TinyLlama and Mistral ship; this build: SENTENCEPIECE_STATE). bos_token_id of
                   generation_config.json (else config.json) is put in front unless --no-bos. The
                   generated text is printed without the prompt, decoded as it comes.
  --ids 1,2,3      token ids, used as given (no BOS added); the generated ids are printed, space-separated.

Options:
  --max-tokens N   generate at most N tokens (default 128); generation also stops at an end-of-sequence
                   token (eos_token_id of generation_config.json, else of config.json: one id or a list;
                   not printed) and when the KV cache is full
  --ignore-eos     do not stop at end-of-sequence tokens
  --temperature T  sample at temperature T (default 0: greedy, the most probable token each step)
  --top-k K        sample among the K most probable tokens (ties kept; default 0: all)
  --top-p P        then among the fewest most probable tokens whose probabilities reach P, in (0, 1]
                   (default 1: all); --top-k and --top-p change nothing at temperature 0
  --seed S         seed of the random draws, 0 to 4294967295 (default 0): the same seed, prompt and
                   options give the same tokens
  --context N      positions the KV cache holds, prompt included (default: max_position_embeddings, at
                   most 4096)
  --dtype fp16|bf16  the element type of weights, activations and KV cache (default: bf16 when the
                   checkpoint's torch_dtype or dtype is bfloat16, else fp16; a quantized checkpoint's
                   is its scales' type)
  --no-bos         do not put bos_token_id in front of a text prompt
  --help, -h       print this text
  --version        print the lazygraph version and whether this build reads SentencePiece models
  --               what follows is the prompt even if it starts with '-'

Checkpoints of 256 MB and more show a progress bar on stderr while they load. "load" covers the kernels,
the weights and capturing the decode step; "first token" the prompt (prefill); tokens/s the steps after it.

Exit status: 0 after generating; 1 for a checkpoint, tokenizer.model or generation_config.json that
cannot be used, or a GPU error (the message names the file or the problem); 2 for a bad command line
or prompt (an unknown option, a value out of range, a token id outside the vocabulary, a prompt longer
than the context, a text prompt where MODEL_DIR has no tokenizer.model or this build no SentencePiece);
77 when there is no GPU to run on (no CUDA driver or no device: the reason is printed), after
everything else was checked.

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
  int context = 0;
  std::optional<bool> bf16;  // --dtype; unset: the checkpoint's
  bool bos = true;
  bool ignore_eos = false;
  bool help = false;
  bool version = false;
};

// ---- the command line -------------------------------------------------------------------------------------

template <class Int>
Int parse_integer(std::string_view option, std::string_view text, Int low, Int high) {
  Int value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || text.empty() || value < low || value > high) {
    throw UsageProblem(std::string(option) + " '" + std::string(text) + "': expected an integer from " +
                       std::to_string(low) + " to " + std::to_string(high));
  }
  return value;
}

float parse_float(std::string_view option, std::string_view text) {
  float value = 0.0F;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || text.empty() || !std::isfinite(value)) {
    throw UsageProblem(std::string(option) + " '" + std::string(text) + "': expected a finite number");
  }
  return value;
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
      throw UsageProblem("--ids '" + std::string(text) + "': expected token ids (integers from 0) separated by " +
                         "commas, e.g. --ids 1,15043,3186; '" + std::string(item) + "' is not one");
    }
    ids.push_back(id);
    if (comma == std::string_view::npos) return ids;
    at = comma + 1;
  }
}

Options parse_options(int argc, char** argv) {
  Options o;
  std::vector<std::string_view> positional;
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
    // Options with a value: "--name VALUE" or "--name=VALUE".
    std::string_view name = arg;
    std::optional<std::string_view> value;
    if (const std::size_t eq = arg.find('='); eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    constexpr std::string_view valued[] = {"--ids",   "--max-tokens", "--temperature", "--top-k",
                                           "--top-p", "--seed",       "--context",     "--dtype"};
    if (std::find(std::begin(valued), std::end(valued), name) == std::end(valued)) {
      throw UsageProblem("unknown option '" + std::string(arg) + "'");
    }
    if (!value.has_value()) {
      if (i + 1 >= argc) throw UsageProblem(std::string(name) + " needs a value");
      value = argv[++i];
    }
    if (name == "--ids") {
      o.ids = parse_ids(*value);
    } else if (name == "--max-tokens") {
      o.max_tokens = parse_integer<int>(name, *value, 1, std::numeric_limits<int>::max());
    } else if (name == "--temperature") {
      o.sampling.temperature = parse_float(name, *value);
    } else if (name == "--top-k") {
      o.sampling.top_k = parse_integer<int>(name, *value, 0, std::numeric_limits<int>::max());
    } else if (name == "--top-p") {
      o.sampling.top_p = parse_float(name, *value);
    } else if (name == "--seed") {
      o.sampling.seed = parse_integer<std::uint32_t>(name, *value, 0, std::numeric_limits<std::uint32_t>::max());
    } else if (name == "--context") {
      o.context = parse_integer<int>(name, *value, 1, std::numeric_limits<int>::max());
    } else if (name == "--dtype") {
      if (*value != "fp16" && *value != "bf16") {
        throw UsageProblem("--dtype '" + std::string(*value) + "': expected fp16 or bf16");
      }
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
  if (!o.prompt.has_value() && !o.ids.has_value()) {
    throw UsageProblem("no prompt: give PROMPT (text) or --ids (token ids)");
  }
  try {
    o.sampling.validate();
  } catch (const lazygraph::UsageError& e) {
    throw UsageProblem(e.what());
  }
  return o;
}

// ---- the model folder's other files ------------------------------------------------------------------------

/// The JSON of a small settings file, or nullopt when it does not exist. Bounded: at most 1 MiB, a regular file
/// (a FIFO would block, /dev/zero never end), nesting at most 64 deep. \throws ModelProblem naming the file.
std::optional<nlohmann::json> read_settings(const fs::path& file) {
  std::error_code ec;
  const fs::file_status status = fs::status(file, ec);
  if (status.type() == fs::file_type::not_found) return std::nullopt;
  if (ec) throw ModelProblem(file.string() + ": cannot read: " + ec.message());
  if (status.type() != fs::file_type::regular) throw ModelProblem(file.string() + ": not a regular file");
  constexpr std::uintmax_t kMaxBytes = std::uintmax_t{1} << 20U;
  const std::uintmax_t size = fs::file_size(file, ec);
  if (ec) throw ModelProblem(file.string() + ": cannot read: " + ec.message());
  if (size > kMaxBytes) throw ModelProblem(file.string() + ": " + std::to_string(size) + " bytes, more than 1 MiB");
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (f == nullptr)
    throw ModelProblem(file.string() + ": cannot open: " + std::error_code(errno, std::generic_category()).message());
  std::string text(static_cast<std::size_t>(size), '\0');
  const std::size_t got = std::fread(text.data(), 1, text.size(), f);
  std::fclose(f);
  text.resize(got);
  constexpr int kMaxDepth = 64;
  const auto bounded = [&](int depth, nlohmann::json::parse_event_t /*event*/, nlohmann::json& /*parsed*/) {
    if (depth > kMaxDepth) throw ModelProblem(file.string() + ": nested more than 64 levels deep");
    return true;
  };
  try {
    nlohmann::json value = nlohmann::json::parse(text, bounded);
    if (!value.is_object()) throw ModelProblem(file.string() + ": not a JSON object");
    return value;
  } catch (const nlohmann::json::exception& e) {
    throw ModelProblem(file.string() + ": not valid JSON: " + e.what());
  }
}

/// The token ids of `key`: one id, a list of ids, or null (none). \throws ModelProblem naming the file and key.
std::vector<int> token_ids(const nlohmann::json& value, std::string_view key, const fs::path& file) {
  const auto one = [&](const nlohmann::json& v) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
        v.get<std::int64_t>() > std::numeric_limits<int>::max()) {
      throw ModelProblem(file.string() + ": " + std::string(key) + " must be a token id, a list of them or null, not " +
                         v.dump());
    }
    return v.get<int>();
  };
  std::vector<int> ids;
  if (value.is_null()) return ids;
  if (value.is_array()) {
    for (const nlohmann::json& v : value) ids.push_back(one(v));
  } else {
    ids.push_back(one(value));
  }
  return ids;
}

/// The special tokens generation uses: end-of-sequence ids and the beginning-of-sequence id.
struct SpecialTokens {
  std::vector<int> eos;
  std::optional<int> bos;
};

/// eos_token_id and bos_token_id, each from generation_config.json when it has the key (null included), else from
/// config.json. \throws ModelProblem for a file or a value that cannot be used.
SpecialTokens special_tokens(const fs::path& dir) {
  const fs::path generation_file = dir / "generation_config.json";
  const fs::path config_file = dir / "config.json";
  const std::optional<nlohmann::json> generation = read_settings(generation_file);
  const std::optional<nlohmann::json> config = read_settings(config_file);
  const auto ids_of = [&](std::string_view key) {
    if (generation.has_value() && generation->contains(key))
      return token_ids(generation->at(key), key, generation_file);
    if (config.has_value() && config->contains(key)) return token_ids(config->at(key), key, config_file);
    return std::vector<int>{};
  };
  SpecialTokens t;
  t.eos = ids_of("eos_token_id");
  const std::vector<int> bos = ids_of("bos_token_id");
  if (bos.size() > 1) throw ModelProblem(dir.string() + ": bos_token_id is a list; one id expected");
  if (!bos.empty()) t.bos = bos.front();
  return t;
}

// ---- generating ---------------------------------------------------------------------------------------------

/// What the run needs once the host side has checked everything.
struct Plan {
  Options options;
  nn::DecoderConfig config;  // of the checkpoint (context as it will load)
  std::vector<int> prompt;
  std::optional<Tokenizer> tokenizer;  // set for a text prompt: the output is text
  SpecialTokens special;
};

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

template <nn::Element T>
int generate(const Plan& plan, const lazygraph::Device& device) {
  const Options& o = plan.options;
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
  std::optional<TextStream> text;
  if (plan.tokenizer.has_value()) text.emplace(*plan.tokenizer, plan.prompt);
  int printed = 0;
  const auto print = [&](int token) {
    if (text.has_value()) {
      const std::string piece = text->push(token);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
    } else {
      std::printf(printed == 0 ? "%d" : " %d", token);
    }
    ++printed;
    std::fflush(stdout);
  };

  int token = decoder.prefill(plan.prompt);
  const Clock::time_point first = Clock::now();
  int made = 1;
  int position = static_cast<int>(plan.prompt.size());
  const char* why = nullptr;
  while (true) {
    if (is_eos(token)) {
      why = "end of sequence";
      break;
    }
    print(token);
    if (made >= o.max_tokens) {
      why = "--max-tokens";
      break;
    }
    if (position >= context) {
      why = "context full";
      break;
    }
    token = decoder.forward({token, position++});
    ++made;
  }
  const Clock::time_point end = Clock::now();
  if (text.has_value()) {
    const std::string rest = text->finish();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
  }
  if (printed > 0 || text.has_value()) std::fputc('\n', stdout);
  std::fflush(stdout);

  std::string rate;
  if (made > 1) {
    char buf[64];
    std::snprintf(buf, sizeof buf, ", %.1f tokens/s", (made - 1) / seconds_between(first, end));
    rate = buf;
  }
  std::fprintf(stderr, "load %.2f s, first token %.1f ms%s (%d token%s, %s)\n", seconds_between(start, loaded),
               1000.0 * seconds_between(loaded, first), rate.c_str(), made, made == 1 ? "" : "s", why);
  return 0;
}

/// Everything that needs no GPU: the checkpoint's config and tensors, the special tokens, the tokenizer and the
/// prompt. \throws UsageProblem, ModelProblem, TokenizerError, nn::CheckpointError.
Plan plan_run(const Options& o) {
  Plan plan;
  plan.options = o;
  nn::LoadOptions load;
  load.context = o.context;
  nn::DecoderCheckpoint checkpoint = [&] {
    try {
      return nn::DecoderCheckpoint::open(o.model_dir, load);
    } catch (const lazygraph::UsageError& e) {  // a context beyond max_position_embeddings
      throw UsageProblem(e.what());
    }
  }();
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
  plan.special = special_tokens(o.model_dir);

  if (o.ids.has_value()) {
    plan.prompt = *o.ids;
  } else {
    if (!Tokenizer::supported()) {
      throw UsageProblem(
          "this lazygraph-run was built without SentencePiece, so it cannot tokenize a text prompt: pass the prompt "
          "as token ids with --ids 1,2,3 (or rebuild lazygraph with libsentencepiece-dev installed)");
    }
    const fs::path model_file = o.model_dir / "tokenizer.model";
    std::error_code ec;
    if (!fs::exists(model_file, ec)) {
      throw UsageProblem(o.model_dir.string() +
                         " has no tokenizer.model (a SentencePiece model) to tokenize a text prompt with: pass the "
                         "prompt as token ids with --ids 1,2,3");
    }
    plan.tokenizer = Tokenizer::load(model_file);
    if (plan.tokenizer->size() > plan.config.vocab) {
      throw ModelProblem(model_file.string() + ": " + std::to_string(plan.tokenizer->size()) +
                         " pieces, more than the model's vocabulary of " + std::to_string(plan.config.vocab));
    }
    if (o.bos && plan.special.bos.has_value()) plan.prompt.push_back(*plan.special.bos);
    const std::vector<int> text_ids = plan.tokenizer->encode(*o.prompt);
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
  std::string text = "temperature " + std::to_string(s.temperature);
  if (s.top_k > 0) text += ", top-k " + std::to_string(s.top_k);
  if (s.top_p < 1.0F) text += ", top-p " + std::to_string(s.top_p);
  return text + ", seed " + std::to_string(s.seed);
}

int run(const Options& o) {
  const Plan plan = plan_run(o);
  std::string why;
  if (!lazygraph::gpu_available(&why)) {
    std::fprintf(stderr, "lazygraph-run: no GPU to run on: %s\n", why.c_str());
    return kExitNoGpu;
  }
  const nn::DecoderConfig& c = plan.config;
  std::fprintf(
      stderr, "lazygraph-run: %s: %d layers, d %d, %d heads (%d kv), vocab %d, context %d, %s; %s; prompt %zu tokens\n",
      o.model_dir.c_str(), c.layers, c.d, c.heads, c.kv_head_count(), c.vocab, c.context,
      *plan.options.bf16 ? "bf16" : "fp16", sampling_text(o.sampling).c_str(), plan.prompt.size());
  if (o.sampling.temperature == 0.0F && (o.sampling.top_k != 0 || o.sampling.top_p != 1.0F)) {
    std::fprintf(stderr, "lazygraph-run: note: --top-k and --top-p change nothing at temperature 0 (greedy)\n");
  }
  const lazygraph::Device device = lazygraph::Device::get(0);
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
                 Tokenizer::supported() ? "supported" : "NOT supported, so use --ids");
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  if (options.version) {
    std::printf("lazygraph-run (lazygraph %s), SentencePiece tokenizer: %s\n", LAZYGRAPH_VERSION,
                Tokenizer::supported() ? "yes" : "no");
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
