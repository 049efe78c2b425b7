// Quantized weights in safetensors files (nn/quantized_checkpoint.hpp): every format saved and read back bit for
// bit, several weights in one file, and a layout that does not match the file, or bytes that break the format,
// refused by file and tensor name.
#include <doctest/doctest.h>

#include <lazygraph/nn/quantized_checkpoint.hpp>

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/quantized_formats.hpp"
#include "common/temp_dir.hpp"

using namespace lazygraph;
using namespace lazygraph::nn;

namespace {

std::vector<float> seeded_weights(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-0.1F, 0.1F);
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

bool same(const QuantizedWeight& a, const QuantizedWeight& b) {
  return std::ranges::equal(a.values(), b.values()) && std::ranges::equal(a.scale_bits(), b.scale_bits()) &&
         std::ranges::equal(a.zeros(), b.zeros()) && a.layout().format() == b.layout().format() &&
         a.layout().rows() == b.layout().rows() && a.layout().cols() == b.layout().cols();
}

}  // namespace

TEST_CASE("quantized weights of every format round-trip through one safetensors file bit for bit") {
  const lgtest::TempDir dir("nn-qckpt");
  std::vector<QuantizedWeight> weights;
  unsigned seed = 1;
  std::vector<QuantizedFormat> formats = lgtest::every_quantized_format();
  formats.push_back(lgtest::fp8(ScaleType::f16));
  formats.push_back(lgtest::fp8(ScaleType::bf16));
  for (const QuantizedFormat& format : formats) {
    const std::string name = "model.layers." + std::to_string(weights.size()) + ".mlp.down_proj.weight";
    weights.push_back(quantize(format, name, 37, 256, seeded_weights(37 * 256, seed++)));
  }
  std::vector<QuantizedTensors> saved;
  std::vector<TensorToWrite> tensors;
  for (const QuantizedWeight& w : weights) saved.emplace_back(w);
  for (const QuantizedTensors& q : saved) tensors.insert(tensors.end(), q.tensors().begin(), q.tensors().end());
  write_safetensors(dir / "model.safetensors", tensors);
  const Checkpoint checkpoint = Checkpoint::open(dir.path());
  CHECK(checkpoint.names().size() == tensors.size());
  CHECK(tensors.size() == 4 * weights.size() - 10);  // the 10 symmetric formats have no zero points
  for (const QuantizedWeight& w : weights) {
    CAPTURE(format_name(w.layout().format()));
    CHECK(same(read_quantized(checkpoint, w.layout()), w));
  }
  CHECK(checkpoint.find("model.layers.0.mlp.down_proj.weight.qzeros") == nullptr);  // int8: no zero points
  CHECK(checkpoint.find("model.layers.2.mlp.down_proj.weight.qzeros") != nullptr);  // int4 g32 asymmetric
}

TEST_CASE("a layout that does not match the saved tensors is refused, naming the file and the tensor") {
  const lgtest::TempDir dir("nn-qckpt");
  const QuantizedFormat g128{WeightFormat::int4_group, 128, false, ScaleType::f16};
  const QuantizedWeight w = quantize(g128, "lm_head.weight", 40, 512, seeded_weights(40 * 512, 3));
  write_safetensors(dir / "model.safetensors", QuantizedTensors(w).tensors());
  const Checkpoint checkpoint = Checkpoint::open(dir.path());
  const auto refused = [&](const QuantizedLayout& layout, const char* expected) {
    CAPTURE(expected);
    CHECK_THROWS_WITH_AS((void)read_quantized(checkpoint, layout), doctest::Contains(expected), CheckpointError);
  };
  const char* saved_as = "tensor lm_head.weight.qformat: saved as 40 x 512, int4 g128, fp16 scales, read as ";
  const auto read_as = [&](const char* what) { return std::string(saved_as) + what; };
  // Another group, another scale type, symmetry, kind.
  refused({"lm_head.weight", {WeightFormat::int4_group, 64, false, ScaleType::f16}, 40, 512},
          read_as("40 x 512, int4 g64, fp16 scales").c_str());
  refused({"lm_head.weight", {WeightFormat::int4_group, 128, false, ScaleType::bf16}, 40, 512},
          read_as("40 x 512, int4 g128, bf16 scales").c_str());
  refused({"lm_head.weight", {WeightFormat::int4_group, 128, true, ScaleType::f16}, 40, 512},
          read_as("40 x 512, int4 g128 asymmetric, fp16 scales").c_str());
  refused({"lm_head.weight", {WeightFormat::int8_channel, 0, false, ScaleType::f16}, 40, 512},
          read_as("40 x 512, int8 per channel, fp16 scales").c_str());
  // Another shape of the same padded byte counts: 48 rows are 3 tiles, as 40 are.
  refused({"lm_head.weight", g128, 48, 512}, read_as("48 x 512, int4 g128, fp16 scales").c_str());
  // Another name.
  refused({"model.lm_head.weight", g128, 40, 512}, "model.lm_head.weight.qformat");
  CHECK(same(read_quantized(checkpoint, w.layout()), w));
}

TEST_CASE("zero points saved beside a symmetric weight are refused") {
  const lgtest::TempDir dir("nn-qckpt");
  const QuantizedWeight asym =
      quantize({WeightFormat::int4_group, 64, true, ScaleType::bf16}, "w", 16, 128, seeded_weights(16 * 128, 5));
  const QuantizedWeight sym =
      quantize({WeightFormat::int4_group, 64, false, ScaleType::bf16}, "w", 16, 128, seeded_weights(16 * 128, 5));
  // The symmetric weight's tensors, with the asymmetric one's zero points beside them.
  const QuantizedTensors sym_tensors(sym);
  const QuantizedTensors asym_tensors(asym);
  std::vector<TensorToWrite> tensors = sym_tensors.tensors();
  tensors.push_back(asym_tensors.tensors().back());
  write_safetensors(dir / "model.safetensors", tensors);
  const Checkpoint checkpoint = Checkpoint::open(dir.path());
  CHECK_THROWS_WITH_AS((void)read_quantized(checkpoint, sym.layout()),
                       doctest::Contains("tensor w.qzeros: zero points for a symmetric format"), CheckpointError);
}

TEST_CASE("saved bytes that break their format are refused by require_quantized, naming the part and the element") {
  const lgtest::TempDir dir("nn-qckpt");
  // 37 rows: the last tile's rows 37 to 47 are padding, whose scales must be 0.
  const QuantizedWeight w =
      quantize({WeightFormat::int4_group, 64, false, ScaleType::bf16}, "w", 37, 128, seeded_weights(37 * 128, 7));
  const QuantizedTensors parts(w);
  const auto refused = [&](std::size_t scale, std::uint16_t bits, const std::string& fragment) {
    CAPTURE(fragment);
    std::vector<std::uint16_t> scales(w.scale_bits().begin(), w.scale_bits().end());
    scales.at(scale) = bits;
    std::vector<TensorToWrite> tensors = parts.tensors();
    tensors.at(2).data = std::as_bytes(std::span<const std::uint16_t>(scales));  // w.qscales
    write_safetensors(dir / "model.safetensors", tensors);
    const Checkpoint checkpoint = Checkpoint::open(dir.path());
    for (const auto& read : {std::function<void()>([&] { (void)require_quantized(checkpoint, w.layout()); }),
                             std::function<void()>([&] { (void)read_quantized(checkpoint, w.layout()); })}) {
      const std::string expected =
          "tensor w.qscales: holds bytes its format (int4 g64, bf16 scales) does not allow: " + fragment;
      CHECK_THROWS_WITH_AS(read(), doctest::Contains(expected.c_str()), CheckpointError);
    }
  };
  const std::size_t padding = w.layout().scale_index(40, 64);
  refused(padding, 0x3f80,
          "scale " + std::to_string(padding) +
              " belongs to padding row 40 of the last tile and must "
              "be 0");                    // bf16 1.0
  refused(3, 0x7fc0, "scale 3 is nan");   // bf16 NaN
  refused(4, 0xbf80, "scale 4 is -1.0");  // bf16 -1
  // And the bytes as saved read back.
  write_safetensors(dir / "model.safetensors", parts.tensors());
  CHECK(same(read_quantized(Checkpoint::open(dir.path()), w.layout()), w));
}
