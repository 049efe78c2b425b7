#pragma once
/// \file
/// Run-time compilation of CUDA C++ with NVRTC. A source that does not compile is a result holding the log
/// (`succeeded()` is false), not an exception; asking a failed result for its image throws CompileError.

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lazygraph {

/// A named CUDA C++ source: a kernel file, or a header that kernel files include by `name`.
struct KernelSource {
  std::string name;  ///< e.g. "axpy.cu", or "lazygraph/common.cuh" for a header
  /// The CUDA C++ source.
  std::string text;

  /// Same name and text.
  friend bool operator==(const KernelSource&, const KernelSource&) = default;
};

/// What NVRTC produced for one architecture.
class CompileResult {
 public:
  /// Made by nvrtc_compile. `image` is empty when compilation failed.
  CompileResult(std::string file, bool succeeded, std::string log, std::vector<char> image, bool is_cubin)
      : file_(std::move(file)),
        succeeded_(succeeded),
        log_(std::move(log)),
        image_(std::move(image)),
        is_cubin_(is_cubin) {}

  /// True when the source compiled.
  [[nodiscard]] bool succeeded() const noexcept { return succeeded_; }
  /// NVRTC's log: the errors, or warnings (often empty) when it succeeded.
  [[nodiscard]] const std::string& log() const noexcept { return log_; }
  /// The source's name, e.g. "axpy.cu".
  [[nodiscard]] const std::string& file() const noexcept { return file_; }
  /// True for machine code (CUBIN), false for PTX that the driver compiles when loading.
  [[nodiscard]] bool is_cubin() const noexcept { return is_cubin_; }
  /// The CUBIN or NUL-terminated PTX. \throws CompileError (with the log) when compilation failed.
  [[nodiscard]] const std::vector<char>& image() const;

 private:
  std::string file_;
  bool succeeded_;
  std::string log_;
  std::vector<char> image_;
  bool is_cubin_;
};

/// The architecture NVRTC targets for a device of compute capability `cc` (90 for 9.0): `cc` itself when this
/// NVRTC can emit machine code for it, else the newest architecture below it (emitted as PTX). Returns 0 when
/// NVRTC supports nothing at or below `cc`.
int nvrtc_target_architecture(int cc);

/// "13.0": the version of the NVRTC library loaded.
std::string nvrtc_version();

/// The compile options for `arch`: C++20, the architecture, and `-default-device`. `cubin` selects `-arch=sm_XX`
/// (CUBIN) over `--gpu-architecture=compute_XX` (PTX). With the environment variable LAZYGRAPH_NVRTC_LINEINFO set
/// to anything but empty or "0", also `-lineinfo`: source lines in the code, so that compute-sanitizer and Nsight
/// name the kernel source line of a report (the options are part of the kernel cache's key).
std::vector<std::string> nvrtc_options(int arch, bool cubin);

/// Compiles `source` with `headers` available to `#include "name"`.
/// \throws NvrtcError when NVRTC itself fails (not for compile errors in the source).
CompileResult nvrtc_compile(const KernelSource& source, std::span<const KernelSource> headers,
                            std::span<const std::string> options, bool cubin);

}  // namespace lazygraph
