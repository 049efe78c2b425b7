// A decoder on weight-only quantized weights (nn/decoder_quantization.hpp): which tensors each class covers, formats
// refused by name before anything is allocated, the device bytes counted; on a GPU, quantized decoders (int8 and int4,
// fp16 and bf16, every class alone and all together) against dense decoders whose weights are the dequantized values
// rounded to the element type, the checkpoint loader against quantizing on the device, replays bit for bit, and
// prefill on tensor cores and on the step graphs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <lazygraph/nn/checkpoint.hpp>
#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/decoder_quantization.hpp>
#include <lazygraph/nn/decoder_tensors.hpp>
#include <lazygraph/nn/random_weights.hpp>
#include <lazygraph/nn/reference.hpp>
#include "common/gpu.hpp"
#include "common/nn.hpp"
#include "common/quantized_formats.hpp"
#include "common/quantized_weights.hpp"
#include "common/same_decoding.hpp"
#include "common/small_decoder.hpp"

using namespace lazygraph;
using namespace lazygraph::nn;

namespace {

using lgtest::int4;
using lgtest::int8;

std::filesystem::path saved_decoder(const std::string& label, const DecoderConfig& c, DType dtype = DType::f16) {
  const auto dir = lgtest::scratch_directory(label);
  save_seeded_checkpoint(dir, c, dtype);
  return dir;
}

/// Bytes of every dense tensor of `c` but those `skip` says are quantized.
std::size_t dense_bytes(const DecoderConfig& c, QuantizationClass skip_a = QuantizationClass::none,
                        QuantizationClass skip_b = QuantizationClass::none) {
  std::size_t bytes = 0;
  for (const DecoderTensor& t : decoder_tensors(c)) {
    const QuantizationClass k = quantization_class(t.role);
    if (k == QuantizationClass::none || (k != skip_a && k != skip_b)) bytes += t.elements() * 2;
  }
  return bytes;
}

}  // namespace

TEST_CASE("each decoder tensor belongs to one quantization class, and a DecoderQuantization gives it that format") {
  DecoderConfig c = lgtest::small_decoder(2);
  c.qkv_bias = true;
  DecoderQuantization q;
  q.attention = int8();
  q.mlp = int4(64, true);
  q.lm_head = int4(32);
  CHECK(q.any());
  CHECK_FALSE(DecoderQuantization{}.any());
  std::map<QuantizationClass, int> count;
  for (const DecoderTensor& t : decoder_tensors(c)) {
    CAPTURE(t.name);
    const QuantizationClass k = quantization_class(t.role);
    ++count[k];
    const bool attention = t.name.find("self_attn.") != std::string::npos && t.name.ends_with("_proj.weight");
    const bool mlp = t.name.find(".mlp.") != std::string::npos;
    CHECK((k == QuantizationClass::attention) == attention);
    CHECK((k == QuantizationClass::mlp) == mlp);
    CHECK((k == QuantizationClass::lm_head) == (t.name == "lm_head.weight"));
    const std::optional<QuantizedFormat> f = q.format_of(t.role);
    switch (k) {
      case QuantizationClass::attention:
        CHECK(f == q.attention);
        break;
      case QuantizationClass::mlp:
        CHECK(f == q.mlp);
        break;
      case QuantizationClass::lm_head:
        CHECK(f == q.lm_head);
        break;
      case QuantizationClass::none:
        CHECK_FALSE(f.has_value());
        break;
    }
    CHECK_FALSE(DecoderQuantization{}.format_of(t.role).has_value());
  }
  // Per layer q, k, v, o and gate, up, down; the embedding, 2 gains per layer, the final gain and 3 biases per layer
  // stay dense.
  CHECK(count[QuantizationClass::attention] == 4 * c.layers);
  CHECK(count[QuantizationClass::mlp] == 3 * c.layers);
  CHECK(count[QuantizationClass::lm_head] == 1);
  CHECK(count[QuantizationClass::none] == 1 + 2 * c.layers + 1 + 3 * c.layers);
}

TEST_CASE("the quantized matrices are q, k and v stacked, o, gate, up, down per layer and the LM head, in order") {
  const DecoderConfig c = lgtest::small_decoder(2);  // q_dim 128, kv_dim 64
  DecoderQuantization q;
  q.attention = int8();
  q.mlp = int4(128);
  q.lm_head = int4(64, true);
  const std::vector<QuantizedLayout> layouts = quantized_layouts(c, q);
  REQUIRE(layouts.size() == 5 * static_cast<std::size_t>(c.layers) + 1);
  CHECK(layouts[0].name() == "model.layers.0.self_attn.qkv_proj.weight");
  CHECK(layouts[0].rows() == 128 + 2 * 64);
  CHECK(layouts[0].cols() == 128);
  CHECK(layouts[1].name() == "model.layers.0.self_attn.o_proj.weight");
  CHECK(layouts[2].name() == "model.layers.0.mlp.gate_proj.weight");
  CHECK(layouts[3].name() == "model.layers.0.mlp.up_proj.weight");
  CHECK(layouts[4].name() == "model.layers.0.mlp.down_proj.weight");
  CHECK(layouts[4].rows() == 128);
  CHECK(layouts[4].cols() == 256);
  CHECK(layouts[4].format() == int4(128));
  CHECK(layouts[5].name() == "model.layers.1.self_attn.qkv_proj.weight");
  CHECK(layouts.back().name() == "lm_head.weight");
  CHECK(layouts.back().format() == int4(64, true));
  q.attention.reset();
  CHECK(quantized_layouts(c, q).size() == 3 * static_cast<std::size_t>(c.layers) + 1);
  CHECK(quantized_layouts(c, {}).empty());
}

TEST_CASE("a format that cannot apply to a decoder tensor is refused, naming the tensor and why") {
  SUBCASE("an input dimension that is not whole int4 steps (d 96)") {
    DecoderConfig c = lgtest::small_decoder();
    c.d = 96;  // head_dim 24
    DecoderQuantization q;
    q.attention = int8();
    CHECK_NOTHROW((void)quantized_layouts(c, q));  // int8 steps are 32 columns
    q.attention = int4(32);
    CHECK_THROWS_WITH_AS((void)quantized_layouts(c, q),
                         doctest::Contains("tensor model.layers.0.self_attn.q_proj.weight: int4 needs the input "
                                           "dimension (96) to be a multiple of 64"),
                         UsageError);
  }
  SUBCASE("a group that does not divide the input dimension (d 192, g128)") {
    DecoderConfig c = lgtest::small_decoder();
    c.d = 192;
    DecoderQuantization q;
    q.lm_head = int4(128);
    CHECK_THROWS_WITH_AS(
        (void)quantized_layouts(c, q),
        doctest::Contains("tensor lm_head.weight: int4 group size 128 does not divide the input dimension (192)"),
        UsageError);
    q.lm_head = int4(64);
    CHECK_NOTHROW((void)quantized_layouts(c, q));
  }
  SUBCASE("Wo's input is q_dim, W2's is ffn") {
    DecoderConfig c = lgtest::small_decoder();
    c.head_width = 48;  // q_dim 192: q_proj reads d = 128 columns, o_proj 192
    DecoderQuantization q;
    q.attention = int4(128);
    CHECK_THROWS_WITH_AS((void)quantized_layouts(c, q),
                         doctest::Contains("tensor model.layers.0.self_attn.o_proj.weight: int4 group size 128"),
                         UsageError);
    c = lgtest::small_decoder();
    c.ffn = 160;
    q = {};
    q.mlp = int4(32);
    CHECK_THROWS_WITH_AS((void)quantized_layouts(c, q),
                         doctest::Contains("tensor model.layers.0.mlp.down_proj.weight: int4 needs the input dimension "
                                           "(160)"),
                         UsageError);
    q.mlp = int8();
    CHECK_NOTHROW((void)quantized_layouts(c, q));
  }
  SUBCASE("a format QuantizedLayout refuses in itself") {
    const DecoderConfig c = lgtest::small_decoder();
    DecoderQuantization q;
    q.mlp = int8();
    q.mlp->asymmetric = true;
    CHECK_THROWS_WITH_AS((void)quantized_layouts(c, q),
                         doctest::Contains("tensor model.layers.0.mlp.gate_proj.weight: int8 is symmetric only"),
                         UsageError);
    q.mlp = int4(96);
    CHECK_THROWS_WITH_AS((void)decoder_device_bytes(c, q), doctest::Contains("int4 group size 96 is not 32, 64 or 128"),
                         UsageError);
  }
  SUBCASE("scales not of the decoder's element type") {
    const DecoderConfig c = lgtest::small_decoder();
    DecoderQuantization q;
    q.mlp = int4(128, false, ScaleType::bf16);
    CHECK_NOTHROW(check_quantization(c, q, ScaleType::bf16));
    CHECK_THROWS_WITH_AS(check_quantization(c, q, ScaleType::f16),
                         doctest::Contains("tensor model.layers.0.mlp.gate_proj.weight: int4 g128, bf16 scales, but a "
                                           "decoder over fp16 reads fp16 scales"),
                         UsageError);
    q.mlp = int8();
    q.lm_head = int8(ScaleType::bf16);
    CHECK_THROWS_WITH_AS(check_quantization(c, q, ScaleType::f16), doctest::Contains("tensor lm_head.weight"),
                         UsageError);
  }
}

TEST_CASE("a checkpoint opened with a format that cannot apply is refused by open, naming the tensor") {
  DecoderConfig c = lgtest::small_decoder();
  c.ffn = 160;
  const auto dir = saved_decoder("quantized-open-refused", c);
  LoadOptions options;
  options.quantization.mlp = int4(32);
  CHECK_THROWS_WITH_AS((void)DecoderCheckpoint::open(dir, options),
                       doctest::Contains("tensor model.layers.0.mlp.down_proj.weight"), UsageError);
  options.quantization.mlp = int8();
  CHECK_NOTHROW((void)DecoderCheckpoint::open(dir, options));
}

TEST_CASE("device_bytes counts 2 bytes per dense element and each quantized matrix's layout bytes, padding included") {
  DecoderConfig c = lgtest::small_decoder();  // d 128, q_dim = kv_dim 128, ffn 256, vocab 512, 2 layers
  c.vocab = 500;                              // the LM head's last tile is padded to 512 rows
  const auto dir = saved_decoder("quantized-bytes", c);
  const std::size_t dense = decoder_device_bytes(c, {});
  CHECK(dense == dense_bytes(c));
  CHECK(DecoderCheckpoint::open(dir).device_bytes() == dense);

  // By hand. int8 attention: q, k and v stacked, 384 x 128: 384 * 128 values, 384 fp16 scales; o 128 x 128.
  const std::size_t qkv_int8 = 384 * 128 + 384 * 2;
  const std::size_t o_int8 = 128 * 128 + 128 * 2;
  // int4 g128 asymmetric MLP: gate and up 256 x 128 (half a byte each, one group per row, a zero byte per group);
  // down 128 x 256 (two groups per row).
  const std::size_t up_int4 = 256 * 64 + 256 * 2 + 256;
  const std::size_t down_int4 = 128 * 128 + 128 * 2 * 2 + 128 * 2;
  // int8 LM head 500 x 128, padded to 512 rows.
  const std::size_t head_int8 = 512 * 128 + 512 * 2;
  const std::size_t layers = 2;

  LoadOptions options;
  options.quantization.attention = int8();
  CHECK(decoder_device_bytes(c, options.quantization) ==
        dense_bytes(c, QuantizationClass::attention) + layers * (qkv_int8 + o_int8));
  CHECK(DecoderCheckpoint::open(dir, options).device_bytes() == decoder_device_bytes(c, options.quantization));

  options.quantization.mlp = int4(128, true);
  const std::size_t both = dense_bytes(c, QuantizationClass::attention, QuantizationClass::mlp) +
                           layers * (qkv_int8 + o_int8 + 2 * up_int4 + down_int4);
  CHECK(decoder_device_bytes(c, options.quantization) == both);
  CHECK(DecoderCheckpoint::open(dir, options).device_bytes() == both);

  options.quantization.lm_head = int8();
  const std::size_t head_elements = 500 * 128;
  CHECK(DecoderCheckpoint::open(dir, options).device_bytes() == both - head_elements * 2 + head_int8);
  CHECK(DecoderCheckpoint::open(dir, options).device_bytes() < dense / 2);
}

namespace {

/// The seeded weights of `c` rounded to T, with each tensor `q` quantizes replaced by its dequantized values rounded
/// to T (q, k and v quantized as one stacked matrix, as the decoder holds them): a dense decoder that should compute
/// what the quantized one does, up to the kernels' rounding.
template <class T>
BasicDecoderWeights<T> dequantized_weights(const Stream& stream, const DecoderConfig& c, const DecoderQuantization& q) {
  const std::vector<QuantizedLayout> layouts = quantized_layouts(c, q);
  std::size_t next = 0;
  std::vector<float> stacked;  // the current layer's q, k and v dequantized, rows stacked
  std::size_t stacked_row = 0;
  return assemble_decoder_weights<T>(stream.device(), c, [&](const DecoderTensor& t, DeviceSpan<T> into) {
    const std::vector<T> seeded = host_tensor<T>(c.seed, t.seeded);
    std::vector<T> values = seeded;
    if (const std::optional<QuantizedFormat> format = q.format_of(t.role)) {
      const auto cols = static_cast<std::size_t>(t.cols);
      if (t.role == DecoderTensorRole::wq) {  // quantize q, k and v of the layer together
        std::vector<float> all;
        for (const DecoderTensorRole r : {DecoderTensorRole::wq, DecoderTensorRole::wk, DecoderTensorRole::wv}) {
          for (const DecoderTensor& u : decoder_tensors(c)) {
            if (u.layer != t.layer || u.role != r) continue;
            for (const T v : host_tensor<T>(c.seed, u.seeded)) all.push_back(v.to_float());
          }
        }
        const QuantizedLayout& l = layouts[next++];
        stacked = quantize(l.format(), l.name(), l.rows(), l.cols(), all, q.options).dequantize();
        stacked_row = 0;
      }
      std::vector<float> dequantized;
      if (t.role == DecoderTensorRole::wq || t.role == DecoderTensorRole::wk || t.role == DecoderTensorRole::wv) {
        const auto first = static_cast<std::ptrdiff_t>(stacked_row * cols);
        dequantized.assign(stacked.begin() + first,
                           stacked.begin() + first + static_cast<std::ptrdiff_t>(t.elements()));
        stacked_row += static_cast<std::size_t>(t.rows);
      } else {
        std::vector<float> f;
        for (const T v : seeded) f.push_back(v.to_float());
        const QuantizedLayout& l = layouts[next++];
        REQUIRE(l.name() == t.name);
        dequantized = quantize(l.format(), l.name(), l.rows(), l.cols(), f, q.options).dequantize();
      }
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = T::from_float(dequantized[i]);
    }
    copy(into, std::span<const T>(values)).sync_on(stream);
  });
}

template <class T>
BasicDecoderWeights<T> quantized_weights(const Stream& stream, const DecoderConfig& c, const DecoderQuantization& q) {
  return quantize_decoder_weights(
      stream, BasicDecoderWeights<T>::generate(stream, BasicKernels<T>(lgtest::nn_kernels()), c), c, q);
}

/// The top two of `v`'s values' difference.
template <class T>
double top_two_margin(const std::vector<T>& v) {
  double first = -INFINITY;
  double second = -INFINITY;
  for (const T x : v) {
    const double f = x.to_float();
    if (f > first) {
      second = first;
      first = f;
    } else if (f > second) {
      second = f;
    }
  }
  return first - second;
}

/// A named choice of formats for element type T's scales.
struct Variant {
  const char* name;
  DecoderQuantization quantization;
};

template <class T>
std::vector<Variant> variants() {
  const ScaleType s = scale_type_of<T>;
  std::vector<Variant> out(6);
  out[0].name = "int8 everywhere";
  out[0].quantization.attention = out[0].quantization.mlp = out[0].quantization.lm_head = int8(s);
  out[1].name = "int4 g128 everywhere";
  out[1].quantization.attention = out[1].quantization.mlp = out[1].quantization.lm_head = int4(128, false, s);
  out[2].name = "the MLP alone, int4 g64 with zero points and the clipping search";
  out[2].quantization.mlp = int4(64, true, s);
  out[2].quantization.options.clip_search = true;
  out[3].name = "attention int8 and the LM head int4 g32";
  out[3].quantization.attention = int8(s);
  out[3].quantization.lm_head = int4(32, false, s);
  out[4].name = "fp8 everywhere, in blocks of 128 x 128";
  out[4].quantization.attention = out[4].quantization.mlp = out[4].quantization.lm_head = lgtest::fp8(s);
  out[5].name = "the MLP fp8 beside int8 attention, with the clipping search (which fp8 does not use)";
  out[5].quantization.attention = int8(s);
  out[5].quantization.mlp = lgtest::fp8(s);
  out[5].quantization.options.clip_search = true;
  return out;
}

/// Runs a quantized decoder and a dense one on the dequantized weights side by side, teacher-forced on the dense one's
/// greedy tokens, `rows` sequences at once: the logits agree within `tolerance` of their largest magnitude, the
/// tokens wherever the dense logits' top-two margin exceeds twice the largest difference, and on most rows overall.
template <class T>
void check_against_dequantized(const DecoderConfig& c, const DecoderQuantization& q, int rows, double tolerance) {
  Stream& s = lgtest::stream();
  BasicDecoder<T> quantized(s, lgtest::nn_kernels(), c, quantized_weights<T>(s, c, q));
  BasicDecoder<T> dense(s, lgtest::nn_kernels(), c, dequantized_weights<T>(s, c, q));
  std::vector<int> tokens{7, 300, 42};
  tokens.resize(static_cast<std::size_t>(rows));
  int compared = 0;
  int agreed = 0;
  for (int p = 0; p < 8; ++p) {
    CAPTURE(p);
    std::vector<TokenAt> steps;
    for (const int t : tokens) steps.push_back({t, p});
    const std::vector<int> from_quantized = quantized.forward_batch(steps);
    const std::vector<int> from_dense = dense.forward_batch(steps);
    for (int r = 0; r < rows; ++r) {
      CAPTURE(r);
      const std::vector<T> lq = quantized.logits(r);
      const std::vector<T> ld = dense.logits(r);
      double largest = 0;
      double difference = 0;
      for (std::size_t i = 0; i < ld.size(); ++i) {
        largest = std::max(largest, std::abs(static_cast<double>(ld[i].to_float())));
        difference = std::max(difference,
                              std::abs(static_cast<double>(lq[i].to_float()) - static_cast<double>(ld[i].to_float())));
      }
      REQUIRE(std::isfinite(difference));
      CHECK(difference <= tolerance * largest);
      CHECK(difference > 0);  // not the dense kernels twice: the quantized path sums in another order
      const auto rr = static_cast<std::size_t>(r);
      if (top_two_margin(ld) > 2 * difference) CHECK(from_quantized[rr] == from_dense[rr]);
      ++compared;
      agreed += from_quantized[rr] == from_dense[rr] ? 1 : 0;
    }
    tokens = from_dense;
  }
  CHECK(4 * agreed >= 3 * compared);
}

}  // namespace

namespace {

template <class T>
void check_device_route(const DecoderConfig& c) {
  Stream& s = lgtest::stream();
  const DeviceQuantizer quantizer(lgtest::nn_kernels());
  for (const Variant& v : variants<T>()) {
    CAPTURE(v.name);
    const auto seeded = [&] { return BasicDecoderWeights<T>::generate(s, BasicKernels<T>(lgtest::nn_kernels()), c); };
    const auto host = lgtest::downloaded(s, quantize_decoder_weights(s, seeded(), c, v.quantization));
    const auto device = lgtest::downloaded(s, quantize_decoder_weights(s, quantizer, seeded(), c, v.quantization));
    REQUIRE(host.size() == device.size());
    REQUIRE(!host.empty());
    for (std::size_t i = 0; i < host.size(); ++i) {
      CAPTURE(host[i].layout().name());
      CHECK(device[i].layout().name() == host[i].layout().name());
      CHECK(std::ranges::equal(device[i].values(), host[i].values()));
      CHECK(std::ranges::equal(device[i].scale_bits(), host[i].scale_bits()));
      CHECK(std::ranges::equal(device[i].zeros(), host[i].zeros()));
    }
  }
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("decoder weights quantized on the device are the bytes the host route makes, fp16 and bf16") {
    DecoderConfig c = lgtest::small_decoder(2, 3);
    c.qkv_bias = true;
    check_device_route<half>(c);
    check_device_route<bfloat16>(c);
  }

  TEST_CASE("a quantized fp16 decoder computes what a dense one on its dequantized weights does, batch 1 and 3") {
    for (const bool bias : {false, true}) {
      DecoderConfig c = lgtest::small_decoder(2, 3);  // GQA: k and v narrower than q in the stacked matrix
      c.qkv_bias = bias;
      for (const Variant& v : variants<half>()) {
        for (const int rows : {1, 3}) {
          CAPTURE(bias);
          CAPTURE(v.name);
          CAPTURE(rows);
          check_against_dequantized<half>(c, v.quantization, rows, 1e-2);
        }
      }
    }
  }

  TEST_CASE("a quantized bf16 decoder computes what a dense one on its dequantized weights does, batch 1 and 3") {
    DecoderConfig c = lgtest::small_decoder(2, 3);
    c.qkv_bias = true;
    for (const Variant& v : variants<bfloat16>()) {
      for (const int rows : {1, 3}) {
        CAPTURE(v.name);
        CAPTURE(rows);
        check_against_dequantized<bfloat16>(c, v.quantization, rows, 4e-2);
      }
    }
  }

  TEST_CASE("a quantized decoder's graph replays give the same bits run after run, one row and three") {
    const DecoderConfig c = lgtest::small_decoder(2, 3);
    DecoderQuantization q;
    q.attention = q.mlp = q.lm_head = int4(128);
    Decoder decoder(lgtest::stream(), lgtest::nn_kernels(), c, quantized_weights<half>(lgtest::stream(), c, q));
    const auto run = [&](int rows) {
      decoder.reset();
      std::vector<std::vector<half>> logits;
      std::vector<int> tokens{11, 12, 13};
      tokens.resize(static_cast<std::size_t>(rows));
      for (int p = 0; p < 6; ++p) {
        std::vector<TokenAt> steps;
        for (const int t : tokens) steps.push_back({t, p});
        tokens = rows == 1 ? std::vector<int>{decoder.forward(steps[0])} : decoder.forward_batch(steps);
        for (int r = 0; r < rows; ++r) logits.push_back(decoder.logits(r));
      }
      return logits;
    };
    for (const int rows : {1, 3}) {
      CAPTURE(rows);
      const std::vector<std::vector<half>> first = run(rows);
      const std::vector<std::vector<half>> second = run(rows);
      REQUIRE(first.size() == second.size());
      std::size_t differ = 0;
      for (std::size_t i = 0; i < first.size(); ++i) {
        for (std::size_t j = 0; j < first[i].size(); ++j) differ += first[i][j].bits != second[i][j].bits ? 1 : 0;
      }
      CHECK(differ == 0);
    }
    // The quantized kernels replace the dense fused path's one for one (quantized_qkv_rope_append for
    // qkv_rope_append): the same node count.
    Decoder dense(lgtest::stream(), lgtest::nn_kernels(), c);
    CHECK(decoder.graph().node_count() == dense.graph().node_count());
  }

  TEST_CASE("a checkpoint loaded with quantization computes the bits of its seeded weights quantized on the device") {
    DecoderConfig c = lgtest::small_decoder(2);
    c.qkv_bias = true;  // biases stacked from the checkpoint's, q and k rows reordered from rotate-half
    LoadOptions options;
    options.quantization.attention = int4(64, true);
    options.quantization.mlp = int8();
    options.quantization.lm_head = int4(128);
    options.quantization.options.clip_search = true;
    options.progress_from_bytes = 0;  // the bar (on stderr) counts the quantized bytes
    const auto dir = saved_decoder("quantized-load", c);
    const DecoderCheckpoint checkpoint = DecoderCheckpoint::open(dir, options);
    const LiveHandles before = live_handles();
    BasicDecoderWeights<half> loaded_weights = checkpoint.upload<half>(lgtest::stream());
    const LiveHandles after = live_handles();
    CHECK(after.device_bytes - before.device_bytes == checkpoint.device_bytes());
    CHECK(loaded_weights.quantized());
    CHECK_FALSE(loaded_weights.attention[0].qkv.is_dense());
    CHECK(loaded_weights.attention[0].qkv.rows() == c.q_dim() + 2 * c.kv_dim());
    CHECK(loaded_weights.attention[0].bias.size() == static_cast<std::size_t>(c.q_dim() + 2 * c.kv_dim()));
    CHECK_FALSE(loaded_weights.mlp[1].w2.is_dense());
    CHECK_FALSE(loaded_weights.lm_head.is_dense());
    CHECK_FALSE(loaded_weights.embedding.empty());
    Decoder loaded(lgtest::stream(), lgtest::nn_kernels(), checkpoint.config(), std::move(loaded_weights));
    Decoder on_device(lgtest::stream(), lgtest::nn_kernels(), c,
                      quantized_weights<half>(lgtest::stream(), c, options.quantization));
    lgtest::check_same_decoding(loaded, on_device, 5);
  }

  TEST_CASE(
      "a checkpoint quantized into fp8 as it loads on the GPU decodes as its seeded weights quantized on the host") {
    DecoderConfig c = lgtest::small_decoder(2);
    c.qkv_bias = true;
    LoadOptions options;
    options.quantization.attention = options.quantization.mlp = options.quantization.lm_head = lgtest::fp8();
    const auto dir = saved_decoder("quantized-load-fp8", c);
    const DecoderCheckpoint checkpoint = DecoderCheckpoint::open(dir, options);
    BasicDecoderWeights<half> weights =
        checkpoint.upload<half>(lgtest::stream(), DeviceQuantizer(lgtest::nn_kernels()));  // load_decoder's route
    CHECK(quantization_of(weights) == options.quantization);
    Decoder loaded(lgtest::stream(), lgtest::nn_kernels(), checkpoint.config(), std::move(weights));
    Decoder on_host(lgtest::stream(), lgtest::nn_kernels(), c,
                    quantized_weights<half>(lgtest::stream(), c, options.quantization));
    lgtest::check_same_decoding(loaded, on_host, 5);
  }

  TEST_CASE("a bf16 decoder loads a checkpoint quantized with bf16 scales; fp16 scales are refused before allocating") {
    const DecoderConfig c = lgtest::small_decoder();
    const auto dir = saved_decoder("quantized-load-bf16", c, DType::bf16);
    LoadOptions options;
    options.quantization.mlp = int4(128, false, ScaleType::bf16);
    const DecoderCheckpoint checkpoint = DecoderCheckpoint::open(dir, options);
    const LiveHandles before = live_handles();
    CHECK_THROWS_WITH_AS((void)checkpoint.upload<half>(lgtest::stream()),
                         doctest::Contains("tensor model.layers.0.mlp.gate_proj.weight: int4 g128, bf16 scales"),
                         UsageError);
    const LiveHandles after = live_handles();
    CHECK(after.device_allocations == before.device_allocations);
    CHECK(after.pinned_allocations == before.pinned_allocations);
    DecoderBf16 loaded(lgtest::stream(), lgtest::nn_kernels(), checkpoint.config(),
                       checkpoint.upload<bfloat16>(lgtest::stream()));
    DecoderBf16 on_device(lgtest::stream(), lgtest::nn_kernels(), c,
                          quantized_weights<bfloat16>(lgtest::stream(), c, options.quantization));
    CHECK(loaded.forward({9, 0}) == on_device.forward({9, 0}));
    const std::vector<bfloat16> la = loaded.logits();
    const std::vector<bfloat16> lb = on_device.logits();
    std::size_t differ = 0;
    for (std::size_t i = 0; i < la.size(); ++i) differ += la[i].bits != lb[i].bits ? 1 : 0;
    CHECK(differ == 0);
  }

  TEST_CASE(
      "a quantized decoder's prefill on tensor cores gives the last logits of one token at a time within rounding; "
      "through the step graphs (prefill_chunk 0), their bits") {
    DecoderConfig c = lgtest::small_decoder(2);
    c.heads = 2;  // head_dim 64, which the flash-attention kernels take
    SUBCASE("GQA, head_dim 64") {}
    SUBCASE("q wider than the model (head_dim 128), q, k and v biases") {
      c.heads = 4;
      c.head_width = 128;
      c.qkv_bias = true;
    }
    CAPTURE(c.head_dim());
    DecoderQuantization q;
    q.attention = q.lm_head = int8();
    q.mlp = int4(128, false);
    const std::vector<int> prompt{
        9,  400, 12,  12, 7, 300, 1,  2,  3,  4,  5,   6,   250, 17,  18, 19, 20, 31, 8,
        99, 100, 101, 5,  5, 61,  62, 63, 64, 65, 200, 201, 202, 203, 3,  4,  11, 12};  // 37: a bucket of 64
    Decoder one(lgtest::stream(), lgtest::nn_kernels(), c, quantized_weights<half>(lgtest::stream(), c, q));
    int one_by_one = -1;
    for (std::size_t i = 0; i < prompt.size(); ++i) one_by_one = one.forward({prompt[i], static_cast<int>(i)});
    const std::vector<half> want = one.logits();

    Decoder fast(lgtest::stream(), lgtest::nn_kernels(), c, quantized_weights<half>(lgtest::stream(), c, q));
    if (const std::string why = fast.prefill_fallback_reason(); !why.empty()) {
      MESSAGE("skipped the tensor-core half: prefill does not run on tensor cores here: " << why);
    } else {
      const auto relative_error = [](const std::vector<half>& got, const std::vector<half>& ref) {
        double diff = 0;
        double norm = 0;
        for (std::size_t i = 0; i < ref.size(); ++i) {
          const double d = double(got[i].to_float()) - double(ref[i].to_float());
          diff += d * d;
          norm += double(ref[i].to_float()) * double(ref[i].to_float());
        }
        return std::sqrt(diff / norm);
      };
      (void)fast.prefill(prompt);
      CHECK(relative_error(fast.logits(), want) < 1e-2);
      // Decoding goes on from the cache it wrote as from the one written token by token, within rounding.
      (void)fast.forward({5, static_cast<int>(prompt.size())});
      (void)one.forward({5, static_cast<int>(prompt.size())});
      CHECK(relative_error(fast.logits(), one.logits()) < 1e-2);
    }

    c.prefill_chunk = 0;
    Decoder steps(lgtest::stream(), lgtest::nn_kernels(), c, quantized_weights<half>(lgtest::stream(), c, q));
    CHECK(steps.prefill(prompt) == one_by_one);
    const std::vector<half> step_logits = steps.logits();
    std::size_t differ = 0;
    for (std::size_t i = 0; i < step_logits.size(); ++i) differ += step_logits[i].bits != want[i].bits ? 1 : 0;
    CHECK(differ == 0);
  }

  TEST_CASE("weights already quantized, or of another shape, are refused by quantize_decoder_weights by name") {
    const DecoderConfig c = lgtest::small_decoder();
    DecoderQuantization q;
    q.mlp = int8();
    BasicDecoderWeights<half> once = quantized_weights<half>(lgtest::stream(), c, q);
    CHECK_THROWS_WITH_AS((void)quantize_decoder_weights(lgtest::stream(), std::move(once), c, q),
                         doctest::Contains("model.layers.0.mlp.gate_proj.weight is quantized already"), UsageError);
    DecoderConfig wider = c;
    wider.ffn = 512;
    CHECK_THROWS_WITH_AS(
        (void)quantize_decoder_weights(
            lgtest::stream(), DecoderWeights::generate(lgtest::stream(), Kernels(lgtest::nn_kernels()), c), wider, q),
        doctest::Contains(
            "weight model.layers.0.mlp.gate_proj.weight has 32768 dense elements, the config needs 65536"),
        UsageError);
  }

  TEST_CASE("a weight that cannot be quantized fails the upload naming the matrix, and nothing stays allocated") {
    const DecoderConfig c = lgtest::small_decoder();
    const auto dir = saved_decoder("quantized-load-nan", c, DType::f32);
    {  // a NaN in layer 1's down projection
      std::vector<std::vector<std::byte>> bytes;
      std::vector<TensorToWrite> tensors;
      {
        const SafetensorsFile file = SafetensorsFile::open(dir / "model.safetensors");
        for (const TensorInfo& t : file.tensors()) {
          const auto data = file.data(t);
          bytes.emplace_back(data.begin(), data.end());
          if (t.name == "model.layers.1.mlp.down_proj.weight") {
            const float nan = NAN;
            std::memcpy(bytes.back().data() + 4 * 1000, &nan, 4);
          }
        }
        std::size_t i = 0;
        for (const TensorInfo& t : file.tensors()) tensors.push_back({t.name, t.dtype, t.shape, bytes[i++]});
      }
      write_safetensors(dir / "model.safetensors", tensors);
    }
    LoadOptions options;
    options.quantization.mlp = int8();
    const DecoderCheckpoint checkpoint = DecoderCheckpoint::open(dir, options);  // the host check cannot see values
    const LiveHandles before = live_handles();
    CHECK_THROWS_WITH_AS((void)checkpoint.upload<half>(lgtest::stream()),
                         doctest::Contains("model.layers.1.mlp.down_proj.weight: cannot be quantized"),
                         CheckpointError);
    const LiveHandles after = live_handles();
    CHECK(after.device_allocations == before.device_allocations);
    CHECK(after.device_bytes == before.device_bytes);
    CHECK(after.pinned_allocations == before.pinned_allocations);
    CHECK(after.events == before.events);
  }

  TEST_CASE("a graph that records a quantized step keeps the quantized weights alive after the decoder is gone") {
    const DecoderConfig c = lgtest::small_decoder();
    DecoderQuantization q;
    q.attention = q.mlp = q.lm_head = int8();
    BasicDecoderWeights<half> weights = quantized_weights<half>(lgtest::stream(), c, q);
    const std::weak_ptr<const DeviceQuantizedWeight<half>> qkv = weights.attention[1].qkv.shared_quantized();
    const std::weak_ptr<const DeviceQuantizedWeight<half>> up = weights.mlp[0].w3.shared_quantized();
    const std::weak_ptr<const DeviceQuantizedWeight<half>> head = weights.lm_head.shared_quantized();
    std::optional<CudaGraph<>> graph;
    {
      Decoder decoder(lgtest::stream(), lgtest::nn_kernels(), c, std::move(weights));
      (void)decoder.forward({4, 0});
      graph.emplace(CudaGraph<>::capture(lgtest::stream(), decoder.step_op(1)));
    }
    CHECK_FALSE(qkv.expired());
    CHECK_FALSE(up.expired());
    CHECK_FALSE(head.expired());
    graph->launch();  // replays on memory that is still there
    graph.reset();
    CHECK(qkv.expired());
    CHECK(up.expired());
    CHECK(head.expired());
  }
}
