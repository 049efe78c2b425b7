// Host tests of lazygraph::nn::LlamaConfig: parsing real-shaped config.json texts, defaults, the to_json round
// trip, loading from a file or a folder, and one test per refused input.
#include <doctest/doctest.h>

#include "common/files.hpp"
#include "common/quantized_formats.hpp"
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
struct ConfigDir : lgtest::TempDir {
  ConfigDir() : lgtest::TempDir("nn-config") {}
};

using lgtest::write_file;

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
  const ConfigDir dir;
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
  check_refused(minimal_with(R"("max_position_embeddings": 4294967296)"),
                "key 'max_position_embeddings' (4294967296) is larger than lazygraph reads");
  check_refused(minimal_with(R"("max_position_embeddings": true)"), "found true");
}

TEST_CASE("other keys of the wrong type or value are refused") {
  check_refused(minimal_with(R"("rope_theta": -1)"), "key 'rope_theta' must be a positive number, found -1");
  check_refused(minimal_with(R"("rope_theta": "1e4")"), "key 'rope_theta' must be a positive number");
  check_refused(minimal_with(R"("rms_norm_eps": 0)"), "key 'rms_norm_eps' must be a positive number, found 0");
  check_refused(minimal_with(R"("tie_word_embeddings": "yes")"), "key 'tie_word_embeddings' must be true or false");
  check_refused(minimal_with(R"("torch_dtype": 16)"), "key 'torch_dtype' must be a string, found 16");
  check_refused(minimal_with(R"("hidden_act": "gelu")"), "hidden_act 'gelu' is not supported (only silu)");
}

TEST_CASE("hostile numbers are refused before they can overflow or allocate") {
  check_refused(minimal_with(R"("head_dim": 1073741840)"),
                "key 'head_dim' (1073741840) is larger than lazygraph reads");
  check_refused(R"({"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2000000000,
                    "intermediate_size": 128, "vocab_size": 100})",
                "key 'num_hidden_layers' (2000000000) is larger than lazygraph reads (at most 1024)");
  check_refused(minimal_with(R"("rope_theta": 1e39)"), "key 'rope_theta' (1e+39) is outside the range of float");
  check_refused(minimal_with(R"("rms_norm_eps": 1e39)"), "key 'rms_norm_eps' (1e+39) is outside the range of float");
  check_refused(minimal_with(R"("rms_norm_eps": 1e-50)"), "key 'rms_norm_eps' (1e-50) is outside the range of float");
  check_refused(minimal_with(R"("vocab_size": 16777217)"), "key 'vocab_size'");
}

TEST_CASE("RoPE settings are read from transformers 5's rope_parameters and from the older top-level keys") {
  const LlamaConfig v5 =
      LlamaConfig::parse(minimal_with(R"("rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"})"), "c");
  CHECK(v5.rope_theta == 500000.0);
  CHECK(v5.rope_scaling == RopeScaling{});
  const LlamaConfig old = LlamaConfig::parse(minimal_with(R"("rope_theta": 500000.0, "rope_scaling": null)"), "c");
  CHECK(old.rope_theta == 500000.0);
  CHECK(v5 == old);

  // Llama 3.2 1B's settings, in both layouts.
  const char* llama3 =
      R"("factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192)";
  const LlamaConfig a = LlamaConfig::parse(
      minimal_with(std::string(R"("rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", )") + llama3 +
                   "}"),
      "c");
  const LlamaConfig b = LlamaConfig::parse(
      minimal_with(std::string(R"("rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", )") + llama3 + "}"),
      "c");
  CHECK(a == b);
  CHECK(a.rope_theta == 500000.0);
  CHECK(a.rope_scaling.type == RopeType::llama3);
  CHECK(a.rope_scaling.factor == 32.0);
  CHECK(a.rope_scaling.low_freq_factor == 1.0);
  CHECK(a.rope_scaling.high_freq_factor == 4.0);
  CHECK(a.rope_scaling.original_max_position_embeddings == 8192);

  const LlamaConfig linear =
      LlamaConfig::parse(minimal_with(R"("rope_scaling": {"type": "linear", "factor": 2.0})"), "c");
  CHECK(linear.rope_scaling.type == RopeType::linear);
  CHECK(linear.rope_scaling.factor == 2.0);
  CHECK(LlamaConfig::parse(linear.to_json(), "c") == linear);
  CHECK(LlamaConfig::parse(a.to_json(), "c") == a);
}

TEST_CASE("RoPE settings lazygraph does not implement, or that contradict each other, are refused by name") {
  check_refused(minimal_with(R"("rope_parameters": {"rope_theta": 10000.0, "rope_type": "yarn", "factor": 4.0})"),
                "key 'rope_parameters.rope_type' 'yarn' is not implemented");
  check_refused(minimal_with(R"("rope_scaling": {"type": "dynamic", "factor": 2.0})"),
                "key 'rope_scaling.rope_type' 'dynamic' is not implemented");
  check_refused(minimal_with(R"("rope_parameters": {"rope_theta": 10000.0, "rope_type": "linear"})"),
                "key 'rope_parameters.factor' is missing (rope_type linear needs it)");
  check_refused(minimal_with(R"("rope_parameters": {"rope_theta": 10000.0, "factor": 2.0})"),
                "key 'rope_parameters.factor' is not used by rope_type default");
  check_refused(minimal_with(R"("rope_parameters": {"rope_theta": 10000.0, "partial_rotary_factor": 0.5})"),
                "key 'rope_parameters.partial_rotary_factor' is not used");
  check_refused(minimal_with(R"("rope_theta": 10000.0, "rope_parameters": {"rope_theta": 500000.0})"),
                "key 'rope_theta' (10000.000000) disagrees with rope_parameters.rope_theta (500000.000000)");
  check_refused(minimal_with(R"("rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                                "high_freq_factor": 1.0, "original_max_position_embeddings": 8192})"),
                "high_freq_factor");
  CHECK_NOTHROW((void)LlamaConfig::parse(
      minimal_with(R"("rope_parameters": {"rope_theta": 10000.0, "partial_rotary_factor": 1.0})"), "c"));
}

TEST_CASE("keys that may change the arithmetic are refused by name: unknown ones, biases, other architectures") {
  check_refused(minimal_with(R"("quantization_config": {"bits": 4})"),
                "key 'quantization_config.quant_method' is missing: lazygraph reads the quantized checkpoints it "
                "writes itself");
  check_refused(minimal_with(R"("quantisation_config": {"bits": 4})"),
                "key 'quantisation_config' is not one lazygraph knows");
  check_refused(minimal_with(R"("mlp_bias": true)"), "key 'mlp_bias' is true: MLP biases are not implemented");
  check_refused(minimal_with(R"("model_type": "gemma")"), "key 'model_type' 'gemma' is not supported");
  check_refused(minimal_with(R"("architectures": ["MistralForCausalLM"])"),
                "key 'architectures' names \"MistralForCausalLM\", but lazygraph runs model_type 'llama'");
  check_refused(minimal_with(R"("model_type": "qwen2", "attention_bias": false)"),
                "Qwen2 always has q, k and v biases");
  check_refused(minimal_with(R"("layer_types": ["full_attention", "chunked_attention"])"), "key 'layer_types' holds");
  check_refused(minimal_with(R"("dtype": "float16", "torch_dtype": "bfloat16")"), "key 'dtype' ('float16') disagrees");

  const LlamaConfig ok = LlamaConfig::parse(minimal_with(R"("mlp_bias": false, "attention_bias": false,
      "pretraining_tp": 1, "initializer_range": 0.02, "use_cache": true, "dtype": "bfloat16",
      "transformers_version": "5.17.0", "_name_or_path": "x")"),
                                            "c");
  CHECK(ok.torch_dtype == "bfloat16");
  CHECK_FALSE(ok.attention_bias);
  CHECK(LlamaConfig::parse(minimal_with(R"("model_type": "qwen2")"), "c").attention_bias);
}

TEST_CASE("the attention window of Mistral and Qwen2 is read where it applies") {
  const LlamaConfig mistral =
      LlamaConfig::parse(minimal_with(R"("model_type": "mistral", "sliding_window": 4096)"), "c");
  CHECK(mistral.sliding_window == 4096);
  CHECK(LlamaConfig::parse(mistral.to_json(), "c") == mistral);
  CHECK_FALSE(LlamaConfig::parse(minimal_with(R"("model_type": "mistral", "sliding_window": null)"), "c")
                  .sliding_window.has_value());
  CHECK_FALSE(LlamaConfig::parse(minimal_with(R"("model_type": "qwen2", "sliding_window": 4096,
                                                 "use_sliding_window": false, "max_window_layers": 28)"),
                                 "c")
                  .sliding_window.has_value());
  CHECK(LlamaConfig::parse(minimal_with(R"("model_type": "qwen2", "sliding_window": 512,
                                           "layer_types": ["full_attention", "sliding_attention"])"),
                           "c")
            .sliding_window == 512);
}

TEST_CASE("Qwen3's file reads its keys and gives its block q/k norms; its attention_bias would bias o_proj too") {
  const LlamaConfig qwen3 =
      LlamaConfig::parse(minimal_with(R"("model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "head_dim": 128,
                      "attention_bias": false, "use_sliding_window": false, "sliding_window": null,
                      "max_window_layers": 28, "layer_types": ["full_attention", "full_attention"])"),
                         "c");
  CHECK(qwen3.model_type == "qwen3");
  CHECK(qwen3.qk_norm);
  CHECK_FALSE(qwen3.attention_bias);
  CHECK(qwen3.head_dimension() == 128);
  CHECK(LlamaConfig::parse(qwen3.to_json(), "c") == qwen3);
  CHECK_FALSE(LlamaConfig::parse(kMinimal, "c").qk_norm);
  check_refused(minimal_with(R"("model_type": "qwen3", "attention_bias": true)"),
                "key 'attention_bias' is true, which in a qwen3 model also gives o_proj a bias");
  check_refused(minimal_with(R"("model_type": "qwen3", "architectures": ["Qwen2ForCausalLM"])"),
                "but lazygraph runs model_type 'qwen3' as Qwen3ForCausalLM only");
  check_refused(minimal_with(R"("model_type": "gemma2")"),
                "key 'model_type' 'gemma2' is not supported (lazygraph runs llama, mistral, qwen2, qwen3, gemma3_text, "
                "qwen3_moe, olmoe, mixtral)");
}

// The config.json of Qwen3-30B-A3B, as published.
const std::string kQwen3Moe = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 151643,
  "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
  "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
  "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": true,
  "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
  "num_key_value_heads": 4, "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null,
  "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936})";

TEST_CASE("Qwen3-MoE's file reads its experts, top k and expert width beside Qwen3's attention") {
  const LlamaConfig q = LlamaConfig::parse(kQwen3Moe, "qwen3_moe.json");
  CHECK(q.model_type == "qwen3_moe");
  CHECK(q.qk_norm);
  CHECK_FALSE(q.qk_norm_whole);
  CHECK_FALSE(q.sliding_window.has_value());
  REQUIRE(q.moe.has_value());
  CHECK(q.moe->experts == 128);
  CHECK(q.moe->experts_per_token == 8);
  CHECK(q.moe->expert_width == 768);
  CHECK(q.moe->normalize);
  CHECK(q.intermediate_size == 6144);  // the dense MLP's, which no layer has
  CHECK(LlamaConfig::parse(q.to_json(), "c") == q);
  CHECK_FALSE(LlamaConfig::parse(kMinimal, "c").moe.has_value());

  // norm_topk_prob is false where absent (Qwen3MoeConfig's default); transformers may write num_local_experts.
  const std::string moe = R"("model_type": "qwen3_moe", "moe_intermediate_size": 32, "num_experts_per_tok": 2)";
  const LlamaConfig plain = LlamaConfig::parse(minimal_with(moe + R"(, "num_local_experts": 8)"), "c");
  CHECK(plain.moe == MoeShape{8, 2, 32, false});
  CHECK(LlamaConfig::parse(plain.to_json(), "c") == plain);
  CHECK(LlamaConfig::parse(minimal_with(moe + R"(, "num_experts": 8, "num_local_experts": 8)"), "c") == plain);
}

TEST_CASE("a mixture of experts' config is refused by the key it cannot run") {
  const std::string moe = R"("model_type": "qwen3_moe", "moe_intermediate_size": 32)";
  check_refused(minimal_with(moe + R"(, "num_experts": 4, "num_experts_per_tok": 5)"),
                "key 'num_experts_per_tok' (5) is more than the experts a layer has (4)");
  check_refused(minimal_with(moe + R"(, "num_experts_per_tok": 2)"), "key 'num_experts' is missing");
  check_refused(minimal_with(moe + R"(, "num_experts": 4)"), "key 'num_experts_per_tok' is missing");
  check_refused(minimal_with(moe + R"(, "num_experts": 8, "num_local_experts": 4, "num_experts_per_tok": 2)"),
                "key 'num_local_experts' (4) disagrees with num_experts (8)");
  check_refused(minimal_with(moe + R"(, "num_experts": 0, "num_experts_per_tok": 2)"),
                "key 'num_experts' must be a positive integer");
  check_refused(minimal_with(moe + R"(, "num_experts": 4096, "num_experts_per_tok": 2)"),
                "key 'num_experts' (4096) is larger than lazygraph reads (at most 1024)");
  check_refused(minimal_with(R"("model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 2)"),
                "key 'moe_intermediate_size' is missing");
  const std::string counts = moe + R"(, "num_experts": 4, "num_experts_per_tok": 2)";
  check_refused(minimal_with(counts + R"(, "decoder_sparse_step": 2)"),
                "key 'decoder_sparse_step' is 2: a dense MLP in the layers between the mixtures of experts");
  check_refused(minimal_with(counts + R"(, "mlp_only_layers": [0])"),
                "key 'mlp_only_layers' lists [0]: a dense MLP in place of a layer's mixture of experts");
  check_refused(minimal_with(counts + R"(, "norm_topk_prob": 1)"), "key 'norm_topk_prob' must be true or false");
  check_refused(minimal_with(counts + R"(, "shared_expert_intermediate_size": 64)"),
                "key 'shared_expert_intermediate_size' is not one lazygraph knows");
  check_refused(minimal_with(counts + R"(, "attention_bias": true)"),
                "key 'attention_bias' is true, which in a qwen3_moe model also gives o_proj a bias");
  check_refused(minimal_with(R"("model_type": "olmoe", "num_experts": 4, "num_experts_per_tok": 2, "clip_qkv": 8)"),
                "key 'clip_qkv' is 8: clipping q, k and v is not implemented");
  check_refused(minimal_with(R"("model_type": "olmoe", "num_experts": 4, "num_experts_per_tok": 2, "head_dim": 8)"),
                "key 'head_dim' (8) times num_attention_heads is not hidden_size");
  check_refused(minimal_with(R"("model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2,
                                "norm_topk_prob": false)"),
                "key 'norm_topk_prob' is not one lazygraph knows");
}

TEST_CASE("OLMoE's file gives its block q/k norms over the whole projection and its experts") {
  // The config.json of OLMoE-1B-7B-0924, as published.
  const LlamaConfig o = LlamaConfig::parse(R"({
  "architectures": ["OlmoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "clip_qkv": null,
  "eos_token_id": 50279, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 1024, "max_position_embeddings": 4096, "model_type": "olmoe", "norm_topk_prob": false,
  "num_attention_heads": 16, "num_experts": 64, "num_experts_per_tok": 8, "num_hidden_layers": 16,
  "num_key_value_heads": 16, "output_router_logits": false, "pad_token_id": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": null, "rope_theta": 10000.0, "router_aux_loss_coef": 0.01, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 50304})",
                                           "olmoe.json");
  CHECK(o.model_type == "olmoe");
  CHECK(o.qk_norm);
  CHECK(o.qk_norm_whole);
  CHECK(o.moe == MoeShape{64, 8, 1024, false});
  CHECK(LlamaConfig::parse(o.to_json(), "c") == o);
}

TEST_CASE("Mixtral's file reads num_local_experts and always renormalizes the chosen experts") {
  // The config.json of Mixtral-8x7B-v0.1, as published.
  const LlamaConfig m = LlamaConfig::parse(R"({
  "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": false,
  "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "router_jitter_noise": 0.0,
  "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.36.0.dev0",
  "use_cache": true, "vocab_size": 32000})",
                                           "mixtral.json");
  CHECK(m.model_type == "mixtral");
  CHECK_FALSE(m.qk_norm);
  CHECK(m.moe == MoeShape{8, 2, 14336, true, MoeTensorNames::block_sparse_moe});
  CHECK_FALSE(m.sliding_window.has_value());
  CHECK(LlamaConfig::parse(m.to_json(), "c") == m);
  const LlamaConfig windowed = LlamaConfig::parse(
      minimal_with(
          R"("model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 64)"),
      "c");
  CHECK(windowed.sliding_window == 64);
  CHECK(windowed.sliding_layers.empty());  // every layer
  CHECK(LlamaConfig::parse(windowed.to_json(), "c") == windowed);
}

TEST_CASE("Gemma 3's file reads its block: GeGLU, post-norms, gains of 1 + w, scales, windows and local RoPE") {
  // What transformers 5.17 writes for Gemma3ForCausalLM(Gemma3TextConfig(...)) (hidden 256, 6 layers, window 16).
  const std::string written = R"({
  "_sliding_window_pattern": 6, "architectures": ["Gemma3ForCausalLM"], "attention_bias": false,
  "attention_dropout": 0.0, "attn_logit_softcapping": null, "bos_token_id": 2, "dtype": "float32",
  "eos_token_id": 1, "final_logit_softcapping": null, "head_dim": 64, "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 256, "initializer_range": 0.02, "intermediate_size": 512,
  "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
                  "sliding_attention", "full_attention"],
  "max_position_embeddings": 256, "model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 6,
  "num_key_value_heads": 2, "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
  "rope_parameters": {"full_attention": {"rope_theta": 1000000.0, "rope_type": "default"},
                      "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}},
  "sliding_window": 16, "tie_word_embeddings": true, "transformers_version": "5.17.0",
  "use_bidirectional_attention": false, "use_cache": true, "vocab_size": 512})";
  const LlamaConfig g = LlamaConfig::parse(written, "gemma3.json");
  CHECK(g.model_type == "gemma3_text");
  CHECK(g.activation == GateActivation::gelu_tanh);
  CHECK(g.post_norms);
  CHECK(g.qk_norm);
  CHECK(g.gain_offset == 1.0);
  CHECK(g.embedding_scale == doctest::Approx(16.0));
  CHECK(g.query_pre_attn_scalar == 256.0);
  CHECK_FALSE(g.final_logit_softcapping.has_value());
  CHECK(g.rope_theta == 1e6);
  CHECK(g.local_rope_theta == 1e4);
  CHECK(g.sliding_window == 16);
  CHECK(g.sliding_layers == std::vector<bool>{true, true, true, true, true, false});
  CHECK(g.tie_word_embeddings);
  CHECK(LlamaConfig::parse(g.to_json(), "c") == g);
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string text = written;
    const std::size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    return text.replace(at, from.size(), to);
  };
  check_refused(with(R"("attn_logit_softcapping": null)", R"("attn_logit_softcapping": 50.0)"),
                "key 'attn_logit_softcapping' is set");
  check_refused(with(R"("hidden_activation": "gelu_pytorch_tanh")", R"("hidden_activation": "gelu")"),
                "key 'hidden_activation' 'gelu' is not implemented");
  check_refused(with(R"("use_bidirectional_attention": false)", R"("use_bidirectional_attention": true)"),
                "key 'use_bidirectional_attention' is true");
  check_refused(with(R"("sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"})",
                     R"("sliding_attention": {"rope_theta": 10000.0, "rope_type": "linear", "factor": 2.0})"),
                "key 'rope_parameters.sliding_attention.rope_type' is not default");
  check_refused(with(R"("final_logit_softcapping": null)", R"("final_logit_softcapping": -1)"),
                "key 'final_logit_softcapping' must be a positive number");
  const LlamaConfig capped =
      LlamaConfig::parse(with(R"("final_logit_softcapping": null)", R"("final_logit_softcapping": 30.0)"), "c");
  CHECK(capped.final_logit_softcapping == 30.0);
}

TEST_CASE("windows: Mistral's on every layer, Qwen's by layer_types or from max_window_layers on") {
  const LlamaConfig mistral = LlamaConfig::parse(minimal_with(R"("model_type": "mistral", "sliding_window": 64)"), "c");
  CHECK(mistral.sliding_window == 64);
  CHECK(mistral.sliding_layers.empty());  // every layer
  const LlamaConfig qwen = LlamaConfig::parse(
      minimal_with(
          R"("model_type": "qwen2", "sliding_window": 64, "use_sliding_window": true, "max_window_layers": 1)"),
      "c");
  CHECK(qwen.sliding_window == 64);
  CHECK(qwen.sliding_layers == std::vector<bool>{false, true});  // the minimal config has 2 layers
  CHECK(LlamaConfig::parse(qwen.to_json(), "c") == qwen);
}

TEST_CASE("token ids: bos, and eos as one id or a list") {
  const LlamaConfig one = LlamaConfig::parse(minimal_with(R"("bos_token_id": 1, "eos_token_id": 2)"), "c");
  CHECK(one.bos_token_id == 1);
  CHECK(one.eos_token_ids == std::vector<int>{2});
  const LlamaConfig list = LlamaConfig::parse(minimal_with(R"("bos_token_id": 0, "eos_token_id": [97, 98, 99])"), "c");
  CHECK(list.bos_token_id == 0);
  CHECK(list.eos_token_ids == std::vector<int>{97, 98, 99});
  CHECK(LlamaConfig::parse(list.to_json(), "c") == list);
  check_refused(minimal_with(R"("eos_token_id": [1, -2])"), "key 'eos_token_id' must be a token id or a list");
}

TEST_CASE("a bos or eos token id at or past vocab_size is refused, naming the key and the id") {
  // kMinimal's vocab_size is 100: ids 0 to 99.
  check_refused(minimal_with(R"("eos_token_id": 100)"),
                "key 'eos_token_id' (100) is not a token of the vocabulary: vocab_size is 100, so token ids are 0 "
                "to 99");
  check_refused(minimal_with(R"("eos_token_id": [2, 128001])"), "key 'eos_token_id' (128001) is not a token");
  check_refused(minimal_with(R"("bos_token_id": 100, "eos_token_id": 2)"), "key 'bos_token_id' (100) is not a token");
  CHECK(LlamaConfig::parse(minimal_with(R"("bos_token_id": 99, "eos_token_id": [99])"), "c").bos_token_id == 99);
  // Llama 3's ids, with its vocabulary.
  CHECK(LlamaConfig::parse(kLlama3, "c").eos_token_ids == std::vector<int>{128001});
}

TEST_CASE("lazygraph_save_id is read as the config's save id and written back") {
  const LlamaConfig saved = LlamaConfig::parse(minimal_with(R"("lazygraph_save_id": "0123456789abcdef")"), "c");
  CHECK(saved.save_id == "0123456789abcdef");
  CHECK(LlamaConfig::parse(saved.to_json(), "c") == saved);
  CHECK(LlamaConfig::parse(kMinimal, "c").save_id.empty());
  CHECK(LlamaConfig::parse(kMinimal, "c").to_json().find("lazygraph_save_id") == std::string::npos);
  check_refused(minimal_with(R"("lazygraph_save_id": 7)"), "key 'lazygraph_save_id' must be a string");
}

TEST_CASE("a config of more than 65536 JSON values is refused while it is parsed, before they are built") {
  std::string ids = "[0";
  for (int i = 0; i < 70000; ++i) ids += ",0";
  check_refused(minimal_with(R"("suppress_tokens": )" + ids + "]"), "the config holds more than 65536 JSON values");
  ids = "[0";
  for (int i = 0; i < 60000; ++i) ids += ",0";
  CHECK_NOTHROW((void)LlamaConfig::parse(minimal_with(R"("suppress_tokens": )" + ids + "]"), "c"));
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

namespace {

/// kMinimal with a quantization_config of `members` (a JSON member list).
std::string quantized_with(const std::string& members) {
  return minimal_with(R"("quantization_config": {)" + members + "}");
}

const std::string kLazygraph = R"("quant_method": "lazygraph", "layout_version": 1, )";

}  // namespace

TEST_CASE("a lazygraph quantization_config is read with its formats and round-trips through to_json") {
  const LlamaConfig config = LlamaConfig::parse(
      quantized_with(kLazygraph + R"("attention": {"kind": "int8", "scale_type": "bfloat16"}, "mlp": null,
                     "lm_head": {"kind": "int4", "group": 64, "asymmetric": true, "scale_type": "float16"},
                     "clip_search": true)"),
      "c");
  REQUIRE(config.quantization.has_value());
  const DecoderQuantization& q = *config.quantization;
  REQUIRE(q.attention.has_value());
  CHECK(q.attention->kind == WeightFormat::int8_channel);
  CHECK_FALSE(q.attention->asymmetric);
  CHECK(q.attention->scale_type == ScaleType::bf16);
  CHECK_FALSE(q.mlp.has_value());
  REQUIRE(q.lm_head.has_value());
  CHECK(*q.lm_head == QuantizedFormat{WeightFormat::int4_group, 64, true, ScaleType::f16});
  CHECK(q.options.clip_search);
  CHECK(LlamaConfig::parse(config.to_json(), "generated.json") == config);
  CHECK_FALSE(LlamaConfig::parse(kMinimal, "c").quantization.has_value());

  // Absent classes are dense, and the clipping search is off unless it says so.
  const LlamaConfig mlp_only =
      LlamaConfig::parse(quantized_with(kLazygraph + R"("mlp": {"kind": "int4", "group": 128, "scale_type":
                                                        "float16"})"),
                         "c");
  REQUIRE(mlp_only.quantization.has_value());
  CHECK_FALSE(mlp_only.quantization->attention.has_value());
  CHECK(mlp_only.quantization->mlp == QuantizedFormat{WeightFormat::int4_group, 128, false, ScaleType::f16});
  CHECK_FALSE(mlp_only.quantization->options.clip_search);

  // Every format the quantizer offers, in every class.
  for (const QuantizedFormat& format : lgtest::every_quantized_format()) {
    CAPTURE(format_name(format));
    LlamaConfig c = LlamaConfig::parse(kMinimal, "c");
    c.quantization = DecoderQuantization{format, std::nullopt, format, {}};
    const std::string text = c.to_json();
    CHECK(text.find(R"("quant_method": "lazygraph")") != std::string::npos);
    CHECK(text.find(R"("layout_version": 1)") != std::string::npos);
    CHECK(LlamaConfig::parse(text, "generated.json") == c);
  }
}

TEST_CASE("a quantization_config of another method, layout version or format is refused by name") {
  for (const std::string method : {"bitsandbytes", "fbgemm_fp8", "GPTQ"}) {
    CAPTURE(method);
    check_refused(quantized_with(R"("quant_method": ")" + method + R"(", "bits": 4, "group_size": 128)"),
                  "key 'quantization_config.quant_method' is \"" + method +
                      "\": lazygraph reads the quantized checkpoints it writes itself");
  }
  check_refused(quantized_with(R"("quant_method": "lazygraph", "attention": null)"),
                "key 'quantization_config.layout_version' must be a positive integer, found nothing");
  check_refused(quantized_with(R"("quant_method": "lazygraph", "layout_version": 2,
                                  "mlp": {"kind": "int8", "scale_type": "float16"})"),
                "key 'quantization_config.layout_version' is 2, but this lazygraph reads quantized weights of layout "
                "version 1 only");
  check_refused(quantized_with(kLazygraph + R"("mlp": null)"),
                "key 'quantization_config' quantizes nothing (attention, mlp and lm_head are all null)");
  const auto refused_format = [](const std::string& format, const std::string& fragment) {
    check_refused(quantized_with(kLazygraph + R"("mlp": )" + format), fragment);
  };
  refused_format(R"({"kind": "int2", "scale_type": "float16"})",
                 "key 'quantization_config.mlp.kind' must be \"int8\", \"int4\" or \"fp8\", found \"int2\"");
  refused_format(R"({"kind": "int4", "group": 96, "scale_type": "float16"})",
                 "key 'quantization_config.mlp.group' must be 32, 64 or 128 for int4");
  refused_format(R"({"kind": "int4", "scale_type": "float16"})",
                 "key 'quantization_config.mlp.group' must be 32, 64 or 128 for int4 (elements per scale along the "
                 "input), found nothing");
  refused_format(R"({"kind": "int4", "group": 64, "scale_type": "float32"})",
                 "key 'quantization_config.mlp.scale_type' must be \"float16\" or \"bfloat16\"");
  refused_format(R"({"kind": "int8", "group": 64, "scale_type": "float16"})",
                 "key 'quantization_config.mlp.group' is not used by int8");
  refused_format(R"({"kind": "int4", "group": 64, "scale_type": "float16", "bits": 4})",
                 "key 'quantization_config.mlp.bits' is not a key of a quantized format");
  refused_format(R"({"kind": "int4", "group": 64, "scale_type": "float16", "bits": null})",
                 "key 'quantization_config.mlp.bits' is not a key of a quantized format");
  refused_format(R"({"kind": "int8", "scale_type": "float16", "zero_point": null})",
                 "key 'quantization_config.mlp.zero_point' is not a key of a quantized format");
  // A known key with null stands for its absence.
  CHECK(LlamaConfig::parse(
            quantized_with(kLazygraph + R"("mlp": {"kind": "int8", "group": null, "scale_type": "float16"})"), "c")
            .quantization->mlp.has_value());
  refused_format(R"("int4")", "key 'quantization_config.mlp' must be a format object or null");
  check_refused(quantized_with(kLazygraph + R"("mlp": {"kind": "int8", "scale_type": "float16"}, "desc_act": true)"),
                "key 'quantization_config.desc_act' is not a key lazygraph writes");
  check_refused(minimal_with(R"("quantization_config": "lazygraph")"), "key 'quantization_config' must be an object");
}
