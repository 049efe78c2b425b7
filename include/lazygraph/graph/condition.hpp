#pragma once
/// \file
/// Condition: the conditional handle of a captured graph, which steers its if_ / while_ / switch_ nodes
/// (conditional.hpp). A kernel sets it with `lg::set_condition` (kernels/include/lazygraph/condition.cuh); on the
/// host it is made by Scope::condition and passed to kernels by value, like any argument (the kernel declares an
/// `lg::Condition` parameter; the types are checked against each other as for every argument).

#include <cuda.h>

namespace lazygraph {

/// A graph's conditional handle. Every launch of the graph starts it at the default value given to
/// Scope::condition; kernels change it with lg::set_condition. Valid only in the graph it was made for.
struct Condition {
  CUgraphConditionalHandle handle = 0;  ///< the driver's handle
};

}  // namespace lazygraph
