#pragma once
/// \file
/// profile_kernels(stream, op): where one execution of an op spends its time, kernel by kernel, without external
/// tools. The op runs eagerly several times with a CUDA event before and after each kernel launch; each launch gets
/// the median of its times. Eager launches do not overlap as a graph's early-launched kernels do, so the times are
/// each kernel's own duration: their sum exceeds a graph replay by the launch gaps the graph hides.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "lazygraph/driver/stream.hpp"
#include "lazygraph/ops/concepts.hpp"
#include "lazygraph/ops/exec_context.hpp"

namespace lazygraph {

/// One kernel launch of a profiled op.
struct KernelTiming {
  std::string name;        ///< the kernel's name
  std::string label;       ///< the innermost named() part it ran in ("" outside any)
  std::size_t span_bytes;  ///< the bytes its span arguments view (KernelSubmission::span_bytes)
  double microseconds;     ///< median time between its two events
};

namespace detail {
/// Runs `run(ctx)` `repeats` times on `stream` with an observing context; the launches of every run must be the
/// same kernels in the same order. \throws UsageError for repeats < 1 or when two runs launch different kernels.
std::vector<KernelTiming> profile_runs(const Stream& stream, int repeats, const std::function<void(ExecContext&)>& run);
}  // namespace detail

/// Profiles `op` (see the file comment): returns its kernel launches in order. `op` must be safe to run `repeats`
/// times (plus one warm-up) in a row. \throws what executing `op` throws; UsageError for repeats < 1.
template <DeviceOp Op>
std::vector<KernelTiming> profile_kernels(const Stream& stream, const Op& op, int repeats = 21) {
  return detail::profile_runs(stream, repeats, [&](ExecContext& ctx) { (void)op.execute(ctx); });
}

}  // namespace lazygraph
