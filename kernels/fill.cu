// Fills (out[i] = value for i < n), and the staging copy of graph-backed modules.
#include "lazygraph/kernel_common.cuh"

extern "C" __global__ void fill_f32(float* out, float value, int n) {
  for (long long i = lg::global_index(); i < n; i += lg::grid_stride()) out[i] = value;
}

extern "C" __global__ void iota_f32(float* out, float start, float step, int n) {
  for (long long i = lg::global_index(); i < n; i += lg::grid_stride()) out[i] = start + step * static_cast<float>(i);
}

// Copies `words` 4-byte words from src to dst, either of which may be pinned host memory (the device reaches it
// through unified addressing): the staging copies of graph-backed modules (module/host_io.hpp), which cost less as
// a kernel node than as a memcpy node for the small inputs and outputs of a forward pass.
extern "C" __global__ void staging_copy(const unsigned* src, unsigned* dst, int words) {
  for (long long i = lg::global_index(); i < words; i += lg::grid_stride()) dst[i] = src[i];
}
