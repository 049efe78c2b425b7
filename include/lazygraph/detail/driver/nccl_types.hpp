#pragma once
/// \file
/// The types of NCCL's ABI (nccl.h, NCCL 2.x) that lazygraph passes around: opaque communicator and window handles,
/// the result, data type and reduction codes, the unique id and a point-to-point transfer. Declared here, apart from
/// the functions that call NCCL (nccl_api.hpp, the foreign-function layer), so that a public header can hold a
/// communicator or name a data type without reaching them, and so that building lazygraph needs no nccl.h.

#include <array>
#include <cstddef>

namespace lazygraph::detail::nccl {

/// ncclComm_t: an opaque communicator.
struct CommObject;
using Comm = CommObject*;
/// ncclWindow_t: an opaque registration of memory with a communicator (NCCL 2.27+).
struct WindowObject;
using Window = WindowObject*;
/// NCCL_WIN_COLL_SYMMETRIC: every rank registers a buffer at the same offset, for NCCL's symmetric kernels.
constexpr int window_symmetric = 0x01;

/// ncclResult_t's values.
enum Result : int {
  success = 0,
  unhandled_cuda_error = 1,
  system_error = 2,
  internal_error = 3,
  invalid_argument = 4,
  invalid_usage = 5,
  remote_error = 6,
  in_progress = 7,
};

/// ncclDataType_t's values for the element types lazygraph sends.
enum class DataType : int {
  int8 = 0,
  uint8 = 1,
  int32 = 2,
  uint32 = 3,
  int64 = 4,
  uint64 = 5,
  float16 = 6,
  float32 = 7,
  float64 = 8,
  bfloat16 = 9
};

/// ncclRedOp_t's built-in operations.
enum class RedOp : int { sum = 0, prod = 1, max = 2, min = 3, avg = 4 };

/// ncclUniqueId: 128 opaque bytes that every rank of one communicator must be given.
struct UniqueId {
  std::array<char, 128> internal{};
};

/// One send or receive of a group (send_recv, nccl_api.hpp).
struct PointToPoint {
  const void* send = nullptr;  ///< null for a receive
  void* recv = nullptr;        ///< null for a send
  std::size_t count = 0;
  int peer = 0;
};

}  // namespace lazygraph::detail::nccl
