// y = a * x + y, element-wise over n floats.
#include "lazygraph/kernel_common.cuh"

extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
  for (long long i = lg::global_index(); i < n; i += lg::grid_stride()) y[i] = a * x[i] + y[i];
}

// The same with `a` read from device memory (a DeviceScalar): a graph replays it with whatever value `a` holds.
extern "C" __global__ void axpy_scalar(const float* a, const float* x, float* y, int n) {
  const float scale = *a;
  for (long long i = lg::global_index(); i < n; i += lg::grid_stride()) y[i] = scale * x[i] + y[i];
}
