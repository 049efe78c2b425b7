// Precompiled for every file of lazygraph_tests (Meson's cpp_pch): the headers nearly all of them include, parsed
// once per build instead of once per file. Each test file still includes what it uses.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
