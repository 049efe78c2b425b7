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
  /// Device memory the capture, instantiation and upload of its graph took: the device's free memory before less after
  /// (other work on the device at the same time would count too). Its buffers are the step's, shared by every bucket.
  std::size_t graph_bytes = 0;
  /// The GEMM workspace the bucket would take alone: the most one of its plans needs (cuBLASLt's algorithm for the
  /// shape; at most kPrefillGemmWorkspace, 8 MiB). Every bucket's plans share one workspace of the most any bucket
  /// needs, made with the first bucket: the buckets together take the largest of these figures, not their sum.
  std::size_t gemm_workspace_bytes = 0;
};

}  // namespace lazygraph::nn
