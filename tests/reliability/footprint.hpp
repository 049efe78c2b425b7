#pragma once
// What a process holds: lazygraph's driver objects, device memory in use, and host memory (resident set).
// Soak and failure tests take one before and after and require them flat.

#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "common/gpu.hpp"

namespace lgtest {

struct Footprint {
  lazygraph::LiveHandles handles;
  std::size_t device_used = 0;  ///< total - free, as the driver reports it
  std::size_t host_resident = 0;

  static Footprint now() {
    Footprint f;
    f.handles = lazygraph::live_handles();
    f.device_used = device().total_memory() - device().free_memory();
    std::ifstream statm("/proc/self/statm");
    std::size_t size_pages = 0;
    std::size_t resident_pages = 0;
    statm >> size_pages >> resident_pages;
    f.host_resident = resident_pages * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return f;
  }

  /// The same driver objects as `before`; device memory within 2 MiB (the driver's own bookkeeping moves a
  /// little); host memory within 8 MiB (allocator caches; a leak of a kilobyte per cycle over 10^4 cycles
  /// would exceed it — smaller leaks of lazygraph's own objects show in the handle counts).
  void check_flat(const Footprint& before) const {
    CHECK(handles.device_allocations == before.handles.device_allocations);
    CHECK(handles.device_bytes == before.handles.device_bytes);
    CHECK(handles.pinned_allocations == before.handles.pinned_allocations);
    CHECK(handles.streams == before.handles.streams);
    CHECK(handles.events == before.handles.events);
    CHECK(handles.modules == before.handles.modules);
    CHECK(handles.graphs == before.handles.graphs);
    CHECK(handles.graph_execs == before.handles.graph_execs);
    const auto grew = [](std::size_t after, std::size_t b) { return after > b ? after - b : 0; };
    CHECK(grew(device_used, before.device_used) <= (2ULL << 20U));
#if defined(__SANITIZE_ADDRESS__)
    // AddressSanitizer keeps freed memory in quarantine (256 MiB by default): the resident set grows by design.
#else
    CHECK(grew(host_resident, before.host_resident) <= (8ULL << 20U));
#endif
    MESSAGE("device in use: " << before.device_used << " -> " << device_used << " bytes; host resident: "
                              << before.host_resident << " -> " << host_resident << " bytes");
  }
};

}  // namespace lgtest
