#pragma once
/// \file
/// Layer 6, nn (above module): model building blocks as ops, the MLP and decoder modules built from them, seeded
/// weights and their float64 references. A library of its own (liblazygraph_nn, Meson dependency
/// `lazygraph_nn_dep`) with its own kernel set (`nn::kernel_set()`, from `kernels/nn/`), so a program that uses
/// no model compiles none of its kernels.

/// \namespace lazygraph::nn
/// Model building blocks and models over lazygraph's graphs: see docs/nn.md for the exact math.

#include "lazygraph/nn/chat_template.hpp"
#include "lazygraph/nn/checkpoint.hpp"
#include "lazygraph/nn/decoder.hpp"
#include "lazygraph/nn/decoder_quantization.hpp"
#include "lazygraph/nn/decoder_step_model.hpp"
#include "lazygraph/nn/decoder_tensors.hpp"
#include "lazygraph/nn/decoder_tiles.hpp"
#include "lazygraph/nn/device_quantizer.hpp"
#include "lazygraph/nn/engine.hpp"
#include "lazygraph/nn/generation_config.hpp"
#include "lazygraph/nn/kernels.hpp"
#include "lazygraph/nn/kv_block_pool.hpp"
#include "lazygraph/nn/llama_config.hpp"
#include "lazygraph/nn/mlp.hpp"
#include "lazygraph/nn/openai_request.hpp"
#include "lazygraph/nn/paged_attention.hpp"
#include "lazygraph/nn/peer_all_reduce.hpp"
#include "lazygraph/nn/prefill_attention.hpp"
#include "lazygraph/nn/quantization_config.hpp"
#include "lazygraph/nn/quantized.hpp"
#include "lazygraph/nn/quantized_checkpoint.hpp"
#include "lazygraph/nn/quantized_kernels.hpp"
#include "lazygraph/nn/quantized_save.hpp"
#include "lazygraph/nn/quantized_slice.hpp"
#include "lazygraph/nn/random_weights.hpp"
#include "lazygraph/nn/reference.hpp"
#include "lazygraph/nn/request_error.hpp"
#include "lazygraph/nn/safetensors.hpp"
#include "lazygraph/nn/sampling.hpp"
#include "lazygraph/nn/step_model.hpp"
#include "lazygraph/nn/stop_strings.hpp"
#include "lazygraph/nn/tensor_parallel.hpp"
#include "lazygraph/nn/tensor_parallel_decoder.hpp"
#include "lazygraph/nn/text_stream.hpp"
#include "lazygraph/nn/tokenizer.hpp"
#include "lazygraph/nn/wide_step_report.hpp"
