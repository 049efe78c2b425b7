#include "lazygraph/nn/quantized_save.hpp"

#include <string>
#include <system_error>
#include <vector>

#include "lazygraph/nn/quantized_checkpoint.hpp"
#include "model_folder.hpp"

namespace lazygraph::nn {

void save_quantized_checkpoint(const DecoderCheckpoint& source, const std::filesystem::path& directory,
                               std::size_t max_shard_bytes) {
  const DecoderQuantization& quantization = source.quantization();
  const std::filesystem::path& from = source.weights().path();
  if (max_shard_bytes == 0) throw UsageError("save_quantized_checkpoint: max_shard_bytes must be positive");
  if (!quantization.any()) {
    throw UsageError("save_quantized_checkpoint: the checkpoint " + from.string() +
                     " quantizes nothing: open it with LoadOptions::quantization choosing the formats to save");
  }
  std::error_code error;
  if (std::filesystem::equivalent(directory, from, error)) {
    throw UsageError("save_quantized_checkpoint: " + directory.string() + " is the source checkpoint's folder (" +
                     from.string() + "); save into another folder");
  }
  const std::vector<QuantizedLayout>& layouts = source.quantized_layouts();
  std::vector<QuantizedWeight> weights;
  weights.reserve(layouts.size());  // QuantizedTensors view them: no reallocation
  std::vector<QuantizedTensors> parts;
  parts.reserve(layouts.size());
  std::vector<TensorToWrite> out;
  // In decoder_tensors() order, each quantized matrix where its last tensor is (q and k go with v, a layer's experts
  // of one kind with their last).
  const std::vector<DecoderTensor> tensors = decoder_tensors(source.config());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const DecoderTensor& t = tensors[i];
    if (quantization.format_of(t.role)) {
      if (stacked_with_next(tensors, i)) continue;
      weights.push_back(source.quantized_weight(weights.size()));
      const std::vector<TensorToWrite>& saved = parts.emplace_back(weights.back()).tensors();
      out.insert(out.end(), saved.begin(), saved.end());
      continue;
    }
    const TensorInfo& info = *source.sources()[i];
    if (info.name != t.name) continue;  // a tied LM head: config.json says to read the embedding
    out.push_back({t.name, info.dtype, info.shape, source.weights().data(info)});
  }
  LlamaConfig config = source.llama_config();
  config.quantization = quantization;
  config.packed.reset();  // an AWQ, GPTQ or FP8 source's matrices are saved in lazygraph's own format
  config.save_id = detail::new_save_id();
  detail::save_model_folder(directory, out, max_shard_bytes, {{"format", "pt"}}, config.save_id, config.to_json());
}

}  // namespace lazygraph::nn
