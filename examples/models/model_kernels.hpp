#pragma once
/// \file
/// The typed handles of the decode-step kernels in kernels/ and their launch shapes. Each call returns a lazy
/// launch op; the model files compose them into forward passes.

#include <lazygraph/lazygraph.hpp>

namespace models {

namespace lg = lazygraph;
using lg::half;

struct ModelKernels {
  /// `early_launch`: launch every kernel early (see step_config); false gives ordinary launches, to compare.
  explicit ModelKernels(const lg::KernelLibrary& library, bool early_launch = true);

  lg::Kernel<void(const half*, const int*, half*, int)> embedding;
  lg::Kernel<void(const half*, const half*, half*, int, int)> gemv_add;
  lg::Kernel<void(const half*, const half*, const half*, half*, int, int, float)> rms_norm_gemv;
  lg::Kernel<void(const half*, const half*, const half*, const half*, half*, int, int, float)> rms_norm_gemv_swiglu;
  lg::Kernel<void(half*, half*, const int*, int, int, float)> rope;
  lg::Kernel<void(const half*, const half*, half*, half*, const int*, int, int, int)> kv_append;
  lg::Kernel<void(const half*, const half*, const half*, half*, const int*, int, int, int, float)> attention;
  lg::Kernel<void(const half*, int*, int)> argmax;
  lg::Kernel<void(half*, long long, unsigned, float, float)> fill_uniform;
  bool early_launch = true;

  /// `config` as a decode step launches it: early (programmatic dependent launch, LaunchConfig::early_launch)
  /// unless switched off. Every kernel above calls lg::wait_for_prior_grids() before touching activations, and
  /// the gemv kernels prefetch their weights into L2 before that wait, so one kernel's start overlaps the
  /// previous one's tail.
  [[nodiscard]] lg::LaunchConfig step_config(lg::LaunchConfig config) const {
    config.early_launch = early_launch;
    return config;
  }

  /// Launch shape of the gemv family (kernels/gemv.cu) for a rows x cols weight: one row per group of warps,
  /// 256 threads per block. Rows up to 4096 columns get one warp each, 8 rows per block; longer rows two warps
  /// each, 4 rows per block. bench_gemv on the H200 (eager, median µs; copy ceiling 4.26 TB/s):
  ///   4096 x 1024:  5.3 with (32, 1, 8) vs 7.3 with (32, 2, 4);   11008 x 4096: 24.4 vs 27.1;
  ///   1024 x 4096:  4.3 vs 4.6;   4096 x 11008: 26.2 vs 23.8 (3.78 TB/s), where two warps per row win.
  [[nodiscard]] lg::LaunchConfig gemv_config(int rows, int cols) const {
    const unsigned warps_per_row = cols > 4096 ? 2 : 1;
    const unsigned rows_per_block = 8 / warps_per_row;
    return step_config({{(static_cast<unsigned>(rows) + rows_per_block - 1) / rows_per_block, 1, 1},
                        {32, warps_per_row, rows_per_block},
                        0});
  }
};

}  // namespace models
