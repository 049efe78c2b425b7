#pragma once
/// \file
/// Llama-style checkpoints for the Decoder, in Hugging Face's layout: a folder with config.json and safetensors
/// weights (one file or shards), tensors named `model.layers.N.self_attn.q_proj.weight` and so on
/// (decoder_tensors.hpp lists them). Opening one reads the config and checks every tensor's presence, dtype and
/// shape on the host, before any GPU allocation; uploading converts to the decoder's element type (fp16 or bf16)
/// and reorders the q and k rows for the rope kernel while streaming through pinned staging buffers, and quantizes
/// the classes of tensors LoadOptions::quantization chooses (decoder_quantization.hpp) on the host or, given a
/// DeviceQuantizer (load_decoder gives one), on the GPU as they arrive. A quantized checkpoint
/// (save_quantized_checkpoint, quantized_save.hpp) holds those classes quantized already, its formats in
/// config.json's quantization_config, and uploads them as saved; so does a 4-bit AWQ or GPTQ checkpoint, whose packed
/// matrices are repacked on load into int4 with zero points (docs/models.md, "AWQ and GPTQ checkpoints"), and an FP8
/// one, whose e4m3 matrices are read as they are into the fp8 format ("FP8 checkpoints"). A
/// tensor-parallel rank uploads only its share of each tensor (upload_shard, load_decoder_rank). Seeded weights can be
/// written in the same layout, so the loader is tested round trip and against PyTorch.

#include <cstddef>
#include <filesystem>

#include "lazygraph/driver/communicator.hpp"
#include "lazygraph/nn/decoder.hpp"
#include "lazygraph/nn/decoder_quantization.hpp"
#include "lazygraph/nn/decoder_tensors.hpp"
#include "lazygraph/nn/llama_config.hpp"
#include "lazygraph/nn/quantized.hpp"
#include "lazygraph/nn/safetensors.hpp"

namespace lazygraph::nn {

/// What DecoderCheckpoint's uploads use inside (src/nn/checkpoint.cpp); nothing here is for users.
namespace checkpoint_upload {
/// The pinned buffers an upload goes through.
class Staging;
}  // namespace checkpoint_upload

/// How a checkpoint becomes a decoder.
struct LoadOptions {
  /// Positions the KV cache holds per sequence (with a paged cache, the most one sequence's table reaches); 0: the
  /// model's max_position_embeddings, at most 4096. \throws UsageError (from DecoderCheckpoint::open) beyond
  /// max_position_embeddings.
  int context = 0;
  /// Sequences decoded at once (DecoderConfig::max_batch, 1 to 8; with a paged cache up to 256, the steps of more than
  /// 8 rows then running as the wide step): the contiguous KV cache holds this many.
  int max_batch = 1;
  /// Print a progress bar on stderr while uploading checkpoints of at least `progress_from_bytes`.
  bool progress = true;
  /// The size from which uploads show progress.
  std::size_t progress_from_bytes = std::size_t{256} << 20U;
  /// Bytes of each of the two pinned staging buffers the upload alternates between.
  std::size_t staging_bytes = std::size_t{32} << 20U;
  /// Launch the decoder's kernels early (DecoderConfig::early_launch).
  bool early_launch = true;
  /// Run steps of 2 to 8 rows on tensor cores (DecoderConfig::tensor_cores).
  bool tensor_cores = false;
  /// Positions per block of a paged KV cache (DecoderConfig::kv_block_size: 16 or 32), or 0 (the default) for the
  /// contiguous cache of max_batch x context positions. Paged, `context` may reach kMaxPagedContext (and the model's
  /// max_position_embeddings), and a config the paged cache does not run is refused (CheckpointError naming
  /// config.json). A sliding window is then capped at kMaxPagedContext, not kMaxContext.
  int kv_block_size = 0;
  /// Blocks of the paged cache's pool (DecoderConfig::kv_blocks): at least 1 with kv_block_size, else 0.
  int kv_blocks = 0;
  /// Blocks per (row, head) of attention (DecoderConfig::attention_blocks): 1 by default; 0 splits by the context
  /// (paged: the grouped kernels, split as the library picks), which a paged context beyond about 46k positions needs.
  int attention_blocks = 1;
  /// Keep every layer's routes of a mixture of experts for Decoder::last_routes (DecoderConfig::record_routes);
  /// refused (CheckpointError) for a model without one.
  bool record_routes = false;
  /// Which classes of tensors to quantize as they are uploaded, and how (none by default). Checked by
  /// DecoderCheckpoint::open against the model's shapes, and by upload against its element type's scale type, both
  /// before anything is allocated. A quantized checkpoint (its config.json has a
  /// quantization_config) is uploaded as it was saved: this must then be empty (nothing quantized) or equal to the
  /// checkpoint's own quantization.
  DecoderQuantization quantization;
};

/// A checkpoint folder, checked against the decoder it describes. Holds the safetensors files mapped.
class DecoderCheckpoint {
 public:
  /// Reads `directory`/config.json and the safetensors weights, and checks, without touching the GPU, that the
  /// config is one the kernels run (LlamaConfig::parse's rules, then: biases only as Qwen2 has them, on q, k and v; a
  /// sliding window, if any, at least the context) and that every tensor of decoder_tensors() is present with dtype
  /// F16, BF16 or F32 and its shape. A tied model reads its LM head from the embedding (a stored lm_head.weight must
  /// equal it). A quantized checkpoint (config.json's quantization_config, which becomes quantization()) holds each
  /// quantized matrix of quantized_layouts() as the tensors of quantized_checkpoint.hpp instead of the dense ones,
  /// checked as require_quantized checks them. An AWQ or GPTQ checkpoint (LlamaConfig::packed) holds a class's
  /// matrices packed where their modules have `.qweight` (`.qzeros`, `.scales`, GPTQ's `.g_idx`), dense where they
  /// have `.weight`; quantization() (and llama_config().quantization) keeps the packed classes, in
  /// PackedQuantization::format(), and every packed tensor is checked (dtype I32 or F16, shape, every scale finite
  /// and >= 0, GPTQ's zero points at most 15, g_idx the grouping input / group_size). An FP8 one's packed matrices
  /// are the modules whose `.weight` is F8_E4M3, each with its `.weight_scale_inv` (fp8) or `.weight_scale`
  /// (compressed-tensors), checked likewise (shapes, scales finite, > 0 and within the scale type times 2^8, no e4m3
  /// NaN byte). Every other tensor is refused
  /// by name, except rotary_emb.inv_freq
  /// buffers that hold the config's RoPE frequencies. A quantized matrix's bytes are checked against its format's
  /// rules too (require_quantized: scales, zero points, int8 values), on the host, so that no upload fails on them.
  /// \throws CheckpointError naming the file, the tensor and what was expected (a quantized weight's saved description
  /// that is not its format in config.json, a missing part, bytes its format does not allow, a dense tensor of a class
  /// the checkpoint stores quantized, a class mixing packed and dense matrices, a packed module that AWQ's
  /// modules_to_not_convert names...); CheckpointError naming config.json when an AWQ or GPTQ checkpoint packs
  /// nothing, or when it and the weights record different
  /// save ids (LlamaConfig::save_id, Checkpoint::save_id: a save into the folder was interrupted between the two);
  /// UsageError for options.context beyond the model's
  /// max_position_embeddings; UsageError naming the tensor when a format of options.quantization cannot apply to it
  /// (quantized_layouts); UsageError
  /// when the checkpoint is quantized and options.quantization asks for anything else, naming both.
  [[nodiscard]] static DecoderCheckpoint open(const std::filesystem::path& directory, const LoadOptions& options = {});

  /// The decoder the checkpoint describes (seed unused).
  [[nodiscard]] const DecoderConfig& config() const noexcept { return config_; }
  /// The config.json it was read from.
  [[nodiscard]] const LlamaConfig& llama_config() const noexcept { return llama_; }
  /// The safetensors files.
  [[nodiscard]] const Checkpoint& weights() const noexcept { return weights_; }
  /// The tensor each decoder weight is read from, in decoder_tensors() order; nullptr for a weight that a quantized
  /// checkpoint holds quantized (read_quantized reads it, under its quantized_layouts() name).
  [[nodiscard]] const std::vector<const TensorInfo*>& sources() const noexcept { return sources_; }
  /// What upload quantizes, and how: LoadOptions::quantization, or a quantized checkpoint's own.
  [[nodiscard]] const DecoderQuantization& quantization() const noexcept { return options_.quantization; }
  /// Whether the checkpoint holds its quantized matrices quantized already (config.json has a quantization_config).
  [[nodiscard]] bool quantized_as_saved() const noexcept { return llama_.quantization.has_value(); }
  /// The quantized matrices, quantized_layouts(config(), quantization()).
  [[nodiscard]] const std::vector<QuantizedLayout>& quantized_layouts() const noexcept { return layouts_; }
  /// Quantized matrix `index` of quantized_layouts() on the host, what upload puts on the device: read as saved
  /// (read_quantized) from a quantized checkpoint; repacked from an AWQ or GPTQ checkpoint's packed tensors (q, k and
  /// v stacked, q and k rows reordered, each weight's (q - zero) * scale as stored); else its tensors (q, k and v of a
  /// layer together, rows stacked, q and k rows reordered as upload reorders them) read as floats and quantized with
  /// quantize() and quantization().options. \throws UsageError for an index out of range; CheckpointError naming the
  /// file and the matrix when a weight cannot be quantized (not finite, or a group beyond the scale type's range), or
  /// naming the part when saved bytes break their format's rules (a scale that is not finite, a zero point above 15, an
  /// int8 byte 0): open() checked them, so only a file changed in place since can hold such bytes.
  [[nodiscard]] QuantizedWeight quantized_weight(std::size_t index) const;
  /// Bytes the uploaded weights hold on the device: 2 per element of a dense tensor (fp16 and bf16 alike), each
  /// quantized matrix's bytes (decoder_device_bytes). The progress bar counts the same bytes.
  [[nodiscard]] std::size_t device_bytes() const noexcept { return device_bytes_; }

  /// Allocates the weights on `stream`'s device and uploads them as T (fp16 or bf16) through pinned staging,
  /// waiting for the copies before it returns. Tensors of another dtype are rounded to the nearest T (a BF16
  /// checkpoint loads into a bf16 decoder unchanged, into an fp16 one rounded to fp16's 11 bits).
  /// The matrices of quantized_layouts() are made on the host instead (quantized_weight: read as saved, or quantized
  /// there) and uploaded as DeviceQuantizedWeights; their dense buffers stay empty. Host memory for that: the largest
  /// such matrix in floats and quantized.
  /// \throws UsageError, before anything is allocated, when a chosen format's scale type is not T's
  ///         (check_quantization); CheckpointError naming the tensor and the value when a finite one is not finite in
  ///         T, and as quantized_weight (nothing stays allocated then); CudaError when the device runs out of memory.
  template <Element T = half>
  [[nodiscard]] BasicDecoderWeights<T> upload(const Stream& stream) const;

  /// upload, with the matrices LoadOptions::quantization chooses quantized on the GPU by `quantizer` instead of on
  /// the host: their tensors go through the same pinned staging as they are stored (F32, F16 or BF16; F32 for a
  /// stacked q, k and v whose tensors differ in dtype), rows stacked and reordered as the host route reads them, and
  /// are quantized where they lie, the same bytes as upload(stream) makes (DeviceQuantizer's promise). The progress
  /// bar counts the same bytes. Temporary device memory, freed matrix by matrix: the largest chosen matrix in its
  /// stored dtype, plus DeviceQuantizer's. A quantized checkpoint is uploaded as saved either way.
  /// \throws as upload(stream); a weight that cannot be quantized is a CheckpointError naming the matrix, with its
  ///         row and column in it (the stream drained and nothing left allocated).
  template <Element T = half>
  [[nodiscard]] BasicDecoderWeights<T> upload(const Stream& stream, const DeviceQuantizer& quantizer) const;

  /// \throws UsageError unless upload_shard(stream, rank, ranks) can load this checkpoint: its model splits over
  /// `ranks` (check_tensor_split), `rank` is in [0, ranks), and the quantization (LoadOptions::quantization, or the
  /// checkpoint's as saved) fits the rank's shares (check_quantized_split). Reads nothing but the config, so a launcher
  /// can check before it makes streams or communicators.
  void check_shard(int rank, int ranks) const;

  /// Rank `rank` of `ranks`'s share of the weights (tensor parallelism, decoder_rank.hpp), allocated on `stream`'s
  /// device as T: the bytes shard_decoder_weights(stream, upload<T>(stream), config(), rank, ranks) gives, in the
  /// shapes of shard_config(config(), ranks). Dense tensors are read straight from the mapped files: only the rank's
  /// rows of each tensor (whole heads of q and k, reordered as upload reorders them) and, for Wo and W2, its columns of
  /// every row, through the same pinned staging. A quantized matrix is made whole as upload makes it (read as saved,
  /// or quantized on the host), one at a time, and the rank keeps its share (shard_quantized): every rank reads the
  /// quantized classes' tensors whole, since an int8 row's scale depends on the whole row (an AWQ or GPTQ
  /// checkpoint's packed matrices are repacked whole too). The progress bar counts the share's bytes. Waits for the
  /// copies. \throws UsageError as check_shard and as upload's check_quantization, before anything is allocated;
  ///         CheckpointError as upload (nothing stays allocated then); CudaError when the device runs out of memory.
  template <Element T = half>
  [[nodiscard]] BasicDecoderWeights<T> upload_shard(const Stream& stream, int rank, int ranks) const;

  /// upload_shard, with each quantized matrix that LoadOptions::quantization chooses quantized on the GPU by
  /// `quantizer` (as upload(stream, quantizer)); the same bytes. The rank reads and quantizes only its rows of a
  /// matrix, or its columns where the format is int4 (whole groups: each row's groups are the same either way); an int8
  /// Wo or W2 is quantized whole and the rank keeps its columns, as an int8 row's scale depends on the whole row.
  /// \throws as upload_shard(stream, rank, ranks) and upload(stream, quantizer).
  template <Element T = half>
  [[nodiscard]] BasicDecoderWeights<T> upload_shard(const Stream& stream, const DeviceQuantizer& quantizer, int rank,
                                                    int ranks) const;

 private:
  DecoderCheckpoint(LlamaConfig llama, DecoderConfig config, Checkpoint weights, LoadOptions options);
  /// Both uploads: the chosen matrices quantized by `quantizer`, or on the host when it is null.
  template <Element T>
  [[nodiscard]] BasicDecoderWeights<T> upload_with(const Stream& stream, const DeviceQuantizer* quantizer) const;
  /// Both upload_shards: as upload_with.
  template <Element T>
  [[nodiscard]] BasicDecoderWeights<T> upload_shard_with(const Stream& stream, const DeviceQuantizer* quantizer,
                                                         int rank, int ranks) const;
  /// Quantized matrix `index` of quantized_layouts() whole on the device: read as saved, or quantized by `quantizer`
  /// (on the host when it is null) from the tensors staged through `buffers`. Drains the stream when it throws.
  template <Element T>
  [[nodiscard]] DeviceQuantizedWeight<T> whole_matrix(const Stream& stream, const DeviceQuantizer* quantizer,
                                                      std::size_t index, checkpoint_upload::Staging& buffers) const;
  /// Rank `rank` of `ranks`'s share (laid out as `share`) of quantized matrix `index`, whose first tensor is `first`.
  /// Quantized on the device from the rank's rows, or whole int4 groups of its columns, alone: the same bytes as the
  /// share of the matrix quantized whole. Else (an int8 column share, whose row scales need every column; quantizing
  /// on the host; a checkpoint saved quantized) the whole matrix, then its share (shard_quantized). Drains the stream
  /// when it throws.
  template <Element T>
  [[nodiscard]] DeviceQuantizedWeight<T> matrix_share(const Stream& stream, const DeviceQuantizer* quantizer,
                                                      std::size_t index, const DecoderTensor& first,
                                                      const QuantizedLayout& share, int rank, int ranks,
                                                      checkpoint_upload::Staging& buffers) const;
  /// upload's check_quantization for T, naming what the checkpoint was saved as.
  template <Element T>
  void check_quantization_for() const;
  /// Refuses a stored lm_head.weight of a tied model unless it equals the embedding.
  void check_tied_head(const TensorInfo& head) const;
  /// Refuses a stored rotary_emb.inv_freq unless it holds the config's RoPE frequencies.
  void check_inv_freq(const TensorInfo& info) const;

  LlamaConfig llama_;
  DecoderConfig config_;
  Checkpoint weights_;
  LoadOptions options_;
  std::vector<DecoderTensor> tensors_;
  std::vector<const TensorInfo*> sources_;
  std::vector<QuantizedLayout> layouts_;
  std::vector<std::vector<std::size_t>> matrix_parts_;  // per layout: its tensors' indices in tensors_ (not as saved)
  std::size_t device_bytes_ = 0;
};

/// A decoder over elements of T (fp16 by default; `load_decoder<bfloat16>` for bf16) with a checkpoint's weights:
/// DecoderCheckpoint::open, then upload, quantizing what LoadOptions::quantization chooses on the GPU (a
/// DeviceQuantizer of `library`, which must hold nn::kernel_set() as the decoder needs). \throws as
/// DecoderCheckpoint::open and upload do.
template <Element T = half>
BasicDecoder<T> load_decoder(const Stream& stream, const KernelLibrary& library, const std::filesystem::path& directory,
                             const LoadOptions& options = {});

/// Rank comm.rank() of comm.size() of the checkpoint's decoder split over tensor-parallel ranks:
/// DecoderCheckpoint::open, upload_shard(stream, comm.rank(), comm.size()) (each rank reads its share of the files, not
/// the whole model), then BasicDecoder's rank constructor. Every rank calls it at the same time, each from its own
/// thread or process, with the same directory and options: the constructor captures a graph whose collectives meet
/// those of the other ranks. `parallel`: the rank's memory for its collectives (TensorParallelOptions), the same on
/// every rank. With TensorParallelOptions::peer_all_reduce (the default), the ranks then make a PeerExchange together
/// (PeerExchange::create: ranks that are processes of one machine whose GPUs reach each other's memory), and the step
/// all-reduces through it; where any rank cannot, every rank uses NCCL (the decoder's peer_all_reduce() says which).
/// Quantized matrices are quantized on the GPU as load_decoder does (a DeviceQuantizer of `library`).
/// \throws as DecoderCheckpoint::open, upload_shard (a model or a quantization that does not split),
/// PeerExchange::create and the rank constructor.
template <Element T = half>
BasicDecoder<T> load_decoder_rank(const Stream& stream, const KernelLibrary& library,
                                  const std::filesystem::path& directory, const Communicator& comm,
                                  const LoadOptions& options = {}, const TensorParallelOptions& parallel = {});

/// Writes the seeded weights of `config` (docs/nn.md) as a checkpoint folder in Hugging Face's layout (model_type
/// llama, qwen2 for a config with qkv_bias, qwen3 for one with qk_norm; with a mixture of experts qwen3_moe for one
/// with qk_norm, olmoe for one with qk_norm_whole, mixtral for one without, whose MoeShape::names must be that
/// architecture's):
/// config.json and model.safetensors, tensors in `dtype`, q and k rows in rotate-half order: F16 and F32 hold the
/// seeded fp16 values (host_tensor<half>), BF16 the seeded bf16 values (host_tensor<bfloat16>), so an F16 checkpoint
/// loads into the seeded Decoder and a BF16 one into the seeded DecoderBf16 bit for bit. Runs on the host; the
/// folder is created. The files of an earlier save there are replaced as write_safetensors_folder replaces them
/// (config.json last, every file recording the save's id: no failure or crash leaves a folder that loads mixed;
/// symbolic links there are replaced, never written through).
/// \throws UsageError for an invalid config, another dtype, both qkv_bias and qk_norm (no architecture has both), a
///         mixture of experts none of Qwen3-MoE's, OLMoE's and Mixtral's (as above; Mixtral's renormalizes), or
///         qk_norm_whole without a mixture of experts or with q_dim other than d (OLMoE's);
///         CheckpointError when writing fails (the folder is then as it was).
void save_seeded_checkpoint(const std::filesystem::path& directory, const DecoderConfig& config,
                            DType dtype = DType::f16);

}  // namespace lazygraph::nn
