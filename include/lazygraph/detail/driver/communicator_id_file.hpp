#pragma once
/// \file
/// What CommunicatorId::read_file trusts in a file (driver/communicator.hpp): the rule alone, as host code, so that a
/// test can feed it what a file of another owner or mode would show without making one.

#include <cstdint>
#include <string>

namespace lazygraph::detail {

/// What read_file learns of the file it opened (fstat on its descriptor, so it is the file it then reads).
struct IdFileFacts {
  bool regular = false;     ///< a regular file (not a directory, FIFO, socket or device)
  std::uint32_t mode = 0;   ///< its permission bits (st_mode & 07777)
  std::uint32_t owner = 0;  ///< its owner's user id
  std::uint64_t bytes = 0;  ///< its size
};

/// Why a CommunicatorId file with `facts`, read by a process of effective user `reader`, is not trusted, or empty:
/// it must be a regular file, owned by `reader` or by root (a file of another user would join this rank to that
/// user's communicator), writable by no one but its owner (mode & 022 clear: else another user could have replaced the
/// id), and hold exactly `id_bytes`. The reason reads after the file's path ("is a directory...").
[[nodiscard]] std::string id_file_refusal(const IdFileFacts& facts, std::uint32_t reader, std::uint64_t id_bytes);

}  // namespace lazygraph::detail
