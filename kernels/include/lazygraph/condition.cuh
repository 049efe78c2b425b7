// Conditions of CUDA graph conditional nodes (IF, WHILE, SWITCH), set from device code. Include as
// "lazygraph/condition.cuh".
//
// lg::Condition is the device side of the host's lazygraph::Condition (graph/condition.hpp), passed to a kernel by
// value like any argument. set_condition calls the device runtime's builtin cudaGraphSetConditional, declared below
// because NVRTC declares it only for relocatable compiles: a whole-program module that calls it loads as it is (the
// driver resolves the builtin), so no -rdc and no link with libcudadevrt.a: kernels that set conditions compile
// like any other.
// One thread should set a condition per launch: concurrent sets race (the CUDA documentation calls it undefined).
#pragma once

extern "C" __device__ void cudaGraphSetConditional(unsigned long long handle, unsigned int value);

namespace lg {

/// A graph's conditional handle: which IF / WHILE / SWITCH node set_condition steers.
struct Condition {
  unsigned long long handle;
};

/// Sets the condition's value for the conditional node that reads it next: for IF and WHILE nonzero means run
/// the body (again); for SWITCH the value picks the body (none when it is past the last).
__device__ __forceinline__ void set_condition(Condition c, unsigned value) { cudaGraphSetConditional(c.handle, value); }

}  // namespace lg
