// An application's own kernel, compiled at run time by the KernelLibrary of 08_own_kernels: y = a * x + b * y,
// element-wise over n floats.
//
// lazygraph finds a kernel by its unmangled name and reads this declaration on the host to check the signature a
// program asks for, so it is spelled out in the file (not made by a macro) as `extern "C" __global__ void NAME(...)`.
#include "lazygraph/kernel_common.cuh"  // a core header: every kernel set sees kernels/include/ of lazygraph

extern "C" __global__ void scale_add(float a, const float* x, float b, float* y, int n) {
  for (long long i = lg::global_index(); i < n; i += lg::grid_stride()) y[i] = a * x[i] + b * y[i];
}
