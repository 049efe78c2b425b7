#pragma once
/// \file
/// LoadedModule: a CUDA module, that is a CUBIN or PTX image of kernels loaded into a device's context (move-only
/// RAII). Not the module layer's Module (detail/module/: a `forward` pass, GraphModule replays it as a graph).

#include <cuda.h>

#include <string>
#include <vector>

#include "lazygraph/driver/device.hpp"

namespace lazygraph {

/// A loaded kernel module; unloaded when destroyed. KernelLibrary makes these: most code never needs one.
///
/// Keep it alive while anything may launch its kernels (a KernelInfo, hence every Kernel handle, launch op and
/// graph that uses it, holds it through a shared_ptr).
class LoadedModule {
 public:
  /// Loads `image` (CUBIN bytes, or NUL-terminated PTX). `name` appears in errors.
  /// \throws CaptureError when a graph capture is in progress (loading would invalidate it).
  LoadedModule(const Device& device, const void* image, std::string name);
  ~LoadedModule();
  /// Takes `other`'s module; `other` is left moved-from (`get()` throws UsageError).
  LoadedModule(LoadedModule&& other) noexcept;
  /// Unloads this module (when it holds one) and takes `other`'s.
  LoadedModule& operator=(LoadedModule&& other) noexcept;
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;

  /// The kernel of that (unmangled) name, or nullptr when the module has none.
  [[nodiscard]] CUfunction function(const std::string& kernel) const;
  /// The names of every kernel in the module.
  [[nodiscard]] std::vector<std::string> function_names() const;
  /// The name given at load, used in errors (e.g. "axpy.cu").
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// The raw handle, still owned by this object. \throws UsageError on a moved-from module.
  [[nodiscard]] CUmodule get() const;
  /// The device whose context holds the module.
  [[nodiscard]] const Device& device() const noexcept { return device_; }

 private:
  Device device_;
  CUmodule handle_ = nullptr;
  std::string name_;
};

}  // namespace lazygraph
