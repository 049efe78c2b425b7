// Fills: out[i] = value for i < n.
#include "lazygraph/kernel_common.cuh"

extern "C" __global__ void fill_f32(float* out, float value, int n) {
  for (long long i = lg::global_index(); i < n; i += lg::grid_stride()) out[i] = value;
}

extern "C" __global__ void iota_f32(float* out, float start, float step, int n) {
  for (long long i = lg::global_index(); i < n; i += lg::grid_stride()) out[i] = start + step * static_cast<float>(i);
}
