// Device-side control for graph conditional nodes (lazygraph's if_, while_, switch_).
//
//   while_guard(c, state, max_iterations)
//     The last node of a bounded while_ body: counts the iteration in state[0] and, at max_iterations, clears the
//     condition (the loop stops after this iteration) and sets state[1] = 1. while_ zeroes both before the loop.
//     Launch: one thread.
#include "lazygraph/condition.cuh"

extern "C" __global__ void while_guard(lg::Condition c, unsigned* state, unsigned max_iterations) {
  const unsigned done = ++state[0];
  if (done >= max_iterations) {
    lg::set_condition(c, 0);
    state[1] = 1;
  }
}
