#pragma once
/// \file
/// The hyperparameters of a Hugging Face Llama-family model (Llama, Mistral, Qwen2, Qwen3, Gemma 3 and the mixtures of
/// experts Qwen3-MoE, OLMoE and Mixtral), read from its config.json,
/// for the lazygraph::nn layer. The keys every architecture shares are read here (src/nn/config_json.cpp); each
/// architecture's own keys, and the features of its block, in its file (src/nn/architectures/, a file per model_type).
///
/// The rule: a model that loads computes what its authors' implementation computes. So every key is either read
/// (and checked), known not to change the arithmetic of inference (token ids, dropout, initialisation, generation
/// defaults, bookkeeping), or refused by name: an unknown key might change what the model computes, and is never
/// ignored. RoPE settings are read from transformers 5's `rope_parameters` object or the older top-level
/// `rope_theta` / `rope_scaling`; the rules lazygraph implements are "default", "linear" and "llama3" (rope.hpp).
/// A `quantization_config` is read as lazygraph writes it (quant_method "lazygraph", save_quantized_checkpoint): the
/// formats a quantized checkpoint stores its weights in; or as AutoAWQ (quant_method "awq": bits 4, version "gemm",
/// zero_point true) and AutoGPTQ / GPTQModel (quant_method "gptq": bits 4, checkpoint_format "gptq") write it, whose
/// 4-bit matrices DecoderCheckpoint repacks on load (PackedQuantization); or as FP8 checkpoints write it (quant_method
/// "fp8": fmt e4m3, weight_block_size [128, 128]; "compressed-tensors": float-quantized 8-bit float weights per channel
/// or in blocks of 128), whose e4m3 matrices DecoderCheckpoint reads as they are. Other methods (bitsandbytes...) and
/// other settings of these (bits 3 or 8, other packings, e5m2, static activation scales) are refused by name.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <lazygraph/nn/gate_activation.hpp>
#include <lazygraph/nn/moe_shape.hpp>
#include <lazygraph/nn/quantization_config.hpp>
#include <lazygraph/nn/rope.hpp>
#include <lazygraph/nn/safetensors.hpp>

namespace lazygraph::nn {

/// The config.json of a Llama-family model. Every count is positive once parse() or load() returned it.
struct LlamaConfig {
  std::string model_type = "llama";    ///< an architecture's model_type (docs/nn.md lists them); "llama" when absent
  int hidden_size = 0;                 ///< width of the residual stream (required key)
  int num_attention_heads = 0;         ///< query heads (required key)
  int num_key_value_heads = 0;         ///< key/value heads; num_attention_heads when the key is absent
  int num_hidden_layers = 0;           ///< decoder layers (required key)
  int intermediate_size = 0;           ///< width of the MLP (required key)
  int vocab_size = 0;                  ///< rows of the embedding (required key)
  int max_position_embeddings = 2048;  ///< longest sequence; 2048 (the transformers default) when absent
  double rope_theta = 10000;           ///< RoPE base; 10000 when absent
  RopeScaling rope_scaling;            ///< RoPE rule: rope_parameters' or rope_scaling's rope_type and parameters
  double rms_norm_eps = 1e-5;          ///< RMSNorm epsilon; 1e-5 when absent
  std::string torch_dtype;           ///< e.g. "bfloat16" (key torch_dtype, or dtype in transformers 5); empty if absent
  bool tie_word_embeddings = false;  ///< whether lm_head shares the embedding's weights
  std::string hidden_act = "silu";   ///< the MLP activation; only "silu" is accepted
  std::optional<int> head_dim;       ///< per-head width when given; else hidden_size / num_attention_heads
  bool attention_bias = false;       ///< q, k and v projections with biases (Qwen2 always has them)
  /// A per-head RMSNorm of q and of k before RoPE (q_norm and k_norm): set by the architecture (Qwen3), not a key.
  bool qk_norm = false;
  /// With qk_norm: q_norm and k_norm RMS-norm the whole q and k projections (gains [q_dim] and [kv_dim]) rather than
  /// each head (OLMoE's); set by the architecture, not a key.
  bool qk_norm_whole = false;
  /// A mixture of experts in every layer in place of the MLP (Qwen3-MoE, OLMoE, Mixtral): set by the architecture from
  /// its keys; nullopt for a dense model.
  std::optional<MoeShape> moe;
  std::optional<int> sliding_window;  ///< the attention window in positions where it applies; nullopt: none
  /// Per layer, whether it attends through sliding_window (layer_types, or Qwen's max_window_layers rule); empty: every
  /// layer, where sliding_window applies at all.
  std::vector<bool> sliding_layers;
  /// The RoPE base of the sliding layers where it is not rope_theta (Gemma 3's local RoPE: the default rule, no
  /// scaling); nullopt: every layer has rope_theta and rope_scaling.
  std::optional<double> local_rope_theta;
  // The block's features its architecture sets (src/nn/architectures/), from the keys it reads:
  GateActivation activation = GateActivation::silu;  ///< the MLP's gate (Gemma 3: GeGLU, hidden_activation)
  bool post_norms = false;     ///< Gemma 3's norms of the attention and MLP outputs before the residual adds
  double embedding_scale = 1;  ///< the embedded rows' factor (Gemma 3: sqrt(hidden_size))
  std::optional<double> query_pre_attn_scalar;    ///< the scores' scale is its -1/2 power where set (Gemma 3)
  std::optional<double> final_logit_softcapping;  ///< logits = tanh(logits / cap) * cap where set
  double gain_offset = 0;                         ///< norm weights are stored as w meaning gain_offset + w (Gemma 3: 1)
  std::optional<int> bos_token_id;                ///< the first token of a prompt, when given; below vocab_size
  std::vector<int> eos_token_ids;  ///< the tokens that end a generation (eos_token_id: one id or a list); each
                                   ///< below vocab_size
  /// quantization_config: the formats the checkpoint stores its quantized weights in (quant_method "lazygraph",
  /// layout_version quantized_layout_version, at least one class quantized); nullopt when absent (dense weights).
  /// For an AWQ or GPTQ checkpoint: the formats its packed matrices are repacked into, every class at first
  /// (PackedQuantization::format()); DecoderCheckpoint::open keeps the classes whose tensors are packed.
  std::optional<DecoderQuantization> quantization;
  /// An AWQ or GPTQ checkpoint's quantization_config (quantization is then set too); nullopt otherwise.
  std::optional<PackedQuantization> packed;
  /// lazygraph_save_id (kSaveIdKey): the identifier of the lazygraph save that wrote this config.json with its weights
  /// (save_quantized_checkpoint, save_seeded_checkpoint); empty when absent. DecoderCheckpoint::open refuses a folder
  /// whose weights record another one: its config.json and weights come from different saves.
  std::string save_id;

  /// The per-head width: head_dim when set, else hidden_size / num_attention_heads. Precondition: the config
  /// is valid (num_attention_heads > 0), as parse() and load() return it.
  [[nodiscard]] int head_dimension() const noexcept {
    return head_dim.has_value() ? *head_dim : hidden_size / num_attention_heads;
  }

  /// Parses the text of a config.json; `source` only names the file in errors. Throws CheckpointError naming
  /// `source` and the key when the text is not a JSON object; a required key (hidden_size, num_attention_heads,
  /// num_hidden_layers, intermediate_size, vocab_size) is missing; a count is not a positive integer within its
  /// bound (hidden_size, intermediate_size at most 2^20, heads at most 4096, head_dim at most 1024, layers at most
  /// 1024, vocab_size at most 2^24, max_position_embeddings at most 2^24); rope_theta or rms_norm_eps is not a
  /// positive number that float holds as a normal finite value; a string or boolean key has another type;
  /// model_type is not one of the architectures' (docs/nn.md), or architectures names another class; hidden_act is
  /// not "silu"; a mixture of experts' key out of bounds or naming arithmetic lazygraph lacks (num_experts_per_tok
  /// above the experts, decoder_sparse_step other than 1, mlp_only_layers, OLMoE's clip_qkv);
  /// attention_bias is true where it also biases o_proj (all but qwen2) or false for qwen2;
  /// mlp_bias is true; bos_token_id or an eos_token_id is not below vocab_size (naming the key and the id); a RoPE
  /// type other than default, linear or llama3, a RoPE parameter it does not use, or
  /// rope_parameters and the top-level keys disagreeing; num_attention_heads is not a multiple of
  /// num_key_value_heads, or (without head_dim) hidden_size not a multiple of num_attention_heads; a
  /// quantization_config whose quant_method is not "lazygraph", "awq", "gptq", "fp8" or "compressed-tensors" (the
  /// message names it); an fp8 or compressed-tensors one other than docs/models.md's "FP8 checkpoints"; an awq or gptq
  /// one with bits other than 4, a group_size other than 32, 64 or 128, another packing (awq's version or backend,
  /// gptq's checkpoint_format, pack_dtype, dynamic), zero_point false, or a key it does not know; a lazygraph one
  /// whose layout_version is not
  /// quantized_layout_version, that quantizes nothing, or that holds a format lazygraph does not store (kind int8 or
  /// int4; int4 groups of 32, 64 or 128; scale_type float16 or bfloat16) or a key it does not know (even with a null
  /// value); any key this reader does not know (the message says to remove it if it does not change the
  /// arithmetic); or a text of more than 65536 JSON values (refused while parsing, before they are built).
  [[nodiscard]] static LlamaConfig parse(std::string_view json_text, const std::filesystem::path& source);

  /// Reads and parses `file_or_dir` (a folder means its config.json). Throws CheckpointError when the file cannot
  /// be read (with strerror) or parse() refuses it.
  [[nodiscard]] static LlamaConfig load(const std::filesystem::path& file_or_dir);

  /// This config as config.json text (indented, RoPE settings as transformers 5's rope_parameters), which parse()
  /// reads back to an equal config. Optional keys are written only when set.
  [[nodiscard]] std::string to_json() const;

  /// Whether every field is equal.
  friend bool operator==(const LlamaConfig&, const LlamaConfig&) = default;
};

}  // namespace lazygraph::nn
