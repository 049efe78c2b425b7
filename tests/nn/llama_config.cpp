// Host tests of lazygraph::nn::LlamaConfig: parsing real-shaped config.json texts, defaults, the to_json round
// trip, loading from a file or a folder, and one test per refused input.
#include <doctest/doctest.h>

#include "common/temp_dir.hpp"

#include <lazygraph/nn/llama_config.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

using namespace lazygraph::nn;
namespace fs = std::filesystem;

namespace {

/// Every test here writes into its own folder.
struct TempDir : lgtest::TempDir {
  TempDir() : lgtest::TempDir("nn-config") {}
};

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

// The config.json of Llama 3 8B, as published (with a null rope_scaling and keys lazygraph ignores).
const std::string kLlama3 = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 8192,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// The least a config may hold.
const std::string kMinimal =
    R"({"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 128,
        "vocab_size": 100})";

/// kMinimal with `extra` (a JSON member list, e.g. "\"head_dim\": 8") added.
std::string minimal_with(const std::string& extra) {
  return kMinimal.substr(0, kMinimal.rfind('}')) + ", " + extra + "}";
}

/// The CheckpointError that parsing `text` throws; fails the test when it throws nothing or another type.
CheckpointError parse_error_of(const std::string& text, const fs::path& source) {
  try {
    (void)LlamaConfig::parse(text, source);
  } catch (const CheckpointError& e) {
    return e;
  } catch (const std::exception& e) {
    FAIL("expected a CheckpointError, got another exception: " << e.what());
  }
  FAIL("expected a CheckpointError for " << text);
  throw std::logic_error("unreachable");
}

/// Checks that parsing `text` is refused with a message naming the source file and holding `fragment`.
void check_refused(const std::string& text, const std::string& fragment) {
  const fs::path source = "/models/tiny/config.json";
  const CheckpointError error = parse_error_of(text, source);
  INFO("message: " << std::string(error.what()));
  CHECK(error.file() == source);
  CHECK(error.tensor().empty());
  const std::string what = error.what();
  CHECK(what.find("file /models/tiny/config.json: ") == 0);
  CHECK(what.find(fragment) != std::string::npos);
}

}  // namespace

TEST_CASE("the config.json of Llama 3 8B parses to its hyperparameters") {
  const LlamaConfig config = LlamaConfig::parse(kLlama3, "config.json");
  CHECK(config.hidden_size == 4096);
  CHECK(config.num_attention_heads == 32);
  CHECK(config.num_key_value_heads == 8);
  CHECK(config.num_hidden_layers == 32);
  CHECK(config.intermediate_size == 14336);
  CHECK(config.vocab_size == 128256);
  CHECK(config.max_position_embeddings == 8192);
  CHECK(config.rope_theta == 500000.0);
  CHECK(config.rms_norm_eps == 1e-5);
  CHECK(config.torch_dtype == "bfloat16");
  CHECK_FALSE(config.tie_word_embeddings);
  CHECK(config.hidden_act == "silu");
  CHECK_FALSE(config.head_dim.has_value());
  CHECK(config.head_dimension() == 128);
}

TEST_CASE("absent optional keys take their defaults") {
  const LlamaConfig config = LlamaConfig::parse(kMinimal, "config.json");
  CHECK(config.num_key_value_heads == 4);  // = num_attention_heads
  CHECK(config.max_position_embeddings == 2048);
  CHECK(config.rope_theta == 10000.0);
  CHECK(config.rms_norm_eps == 1e-5);
  CHECK(config.torch_dtype.empty());
  CHECK_FALSE(config.tie_word_embeddings);
  CHECK(config.hidden_act == "silu");
  CHECK_FALSE(config.head_dim.has_value());
  CHECK(config.head_dimension() == 16);

  const LlamaConfig nulls =
      LlamaConfig::parse(minimal_with(R"("num_key_value_heads": null, "torch_dtype": null, "head_dim": null)"), "c");
  CHECK(nulls == config);
}

TEST_CASE("head_dim is read, and with it hidden_size need not be a multiple of the heads") {
  const LlamaConfig config =
      LlamaConfig::parse(minimal_with(R"("head_dim": 24, "num_key_value_heads": 2, "tie_word_embeddings": true)"), "c");
  CHECK(config.head_dim == 24);
  CHECK(config.head_dimension() == 24);
  CHECK(config.num_key_value_heads == 2);
  CHECK(config.tie_word_embeddings);
  const std::string odd =
      R"({"hidden_size": 60, "num_attention_heads": 8, "num_hidden_layers": 1, "intermediate_size": 8,
          "vocab_size": 10, "head_dim": 8})";
  CHECK(LlamaConfig::parse(odd, "c").head_dimension() == 8);
}

TEST_CASE("to_json round-trips random configs through parse") {
  std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<int> small(1, 64);
  for (int round = 0; round < 50; ++round) {
    LlamaConfig config;
    config.num_key_value_heads = small(rng);
    config.num_attention_heads = config.num_key_value_heads * small(rng);
    config.hidden_size = config.num_attention_heads * small(rng);
    config.num_hidden_layers = small(rng);
    config.intermediate_size = small(rng) * 100;
    config.vocab_size = small(rng) * 1000 + small(rng);
    config.max_position_embeddings = small(rng) * 512;
    config.rope_theta = std::uniform_real_distribution<double>(1.0, 1e6)(rng);
    config.rms_norm_eps = std::uniform_real_distribution<double>(1e-7, 1e-4)(rng);
    config.torch_dtype = round % 3 == 0 ? "" : "bfloat16";
    config.tie_word_embeddings = round % 2 == 0;
    if (round % 4 == 1) config.head_dim = small(rng);
    INFO(config.to_json());
    CHECK(LlamaConfig::parse(config.to_json(), "generated.json") == config);
  }
}

TEST_CASE("load reads a config.json file, or the one in a folder, and names a missing file") {
  const TempDir dir;
  const fs::path file = dir.path() / "config.json";
  write_file(file, kLlama3);
  CHECK(LlamaConfig::load(file) == LlamaConfig::parse(kLlama3, file));
  CHECK(LlamaConfig::load(dir.path()).vocab_size == 128256);

  const fs::path other = dir.path() / "other.json";
  write_file(other, R"({"hidden_size": 8})");
  try {
    (void)LlamaConfig::load(other);
    FAIL("no error");
  } catch (const CheckpointError& e) {
    CHECK(e.file() == other);
    CHECK(std::string(e.what()).find("file " + other.string() + ": key 'num_attention_heads' is missing") !=
          std::string::npos);
  }

  fs::remove(file);
  try {
    (void)LlamaConfig::load(dir.path());
    FAIL("no error");
  } catch (const CheckpointError& e) {
    CHECK(e.file() == file);
    CHECK(std::string(e.what()).find("cannot open: No such file or directory") != std::string::npos);
  }
}

TEST_CASE("each missing required key is named") {
  const std::vector<std::pair<std::string, int>> required = {{"hidden_size", 64},
                                                             {"num_attention_heads", 4},
                                                             {"num_hidden_layers", 2},
                                                             {"intermediate_size", 128},
                                                             {"vocab_size", 100}};
  for (const auto& entry : required) {
    const std::string& missing = entry.first;
    INFO("key " << missing);
    std::string text = "{";
    for (const auto& [key, value] : required) {
      if (key == missing) continue;
      text += (text.size() > 1 ? ", \"" : "\"") + key + "\": " + std::to_string(value);
    }
    check_refused(text + "}", "key '" + missing + "' is missing");
  }
}

TEST_CASE("counts that are not positive integers that fit an int are refused with the value found") {
  check_refused(minimal_with(R"("num_key_value_heads": -3)"),
                "key 'num_key_value_heads' must be a positive integer, found -3");
  check_refused(minimal_with(R"("head_dim": 0)"), "key 'head_dim' must be a positive integer, found 0");
  check_refused(minimal_with(R"("max_position_embeddings": 4096.5)"),
                "key 'max_position_embeddings' must be a positive integer, found 4096.5");
  check_refused(minimal_with(R"("max_position_embeddings": "4096")"), "found \"4096\"");
  check_refused(minimal_with(R"("max_position_embeddings": 4294967296)"), "found 4294967296");
  check_refused(minimal_with(R"("max_position_embeddings": true)"), "found true");
}

TEST_CASE("other keys of the wrong type or value are refused") {
  check_refused(minimal_with(R"("rope_theta": -1)"), "key 'rope_theta' must be a positive number, found -1");
  check_refused(minimal_with(R"("rope_theta": "1e4")"), "key 'rope_theta' must be a positive number");
  check_refused(minimal_with(R"("rms_norm_eps": 0)"), "key 'rms_norm_eps' must be a positive number, found 0");
  check_refused(minimal_with(R"("tie_word_embeddings": "yes")"), "key 'tie_word_embeddings' must be true or false");
  check_refused(minimal_with(R"("torch_dtype": 16)"), "key 'torch_dtype' must be a string, found 16");
  check_refused(minimal_with(R"("hidden_act": "gelu")"), "hidden_act 'gelu' is not supported (only silu)");
  check_refused(minimal_with(R"("rope_scaling": {"type": "linear", "factor": 2.0})"),
                "rope_scaling is not supported (found {\"factor\":2.0,\"type\":\"linear\"})");
}

TEST_CASE("head counts that do not divide are refused") {
  check_refused(minimal_with(R"("num_key_value_heads": 3)"),
                "key 'num_key_value_heads' (3) must divide num_attention_heads (4)");
  const std::string odd =
      R"({"hidden_size": 60, "num_attention_heads": 8, "num_hidden_layers": 1, "intermediate_size": 8,
          "vocab_size": 10})";
  check_refused(odd, "key 'num_attention_heads' (8) must divide hidden_size (60) when head_dim is absent");
}

TEST_CASE("text that is not a JSON object, or repeats a key, is refused") {
  check_refused("{\"hidden_size\": ", "the config is not valid JSON");
  check_refused("[]", "the config must be a JSON object, found []");
  check_refused(minimal_with(R"("hidden_size": 128)"), "the config has the key 'hidden_size' twice in one object");
}
