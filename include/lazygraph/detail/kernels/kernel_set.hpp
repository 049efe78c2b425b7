#pragma once
/// \file
/// KernelSet: a named group of kernel files that a KernelLibrary compiles together. The core library brings one
/// set (`core_kernels()`, embedded from `kernels/*.cu`); lazygraph::nn brings its own (`nn::kernel_set()`); an
/// application adds a directory of its own `.cu` files with `KernelSet::from_directory`. A library compiles only
/// the sets it is given, so a program that uses no model kernels never compiles them.

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "lazygraph/detail/kernels/nvrtc.hpp"

namespace lazygraph {

/// Kernel files and the headers only they include. Every set also sees the core headers
/// (`lazygraph/half.cuh`, `lazygraph/kernel_common.cuh`, ...), so a set's own headers must not reuse their names.
struct KernelSet {
  /// Names the set in messages ("core", "nn", or the application's choice).
  std::string name;
  /// The kernel files, one module each. Kernel names must be unique across every set of a library.
  std::vector<KernelSource> sources;
  /// Headers the set's files include by name, besides the core headers.
  std::vector<KernelSource> headers;

  /// The `*.cu` files directly in `directory` (named "<name>/<file>.cu"), with every `*.cuh` / `*.h` below
  /// `directory/include` as a header named by its path there. `name` defaults to the directory's name.
  /// Files are read now: later edits need a new set (and a new KernelLibrary).
  /// \throws UsageError when the directory does not exist, holds no `.cu` file, or a file cannot be read.
  static KernelSet from_directory(const std::filesystem::path& directory, std::string name = {});
};

/// The core kernels, embedded into liblazygraph at build time from `kernels/*.cu` with the headers of
/// `kernels/include/` (so an installed library needs no source tree). What a KernelLibrary builds by default.
const KernelSet& core_kernels();

/// The core headers every set compiles with (`kernels/include/`, named as kernels include them).
std::span<const KernelSource> core_kernel_headers();

}  // namespace lazygraph
