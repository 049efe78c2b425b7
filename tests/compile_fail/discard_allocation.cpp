// expect-error: ignoring return(ed)? value.*nodiscard
// extra-flags: -Werror=unused-result
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

void misuse() { lg::zeros<float>(16); }
