#pragma once
/// \file
/// What each bucket of a paged decoder's wide step cost when it was captured (nn/wide_step.hpp,
/// BasicDecoder::wide_step_report): the targets are every bucket of the Llama-3.2-1B shape captured in at most
/// 2 s, and the graphs' memory at most 1.2x the largest bucket's.

#include <cstddef>

namespace lazygraph::nn {

/// A wide step bucket's capture, measured when it was captured.
struct WideBucketReport {
  int rows = 0;                ///< the bucket
  double capture_seconds = 0;  ///< planning its GEMMs, capturing, instantiating and uploading its graph
  /// Device memory the capture took: the device's free memory before less after (the graph's own memory and its GEMM
  /// plans' workspaces; other work on the device at the same time would count too).
  std::size_t graph_bytes = 0;
};

}  // namespace lazygraph::nn
