#include "lazygraph/kernels/nvrtc.hpp"

#include <nvrtc.h>

#include <algorithm>
#include <range/v3/algorithm/max_element.hpp>
#include <range/v3/range/conversion.hpp>
#include <range/v3/view/filter.hpp>
#include <range/v3/view/transform.hpp>

#include "lazygraph/driver/error.hpp"

namespace lazygraph {

namespace {

void check(nvrtcResult r, const char* api, std::string_view object) {
  if (r != NVRTC_SUCCESS) [[unlikely]] {
    throw NvrtcError(api, static_cast<int>(r), nvrtcGetErrorString(r), std::string(object));
  }
}

/// Destroys the program on every path out of nvrtc_compile.
struct ProgramGuard {
  nvrtcProgram program = nullptr;
  ~ProgramGuard() {
    if (program != nullptr) (void)nvrtcDestroyProgram(&program);
  }
};

std::vector<int> supported_architectures() {
  int n = 0;
  check(nvrtcGetNumSupportedArchs(&n), "nvrtcGetNumSupportedArchs", "NVRTC");
  std::vector<int> archs(static_cast<std::size_t>(n));
  check(nvrtcGetSupportedArchs(archs.data()), "nvrtcGetSupportedArchs", "NVRTC");
  return archs;
}

}  // namespace

const std::vector<char>& CompileResult::image() const {
  if (!succeeded_) throw CompileError(file_, log_);
  return image_;
}

int nvrtc_target_architecture(int cc) {
  static const std::vector<int> archs = supported_architectures();
  auto at_or_below = archs | ranges::views::filter([cc](int a) { return a <= cc; }) | ranges::to<std::vector>();
  if (at_or_below.empty()) return 0;
  return *ranges::max_element(at_or_below);
}

std::string nvrtc_version() {
  int major = 0;
  int minor = 0;
  check(nvrtcVersion(&major, &minor), "nvrtcVersion", "NVRTC");
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<std::string> nvrtc_options(int arch, bool cubin) {
  std::vector<std::string> options{
      cubin ? "-arch=sm_" + std::to_string(arch) : "--gpu-architecture=compute_" + std::to_string(arch), "--std=c++20",
      "-default-device"};
  const char* lineinfo = std::getenv("LAZYGRAPH_NVRTC_LINEINFO");
  if (lineinfo != nullptr && *lineinfo != '\0' && std::string_view(lineinfo) != "0") options.emplace_back("-lineinfo");
  return options;
}

CompileResult nvrtc_compile(const KernelSource& source, std::span<const KernelSource> headers,
                            std::span<const std::string> options, bool cubin) {
  const auto header_texts = headers | ranges::views::transform([](const KernelSource& h) { return h.text.c_str(); }) |
                            ranges::to<std::vector>();
  const auto header_names = headers | ranges::views::transform([](const KernelSource& h) { return h.name.c_str(); }) |
                            ranges::to<std::vector>();
  const auto option_ptrs =
      options | ranges::views::transform([](const std::string& o) { return o.c_str(); }) | ranges::to<std::vector>();

  ProgramGuard guard;
  check(nvrtcCreateProgram(&guard.program, source.text.c_str(), source.name.c_str(),
                           static_cast<int>(header_texts.size()), header_texts.data(), header_names.data()),
        "nvrtcCreateProgram", source.name);
  const nvrtcResult compiled =
      nvrtcCompileProgram(guard.program, static_cast<int>(option_ptrs.size()), option_ptrs.data());

  std::size_t log_size = 0;
  check(nvrtcGetProgramLogSize(guard.program, &log_size), "nvrtcGetProgramLogSize", source.name);
  std::string log(log_size, '\0');
  if (log_size > 0) check(nvrtcGetProgramLog(guard.program, log.data()), "nvrtcGetProgramLog", source.name);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();

  if (compiled == NVRTC_ERROR_COMPILATION) return {source.name, false, std::move(log), {}, cubin};
  check(compiled, "nvrtcCompileProgram", source.name);

  std::vector<char> image;
  std::size_t size = 0;
  if (cubin) {
    check(nvrtcGetCUBINSize(guard.program, &size), "nvrtcGetCUBINSize", source.name);
    image.resize(size);
    check(nvrtcGetCUBIN(guard.program, image.data()), "nvrtcGetCUBIN", source.name);
  } else {
    check(nvrtcGetPTXSize(guard.program, &size), "nvrtcGetPTXSize", source.name);  // includes the NUL
    image.resize(size);
    check(nvrtcGetPTX(guard.program, image.data()), "nvrtcGetPTX", source.name);
  }
  return {source.name, true, std::move(log), std::move(image), cubin};
}

}  // namespace lazygraph
