// DecoderQuantization as plain data (nn/quantization_config.hpp): when two choices are the same, and how messages
// name them. Which tensors each class covers is tested with the decoder (tests/nn/decoder_quantization.cpp), the
// config.json form with LlamaConfig (tests/nn/llama_config.cpp).
#include <doctest/doctest.h>

#include "common/quantized_formats.hpp"

#include <lazygraph/nn/quantization_config.hpp>

using namespace lazygraph::nn;

using lgtest::int4;
using lgtest::int8;

TEST_CASE("two quantizations are equal when they store every class alike, whatever group an int8 format holds") {
  DecoderQuantization a;
  DecoderQuantization b;
  CHECK(a == b);
  a.attention = int8();
  CHECK_FALSE(a == b);
  // int8 has one scale per row: its group is not used
  b.attention = QuantizedFormat{WeightFormat::int8_channel, 128, false, ScaleType::f16};
  CHECK(a == b);
  b.attention = int8(ScaleType::bf16);
  CHECK_FALSE(a == b);
  b.attention = int4(128);
  CHECK_FALSE(a == b);

  a = {};
  b = {};
  a.mlp = int4(64);
  b.mlp = int4(128);
  CHECK_FALSE(a == b);  // int4 groups are compared
  b.mlp = int4(64, true);
  CHECK_FALSE(a == b);
  b.mlp = int4(64);
  CHECK(a == b);
  b.options.clip_search = true;  // other bytes
  CHECK_FALSE(a == b);
  a.options.clip_search = true;
  CHECK(a == b);
  b.lm_head = int4(64);
  CHECK_FALSE(a == b);
}

TEST_CASE("a quantization is named class by class in messages") {
  DecoderQuantization q;
  CHECK(quantization_name(q) == "nothing quantized");
  q.options.clip_search = true;
  CHECK(quantization_name(q) == "nothing quantized");
  q.attention = int8();
  q.lm_head = int4(128, true, ScaleType::bf16);
  CHECK(quantization_name(q) ==
        "attention int8 per channel, fp16 scales; MLP dense; LM head int4 g128 asymmetric, bf16 scales, with the "
        "clipping search");
  q.options.clip_search = false;
  q.mlp = int4(32);
  CHECK(quantization_name(q) ==
        "attention int8 per channel, fp16 scales; MLP int4 g32, fp16 scales; LM head int4 g128 asymmetric, bf16 "
        "scales");
}
