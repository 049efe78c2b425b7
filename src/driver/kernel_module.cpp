#include "lazygraph/driver/kernel_module.hpp"

#include <utility>

#include "lazygraph/detail/driver/capture.hpp"
#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/driver/error.hpp"

namespace lazygraph {

namespace drv = detail::driver;

namespace {

CUmodule load_outside_capture(const Device& device, const void* image, const std::string& name) {
  if (const std::string why = drv::module_load_forbidden_reason(); !why.empty()) {
    throw CaptureError("cannot load kernel module " + name + ": " + why +
                       " (module loading breaks the capture); create the KernelLibrary and look up kernels before "
                       "CudaGraph::scope / CudaGraph::capture");
  }
  return drv::module_load(device.context(), image, "module " + name);
}

}  // namespace

LoadedModule::LoadedModule(const Device& device, const void* image, std::string name)
    : device_(device), handle_(load_outside_capture(device, image, name)), name_(std::move(name)) {}

// Only a module holding a handle unloads it.
LoadedModule::~LoadedModule() {
  if (handle_ != nullptr) drv::module_unload_no_throw(device_.context(), handle_);
}

LoadedModule::LoadedModule(LoadedModule&& other) noexcept
    : device_(other.device_), handle_(std::exchange(other.handle_, nullptr)), name_(std::move(other.name_)) {}

LoadedModule& LoadedModule::operator=(LoadedModule&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) drv::module_unload_no_throw(device_.context(), handle_);
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
    name_ = std::move(other.name_);
  }
  return *this;
}

CUmodule LoadedModule::get() const {
  if (handle_ == nullptr) [[unlikely]]
    throw UsageError("use of a moved-from LoadedModule");
  return handle_;
}

CUfunction LoadedModule::function(const std::string& kernel) const {
  return drv::module_function(device_.context(), get(), kernel);
}

std::vector<std::string> LoadedModule::function_names() const {
  return drv::module_function_names(device_.context(), get());
}

}  // namespace lazygraph
