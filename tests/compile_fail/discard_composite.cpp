// expect-error: ignoring return(ed)? value.*nodiscard
// extra-flags: -Werror=unused-result
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

void misuse(lg::DeviceBuffer<float>& a) { lg::fill(a.view(), 1.0F) >> lg::fill(a.view(), 2.0F); }
