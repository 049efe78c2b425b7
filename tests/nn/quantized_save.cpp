// Quantized decoder checkpoints (nn/quantized_save.hpp): a seeded checkpoint saved quantized and opened again reads
// back, on the host, the bytes that quantizing on load makes and that quantize() makes of the seeded weights, bit for
// bit; config.json records the formats; another quantization method, another layout version, a config.json that does
// not describe the tensors, a missing part, a leftover dense tensor and quantized bytes that break their format are
// refused by DecoderCheckpoint::open by name, before anything is allocated. On a GPU: uploading a saved folder gives
// the weights and the logits of quantizing on load, bit for bit.
#include <doctest/doctest.h>

#include <lazygraph/nn/checkpoint.hpp>
#include <lazygraph/nn/decoder_tensors.hpp>
#include <lazygraph/nn/quantized_checkpoint.hpp>
#include <lazygraph/nn/quantized_save.hpp>
#include <lazygraph/nn/random_weights.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/files.hpp"
#include "common/gpu.hpp"
#include "common/nn.hpp"
#include "common/quantized_formats.hpp"
#include "common/quantized_weights.hpp"
#include "common/rewrite_safetensors.hpp"
#include "common/same_decoding.hpp"
#include "common/small_decoder.hpp"
#include "common/temp_dir.hpp"

using namespace lazygraph;
using namespace lazygraph::nn;
namespace fs = std::filesystem;

namespace {

using lgtest::int4;
using lgtest::int8;

/// Every class quantized, each its own way, with the clipping search.
DecoderQuantization mixed(ScaleType s = ScaleType::f16) {
  DecoderQuantization q;
  q.attention = int4(64, true, s);
  q.mlp = int8(s);
  q.lm_head = int4(128, false, s);
  q.options.clip_search = true;
  return q;
}

LoadOptions quantizing(const DecoderQuantization& q) {
  LoadOptions options;
  options.quantization = q;
  return options;
}

/// GQA (k and v narrower than q in the stacked matrix) with q, k and v biases.
DecoderConfig small_qwen2() {
  DecoderConfig c = lgtest::small_decoder(2);
  c.qkv_bias = true;
  return c;
}

/// The seeded checkpoint of `c` in `dtype` as `dir`/source, saved quantized as `q` as `dir`/saved (returned).
fs::path saved_quantized(const lgtest::TempDir& dir, const DecoderConfig& c, const DecoderQuantization& q,
                         DType dtype = DType::f16) {
  save_seeded_checkpoint(dir / "source", c, dtype);
  save_quantized_checkpoint(DecoderCheckpoint::open(dir / "source", quantizing(q)), dir / "saved");
  return dir / "saved";
}

using lgtest::OwnedTensor;
using lgtest::rewrite;
using lgtest::rewrite_config;

/// Removes the tensor `name` from `dir`/model.safetensors.
void erase(const fs::path& dir, const std::string& name) {
  rewrite(dir,
          [&](std::vector<OwnedTensor>& t) { std::erase_if(t, [&](const OwnedTensor& x) { return x.name == name; }); });
}

/// Replaces the text `from` of `dir`/config.json, which must hold it, by `to`.
void replace_in_config(const fs::path& dir, const std::string& from, const std::string& to) {
  std::string text = lgtest::read_file(dir / "config.json");
  const std::size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  lgtest::write_file(dir / "config.json", text.replace(at, from.size(), to));
}

/// The message of the CheckpointError that opening `dir` throws; fails the test on anything else.
std::string open_error(const fs::path& dir, const LoadOptions& options = {}) {
  try {
    (void)DecoderCheckpoint::open(dir, options);
  } catch (const CheckpointError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected a CheckpointError, got: " << e.what());
  }
  FAIL("expected a CheckpointError opening " << dir.string());
  return {};
}

/// The seeded values of decoder tensor `t` as a checkpoint of `dtype` holds them (F32: the fp16 values), as floats,
/// rows in the decoder's order.
std::vector<float> seeded_floats(const DecoderConfig& c, const DecoderTensor& t, DType dtype) {
  std::vector<float> out;
  if (dtype == DType::bf16) {
    for (const bfloat16 v : host_tensor<bfloat16>(c.seed, t.seeded)) out.push_back(v.to_float());
  } else {
    for (const half v : host_tensor<half>(c.seed, t.seeded)) out.push_back(v.to_float());
  }
  return out;
}

/// quantize() of the seeded weights of each matrix of quantized_layouts(c, q), q, k and v stacked: computed here,
/// without the checkpoint code, as the oracle.
std::vector<QuantizedWeight> quantized_seeded(const DecoderConfig& c, const DecoderQuantization& q, DType dtype) {
  const std::vector<QuantizedLayout> layouts = quantized_layouts(c, q);
  std::vector<QuantizedWeight> out;
  std::vector<float> pending;
  for (const DecoderTensor& t : decoder_tensors(c)) {
    if (!q.format_of(t.role)) continue;
    const std::vector<float> f = seeded_floats(c, t, dtype);
    pending.insert(pending.end(), f.begin(), f.end());
    if (t.role == DecoderTensorRole::wq || t.role == DecoderTensorRole::wk) continue;
    const QuantizedLayout& l = layouts.at(out.size());
    out.push_back(quantize(l.format(), l.name(), l.rows(), l.cols(), pending, q.options));
    pending.clear();
  }
  return out;
}

}  // namespace

TEST_CASE("a checkpoint saved quantized reads back the bytes that quantizing on load makes, bit for bit") {
  const DecoderConfig c = small_qwen2();
  for (const DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    CAPTURE(dtype_name(dtype));
    const lgtest::TempDir dir("nn-qsave");
    const DecoderQuantization q = mixed(dtype == DType::bf16 ? ScaleType::bf16 : ScaleType::f16);
    const fs::path saved = saved_quantized(dir, c, q, dtype);
    const DecoderCheckpoint source = DecoderCheckpoint::open(dir / "source", quantizing(q));
    const DecoderCheckpoint back = DecoderCheckpoint::open(saved);
    CHECK_FALSE(source.quantized_as_saved());
    CHECK(back.quantized_as_saved());
    CHECK(back.quantization() == q);
    CHECK(back.device_bytes() == source.device_bytes());
    CHECK(back.config().d == c.d);
    CHECK(back.config().kv_head_count() == 2);
    CHECK(back.config().qkv_bias);
    CHECK(back.llama_config().model_type == "qwen2");

    const std::vector<QuantizedWeight> want = quantized_seeded(c, q, dtype);
    REQUIRE(back.quantized_layouts().size() == want.size());
    REQUIRE(source.quantized_layouts().size() == want.size());
    CHECK(back.quantized_layouts().front().name() == "model.layers.0.self_attn.qkv_proj.weight");
    CHECK(back.quantized_layouts().front().rows() == c.q_dim() + 2 * c.kv_dim());
    for (std::size_t i = 0; i < want.size(); ++i) {
      CAPTURE(want[i].layout().name());
      CHECK(back.quantized_layouts()[i].name() == want[i].layout().name());
      CHECK(lgtest::same_bytes(source.quantized_weight(i), want[i]));
      CHECK(lgtest::same_bytes(back.quantized_weight(i), want[i]));
    }
    CHECK_THROWS_AS((void)back.quantized_weight(want.size()), UsageError);

    // The dense tensors as the source stores them; none for the quantized ones.
    const std::vector<DecoderTensor> tensors = decoder_tensors(c);
    REQUIRE(back.sources().size() == tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      CAPTURE(tensors[i].name);
      if (q.format_of(tensors[i].role)) {
        CHECK(back.sources()[i] == nullptr);
        continue;
      }
      const TensorInfo* from = source.sources()[i];
      const TensorInfo* to = back.sources()[i];
      REQUIRE(to != nullptr);
      CHECK(to->dtype == dtype);
      CHECK(to->shape == from->shape);
      const auto a = source.weights().data(*from);
      const auto b = back.weights().data(*to);
      CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));
    }
  }
}

TEST_CASE("the saved folder holds the dense tensors, each quantized matrix's parts and config.json with the formats") {
  const lgtest::TempDir dir("nn-qsave");
  const DecoderConfig c = small_qwen2();
  const DecoderQuantization q = mixed();
  const fs::path saved = saved_quantized(dir, c, q);
  std::set<std::string> want;
  for (const DecoderTensor& t : decoder_tensors(c)) {
    if (!q.format_of(t.role)) want.insert(t.name);
  }
  for (const QuantizedLayout& l : quantized_layouts(c, q)) {
    for (const std::string& name :
         {QuantizedTensors::format_name_of(l.name()), QuantizedTensors::values_name_of(l.name()),
          QuantizedTensors::scales_name_of(l.name())}) {
      want.insert(name);
    }
    if (l.format().asymmetric) want.insert(QuantizedTensors::zeros_name_of(l.name()));
  }
  CHECK(want.contains("model.layers.1.self_attn.qkv_proj.weight.qzeros"));  // int4 with zero points
  CHECK_FALSE(want.contains("model.layers.1.mlp.up_proj.weight.qzeros"));   // int8
  CHECK(want.contains("model.layers.1.self_attn.q_proj.bias"));             // biases stay dense
  const SafetensorsFile file = SafetensorsFile::open(saved / "model.safetensors");
  std::set<std::string> found;
  for (const TensorInfo& t : file.tensors()) found.insert(t.name);
  CHECK(found == want);

  LlamaConfig expected = LlamaConfig::load(dir / "source");
  CHECK_FALSE(expected.quantization.has_value());
  expected.quantization = q;
  const LlamaConfig back = LlamaConfig::load(saved);
  CHECK(back.save_id.size() == 16);  // its own save's, which every file of the save records
  CHECK(back.save_id != expected.save_id);
  CHECK(file.metadata().at("lazygraph_save_id") == back.save_id);
  expected.save_id = back.save_id;
  CHECK(back == expected);
  const std::string text = lgtest::read_file(saved / "config.json");
  CHECK(text.find(R"("quant_method": "lazygraph")") != std::string::npos);
  CHECK(text.find(R"("layout_version": 1)") != std::string::npos);
}

TEST_CASE("a tied model saves its quantized LM head, quantized from the embedding, and no dense copy of it") {
  const lgtest::TempDir dir("nn-qsave");
  const DecoderConfig c = lgtest::small_decoder();
  save_seeded_checkpoint(dir / "source", c);
  erase(dir / "source", "lm_head.weight");
  rewrite_config(dir / "source", [](LlamaConfig& l) { l.tie_word_embeddings = true; });
  DecoderQuantization q;
  q.lm_head = int8();
  const DecoderCheckpoint source = DecoderCheckpoint::open(dir / "source", quantizing(q));
  save_quantized_checkpoint(source, dir / "head");
  const DecoderCheckpoint head = DecoderCheckpoint::open(dir / "head");
  CHECK(head.llama_config().tie_word_embeddings);
  CHECK(head.weights().find("lm_head.weight") == nullptr);
  CHECK(head.weights().find("lm_head.weight.qvalues") != nullptr);
  REQUIRE(head.quantized_layouts().size() == 1);
  CHECK(lgtest::same_bytes(head.quantized_weight(0), source.quantized_weight(0)));

  q = {};
  q.mlp = int4(128);
  save_quantized_checkpoint(DecoderCheckpoint::open(dir / "source", quantizing(q)), dir / "mlp");
  const DecoderCheckpoint mlp = DecoderCheckpoint::open(dir / "mlp");
  CHECK(mlp.weights().find("lm_head.weight") == nullptr);
  CHECK(mlp.sources().back()->name == "model.embed_tokens.weight");
}

namespace {

/// The text of `dir`/`name` with the folder's save id (config.json's) written as 16 '#'.
std::string without_save_id(const fs::path& dir, const std::string& name) {
  const std::string id = LlamaConfig::load(dir).save_id;
  REQUIRE(id.size() == 16);
  std::string text = lgtest::read_file(dir / name);
  int found = 0;
  for (std::size_t at = text.find(id); at != std::string::npos; at = text.find(id, at)) {
    text.replace(at, id.size(), std::string(id.size(), '#'));
    ++found;
  }
  CHECK(found == 1);
  return text;
}

}  // namespace

TEST_CASE("a quantized checkpoint saved again is the same folder, byte for byte but for its save id") {
  const lgtest::TempDir dir("nn-qsave");
  const fs::path saved = saved_quantized(dir, small_qwen2(), mixed());
  save_quantized_checkpoint(DecoderCheckpoint::open(saved), dir / "again");
  CHECK(LlamaConfig::load(dir / "again").save_id != LlamaConfig::load(saved).save_id);
  CHECK(without_save_id(dir / "again", "model.safetensors") == without_save_id(saved, "model.safetensors"));
  CHECK(without_save_id(dir / "again", "config.json") == without_save_id(saved, "config.json"));
}

TEST_CASE("a quantized checkpoint saved in shards reads back the same matrices and tensors, and saved whole again") {
  const lgtest::TempDir dir("nn-qsave");
  const DecoderConfig c = small_qwen2();
  const DecoderQuantization q = mixed();
  const fs::path saved = saved_quantized(dir, c, q);
  const DecoderCheckpoint whole = DecoderCheckpoint::open(saved);
  save_quantized_checkpoint(whole, dir / "shards", 20000);  // bytes of tensor data per shard, at most
  CHECK_FALSE(fs::exists(dir / "shards" / "model.safetensors"));
  const DecoderCheckpoint sharded = DecoderCheckpoint::open(dir / "shards");
  CHECK(sharded.weights().files().size() > 2);
  CHECK(sharded.quantization() == q);
  REQUIRE(sharded.quantized_layouts().size() == whole.quantized_layouts().size());
  for (std::size_t i = 0; i < whole.quantized_layouts().size(); ++i) {
    CAPTURE(whole.quantized_layouts()[i].name());
    CHECK(lgtest::same_bytes(sharded.quantized_weight(i), whole.quantized_weight(i)));
  }
  REQUIRE(sharded.sources().size() == whole.sources().size());
  for (std::size_t i = 0; i < whole.sources().size(); ++i) {
    if (whole.sources()[i] == nullptr) continue;
    const auto a = whole.weights().data(*whole.sources()[i]);
    const auto b = sharded.weights().data(*sharded.sources()[i]);
    CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));
  }
  // Saved whole into that folder: one file again, and neither the index nor a shard is left to shadow it.
  save_quantized_checkpoint(whole, dir / "shards");
  CHECK(without_save_id(dir / "shards", "model.safetensors") == without_save_id(saved, "model.safetensors"));
  CHECK_FALSE(fs::exists(dir / "shards" / "model.safetensors.index.json"));
  CHECK(std::distance(fs::directory_iterator(dir / "shards"), fs::directory_iterator{}) == 2);  // + config.json
  CHECK_THROWS_AS(save_quantized_checkpoint(whole, dir / "zero", 0), UsageError);
}

TEST_CASE("save_quantized_checkpoint refuses a source that quantizes nothing, and the source's own folder") {
  const lgtest::TempDir dir("nn-qsave");
  save_seeded_checkpoint(dir / "source", lgtest::small_decoder());
  CHECK_THROWS_WITH_AS(save_quantized_checkpoint(DecoderCheckpoint::open(dir / "source"), dir / "saved"),
                       doctest::Contains("quantizes nothing: open it with LoadOptions::quantization"), UsageError);
  CHECK_FALSE(fs::exists(dir / "saved"));
  const DecoderCheckpoint source = DecoderCheckpoint::open(dir / "source", quantizing(mixed()));
  for (const fs::path& same : {dir / "source", dir / "source" / ".", dir / ".." / dir.path().filename() / "source"}) {
    CAPTURE(same.string());
    CHECK_THROWS_WITH_AS(save_quantized_checkpoint(source, same),
                         doctest::Contains("is the source checkpoint's folder"), UsageError);
  }
  CHECK_FALSE(LlamaConfig::load(dir / "source").quantization.has_value());  // nothing written
}

TEST_CASE("a quantized checkpoint of another method or layout version is refused, naming config.json and the key") {
  const lgtest::TempDir dir("nn-qsave");
  const fs::path saved = saved_quantized(dir, small_qwen2(), mixed());
  replace_in_config(saved, R"("quant_method": "lazygraph")", R"("quant_method": "bitsandbytes")");
  std::string error = open_error(saved);
  CHECK(error.find((saved / "config.json").string()) != std::string::npos);
  CHECK(error.find("key 'quantization_config.quant_method' is \"bitsandbytes\": lazygraph reads the quantized "
                   "checkpoints it writes itself") != std::string::npos);
  replace_in_config(saved, R"("quant_method": "bitsandbytes")", R"("quant_method": "lazygraph")");
  CHECK_NOTHROW((void)DecoderCheckpoint::open(saved));
  replace_in_config(saved, R"("layout_version": 1)", R"("layout_version": 2)");
  error = open_error(saved);
  CHECK(error.find("key 'quantization_config.layout_version' is 2") != std::string::npos);
}

TEST_CASE("a config.json whose formats are not the saved tensors' is refused, naming the tensor and both formats") {
  const lgtest::TempDir dir("nn-qsave");
  const fs::path saved = saved_quantized(dir, small_qwen2(), mixed());
  rewrite_config(saved, [](LlamaConfig& l) { l.quantization->mlp = int4(128); });
  CHECK(open_error(saved).find("tensor model.layers.0.mlp.gate_proj.weight.qformat: saved as 256 x 128, int8 per "
                               "channel, fp16 scales, read as 256 x 128, int4 g128, fp16 scales") != std::string::npos);
  rewrite_config(saved, [](LlamaConfig& l) {
    l.quantization->mlp = int8();
    l.quantization->attention = int4(32, true);  // q_dim 128 + 2 kv_dim 64 rows
  });
  CHECK(open_error(saved).find("tensor model.layers.0.self_attn.qkv_proj.weight.qformat: saved as 256 x 128, int4 "
                               "g64 asymmetric, fp16 scales, read as 256 x 128, int4 g32 asymmetric") !=
        std::string::npos);
  rewrite_config(saved, [](LlamaConfig& l) {
    l.quantization->attention = int4(64, true);
    l.quantization->lm_head.reset();  // the LM head dense: lm_head.weight is missing
  });
  CHECK(open_error(saved).find("tensor lm_head.weight") != std::string::npos);
  rewrite_config(saved, [](LlamaConfig& l) { l.quantization->lm_head = int4(128); });
  CHECK_NOTHROW((void)DecoderCheckpoint::open(saved));
}

TEST_CASE("a quantization_config that cannot apply to the model's shapes is a CheckpointError naming config.json") {
  const lgtest::TempDir dir("nn-qsave");
  DecoderConfig c = lgtest::small_decoder();
  c.ffn = 160;  // int8 reads it; int4 needs a multiple of 64
  DecoderQuantization q;
  q.mlp = int8();
  const fs::path saved = saved_quantized(dir, c, q);
  rewrite_config(saved, [](LlamaConfig& l) { l.quantization->mlp = int4(32); });
  const std::string error = open_error(saved);
  CHECK(error.find("file " + (saved / "config.json").string() +
                   ": quantization_config cannot apply to this model: "
                   "tensor model.layers.0.mlp.down_proj.weight: int4 needs the input dimension (160)") !=
        std::string::npos);
}

TEST_CASE(
    "a missing part, a leftover dense tensor or stray zero points in a quantized checkpoint are refused by name") {
  const DecoderConfig c = small_qwen2();
  const DecoderQuantization q = mixed();
  const auto refused = [&](const std::function<void(const fs::path&)>& edit, const std::string& fragment) {
    CAPTURE(fragment);
    const lgtest::TempDir dir("nn-qsave");
    const fs::path saved = saved_quantized(dir, c, q);
    edit(saved);
    const std::string error = open_error(saved);
    CHECK(error.find((saved / "model.safetensors").string()) != std::string::npos);
    CHECK(error.find(fragment) != std::string::npos);
  };
  refused([](const fs::path& d) { erase(d, "model.layers.1.mlp.down_proj.weight.qscales"); },
          "tensor model.layers.1.mlp.down_proj.weight.qscales");
  refused([](const fs::path& d) { erase(d, "model.layers.0.self_attn.qkv_proj.weight.qzeros"); },
          "tensor model.layers.0.self_attn.qkv_proj.weight.qzeros");
  refused([](const fs::path& d) { erase(d, "lm_head.weight.qformat"); }, "tensor lm_head.weight.qformat");
  refused(
      [](const fs::path& d) {
        rewrite(d, [](std::vector<OwnedTensor>& t) {
          t.push_back({"model.layers.0.self_attn.q_proj.weight",
                       DType::f16,
                       {128, 128},
                       std::vector<std::byte>(128 * 128 * 2, std::byte{0})});
        });
      },
      "tensor model.layers.0.self_attn.q_proj.weight: this checkpoint holds the weight quantized (config.json's "
      "quantization_config: attention int4 g64 asymmetric, fp16 scales; MLP int8 per channel");
  refused(
      [](const fs::path& d) {
        rewrite(d, [](std::vector<OwnedTensor>& t) {
          t.push_back({"lm_head.weight.qzeros", DType::u8, {512 * 1}, std::vector<std::byte>(512, std::byte{0})});
        });
      },
      "tensor lm_head.weight.qzeros: zero points for a symmetric format (int4 g128, fp16 scales)");
  refused(
      [](const fs::path& d) {
        rewrite(d, [](std::vector<OwnedTensor>& t) {
          for (OwnedTensor& x : t) {
            if (x.name == "model.layers.1.mlp.up_proj.weight.qscales") x.dtype = DType::bf16;
          }
        });
      },
      "tensor model.layers.1.mlp.up_proj.weight.qscales: expected F16");
  refused(
      [](const fs::path& d) {
        rewrite(d, [](std::vector<OwnedTensor>& t) {
          t.push_back({"model.layers.0.self_attn.qkv_proj.bias", DType::f16, {256}, std::vector<std::byte>(512)});
        });
      },
      "tensor model.layers.0.self_attn.qkv_proj.bias: the qwen2 decoder does not use this tensor");
}

TEST_CASE("a quantized checkpoint opens with LoadOptions::quantization empty or its own, and refuses any other") {
  const lgtest::TempDir dir("nn-qsave");
  const DecoderQuantization q = mixed();
  const fs::path saved = saved_quantized(dir, small_qwen2(), q);
  CHECK(DecoderCheckpoint::open(saved, quantizing(q)).quantization() == q);
  DecoderQuantization same = q;
  same.mlp->group = 128;  // unused by int8
  CHECK(DecoderCheckpoint::open(saved, quantizing(same)).quantization() == q);
  DecoderQuantization nothing;
  nothing.options.clip_search = true;  // no format chosen: nothing asked for
  CHECK(DecoderCheckpoint::open(saved, quantizing(nothing)).quantization() == q);

  DecoderQuantization other = q;
  other.options.clip_search = false;
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(saved, quantizing(other)),
                       doctest::Contains("LoadOptions::quantization asks for attention int4 g64 asymmetric, fp16 "
                                         "scales; MLP int8 per channel, fp16 scales; LM head int4 g128, fp16 scales, "
                                         "but the checkpoint"),
                       UsageError);
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(saved, quantizing(other)),
                       doctest::Contains("is already quantized as attention int4 g64 asymmetric, fp16 scales; MLP int8 "
                                         "per channel, fp16 scales; LM head int4 g128, fp16 scales, with the clipping "
                                         "search (its config.json's quantization_config)"),
                       UsageError);
  other = {};
  other.mlp = int4(128);
  CHECK_THROWS_AS((void)DecoderCheckpoint::open(saved, quantizing(other)), UsageError);
}

namespace {

/// Writes `bytes` over the tensor `name` of `dir`/model.safetensors from its byte `at`, in place (same size).
void overwrite(const fs::path& dir, const std::string& name, std::size_t at, const std::vector<std::uint8_t>& bytes) {
  const std::size_t offset = SafetensorsFile::open(dir / "model.safetensors").tensor(name).offset + at;
  std::fstream file(dir / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(static_cast<std::streamoff>(offset));
  file.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(file.good());
}

}  // namespace

TEST_CASE("saved bytes that break their format are refused by open, on the host, naming the tensor and the element") {
  const lgtest::TempDir dir("nn-qsave");
  const fs::path saved = saved_quantized(dir, small_qwen2(), mixed());
  REQUIRE_NOTHROW((void)DecoderCheckpoint::open(saved));
  struct Case {
    std::string tensor;  // the part changed
    std::size_t at;      // its byte
    std::vector<std::uint8_t> bytes;
    std::string fragment;
  };
  const std::string up = "model.layers.1.mlp.up_proj.weight";          // int8, fp16 scales
  const std::string qkv = "model.layers.0.self_attn.qkv_proj.weight";  // int4 g64 asymmetric
  const std::vector<Case> cases = {
      {up + ".qscales", 2 * 5, {0x00, 0x7e}, "scale 5 is nan, not a finite number >= 0"},
      {up + ".qscales", 2 * 7, {0x00, 0x7c}, "scale 7 is inf, not a finite number >= 0"},
      {up + ".qscales", 2 * 3, {0x00, 0xbc}, "scale 3 is -1.000000, not a finite number >= 0"},
      {qkv + ".qzeros", 9, {16}, "zero point 9 is 16, above 15"},
      {up + ".qvalues", 40, {0}, "int8 value at byte 40 is 0, offset binary for -128"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    CAPTURE(c.fragment);
    const fs::path broken = dir / ("broken" + std::to_string(i));
    fs::copy(saved, broken);
    overwrite(broken, c.tensor, c.at, c.bytes);
    const std::string message = open_error(broken);
    CHECK(message.find("file " + (broken / "model.safetensors").string() + ": tensor " + c.tensor +
                       ": holds bytes its format") != std::string::npos);
    CHECK(message.find(c.fragment) != std::string::npos);
  }
  // Changed in place after open (the mapping shows the new bytes): reading the matrix refuses them.
  const DecoderCheckpoint back = DecoderCheckpoint::open(saved);
  REQUIRE(back.quantized_layouts()[8].name() == up);  // 5 a layer: qkv o gate up down
  overwrite(saved, up + ".qscales", 2 * 7, {0x00, 0x7c});
  CHECK_THROWS_WITH_AS((void)back.quantized_weight(8), doctest::Contains("scale 7 is inf"), CheckpointError);
  CHECK_NOTHROW((void)back.quantized_weight(7));
}

namespace {

/// Uploads the seeded checkpoint of `c` in `dtype` quantized on load and saved quantized, and checks that both give the
/// same quantized bytes and logits.
template <class T>
void check_saved_upload(DType dtype) {
  Stream& s = lgtest::stream();
  const DecoderConfig c = small_qwen2();
  const DecoderQuantization q = mixed(scale_type_of<T>);
  const lgtest::TempDir dir("nn-qsave-gpu");
  const fs::path saved = saved_quantized(dir, c, q, dtype);
  const DecoderCheckpoint source = DecoderCheckpoint::open(dir / "source", quantizing(q));
  LoadOptions options;
  options.progress_from_bytes = 0;  // the bar (on stderr) counts the quantized bytes
  const DecoderCheckpoint back = DecoderCheckpoint::open(saved, options);
  const LiveHandles before = live_handles();
  BasicDecoderWeights<T> from_saved = back.upload<T>(s);
  const LiveHandles after = live_handles();
  CHECK(after.device_bytes - before.device_bytes == back.device_bytes());
  BasicDecoderWeights<T> from_source = source.upload<T>(s);
  const std::vector<QuantizedWeight> a = lgtest::downloaded(s, from_saved);
  const std::vector<QuantizedWeight> b = lgtest::downloaded(s, from_source);
  REQUIRE(a.size() == back.quantized_layouts().size());
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(back.quantized_layouts()[i].name());
    CHECK(lgtest::same_bytes(a[i], b[i]));
  }
  BasicDecoder<T> loaded(s, lgtest::nn_kernels(), back.config(), std::move(from_saved));
  BasicDecoder<T> quantized_on_load(s, lgtest::nn_kernels(), source.config(), std::move(from_source));
  lgtest::check_same_decoding(loaded, quantized_on_load, 5);
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE(
      "a saved quantized checkpoint uploads the weights and computes the logits of quantizing on load, bit for bit") {
    SUBCASE("fp16 from an F16 checkpoint") { check_saved_upload<half>(DType::f16); }
    SUBCASE("fp16 from an F32 checkpoint") { check_saved_upload<half>(DType::f32); }
    SUBCASE("bf16 from a BF16 checkpoint") { check_saved_upload<bfloat16>(DType::bf16); }
  }

  TEST_CASE("a checkpoint saved with bf16 scales refuses an fp16 upload before allocating, saying what reads it") {
    const lgtest::TempDir dir("nn-qsave-gpu");
    const fs::path saved = saved_quantized(dir, lgtest::small_decoder(), mixed(ScaleType::bf16), DType::bf16);
    const DecoderCheckpoint back = DecoderCheckpoint::open(saved);
    const LiveHandles before = live_handles();
    CHECK_THROWS_WITH_AS((void)back.upload<half>(lgtest::stream()),
                         doctest::Contains("was saved so: load it into a decoder over bf16 (upload<bfloat16>)"),
                         UsageError);
    const LiveHandles after = live_handles();
    CHECK(after.device_allocations == before.device_allocations);
    CHECK(after.pinned_allocations == before.pinned_allocations);
  }

  TEST_CASE("bytes that break their format after open fail the upload naming the matrix, and nothing stays allocated") {
    const lgtest::TempDir dir("nn-qsave-gpu");
    const fs::path saved = saved_quantized(dir, small_qwen2(), mixed());
    const DecoderCheckpoint back = DecoderCheckpoint::open(saved);                       // checks every byte
    overwrite(saved, "model.layers.1.mlp.up_proj.weight.qscales", 2 * 7, {0x00, 0x7c});  // fp16 +inf, in the mapping
    const LiveHandles before = live_handles();
    CHECK_THROWS_WITH_AS((void)back.upload<half>(lgtest::stream()),
                         doctest::Contains("tensor model.layers.1.mlp.up_proj.weight.qscales: holds bytes its format "
                                           "(int8 per channel, fp16 scales) does not allow: scale 7 is inf"),
                         CheckpointError);
    const LiveHandles after = live_handles();
    CHECK(after.device_allocations == before.device_allocations);
    CHECK(after.device_bytes == before.device_bytes);
    CHECK(after.pinned_allocations == before.pinned_allocations);
    CHECK(after.events == before.events);
  }
}
