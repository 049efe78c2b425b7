#include "lazygraph/nn/tensor_parallel.hpp"

#include <string>

#include "lazygraph/detail/driver/driver_api.hpp"

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

template <Element T>
BasicSwigluShard<T> shard_swiglu_weights(const Stream& stream, const BasicSwigluWeights<T>& full, int d, int ffn,
                                         int rank, int ranks) {
  const int f = ffn / ranks;
  const auto rows = static_cast<std::size_t>(f) * static_cast<std::size_t>(d);
  const Device& device = stream.device();
  BasicSwigluShard<T> shard{DeviceBuffer<T>(device, static_cast<std::size_t>(d)), DeviceBuffer<T>(device, rows),
                            DeviceBuffer<T>(device, rows), DeviceBuffer<T>(device, rows), f};
  copy_async(stream, shard.gain.view(), full.gain.cview());
  // W1 and W3: rows [rank f, (rank + 1) f), contiguous.
  copy_async(stream, shard.w1.view(), full.w1.cview().subspan(static_cast<std::size_t>(rank) * rows, rows));
  copy_async(stream, shard.w3.view(), full.w3.cview().subspan(static_cast<std::size_t>(rank) * rows, rows));
  // W2: columns [rank f, (rank + 1) f) of every one of its d rows.
  detail::driver::copy_device_to_device_2d(
      device.context(), shard.w2.view().address(), static_cast<std::size_t>(f) * sizeof(T),
      full.w2.cview().address() + static_cast<std::size_t>(rank) * static_cast<std::size_t>(f) * sizeof(T),
      static_cast<std::size_t>(ffn) * sizeof(T), static_cast<std::size_t>(f) * sizeof(T), static_cast<std::size_t>(d),
      stream.get());
  stream.synchronize();
  return shard;
}

template <Element T>
BasicTensorParallelMlp<T>::BasicTensorParallelMlp(std::span<const Communicator> comms,
                                                  std::span<const KernelLibrary* const> libraries,
                                                  const MlpConfig& config)
    : config_(config) {
  const int n = static_cast<int>(comms.size());
  check_tensor_parallel(config_, n);
  if (libraries.size() != comms.size()) {
    throw UsageError("TensorParallelMlp: " + std::to_string(libraries.size()) + " kernel libraries for " +
                     std::to_string(n) + " ranks (one per rank's device)");
  }
  const auto d = static_cast<std::size_t>(config_.d);
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
    ranks_.push_back(Rank{comm, Stream(comm.device()), std::move(kernels), std::move(layers),
                          DeviceBuffer<T>(comm.device(), d), DeviceBuffer<T>(comm.device(), d),
                          DeviceBuffer<T>(comm.device(), static_cast<std::size_t>(config_.ffn / n))});
  }
  std::vector<Communicator> ordered;
  ordered.reserve(ranks_.size());
  for (const Rank& r : ranks_) ordered.push_back(r.comm);
  graph_.emplace(MultiDeviceGraph::capture(ordered, [this](int r, Scope& s) {
    Rank& rank = ranks_[static_cast<std::size_t>(r)];
    s.record(copy(rank.x.view(), rank.input.cview()));
    for (const BasicSwigluShard<T>& layer : rank.layers) {
      s.record(tensor_parallel_swiglu_block(rank.kernels, layer, rank.comm, rank.x.view(), rank.act.view(), config_.d,
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
  for (Rank& r : ranks_) copy_async(r.stream, r.input.view(), x);
  for (std::size_t r = 0; r < ranks_.size(); ++r) {
    Event copied(ranks_[r].stream.device(), false);
    copied.record(ranks_[r].stream);
    graph_->graph(static_cast<int>(r)).stream().wait(copied);
  }
  graph_->launch();
  std::vector<T> out(static_cast<std::size_t>(config_.d));
  const Stream& s = graph_->graph(0).stream();
  copy_async(s, std::span<T>(out), ranks_[0].x.cview());
  s.synchronize();
  return out;
}

template BasicSwigluShard<half> shard_swiglu_weights(const Stream&, const BasicSwigluWeights<half>&, int, int, int,
                                                     int);
template BasicSwigluShard<bfloat16> shard_swiglu_weights(const Stream&, const BasicSwigluWeights<bfloat16>&, int, int,
                                                         int, int);
template class BasicTensorParallelMlp<half>;
template class BasicTensorParallelMlp<bfloat16>;

}  // namespace lazygraph::nn
