// Decoder checkpoints: writing seeded weights in Hugging Face's layout, and reading them back. Every bad input is
// found by DecoderCheckpoint::open on the host (no GPU, nothing allocated); uploads and decoding run on the GPU, with
// quantization on the host or on the GPU during the upload (the same bytes).
#include <doctest/doctest.h>

#include <lazygraph/nn/checkpoint.hpp>
#include <lazygraph/nn/decoder_rank.hpp>
#include <lazygraph/nn/quantized_save.hpp>
#include <lazygraph/nn/reference.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "common/gpu.hpp"
#include "common/nn.hpp"
#include "common/quantized_weights.hpp"
#include "common/rewrite_safetensors.hpp"
#include "common/same_decoding.hpp"
#include "common/small_decoder.hpp"

using namespace lazygraph;
using namespace lazygraph::nn;

namespace {

DecoderConfig small_gqa() { return lgtest::small_decoder(2, 1, 77); }

using lgtest::OwnedTensor;
using lgtest::rewrite;
using lgtest::rewrite_config;

std::filesystem::path saved(const std::string& label, const DecoderConfig& c = small_gqa(), DType dtype = DType::f16) {
  const auto dir = lgtest::scratch_directory(label);
  save_seeded_checkpoint(dir, c, dtype);
  return dir;
}

}  // namespace

TEST_CASE("a saved seeded checkpoint opens as the decoder it was written from, GQA included") {
  const DecoderConfig c = small_gqa();
  const auto dir = saved("ckpt-roundtrip");
  const DecoderCheckpoint ck = DecoderCheckpoint::open(dir);
  const DecoderConfig& got = ck.config();
  CHECK(got.d == c.d);
  CHECK(got.heads == c.heads);
  CHECK(got.kv_head_count() == 2);
  CHECK(got.layers == c.layers);
  CHECK(got.ffn == c.ffn);
  CHECK(got.vocab == c.vocab);
  CHECK(got.context == c.context);
  CHECK(got.theta == c.theta);
  CHECK(got.eps == c.eps);
  CHECK(ck.llama_config().torch_dtype == "float16");
  CHECK(ck.sources().size() == decoder_tensors(c).size());
  CHECK(ck.device_bytes() == c.weight_bytes() + (static_cast<std::size_t>(c.vocab) - 1) * c.d * sizeof(half));
}

TEST_CASE("the q and k rows of a saved checkpoint are in rotate-half order, the other weights as they are") {
  const DecoderConfig c = small_gqa();
  const auto dir = saved("ckpt-rows");
  const SafetensorsFile file = SafetensorsFile::open(dir / "model.safetensors");
  const auto tensors = decoder_tensors(c);
  for (const DecoderTensor& t : tensors) {
    if (t.layer != 1) continue;
    CAPTURE(t.name);
    const std::vector<half> want = host_tensor(c.seed, t.seeded);
    const auto bytes = file.data(file.tensor(t.name));
    REQUIRE(bytes.size() == want.size() * 2);
    int wrong = 0;
    for (int row = 0; row < t.rows; ++row) {
      const int stored = t.rope_rows ? rotate_half_row(row, c.head_dim()) : row;
      CHECK(stored < t.rows);
      std::uint16_t bits = 0;
      for (int col = 0; col < t.cols; col += 17) {
        std::memcpy(&bits, bytes.data() + 2 * (static_cast<std::size_t>(stored) * t.cols + col), 2);
        wrong += bits != want[static_cast<std::size_t>(row) * t.cols + col].bits ? 1 : 0;
      }
    }
    CHECK(wrong == 0);
  }
  // head_dim 32: row 2i + j of a head comes from row j * 16 + i of the checkpoint.
  CHECK(rotate_half_row(0, 32) == 0);
  CHECK(rotate_half_row(1, 32) == 16);
  CHECK(rotate_half_row(2, 32) == 1);
  CHECK(rotate_half_row(31, 32) == 31);
  CHECK(rotate_half_row(32 + 3, 32) == 32 + 17);
}

TEST_CASE("a missing tensor is an error naming the checkpoint and the tensor") {
  const auto dir = saved("ckpt-missing");
  rewrite(dir, [](std::vector<OwnedTensor>& t) {
    std::erase_if(t, [](const OwnedTensor& x) { return x.name == "model.layers.1.mlp.up_proj.weight"; });
  });
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir),
                       doctest::Contains("tensor model.layers.1.mlp.up_proj.weight"), CheckpointError);
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir), doctest::Contains(dir.string().c_str()), CheckpointError);
}

TEST_CASE("a tensor of the wrong shape or dtype is an error saying what was expected and found") {
  const auto dir = saved("ckpt-shape");
  rewrite(dir, [](std::vector<OwnedTensor>& t) {
    for (OwnedTensor& x : t) {
      if (x.name == "model.layers.0.self_attn.k_proj.weight") x.shape = {32, 256};  // 64 x 128 claimed otherwise
    }
  });
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir), doctest::Contains("model.layers.0.self_attn.k_proj.weight"),
                       CheckpointError);
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir), doctest::Contains("[64, 128]"), CheckpointError);
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir), doctest::Contains("[32, 256]"), CheckpointError);

  const auto dir2 = saved("ckpt-dtype");
  rewrite(dir2, [](std::vector<OwnedTensor>& t) {
    for (OwnedTensor& x : t) {
      if (x.name == "model.norm.weight") x.dtype = DType::i16;  // same size, wrong type
    }
  });
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir2), doctest::Contains("tensor model.norm.weight"),
                       CheckpointError);
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir2), doctest::Contains("I16"), CheckpointError);
}

TEST_CASE("a truncated weights file is an error naming it") {
  const auto dir = saved("ckpt-truncated");
  const auto file = dir / "model.safetensors";
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 100);
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir), doctest::Contains(file.string().c_str()), CheckpointError);
}

TEST_CASE("a config the kernels cannot run is an error naming config.json and the reason") {
  const auto dir = saved("ckpt-config");
  rewrite_config(dir, [](LlamaConfig& c) {
    c.hidden_size = 1000;  // head_dim 250: beyond the attention kernel's 128
    c.num_attention_heads = 4;
    c.num_key_value_heads = 4;
  });
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir), doctest::Contains("config.json"), CheckpointError);
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir), doctest::Contains("cannot run this model"), CheckpointError);
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir), doctest::Contains("head_dim (250)"), CheckpointError);
  rewrite_config(dir, [](LlamaConfig& c) {
    c.hidden_size = 128;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;  // 4 heads of 16: q_proj [64, 128], not the file's [128, 128]
  });
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir),
                       doctest::Contains("tensor model.layers.0.self_attn.q_proj.weight: expected"), CheckpointError);
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir), doctest::Contains("[64, 128]"), CheckpointError);
  std::ofstream(dir / "config.json") << "{\"hidden_size\": 128}";
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir), doctest::Contains("num_attention_heads"), CheckpointError);
}

/// The small decoder with `experts` experts, top 2, width 64, in every layer: Qwen3-MoE's (q/k norms) or Mixtral's.
DecoderConfig small_moe(bool qwen, int experts = 4) {
  DecoderConfig c = small_gqa();
  c.moe = MoeShape{experts, 2, 64, true, qwen ? MoeTensorNames::mlp_experts : MoeTensorNames::block_sparse_moe};
  c.qk_norm = qwen;
  return c;
}

TEST_CASE("a seeded mixture-of-experts checkpoint opens as its decoder, under Qwen3-MoE's and Mixtral's names") {
  for (const bool qwen : {true, false}) {
    CAPTURE(qwen);
    const DecoderConfig c = small_moe(qwen);
    const auto dir = saved(qwen ? "ckpt-qwen3-moe" : "ckpt-mixtral", c);
    const DecoderCheckpoint ck = DecoderCheckpoint::open(dir);
    CHECK(ck.llama_config().model_type == (qwen ? "qwen3_moe" : "mixtral"));
    CHECK(ck.config().moe == c.moe);
    CHECK(ck.config().qk_norm == qwen);
    CHECK(ck.sources().size() == decoder_tensors(c).size());
    const std::string router = qwen ? "model.layers.1.mlp.gate.weight" : "model.layers.1.block_sparse_moe.gate.weight";
    const std::string expert =
        qwen ? "model.layers.0.mlp.experts.3.down_proj.weight" : "model.layers.0.block_sparse_moe.experts.3.w2.weight";
    const auto sources = ck.sources();
    CHECK(std::any_of(sources.begin(), sources.end(), [&](const TensorInfo* s) { return s->name == router; }));
    CHECK(std::any_of(sources.begin(), sources.end(), [&](const TensorInfo* s) { return s->name == expert; }));
    CHECK(ck.device_bytes() == c.weight_bytes() + (static_cast<std::size_t>(c.vocab) - 1) * c.d * sizeof(half));
  }
  // Neither architecture: no q/k norms and the chosen weights used as the softmax gives them (OLMoE's routing).
  DecoderConfig olmoe = small_moe(false);
  olmoe.moe.normalize = false;
  CHECK_THROWS_WITH_AS(save_seeded_checkpoint(lgtest::scratch_directory("ckpt-moe-neither"), olmoe, DType::f16),
                       doctest::Contains("this config is none of them"), UsageError);
}

TEST_CASE("a mixture of experts' missing expert or misshaped router is refused naming it, before anything is read") {
  const auto dir = saved("ckpt-moe-broken", small_moe(true));
  rewrite(dir, [](std::vector<OwnedTensor>& t) {
    std::erase_if(t, [](const OwnedTensor& x) { return x.name == "model.layers.1.mlp.experts.2.up_proj.weight"; });
  });
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir),
                       doctest::Contains("tensor model.layers.1.mlp.experts.2.up_proj.weight"), CheckpointError);
  const auto dir2 = saved("ckpt-moe-router", small_moe(true));
  rewrite(dir2, [](std::vector<OwnedTensor>& t) {
    for (OwnedTensor& x : t) {
      if (x.name == "model.layers.0.mlp.gate.weight") x.shape = {8, 64};  // 4 x 128 claimed otherwise
    }
  });
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir2), doctest::Contains("model.layers.0.mlp.gate.weight"),
                       CheckpointError);
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir2), doctest::Contains("[4, 128]"), CheckpointError);
  // config.json saying 5 experts for weights of 4: the fifth expert's tensors are missing.
  rewrite_config(dir, [](LlamaConfig& c) { c.moe->experts = 5; });
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir), doctest::Contains("model.layers.0.mlp.gate.weight"),
                       CheckpointError);
}

TEST_CASE(
    "a seeded OLMoE checkpoint opens with q/k norms over the whole projection, their gains in rotate-half order") {
  DecoderConfig c = small_moe(true);  // d 128: 4 heads of 32 over 2 kv heads
  c.qk_norm_whole = true;
  c.moe.normalize = false;  // OLMoE's default
  const auto dir = saved("ckpt-olmoe", c);
  const DecoderCheckpoint ck = DecoderCheckpoint::open(dir);
  CHECK(ck.llama_config().model_type == "olmoe");
  CHECK(ck.llama_config().intermediate_size == c.moe.expert_width);  // OLMoE's expert width
  CHECK(ck.config().qk_norm);
  CHECK(ck.config().qk_norm_whole);
  CHECK(ck.config().moe == c.moe);
  CHECK(ck.sources().size() == decoder_tensors(c).size());
  CHECK(ck.device_bytes() == c.weight_bytes() + (static_cast<std::size_t>(c.vocab) - 1) * c.d * sizeof(half));
  const SafetensorsFile file = SafetensorsFile::open(dir / "model.safetensors");
  CHECK(file.tensor("model.layers.1.self_attn.q_norm.weight").shape == std::vector<std::int64_t>{c.d});
  CHECK(file.tensor("model.layers.1.self_attn.k_norm.weight").shape == std::vector<std::int64_t>{c.kv_dim()});
  const std::vector<DecoderTensor> tensors = decoder_tensors(c);
  const auto found = std::find_if(tensors.begin(), tensors.end(), [](const DecoderTensor& t) {
    return t.name == "model.layers.1.self_attn.q_norm.weight";
  });
  REQUIRE(found != tensors.end());
  CHECK(found->rope_rows);
  CHECK(found->rows == c.q_dim());
  const std::vector<half> want = host_tensor(c.seed, found->seeded);
  const auto bytes = file.data(file.tensor(found->name));
  int differ = 0;
  for (int row = 0; row < found->rows; ++row) {  // every head's part reordered as that head's rows of Wq
    std::uint16_t bits = 0;
    std::memcpy(&bits, bytes.data() + 2 * static_cast<std::size_t>(rotate_half_row(row, c.head_dim())), 2);
    differ += bits != want[static_cast<std::size_t>(row)].bits ? 1 : 0;
  }
  CHECK(differ == 0);
  // A checkpoint whose k_norm has a head's gains only (Qwen3's shape) is refused naming the tensor and its shape.
  rewrite(dir, [&](std::vector<OwnedTensor>& t) {
    for (OwnedTensor& x : t) {
      if (x.name == "model.layers.0.self_attn.k_norm.weight") {
        x.shape = {c.head_dim()};
        x.bytes.resize(2 * static_cast<std::size_t>(c.head_dim()));
      }
    }
  });
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir), doctest::Contains("model.layers.0.self_attn.k_norm.weight"),
                       CheckpointError);
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir), doctest::Contains("[64]"), CheckpointError);
  // OLMoE's is the one architecture with these norms: a dense decoder, or one whose q is not d wide, has none.
  DecoderConfig dense = small_gqa();
  dense.qk_norm = dense.qk_norm_whole = true;
  CHECK_THROWS_WITH_AS(save_seeded_checkpoint(lgtest::scratch_directory("ckpt-olmoe-dense"), dense),
                       doctest::Contains("as OLMoE's, which has a mixture of experts"), UsageError);
  DecoderConfig wide = c;
  wide.head_width = 64;
  CHECK_THROWS_WITH_AS(save_seeded_checkpoint(lgtest::scratch_directory("ckpt-olmoe-wide"), wide),
                       doctest::Contains("q_dim 256, d 128"), UsageError);
}

TEST_CASE("a mixture of experts' stack that cannot be quantized is refused naming it and how its rows are made") {
  const auto dir = saved("ckpt-moe-nan", small_moe(true), DType::f32);
  rewrite(dir, [](std::vector<OwnedTensor>& t) {
    for (OwnedTensor& x : t) {
      if (x.name != "model.layers.1.mlp.experts.2.up_proj.weight") continue;
      const float nan = NAN;
      std::memcpy(x.bytes.data() + 4 * (3 * 128 + 5), &nan, 4);  // expert 2's row 3, column 5 (64 x 128)
    }
  });
  LoadOptions options;
  options.quantization.mlp = QuantizedFormat{WeightFormat::int8_channel, 0, false, ScaleType::f16};
  const DecoderCheckpoint ck = DecoderCheckpoint::open(dir, options);  // open cannot see values
  const std::vector<QuantizedLayout>& layouts = ck.quantized_layouts();
  const auto up = std::find_if(layouts.begin(), layouts.end(), [](const QuantizedLayout& l) {
    return l.name() == "model.layers.1.mlp.experts.*.up_proj.weight";
  });
  REQUIRE(up != layouts.end());
  const auto index = static_cast<std::size_t>(up - layouts.begin());
  CHECK_NOTHROW((void)ck.quantized_weight(index - 1));  // the gate stack before it
  for (const char* part :
       {"tensor model.layers.1.mlp.experts.*.up_proj.weight: cannot be quantized", "weight at row 131, column 5 is nan",
        "(its rows are the layer's 4 experts', 64 each, stacked in expert order: row R is row R % "
        "64 of expert R / 64)"}) {
    CHECK_THROWS_WITH_AS((void)ck.quantized_weight(index), doctest::Contains(part), CheckpointError);
  }
}

TEST_CASE("a context beyond the model's max_position_embeddings is a UsageError naming both") {
  const auto dir = saved("ckpt-context");
  LoadOptions options;
  options.context = 65;
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir, options),
                       doctest::Contains("context (65) is beyond the model's max_position_embeddings (64)"),
                       UsageError);
  options.context = 16;
  CHECK(DecoderCheckpoint::open(dir, options).config().context == 16);
}

TEST_CASE("LoadOptions' paged cache opens a paged decoder beyond kMaxContext, and a model it cannot run is refused") {
  const auto dir = saved("ckpt-paged");
  rewrite_config(dir, [](LlamaConfig& c) {
    c.model_type = "mistral";
    c.max_position_embeddings = 3 * kMaxContext;
    c.sliding_window = 2 * kMaxContext;  // capped at kMaxPagedContext when paged, not at kMaxContext
  });
  LoadOptions options;
  options.context = 2 * kMaxContext;
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir, options), doctest::Contains("must be at most 8192"),
                       CheckpointError);
  options.kv_block_size = 32;
  options.kv_blocks = 100;
  options.attention_blocks = 0;
  const DecoderConfig paged = DecoderCheckpoint::open(dir, options).config();
  CHECK(paged.paged());
  CHECK(paged.kv_block_size == 32);
  CHECK(paged.kv_blocks == 100);
  CHECK(paged.attention_blocks == 0);
  CHECK(paged.context == 2 * kMaxContext);
  CHECK(paged.window == 2 * kMaxContext);
  options.kv_blocks = 0;
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir, options),
                       doctest::Contains("kv_blocks (0) must be at least 1 with kv_block_size"), CheckpointError);

  DecoderConfig c = small_gqa();
  c.qk_norm = true;
  const auto qwen3 = saved("ckpt-paged-qwen3", c);
  LoadOptions qwen3_paged;
  qwen3_paged.kv_block_size = 16;
  qwen3_paged.kv_blocks = 8;
  CHECK_NOTHROW((void)DecoderCheckpoint::open(qwen3, qwen3_paged));  // q/k norms run on the paged cache too
}

TEST_CASE("with tied embeddings a checkpoint without lm_head reads the LM head from the embedding") {
  const auto dir = saved("ckpt-tied");
  rewrite(dir, [](std::vector<OwnedTensor>& t) {
    std::erase_if(t, [](const OwnedTensor& x) { return x.name == "lm_head.weight"; });
  });
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir), doctest::Contains("tensor lm_head.weight"), CheckpointError);
  rewrite_config(dir, [](LlamaConfig& c) { c.tie_word_embeddings = true; });
  const DecoderCheckpoint ck = DecoderCheckpoint::open(dir);
  CHECK(ck.sources().back()->name == "model.embed_tokens.weight");
}

TEST_CASE("with tied embeddings a stored lm_head must equal the embedding") {
  const auto dir = saved("ckpt-tied-stored");
  rewrite_config(dir, [](LlamaConfig& c) { c.tie_word_embeddings = true; });
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir),
                       doctest::Contains("tensor lm_head.weight: tie_word_embeddings is true, but this tensor differs"),
                       CheckpointError);
  rewrite(dir, [](std::vector<OwnedTensor>& t) {
    const auto embedding =
        std::find_if(t.begin(), t.end(), [](auto& x) { return x.name == "model.embed_tokens.weight"; });
    const auto head = std::find_if(t.begin(), t.end(), [](auto& x) { return x.name == "lm_head.weight"; });
    head->bytes = embedding->bytes;
  });
  CHECK(DecoderCheckpoint::open(dir).sources().back()->name == "model.embed_tokens.weight");
}

TEST_CASE("a tensor the decoder does not use is refused by name, not ignored") {
  for (const std::string extra : {"model.layers.0.self_attn.q_proj.bias", "model.layers.1.self_attn.q_norm.weight",
                                  "model.layers.2.mlp.up_proj.weight"}) {
    CAPTURE(extra);
    const auto dir = saved("ckpt-extra");
    rewrite(dir, [&](std::vector<OwnedTensor>& t) {
      t.push_back({extra, DType::f16, {128}, std::vector<std::byte>(256, std::byte{0x3c})});
    });
    CHECK_THROWS_WITH_AS(
        (void)DecoderCheckpoint::open(dir),
        doctest::Contains(("tensor " + extra + ": the llama decoder does not use this tensor").c_str()),
        CheckpointError);
  }
}

TEST_CASE("stored RoPE inverse frequencies are accepted when they are the config's, refused otherwise") {
  const DecoderConfig c = small_gqa();
  const auto dir = saved("ckpt-inv-freq");
  const std::vector<double> f = rope_frequencies(c.theta, c.rope_scaling, c.head_dim());
  std::vector<float> table(f.begin(), f.end());
  const auto add = [&](const std::vector<float>& values) {
    rewrite(dir, [&](std::vector<OwnedTensor>& t) {
      std::erase_if(t, [](const OwnedTensor& x) { return x.name.ends_with("inv_freq"); });
      std::vector<std::byte> bytes(values.size() * 4);
      std::memcpy(bytes.data(), values.data(), bytes.size());
      t.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq",
                   DType::f32,
                   {static_cast<std::int64_t>(values.size())},
                   bytes});
    });
  };
  add(table);
  CHECK_NOTHROW((void)DecoderCheckpoint::open(dir));
  table.back() *= 2;
  add(table);
  CHECK_THROWS_WITH_AS(
      (void)DecoderCheckpoint::open(dir),
      doctest::Contains("tensor model.layers.0.self_attn.rotary_emb.inv_freq: RoPE inverse frequency 15"),
      CheckpointError);
}

TEST_CASE("head_dim independent of hidden_size / heads and llama3 RoPE scaling survive a save and an open") {
  DecoderConfig c = small_gqa();
  c.head_width = 64;  // 4 heads of 64 over a width of 128: q is 256 wide
  c.rope_scaling = {.type = RopeType::llama3,
                    .factor = 8,
                    .low_freq_factor = 1,
                    .high_freq_factor = 4,
                    .original_max_position_embeddings = 16};
  const auto dir = saved("ckpt-head-width", c);
  const DecoderCheckpoint ck = DecoderCheckpoint::open(dir);
  CHECK(ck.config().head_dim() == 64);
  CHECK(ck.config().q_dim() == 256);
  CHECK(ck.config().rope_scaling == c.rope_scaling);
  CHECK(ck.llama_config().head_dim == 64);
  CHECK(ck.llama_config().rope_scaling.type == RopeType::llama3);
  const SafetensorsFile file = SafetensorsFile::open(dir / "model.safetensors");
  CHECK(file.tensor("model.layers.0.self_attn.q_proj.weight").shape == std::vector<std::int64_t>{256, 128});
  CHECK(file.tensor("model.layers.0.self_attn.o_proj.weight").shape == std::vector<std::int64_t>{128, 256});
}

TEST_CASE("Llama's attention_bias is refused, saying why, and a Mistral window shorter than the context is run") {
  const auto dir = saved("ckpt-bias");
  rewrite_config(dir, [](LlamaConfig& c) { c.attention_bias = true; });
  CHECK_THROWS_WITH_AS(
      (void)DecoderCheckpoint::open(dir),
      doctest::Contains("key 'attention_bias' is true, which in a llama model also gives o_proj a bias"),
      CheckpointError);
  const auto window = saved("ckpt-window");
  rewrite_config(window, [](LlamaConfig& c) {
    c.model_type = "mistral";
    c.sliding_window = 32;
  });
  // A window shorter than the context runs as sliding-window attention on every layer (Mistral's).
  const DecoderConfig windowed = DecoderCheckpoint::open(window).config();
  CHECK(windowed.context == 64);
  CHECK(windowed.window == 32);
  CHECK(windowed.sliding.empty());
  LoadOptions options;
  options.context = 32;
  CHECK(DecoderCheckpoint::open(window, options).config().context == 32);
}

TEST_CASE("a decoder with q, k and v biases is saved as Qwen2 and opens with them, rows in rotate-half order") {
  DecoderConfig c = small_gqa();
  c.qkv_bias = true;
  const auto dir = saved("ckpt-qwen2", c);
  const DecoderCheckpoint ck = DecoderCheckpoint::open(dir);
  CHECK(ck.llama_config().model_type == "qwen2");
  CHECK(ck.config().qkv_bias);
  CHECK(ck.sources().size() == decoder_tensors(c).size());
  const SafetensorsFile file = SafetensorsFile::open(dir / "model.safetensors");
  CHECK(file.tensor("model.layers.1.self_attn.q_proj.bias").shape == std::vector<std::int64_t>{128});
  CHECK(file.tensor("model.layers.1.self_attn.k_proj.bias").shape == std::vector<std::int64_t>{64});
  const std::vector<DecoderTensor> tensors = decoder_tensors(c);
  const auto found = std::find_if(tensors.begin(), tensors.end(), [](const DecoderTensor& t) {
    return t.name == "model.layers.1.self_attn.q_proj.bias";
  });
  REQUIRE(found != tensors.end());
  const DecoderTensor& bq = *found;
  CHECK(bq.rope_rows);
  const std::vector<half> want = host_tensor(c.seed, bq.seeded);
  const auto bytes = file.data(file.tensor(bq.name));
  for (int row = 0; row < bq.rows; ++row) {
    std::uint16_t bits = 0;
    std::memcpy(&bits, bytes.data() + 2 * static_cast<std::size_t>(rotate_half_row(row, c.head_dim())), 2);
    CHECK(bits == want[static_cast<std::size_t>(row)].bits);
  }
  rewrite(dir, [](std::vector<OwnedTensor>& t) {
    std::erase_if(t, [](const OwnedTensor& x) { return x.name == "model.layers.0.self_attn.v_proj.bias"; });
  });
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir),
                       doctest::Contains("tensor model.layers.0.self_attn.v_proj.bias"), CheckpointError);
}

TEST_CASE("a decoder with q/k norms is saved as Qwen3 and opens with their gains, in rotate-half order") {
  DecoderConfig c = small_gqa();
  c.qk_norm = true;
  const auto dir = saved("ckpt-qwen3", c);
  const DecoderCheckpoint ck = DecoderCheckpoint::open(dir);
  CHECK(ck.llama_config().model_type == "qwen3");
  CHECK(ck.config().qk_norm);
  CHECK(ck.sources().size() == decoder_tensors(c).size());
  const SafetensorsFile file = SafetensorsFile::open(dir / "model.safetensors");
  const auto hd = static_cast<std::int64_t>(c.head_dim());
  CHECK(file.tensor("model.layers.1.self_attn.q_norm.weight").shape == std::vector<std::int64_t>{hd});
  CHECK(file.tensor("model.layers.1.self_attn.k_norm.weight").shape == std::vector<std::int64_t>{hd});
  const std::vector<DecoderTensor> tensors = decoder_tensors(c);
  const auto found = std::find_if(tensors.begin(), tensors.end(), [](const DecoderTensor& t) {
    return t.name == "model.layers.1.self_attn.k_norm.weight";
  });
  REQUIRE(found != tensors.end());
  CHECK(found->rope_rows);
  const std::vector<half> want = host_tensor(c.seed, found->seeded);
  const auto bytes = file.data(file.tensor(found->name));
  for (int row = 0; row < found->rows; ++row) {
    std::uint16_t bits = 0;
    std::memcpy(&bits, bytes.data() + 2 * static_cast<std::size_t>(rotate_half_row(row, c.head_dim())), 2);
    CHECK(bits == want[static_cast<std::size_t>(row)].bits);
  }
  c.qkv_bias = true;
  CHECK_THROWS_WITH_AS(save_seeded_checkpoint(lgtest::scratch_directory("ckpt-qwen3-bias"), c),
                       doctest::Contains("no architecture has both"), UsageError);
  rewrite(dir, [](std::vector<OwnedTensor>& t) {
    std::erase_if(t, [](const OwnedTensor& x) { return x.name == "model.layers.0.self_attn.q_norm.weight"; });
  });
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir),
                       doctest::Contains("tensor model.layers.0.self_attn.q_norm.weight"), CheckpointError);
}

TEST_CASE("save_seeded_checkpoint refuses a dtype the loader does not read") {
  CHECK_THROWS_WITH_AS(save_seeded_checkpoint(lgtest::scratch_directory("ckpt-i8"), small_gqa(), DType::i8),
                       doctest::Contains("I8"), UsageError);
}

TEST_CASE("check_shard refuses, on the host, a model that does not split, a rank out of range and quantization") {
  const DecoderCheckpoint gqa = DecoderCheckpoint::open(saved("ckpt-shard-gqa"));  // 4 heads, 2 kv heads
  CHECK_NOTHROW(gqa.check_shard(1, 2));
  CHECK_THROWS_WITH_AS(gqa.check_shard(0, 4), doctest::Contains("kv heads 2 do not divide among the ranks"),
                       UsageError);
  DecoderConfig c = lgtest::small_decoder();  // 4 heads of their own k and v
  c.vocab = 514;
  const auto dir = saved("ckpt-shard-refused", c);
  const DecoderCheckpoint mha = DecoderCheckpoint::open(dir);
  CHECK_THROWS_WITH_AS(mha.check_shard(0, 4), doctest::Contains("vocab 514 does not divide among the ranks"),
                       UsageError);
  CHECK_THROWS_WITH_AS(mha.check_shard(0, 4), doctest::Contains("split over 4 tensor-parallel ranks"), UsageError);
  CHECK_THROWS_WITH_AS(mha.check_shard(0, 0), doctest::Contains("at least one rank"), UsageError);
  CHECK_THROWS_WITH_AS(mha.check_shard(2, 2), doctest::Contains("rank 2 is outside [0, 2)"), UsageError);
  CHECK_THROWS_WITH_AS(mha.check_shard(-1, 2), doctest::Contains("rank -1 is outside [0, 2)"), UsageError);
  CHECK_NOTHROW(mha.check_shard(1, 2));
  CHECK_NOTHROW(mha.check_shard(0, 1));

  // A quantization splits where the ranks' shares lie on its tiles, steps and groups.
  LoadOptions quantizing;
  quantizing.quantization.mlp = QuantizedFormat{WeightFormat::int8_channel, 0, false, ScaleType::f16};
  CHECK_NOTHROW(DecoderCheckpoint::open(dir, quantizing).check_shard(0, 2));
  LoadOptions head = quantizing;  // each rank's 257 rows of the LM head are not whole tiles of 16 rows
  head.quantization.lm_head = QuantizedFormat{WeightFormat::int8_channel, 0, false, ScaleType::f16};
  const DecoderCheckpoint chosen = DecoderCheckpoint::open(dir, head);
  CHECK_THROWS_WITH_AS(chosen.check_shard(0, 2), doctest::Contains("257 rows of it are not whole tiles of 16 rows"),
                       UsageError);
  CHECK_THROWS_WITH_AS(chosen.check_shard(0, 2), doctest::Contains("LoadOptions::quantization asks for"), UsageError);
  CHECK_NOTHROW(chosen.check_shard(0, 1));
  LoadOptions g128;  // each rank's 64 columns of Wo are not a group of 128
  g128.quantization.attention = QuantizedFormat{WeightFormat::int4_group, 128, false, ScaleType::f16};
  CHECK_THROWS_WITH_AS(DecoderCheckpoint::open(dir, g128).check_shard(1, 2),
                       doctest::Contains("model.layers.0.self_attn.o_proj.weight"), UsageError);
  const auto quantized = lgtest::scratch_directory("ckpt-shard-quantized");
  save_quantized_checkpoint(chosen, quantized);
  const DecoderCheckpoint as_saved = DecoderCheckpoint::open(quantized);
  CHECK_THROWS_WITH_AS(as_saved.check_shard(1, 2), doctest::Contains("is saved quantized as"), UsageError);
  CHECK_NOTHROW(as_saved.check_shard(0, 1));
}

namespace {

/// Every class quantized, each its own way: int4 with zero points for q, k, v and o, int8 for the MLP, int4 g128 for
/// the LM head, with the clipping search; or int4 g32 symmetric everywhere, round to nearest; or fp8 everywhere.
std::vector<DecoderQuantization> quantizations(ScaleType s) {
  std::vector<DecoderQuantization> out(3);
  out[0].attention = QuantizedFormat{WeightFormat::int4_group, 64, true, s};
  out[0].mlp = QuantizedFormat{WeightFormat::int8_channel, 0, false, s};
  out[0].lm_head = QuantizedFormat{WeightFormat::int4_group, 128, false, s};
  out[0].options.clip_search = true;
  out[1].attention = out[1].mlp = out[1].lm_head = QuantizedFormat{WeightFormat::int4_group, 32, false, s};
  out[2].attention = out[2].mlp = out[2].lm_head = QuantizedFormat{WeightFormat::fp8_block, 128, false, s};
  return out;
}

/// The bytes of `a` and `b` on the device, dense and quantized, are equal.
template <class T>
void check_same_weights(const BasicDecoderWeights<T>& a, const BasicDecoderWeights<T>& b) {
  Stream& s = lgtest::stream();
  const auto dense_bits = [&](const DeviceBuffer<T>& buffer) {
    std::vector<T> host(buffer.size());
    copy_async(s, std::span<T>(host), buffer.cview());
    s.synchronize();
    std::vector<std::uint16_t> bits;
    for (const T v : host) bits.push_back(v.bits);
    return bits;
  };
  CHECK(dense_bits(a.embedding) == dense_bits(b.embedding));
  CHECK(dense_bits(a.final_gain) == dense_bits(b.final_gain));
  for (std::size_t l = 0; l < a.attention.size(); ++l) {
    CHECK(dense_bits(a.attention[l].gain) == dense_bits(b.attention[l].gain));
    REQUIRE(a.attention[l].qkv.is_dense() == b.attention[l].qkv.is_dense());
    CHECK(dense_bits(a.attention[l].bias) == dense_bits(b.attention[l].bias));
  }
  const std::vector<QuantizedWeight> qa = lgtest::downloaded(s, a);
  const std::vector<QuantizedWeight> qb = lgtest::downloaded(s, b);
  REQUIRE(qa.size() == qb.size());
  REQUIRE_FALSE(qa.empty());
  for (std::size_t i = 0; i < qa.size(); ++i) {
    CAPTURE(qa[i].layout().name());
    CHECK(qa[i].layout().name() == qb[i].layout().name());
    CHECK(lgtest::same_bytes(qa[i], qb[i]));
  }
}

/// Uploads `dir` quantized as `q` on the device and on the host, into decoders over T: the same bytes, and the device
/// route leaves only the weights allocated.
template <class T>
void check_device_upload(const std::filesystem::path& dir, const DecoderQuantization& q) {
  Stream& s = lgtest::stream();
  LoadOptions options;
  options.quantization = q;
  options.staging_bytes = 4096;     // many chunks: both staging buffers alternate, for stored types and T
  options.progress_from_bytes = 0;  // the bar (on stderr) counts the quantized bytes
  const DecoderCheckpoint checkpoint = DecoderCheckpoint::open(dir, options);
  const DeviceQuantizer quantizer(lgtest::nn_kernels());
  const LiveHandles before = live_handles();
  const BasicDecoderWeights<T> on_device = checkpoint.upload<T>(s, quantizer);
  const LiveHandles after = live_handles();
  CHECK(after.device_bytes - before.device_bytes == checkpoint.device_bytes());  // the temporaries freed
  CHECK(after.pinned_allocations == before.pinned_allocations);
  CHECK(after.events == before.events);
  check_same_weights(on_device, checkpoint.upload<T>(s));
}

/// The bits of a dense device tensor's elements.
template <class T>
std::vector<std::uint16_t> shard_bits(DeviceSpan<const T> buffer) {
  Stream& s = lgtest::stream();
  std::vector<T> host(buffer.size());
  copy_async(s, std::span<T>(host), buffer);
  s.synchronize();
  std::vector<std::uint16_t> bits;
  bits.reserve(host.size());
  for (const T v : host) bits.push_back(v.bits);
  return bits;
}

/// The bits of a weight's dense values; none for a quantized weight (its bytes are compared apart).
template <class T>
std::vector<std::uint16_t> dense_bits_of(const Weight<T>& w) {
  return w.is_dense() ? shard_bits(w.dense()) : std::vector<std::uint16_t>{};
}

/// Every dense buffer of `a` equals `b`'s, size and bits, and their matrices are dense alike.
template <class T>
void check_same_dense(const BasicDecoderWeights<T>& a, const BasicDecoderWeights<T>& b) {
  CHECK(shard_bits(a.embedding.cview()) == shard_bits(b.embedding.cview()));
  REQUIRE(a.attention.size() == b.attention.size());
  REQUIRE(a.mlp.size() == b.mlp.size());
  for (std::size_t l = 0; l < a.attention.size(); ++l) {
    CAPTURE(l);
    const BasicAttentionWeights<T>& x = a.attention[l];
    const BasicAttentionWeights<T>& y = b.attention[l];
    CHECK(shard_bits(x.gain.cview()) == shard_bits(y.gain.cview()));
    CHECK(x.qkv.is_dense() == y.qkv.is_dense());
    CHECK(dense_bits_of(x.qkv) == dense_bits_of(y.qkv));
    CHECK(dense_bits_of(x.wo) == dense_bits_of(y.wo));
    CHECK(shard_bits(x.bias.cview()) == shard_bits(y.bias.cview()));
    CHECK(shard_bits(a.mlp[l].gain.cview()) == shard_bits(b.mlp[l].gain.cview()));
    CHECK(a.mlp[l].w1.is_dense() == b.mlp[l].w1.is_dense());
    CHECK(dense_bits_of(a.mlp[l].w1) == dense_bits_of(b.mlp[l].w1));
    CHECK(dense_bits_of(a.mlp[l].w3) == dense_bits_of(b.mlp[l].w3));
    CHECK(dense_bits_of(a.mlp[l].w2) == dense_bits_of(b.mlp[l].w2));
  }
  CHECK(shard_bits(a.final_gain.cview()) == shard_bits(b.final_gain.cview()));
  CHECK(a.lm_head.is_dense() == b.lm_head.is_dense());
  CHECK(dense_bits_of(a.lm_head) == dense_bits_of(b.lm_head));
}

/// Every rank of `ranks` uploads from `dir` the bytes shard_decoder_weights cuts from the whole upload, allocating
/// its share's bytes and no more.
template <class T>
void check_shards(const std::filesystem::path& dir, int ranks) {
  Stream& s = lgtest::stream();
  LoadOptions options;
  options.staging_bytes = 4096;     // many chunks: both staging buffers alternate
  options.progress_from_bytes = 0;  // the bar (on stderr) counts the share's bytes
  const DecoderCheckpoint ck = DecoderCheckpoint::open(dir, options);
  const BasicDecoderWeights<T> full = ck.upload<T>(s);
  std::size_t share = 0;
  for (const DecoderTensor& t : decoder_tensors(shard_config(ck.config(), ranks))) share += t.elements() * sizeof(T);
  for (int rank = 0; rank < ranks; ++rank) {
    CAPTURE(rank);
    const LiveHandles before = live_handles();
    const BasicDecoderWeights<T> mine = ck.upload_shard<T>(s, rank, ranks);
    const LiveHandles after = live_handles();
    CHECK(after.device_bytes - before.device_bytes == share);
    CHECK(after.pinned_allocations == before.pinned_allocations);
    check_same_dense(mine, shard_decoder_weights(s, full, ck.config(), rank, ranks));
  }
}

/// Every rank of `ranks` uploads from `dir`, quantized as `q` (on the device and on the host), the bytes
/// shard_decoder_weights cuts from the whole quantized upload, allocating its share's bytes and no more; a saved
/// quantized checkpoint of it gives the same shares.
template <class T>
void check_quantized_shards(const std::filesystem::path& dir, int ranks, const DecoderQuantization& q) {
  Stream& s = lgtest::stream();
  LoadOptions options;
  options.staging_bytes = 4096;
  options.quantization = q;
  const DecoderCheckpoint ck = DecoderCheckpoint::open(dir, options);
  const DeviceQuantizer quantizer(lgtest::nn_kernels());
  const BasicDecoderWeights<T> full = ck.upload<T>(s, quantizer);
  const auto saved_dir = lgtest::scratch_directory("ckpt-gpu-shard-saved-" + std::string(element_name<T>));
  save_quantized_checkpoint(ck, saved_dir);
  const DecoderCheckpoint as_saved = DecoderCheckpoint::open(saved_dir);
  const std::size_t share = decoder_device_bytes(shard_config(ck.config(), ranks), q);
  for (int rank = 0; rank < ranks; ++rank) {
    CAPTURE(rank);
    const BasicDecoderWeights<T> want = shard_decoder_weights(s, full, ck.config(), rank, ranks);
    const LiveHandles before = live_handles();
    const BasicDecoderWeights<T> mine = ck.upload_shard<T>(s, quantizer, rank, ranks);
    const LiveHandles after = live_handles();
    CHECK(after.device_bytes - before.device_bytes == share);  // the whole matrices freed
    CHECK(after.pinned_allocations == before.pinned_allocations);
    check_same_dense(mine, want);
    check_same_weights(mine, want);
    check_same_weights(ck.upload_shard<T>(s, rank, ranks), want);        // quantized on the host
    check_same_weights(as_saved.upload_shard<T>(s, rank, ranks), want);  // read as saved
  }
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("every rank's quantized upload_shard is the share of the whole quantized upload, byte for byte") {
    const DecoderConfig gqa = small_gqa();  // 2 heads and a kv head per rank
    DecoderQuantization q;
    q.attention = QuantizedFormat{WeightFormat::int8_channel, 0, false, ScaleType::f16};
    q.mlp = QuantizedFormat{WeightFormat::int4_group, 32, true, ScaleType::f16};
    q.lm_head = QuantizedFormat{WeightFormat::int4_group, 64, false, ScaleType::f16};
    const auto dir = saved("ckpt-gpu-shard-quantized", gqa, DType::bf16);
    check_quantized_shards<half>(dir, 2, q);
    DecoderQuantization b = q;
    for (std::optional<QuantizedFormat>* f : {&b.attention, &b.mlp, &b.lm_head}) (*f)->scale_type = ScaleType::bf16;
    check_quantized_shards<bfloat16>(dir, 2, b);
    // fp8, whose scales cover blocks of 128 rows: each matrix quantized whole, then cut (o_proj's share of 64
    // columns is not a whole group of 128, so attention stays int8)
    DecoderQuantization f = q;
    f.mlp = f.lm_head = QuantizedFormat{WeightFormat::fp8_block, 128, false, ScaleType::f16};
    check_quantized_shards<half>(dir, 2, f);
  }

  TEST_CASE("a decoder loaded from a saved F16 checkpoint computes the seeded decoder's logits bit for bit") {
    const DecoderConfig c = small_gqa();
    const auto dir = saved("ckpt-gpu-f16");
    LoadOptions options;
    options.progress_from_bytes = 0;  // show the bar (on stderr) even for this small file
    options.staging_bytes = 4096;     // many chunks: both staging buffers alternate
    Decoder loaded = load_decoder(lgtest::stream(), lgtest::nn_kernels(), dir, options);
    Decoder seeded(lgtest::stream(), lgtest::nn_kernels(), c);
    int a = 3;
    int b = 3;
    for (int p = 0; p < 10; ++p) {
      CAPTURE(p);
      a = loaded.forward({a, p});
      b = seeded.forward({b, p});
      const std::vector<half> la = loaded.logits();
      const std::vector<half> lb = seeded.logits();
      std::size_t differ = 0;
      for (std::size_t i = 0; i < la.size(); ++i) differ += la[i].bits != lb[i].bits ? 1 : 0;
      CHECK(differ == 0);
      REQUIRE(a == b);
    }
  }

  TEST_CASE("a seeded Qwen3-MoE and Mixtral checkpoint load into the decoders they were written from, bit for bit") {
    for (const bool qwen : {true, false}) {
      CAPTURE(qwen);
      const DecoderConfig c = small_moe(qwen, 8);
      const auto dir = saved(qwen ? "ckpt-gpu-qwen3-moe" : "ckpt-gpu-mixtral", c, DType::bf16);
      DecoderBf16 loaded = load_decoder<bfloat16>(lgtest::stream(), lgtest::nn_kernels(), dir);
      DecoderBf16 seeded(lgtest::stream(), lgtest::nn_kernels(), c);
      int a = 11;
      int b = 11;
      for (int p = 0; p < 4; ++p) {
        a = loaded.forward({a, p});
        b = seeded.forward({b, p});
        const std::vector<bfloat16> la = loaded.logits();
        const std::vector<bfloat16> lb = seeded.logits();
        std::size_t differ = 0;
        for (std::size_t i = 0; i < la.size(); ++i) differ += la[i].bits != lb[i].bits ? 1 : 0;
        CHECK(differ == 0);
        REQUIRE(a == b);
      }
    }
  }

  TEST_CASE("a BF16 and an F32 checkpoint load into an fp16 decoder, converted, and match float64") {
    const DecoderConfig c = small_gqa();
    for (const DType dtype : {DType::bf16, DType::f32}) {
      CAPTURE(dtype_name(dtype));
      const auto dir = saved("ckpt-gpu-convert", c, dtype);
      Decoder loaded = load_decoder(lgtest::stream(), lgtest::nn_kernels(), dir);
      DecoderReference reference(c, dtype == DType::bf16 ? DType::bf16 : DType::f16);  // the weights saved
      int token = 11;
      for (int p = 0; p < 4; ++p) {
        const int next = loaded.forward({token, p});
        const double err = relative_error(widen(loaded.logits()), reference.step(token, p));
        CHECK(err < 1e-2);
        token = next;
      }
    }
  }

  TEST_CASE("a weight fp16 cannot hold fails the upload naming the tensor, and nothing stays allocated") {
    const auto dir = saved("ckpt-gpu-range", small_gqa(), DType::f32);
    rewrite(dir, [](std::vector<OwnedTensor>& t) {
      for (OwnedTensor& x : t) {
        if (x.name == "model.layers.1.mlp.down_proj.weight") {
          const float big = 1e6F;
          std::memcpy(x.bytes.data() + 4 * 1000, &big, 4);
        }
      }
    });
    const DecoderCheckpoint ck = DecoderCheckpoint::open(dir);  // the host check cannot see values
    const LiveHandles before = live_handles();
    CHECK_THROWS_WITH_AS((void)ck.upload(lgtest::stream()), doctest::Contains("model.layers.1.mlp.down_proj.weight"),
                         CheckpointError);
    CHECK_THROWS_WITH_AS((void)ck.upload(lgtest::stream()), doctest::Contains("does not fit in fp16"), CheckpointError);
    const LiveHandles after = live_handles();
    CHECK(after.device_allocations == before.device_allocations);
    CHECK(after.device_bytes == before.device_bytes);
    CHECK(after.pinned_allocations == before.pinned_allocations);
    CHECK(after.pinned_bytes == before.pinned_bytes);
    CHECK(after.events == before.events);
  }
  TEST_CASE("quantizing on the GPU during the upload gives the host route's bytes, from F32, F16 and BF16 tensors") {
    DecoderConfig c = small_gqa();
    c.qkv_bias = true;  // biases stacked, q and k rows and biases reordered from rotate-half
    for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      const auto dir = saved("ckpt-gpu-device-quantize", c, dtype);
      for (const DecoderQuantization& q : quantizations(ScaleType::f16)) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(quantization_name(q));
        check_device_upload<half>(dir, q);
      }
      if (dtype == DType::f16) continue;
      for (const DecoderQuantization& q : quantizations(ScaleType::bf16)) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(quantization_name(q));
        check_device_upload<bfloat16>(dir, q);
      }
    }
  }

  TEST_CASE("a q, k and v stored in different dtypes, and a tied LM head, are quantized on the GPU as on the host") {
    const auto dir = saved("ckpt-gpu-device-mixed", small_gqa(), DType::f32);
    rewrite(dir, [](std::vector<OwnedTensor>& t) {
      for (OwnedTensor& x : t) {
        if (x.name != "model.layers.1.self_attn.k_proj.weight") continue;
        std::vector<std::byte> halves(x.bytes.size() / 2);  // the seeded F32 values are fp16 values: exact
        for (std::size_t i = 0; i < halves.size() / 2; ++i) {
          float f = 0;
          std::memcpy(&f, x.bytes.data() + 4 * i, 4);
          const std::uint16_t bits = half::from_float(f).bits;
          std::memcpy(halves.data() + 2 * i, &bits, 2);
        }
        x.dtype = DType::f16;
        x.bytes = std::move(halves);
      }
      std::erase_if(t, [](const OwnedTensor& x) { return x.name == "lm_head.weight"; });
    });
    rewrite_config(dir, [](LlamaConfig& c) { c.tie_word_embeddings = true; });
    for (const DecoderQuantization& q : quantizations(ScaleType::f16)) {
      CAPTURE(quantization_name(q));
      check_device_upload<half>(dir, q);
    }
  }

  TEST_CASE("a weight that cannot be quantized on the GPU fails the upload naming the matrix, nothing left allocated") {
    const auto dir = saved("ckpt-gpu-device-nan", small_gqa(), DType::f32);
    rewrite(dir, [](std::vector<OwnedTensor>& t) {
      for (OwnedTensor& x : t) {
        if (x.name == "model.layers.1.mlp.down_proj.weight" || x.name == "model.layers.0.self_attn.k_proj.weight") {
          const float nan = NAN;
          std::memcpy(x.bytes.data() + 4 * 1000, &nan, 4);
        }
      }
    });
    const DeviceQuantizer quantizer(lgtest::nn_kernels());
    const auto refused = [&](const DecoderQuantization& q, const char* matrix, const char* detail) {
      CAPTURE(matrix);
      LoadOptions options;
      options.quantization = q;
      const DecoderCheckpoint checkpoint = DecoderCheckpoint::open(dir, options);  // the host check cannot see values
      const LiveHandles before = live_handles();
      CHECK_THROWS_WITH_AS((void)checkpoint.upload<half>(lgtest::stream(), quantizer),
                           doctest::Contains((std::string("tensor ") + matrix + ": cannot be quantized").c_str()),
                           CheckpointError);
      CHECK_THROWS_WITH_AS((void)checkpoint.upload<half>(lgtest::stream(), quantizer), doctest::Contains(detail),
                           CheckpointError);
      const LiveHandles after = live_handles();
      CHECK(after.device_allocations == before.device_allocations);
      CHECK(after.device_bytes == before.device_bytes);
      CHECK(after.pinned_allocations == before.pinned_allocations);
      CHECK(after.events == before.events);
    };
    DecoderQuantization mlp;
    mlp.mlp = QuantizedFormat{WeightFormat::int8_channel, 0, false, ScaleType::f16};
    // Element 1000 of the 128 x 256 down projection: row 3, column 232.
    refused(mlp, "model.layers.1.mlp.down_proj.weight", "weight at row 3, column 232 is");
    DecoderQuantization attention;
    attention.attention = QuantizedFormat{WeightFormat::int4_group, 64, false, ScaleType::f16};
    // The stacked matrix's row is not k_proj's: the message says how the rows are made.
    refused(attention, "model.layers.0.self_attn.qkv_proj.weight", "its rows are q_proj's, k_proj's and v_proj's");
  }

  TEST_CASE("load_decoder quantizes on the GPU and decodes the logits of quantizing on the host, bit for bit") {
    DecoderConfig c = small_gqa();
    c.qkv_bias = true;
    const auto dir = saved("ckpt-gpu-load-quantized", c, DType::bf16);
    LoadOptions options;
    options.quantization = quantizations(ScaleType::f16)[0];
    Decoder loaded = load_decoder(lgtest::stream(), lgtest::nn_kernels(), dir, options);
    const DecoderCheckpoint checkpoint = DecoderCheckpoint::open(dir, options);
    Decoder on_host(lgtest::stream(), lgtest::nn_kernels(), checkpoint.config(), checkpoint.upload(lgtest::stream()));
    lgtest::check_same_decoding(loaded, on_host, 7);
  }

  TEST_CASE("every rank's upload_shard is shard_decoder_weights of the whole upload, byte for byte") {
    DecoderConfig gqa = small_gqa();
    gqa.heads = 8;  // heads of 16, 2 kv heads: 2 ranks only
    DecoderConfig qwen2 = lgtest::small_decoder(0, 1, 78);
    qwen2.qkv_bias = true;  // biases reordered as the rows of q and k
    DecoderConfig wide = lgtest::small_decoder(4, 1, 79);
    wide.head_width = 64;  // q 256 wide over a width of 128: Wo's columns are not d's
    const std::vector<std::pair<std::string, DecoderConfig>> configs = {
        {"gqa", gqa}, {"qwen2", qwen2}, {"head-width", wide}};
    for (const auto& [label, c] : configs) {
      for (const DType dtype : {DType::f16, DType::bf16, DType::f32}) {
        CAPTURE(label);
        CAPTURE(dtype_name(dtype));
        const auto dir = saved("ckpt-gpu-shard-" + label, c, dtype);
        for (const int ranks : {2, 4}) {
          CAPTURE(ranks);
          if (ranks == 4 && c.kv_head_count() % 4 != 0) continue;  // does not split
          check_shards<half>(dir, ranks);                          // from BF16: rounded to fp16's 11 bits
          if (dtype == DType::bf16) check_shards<bfloat16>(dir, ranks);
        }
      }
    }
  }

  TEST_CASE("a tied model's ranks read their LM head rows from the embedding") {
    const auto dir = saved("ckpt-gpu-shard-tied", small_gqa(), DType::bf16);
    rewrite(dir, [](std::vector<OwnedTensor>& t) {
      std::erase_if(t, [](const OwnedTensor& x) { return x.name == "lm_head.weight"; });
    });
    rewrite_config(dir, [](LlamaConfig& c) { c.tie_word_embeddings = true; });
    check_shards<bfloat16>(dir, 2);
    const DecoderCheckpoint ck = DecoderCheckpoint::open(dir);
    const BasicDecoderWeights<bfloat16> rank1 = ck.upload_shard<bfloat16>(lgtest::stream(), 1, 2);
    CHECK(shard_bits(rank1.lm_head.dense()) == shard_bits(rank1.embedding.cview()));
  }

  TEST_CASE("upload_shard refuses before allocating, and a value fp16 cannot hold fails the rank that reads it") {
    const auto dir = saved("ckpt-gpu-shard-range", small_gqa(), DType::f32);
    // Element 1000 of the 128 x 256 down projection: row 3, column 232, rank 1's columns of 2. Stored row 100 of
    // q_proj: head 3's, rank 1's rows of 2.
    rewrite(dir, [](std::vector<OwnedTensor>& t) {
      for (OwnedTensor& x : t) {
        const float big = 1e6F;
        if (x.name == "model.layers.1.mlp.down_proj.weight") std::memcpy(x.bytes.data() + 4 * 1000, &big, 4);
        if (x.name == "model.layers.0.self_attn.q_proj.weight") {
          std::memcpy(x.bytes.data() + 4 * (100 * 128 + 5), &big, 4);
        }
      }
    });
    const DecoderCheckpoint ck = DecoderCheckpoint::open(dir);
    const LiveHandles before = live_handles();
    CHECK_THROWS_WITH_AS((void)ck.upload_shard(lgtest::stream(), 2, 2), doctest::Contains("rank 2 is outside"),
                         UsageError);
    CHECK_THROWS_WITH_AS((void)ck.upload_shard(lgtest::stream(), 0, 3), doctest::Contains("do not divide"), UsageError);
    CHECK_THROWS_WITH_AS((void)ck.upload_shard(lgtest::stream(), 1, 2),
                         doctest::Contains("tensor model.layers.0.self_attn.q_proj.weight: value 1000000.000000 at "
                                           "element 12805 does not fit in fp16"),
                         CheckpointError);
    CHECK_THROWS_WITH_AS((void)ck.upload(lgtest::stream()), doctest::Contains("at element 12805 does not fit"),
                         CheckpointError);
    LiveHandles after = live_handles();
    CHECK(after.device_allocations == before.device_allocations);
    CHECK(after.device_bytes == before.device_bytes);
    CHECK(after.pinned_allocations == before.pinned_allocations);
    CHECK(after.events == before.events);
    rewrite(dir, [](std::vector<OwnedTensor>& t) {  // q_proj mended: down_proj's value fails rank 1 only
      for (OwnedTensor& x : t) {
        const float one = 1;
        if (x.name == "model.layers.0.self_attn.q_proj.weight") {
          std::memcpy(x.bytes.data() + 4 * (100 * 128 + 5), &one, 4);
        }
      }
    });
    const DecoderCheckpoint mended = DecoderCheckpoint::open(dir);
    CHECK_NOTHROW((void)mended.upload_shard(lgtest::stream(), 0, 2));
    CHECK_THROWS_WITH_AS((void)mended.upload_shard(lgtest::stream(), 1, 2),
                         doctest::Contains("tensor model.layers.1.mlp.down_proj.weight: value 1000000.000000 at "
                                           "element 1000 does not fit in fp16"),
                         CheckpointError);
    after = live_handles();
    CHECK(after.device_allocations == before.device_allocations);
    CHECK(after.device_bytes == before.device_bytes);
    CHECK(after.pinned_allocations == before.pinned_allocations);
  }
}
