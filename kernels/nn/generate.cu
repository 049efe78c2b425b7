// The loop step of Decoder::generate: after each decode step inside the graph's WHILE loop, records the chosen
// token and sets up the next step, all on the device.
//
//   generate_advance(c, next, tokens, positions, control, out)
//     control = [n, stop_token, count]. Appends next[0] to out[count] and counts it; feeds it back as the token of
//     row 0 (tokens[0]) at the next position (positions[0] + 1); keeps the loop going (c = 1) while fewer than n
//     tokens are out and the token is not stop_token (which is appended too).
//     Launch: one thread.
#include "lazygraph/condition.cuh"

extern "C" __global__ void generate_advance(lg::Condition c, const int* next, int* tokens, int* positions, int* control,
                                            int* out) {
  const int token = next[0];
  const int count = control[2];
  out[count] = token;
  control[2] = count + 1;
  tokens[0] = token;
  positions[0] += 1;
  lg::set_condition(c, count + 1 < control[0] && token != control[1] ? 1u : 0u);
}
