// Precompiled for every file of lazygraph_nn_tests (Meson's cpp_pch): the headers nearly all of them include,
// parsed once per build instead of once per file. Each test file still includes what it uses. No include guard:
// the compiler reads it as a main file.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
