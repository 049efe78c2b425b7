// decoder_logits: loads a Hugging Face checkpoint folder with lazygraph::nn and writes what the decoder computes
// for given token ids to a file, for tests/nn/crosscheck/crosscheck_transformers.py to compare with transformers.
// Not a test by itself; run `decoder_logits --help` for the modes and the file layouts.
#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn/checkpoint.hpp>
#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/tensor_parallel_decoder.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace lg = lazygraph;
namespace nn = lazygraph::nn;

namespace {

constexpr int exit_failed = 1;
constexpr int exit_usage = 2;
constexpr int exit_skipped = 77;

constexpr const char* usage_text =
    "usage: decoder_logits DIR --mode step|prefill|batch|generate --ids I,I,... [--ids I,I,...] --out FILE\n"
    "                      [--dtype f16|bf16] [--context N] [--tensor-cores] [--persistent] [--lengths L,L,...]\n"
    "                      [--prompt P] [--tokens N] [--ranks R] [--routes FILE]\n"
    "       decoder_logits --probe\n"
    "Loads the checkpoint folder DIR (config.json and safetensors weights) into lazygraph's decoder in fp16 (the\n"
    "default) or bf16 and writes what it computes for the token ids to FILE, little-endian:\n"
    "  step      forward({ids[p], p}) for p = 0 .. n-1 (teacher-forced): n rows of vocab float32 logits.\n"
    "  prefill   for each prompt length L of --lengths (default 1,7,8,9,17,n; each at most n): reset(),\n"
    "            prefill(ids[0 .. L)) and its last row's logits (position L-1), then forward({ids[p], p}) for\n"
    "            p = L .. n-1 and each one's logits: n-L+1 rows of vocab float32 per length, lengths in order.\n"
    "  batch     every --ids sequence (2 to 8 of them, of one length n) stepped together with forward_batch, the\n"
    "            decoder's max_batch set to their count: for p = 0 .. n-1, for each sequence s, its logits at p:\n"
    "            n x sequences rows of vocab float32.\n"
    "  generate  t = prefill(ids[0 .. P)) (P from --prompt, default 8), then generate(t, N) (N from --tokens,\n"
    "            default 32) greedily from position P: N+1 int32, t then the generated tokens (positions P .. P+N).\n"
    "--context N sets the KV cache positions (LoadOptions::context; default: the checkpoint's); --tensor-cores runs\n"
    "steps of 2 to 8 rows on tensor cores (LoadOptions::tensor_cores); --persistent runs the steps on the persistent\n"
    "backend (DecoderConfig::backend); --ranks R splits the model over GPUs 0 .. R-1 (TensorParallelDecoder, each "
    "rank\n"
    "loading its share with DecoderCheckpoint::upload_shard) and writes rank 0's gathered logits.\n"
    "--routes FILE (step mode, a mixture of experts) also writes the experts each layer chose at each position\n"
    "(LoadOptions::record_routes, Decoder::last_routes): n x layers x top_k int32, position-major, each layer's in\n"
    "the router's order (best first).\n"
    "--probe prints the GPU the decoder would run on (exit 0) or why there is none (exit 77), and loads nothing.\n"
    "Exit status: 0 written; 1 failed, the last line on stderr being\n"
    "  'decoder_logits: load failed: <ErrorType>: <message>' or 'decoder_logits: run failed: <ErrorType>: <message>';\n"
    "2 bad arguments; 77 skipped (no GPU; the reason is printed).\n";

/// What the command line asks for.
struct Options {
  std::filesystem::path dir;
  std::filesystem::path out;
  std::filesystem::path routes;  ///< --routes: where the step mode writes each position's routes, or empty
  std::string mode;
  bool bf16 = false;
  bool persistent = false;  ///< run the steps on the persistent backend
  int context = 0;
  bool tensor_cores = false;
  bool probe = false;
  int ranks = 1;  ///< more than 1: a TensorParallelDecoder over GPUs 0 .. ranks-1
  std::vector<std::vector<int>> ids;
  std::vector<int> lengths;
  int prompt = 8;
  int tokens = 32;
};

/// Bad command-line arguments (exit 2).
class ArgumentError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

int parse_int(std::string_view text, std::string_view what) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size()) {
    throw ArgumentError(std::string(what) + ": '" + std::string(text) + "' is not an integer");
  }
  return value;
}

std::vector<int> parse_list(std::string_view text, std::string_view what) {
  std::vector<int> values;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    values.push_back(parse_int(text.substr(0, comma), what));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  if (values.empty()) throw ArgumentError(std::string(what) + ": the list is empty");
  return values;
}

/// Parses argv; nullopt after --help.
std::optional<Options> parse_arguments(int argc, char** argv) {
  Options o;
  bool have_dir = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) throw ArgumentError(std::string(arg) + " needs a value");
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") return std::nullopt;
    if (arg == "--probe") {
      o.probe = true;
    } else if (arg == "--mode") {
      o.mode = value();
    } else if (arg == "--dtype") {
      const std::string_view d = value();
      if (d != "f16" && d != "bf16") throw ArgumentError("--dtype: '" + std::string(d) + "' is not f16 or bf16");
      o.bf16 = d == "bf16";
    } else if (arg == "--ids") {
      o.ids.push_back(parse_list(value(), "--ids"));
    } else if (arg == "--out") {
      o.out = value();
    } else if (arg == "--context") {
      o.context = parse_int(value(), "--context");
    } else if (arg == "--tensor-cores") {
      o.tensor_cores = true;
    } else if (arg == "--persistent") {
      o.persistent = true;
    } else if (arg == "--lengths") {
      o.lengths = parse_list(value(), "--lengths");
    } else if (arg == "--prompt") {
      o.prompt = parse_int(value(), "--prompt");
    } else if (arg == "--tokens") {
      o.tokens = parse_int(value(), "--tokens");
    } else if (arg == "--routes") {
      o.routes = value();
    } else if (arg == "--ranks") {
      o.ranks = parse_int(value(), "--ranks");
      if (o.ranks < 1) throw ArgumentError("--ranks must be at least 1");
    } else if (arg.starts_with("-")) {
      throw ArgumentError("unknown option " + std::string(arg));
    } else if (have_dir) {
      throw ArgumentError("more than one checkpoint folder: " + o.dir.string() + " and " + std::string(arg));
    } else {
      o.dir = arg;
      have_dir = true;
    }
  }
  if (o.probe) {
    if (argc != 2) throw ArgumentError("--probe takes no other arguments");
    return o;
  }
  if (!have_dir) throw ArgumentError("no checkpoint folder given");
  if (o.out.empty()) throw ArgumentError("no --out file given");
  if (o.mode != "step" && o.mode != "prefill" && o.mode != "batch" && o.mode != "generate") {
    throw ArgumentError("--mode: '" + o.mode + "' is not step, prefill, batch or generate");
  }
  if (o.ids.empty()) throw ArgumentError("no --ids given");
  if (o.ranks > 1 && o.persistent) throw ArgumentError("--ranks and --persistent: ranks run the graph backend");
  if (!o.routes.empty() && (o.mode != "step" || o.ranks > 1)) {
    throw ArgumentError("--routes: the step mode on one GPU only, not --mode " + o.mode +
                        (o.ranks > 1 ? " with --ranks" : ""));
  }
  if (o.mode == "batch") {
    if (o.ids.size() < 2 || o.ids.size() > static_cast<std::size_t>(nn::kMaxRows)) {
      throw ArgumentError("batch needs 2 to " + std::to_string(nn::kMaxRows) + " --ids sequences, not " +
                          std::to_string(o.ids.size()));
    }
    for (const std::vector<int>& s : o.ids) {
      if (s.size() != o.ids[0].size()) throw ArgumentError("batch: the --ids sequences differ in length");
    }
  } else if (o.ids.size() > 1) {
    throw ArgumentError("--mode " + o.mode + " takes one --ids sequence, not " + std::to_string(o.ids.size()));
  }
  const int n = static_cast<int>(o.ids[0].size());
  if (o.mode == "prefill") {
    if (o.lengths.empty()) o.lengths = {1, 7, 8, 9, 17, n};
    std::erase_if(o.lengths, [&](int l) { return l > n; });
    std::sort(o.lengths.begin(), o.lengths.end());
    o.lengths.erase(std::unique(o.lengths.begin(), o.lengths.end()), o.lengths.end());
    if (o.lengths.front() < 1) throw ArgumentError("--lengths: every length must be at least 1");
  }
  if (o.mode == "generate") {
    if (o.prompt < 1 || o.prompt > n) {
      throw ArgumentError("--prompt " + std::to_string(o.prompt) + " must be 1 to the " + std::to_string(n) + " ids");
    }
    if (o.tokens < 1) throw ArgumentError("--tokens must be at least 1");
  }
  return o;
}

/// Appends raw little-endian values to the output file (the machines this runs on are little-endian).
class Output {
 public:
  explicit Output(const std::filesystem::path& path) : path_(path), file_(path, std::ios::binary | std::ios::trunc) {
    if (!file_) throw lg::UsageError("cannot open " + path.string() + " for writing");
  }

  template <class T>
  void logits(const std::vector<T>& values) {
    std::vector<float> f(values.size());
    std::transform(values.begin(), values.end(), f.begin(), [](T v) { return v.to_float(); });
    write(std::as_bytes(std::span<const float>(f)));
  }

  void ints(std::span<const int> values) {
    std::vector<std::int32_t> v(values.begin(), values.end());
    write(std::as_bytes(std::span<const std::int32_t>(v)));
  }

  void close() {
    file_.close();
    if (!file_) throw lg::UsageError("writing " + path_.string() + " failed");
  }

 private:
  void write(std::span<const std::byte> bytes) {
    file_.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!file_) throw lg::UsageError("writing " + path_.string() + " failed");
  }

  std::filesystem::path path_;
  std::ofstream file_;
};

/// The decoder of the checkpoint, with a KV cache for as many sequences as a batch steps together.
template <nn::Element T>
nn::BasicDecoder<T> load(const lg::Stream& stream, const lg::KernelLibrary& library, const Options& o) {
  nn::LoadOptions options;
  options.context = o.context;
  options.tensor_cores = o.tensor_cores;
  options.progress = false;
  options.max_batch = o.mode == "batch" ? static_cast<int>(o.ids.size()) : 1;
  options.record_routes = !o.routes.empty();
  if (!o.persistent) return nn::load_decoder<T>(stream, library, o.dir, options);
  const nn::DecoderCheckpoint checkpoint = nn::DecoderCheckpoint::open(o.dir, options);
  nn::DecoderConfig config = checkpoint.config();
  config.backend = nn::DecoderBackend::persistent;
  return nn::BasicDecoder<T>(stream, library, config, checkpoint.template upload<T>(stream));
}

/// Runs the mode on a BasicDecoder or a BasicTensorParallelDecoder (the same calls); `routes`, where given (--routes,
/// a BasicDecoder's step mode), gets each position's routes.
template <class D>
void run(D& decoder, const Options& o, Output& out, Output* routes) {
  const std::vector<int>& ids = o.ids[0];
  const int n = static_cast<int>(ids.size());
  if (o.mode == "step") {
    for (int p = 0; p < n; ++p) {
      (void)decoder.forward({ids[static_cast<std::size_t>(p)], p});
      out.logits(decoder.logits(0));
      if constexpr (requires { decoder.last_routes(); }) {
        if (routes != nullptr) routes->ints(decoder.last_routes().experts);  // one row: [layers][top_k]
      }
    }
  } else if (o.mode == "prefill") {
    for (const int length : o.lengths) {
      decoder.reset();
      (void)decoder.prefill(std::span<const int>(ids).first(static_cast<std::size_t>(length)));
      // After prefill, logits() is the prompt's last token's (whichever path ran it).
      out.logits(decoder.logits());
      for (int p = length; p < n; ++p) {
        (void)decoder.forward({ids[static_cast<std::size_t>(p)], p});
        out.logits(decoder.logits(0));
      }
    }
  } else if (o.mode == "batch") {
    const std::size_t sequences = o.ids.size();
    std::vector<nn::TokenAt> steps(sequences);
    for (int p = 0; p < n; ++p) {
      for (std::size_t s = 0; s < sequences; ++s) steps[s] = {o.ids[s][static_cast<std::size_t>(p)], p};
      (void)decoder.forward_batch(steps);
      for (std::size_t s = 0; s < sequences; ++s) out.logits(decoder.logits(static_cast<int>(s)));
    }
  } else {
    const int first = decoder.prefill(std::span<const int>(ids).first(static_cast<std::size_t>(o.prompt)));
    std::vector<int> tokens{first};
    const std::vector<int> generated = decoder.generate(first, o.tokens, -1, o.prompt);
    tokens.insert(tokens.end(), generated.begin(), generated.end());
    out.ints(tokens);
  }
}

/// "ErrorType: message" for the exception in flight, on one line (the harness reads the last line of stderr).
std::string describe_current_exception() {
  std::string text;
  try {
    throw;
  } catch (const nn::CheckpointError& e) {
    text = std::string("CheckpointError: ") + e.what();
  } catch (const lg::UsageError& e) {
    text = std::string("UsageError: ") + e.what();
  } catch (const lg::CudaError& e) {
    text = std::string("CudaError: ") + e.what();
  } catch (const lg::Error& e) {
    text = std::string("Error: ") + e.what();
  } catch (const std::exception& e) {
    text = std::string("std::exception: ") + e.what();
  } catch (...) {
    text = "unknown exception";
  }
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

/// Prints what ran, as load_and_run's last line.
void print_written(const Options& o, const nn::DecoderConfig& c) {
  std::printf(
      "decoder_logits: %s, %s, d %d, heads %d/%d, head_dim %d, layers %d, vocab %d, context %d, ranks %d: %s written\n",
      o.dir.string().c_str(), o.bf16 ? "bf16" : "fp16", c.d, c.heads, c.kv_head_count(), c.head_dim(), c.layers,
      c.vocab, c.context, o.ranks, o.out.string().c_str());
}

/// Loads with `make` (a decoder, or a load failure), runs the mode and writes the file.
template <class Make>
int load_and_run_with(const Options& o, Make make) {
  decltype(make()) decoder;
  try {
    decoder = make();
  } catch (...) {
    std::fprintf(stderr, "decoder_logits: load failed: %s\n", describe_current_exception().c_str());
    return exit_failed;
  }
  try {
    Output out(o.out);
    std::optional<Output> routes;
    if (!o.routes.empty()) routes.emplace(o.routes);
    run(*decoder, o, out, routes ? &*routes : nullptr);
    out.close();
    if (routes) routes->close();
  } catch (...) {
    std::fprintf(stderr, "decoder_logits: run failed: %s\n", describe_current_exception().c_str());
    return exit_failed;
  }
  print_written(o, decoder->config());
  return 0;
}

template <nn::Element T>
int load_and_run(const Options& o) {
  lg::Device gpu = lg::Device::first();
  lg::Stream stream = gpu.create_stream();
  const lg::KernelLibrary library = nn::kernel_library(gpu);
  return load_and_run_with(o, [&] { return std::make_unique<nn::BasicDecoder<T>>(load<T>(stream, library, o)); });
}

/// The checkpoint split over GPUs 0 .. o.ranks-1, each rank reading its share of the files.
template <nn::Element T>
int load_and_run_ranks(const Options& o) {
  if (lg::Device::count() < o.ranks) {
    std::printf("decoder_logits: skipped, --ranks %d needs %d GPUs and this machine has %d\n", o.ranks, o.ranks,
                lg::Device::count());
    return exit_skipped;
  }
  std::vector<lg::Device> devices;
  for (int r = 0; r < o.ranks; ++r) devices.push_back(lg::Device::get(r));
  const std::vector<lg::Communicator> comms = lg::Communicator::create_all(devices);
  std::vector<lg::KernelLibrary> libraries;
  for (const lg::Device& d : devices) libraries.push_back(nn::kernel_library(d));
  std::vector<const lg::KernelLibrary*> pointers;
  for (const lg::KernelLibrary& l : libraries) pointers.push_back(&l);
  return load_and_run_with(o, [&] {
    nn::LoadOptions options;
    options.context = o.context;
    options.tensor_cores = o.tensor_cores;
    options.progress = false;
    options.max_batch = o.mode == "batch" ? static_cast<int>(o.ids.size()) : 1;
    const nn::DecoderCheckpoint checkpoint = nn::DecoderCheckpoint::open(o.dir, options);
    std::vector<nn::BasicDecoderWeights<T>> shares;
    for (int r = 0; r < o.ranks; ++r) {
      const lg::Stream s(devices[static_cast<std::size_t>(r)]);
      shares.push_back(checkpoint.template upload_shard<T>(s, r, o.ranks));
      s.synchronize();
    }
    return std::make_unique<nn::BasicTensorParallelDecoder<T>>(comms, pointers, checkpoint.config(), std::move(shares));
  });
}

template <nn::Element T>
int load_and_run_any(const Options& o) {
  return o.ranks > 1 ? load_and_run_ranks<T>(o) : load_and_run<T>(o);
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<Options> options;
  try {
    options = parse_arguments(argc, argv);
  } catch (const ArgumentError& e) {
    std::fprintf(stderr, "decoder_logits: %s\n%s", e.what(), usage_text);
    return exit_usage;
  }
  if (!options) {
    std::printf("%s", usage_text);
    return 0;
  }
  std::string why;
  if (!lg::gpu_available(&why)) {
    std::printf("decoder_logits: skipped, no GPU to run on: %s\n", why.c_str());
    return exit_skipped;
  }
  if (options->probe) {
    try {
      const lg::Device gpu = lg::Device::first();
      std::printf("decoder_logits: GPU: %s (sm_%d)\n", gpu.name().c_str(), gpu.compute_capability().as_int());
      return 0;
    } catch (...) {
      std::fprintf(stderr, "decoder_logits: setup failed: %s\n", describe_current_exception().c_str());
      return exit_failed;
    }
  }
  try {
    return options->bf16 ? load_and_run_any<lg::bfloat16>(*options) : load_and_run_any<lg::half>(*options);
  } catch (...) {
    // The device, its stream or the kernel library could not be set up.
    std::fprintf(stderr, "decoder_logits: setup failed: %s\n", describe_current_exception().c_str());
    return exit_failed;
  }
}
