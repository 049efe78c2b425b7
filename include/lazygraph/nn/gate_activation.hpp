#pragma once
/// \file
/// Layer 6, nn: the gate of a gated MLP, act = gate(W1 h) * (W3 h): what an architecture chooses (DecoderConfig::
/// activation) and which kernels run it (rms_norm_gemv_swiglu or rms_norm_gemv_geglu, and their quantized kin).

namespace lazygraph::nn {

/// The gate of a gated MLP.
enum class GateActivation {
  silu,       ///< SwiGLU: silu(a) = a / (1 + e^-a) (Llama, Mistral, Qwen)
  gelu_tanh,  ///< GeGLU: GELU's tanh form, a / 2 (1 + tanh(sqrt(2 / pi) (a + 0.044715 a^3))) (Gemma 3)
};

}  // namespace lazygraph::nn
