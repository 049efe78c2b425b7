// expect-error: writes\(\.\.\.\): a read-only DeviceSpan<const T> is never written
#include <lazygraph/lazygraph.hpp>

// Declaring that an op writes memory it was only given to read is refused: the declaration would lie.
void misuse(const lazygraph::DeviceBuffer<float>& out) {
  (void)lazygraph::with_accesses("copy", lazygraph::value(0), lazygraph::writes(out.cview()));
}
