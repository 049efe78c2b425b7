#include "lazygraph/nn/checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unistd.h>

#include "formats/storage_format.hpp"
#include "json_util.hpp"
#include "lazygraph/nn/decoder_rank.hpp"
#include "lazygraph/nn/quantized_checkpoint.hpp"
#include "methods/packed_method.hpp"
#include "model_folder.hpp"
#include "packed_int4.hpp"

namespace lazygraph::nn {

namespace {

constexpr DType kLoadable[] = {DType::f16, DType::bf16, DType::f32};

/// The decoder config.json describes, for a KV cache of `context` positions (0: the model's, at most 4096).
DecoderConfig decoder_config(const LlamaConfig& l, int context, const std::filesystem::path& file,
                             const LoadOptions& options) {
  const auto refuse = [&](const std::string& why) {
    throw CheckpointError(file, "", "lazygraph's decoder cannot run this model: " + why);
  };
  if (context > l.max_position_embeddings) {
    throw UsageError("LoadOptions::context (" + std::to_string(context) + ") is beyond the model's " +
                     "max_position_embeddings (" + std::to_string(l.max_position_embeddings) + ") in " + file.string());
  }
  if (context < 0) throw UsageError("LoadOptions::context (" + std::to_string(context) + ") is negative");
  DecoderConfig c;
  c.d = l.hidden_size;
  c.heads = l.num_attention_heads;
  c.kv_heads = l.num_key_value_heads;
  c.layers = l.num_hidden_layers;
  c.ffn = l.intermediate_size;
  c.vocab = l.vocab_size;
  c.context = context > 0 ? context : std::min(l.max_position_embeddings, 4096);
  c.head_width = l.head_dimension();
  c.theta = static_cast<float>(l.rope_theta);
  c.rope_scaling = l.rope_scaling;
  c.eps = static_cast<float>(l.rms_norm_eps);
  c.qkv_bias = l.attention_bias;
  c.qk_norm = l.qk_norm;
  c.qk_norm_whole = l.qk_norm_whole;
  // The block's features its architecture read (src/nn/architectures/).
  c.activation = l.activation;
  c.post_norms = l.post_norms;
  c.embedding_scale = static_cast<float>(l.embedding_scale);
  c.attention_scale = l.query_pre_attn_scalar ? static_cast<float>(1.0 / std::sqrt(*l.query_pre_attn_scalar)) : 0.0F;
  c.logit_softcap = l.final_logit_softcapping ? static_cast<float>(*l.final_logit_softcapping) : 0.0F;
  c.gain_offset = static_cast<float>(l.gain_offset);
  if (l.moe) c.moe = *l.moe;
  c.kv_block_size = options.kv_block_size;
  c.kv_blocks = options.kv_blocks;
  c.attention_blocks = options.attention_blocks;
  if (l.sliding_window.has_value()) {  // a window at least the context masks nothing, but marks the layers' RoPE
    c.window = std::min(*l.sliding_window, c.paged() ? kMaxPagedContext : kMaxContext);
    c.sliding = l.sliding_layers;
    if (l.local_rope_theta) c.local_theta = static_cast<float>(*l.local_rope_theta);
  }
  c.max_batch = options.max_batch;
  c.early_launch = options.early_launch;
  c.tensor_cores = options.tensor_cores;
  c.record_routes = options.record_routes;
  try {
    c.validate();
  } catch (const UsageError& e) {
    refuse(e.what());
  }
  return c;
}

/// Element `i` of a tensor of `dtype` whose bytes start at `data`, as a float (unaligned reads).
float element(const std::byte* data, DType dtype, std::size_t i) {
  switch (dtype) {
    case DType::f16: {
      std::uint16_t bits = 0;
      std::memcpy(&bits, data + 2 * i, 2);
      return half{bits}.to_float();
    }
    case DType::bf16: {
      std::uint16_t bits = 0;
      std::memcpy(&bits, data + 2 * i, 2);
      return bfloat16{bits}.to_float();
    }
    default: {
      float f = 0;
      std::memcpy(&f, data + 4 * i, 4);
      return f;
    }
  }
}

/// The classes of an AWQ or GPTQ checkpoint's matrices (attention, MLP, LM head) that it holds packed (a
/// `.qweight`), in the packing's format; the others dense. \throws CheckpointError naming a tensor when a class mixes
/// packed and dense matrices, or a packed one is named in modules_to_not_convert; naming config.json when nothing is
/// packed.
DecoderQuantization packed_classes(const LlamaConfig& llama, const DecoderConfig& config, const Checkpoint& weights) {
  const PackedQuantization& packed = *llama.packed;
  const std::string method = packed_method_name(packed.method);
  DecoderQuantization out;
  const std::vector<DecoderTensor> tensors = decoder_tensors(config);
  for (const QuantizationClass c : {QuantizationClass::attention, QuantizationClass::mlp, QuantizationClass::lm_head}) {
    const DecoderTensor* packed_one = nullptr;
    const DecoderTensor* dense_one = nullptr;
    for (const DecoderTensor& t : tensors) {
      if (quantization_class(t.role) != c) continue;
      const bool tied = t.role == DecoderTensorRole::lm_head && llama.tie_word_embeddings;
      const std::string module = detail::module_of(t.name);
      if (tied || !detail::holds_packed(weights, packed, module)) {
        if (dense_one == nullptr) dense_one = &t;
        continue;
      }
      if (packed_one == nullptr) packed_one = &t;
      for (const std::string& skip : packed.modules_to_not_convert) {
        if (module.find(skip) == std::string::npos) continue;
        const TensorInfo& q = *weights.find(detail::packed_name(packed, module));
        throw CheckpointError(weights.file_of(q).path(), q.name,
                              "is packed, but quantization_config.modules_to_not_convert names it (\"" + skip + "\")");
      }
    }
    if (packed_one != nullptr && dense_one != nullptr) {
      const TensorInfo& q = *weights.find(detail::packed_name(packed, detail::module_of(packed_one->name)));
      throw CheckpointError(
          weights.file_of(q).path(), dense_one->name,
          "is not packed (no " + detail::packed_name(packed, detail::module_of(dense_one->name)) +
              detail::packed_dtype_note(packed) + ") while " + q.name +
              " is: lazygraph stores a class of matrices (attention's q, k, v and o; the MLP's "
              "gate, up and down, or every expert's; the LM head) in one format, so a checkpoint mixing " +
              method + " and dense matrices in one class is refused");
    }
    if (packed_one == nullptr) continue;
    const bool expert = packed_one->role == DecoderTensorRole::moe_w1 ||
                        packed_one->role == DecoderTensorRole::moe_w3 || packed_one->role == DecoderTensorRole::moe_w2;
    if (expert && !detail::find_packed_method(packed.method).experts) {
      std::string readers;  // the methods whose experts are read
      for (const detail::PackedMethodRow* row : detail::packed_methods()) {
        if (row->experts) readers += (readers.empty() ? "" : ", ") + std::string(row->name);
      }
      const TensorInfo& q = *weights.find(detail::packed_name(packed, detail::module_of(packed_one->name)));
      throw CheckpointError(weights.file_of(q).path(), q.name,
                            "is a mixture of experts' expert packed by " + method +
                                ": lazygraph reads quantized experts from checkpoints of " + readers +
                                " only; load an unquantized checkpoint with LoadOptions::quantization to quantize "
                                "the experts as they load");
    }
    (c == QuantizationClass::attention ? out.attention
     : c == QuantizationClass::mlp     ? out.mlp
                                       : out.lm_head) = packed.format();
  }
  for (const DecoderTensor& t : tensors) {  // a router is read dense, whatever the checkpoint's method
    if (t.role != DecoderTensorRole::moe_router || !detail::holds_packed(weights, packed, detail::module_of(t.name))) {
      continue;
    }
    const TensorInfo& q = *weights.find(detail::packed_name(packed, detail::module_of(t.name)));
    throw CheckpointError(weights.file_of(q).path(), q.name,
                          "is a mixture of experts' router stored " + method +
                              "; lazygraph reads a router dense (fp16, bf16 or fp32), as the quantized checkpoints "
                              "of mixtures of experts keep it (quantization_config.modules_to_not_convert names it)");
  }
  if (!out.any()) {
    throw CheckpointError(weights.path() / "config.json", "",
                          "quantization_config says " + method + ", but no matrix is packed (no tensor `" +
                              std::string(detail::find_packed_method(packed.method).packed_suffix) + "`" +
                              detail::packed_dtype_note(packed) + ")");
  }
  return out;
}

}  // namespace

// Outside the anonymous namespace: the lambda in DecoderCheckpoint::upload_with (a member template) holds them,
// which GCC refuses (-Wsubobject-linkage) when this file is compiled as part of another, as in a unity build.
namespace checkpoint_upload {

/// The progress bar on stderr: "loading DIR [#####.....]  52% 1.37 of 2.63 GB", redrawn in place on a terminal;
/// elsewhere (a log file) one such line per quarter.
class Progress {
 public:
  Progress(std::string what, std::size_t total, bool show)
      : what_(std::move(what)), total_(total), show_(show), terminal_(isatty(fileno(stderr)) != 0) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress() {
    if (show_ && terminal_ && shown_ >= 0) std::fputc('\n', stderr);
  }
  void advance(std::size_t bytes) {
    done_ += bytes;
    if (!show_ || total_ == 0) return;
    int percent = static_cast<int>(100.0 * static_cast<double>(done_) / static_cast<double>(total_));
    if (!terminal_) percent -= percent % 25;
    if (percent == shown_) return;
    shown_ = percent;
    const int filled = percent / 5;
    std::fprintf(stderr, "%sloading %s [%s%s] %3d%% %.2f of %.2f GB%s", terminal_ ? "\r" : "", what_.c_str(),
                 std::string(filled, '#').c_str(), std::string(20 - filled, '.').c_str(), percent,
                 static_cast<double>(done_) / 1e9, static_cast<double>(total_) / 1e9, terminal_ ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  std::string what_;
  std::size_t total_;
  std::size_t done_ = 0;
  bool show_;
  bool terminal_;
  int shown_ = -1;
};

/// Two pinned buffers of `bytes` each that uploads alternate between: one fills on the host while the other's copy
/// runs. A buffer holds elements of whichever type the upload at hand copies: the decoder's element type, or the
/// stored type of a matrix the device quantizes.
class Staging {
 public:
  Staging(const Stream& stream, std::size_t bytes)
      : stream_(stream),
        bytes_(bytes),
        buffers_{PinnedBuffer<std::byte>(stream.device(), bytes), PinnedBuffer<std::byte>(stream.device(), bytes)},
        done_{Event(stream.device(), false), Event(stream.device(), false)} {}

  /// Elements of E a buffer holds.
  template <class E>
  [[nodiscard]] std::size_t capacity() const noexcept {
    return bytes_ / sizeof(E);
  }
  /// A buffer free to fill (its previous copy has finished), as elements of E (pinned memory is page-aligned).
  template <class E>
  std::span<E> next() {
    current_ = 1 - current_;
    if (used_[current_]) done_[current_].synchronize();
    return {reinterpret_cast<E*>(buffers_[current_].span().data()), capacity<E>()};
  }
  /// Copies the first `n` elements of E of the buffer `next` gave to `dst`.
  template <class E>
  void copy(DeviceSpan<E> dst, std::size_t n) {
    const std::byte* filled = std::as_const(buffers_[current_]).span().data();
    copy_async(stream_, dst, std::span<const E>(reinterpret_cast<const E*>(filled), n));
    done_[current_].record(stream_);
    used_[current_] = true;
  }

 private:
  const Stream& stream_;
  std::size_t bytes_;
  PinnedBuffer<std::byte> buffers_[2];
  Event done_[2];
  bool used_[2] = {false, false};
  int current_ = 1;
};

}  // namespace checkpoint_upload

namespace {

using checkpoint_upload::Progress;
using checkpoint_upload::Staging;

/// The element types uploads write: the decoder's (fp16, bf16), and float for a quantized matrix whose parts are
/// stored in different dtypes.
template <class E>
concept Uploaded = Element<E> || std::same_as<E, float>;

/// The checkpoint dtype that holds E's values as they are.
template <Uploaded E>
constexpr DType dtype_of = std::same_as<E, half>       ? DType::f16
                           : std::same_as<E, bfloat16> ? DType::bf16
                                                       : DType::f32;

/// The part of a tensor an upload reads: `rows` rows from `first_row` (in the decoder's order, so that rope rows are
/// reordered from there), `cols` columns of each from `first_col`. A tensor-parallel rank's share, or the whole tensor.
struct Block {
  std::size_t first_row = 0;
  std::size_t rows = 0;
  std::size_t first_col = 0;
  std::size_t cols = 0;
};

/// The whole of `t`.
Block whole(const DecoderTensor& t) {
  return {0, static_cast<std::size_t>(t.rows), 0, static_cast<std::size_t>(t.cols)};
}

/// Uploads block `b` of tensor `t` from `info` (in `weights`) into `out` ([b.rows][b.cols]) as elements of E,
/// through `buffers`: rows of E's own dtype are copied, others converted (to float exactly; to fp16 or bf16 a finite
/// value E cannot hold is a CheckpointError naming its element in the whole tensor), rope rows reordered. Counts the
/// bytes in `progress` when given.
template <Uploaded E>
void upload_rows(const Checkpoint& weights, int head_dim, const DecoderTensor& t, const TensorInfo& info,
                 const Block& b, DeviceSpan<E> out, Staging& buffers, Progress* progress) {
  const std::byte* data = weights.data(info).data();
  const auto cols = static_cast<std::size_t>(t.cols);  // the stored row's
  const std::size_t rows_per_chunk = buffers.capacity<E>() / b.cols;
  for (std::size_t row0 = 0; row0 < b.rows; row0 += rows_per_chunk) {
    const std::size_t rows = std::min(rows_per_chunk, b.rows - row0);
    std::span<E> buffer = buffers.next<E>();
    for (std::size_t r = 0; r < rows; ++r) {
      const int row = static_cast<int>(b.first_row + row0 + r);
      const auto from = static_cast<std::size_t>(t.rope_rows ? rotate_half_row(row, head_dim) : row);
      const std::size_t at = from * cols + b.first_col;  // the block row's first element in the whole tensor
      E* dst = buffer.data() + r * b.cols;
      if (info.dtype == dtype_of<E> && t.offset == 0) {
        std::memcpy(dst, data + at * sizeof(E), b.cols * sizeof(E));
        continue;
      }
      for (std::size_t c = 0; c < b.cols; ++c) {
        const float f = element(data, info.dtype, at + c) + t.offset;  // a gain stored as w meaning offset + w
        if constexpr (std::same_as<E, float>) {
          dst[c] = f;
        } else {
          const E h = E::from_float(f);
          if (std::isfinite(f) && !std::isfinite(h.to_float())) {
            throw CheckpointError(weights.file_of(info).path(), info.name,
                                  "value " + std::to_string(f) + " at element " + std::to_string(at + c) +
                                      " does not fit in " + std::string(element_name<E>) +
                                      (std::same_as<E, half> ? " (largest 65504)" : " (largest 3.39e38)") +
                                      ", the decoder's element type");
          }
          dst[c] = h;
        }
      }
    }
    buffers.copy(out.subspan(row0 * b.cols, rows * b.cols), rows * b.cols);
    if (progress != nullptr) progress->advance(rows * b.cols * sizeof(E));
  }
}

/// Waits for `stream` before an error unwinds what its copies and kernels still use; an error of its own is dropped,
/// as the one already propagating matters more.
void drain(const Stream& stream) noexcept {
  try {
    stream.synchronize();
  } catch (...) {  // NOLINT(bugprone-empty-catch): see above
  }
}

/// The CheckpointError for matrix `layout` that `e` says cannot be quantized, `parts` tensors stacked from `first` on:
/// a layer's q, k and v, or its experts of one kind; the message says how the rows are made (a row `e` names is the
/// stack's).
CheckpointError cannot_quantize(const std::filesystem::path& file, const QuantizedLayout& layout, const UsageError& e,
                                const DecoderTensor& first, std::size_t parts) {
  std::string rows;
  if (parts > 1 && first.role == DecoderTensorRole::wq) {
    rows =
        " (its rows are q_proj's, k_proj's and v_proj's, stacked, those of q and k reordered from rotate-half to "
        "interleaved pairs)";
  } else if (parts > 1) {
    const std::string each = std::to_string(first.rows);
    rows = " (its rows are the layer's " + std::to_string(parts) + " experts', " + each +
           " each, stacked in expert order: row R is row R % " + each + " of expert R / " + each + ")";
  }
  return {file, layout.name(), std::string("cannot be quantized: ") + e.what() + rows};
}

/// One tensor of a quantized matrix: where it goes in the decoder, where it is stored, and which block of it the matrix
/// takes (the whole tensor, or a rank's rows or columns).
struct MatrixPart {
  const DecoderTensor* tensor;
  const TensorInfo* info;
  Block block;
};

/// Matrix `layout` quantized on the device: its `parts` uploaded as elements of S, rows stacked, through `buffers`,
/// then quantized there by `quantizer`; the stacked buffer is freed on return. \throws CheckpointError naming the
/// matrix when a weight cannot be quantized (the stream drained first).
template <Element T, Uploaded S>
DeviceQuantizedWeight<T> quantize_on_device(const Stream& stream, const DeviceQuantizer& quantizer,
                                            const Checkpoint& weights, int head_dim,
                                            const std::vector<MatrixPart>& parts, const QuantizedLayout& layout,
                                            const QuantizeOptions& options, Staging& buffers) {
  DeviceBuffer<S> stacked(stream.device(),
                          static_cast<std::size_t>(layout.rows()) * static_cast<std::size_t>(layout.cols()));
  try {
    std::size_t at = 0;
    for (const MatrixPart& p : parts) {
      const std::size_t elements = p.block.rows * p.block.cols;
      upload_rows<S>(weights, head_dim, *p.tensor, *p.info, p.block, stacked.view().subspan(at, elements), buffers,
                     nullptr);
      at += elements;
    }
    return quantizer.template quantize<T, S>(stream, layout.format(), layout.name(), layout.rows(), layout.cols(),
                                             stacked.cview(), options);
  } catch (const UsageError& e) {
    drain(stream);
    throw cannot_quantize(weights.file_of(*parts.back().info).path(), layout, e, *parts.front().tensor, parts.size());
  } catch (...) {
    drain(stream);
    throw;
  }
}

/// quantize_on_device with the parts' stored dtype as S (float when they differ).
template <Element T>
DeviceQuantizedWeight<T> quantize_stored(const Stream& stream, const DeviceQuantizer& quantizer,
                                         const Checkpoint& weights, int head_dim, const std::vector<MatrixPart>& parts,
                                         const QuantizedLayout& layout, const QuantizeOptions& options,
                                         Staging& buffers) {
  const DType dtype = parts.front().info->dtype;
  const bool alike =
      std::all_of(parts.begin(), parts.end(), [&](const MatrixPart& p) { return p.info->dtype == dtype; });
  if (alike && dtype == DType::f16) {
    return quantize_on_device<T, half>(stream, quantizer, weights, head_dim, parts, layout, options, buffers);
  }
  if (alike && dtype == DType::bf16) {
    return quantize_on_device<T, bfloat16>(stream, quantizer, weights, head_dim, parts, layout, options, buffers);
  }
  return quantize_on_device<T, float>(stream, quantizer, weights, head_dim, parts, layout, options, buffers);
}

/// Appends tensor `t` from `info` (in `weights`) to `out` as floats, rows in the decoder's order (rope rows
/// reordered): what quantize() reads.
void append_rows(const Checkpoint& weights, int head_dim, const DecoderTensor& t, const TensorInfo& info,
                 std::vector<float>& out) {
  const std::byte* data = weights.data(info).data();
  const auto cols = static_cast<std::size_t>(t.cols);
  out.reserve(out.size() + t.elements());
  for (int row = 0; row < t.rows; ++row) {
    const auto from = static_cast<std::size_t>(t.rope_rows ? rotate_half_row(row, head_dim) : row);
    for (std::size_t c = 0; c < cols; ++c) out.push_back(element(data, info.dtype, from * cols + c));
  }
}

}  // namespace

DecoderCheckpoint::DecoderCheckpoint(LlamaConfig llama, DecoderConfig config, Checkpoint weights, LoadOptions options)
    : llama_(std::move(llama)),
      config_(config),
      weights_(std::move(weights)),
      options_(options),
      tensors_(decoder_tensors(config_)) {
  const DecoderQuantization& quantization = options_.quantization;
  const bool as_saved = quantized_as_saved();
  try {
    layouts_ = nn::quantized_layouts(config_, quantization);
  } catch (const UsageError& e) {
    if (!as_saved) throw;  // the caller's choice of formats
    throw CheckpointError(weights_.path() / "config.json", "",
                          std::string("quantization_config cannot apply to this model: ") + e.what());
  }
  std::set<std::string_view> used;
  std::vector<std::size_t> parts;  // of the next quantized matrix (q and k wait for v)
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const DecoderTensor& t = tensors_[i];
    const bool quantized = quantization.format_of(t.role).has_value();
    if (quantized && as_saved) {
      sources_.push_back(nullptr);               // read quantized, below
      if (!llama_.packed.has_value()) continue;  // lazygraph's own tensors hold the matrix whole
    } else {
      const std::vector<std::int64_t> shape = t.shape();
      const bool tied = t.role == DecoderTensorRole::lm_head && llama_.tie_word_embeddings;
      sources_.push_back(&weights_.require(tied ? "model.embed_tokens.weight" : t.name, kLoadable, shape));
      used.insert(sources_.back()->name);
      if (!quantized) continue;
    }
    parts.push_back(i);
    if (!stacked_with_next(tensors_, i)) {  // the matrix's last part: v after q and k, a layer's last expert of a kind
      matrix_parts_.push_back(std::move(parts));
      parts.clear();
    }
  }
  if (llama_.packed.has_value()) {
    // Tensors that one kernel multiplies with one x take their inputs in one order: a stacked matrix's parts, and a
    // layer's gate and up (W1 comes before W3).
    std::optional<std::pair<detail::PackedTensors, std::string>> gate;
    for (const std::vector<std::size_t>& matrix : matrix_parts_) {
      std::optional<std::pair<detail::PackedTensors, std::string>> first;
      for (const std::size_t p : matrix) {
        const std::string module = detail::module_of(tensors_[p].name);
        const detail::PackedTensors found =
            detail::find_packed_method(llama_.packed->method)
                .require(weights_, *llama_.packed, module, tensors_[p].rows, tensors_[p].cols);
        for (const TensorInfo* part : {found.qweight, found.qzeros, found.scales, found.g_idx}) {
          if (part != nullptr) used.insert(part->name);
        }
        if (first) detail::require_same_order(weights_, first->first, first->second, found);
        if (!first) first.emplace(found, module);
        if (tensors_[p].role == DecoderTensorRole::w1) gate.emplace(found, module);
        if (tensors_[p].role == DecoderTensorRole::w3 && gate) {
          detail::require_same_order(weights_, gate->first, gate->second, found);
        }
      }
    }
  } else if (as_saved) {
    for (const QuantizedLayout& layout : layouts_) {
      const QuantizedTensorInfo found = require_quantized(weights_, layout);
      for (const TensorInfo* part : {found.format, found.values, found.scales, found.zeros}) {
        if (part != nullptr) used.insert(part->name);
      }
    }
  }
  device_bytes_ = decoder_device_bytes(config_, quantization);
  for (const std::string_view name : weights_.names()) {
    if (used.contains(name)) continue;
    const TensorInfo& info = weights_.tensor(name);
    if (llama_.tie_word_embeddings && name == "lm_head.weight") {
      check_tied_head(info);
      continue;
    }
    if (name.ends_with(".rotary_emb.inv_freq")) {
      check_inv_freq(info);
      continue;
    }
    const auto dense_of_quantized = std::find_if(tensors_.begin(), tensors_.end(), [&](const DecoderTensor& t) {
      return as_saved && t.name == name && quantization.format_of(t.role).has_value();
    });
    if (dense_of_quantized != tensors_.end()) {
      throw CheckpointError(weights_.file_of(info).path(), std::string(name),
                            "this checkpoint holds the weight quantized (config.json's quantization_config: " +
                                quantization_name(quantization) +
                                "), so this dense tensor would never be read, and a tensor is refused rather than "
                                "ignored");
    }
    throw CheckpointError(weights_.file_of(info).path(), std::string(name),
                          "the " + llama_.model_type +
                              " decoder does not use this tensor (a bias, a norm or a layer "
                              "its config.json does not describe), and a tensor is refused rather than ignored");
  }
}

void DecoderCheckpoint::check_tied_head(const TensorInfo& head) const {
  // transformers ties the head to the embedding and never reads a stored lm_head.weight: one that differs would
  // make the checkpoint mean two things.
  const TensorInfo& embedding = *sources_.front();
  const auto a = weights_.data(head);
  const auto b = weights_.data(embedding);
  if (head.dtype != embedding.dtype || head.shape != embedding.shape || !std::equal(a.begin(), a.end(), b.begin())) {
    throw CheckpointError(weights_.file_of(head).path(), head.name,
                          "tie_word_embeddings is true, but this tensor differs from model.embed_tokens.weight");
  }
}

void DecoderCheckpoint::check_inv_freq(const TensorInfo& info) const {
  // Older checkpoints store RoPE's inverse frequencies per layer; they must be what config.json's RoPE settings give.
  const std::vector<double> want = rope_frequencies(config_.theta, config_.rope_scaling, config_.head_dim());
  const auto fail = [&](const std::string& why) {
    throw CheckpointError(weights_.file_of(info).path(), info.name, why);
  };
  if (info.shape != std::vector<std::int64_t>{static_cast<std::int64_t>(want.size())} ||
      std::find(std::begin(kLoadable), std::end(kLoadable), info.dtype) == std::end(kLoadable)) {
    fail(
        "expected F32, F16 or BF16 " + format_shape(std::vector<std::int64_t>{static_cast<std::int64_t>(want.size())}) +
        " (RoPE's inverse frequencies), found " + std::string(dtype_name(info.dtype)) + " " + format_shape(info.shape));
  }
  const std::byte* data = weights_.data(info).data();
  const double tolerance = info.dtype == DType::f32 ? 1e-5 : 1e-2;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double got = element(data, info.dtype, i);
    if (!(std::abs(got - want[i]) <= tolerance * want[i])) {
      fail("RoPE inverse frequency " + std::to_string(i) + " is " + std::to_string(got) + ", but config.json's RoPE " +
           "settings give " + std::to_string(want[i]));
    }
  }
}

DecoderCheckpoint DecoderCheckpoint::open(const std::filesystem::path& directory, const LoadOptions& options) {
  LlamaConfig llama = LlamaConfig::load(directory);
  DecoderConfig config = decoder_config(llama, options.context, directory / "config.json", options);
  LoadOptions chosen = options;
  Checkpoint weights = Checkpoint::open(directory);
  if (llama.packed.has_value()) llama.quantization = packed_classes(llama, config, weights);
  if (llama.quantization.has_value()) {
    if (options.quantization.any() && !(options.quantization == *llama.quantization)) {
      throw UsageError("LoadOptions::quantization asks for " + quantization_name(options.quantization) +
                       ", but the checkpoint " + directory.string() + " is already quantized as " +
                       quantization_name(*llama.quantization) +
                       " (its config.json's quantization_config): load it with LoadOptions::quantization empty, or "
                       "quantize its unquantized checkpoint");
    }
    chosen.quantization = *llama.quantization;
  }
  if (!llama.save_id.empty() && !weights.save_id().empty() && llama.save_id != weights.save_id()) {
    throw CheckpointError(directory / "config.json", "",
                          "it is of save " + detail::printable(llama.save_id) + " (its " + std::string(kSaveIdKey) +
                              ") but the weights " + weights.description_file().string() + " are of save " +
                              detail::printable(weights.save_id()) +
                              ": they come from different saves (a save into this folder was interrupted between "
                              "the two, or the weights were written again without it); save the checkpoint again, "
                              "or remove the key from config.json if the two belong together");
  }
  return DecoderCheckpoint(std::move(llama), config, std::move(weights), chosen);
}

QuantizedWeight DecoderCheckpoint::quantized_weight(std::size_t index) const {
  if (index >= layouts_.size()) {
    throw UsageError("DecoderCheckpoint::quantized_weight: index " + std::to_string(index) + " of " +
                     std::to_string(layouts_.size()) + " quantized matrices");
  }
  const QuantizedLayout& l = layouts_[index];
  if (llama_.packed.has_value()) {  // open() checked the tensors: repacking them cannot fail
    const detail::PackedMethodRow& method = detail::find_packed_method(llama_.packed->method);
    const auto require = [&](const DecoderTensor& t) {
      return method.require(weights_, *llama_.packed, detail::module_of(t.name), t.rows, t.cols);
    };
    std::vector<detail::PackedPart> parts;
    for (const std::size_t p : matrix_parts_[index]) {
      const DecoderTensor& t = tensors_[p];
      parts.push_back({.tensors = require(t), .rope_rows = t.rope_rows, .output_order = {}, .ordered_input = false});
      // A down projection that takes its inputs in another order (GPTQ's desc_act) gets them so from gate's and up's
      // rows, whose outputs are its inputs: no gather for it, and its tensor-parallel shares are whole ranges.
      if (t.role != DecoderTensorRole::w1 && t.role != DecoderTensorRole::w3 && t.role != DecoderTensorRole::w2) {
        continue;
      }
      const auto down = std::find_if(tensors_.begin(), tensors_.end(), [&](const DecoderTensor& d) {
        return d.role == DecoderTensorRole::w2 && d.layer == t.layer;
      });
      if (down == tensors_.end()) continue;
      std::vector<std::int32_t> order = detail::input_order(weights_, require(*down));
      if (order.empty()) continue;
      if (t.role == DecoderTensorRole::w2) {
        parts.back().ordered_input = true;
      } else {
        parts.back().output_order = std::move(order);
      }
    }
    return method.repack(weights_, *llama_.packed, l, parts, config_.head_dim());
  }
  if (quantized_as_saved()) {
    try {
      return read_quantized(weights_, l);
    } catch (const UsageError& e) {  // the bytes break the format's rules
      const TensorInfo& values = weights_.tensor(QuantizedTensors::values_name_of(l.name()));
      throw CheckpointError(weights_.file_of(values).path(), l.name(),
                            std::string("holds bytes its format does not allow: ") + e.what());
    }
  }
  std::vector<float> floats;
  floats.reserve(static_cast<std::size_t>(l.rows()) * static_cast<std::size_t>(l.cols()));
  for (const std::size_t part : matrix_parts_[index]) {
    append_rows(weights_, config_.head_dim(), tensors_[part], *sources_[part], floats);
  }
  try {
    return quantize(l.format(), l.name(), l.rows(), l.cols(), floats, options_.quantization.options);
  } catch (const UsageError& e) {
    throw cannot_quantize(weights_.file_of(*sources_[matrix_parts_[index].back()]).path(), l, e,
                          tensors_[matrix_parts_[index].front()], matrix_parts_[index].size());
  }
}

template <Element T>
BasicDecoderWeights<T> DecoderCheckpoint::upload(const Stream& stream) const {
  return upload_with<T>(stream, nullptr);
}

template <Element T>
BasicDecoderWeights<T> DecoderCheckpoint::upload(const Stream& stream, const DeviceQuantizer& quantizer) const {
  return upload_with<T>(stream, &quantizer);
}

template <Element T>
void DecoderCheckpoint::check_quantization_for() const {
  try {
    check_quantization(config_, options_.quantization, scale_type_of<T>);
  } catch (const UsageError& e) {
    if (!quantized_as_saved()) throw;
    throw UsageError(std::string(e.what()) + "; the checkpoint " + weights_.path().string() +
                     " was saved so: load it into a decoder over " +
                     (scale_type_of<T> == ScaleType::f16 ? "bf16 (upload<bfloat16>)" : "fp16 (upload<half>)"));
  }
}

template <Element T>
DeviceQuantizedWeight<T> DecoderCheckpoint::whole_matrix(const Stream& stream, const DeviceQuantizer* quantizer,
                                                         std::size_t index, Staging& buffers) const {
  try {
    if (quantizer != nullptr && !quantized_as_saved()) {
      std::vector<MatrixPart> parts;
      for (const std::size_t p : matrix_parts_[index]) parts.push_back({&tensors_[p], sources_[p], whole(tensors_[p])});
      return quantize_stored<T>(stream, *quantizer, weights_, config_.head_dim(), parts, layouts_[index],
                                options_.quantization.options, buffers);
    }
    return {stream, quantized_weight(index)};
  } catch (...) {
    drain(stream);
    throw;
  }
}

template <Element T>
DeviceQuantizedWeight<T> DecoderCheckpoint::matrix_share(const Stream& stream, const DeviceQuantizer* quantizer,
                                                         std::size_t index, const DecoderTensor& first,
                                                         const QuantizedLayout& share, int rank, int ranks,
                                                         Staging& buffers) const {
  // Quantizing a share of rows, or of whole groups of columns, gives the bytes of the same share of the matrix
  // quantized whole (each row's groups are the same); a format with one scale per row (int8) needs all of its columns,
  // and one with a scale per block of rows (fp8) all of its rows: a share of them need not start a block.
  const bool columns = tensor_shard(first, config_, rank, ranks).columns;
  const bool own_part = quantizer != nullptr && !quantized_as_saved() &&
                        (columns ? !share.storage().scale_per_row() : share.storage().quantize_rows == 1);
  if (!own_part) {
    const DeviceQuantizedWeight<T> whole_weight = whole_matrix<T>(stream, quantizer, index, buffers);
    try {
      return shard_quantized(stream, whole_weight, first.role, config_, rank, ranks);
    } catch (...) {
      drain(stream);
      throw;
    }
  }
  std::vector<MatrixPart> parts;
  for (const std::size_t p : matrix_parts_[index]) {
    const DecoderTensor& t = tensors_[p];
    const TensorShard s = tensor_shard(t, config_, rank, ranks);
    parts.push_back({&t, sources_[p],
                     s.columns ? Block{0, static_cast<std::size_t>(t.rows), s.first, s.count}
                               : Block{s.first, s.count, 0, static_cast<std::size_t>(t.cols)}});
  }
  try {
    return quantize_stored<T>(stream, *quantizer, weights_, config_.head_dim(), parts, share,
                              options_.quantization.options, buffers);
  } catch (...) {
    drain(stream);
    throw;
  }
}

namespace {
/// The widest row an upload stages: of T, or of a stored type (at most 4 bytes) a matrix is quantized from.
std::size_t widest_staged_row(const std::vector<DecoderTensor>& tensors) {
  std::size_t widest = 1;
  for (const DecoderTensor& t : tensors) widest = std::max(widest, static_cast<std::size_t>(t.cols) * 4);
  return widest;
}
}  // namespace

template <Element T>
BasicDecoderWeights<T> DecoderCheckpoint::upload_with(const Stream& stream, const DeviceQuantizer* quantizer) const {
  const DecoderQuantization& quantization = options_.quantization;
  check_quantization_for<T>();  // before anything is allocated
  Staging buffers(stream, std::max(options_.staging_bytes, widest_staged_row(tensors_)));
  Progress progress(weights_.path().string(), device_bytes_,
                    options_.progress && device_bytes_ >= options_.progress_from_bytes);
  std::size_t index = 0;
  std::vector<DeviceQuantizedWeight<T>> matrices;  // in quantized_layouts() order
  // A tensor quantized as it loads has no dense buffer (a layer's q, k and v all or none: one format_of for all three).
  const auto dense = [&](const DecoderTensor& t) { return !quantization.format_of(t.role).has_value(); };
  const auto fill = [&](const DecoderTensor& t, DeviceSpan<T> into) {
    const std::size_t at = index++;
    const TensorInfo* info = sources_[at];
    if (!dense(t)) {
      if (!stacked_with_next(tensors_, at)) {  // q and k go with v, a layer's experts of a kind with their last
        matrices.push_back(whole_matrix<T>(stream, quantizer, matrices.size(), buffers));
        progress.advance(matrices.back().bytes());
      }
      return;  // the weight is held quantized
    }
    try {  // into the tensor's buffer, or its rows of the layer's stacked q, k and v
      upload_rows<T>(weights_, config_.head_dim(), t, *info, whole(t), into, buffers, &progress);
    } catch (...) {
      drain(stream);
      throw;
    }
  };
  BasicDecoderWeights<T> w = assemble_decoder_weights<T>(stream.device(), config_, dense, fill);
  stream.synchronize();
  adopt_quantized(stream, w, config_, quantization, std::move(matrices));
  return w;
}

void DecoderCheckpoint::check_shard(int rank, int ranks) const {
  check_tensor_split(config_, ranks);
  if (rank < 0 || rank >= ranks) {
    throw UsageError("DecoderCheckpoint::upload_shard: rank " + std::to_string(rank) + " is outside [0, " +
                     std::to_string(ranks) + ")");
  }
  try {
    check_quantized_split(config_, quantization(), ranks);
  } catch (const UsageError& e) {
    throw UsageError("DecoderCheckpoint::upload_shard: " + std::string(e.what()) + " (" +
                     (quantized_as_saved() ? "the checkpoint " + weights_.path().string() + " is saved quantized as "
                                           : std::string("LoadOptions::quantization asks for ")) +
                     quantization_name(quantization()) + ")");
  }
}

template <Element T>
BasicDecoderWeights<T> DecoderCheckpoint::upload_shard(const Stream& stream, int rank, int ranks) const {
  return upload_shard_with<T>(stream, nullptr, rank, ranks);
}

template <Element T>
BasicDecoderWeights<T> DecoderCheckpoint::upload_shard(const Stream& stream, const DeviceQuantizer& quantizer, int rank,
                                                       int ranks) const {
  return upload_shard_with<T>(stream, &quantizer, rank, ranks);
}

template <Element T>
BasicDecoderWeights<T> DecoderCheckpoint::upload_shard_with(const Stream& stream, const DeviceQuantizer* quantizer,
                                                            int rank, int ranks) const {
  check_shard(rank, ranks);  // before anything is allocated
  check_quantization_for<T>();
  const DecoderQuantization& quantization = options_.quantization;
  const DecoderConfig shard = shard_config(config_, ranks);
  const std::vector<QuantizedLayout> shares = nn::quantized_layouts(shard, quantization);  // the rank's matrices
  const std::size_t bytes = decoder_device_bytes(shard, quantization);
  Staging buffers(stream, std::max(options_.staging_bytes, widest_staged_row(tensors_)));
  Progress progress(weights_.path().string() + " rank " + std::to_string(rank) + " of " + std::to_string(ranks), bytes,
                    options_.progress && bytes >= options_.progress_from_bytes);
  std::size_t index = 0;  // assemble_decoder_weights walks the shard's tensors in the order of the whole model's
  std::vector<DeviceQuantizedWeight<T>> matrices;  // the rank's shares, in quantized_layouts() order
  const DecoderTensor* first = nullptr;            // the first tensor of the quantized matrix under way
  const auto dense = [&](const DecoderTensor& t) { return !quantization.format_of(t.role).has_value(); };
  const auto fill = [&](const DecoderTensor&, DeviceSpan<T> into) {
    const std::size_t i = index++;
    const DecoderTensor& t = tensors_[i];
    if (!dense(t)) {
      if (first == nullptr) first = &t;
      if (!stacked_with_next(tensors_, i)) {  // the matrix's last part (v after q and k, a layer's last expert of a
                                              // kind): its share, named by its first part's role
        const std::size_t m = matrices.size();
        matrices.push_back(matrix_share<T>(stream, quantizer, m, *first, shares[m], rank, ranks, buffers));
        progress.advance(matrices.back().bytes());
        first = nullptr;
      }
      return;  // the rank's share is held quantized
    }
    const TensorShard part = tensor_shard(t, config_, rank, ranks);
    const Block block = part.columns ? Block{0, static_cast<std::size_t>(t.rows), part.first, part.count}
                                     : Block{part.first, part.count, 0, static_cast<std::size_t>(t.cols)};
    try {  // q and k rows: whole heads, so local row j is the interleaved row part.first + j of the whole tensor
      upload_rows<T>(weights_, config_.head_dim(), t, *sources_[i], block, into, buffers, &progress);
    } catch (...) {
      drain(stream);
      throw;
    }
  };
  BasicDecoderWeights<T> w = assemble_decoder_weights<T>(stream.device(), shard, dense, fill);
  stream.synchronize();
  adopt_quantized(stream, w, shard, quantization, std::move(matrices));
  return w;
}

template <Element T>
BasicDecoder<T> load_decoder(const Stream& stream, const KernelLibrary& library, const std::filesystem::path& directory,
                             const LoadOptions& options) {
  const DecoderCheckpoint checkpoint = DecoderCheckpoint::open(directory, options);
  if (checkpoint.quantization().any() && !checkpoint.quantized_as_saved()) {
    const DeviceQuantizer quantizer(library);
    return BasicDecoder<T>(stream, library, checkpoint.config(), checkpoint.template upload<T>(stream, quantizer));
  }
  return BasicDecoder<T>(stream, library, checkpoint.config(), checkpoint.template upload<T>(stream));
}

template <Element T>
BasicDecoder<T> load_decoder_rank(const Stream& stream, const KernelLibrary& library,
                                  const std::filesystem::path& directory, const Communicator& comm,
                                  const LoadOptions& options, const TensorParallelOptions& parallel) {
  const DecoderCheckpoint checkpoint = DecoderCheckpoint::open(directory, options);
  // After the upload, so that a rank whose upload fails does not leave the others in the exchange's collectives.
  const auto peer = [&]() -> std::optional<PeerExchange> {
    if (!parallel.peer_all_reduce) return std::nullopt;
    return PeerExchange::create(comm);
  };
  if (checkpoint.quantization().any() && !checkpoint.quantized_as_saved()) {
    const DeviceQuantizer quantizer(library);
    BasicDecoderWeights<T> weights = checkpoint.template upload_shard<T>(stream, quantizer, comm.rank(), comm.size());
    const std::optional<PeerExchange> exchange = peer();
    return BasicDecoder<T>(stream, library, checkpoint.config(), std::move(weights), comm, parallel,
                           exchange ? &*exchange : nullptr);
  }
  BasicDecoderWeights<T> weights = checkpoint.template upload_shard<T>(stream, comm.rank(), comm.size());
  const std::optional<PeerExchange> exchange = peer();
  return BasicDecoder<T>(stream, library, checkpoint.config(), std::move(weights), comm, parallel,
                         exchange ? &*exchange : nullptr);
}

template BasicDecoderWeights<half> DecoderCheckpoint::upload<half>(const Stream&) const;
template BasicDecoderWeights<bfloat16> DecoderCheckpoint::upload<bfloat16>(const Stream&) const;
template BasicDecoderWeights<half> DecoderCheckpoint::upload<half>(const Stream&, const DeviceQuantizer&) const;
template BasicDecoderWeights<bfloat16> DecoderCheckpoint::upload<bfloat16>(const Stream&, const DeviceQuantizer&) const;
template BasicDecoderWeights<half> DecoderCheckpoint::upload_shard<half>(const Stream&, int, int) const;
template BasicDecoderWeights<bfloat16> DecoderCheckpoint::upload_shard<bfloat16>(const Stream&, int, int) const;
template BasicDecoderWeights<half> DecoderCheckpoint::upload_shard<half>(const Stream&, const DeviceQuantizer&, int,
                                                                         int) const;
template BasicDecoderWeights<bfloat16> DecoderCheckpoint::upload_shard<bfloat16>(const Stream&, const DeviceQuantizer&,
                                                                                 int, int) const;
template BasicDecoder<half> load_decoder<half>(const Stream&, const KernelLibrary&, const std::filesystem::path&,
                                               const LoadOptions&);
template BasicDecoder<bfloat16> load_decoder<bfloat16>(const Stream&, const KernelLibrary&,
                                                       const std::filesystem::path&, const LoadOptions&);
template BasicDecoder<half> load_decoder_rank<half>(const Stream&, const KernelLibrary&, const std::filesystem::path&,
                                                    const Communicator&, const LoadOptions&,
                                                    const TensorParallelOptions&);
template BasicDecoder<bfloat16> load_decoder_rank<bfloat16>(const Stream&, const KernelLibrary&,
                                                            const std::filesystem::path&, const Communicator&,
                                                            const LoadOptions&, const TensorParallelOptions&);

void save_seeded_checkpoint(const std::filesystem::path& directory, const DecoderConfig& config, DType dtype) {
  if (dtype != DType::f16 && dtype != DType::bf16 && dtype != DType::f32) {
    throw UsageError("save_seeded_checkpoint: dtype " + std::string(dtype_name(dtype)) +
                     " is not one the loader reads (F16, BF16, F32)");
  }
  const std::vector<DecoderTensor> tensors = decoder_tensors(config);
  std::vector<std::vector<std::byte>> bytes;
  std::vector<TensorToWrite> out;
  bytes.reserve(tensors.size());
  for (const DecoderTensor& t : tensors) {
    const std::vector<half> values = host_tensor(config.seed, t.seeded);
    const std::vector<bfloat16> bf16_values =
        dtype == DType::bf16 ? host_tensor<bfloat16>(config.seed, t.seeded) : std::vector<bfloat16>{};
    std::vector<std::byte>& b = bytes.emplace_back(values.size() * dtype_size(dtype));
    const auto cols = static_cast<std::size_t>(t.cols);
    for (int row = 0; row < t.rows; ++row) {
      // Checkpoint row `to` holds interleaved row `row` (rotate_half_row maps the other way round).
      const auto to = static_cast<std::size_t>(t.rope_rows ? rotate_half_row(row, config.head_dim()) : row);
      for (std::size_t c = 0; c < cols; ++c) {
        const std::size_t at = static_cast<std::size_t>(row) * cols + c;
        const half h = values[at];
        std::byte* dst = b.data() + (to * cols + c) * dtype_size(dtype);
        if (dtype == DType::f16) {
          std::memcpy(dst, &h.bits, 2);
        } else if (dtype == DType::bf16) {
          std::memcpy(dst, &bf16_values[at].bits, 2);
        } else {
          const float f = h.to_float();
          std::memcpy(dst, &f, 4);
        }
      }
    }
    out.push_back({t.name, dtype, t.shape(), b});
  }
  LlamaConfig llama;
  llama.hidden_size = config.d;
  llama.num_attention_heads = config.heads;
  llama.num_key_value_heads = config.kv_head_count();
  llama.num_hidden_layers = config.layers;
  llama.intermediate_size = config.ffn;
  llama.vocab_size = config.vocab;
  llama.max_position_embeddings = config.context;
  llama.rope_theta = config.theta;
  llama.rope_scaling = config.rope_scaling;
  if (config.qkv_bias && config.qk_norm) {
    throw UsageError("save_seeded_checkpoint: no architecture has both q, k and v biases and q/k norms");
  }
  if (config.activation != GateActivation::silu || config.post_norms || config.embedding_scale != 1.0F ||
      config.attention_scale != 0 || config.local_theta != 0 || config.logit_softcap != 0 || config.gain_offset != 0 ||
      (config.window > 0 && (!config.sliding.empty() || config.qkv_bias || config.qk_norm))) {
    throw UsageError(
        "save_seeded_checkpoint writes Llama, Mistral (a window on every layer), Qwen2 (q, k and v biases) and Qwen3 "
        "(q/k norms) checkpoints; Gemma 3's features (GeGLU, post-norms, scales, soft-capping, per-layer windows) it "
        "does not write");
  }
  if (config.window > 0) {  // Mistral: the window on every layer
    llama.model_type = "mistral";
    llama.sliding_window = config.window;
  }
  if (config.qkv_bias) {  // Qwen2 is the architecture with q, k and v biases alone
    llama.model_type = "qwen2";
    llama.attention_bias = true;
  }
  if (config.qk_norm) {  // Qwen3 is the one with q/k norms
    llama.model_type = "qwen3";
    llama.qk_norm = true;
  }
  if (config.qk_norm_whole && (!config.mixture_of_experts() || config.q_dim() != config.d)) {
    throw UsageError(
        "save_seeded_checkpoint writes q/k norms over the whole projection (qk_norm_whole) as OLMoE's, which has a "
        "mixture of experts and q as wide as d (q_dim " +
        std::to_string(config.q_dim()) + ", d " + std::to_string(config.d) + ")");
  }
  if (config.mixture_of_experts()) {
    // Qwen3-MoE has per-head q/k norms, OLMoE whole-projection ones; Mixtral none, and always renormalizes.
    const bool qwen = config.qk_norm && !config.qk_norm_whole;
    const bool olmoe = config.qk_norm_whole;
    const MoeTensorNames names = config.qk_norm ? MoeTensorNames::mlp_experts : MoeTensorNames::block_sparse_moe;
    if (config.qkv_bias || config.moe.names != names || (!config.qk_norm && !config.moe.normalize)) {
      throw UsageError(
          "save_seeded_checkpoint writes a mixture of experts as Qwen3-MoE (q/k norms, MoeTensorNames::mlp_experts), "
          "OLMoE (q/k norms over the whole projection, MoeTensorNames::mlp_experts) or Mixtral (no q/k norms, "
          "normalize, MoeTensorNames::block_sparse_moe); this config is none of them");
    }
    llama.model_type = qwen ? "qwen3_moe" : (olmoe ? "olmoe" : "mixtral");
    llama.qk_norm_whole = olmoe;
    llama.moe = config.moe;
    if (!qwen) llama.intermediate_size = config.moe.expert_width;  // OLMoE's and Mixtral's expert width
  }
  if (config.head_width != 0) llama.head_dim = config.head_width;
  llama.rms_norm_eps = config.eps;
  llama.torch_dtype = dtype == DType::f16 ? "float16" : dtype == DType::bf16 ? "bfloat16" : "float32";
  llama.save_id = detail::new_save_id();
  detail::save_model_folder(directory, out, kDefaultShardBytes, {{"format", "pt"}}, llama.save_id, llama.to_json());
}

}  // namespace lazygraph::nn
