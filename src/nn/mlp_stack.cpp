#include "lazygraph/nn/mlp_stack.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace lazygraph::nn {

namespace {

constexpr int warps_per_block = 8;  // kernels/nn/mlp_stack.cu: 256 threads per block
constexpr unsigned stack_block_threads = 32 * warps_per_block;

bool valid_split(int s) { return s == 0 || s == 1 || s == 2 || s == 4 || s == 8; }

/// Warps per row for `rows` rows of `cols` columns.
int split_for(int rows, int cols, int resident_warps) {
  int split = cols > 4096 ? 2 : 1;
  while (split < warps_per_block && static_cast<long long>(rows) * split < resident_warps &&
         cols / (2 * split) >= 256) {
    split *= 2;
  }
  return split;
}

/// The table's owner: the table itself and every weight it points at.
struct TableOwner {
  DeviceBuffer<MlpLayer> table;
  std::vector<std::shared_ptr<const void>> weights;
};

}  // namespace

MlpStackSplit mlp_stack_split(MlpStackSplit split, int d, int ffn, int resident_warps) {
  if (!valid_split(split.a) || !valid_split(split.b)) {
    throw UsageError("MlpStackSplit: warps per row must be 0 (by shape), 1, 2, 4 or 8; got a = " +
                     std::to_string(split.a) + ", b = " + std::to_string(split.b));
  }
  if (split.a == 0) split.a = split_for(ffn, d, resident_warps);
  if (split.b == 0) split.b = split_for(d, ffn, resident_warps);
  return split;
}

template <Element T>
BasicMlpStack<T>::BasicMlpStack(const Stream& stream, const BasicKernels<T>& kernels,
                                std::span<const std::type_identity_t<BasicSwigluWeights<T>>> layers, int d, int ffn,
                                float eps, MlpStackSplit split)
    : kernel_(kernels.mlp_stack),
      early_launch_(kernels.early_launch),
      layer_count_(static_cast<int>(layers.size())),
      d_(d),
      ffn_(ffn),
      eps_(eps) {
  if (layers.empty()) throw UsageError("MlpStack: no layers");
  if (d <= 0 || d % 8 != 0 || ffn <= 0 || ffn % 8 != 0) {
    throw UsageError("MlpStack: d (" + std::to_string(d) + ") and ffn (" + std::to_string(ffn) +
                     ") must be positive multiples of 8");
  }
  const auto check = [&](std::size_t layer, const char* name, std::size_t size, std::size_t want) {
    if (size != want) {
      throw UsageError("MlpStack: layer " + std::to_string(layer) + " " + name + " has " + std::to_string(size) +
                       " elements; d " + std::to_string(d) + ", ffn " + std::to_string(ffn) + " need " +
                       std::to_string(want));
    }
  };
  const auto dd = static_cast<std::size_t>(d);
  const auto ff = static_cast<std::size_t>(ffn);
  std::vector<MlpLayer> host;
  std::vector<std::shared_ptr<const void>> weights;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const BasicSwigluWeights<T>& w = layers[l];
    check(l, "gain", w.gain.size(), dd);
    check(l, "w1", w.w1.dense().size(), ff * dd);
    check(l, "w3", w.w3.dense().size(), ff * dd);
    check(l, "w2", w.w2.dense().size(), dd * ff);
    host.push_back({w.gain.cview().address(), w.w1.dense().address(), w.w3.dense().address(), w.w2.dense().address()});
    weights.push_back(w.gain.cview().owner());
    for (const Weight<T>* m : {&w.w1, &w.w3, &w.w2}) weights.push_back(m->owner());
  }
  int resident_warps = 0;
  for (std::size_t v = 0; v < grid_.size(); ++v) {
    const int batch = 1 << v;
    const int per_sm = kernel_.variant(batch).max_active_blocks_per_sm(stack_block_threads);
    grid_[v] = static_cast<unsigned>(std::max(1, per_sm) * stream.device().sm_count());
    if (v == 0) resident_warps = static_cast<int>(grid_[v]) * warps_per_block;
  }
  split_ = mlp_stack_split(split, d, ffn, resident_warps);
  auto owner = std::make_shared<TableOwner>(TableOwner{from_host(host).sync_on(stream), std::move(weights)});
  table_ = DeviceSpan<const MlpLayer>(owner->table.cview().address(), host.size(), owner);
  // kernels/nn/mlp_stack.cu: a 128-byte line (32 counters) each for the ticket and the finished count, then 8 lines
  // per phase, two phases per layer.
  sync_ = zeros<unsigned>((2 + 16 * host.size()) * 32).sync_on(stream).view();
}

template <Element T>
typename BasicMlpStack<T>::Op BasicMlpStack<T>::op(DeviceSpan<T> x, DeviceSpan<T> act, int batch) const {
  if (batch < 1 || batch > 8) throw UsageError("MlpStack: batch " + std::to_string(batch) + " is outside 1..8");
  const auto rows = static_cast<std::size_t>(batch);
  if (x.size() < rows * static_cast<std::size_t>(d_) || act.size() < rows * static_cast<std::size_t>(ffn_)) {
    throw UsageError("MlpStack: a batch of " + std::to_string(batch) + " needs x of " +
                     std::to_string(rows * static_cast<std::size_t>(d_)) + " and act of " +
                     std::to_string(rows * static_cast<std::size_t>(ffn_)) + " elements; got " +
                     std::to_string(x.size()) + " and " + std::to_string(act.size()));
  }
  LaunchConfig config{{grid(batch), 1, 1}, {stack_block_threads, 1, 1}, 0};
  config.early_launch = early_launch_;
  return kernel_(config, table_, std::move(x), std::move(act), sync_, layer_count_, d_, ffn_, eps_, split_.a, split_.b,
                 batch);
}

template <Element T>
unsigned BasicMlpStack<T>::grid(int batch) const {
  return grid_[batch <= 1 ? 0 : batch <= 2 ? 1 : batch <= 4 ? 2 : 3];
}

template class BasicMlpStack<half>;
template class BasicMlpStack<bfloat16>;

}  // namespace lazygraph::nn
