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

  /// Launch shape of the gemv family (kernels/gemv.cu) for `rows` output rows: blocks of (32, 2, 4) — two
  /// warps per row, four rows per block — one row per warp pair. On the H200 this shape streamed 4096 x 11008
  /// and 11008 x 4096 weights at 86-87% of the copy bandwidth (bench_gemv), the best of the shapes tried.
  [[nodiscard]] lg::LaunchConfig gemv_config(int rows) const {
    constexpr unsigned warps_per_row = 2;
    constexpr unsigned rows_per_block = 4;
    return step_config({{(static_cast<unsigned>(rows) + rows_per_block - 1) / rows_per_block, 1, 1},
                        {32, warps_per_row, rows_per_block},
                        0});
  }
};

}  // namespace models
