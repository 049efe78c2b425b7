// FP8 checkpoints read as they are (src/nn/packed_fp8.hpp, methods/fp8.cpp, methods/compressed_tensors.cpp): a packer
// written here from the formats' public description (e4m3: 1 sign bit, 4 exponent bits of bias 7, 3 mantissa bits, 0x7F
// and 0xFF NaN, no infinity; transformers' "fp8" stores w / scale rounded to e4m3 with scale = amax / 448 per block of
// 128 x 128 as `weight_scale_inv`, compressed-tensors per output channel as `weight_scale`) writes small checkpoints
// from seeded weights; DecoderCheckpoint places them on the host, and every weight must be the packer's e4m3 value
// times its scale rounded once (times 2^8) to the scale type, q and k rows reordered as the loader reorders dense ones.
// The e4m3 decoding of all 256 bytes is checked against a float64 formula, every refusal of the config and of the
// tensors by name. The gpu suite checks that a decoder loaded from an FP8 checkpoint computes the logits of the same
// weights stored dense in fp16 and in bf16, within rounding.
#include <doctest/doctest.h>

#include <lazygraph/driver/bfloat16.hpp>
#include <lazygraph/driver/half.hpp>
#include <lazygraph/nn/checkpoint.hpp>
#include <lazygraph/nn/decoder_quantization.hpp>
#include <lazygraph/nn/decoder_tensors.hpp>
#include <lazygraph/nn/quantized.hpp>
#include <lazygraph/nn/quantized_save.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/files.hpp"
#include "common/gpu.hpp"
#include "common/nn.hpp"
#include "common/quantized_formats.hpp"
#include "common/quantized_weights.hpp"
#include "common/rewrite_safetensors.hpp"
#include "common/small_decoder.hpp"
#include "common/temp_dir.hpp"

using namespace lazygraph;
using namespace lazygraph::nn;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using lgtest::e4m3_value;
using lgtest::e4m3_values;
using lgtest::to_e4m3;

enum class Fp8Method { fp8, channel, block };  // transformers' fp8; compressed-tensors per channel or in blocks

struct Fp8Options {
  Fp8Method method = Fp8Method::fp8;
  bool head = false;  ///< the LM head in FP8 too
  DType scale_dtype = DType::f32;
  bool power_of_two = false;  ///< scales rounded up to powers of two (the dequantized weights are then fp16 values)
};

/// One FP8 matrix as the packer wrote it: e4m3 bytes [outputs][inputs] and float scales [rows][cols] of the scale
/// tensor ([ceil(N / 128)][ceil(K / 128)] for blocks, [N][1] per channel), as stored (rounded to its dtype).
struct Fp8 {
  int outputs = 0;
  int inputs = 0;
  bool per_channel = false;
  std::vector<std::uint8_t> bytes;
  std::vector<float> scales;

  [[nodiscard]] float scale(int n, int k) const {
    if (per_channel) return scales[static_cast<std::size_t>(n)];
    const int blocks = (inputs + 127) / 128;
    return scales[static_cast<std::size_t>(n / 128) * static_cast<std::size_t>(blocks) +
                  static_cast<std::size_t>(k / 128)];
  }
  [[nodiscard]] std::uint8_t byte(int n, int k) const {
    return bytes[static_cast<std::size_t>(n) * static_cast<std::size_t>(inputs) + static_cast<std::size_t>(k)];
  }
};

float rounded_to_dtype(float x, DType dtype) {
  if (dtype == DType::bf16) return bfloat16::from_float(x).to_float();
  if (dtype == DType::f16) return half::from_float(x).to_float();
  return x;
}

std::vector<std::byte> fp8_scale_bytes(const std::vector<float>& scales, DType dtype) {
  std::vector<std::byte> out(scales.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < scales.size(); ++i) {
    if (dtype == DType::f32) {
      std::memcpy(out.data() + 4 * i, &scales[i], 4);
    } else {
      const std::uint16_t bits =
          dtype == DType::bf16 ? bfloat16::from_float(scales[i]).bits : half::from_float(scales[i]).bits;
      std::memcpy(out.data() + 2 * i, &bits, 2);
    }
  }
  return out;
}

/// Quantizes `w` [outputs][inputs] as the method says: a scale of amax / 448 per block or row, each weight w / scale
/// rounded to e4m3.
Fp8 quantize_fp8(const std::vector<float>& w, int outputs, int inputs, const Fp8Options& o) {
  Fp8 m;
  m.outputs = outputs;
  m.inputs = inputs;
  m.per_channel = o.method == Fp8Method::channel;
  const int block_rows = m.per_channel ? 1 : 128;
  const int block_cols = m.per_channel ? inputs : 128;
  const int rows = (outputs + block_rows - 1) / block_rows;
  const int cols = (inputs + block_cols - 1) / block_cols;
  m.scales.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
  for (int br = 0; br < rows; ++br) {
    for (int bc = 0; bc < cols; ++bc) {
      double amax = 0;
      for (int n = br * block_rows; n < std::min(outputs, (br + 1) * block_rows); ++n) {
        for (int k = bc * block_cols; k < std::min(inputs, (bc + 1) * block_cols); ++k) {
          amax = std::max(amax, std::abs(static_cast<double>(w[static_cast<std::size_t>(n) * inputs + k])));
        }
      }
      double s = std::max(amax, 1e-6) / 448.0;
      if (o.power_of_two) s = std::ldexp(1.0, static_cast<int>(std::ceil(std::log2(s))));
      m.scales[static_cast<std::size_t>(br) * cols + bc] = rounded_to_dtype(static_cast<float>(s), o.scale_dtype);
    }
  }
  m.bytes.resize(w.size());
  for (int n = 0; n < outputs; ++n) {
    for (int k = 0; k < inputs; ++k) {
      const std::size_t i = static_cast<std::size_t>(n) * inputs + k;
      m.bytes[i] = to_e4m3(static_cast<double>(w[i]) / static_cast<double>(m.scale(n, k)));
    }
  }
  return m;
}

std::string fp8_scale_suffix(Fp8Method method) {
  return method == Fp8Method::fp8 ? ".weight_scale_inv" : ".weight_scale";
}

json fp8_quantization_config(Fp8Method method) {
  if (method == Fp8Method::fp8) {
    return {
        {"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}};
  }
  json weights = {{"num_bits", 8},         {"type", "float"},      {"symmetric", true},  {"dynamic", false},
                  {"group_size", nullptr}, {"observer", "minmax"}, {"actorder", nullptr}};
  weights["strategy"] = method == Fp8Method::channel ? "channel" : "block";
  if (method == Fp8Method::block) weights["block_structure"] = {128, 128};
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"quantization_status", "compressed"},
          {"global_compression_ratio", 1.5},
          {"version", "0.9.0"},
          {"kv_cache_scheme", nullptr},
          {"sparsity_config", json::object()},
          {"ignore", {"lm_head"}},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights", weights},
              {"input_activations",
               {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}, {"symmetric", true}}},
              {"output_activations", nullptr}}}}}};
}

/// A seeded fp16 checkpoint of `c` whose projections (and LM head, if asked) are FP8 as `o` says, with its
/// quantization_config and torch_dtype `torch_dtype`; the packer's matrices by module name.
std::map<std::string, Fp8> write_fp8(const fs::path& dir, const DecoderConfig& c, const Fp8Options& o,
                                     const std::string& torch_dtype = "bfloat16") {
  save_seeded_checkpoint(dir, c, DType::f16);
  std::map<std::string, Fp8> matrices;
  lgtest::rewrite(dir, [&](std::vector<lgtest::OwnedTensor>& tensors) {
    std::vector<lgtest::OwnedTensor> out;
    for (lgtest::OwnedTensor& t : tensors) {
      const bool packs = t.name.ends_with("_proj.weight") || (o.head && t.name == "lm_head.weight");
      if (!packs) {
        out.push_back(std::move(t));
        continue;
      }
      const auto outputs = static_cast<int>(t.shape[0]);
      const auto inputs = static_cast<int>(t.shape[1]);
      std::vector<float> w(static_cast<std::size_t>(outputs) * inputs);
      for (std::size_t i = 0; i < w.size(); ++i) {
        half h;
        std::memcpy(&h.bits, t.bytes.data() + 2 * i, 2);
        w[i] = h.to_float();
      }
      const std::string module = t.name.substr(0, t.name.size() - std::string(".weight").size());
      Fp8 m = quantize_fp8(w, outputs, inputs, o);
      const std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(m.bytes.data()),
                                         reinterpret_cast<const std::byte*>(m.bytes.data()) + m.bytes.size());
      out.push_back({t.name, DType::f8_e4m3, t.shape, bytes});
      const std::int64_t scale_rows = m.per_channel ? outputs : (outputs + 127) / 128;
      const std::int64_t scale_cols = m.per_channel ? 1 : (inputs + 127) / 128;
      out.push_back({module + fp8_scale_suffix(o.method),
                     o.scale_dtype,
                     {scale_rows, scale_cols},
                     fp8_scale_bytes(m.scales, o.scale_dtype)});
      matrices.emplace(module, std::move(m));
    }
    tensors = std::move(out);
  });
  json config = json::parse(lgtest::read_file(dir / "config.json"));
  config["quantization_config"] = fp8_quantization_config(o.method);
  if (o.head && o.method != Fp8Method::fp8) config["quantization_config"]["ignore"] = json::array();
  config["torch_dtype"] = torch_dtype;
  lgtest::write_file(dir / "config.json", config.dump(2));
  return matrices;
}

void edit_fp8_quantization(const fs::path& dir, const std::function<void(json&)>& edit) {
  json config = json::parse(lgtest::read_file(dir / "config.json"));
  edit(config["quantization_config"]);
  lgtest::write_file(dir / "config.json", config.dump(2));
}

/// The modules a quantized matrix stacks, and whether their rows are reordered (q and k): q, k and v, a layer's experts
/// of one kind (named with `*` for the index, each expert the packer wrote), or a module alone.
std::vector<std::pair<std::string, bool>> fp8_parts_of(const std::string& name,
                                                       const std::map<std::string, Fp8>& matrices) {
  const std::string module = name.substr(0, name.size() - std::string(".weight").size());
  if (const std::size_t star = module.find('*'); star != std::string::npos) {
    std::vector<std::pair<std::string, bool>> experts;
    for (int e = 0;; ++e) {
      std::string expert = module;
      expert.replace(star, 1, std::to_string(e));
      if (!matrices.contains(expert)) break;
      experts.emplace_back(expert, false);
    }
    return experts;
  }
  const std::size_t at = module.find("qkv_proj");
  if (at == std::string::npos) return {{module, false}};
  const auto with = [&](const char* proj) { return module.substr(0, at) + proj; };
  return {{with("q_proj"), true}, {with("k_proj"), true}, {with("v_proj"), false}};
}

/// Checks every quantized matrix of `checkpoint` against the packer's: each element the e4m3 value of the packer's
/// byte times its scale rounded once, times 2^8, to `type` (and that within half a unit of the type's last place of
/// the packer's product), row r of a q or k part holding the tensor's output rotate_half_row(r).
void check_placed(const DecoderCheckpoint& checkpoint, const std::map<std::string, Fp8>& matrices, ScaleType type) {
  const int head_dim = checkpoint.config().head_dim();
  const double unit = type == ScaleType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);  // relative half ulp
  std::size_t checked = 0;
  for (std::size_t i = 0; i < checkpoint.quantized_layouts().size(); ++i) {
    const QuantizedWeight w = checkpoint.quantized_weight(i);
    CAPTURE(w.layout().name());
    CHECK(w.layout().format().group == 128);
    CHECK(w.layout().format().scale_type == type);
    int row = 0;
    std::size_t differ = 0;
    for (const auto& [module, rope] : fp8_parts_of(w.layout().name(), matrices)) {
      const Fp8& m = matrices.at(module);
      REQUIRE(w.layout().cols() == m.inputs);
      for (int r = 0; r < m.outputs; ++r, ++row) {
        const int n = rope ? rotate_half_row(r, head_dim) : r;
        for (int k = 0; k < m.inputs; ++k) {
          const float s = m.scale(n, k) * 256.0F;
          const double stored =
              type == ScaleType::f16 ? half::from_float(s).to_float() : bfloat16::from_float(s).to_float();
          const double value = e4m3_values()[m.byte(n, k)];
          const double want = value * stored / 256.0;
          const double exact = value * static_cast<double>(m.scale(n, k));
          const bool same = static_cast<double>(w.dequantized(row, k)) == want &&
                            std::abs(want - exact) <= unit * std::abs(exact) &&
                            static_cast<double>(w.scale(row, k)) == stored;
          differ += same ? 0 : 1;
          ++checked;
        }
      }
    }
    CHECK(row == w.layout().rows());
    CHECK(differ == 0);
  }
  CHECK(checked > 0);
}

std::string fp8_open_error(const fs::path& dir) {
  try {
    (void)DecoderCheckpoint::open(dir);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "(opened)";
}

DecoderConfig fp8_gqa_decoder() { return lgtest::small_decoder(2); }  // k and v of 64 rows: a block of 128 rows in part

/// Qwen3-MoE's block (q/k norms) over the small decoder: 4 experts of width 128 (whole groups of 128 for the down
/// projection's inputs), top 2 renormalized.
DecoderConfig fp8_moe_decoder() {
  DecoderConfig c = lgtest::small_decoder(2, 1, 41);
  c.moe = {4, 2, 128, true};
  c.qk_norm = true;
  return c;
}

}  // namespace

TEST_CASE("every e4m3 byte is read as its value, against a float64 formula, and the NaN bytes are refused") {
  // A 16 x 128 fp8 matrix holding every byte: element (r, c) is byte (128 r + c) % 256, its scale stored as 2^8
  // (a checkpoint scale of 1): dequantized() must be the byte's value exactly.
  const QuantizedFormat format{WeightFormat::fp8_block, 128, false, ScaleType::f16};
  const QuantizedLayout layout("w", format, 16, 128);
  CHECK(layout.row_value_bytes() == 128);
  std::vector<std::uint8_t> values(layout.value_bytes());
  const auto byte_of = [](int r, int c) { return static_cast<std::uint8_t>((128 * r + c) % 256); };
  const auto finite = [](std::uint8_t b) { return (b & 0x7FU) != 0x7FU; };
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 128; ++c) values[layout.value_position(r, c).byte] = finite(byte_of(r, c)) ? byte_of(r, c) : 0;
  }
  const std::vector<std::uint16_t> scales(layout.scale_count(), half::from_float(256.0F).bits);
  const QuantizedWeight w(layout, values, scales, {});
  std::size_t seen = 0;
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 128; ++c) {
      if (!finite(byte_of(r, c))) continue;
      CAPTURE(static_cast<int>(byte_of(r, c)));
      CHECK(static_cast<double>(w.dequantized(r, c)) == e4m3_value(byte_of(r, c)));
      ++seen;
    }
  }
  CHECK(seen == 16 * 128 - 16);  // each of the 254 finite bytes 8 times, less the NaNs' places
  CHECK(e4m3_value(0x7E) == 448.0);
  CHECK(e4m3_value(0x01) == std::ldexp(1.0, -9));
  // the test's packer rounds to nearest, ties to even, and saturates
  for (unsigned b = 0; b <= 0x7E; ++b) {
    CHECK(to_e4m3(e4m3_value(b)) == b);
    CHECK(to_e4m3(-e4m3_value(b)) == (b | 0x80U));
  }
  CHECK(to_e4m3(1.0625) == 0x38);  // between 1 (0x38) and 1.125 (0x39)
  CHECK(to_e4m3(1.1875) == 0x3A);  // between 1.125 (0x39) and 1.25 (0x3A)
  CHECK(to_e4m3(1000.0) == 0x7E);
  for (const std::uint8_t nan : {std::uint8_t{0x7F}, std::uint8_t{0xFF}}) {
    std::vector<std::uint8_t> bad = values;
    bad[40] = nan;
    CHECK_THROWS_WITH_AS(
        QuantizedWeight(layout, bad, scales, {}),
        ("tensor w: fp8 value at byte 40 is " + std::to_string(nan) + ", an e4m3 NaN (0x7F or 0xFF)").c_str(),
        UsageError);
  }
}

TEST_CASE("the fp8 layout needs whole groups of 128 inputs") {
  const QuantizedFormat format{WeightFormat::fp8_block, 128, false, ScaleType::bf16};
  CHECK_THROWS_WITH_AS((void)QuantizedLayout("blk.w", format, 16, 96),
                       doctest::Contains("tensor blk.w: fp8 group size 128 does not divide the input dimension (96)"),
                       UsageError);
  CHECK_THROWS_WITH_AS((void)QuantizedLayout("blk.w", {WeightFormat::fp8_block, 64, false, ScaleType::bf16}, 16, 128),
                       "tensor blk.w: fp8 group size 64 is not 128", UsageError);
  CHECK(format_name(format) == "fp8 g128, bf16 scales");
}

TEST_CASE("a dense checkpoint quantized into fp8 on load has the bytes of its tensors quantized on the host") {
  const lgtest::TempDir dir("nn-fp8-dense");
  const DecoderConfig c = fp8_gqa_decoder();
  save_seeded_checkpoint(dir.path(), c, DType::f16);
  LoadOptions options;
  options.quantization.mlp = QuantizedFormat{WeightFormat::fp8_block, 128, false, ScaleType::f16};
  const DecoderCheckpoint checkpoint = DecoderCheckpoint::open(dir.path(), options);
  const std::vector<QuantizedLayout>& layouts = checkpoint.quantized_layouts();
  REQUIRE(layouts.size() == 3 * static_cast<std::size_t>(c.layers));
  // the layer-1 down projection, read back from the file as floats and quantized here
  const std::size_t down = 3 * 1 + 2;
  REQUIRE(layouts[down].name() == "model.layers.1.mlp.down_proj.weight");
  const QuantizedWeight got = checkpoint.quantized_weight(down);
  const Checkpoint file = Checkpoint::open(dir.path());
  const TensorInfo& info =
      file.require(layouts[down].name(), std::array<DType, 1>{DType::f16}, std::array<std::int64_t, 2>{c.d, c.ffn});
  std::vector<float> w;
  const std::span<const std::byte> bytes = file.data(info);
  for (std::size_t i = 0; i < bytes.size(); i += 2) {
    std::uint16_t bits = 0;
    std::memcpy(&bits, bytes.data() + i, 2);
    w.push_back(half{bits}.to_float());
  }
  const QuantizedWeight want = quantize(layouts[down].format(), layouts[down].name(), c.d, c.ffn, w);
  CHECK(std::ranges::equal(got.values(), want.values()));
  CHECK(std::ranges::equal(got.scale_bits(), want.scale_bits()));
}

TEST_CASE("an FP8 checkpoint's matrices are placed byte for byte, each block's scale in each of its groups") {
  for (const auto& [scale_dtype, torch_dtype] :
       {std::pair{DType::f32, "bfloat16"}, std::pair{DType::bf16, "bfloat16"}, std::pair{DType::f32, "float16"}}) {
    {
      CAPTURE(dtype_name(scale_dtype));
      CAPTURE(torch_dtype);
      const lgtest::TempDir dir("nn-fp8");
      const auto matrices = write_fp8(dir.path(), fp8_gqa_decoder(), {Fp8Method::fp8, false, scale_dtype}, torch_dtype);
      const DecoderCheckpoint checkpoint = DecoderCheckpoint::open(dir.path());
      REQUIRE(checkpoint.llama_config().packed.has_value());
      CHECK(checkpoint.llama_config().packed->method == PackedMethod::fp8);
      const ScaleType type = std::string(torch_dtype) == "float16" ? ScaleType::f16 : ScaleType::bf16;
      CHECK(checkpoint.quantization().attention.has_value());
      CHECK(checkpoint.quantization().mlp.has_value());
      CHECK_FALSE(checkpoint.quantization().lm_head.has_value());
      check_placed(checkpoint, matrices, type);
      // what upload<T> checks before it allocates: the scales are the model's element type
      CHECK_NOTHROW(check_quantization(checkpoint.config(), checkpoint.quantization(), type));
      CHECK_THROWS_AS(check_quantization(checkpoint.config(), checkpoint.quantization(),
                                         type == ScaleType::f16 ? ScaleType::bf16 : ScaleType::f16),
                      UsageError);
    }
  }
}

TEST_CASE("an FP8 mixture of experts' experts are placed byte for byte as one stack per kind with the router dense") {
  for (const Fp8Method method : {Fp8Method::fp8, Fp8Method::channel}) {
    CAPTURE(method == Fp8Method::fp8);
    const lgtest::TempDir dir("nn-fp8-moe");
    const DecoderConfig c = fp8_moe_decoder();
    const auto matrices = write_fp8(dir.path(), c, {method, false, DType::bf16});
    REQUIRE(matrices.contains("model.layers.1.mlp.experts.3.down_proj"));
    REQUIRE_FALSE(matrices.contains("model.layers.1.mlp.gate"));  // the packer leaves the router dense
    const DecoderCheckpoint checkpoint = DecoderCheckpoint::open(dir.path());
    CHECK(checkpoint.config().moe == c.moe);
    REQUIRE(checkpoint.quantization().mlp.has_value());
    CHECK(checkpoint.quantization().mlp->kind == WeightFormat::fp8_block);
    std::vector<std::string> stacks;
    for (const QuantizedLayout& l : checkpoint.quantized_layouts()) {
      if (l.name().find(".experts.*.") == std::string::npos) continue;
      stacks.push_back(l.name());
      CHECK(l.rows() == c.moe.experts * (l.name().find("down_proj") != std::string::npos ? c.d : c.moe.expert_width));
    }
    CHECK(stacks == std::vector<std::string>{
                        "model.layers.0.mlp.experts.*.gate_proj.weight", "model.layers.0.mlp.experts.*.up_proj.weight",
                        "model.layers.0.mlp.experts.*.down_proj.weight",
                        "model.layers.1.mlp.experts.*.gate_proj.weight", "model.layers.1.mlp.experts.*.up_proj.weight",
                        "model.layers.1.mlp.experts.*.down_proj.weight"});
    check_placed(checkpoint, matrices, ScaleType::bf16);  // every expert of every stack, each in its own rows
    CHECK_NOTHROW(check_quantization(checkpoint.config(), checkpoint.quantization(), ScaleType::bf16));
  }
}

TEST_CASE("an FP8 mixture of experts saved in lazygraph's own format reads back with the same stacks' bytes") {
  const lgtest::TempDir dir("nn-fp8-moe-save");
  (void)write_fp8(dir.path() / "fp8", fp8_moe_decoder(), {Fp8Method::fp8});
  const DecoderCheckpoint fp8 = DecoderCheckpoint::open(dir.path() / "fp8");
  save_quantized_checkpoint(fp8, dir.path() / "saved");
  const DecoderCheckpoint saved = DecoderCheckpoint::open(dir.path() / "saved");
  CHECK_FALSE(saved.llama_config().packed.has_value());
  CHECK(saved.quantization() == fp8.quantization());
  REQUIRE(saved.quantized_layouts().size() == fp8.quantized_layouts().size());
  std::size_t stacks = 0;
  for (std::size_t i = 0; i < saved.quantized_layouts().size(); ++i) {
    CAPTURE(saved.quantized_layouts()[i].name());
    CHECK(saved.quantized_layouts()[i].name() == fp8.quantized_layouts()[i].name());
    CHECK(lgtest::same_bytes(saved.quantized_weight(i), fp8.quantized_weight(i)));
    stacks += saved.quantized_layouts()[i].name().find(".experts.*.") != std::string::npos ? 1 : 0;
  }
  CHECK(stacks == 6);
}

TEST_CASE(
    "an FP8 mixture of experts' tensors are checked by open and each refusal names the expert's tensor or the router") {
  const std::string up1 = "model.layers.0.mlp.experts.1.up_proj";
  const std::string down2 = "model.layers.1.mlp.experts.2.down_proj";
  const std::string router = "model.layers.1.mlp.gate.weight";
  const auto find = [](std::vector<lgtest::OwnedTensor>& ts, const std::string& name) -> lgtest::OwnedTensor& {
    const auto at = std::find_if(ts.begin(), ts.end(), [&](const lgtest::OwnedTensor& t) { return t.name == name; });
    REQUIRE(at != ts.end());
    return *at;
  };
  const auto set_scale = [&](std::vector<lgtest::OwnedTensor>& ts, float value) {
    std::memcpy(find(ts, up1 + ".weight_scale_inv").bytes.data(), &value, 4);  // the expert's one block
  };
  struct Case {
    std::function<void(std::vector<lgtest::OwnedTensor>&)> edit;
    std::string tensor;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[&](auto& ts) { set_scale(ts, std::nanf("")); }, up1 + ".weight_scale_inv",
       "scale 0 (nan) is not a finite number > 0"},
      {[&](auto& ts) { set_scale(ts, -INFINITY); }, up1 + ".weight_scale_inv",
       "scale 0 (-inf) is not a finite number > 0"},
      {[&](auto& ts) { set_scale(ts, -0.5F); }, up1 + ".weight_scale_inv",
       "scale 0 (-0.500000) is not a finite number > 0"},
      {[&](auto& ts) {
         lgtest::OwnedTensor& t = find(ts, up1 + ".weight_scale_inv");
         t.shape = {1, 2};
         t.bytes.resize(8);
       },
       up1 + ".weight_scale_inv", "expected F32 or BF16 or F16 [1, 1], found F32 [1, 2]"},
      {[&](auto& ts) {
         ts.erase(
             std::find_if(ts.begin(), ts.end(), [&](const auto& t) { return t.name == down2 + ".weight_scale_inv"; }));
       },
       down2 + ".weight", "is FP8 (F8_E4M3) but the checkpoint has no " + down2 + ".weight_scale_inv, its scale"},
      {[&](auto& ts) { find(ts, down2 + ".weight").bytes[128 * 3 + 5] = std::byte{0x7F}; }, down2 + ".weight",
       "value at row 3, column 5 is byte 127, an e4m3 NaN"},
      {[&](auto& ts) { find(ts, down2 + ".weight").dtype = DType::u8; }, down2 + ".weight",
       "is not packed (no " + down2 + ".weight of dtype F8_E4M3)"},
      {[&](auto& ts) {
         lgtest::OwnedTensor& t = find(ts, router);
         t.dtype = DType::f8_e4m3;
         t.bytes.resize(t.bytes.size() / 2);
       },
       router, "is a mixture of experts' router stored FP8; lazygraph reads a router dense"},
  };
  const lgtest::TempDir base("nn-fp8-moe-base");
  (void)write_fp8(base.path(), fp8_moe_decoder(), {Fp8Method::fp8});
  for (const Case& c : cases) {
    CAPTURE(c.message);
    const lgtest::TempDir dir("nn-fp8-moe-tensors");
    fs::copy(base.path(), dir.path(), fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    lgtest::rewrite(dir.path(), c.edit);
    const std::string error = fp8_open_error(dir.path());
    CAPTURE(error);
    CHECK(error.find(c.tensor) != std::string::npos);
    CHECK(error.find(c.message) != std::string::npos);
  }

  // AWQ experts (each expert's `.qweight`, attention dense): refused naming the first, before any tensor is read.
  const lgtest::TempDir awq("nn-awq-moe");
  save_seeded_checkpoint(awq.path(), fp8_moe_decoder(), DType::f16);
  lgtest::rewrite(awq.path(), [](std::vector<lgtest::OwnedTensor>& ts) {
    for (lgtest::OwnedTensor& t : ts) {
      if (t.name.find(".experts.") == std::string::npos) continue;
      const std::int64_t n = t.shape[0];
      const std::int64_t k = t.shape[1];
      t.name = t.name.substr(0, t.name.size() - std::string("weight").size()) + "qweight";
      t.dtype = DType::i32;
      t.shape = {k, n / 8};
      t.bytes.assign(static_cast<std::size_t>(k * n / 2), std::byte{0});
    }
  });
  json config = json::parse(lgtest::read_file(awq.path() / "config.json"));
  config["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4},         {"group_size", 128},
                                   {"zero_point", true},    {"version", "gemm"}, {"modules_to_not_convert", nullptr}};
  lgtest::write_file(awq.path() / "config.json", config.dump(2));
  const std::string error = fp8_open_error(awq.path());
  CAPTURE(error);
  CHECK(error.find("model.layers.0.mlp.experts.0.gate_proj.qweight") != std::string::npos);
  CHECK(error.find("is a mixture of experts' expert packed by AWQ: lazygraph reads quantized experts from "
                   "checkpoints of FP8, compressed-tensors FP8 only") != std::string::npos);
}

TEST_CASE("a compressed-tensors FP8 checkpoint is read per channel and in blocks, its LM head too when packed") {
  for (const auto& [method, head] : {std::pair{Fp8Method::channel, false}, std::pair{Fp8Method::channel, true},
                                     std::pair{Fp8Method::block, false}}) {
    {
      CAPTURE(method == Fp8Method::channel);
      CAPTURE(head);
      const lgtest::TempDir dir("nn-fp8-ct");
      const auto matrices = write_fp8(dir.path(), lgtest::small_decoder(), {method, head, DType::bf16});
      const DecoderCheckpoint checkpoint = DecoderCheckpoint::open(dir.path());
      CHECK(checkpoint.llama_config().packed->method == PackedMethod::compressed_tensors);
      CHECK(checkpoint.llama_config().packed->per_channel == (method == Fp8Method::channel));
      CHECK(checkpoint.quantization().lm_head.has_value() == head);
      check_placed(checkpoint, matrices, ScaleType::bf16);
      // the config written back reads back equal
      const LlamaConfig again = LlamaConfig::parse(checkpoint.llama_config().to_json(), "again.json");
      CHECK(again.packed == checkpoint.llama_config().packed);
    }
  }
}

TEST_CASE("an FP8 checkpoint saved in lazygraph's own format reads back with the same fp8 bytes") {
  const lgtest::TempDir dir("nn-fp8-save");
  (void)write_fp8(dir.path() / "fp8", fp8_gqa_decoder(), {Fp8Method::fp8, true});
  const DecoderCheckpoint fp8 = DecoderCheckpoint::open(dir.path() / "fp8");
  save_quantized_checkpoint(fp8, dir.path() / "saved");
  const DecoderCheckpoint saved = DecoderCheckpoint::open(dir.path() / "saved");
  CHECK_FALSE(saved.llama_config().packed.has_value());
  CHECK(saved.quantization() == fp8.quantization());
  REQUIRE(saved.quantized_layouts().size() == fp8.quantized_layouts().size());
  for (std::size_t i = 0; i < saved.quantized_layouts().size(); ++i) {
    CAPTURE(saved.quantized_layouts()[i].name());
    CHECK(lgtest::same_bytes(saved.quantized_weight(i), fp8.quantized_weight(i)));
  }
}

TEST_CASE("an FP8 quantization_config that lazygraph cannot read is refused naming the key and the value") {
  struct Case {
    Fp8Method method;
    std::function<void(json&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {Fp8Method::fp8, [](json& q) { q["fmt"] = "e5m2"; }, "key 'quantization_config.fmt' is \"e5m2\""},
      {Fp8Method::fp8, [](json& q) { q["activation_scheme"] = "static"; },
       "key 'quantization_config.activation_scheme' is \"static\": lazygraph reads FP8 weights only"},
      {Fp8Method::fp8,
       [](json& q) {
         q["weight_block_size"] = {64, 64};
       },
       "key 'quantization_config.weight_block_size' is [64,64]: lazygraph reads FP8 blocks of [128, 128] only"},
      {Fp8Method::fp8, [](json& q) { q.erase("weight_block_size"); },
       "key 'quantization_config.weight_block_size' is nothing"},
      {Fp8Method::fp8, [](json& q) { q["modules_to_not_convert"] = "lm_head"; },
       "key 'quantization_config.modules_to_not_convert' must be a list of module names or null"},
      {Fp8Method::fp8, [](json& q) { q["dequantize"] = true; },
       "key 'quantization_config.dequantize' is not a key lazygraph knows for FP8 checkpoints"},
      {Fp8Method::channel, [](json& q) { q["format"] = "pack-quantized"; },
       "key 'quantization_config.format' is \"pack-quantized\""},
      {Fp8Method::channel, [](json& q) { q["config_groups"]["group_0"]["weights"]["num_bits"] = 4; },
       "key 'quantization_config.config_groups.group_0.weights.num_bits' is 4"},
      {Fp8Method::channel, [](json& q) { q["config_groups"]["group_0"]["weights"]["type"] = "int"; },
       "key 'quantization_config.config_groups.group_0.weights.type' is \"int\""},
      {Fp8Method::channel, [](json& q) { q["config_groups"]["group_0"]["weights"]["symmetric"] = false; },
       "key 'quantization_config.config_groups.group_0.weights.symmetric' is false"},
      {Fp8Method::channel, [](json& q) { q["config_groups"]["group_0"]["weights"]["strategy"] = "tensor"; },
       "key 'quantization_config.config_groups.group_0.weights.strategy' is \"tensor\""},
      {Fp8Method::block,
       [](json& q) {
         q["config_groups"]["group_0"]["weights"]["block_structure"] = {128, 64};
       },
       "key 'quantization_config.config_groups.group_0.weights.block_structure' is [128,64]"},
      {Fp8Method::channel, [](json& q) { q["config_groups"]["group_0"]["input_activations"]["dynamic"] = false; },
       "key 'quantization_config.config_groups.group_0.input_activations.dynamic' is false: static input scales are "
       "not read"},
      {Fp8Method::channel,
       [](json& q) {
         q["config_groups"]["group_0"]["output_activations"] = {{"num_bits", 8}, {"type", "float"}};
       },
       "key 'quantization_config.config_groups.group_0.output_activations' is {"},
      {Fp8Method::channel, [](json& q) { q["config_groups"]["group_0"]["targets"] = {"Attention"}; },
       "key 'quantization_config.config_groups.group_0.targets' is [\"Attention\"]"},
      {Fp8Method::channel, [](json& q) { q["config_groups"]["group_1"] = q["config_groups"]["group_0"]; },
       "key 'quantization_config.config_groups' is {"},
      {Fp8Method::channel,
       [](json& q) {
         q["kv_cache_scheme"] = {{"num_bits", 8}};
       },
       "key 'quantization_config.kv_cache_scheme' is {"},
      {Fp8Method::channel, [](json& q) { q["ignore"] = {"re:.*lm_head"}; },
       "key 'quantization_config.ignore' names \"re:.*lm_head\": lazygraph reads plain module names only"},
      {Fp8Method::channel, [](json& q) { q["quantization_status"] = "frozen"; },
       "key 'quantization_config.quantization_status' is \"frozen\""},
      {Fp8Method::channel, [](json& q) { q["config_groups"]["group_0"]["weights"]["hadamard"] = true; },
       "key 'quantization_config.config_groups.group_0.weights.hadamard' is not a key lazygraph knows"},
      {Fp8Method::channel, [](json& q) { q["config_groups"]["group_0"]["format"] = "int-quantized"; },
       "key 'quantization_config.config_groups.group_0.format' is \"int-quantized\""},
      {Fp8Method::channel, [](json& q) { q["rotation"] = "hadamard"; },
       "key 'quantization_config.rotation' is not a key lazygraph knows for compressed-tensors FP8 checkpoints"},
  };
  const lgtest::TempDir dir("nn-fp8-config");
  const fs::path fp8 = dir.path() / "fp8";
  const fs::path channel = dir.path() / "channel";
  const fs::path block = dir.path() / "block";
  (void)write_fp8(fp8, lgtest::small_decoder(), {Fp8Method::fp8});
  (void)write_fp8(channel, lgtest::small_decoder(), {Fp8Method::channel});
  (void)write_fp8(block, lgtest::small_decoder(), {Fp8Method::block});
  for (const Case& c : cases) {
    CAPTURE(c.message);
    const fs::path& at = c.method == Fp8Method::fp8 ? fp8 : c.method == Fp8Method::channel ? channel : block;
    const std::string original = lgtest::read_file(at / "config.json");
    edit_fp8_quantization(at, c.edit);
    const std::string error = fp8_open_error(at);
    CAPTURE(error);
    CHECK(error.find((at / "config.json").string()) != std::string::npos);
    CHECK(error.find(c.message) != std::string::npos);
    lgtest::write_file(at / "config.json", original);
  }
  for (const fs::path& at : {fp8, channel, block}) CHECK(fp8_open_error(at) == "(opened)");
}

TEST_CASE("FP8 tensors without a scale, of the wrong dtype, shape or bytes, or with bad scales are refused by open") {
  const std::string q = "model.layers.0.self_attn.q_proj";
  const std::string down = "model.layers.1.mlp.down_proj";
  struct Case {
    std::function<void(std::vector<lgtest::OwnedTensor>&)> edit;
    std::string tensor;
    std::string message;
  };
  const auto find = [](std::vector<lgtest::OwnedTensor>& ts, const std::string& name) -> lgtest::OwnedTensor& {
    return *std::find_if(ts.begin(), ts.end(), [&](const lgtest::OwnedTensor& t) { return t.name == name; });
  };
  const auto set_scale = [&](std::vector<lgtest::OwnedTensor>& ts, float value) {
    std::memcpy(find(ts, down + ".weight_scale_inv").bytes.data() + 4, &value, 4);  // scale 1 (block 0, 1)
  };
  const std::vector<Case> cases = {
      {[&](auto& ts) {
         ts.erase(std::find_if(ts.begin(), ts.end(), [&](const auto& t) { return t.name == q + ".weight_scale_inv"; }));
       },
       q + ".weight", "is FP8 (F8_E4M3) but the checkpoint has no " + q + ".weight_scale_inv, its scale"},
      {[&](auto& ts) {
         lgtest::OwnedTensor& t = find(ts, q + ".weight_scale_inv");
         t.shape = {1, 2};
         t.bytes.resize(8);
       },
       q + ".weight_scale_inv", "expected F32 or BF16 or F16 [1, 1], found F32 [1, 2]"},
      {[&](auto& ts) {
         lgtest::OwnedTensor& t = find(ts, q + ".weight_scale_inv");
         t.dtype = DType::i32;
       },
       q + ".weight_scale_inv", "found I32"},
      {[&](auto& ts) { set_scale(ts, std::nanf("")); }, down + ".weight_scale_inv",
       "scale 1 (nan) is not a finite number > 0"},
      {[&](auto& ts) { set_scale(ts, INFINITY); }, down + ".weight_scale_inv",
       "scale 1 (inf) is not a finite number > 0"},
      {[&](auto& ts) { set_scale(ts, 0.0F); }, down + ".weight_scale_inv",
       "scale 1 (0.000000) is not a finite number > 0"},
      {[&](auto& ts) { set_scale(ts, -0.01F); }, down + ".weight_scale_inv",
       "scale 1 (-0.010000) is not a finite number > 0"},
      {[&](auto& ts) { set_scale(ts, 1e-41F); }, down + ".weight_scale_inv",
       "times 2^8 (how lazygraph stores it) is outside bf16's normal range"},
      {[&](auto& ts) { find(ts, down + ".weight").bytes[300] = std::byte{0x7F}; }, down + ".weight",
       "value at row 1, column 44 is byte 127, an e4m3 NaN"},
      {[&](auto& ts) { find(ts, down + ".weight").bytes[256 * 5 + 3] = std::byte{0xFF}; }, down + ".weight",
       "value at row 5, column 3 is byte 255, an e4m3 NaN"},
      {[&](auto& ts) {
         lgtest::OwnedTensor& t = find(ts, down + ".weight");
         t.shape = {t.shape[1], t.shape[0]};
       },
       down + ".weight", "expected F8_E4M3 [128, 256], found F8_E4M3 [256, 128]"},
  };
  const lgtest::TempDir base("nn-fp8-base");
  (void)write_fp8(base.path(), lgtest::small_decoder(), {Fp8Method::fp8});
  for (const Case& c : cases) {
    CAPTURE(c.message);
    const lgtest::TempDir dir("nn-fp8-tensors");
    fs::copy(base.path(), dir.path(), fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    lgtest::rewrite(dir.path(), c.edit);
    const std::string error = fp8_open_error(dir.path());
    CAPTURE(error);
    CHECK(error.find(c.tensor) != std::string::npos);
    CHECK(error.find(c.message) != std::string::npos);
  }
  // fp16 scales (torch_dtype float16) hold a scale times 2^8 down to 2^-14 only
  const lgtest::TempDir dir("nn-fp8-f16");
  fs::copy(base.path(), dir.path(), fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  json config = json::parse(lgtest::read_file(dir.path() / "config.json"));
  config["torch_dtype"] = "float16";
  lgtest::write_file(dir.path() / "config.json", config.dump(2));
  lgtest::rewrite(dir.path(), [&](auto& ts) { set_scale(ts, 1e-8F); });
  CHECK(fp8_open_error(dir.path()).find("outside fp16's normal range") != std::string::npos);
  // a weight whose other matrices of its class are FP8 but it is not
  const lgtest::TempDir mixed("nn-fp8-mixed");
  fs::copy(base.path(), mixed.path(), fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  lgtest::rewrite(mixed.path(), [&](auto& ts) {
    lgtest::OwnedTensor& t = find(ts, down + ".weight");
    t.dtype = DType::u8;
  });
  CHECK(fp8_open_error(mixed.path()).find("is not packed (no " + down + ".weight of dtype F8_E4M3)") !=
        std::string::npos);
}

namespace {

/// A decoder of T loaded from an FP8 checkpoint (`method`, LM head included) against one loaded from its twin, the
/// same weights stored dense in T: scales of powers of two make every dequantized weight a value of T, so both hold
/// exactly the weights the fp8 kernels multiply, and only the order of the fp32 sums differs. Six steps, then a
/// prompt of 40 tokens (on tensor cores each fp8 matrix is dequantized for the GEMMs, qdequantize): the logits within
/// `bound` of the largest (the rounding of activations to T through 2 layers, summed in other orders).
/// With a mixture of experts (`model`), its experts FP8 too: both decoders record their routes, and a step whose
/// routes differ (a router near a tie, moved by the kernels' rounding) is counted, not compared; at most 2 of the 6
/// steps may.
template <class T>
void check_fp8_decoder(Fp8Method method, double bound, const DecoderConfig& model = fp8_gqa_decoder()) {
  CAPTURE(method == Fp8Method::fp8);
  CAPTURE(model.mixture_of_experts());
  constexpr bool fp16 = std::same_as<T, half>;
  const lgtest::TempDir dir("nn-fp8-gpu");
  const fs::path packed = dir.path() / "packed";
  const fs::path twin = dir.path() / "twin";
  const auto matrices = write_fp8(packed, model, {method, true, DType::f32, true}, fp16 ? "float16" : "bfloat16");
  fs::create_directories(twin);
  fs::copy(packed / "config.json", twin / "config.json");
  fs::copy(packed / "model.safetensors", twin / "model.safetensors");
  lgtest::rewrite(twin, [&](std::vector<lgtest::OwnedTensor>& ts) {
    std::vector<lgtest::OwnedTensor> out;
    for (lgtest::OwnedTensor& t : ts) {
      if (t.name.ends_with(".weight_scale_inv") || t.name.ends_with(".weight_scale")) continue;
      if (t.dtype == DType::f8_e4m3) {
        const Fp8& m = matrices.at(t.name.substr(0, t.name.size() - std::string(".weight").size()));
        std::vector<std::byte> bytes(t.bytes.size() * 2);
        for (int n = 0; n < m.outputs; ++n) {
          for (int k = 0; k < m.inputs; ++k) {
            const double w = e4m3_value(m.byte(n, k)) * m.scale(n, k);
            const T v = T::from_float(static_cast<float>(w));
            REQUIRE(static_cast<double>(v.to_float()) == w);
            std::memcpy(bytes.data() + 2 * (static_cast<std::size_t>(n) * m.inputs + k), &v.bits, 2);
          }
        }
        t.dtype = fp16 ? DType::f16 : DType::bf16;
        t.bytes = std::move(bytes);
      }
      out.push_back(std::move(t));
    }
    ts = std::move(out);
  });
  json config = json::parse(lgtest::read_file(twin / "config.json"));
  config.erase("quantization_config");
  lgtest::write_file(twin / "config.json", config.dump(2));
  Stream& s = lgtest::stream();
  const DecoderCheckpoint a_checkpoint = DecoderCheckpoint::open(packed);
  const DecoderCheckpoint b_checkpoint = DecoderCheckpoint::open(twin);
  REQUIRE(a_checkpoint.quantization().lm_head.has_value());
  REQUIRE(a_checkpoint.quantization().mlp.has_value());  // the experts too, in a mixture of experts
  const bool moe = model.mixture_of_experts();
  DecoderConfig a_config = a_checkpoint.config();
  DecoderConfig b_config = b_checkpoint.config();
  a_config.record_routes = b_config.record_routes = moe;
  BasicDecoder<T> a(s, lgtest::nn_kernels(), a_config, a_checkpoint.upload<T>(s));
  BasicDecoder<T> b(s, lgtest::nn_kernels(), b_config, b_checkpoint.upload<T>(s));
  int other_routes = 0;
  const auto check_logits = [&](const char* where) {
    CAPTURE(where);
    if (moe && a.last_routes().experts != b.last_routes().experts) {
      ++other_routes;
      return;
    }
    const std::vector<T> la = a.logits();
    const std::vector<T> lb = b.logits();
    REQUIRE(la.size() == lb.size());
    double largest = 0;
    double worst = 0;
    for (std::size_t i = 0; i < la.size(); ++i) {
      largest = std::max(largest, std::abs(static_cast<double>(lb[i].to_float())));
      worst = std::max(worst, std::abs(static_cast<double>(la[i].to_float()) - lb[i].to_float()));
    }
    CHECK(largest > 0);
    CHECK(worst <= bound * largest);
  };
  int token = 7;
  for (int p = 0; p < 6; ++p) {
    CAPTURE(p);
    const int next = a.forward({token, p});
    (void)b.forward({token, p});
    check_logits("step");
    token = next;
  }
  CHECK(other_routes <= 2);
  std::vector<int> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back((11 * i + 3) % model.vocab);
  (void)a.prefill(prompt, 0, 0);
  (void)b.prefill(prompt, 0, 0);
  check_logits("prefill");
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE(
      "a decoder loaded from an FP8 checkpoint computes the logits of the same weights stored dense, within rounding, "
      "stepping and through a prompt, in fp16 and bf16") {
    // the bounds of tests/nn/decoder_quantization.cpp's quantized-against-dense comparisons
    for (const Fp8Method method : {Fp8Method::fp8, Fp8Method::channel}) {
      check_fp8_decoder<half>(method, 1e-2);
      check_fp8_decoder<bfloat16>(method, 4e-2);
    }
  }

  TEST_CASE(
      "a mixture-of-experts decoder loaded from an FP8 checkpoint with FP8 experts computes the logits of the same "
      "weights stored dense within rounding in fp16 and bf16") {
    // Qwen3-30B-A3B-FP8's form at a small shape: attention, experts and LM head FP8 in blocks, the router dense.
    check_fp8_decoder<half>(Fp8Method::fp8, 1e-2, fp8_moe_decoder());
    check_fp8_decoder<bfloat16>(Fp8Method::fp8, 4e-2, fp8_moe_decoder());
  }
}
