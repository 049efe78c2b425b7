#pragma once
/// \file
/// Layer 6, nn: saving a decoder checkpoint quantized, so that a model is quantized once rather than at every load.
/// The folder is one DecoderCheckpoint::open reads back as it was saved: config.json is the source's with a
/// `quantization_config` added, e.g.
///
///     "quantization_config": {"quant_method": "lazygraph", "layout_version": 1,
///                             "attention": {"kind": "int8", "scale_type": "float16"},
///                             "mlp": {"kind": "int4", "group": 128, "asymmetric": false, "scale_type": "float16"},
///                             "lm_head": null, "clip_search": false}
///
/// and model.safetensors (or, past the shard size, shards with an index as Hugging Face writes them:
/// write_safetensors_folder) holds the dense tensors the decoder reads, as the source stores them (dtype and bytes),
/// and each quantized matrix of DecoderCheckpoint::quantized_layouts() as its quantized_checkpoint.hpp tensors under
/// its layout's name: a layer's q, k and v as ONE matrix, "model.layers.L.self_attn.qkv_proj.weight" (its rows q's, k's
/// and v's, those of q and k in the decoder's interleaved order), each other matrix under its own name (a tied model's
/// quantized LM head as "lm_head.weight", quantized from the embedding). Only lazygraph reads these files: the
/// layout is its kernels' (quantized.hpp), not GPTQ's, AWQ's or any other method's, and it reads no other.

#include <filesystem>

#include "lazygraph/nn/checkpoint.hpp"

namespace lazygraph::nn {

/// Writes `source` quantized as source.quantization() says, as the folder `directory` (created; a config.json and the
/// safetensors of an earlier save there are replaced as write_safetensors_folder replaces them: config.json last,
/// every file recording the save's id, so that no failure or crash leaves a folder that loads mixed, and symbolic
/// links replaced, never written through) that DecoderCheckpoint::open reads back, in shards of at most
/// `max_shard_bytes` of tensor data when they do not fit one file (write_safetensors_folder): each quantized matrix is
/// source.quantized_weight(i), the bytes upload would put on the device (quantized on the host with quantize()'s
/// threads, or copied from a quantized source), and a decoder loaded from the folder computes what one uploaded from
/// `source` with the same quantization does, bit for bit. Runs on the host; holds every quantized matrix in host
/// memory until the file is written (about a quarter of the dense fp16 bytes for int4).
/// \throws UsageError, before anything is written, when source.quantization() quantizes nothing, `directory` is the
///         source's folder, or max_shard_bytes is 0; CheckpointError as DecoderCheckpoint::quantized_weight, and naming
///         the file when writing fails (the folder is then as it was).
void save_quantized_checkpoint(const DecoderCheckpoint& source, const std::filesystem::path& directory,
                               std::size_t max_shard_bytes = kDefaultShardBytes);

}  // namespace lazygraph::nn
