#pragma once
/// \file
/// Everything in lazygraph, layer by layer.

#include "lazygraph/driver.hpp"
#include "lazygraph/kernels.hpp"
