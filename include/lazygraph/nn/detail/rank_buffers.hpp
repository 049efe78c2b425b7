#pragma once
/// \file
/// nn's private part: the tensor-parallel modules' helpers (tensor_parallel.hpp): the buffers ranks all-reduce in,
/// copies of a matrix's rows or columns, the check of the kernel libraries given.

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "lazygraph/driver/communicator.hpp"
#include "lazygraph/driver/device_buffer.hpp"
#include "lazygraph/driver/stream.hpp"
#include "lazygraph/nn/element.hpp"

namespace lazygraph::nn::detail {

/// Every rank's buffer of `count` elements to all-reduce, in rank order: SymmetricBuffers when `symmetric` and
/// NCCL has symmetric memory and registers it, else DeviceBuffers (`*symmetric_out` says which). Each span keeps its
/// memory alive.
template <Element T>
std::vector<DeviceSpan<T>> reduction_buffers(std::span<const Communicator> comms, std::size_t count, bool symmetric,
                                             bool* symmetric_out);
/// \throws UsageError unless there is one kernel library per rank, naming `module`.
void check_libraries(std::string_view module, std::size_t libraries, std::size_t ranks);
/// Rows [first, first + count) of the row-major matrix `full` of `cols` columns, copied on `stream`.
template <Element T>
DeviceBuffer<T> copy_rows(const Stream& stream, DeviceSpan<const T> full, std::size_t cols, std::size_t first,
                          std::size_t count);
/// Columns [first, first + count) of every one of the `rows` rows of the row-major matrix `full` of `cols` columns,
/// copied on `stream` (one 2-D copy).
template <Element T>
DeviceBuffer<T> copy_columns(const Stream& stream, DeviceSpan<const T> full, std::size_t rows, std::size_t cols,
                             std::size_t first, std::size_t count);

}  // namespace lazygraph::nn::detail
