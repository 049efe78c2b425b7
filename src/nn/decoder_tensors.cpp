#include "lazygraph/nn/decoder_tensors.hpp"

#include <string_view>

namespace lazygraph::nn {

std::string stacked_qkv_name(const std::string& q_name) {
  std::string name = q_name;
  const std::size_t at = name.find("q_proj");
  return at == std::string::npos ? name + ".qkv" : name.replace(at, 1, "qkv");
}

std::string stacked_experts_name(const std::string& first_expert_name) {
  std::string name = first_expert_name;
  const std::size_t at = name.find(".experts.");
  if (at == std::string::npos) return name + ".experts";
  const std::size_t index = at + std::string_view(".experts.").size();
  const std::size_t end = name.find('.', index);
  return name.replace(index, end == std::string::npos ? std::string::npos : end - index, "*");
}

bool stacked_with_next(const std::vector<DecoderTensor>& tensors, std::size_t i) {
  using Role = DecoderTensorRole;
  const Role role = tensors.at(i).role;
  if (role == Role::wq || role == Role::wk) return true;
  const bool expert = role == Role::moe_w1 || role == Role::moe_w3 || role == Role::moe_w2;
  return expert && i + 1 < tensors.size() && tensors[i + 1].role == role && tensors[i + 1].layer == tensors[i].layer;
}

std::vector<std::int64_t> DecoderTensor::shape() const {
  if (role == DecoderTensorRole::attention_gain || role == DecoderTensorRole::mlp_gain ||
      role == DecoderTensorRole::final_gain || role == DecoderTensorRole::attention_post_gain ||
      role == DecoderTensorRole::mlp_post_gain) {
    return {cols};
  }
  if (role == DecoderTensorRole::bq || role == DecoderTensorRole::bk || role == DecoderTensorRole::bv ||
      role == DecoderTensorRole::q_norm || role == DecoderTensorRole::k_norm) {
    return {rows};
  }
  return {rows, cols};
}

std::vector<DecoderTensor> decoder_tensors(const DecoderConfig& c) {
  c.validate();
  using Role = DecoderTensorRole;
  std::vector<DecoderTensor> out;
  const auto matrix = [&](std::string name, Role role, int layer, int rows, int cols, std::uint32_t id) {
    out.push_back(
        {std::move(name), role, layer, rows, cols, matrix_spec(id, rows, cols), role == Role::wq || role == Role::wk});
  };
  const auto gain = [&](std::string name, Role role, int layer, std::uint32_t id) {
    out.push_back({std::move(name), role, layer, 1, c.d, gain_spec(id, c.d), false, c.gain_offset});
  };
  out.push_back({"model.embed_tokens.weight", Role::embedding, -1, c.vocab, c.d,
                 TensorSpec{1000000, static_cast<std::size_t>(c.vocab) * static_cast<std::size_t>(c.d), 1.0F, 0.0F},
                 false});
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const auto id = [&](std::uint32_t slot) { return 16U * static_cast<std::uint32_t>(l) + slot; };
    gain(p + "input_layernorm.weight", Role::attention_gain, l, id(1));
    matrix(p + "self_attn.q_proj.weight", Role::wq, l, c.q_dim(), c.d, id(2));
    matrix(p + "self_attn.k_proj.weight", Role::wk, l, c.kv_dim(), c.d, id(3));
    matrix(p + "self_attn.v_proj.weight", Role::wv, l, c.kv_dim(), c.d, id(4));
    matrix(p + "self_attn.o_proj.weight", Role::wo, l, c.d, c.q_dim(), id(5));
    if (c.qkv_bias) {
      // Seeded biases: uniform in [-0.5, 0.5), about the size of the products they are added to.
      const auto bias = [&](std::string name, Role role, int size, std::uint32_t slot) {
        out.push_back({std::move(name), role, l, size, 1,
                       TensorSpec{id(slot), static_cast<std::size_t>(size), 0.5F, 0.0F}, role != Role::bv});
      };
      bias(p + "self_attn.q_proj.bias", Role::bq, c.q_dim(), 10);
      bias(p + "self_attn.k_proj.bias", Role::bk, c.kv_dim(), 11);
      bias(p + "self_attn.v_proj.bias", Role::bv, c.kv_dim(), 12);
    }
    if (c.qk_norm) {
      // A gain per element of a head, or (qk_norm_whole) of the whole q or k, in the heads' interleaved RoPE order
      // (rope_rows).
      const auto norm_gain = [&](std::string name, Role role, int size, std::uint32_t slot) {
        out.push_back({std::move(name), role, l, size, 1, gain_spec(id(slot), size), true, c.gain_offset});
      };
      norm_gain(p + "self_attn.q_norm.weight", Role::q_norm, c.qk_norm_whole ? c.q_dim() : c.head_dim(), 13);
      norm_gain(p + "self_attn.k_norm.weight", Role::k_norm, c.qk_norm_whole ? c.kv_dim() : c.head_dim(), 14);
    }
    if (c.post_norms) gain(p + "post_attention_layernorm.weight", Role::attention_post_gain, l, id(15));
    gain(p + (c.post_norms ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"), Role::mlp_gain, l,
         id(6));
    if (c.mixture_of_experts()) {
      // Seeded ids apart from the others (docs/nn.md): 3 * experts + 1 per layer from 3000000.
      const auto experts = static_cast<std::uint32_t>(c.moe.experts);
      const auto moe_id = [&](std::uint32_t slot) {
        return 3000000U + static_cast<std::uint32_t>(l) * (3U * experts + 1U) + slot;
      };
      const bool mixtral = c.moe.names == MoeTensorNames::block_sparse_moe;
      const std::string block = p + (mixtral ? "block_sparse_moe." : "mlp.");
      const auto expert = [&](std::uint32_t e, const char* qwen, const char* mistral) {
        return block + "experts." + std::to_string(e) + "." + (mixtral ? mistral : qwen) + ".weight";
      };
      matrix(block + "gate.weight", Role::moe_router, l, c.moe.experts, c.d, moe_id(0));
      const int width = c.moe.expert_width;
      for (std::uint32_t e = 0; e < experts; ++e) {
        matrix(expert(e, "gate_proj", "w1"), Role::moe_w1, l, width, c.d, moe_id(1 + e));
      }
      for (std::uint32_t e = 0; e < experts; ++e) {
        matrix(expert(e, "up_proj", "w3"), Role::moe_w3, l, width, c.d, moe_id(1 + experts + e));
      }
      for (std::uint32_t e = 0; e < experts; ++e) {
        matrix(expert(e, "down_proj", "w2"), Role::moe_w2, l, c.d, width, moe_id(1 + 2 * experts + e));
      }
    } else {
      matrix(p + "mlp.gate_proj.weight", Role::w1, l, c.ffn, c.d, id(7));
      matrix(p + "mlp.up_proj.weight", Role::w3, l, c.ffn, c.d, id(8));
      matrix(p + "mlp.down_proj.weight", Role::w2, l, c.d, c.ffn, id(9));
    }
    if (c.post_norms) gain(p + "post_feedforward_layernorm.weight", Role::mlp_post_gain, l, id(0));
  }
  gain("model.norm.weight", Role::final_gain, -1, 1000001);
  matrix("lm_head.weight", Role::lm_head, -1, c.vocab, c.d, 1000002);
  return out;
}

// BasicDecoderWeights::generate lives here, beside the tensor list it fills: decoder_weights.hpp is below it.
template <Element T>
BasicDecoderWeights<T> BasicDecoderWeights<T>::generate(const Stream& stream, const BasicKernels<T>& kernels,
                                                        const DecoderConfig& c) {
  return assemble_decoder_weights<T>(stream.device(), c, [&](const DecoderTensor& t, DeviceSpan<T> into) {
    fill_tensor(stream, kernels.fill_uniform, c.seed, t.seeded, into);
  });
}

template struct BasicDecoderWeights<half>;
template struct BasicDecoderWeights<bfloat16>;

}  // namespace lazygraph::nn
