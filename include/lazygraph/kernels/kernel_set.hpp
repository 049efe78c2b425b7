#pragma once
/// \file
/// KernelSet: a named group of kernel files that a KernelLibrary compiles together. The core library brings one
/// set (`core_kernels()`, embedded from `kernels/*.cu`); lazygraph::nn brings its own (`nn::kernel_set()`); an
/// application adds a directory of its own `.cu` files with `KernelSet::from_directory`. A library compiles the
/// core set and the sets it is given, no others, so a program that uses no model kernels never compiles them; the
/// core set is always there, listed or not, because the library's own ops need its kernels (LoopBound's
/// while_guard, HostIo's staging_copy).

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "lazygraph/kernels/nvrtc.hpp"

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

  /// Same name, files and headers (their texts included).
  friend bool operator==(const KernelSet&, const KernelSet&) = default;
};

/// The core kernels, embedded into liblazygraph at build time from `kernels/*.cu` with the headers of
/// `kernels/include/` (so an installed library needs no source tree). Every KernelLibrary compiles it, whether
/// its options list it or not; it cannot be replaced.
const KernelSet& core_kernels();

/// The core headers every set compiles with (`kernels/include/`, named as kernels include them).
std::span<const KernelSource> core_kernel_headers();

namespace detail {

/// The sets a KernelLibrary compiles when given `sets`: `sets` in their order, with core_kernels() put first when
/// none of them is the core set. \throws UsageError for a set named like the core set that is not it (the core
/// set cannot be replaced, and messages name sets by name).
std::vector<KernelSet> with_core_kernels(std::vector<KernelSet> sets);

}  // namespace detail

}  // namespace lazygraph
