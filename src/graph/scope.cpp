#include "lazygraph/graph/scope.hpp"

namespace lazygraph {

Condition Scope::condition(unsigned default_value) {
  if (!open_) throw_closed();
  return Condition{ctx_->make_condition(default_value)};
}

}  // namespace lazygraph
