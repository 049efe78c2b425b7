// GPU tests of lazygraph-run (meson test 'lazygraph-run-gpu', suite gpu): the tool end to end on seeded checkpoints
// written here, its tokens against the same checkpoint decoded in this process.
//   usage: lazygraph_run_gpu_tests LAZYGRAPH_RUN SPM_DIR [doctest options]
// LAZYGRAPH_RUN is the tool; SPM_DIR the folder of sentencepiece's programs (spm_train, spm_encode, spm_decode,
// spm_export_vocab), or '' to skip the text-prompt test, which also needs a tool built with SentencePiece. Without a
// GPU: prints why, exits 77.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <lazygraph/driver.hpp>
#include <lazygraph/nn/checkpoint.hpp>
#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/kernels.hpp>
#include <lazygraph/nn/quantized_save.hpp>
#include <lazygraph/nn/text_stream.hpp>
#include <lazygraph/nn/tokenizer.hpp>

#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/temp_dir.hpp"
#include "common/tokenizer_files.hpp"

using namespace lazygraph;
using namespace lazygraph::nn;

namespace {

struct Run {
  int status;
  std::string out;  // stdout
  std::string err;  // stderr
};

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

/// Runs `program` with `args` (and, when given, `input` on its standard input), returning its exit status and
/// outputs.
Run run_program(const std::string& program, const std::vector<std::string>& args, const lgtest::TempDir& scratch,
                const std::optional<std::string>& input = std::nullopt) {
  std::string command = quoted(program);
  for (const std::string& a : args) command += " " + quoted(a);
  const std::filesystem::path err = scratch / "stderr.txt";
  command += " 2>" + quoted(err.string());
  if (input.has_value()) {
    const std::filesystem::path in = scratch / "stdin.txt";
    std::ofstream(in, std::ios::binary) << *input;
    command += " <" + quoted(in.string());
  }
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  Run r{0, {}, {}};
  std::array<char, 4096> buf{};
  for (std::size_t n = 0; (n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0;) r.out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = read_file(err);
  return r;
}

/// The tool and sentencepiece's folder, from the command line (main).
std::string tool_path;
std::string spm_dir;

/// Runs lazygraph-run with `args`.
Run run_tool(const std::vector<std::string>& args, const lgtest::TempDir& scratch) {
  return run_program(tool_path, args, scratch);
}

/// The ids of an output line "1 2 3\n".
std::vector<int> ids_of(const std::string& text) {
  std::istringstream in(text);
  std::vector<int> ids;
  for (int id = 0; in >> id;) ids.push_back(id);
  return ids;
}

std::string ids_text(const std::vector<int>& ids) {
  std::string text;
  for (const int id : ids) text += (text.empty() ? "" : ",") + std::to_string(id);
  return text;
}

/// A small GQA decoder (d 128, 4 heads over 2 kv heads, 2 layers, vocab 512, context 64).
DecoderConfig small_config() {
  DecoderConfig c;
  c.d = 128;
  c.heads = 4;
  c.kv_heads = 2;
  c.layers = 2;
  c.ffn = 256;
  c.vocab = 512;
  c.context = 64;
  c.seed = 77;
  return c;
}

/// The tokens the checkpoint in `dir` generates in this process after `prompt`: `n` of them, greedy or sampled as
/// `sampling` says, the first from prefill and the rest one step at a time.
template <Element T = half>
std::vector<int> expected_tokens(const std::filesystem::path& dir, const std::vector<int>& prompt, int n,
                                 const Sampling& sampling = {}, int context = 0) {
  const Device device = Device::get(0);
  const Stream stream(device);
  const KernelLibrary library = kernel_library(device);
  LoadOptions options;
  options.context = context;
  BasicDecoder<T> decoder = load_decoder<T>(stream, library, dir, options);
  decoder.set_sampling(sampling);
  std::vector<int> tokens{decoder.prefill(prompt)};
  for (int p = static_cast<int>(prompt.size()); static_cast<int>(tokens.size()) < n; ++p) {
    tokens.push_back(decoder.forward({tokens.back(), p}));
  }
  return tokens;
}

/// The closing line's token count and why generation stopped; checks the line's form:
/// "load X.XX s, first token Y.Y ms[, Z.Z tokens/s] (N token[s], WHY)\n", the last line of stderr.
/// (Parsed by hand: std::regex trips g++ 12's -Wmaybe-uninitialized under the sanitizers.)
std::pair<int, std::string> closing_line(const std::string& err) {
  REQUIRE_MESSAGE((!err.empty() && err.back() == '\n'), "no closing line in: " << err);
  const std::size_t start = err.rfind('\n', err.size() - 2);
  const std::string line = err.substr(start == std::string::npos ? 0 : start + 1);
  double load = 0;
  double first = 0;
  int consumed = 0;
  REQUIRE_MESSAGE(std::sscanf(line.c_str(), "load %lf s, first token %lf ms%n", &load, &first, &consumed) == 2,
                  "no closing line in: " << err);
  const std::size_t open = line.rfind(" (");
  REQUIRE_MESSAGE((open != std::string::npos && line.ends_with(")\n")), "no closing line in: " << err);
  const std::string between =
      line.substr(static_cast<std::size_t>(consumed), open - static_cast<std::size_t>(consumed));
  CHECK_MESSAGE((between.empty() || (between.starts_with(", ") && between.ends_with(" tokens/s"))),
                "unexpected closing line: " << line);
  const std::string inside = line.substr(open + 2, line.size() - open - 4);  // "N tokens, WHY"
  int made = -1;
  int after = 0;
  REQUIRE_MESSAGE(std::sscanf(inside.c_str(), "%d token%n", &made, &after) == 1, "unexpected closing line: " << line);
  const std::size_t comma = inside.find(", ", static_cast<std::size_t>(after));
  REQUIRE_MESSAGE(comma != std::string::npos, "unexpected closing line: " << line);
  return {made, inside.substr(comma + 2)};
}

const std::vector<int> kPrompt{3, 141, 59, 26, 5};

}  // namespace

TEST_CASE("lazygraph-run prints the greedy tokens of the checkpoint, then load time, first token and tokens/s") {
  const lgtest::TempDir scratch("run-greedy");
  const auto dir = scratch / "model";
  save_seeded_checkpoint(dir, small_config(), DType::f16);
  const Run r = run_tool({dir.string(), "--ids", ids_text(kPrompt), "--max-tokens", "20"}, scratch);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(ids_of(r.out) == expected_tokens(dir, kPrompt, 20));
  CHECK(r.out.back() == '\n');
  const auto [made, why] = closing_line(r.err);
  CHECK(made == 20);
  CHECK(why == "--max-tokens");
  CHECK(r.err.find("tokens/s") != std::string::npos);
}

TEST_CASE("lazygraph-run samples with --temperature, --top-k, --top-p and --seed as Decoder::set_sampling does") {
  const lgtest::TempDir scratch("run-sampled");
  const auto dir = scratch / "model";
  save_seeded_checkpoint(dir, small_config(), DType::f16);
  for (const float top_p : {1.0F, 0.9F, 0.5F}) {
    CAPTURE(top_p);
    const std::string p = top_p == 1.0F ? "1" : top_p == 0.9F ? "0.9" : "0.5";
    const Run r = run_tool({dir.string(), "--ids", ids_text(kPrompt), "--max-tokens", "24", "--temperature", "1.3",
                            "--top-k", "60", "--top-p", p, "--seed", "4242"},
                           scratch);
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(ids_of(r.out) == expected_tokens(dir, kPrompt, 24, Sampling{1.3F, 60, 4242, top_p}));
    // The same command draws the same tokens.
    CHECK(run_tool({dir.string(), "--ids", ids_text(kPrompt), "--max-tokens", "24", "--temperature", "1.3", "--top-k",
                    "60", "--top-p", p, "--seed", "4242"},
                   scratch)
              .out == r.out);
  }
}

TEST_CASE("lazygraph-run runs a bfloat16 checkpoint in bf16 unless --dtype says fp16") {
  const lgtest::TempDir scratch("run-bf16");
  const auto dir = scratch / "model";
  save_seeded_checkpoint(dir, small_config(), DType::bf16);
  // The config says torch_dtype "bfloat16" (save_seeded_checkpoint writes the dtype it saved).
  Run r = run_tool({dir.string(), "--ids", ids_text(kPrompt), "--max-tokens", "12"}, scratch);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.find(", bf16;") != std::string::npos);
  CHECK(ids_of(r.out) == expected_tokens<bfloat16>(dir, kPrompt, 12));
  r = run_tool({dir.string(), "--ids", ids_text(kPrompt), "--max-tokens", "12", "--dtype", "fp16"}, scratch);
  REQUIRE(r.status == 0);
  CHECK(r.err.find(", fp16;") != std::string::npos);
  CHECK(ids_of(r.out) == expected_tokens<half>(dir, kPrompt, 12));
}

TEST_CASE("lazygraph-run runs a quantized checkpoint in its scales' element type, as the library decodes it") {
  const lgtest::TempDir scratch("run-quantized");
  const auto dense = scratch / "dense";
  const auto dir = scratch / "quantized";
  save_seeded_checkpoint(dense, small_config(), DType::f16);
  for (const ScaleType scales : {ScaleType::f16, ScaleType::bf16}) {
    CAPTURE(static_cast<int>(scales));
    LoadOptions quantize;
    quantize.quantization.attention = QuantizedFormat{WeightFormat::int8_channel, 0, false, scales};
    quantize.quantization.mlp = QuantizedFormat{WeightFormat::int4_group, 128, false, scales};
    save_quantized_checkpoint(DecoderCheckpoint::open(dense, quantize), dir);
    const bool bf16 = scales == ScaleType::bf16;
    const Run r = run_tool({dir.string(), "--ids", ids_text(kPrompt), "--max-tokens", "12"}, scratch);
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(r.err.find(bf16 ? ", bf16;" : ", fp16;") != std::string::npos);
    CHECK(ids_of(r.out) ==
          (bf16 ? expected_tokens<bfloat16>(dir, kPrompt, 12) : expected_tokens<half>(dir, kPrompt, 12)));
    // --dtype of the other element type: refused before loading, saying which one reads the folder.
    const Run other = run_tool({dir.string(), "--ids", ids_text(kPrompt), "--dtype", bf16 ? "fp16" : "bf16"}, scratch);
    CHECK(other.status == 2);
    CHECK(other.err.find(std::string("quantized with ") + (bf16 ? "bf16" : "fp16") + " scales") != std::string::npos);
  }
}

TEST_CASE("lazygraph-run stops at an end-of-sequence token of generation_config.json, unless --ignore-eos") {
  const lgtest::TempDir scratch("run-eos");
  const auto dir = scratch / "model";
  save_seeded_checkpoint(dir, small_config(), DType::f16);
  const std::vector<int> all = expected_tokens(dir, kPrompt, 30);
  const int eos = all[6];
  const auto first = std::find(all.begin(), all.end(), eos) - all.begin();  // the first time it comes
  int other = 511;  // a second end-of-sequence id (a list), one that never comes
  while (std::find(all.begin(), all.end(), other) != all.end()) --other;
  std::ofstream(dir / "generation_config.json")
      << R"({"bos_token_id": 1, "eos_token_id": [)" << other << ", " << eos << "]}";
  Run r = run_tool({dir.string(), "--ids", ids_text(kPrompt), "--max-tokens", "30"}, scratch);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(ids_of(r.out) == std::vector<int>(all.begin(), all.begin() + first));  // the EOS token is not printed
  const auto [made, why] = closing_line(r.err);
  CHECK(made == first + 1);
  CHECK(why == "end of sequence");
  r = run_tool({dir.string(), "--ids", ids_text(kPrompt), "--max-tokens", "30", "--ignore-eos"}, scratch);
  REQUIRE(r.status == 0);
  CHECK(ids_of(r.out) == all);
}

TEST_CASE("lazygraph-run stops when the context is full") {
  const lgtest::TempDir scratch("run-context");
  const auto dir = scratch / "model";
  save_seeded_checkpoint(dir, small_config(), DType::f16);
  // A context of 12 after a prompt of 5: steps at positions 5 .. 11, so 1 + 7 tokens.
  const Run r = run_tool({dir.string(), "--ids", ids_text(kPrompt), "--max-tokens", "100", "--context", "12"}, scratch);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(ids_of(r.out) == expected_tokens(dir, kPrompt, 8, {}, 12));
  const auto [made, why] = closing_line(r.err);
  CHECK(made == 8);
  CHECK(why == "context full");
}

TEST_CASE("lazygraph-run runs on the GPU --device names, and refuses one past the last naming how many there are") {
  const lgtest::TempDir scratch("run-device");
  const auto dir = scratch / "model";
  save_seeded_checkpoint(dir, small_config(), DType::f16);
  const int count = Device::count();
  REQUIRE(count > 0);
  const std::string last = std::to_string(count - 1);
  const Run r = run_tool({dir.string(), "--ids", ids_text(kPrompt), "--max-tokens", "6", "--device", last}, scratch);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.find(" on GPU " + last + " (" + Device::get(count - 1).name() + "): ") != std::string::npos);
  // The same kind of GPU as the first (machines here hold one kind) decodes the same tokens.
  if (Device::get(count - 1).name() == Device::get(0).name()) CHECK(ids_of(r.out) == expected_tokens(dir, kPrompt, 6));

  const Run past = run_tool({dir.string(), "--ids", ids_text(kPrompt), "--device", std::to_string(count)}, scratch);
  CHECK(past.status == 2);
  CHECK(past.out.empty());
  CHECK(past.err == "lazygraph-run: --device " + std::to_string(count) + " is not a GPU of this machine, which has " +
                        std::to_string(count) + " (--device 0" + (count > 1 ? " to " + last : std::string()) + ")\n");
}

TEST_CASE("lazygraph-run tokenizes a text prompt with tokenizer.model and prints the generated text") {
  const lgtest::TempDir scratch("run-text");
  const Run version = run_tool({"--version"}, scratch);
  if (version.out.find("SentencePiece tokenizer: yes") == std::string::npos || spm_dir.empty()) {
    MESSAGE(
        "skipped: needs a lazygraph-run built with SentencePiece, and the folder of sentencepiece's spm_train, "
        "spm_encode, spm_decode and spm_export_vocab");
    return;
  }
  const std::filesystem::path tools(spm_dir);
  const auto dir = scratch / "model";
  save_seeded_checkpoint(dir, small_config(), DType::f16);
  {
    std::ofstream corpus(scratch / "corpus.txt");
    for (int i = 0; i < 300; ++i) {
      corpus << "Once upon a time a small model number " << i << " ran its steps as one graph on the GPU.\n";
    }
  }
  const Run trained =
      run_program((tools / "spm_train").string(),
                  {"--input=" + (scratch / "corpus.txt").string(), "--model_prefix=" + (scratch / "spm").string(),
                   "--vocab_size=150", "--model_type=bpe", "--hard_vocab_limit=false", "--bos_id=1", "--eos_id=2",
                   "--unk_id=0", "--minloglevel=2"},
                  scratch);
  REQUIRE_MESSAGE(trained.status == 0, trained.err);
  const std::string model = (dir / "tokenizer.model").string();
  std::filesystem::rename(scratch / "spm.model", model);
  std::ofstream(dir / "generation_config.json") << R"({"bos_token_id": 1, "eos_token_id": null})";
  const Run vocab = run_program((tools / "spm_export_vocab").string(), {"--model=" + model}, scratch);
  REQUIRE(vocab.status == 0);
  const auto pieces = static_cast<int>(std::count(vocab.out.begin(), vocab.out.end(), '\n'));
  REQUIRE(pieces > 3);
  REQUIRE(pieces <= small_config().vocab);
  const std::string prompt = "Once upon a time";

  const Run encoded =
      run_program((tools / "spm_encode").string(), {"--model=" + model, "--output_format=id"}, scratch, prompt + "\n");
  REQUIRE(encoded.status == 0);
  std::vector<int> ids{1};  // bos_token_id first
  for (const int id : ids_of(encoded.out)) ids.push_back(id);
  const std::vector<int> generated = expected_tokens(dir, ids, 20);

  const Run r = run_tool({dir.string(), prompt, "--max-tokens", "20"}, scratch);
  INFO(r.err);
  REQUIRE(r.status == 0);
  // What the prompt and the generated tokens decode to, past what the prompt alone decodes to: the spaces
  // SentencePiece folds into pieces included. Ids past the tokenizer's pieces have no text.
  const auto decoded = [&](const std::vector<int>& tokens) {
    std::string line;
    for (const int t : tokens) line += (line.empty() ? "" : " ") + std::to_string(t);
    const Run d =
        run_program((tools / "spm_decode").string(), {"--model=" + model, "--input_format=id"}, scratch, line + "\n");
    REQUIRE(d.status == 0);
    return d.out.substr(0, d.out.size() - 1);  // its newline
  };
  std::vector<int> all = ids;
  for (const int t : generated) {
    if (t < pieces) all.push_back(t);
  }
  const std::string prompt_text = decoded(ids);
  const std::string full = decoded(all);
  REQUIRE(full.substr(0, prompt_text.size()) == prompt_text);
  CHECK(r.out == full.substr(prompt_text.size()) + "\n");
  // --no-bos leaves bos_token_id out: the prompt is then one token shorter.
  const Run no_bos = run_tool({dir.string(), prompt, "--max-tokens", "3", "--no-bos"}, scratch);
  CHECK(no_bos.status == 0);
  CHECK(no_bos.err.find("prompt " + std::to_string(ids.size() - 1) + " tokens") != std::string::npos);
}

TEST_CASE("lazygraph-run reads tokenizer.json, prints the text as it comes, stops at --stop and writes --json") {
  const lgtest::TempDir scratch("run-json");
  const auto dir = scratch / "model";
  save_seeded_checkpoint(dir, small_config(), DType::f16);
  // A byte-level tokenizer over the model's 512 ids: the 256 bytes, padding tokens, <|begin_of_text|> (511) put in
  // front by its template.
  std::vector<std::string> vocab = lgtest::byte_level_chars();
  for (int i = 256; i < 511; ++i) vocab.push_back("pad" + std::to_string(i));
  vocab.emplace_back("<|begin_of_text|>");
  lgtest::Parts parts;
  parts.model = lgtest::bpe(vocab, {});
  parts.pre_tokenizer = lgtest::kByteLevel;
  parts.decoder = R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true})";
  parts.post_processor =
      R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<|begin_of_text|>","type_id":0}},)"
      R"({"Sequence":{"id":"A","type_id":0}}],"pair":[],"special_tokens":{"<|begin_of_text|>":)"
      R"({"id":"<|begin_of_text|>","ids":[511],"tokens":["<|begin_of_text|>"]}}})";
  parts.added_tokens = R"([{"id":511,"content":"<|begin_of_text|>","single_word":false,"lstrip":false,"rstrip":false,)"
                       R"("normalized":false,"special":true}])";
  std::ofstream(dir / "tokenizer.json") << lgtest::json_of(parts);
  std::ofstream(dir / "generation_config.json") << R"({"bos_token_id": 511, "eos_token_id": null})";

  const std::string prompt_text = "Once upon a time";
  const Tokenizer tokenizer = Tokenizer::load(dir);
  const std::vector<int> prompt = tokenizer.encode(prompt_text);
  REQUIRE(prompt.front() == 511);
  const std::vector<int> generated = expected_tokens(dir, prompt, 24);
  TextStream stream(tokenizer, prompt);  // what the tool prints, as tests/nn/text_stream.cpp checks it
  std::string text;
  for (const int token : generated) text += stream.push(token);
  text += stream.finish();

  const Run r = run_tool({dir.string(), prompt_text, "--max-tokens", "24"}, scratch);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out == text + "\n");

  const Run j = run_tool({dir.string(), prompt_text, "--max-tokens", "24", "--json"}, scratch);
  INFO(j.err);
  REQUIRE(j.status == 0);
  const nlohmann::json result = nlohmann::json::parse(j.out);
  CHECK(result.at("prompt").get<std::vector<int>>() == prompt);
  CHECK(result.at("tokens").get<std::vector<int>>() == generated);
  CHECK(result.at("text").get<std::string>() == text);
  CHECK(result.at("stop") == "max_tokens");
  CHECK(result.at("timings").at("load_s").get<double>() > 0.0);
  CHECK(result.at("timings").at("first_token_ms").get<double>() > 0.0);
  CHECK(result.at("timings").at("decode_tokens_per_s").get<double>() > 0.0);

  // A stop string from the middle of the text (two whole characters): the text before its first appearance is
  // printed, and generation ends at the token that completed it.
  std::size_t from = text.size() / 2;
  while (from > 0 && (static_cast<unsigned char>(text[from]) & 0xC0U) == 0x80U) --from;
  std::size_t to = from;
  for (int chars = 0; chars < 2 && to < text.size(); ++chars) {
    ++to;
    while (to < text.size() && (static_cast<unsigned char>(text[to]) & 0xC0U) == 0x80U) ++to;
  }
  const std::string stop = text.substr(from, to - from);
  REQUIRE(!stop.empty());
  const std::size_t first = text.find(stop);
  const Run s = run_tool(
      {dir.string(), prompt_text, "--max-tokens", "24", "--stop", "never in the text", "--stop", stop, "--json"},
      scratch);
  INFO(s.err);
  REQUIRE(s.status == 0);
  const nlohmann::json stopped = nlohmann::json::parse(s.out);
  CHECK(stopped.at("text").get<std::string>() == text.substr(0, first));
  CHECK(stopped.at("stop") == "stop");
  CHECK(stopped.at("stop_string").get<std::string>() == stop);
  const auto tokens = stopped.at("tokens").get<std::vector<int>>();
  REQUIRE(tokens.size() <= generated.size());
  CHECK(std::equal(tokens.begin(), tokens.end(), generated.begin()));
  const Run printed = run_tool({dir.string(), prompt_text, "--max-tokens", "24", "--stop", stop}, scratch);
  REQUIRE(printed.status == 0);
  CHECK(printed.out == text.substr(0, first) + "\n");
  CHECK(closing_line(printed.err).second == "--stop");
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s LAZYGRAPH_RUN SPM_DIR [doctest options] (tests/meson.build passes both)\n",
                 argv[0]);
    return 2;
  }
  tool_path = std::filesystem::absolute(argv[1]).string();  // Meson passes it relative to the build folder
  spm_dir = argv[2];
  std::string why;
  if (!gpu_available(&why)) {
    std::printf("lazygraph-run gpu tests skipped: %s\n", why.c_str());
    return 77;
  }
  std::vector<char*> rest{argv[0]};
  rest.insert(rest.end(), argv + 3, argv + argc);
  doctest::Context context(static_cast<int>(rest.size()), rest.data());
  return context.run();
}
