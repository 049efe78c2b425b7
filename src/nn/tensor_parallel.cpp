#include "lazygraph/nn/tensor_parallel.hpp"

#include <string>

namespace lazygraph::nn {

void check_tensor_parallel(const MlpConfig& config, int ranks) {
  config.validate();
  if (ranks < 1) throw UsageError("tensor parallel: " + std::to_string(ranks) + " ranks (at least 1)");
  if (config.ffn % (8 * ranks) != 0) {
    throw UsageError("tensor parallel: ffn " + std::to_string(config.ffn) + " does not split into " +
                     std::to_string(ranks) + " shards of a multiple of 8 (ffn must be a multiple of " +
                     std::to_string(8 * ranks) + ")");
  }
}

namespace detail {

void check_libraries(std::string_view module, std::size_t libraries, std::size_t ranks) {
  if (libraries != ranks) {
    throw UsageError(std::string(module) + ": " + std::to_string(libraries) + " kernel libraries for " +
                     std::to_string(ranks) + " ranks (one per rank's device)");
  }
}

template <Element T>
DeviceBuffer<T> copy_rows(const Stream& stream, DeviceSpan<const T> full, std::size_t cols, std::size_t first,
                          std::size_t count) {
  DeviceBuffer<T> out(stream.device(), count * cols);
  copy_async(stream, out.view(), full.subspan(first * cols, count * cols));
  return out;
}

template <Element T>
DeviceBuffer<T> copy_columns(const Stream& stream, DeviceSpan<const T> full, std::size_t rows, std::size_t cols,
                             std::size_t first, std::size_t count) {
  if (full.size() != rows * cols || first + count > cols) {
    throw UsageError("copy_columns: columns [" + std::to_string(first) + ", " + std::to_string(first + count) +
                     ") of a " + std::to_string(rows) + " x " + std::to_string(cols) + " matrix of " +
                     std::to_string(full.size()) + " elements");
  }
  DeviceBuffer<T> out(stream.device(), rows * count);
  if (rows == 0 || count == 0) return out;
  // Row r of the block starts at element r * cols + first of the matrix.
  copy_2d_async(stream, out.view(), count, full.subspan(first, full.size() - first), cols, count, rows);
  return out;
}

template DeviceBuffer<half> copy_rows(const Stream&, DeviceSpan<const half>, std::size_t, std::size_t, std::size_t);
template DeviceBuffer<bfloat16> copy_rows(const Stream&, DeviceSpan<const bfloat16>, std::size_t, std::size_t,
                                          std::size_t);
template DeviceBuffer<half> copy_columns(const Stream&, DeviceSpan<const half>, std::size_t, std::size_t, std::size_t,
                                         std::size_t);
template DeviceBuffer<bfloat16> copy_columns(const Stream&, DeviceSpan<const bfloat16>, std::size_t, std::size_t,
                                             std::size_t, std::size_t);

}  // namespace detail

template <Element T>
BasicSwigluShard<T> shard_swiglu_weights(const Stream& stream, const BasicSwigluWeights<T>& full, int d, int ffn,
                                         int rank, int ranks) {
  const auto f = static_cast<std::size_t>(ffn / ranks);
  const auto cols = static_cast<std::size_t>(d);
  const auto first = static_cast<std::size_t>(rank) * f;
  DeviceBuffer<T> gain(stream.device(), cols);
  copy_async(stream, gain.view(), full.gain.cview());
  BasicSwigluShard<T> shard{
      std::move(gain), detail::copy_rows(stream, full.w1.dense(), cols, first, f),
      detail::copy_rows(stream, full.w3.dense(), cols, first, f),
      detail::copy_columns(stream, full.w2.dense(), cols, static_cast<std::size_t>(ffn), first, f),
      static_cast<int>(f)};
  stream.synchronize();
  return shard;
}

template <Element T>
BasicTensorParallelMlp<T>::BasicTensorParallelMlp(std::span<const Communicator> comms,
                                                  std::span<const KernelLibrary* const> libraries,
                                                  const MlpConfig& config, const TensorParallelOptions& options)
    : config_(config) {
  const int n = static_cast<int>(comms.size());
  check_tensor_parallel(config_, n);
  detail::check_libraries("TensorParallelMlp", libraries.size(), comms.size());
  const auto d = static_cast<std::size_t>(config_.d);
  std::vector<DeviceSpan<T>> x = detail::reduction_buffers<T>(comms, d, options.symmetric_memory, &symmetric_);
  ranks_.reserve(comms.size());
  for (int r = 0; r < n; ++r) {
    const Communicator& comm = comms[static_cast<std::size_t>(r)];
    const Stream stream_for_weights(comm.device());
    BasicKernels<T> kernels(*libraries[static_cast<std::size_t>(r)], config_.early_launch);
    std::vector<BasicSwigluShard<T>> layers;
    layers.reserve(static_cast<std::size_t>(config_.layers));
    for (int l = 0; l < config_.layers; ++l) {
      // The whole seeded block on this rank's GPU, then its shard; the whole block is freed at once.
      const BasicSwigluWeights<T> full =
          generate_swiglu_weights(stream_for_weights, kernels, config_.seed, l, config_.d, config_.ffn);
      layers.push_back(shard_swiglu_weights(stream_for_weights, full, config_.d, config_.ffn, r, n));
    }
    ranks_.push_back(Rank{comm, std::move(kernels), std::move(layers), DeviceBuffer<T>(comm.device(), d),
                          x[static_cast<std::size_t>(r)],
                          DeviceBuffer<T>(comm.device(), static_cast<std::size_t>(config_.ffn / n))});
  }
  graph_.emplace(MultiDeviceGraph::capture(comms, [this](int r, Scope& s) {
    Rank& rank = ranks_[static_cast<std::size_t>(r)];
    s.record(copy(rank.x, rank.input.cview()));
    for (const BasicSwigluShard<T>& layer : rank.layers) {
      s.record(tensor_parallel_swiglu_block(rank.kernels, layer, rank.comm, rank.x, rank.act.view(), config_.d,
                                            config_.eps));
    }
  }));
}

template <Element T>
std::vector<T> BasicTensorParallelMlp<T>::forward(std::span<const T> x) {
  if (x.size() != static_cast<std::size_t>(config_.d)) {
    throw UsageError("TensorParallelMlp::forward: " + std::to_string(x.size()) +
                     " inputs, expected d = " + std::to_string(config_.d));
  }
  // On each graph's own stream, so the replay that follows is ordered after the copy.
  for (std::size_t r = 0; r < ranks_.size(); ++r) {
    copy_async(graph_->graph(static_cast<int>(r)).stream(), ranks_[r].input.view(), x);
  }
  graph_->launch();
  std::vector<T> out(static_cast<std::size_t>(config_.d));
  const Stream& s = graph_->graph(0).stream();
  copy_async(s, std::span<T>(out), ranks_[0].x.as_const());
  s.synchronize();
  return out;
}

template <Element T>
std::vector<DeviceSpan<T>> detail::reduction_buffers(std::span<const Communicator> comms, std::size_t count,
                                                     bool symmetric, bool* symmetric_out) {
  std::vector<DeviceSpan<T>> out;
  if (symmetric && SymmetricBuffer<T>::supported()) {
    try {
      for (const SymmetricBuffer<T>& b : SymmetricBuffer<T>::create_all(comms, count)) out.push_back(b.view());
      *symmetric_out = true;
      return out;
    } catch (const NcclError&) {  // NOLINT(bugprone-empty-catch): registration refused (no cuMem): plain memory
    }
  }
  for (const Communicator& c : comms) out.push_back(DeviceBuffer<T>(c.device(), count).view());
  *symmetric_out = false;
  return out;
}

template std::vector<DeviceSpan<half>> detail::reduction_buffers(std::span<const Communicator>, std::size_t, bool,
                                                                 bool*);
template std::vector<DeviceSpan<bfloat16>> detail::reduction_buffers(std::span<const Communicator>, std::size_t, bool,
                                                                     bool*);
template BasicSwigluShard<half> shard_swiglu_weights(const Stream&, const BasicSwigluWeights<half>&, int, int, int,
                                                     int);
template BasicSwigluShard<bfloat16> shard_swiglu_weights(const Stream&, const BasicSwigluWeights<bfloat16>&, int, int,
                                                         int, int);
template class BasicTensorParallelMlp<half>;
template class BasicTensorParallelMlp<bfloat16>;

}  // namespace lazygraph::nn
