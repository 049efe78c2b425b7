// expect-error: ignoring return(ed)? value.*nodiscard
// extra-flags: -Werror=unused-result
// An op built as a statement and dropped does nothing: forgetting `.sync_on(stream)` must not be silent.
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

void misuse(lg::DeviceBuffer<float>& a, const lg::DeviceBuffer<float>& b) { lg::copy(a.view(), b.cview()); }
