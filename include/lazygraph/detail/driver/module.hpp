#pragma once
/// \file
/// LoadedModule: a CUBIN or PTX image loaded into a device's context (move-only RAII).

#include <cuda.h>

#include <string>
#include <vector>

#include "lazygraph/detail/driver/device.hpp"

namespace lazygraph {

class LoadedModule {
 public:
  /// Loads `image` (CUBIN bytes, or NUL-terminated PTX). `name` appears in errors.
  /// \throws CaptureError when a graph capture is in progress (loading would invalidate it).
  LoadedModule(const Device& device, const void* image, std::string name);
  ~LoadedModule();
  LoadedModule(LoadedModule&& other) noexcept;
  LoadedModule& operator=(LoadedModule&& other) noexcept;
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;

  /// The kernel of that (unmangled) name, or nullptr when the module has none.
  [[nodiscard]] CUfunction function(const std::string& kernel) const;
  /// The names of every kernel in the module.
  [[nodiscard]] std::vector<std::string> function_names() const;
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] CUmodule get() const;
  [[nodiscard]] const Device& device() const noexcept { return device_; }

 private:
  Device device_;
  CUmodule handle_ = nullptr;
  std::string name_;
};

}  // namespace lazygraph
