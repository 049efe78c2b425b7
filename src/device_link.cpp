#include "lazygraph/detail/kernels/device_link.hpp"

#include <nvJitLink.h>

#include <filesystem>

#include "lazygraph/detail/driver/error.hpp"

namespace lazygraph {

namespace {

/// Owns an nvJitLink handle.
struct LinkGuard {
  nvJitLinkHandle handle = nullptr;
  LinkGuard() = default;
  LinkGuard(const LinkGuard&) = delete;
  LinkGuard& operator=(const LinkGuard&) = delete;
  ~LinkGuard() {
    if (handle != nullptr) (void)nvJitLinkDestroy(&handle);
  }
};

std::string error_log(nvJitLinkHandle h) {
  std::size_t size = 0;
  if (h == nullptr || nvJitLinkGetErrorLogSize(h, &size) != NVJITLINK_SUCCESS || size == 0) return {};
  std::string log(size, '\0');
  if (nvJitLinkGetErrorLog(h, log.data()) != NVJITLINK_SUCCESS) return {};
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

bool uses_device_runtime(const KernelSource& source) {
  return source.text.find("lazygraph/condition.cuh") != std::string::npos ||
         source.text.find("cudaGraphSetConditional") != std::string::npos;
}

std::string device_runtime_library() { return LAZYGRAPH_CUDADEVRT; }

std::vector<char> link_device_runtime(std::string_view file, std::span<const char> cubin, int arch) {
  const std::string name(file);
  const std::string library = device_runtime_library();
  if (!std::filesystem::exists(library)) {
    throw CompileError(name, "cannot link with the CUDA device runtime: " + library +
                                 " does not exist (lazygraph was configured with another CUDA toolkit)");
  }
  const std::string arch_option = "-arch=sm_" + std::to_string(arch);
  const char* options[] = {arch_option.c_str()};
  LinkGuard link;
  const auto fail = [&](const char* step, nvJitLinkResult r) {
    throw CompileError(name, std::string("linking with the CUDA device runtime failed: ") + step + " returned " +
                                 std::to_string(static_cast<int>(r)) + "\n" + error_log(link.handle));
  };
  if (const nvJitLinkResult r = nvJitLinkCreate(&link.handle, 1, options); r != NVJITLINK_SUCCESS) {
    fail("nvJitLinkCreate", r);
  }
  if (const nvJitLinkResult r =
          nvJitLinkAddData(link.handle, NVJITLINK_INPUT_CUBIN, cubin.data(), cubin.size(), name.c_str());
      r != NVJITLINK_SUCCESS) {
    fail("nvJitLinkAddData", r);
  }
  if (const nvJitLinkResult r = nvJitLinkAddFile(link.handle, NVJITLINK_INPUT_LIBRARY, library.c_str());
      r != NVJITLINK_SUCCESS) {
    fail("nvJitLinkAddFile(libcudadevrt.a)", r);
  }
  if (const nvJitLinkResult r = nvJitLinkComplete(link.handle); r != NVJITLINK_SUCCESS) fail("nvJitLinkComplete", r);
  std::size_t size = 0;
  if (const nvJitLinkResult r = nvJitLinkGetLinkedCubinSize(link.handle, &size); r != NVJITLINK_SUCCESS) {
    fail("nvJitLinkGetLinkedCubinSize", r);
  }
  std::vector<char> out(size);
  if (const nvJitLinkResult r = nvJitLinkGetLinkedCubin(link.handle, out.data()); r != NVJITLINK_SUCCESS) {
    fail("nvJitLinkGetLinkedCubin", r);
  }
  return out;
}

}  // namespace lazygraph
