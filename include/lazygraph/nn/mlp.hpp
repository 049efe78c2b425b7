#pragma once
/// \file
/// A stack of SwiGLU MLP blocks with RMSNorm and residual adds (docs/nn.md gives the exact math), as an op
/// expression and as a graph-backed Module, over fp16 or bf16 (element.hpp).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "lazygraph/nn/kernels.hpp"
#include "lazygraph/nn/mlp_stack.hpp"
#include "lazygraph/nn/swiglu.hpp"

namespace lazygraph::nn {

/// The MLP stack's shape.
struct MlpConfig {
  int d = 512;                ///< width of the residual stream
  int ffn = 1536;             ///< hidden width of each block
  int layers = 16;            ///< blocks
  std::uint32_t seed = 1234;  ///< seed of the generated weights
  float eps = 1e-5F;          ///< RMSNorm epsilon
  bool early_launch = true;   ///< launch the kernels early (Kernels::step_config); false to compare
  /// Run batches of 2 to 8 on tensor cores (KernelOptions::tensor_cores); off: each row of a batch gets exactly the
  /// bits it would get alone.
  bool tensor_cores = false;
  /// Run the whole stack as one persistent kernel launch (MlpStack, kernels/nn/mlp_stack.cu) instead of two
  /// early-launched kernels per block (mlp_forward). Off by default: on the H100 the kernel chain was faster for
  /// every shape measured (bench_models' persistent column; the counters between phases cost more than a kernel
  /// boundary). Same math; results agree within rounding, not bit for bit.
  bool persistent = false;
  MlpStackSplit split{};  ///< the persistent kernel's split (0: by shape, mlp_stack_split)

  /// \throws UsageError unless d and ffn are positive multiples of 8 (the gemv kernels load 8 halves
  /// at a time) and layers >= 1.
  void validate() const;
  /// Bytes of weights one forward pass reads (the matrices and the norm gains).
  [[nodiscard]] std::size_t weight_bytes() const;
};

/// The whole MLP as one op: copies `input` into `output` (the residual stream), then runs every block on it.
template <Element T>
auto mlp_forward(const BasicKernels<T>& k, std::span<const std::type_identity_t<BasicSwigluWeights<T>>> layers,
                 const MlpConfig& config, DeviceSpan<const T> input, DeviceSpan<T> output, DeviceSpan<T> act) {
  std::vector<NamedOp<BasicSwigluBlockOp<T>>> blocks;
  blocks.reserve(layers.size());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    blocks.push_back(
        named("block " + std::to_string(l), swiglu_block(k, layers[l], output, act, config.d, config.ffn, config.eps)));
  }
  return copy(output, input) >> chain(std::move(blocks));
}

/// The MLP stack as a Module: weights generated on the GPU from the seed, forward pass captured once into a
/// CUDA graph at construction. `forward` copies the d inputs in, replays, and returns the d outputs.
/// Not thread-safe: forward it from one thread at a time.
template <Element T>
class BasicMlp {
 public:
  using Input = std::span<const T>;  ///< d values
  using Output = std::vector<T>;     ///< d values

  /// \throws UsageError for an invalid config; CudaError when the GPU runs out of memory.
  BasicMlp(const Stream& stream, const KernelLibrary& library, const MlpConfig& config);

  /// \throws UsageError unless x has d elements.
  Output forward(Input x) { return module_.forward(x); }
  /// forward, writing into `out` (d values). \throws UsageError unless x and out have d elements.
  void forward_into(Input x, std::span<T> out) { module_.forward_into(x, out); }
  /// As forward_into, for input already on the device (GraphModule::forward_resident: no copy in).
  void forward_resident(DeviceSpan<const T> x, std::span<T> out) { module_.forward_resident(x, out); }

  /// The forward pass as two kernels per block (mlp_forward), whatever `config().persistent` says: for running it
  /// without the graph (the benchmark's eager variant) or comparing with the persistent kernel.
  [[nodiscard]] auto forward_op(DeviceSpan<const T> input, DeviceSpan<T> output) {
    return mlp_forward(kernels_, layers_, config_, input, output, act_.view());
  }
  /// The forward pass as one persistent launch after the copy of `input` into `output`, whatever
  /// `config().persistent` says.
  [[nodiscard]] auto persistent_op(DeviceSpan<const T> input, DeviceSpan<T> output) {
    return copy(output, input) >> stack_.op(output, act_.view());
  }
  /// Records the forward pass that `forward` replays (persistent or not, as the config says).
  void record_forward(Scope& s, DeviceSpan<const T> input, DeviceSpan<T> output) {
    if (config_.persistent) {
      s.record(persistent_op(std::move(input), std::move(output)));
    } else {
      s.record(forward_op(std::move(input), std::move(output)));
    }
  }
  /// The persistent kernel's stack.
  [[nodiscard]] const BasicMlpStack<T>& stack() const noexcept { return stack_; }

  /// The config it was built with.
  [[nodiscard]] const MlpConfig& config() const noexcept { return config_; }
  /// Every block's weights.
  [[nodiscard]] const std::vector<BasicSwigluWeights<T>>& layers() const noexcept { return layers_; }
  /// The graph behind forward (replay it directly to time the device work alone).
  [[nodiscard]] CudaGraph<>& graph() noexcept { return module_.graph(); }
  /// The graph's input buffer (d values).
  [[nodiscard]] DeviceSpan<const T> input() const { return module_.input(); }
  /// The graph's output buffer (d values).
  [[nodiscard]] DeviceSpan<const T> output() const { return module_.output(); }

 private:
  MlpConfig config_;
  BasicKernels<T> kernels_;
  std::vector<BasicSwigluWeights<T>> layers_;
  DeviceBuffer<T> act_;
  BasicMlpStack<T> stack_;
  GraphModule<T, T> module_;
};

/// The fp16 MLP stack.
using Mlp = BasicMlp<half>;

extern template class BasicMlp<half>;
extern template class BasicMlp<bfloat16>;

static_assert(Module<Mlp>);
static_assert(Module<BasicMlp<bfloat16>>);

}  // namespace lazygraph::nn
