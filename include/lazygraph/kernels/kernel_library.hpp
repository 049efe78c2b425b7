#pragma once
/// \file
/// KernelLibrary: every kernel of the core kernel set (embedded from `kernels/`) and of the kernel sets it is
/// given (kernel_set.hpp), compiled for the present GPU (or loaded from the disk cache) and loaded when the library is
/// constructed, so that nothing compiles or loads during a graph capture.
///
/// Kernels are looked up by their unmangled name, so they are declared `extern "C" __global__`; their
/// declarations are also read on the host (kernel_declaration.hpp), so that `get` checks a signature's parameter
/// types, not only their sizes.
///
/// An image from the disk cache that the driver refuses to load (it passed the cache's checksum, so it was
/// stored that way: by a broken toolchain, or for a driver that no longer accepts it) is evicted, recompiled,
/// stored again and loaded; only a freshly compiled image that fails to load is an error.
///
/// Every handle `get` returns for one kernel shares that kernel's one KernelInfo, so the kernel's dynamic
/// shared memory limit, a property of the loaded function, is tracked once and only ever raised.
///
/// Thread safety: a constructed KernelLibrary is immutable; `get` may be called from any thread, and handles
/// to one kernel may launch from several threads at once.

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lazygraph/detail/driver/type_name.hpp"
#include "lazygraph/driver/device.hpp"
#include "lazygraph/kernels/kernel.hpp"
#include "lazygraph/kernels/kernel_declaration.hpp"
#include "lazygraph/kernels/kernel_parameter_type.hpp"
#include "lazygraph/kernels/kernel_set.hpp"
#include "lazygraph/kernels/nvrtc.hpp"
#include "lazygraph/kernels/tile_function.hpp"

namespace lazygraph {

/// How a KernelLibrary is built. The defaults: the core kernels (embedded from `kernels/`) only, the default cache.
struct KernelLibraryOptions {
  /// Where compiled images are cached; unset: KernelCache::default_directory(); an empty path: no cache.
  std::optional<std::filesystem::path> cache_directory;
  /// The kernel sets to compile besides the core set, e.g. `{nn::kernel_set(), KernelSet::from_directory("mine")}`.
  /// The core set (core_kernels()) is always compiled, listed or not (listing it is allowed, and compiles it once):
  /// LoopBound, HostIo and the like need its kernels. No set other than those listed is compiled, so leave out
  /// the sets a program does not use.
  std::vector<KernelSet> kernel_sets;
};

/// How a library came to be, for the curious and for benchmarks.
struct KernelLibraryStats {
  /// Kernel files loaded, one module each.
  std::size_t modules = 0;
  std::size_t compiled = 0;    ///< modules compiled by NVRTC now
  std::size_t cache_hits = 0;  ///< modules loaded from the disk cache
  double milliseconds = 0;     ///< wall time of the constructor
  int architecture = 0;        ///< e.g. 90
  bool cubin = false;          ///< machine code (true) or PTX for the driver to compile (false)
};

/// Every kernel module of the core set and the given sets, compiled (or loaded from the cache) and loaded at
/// construction; `get` hands out typed handles. See the file comment for thread safety.
class KernelLibrary {
 public:
  /// Compiles (or loads from cache) and loads every kernel module of the core set and of `options.kernel_sets`.
  /// \throws CompileError with the file and the whole NVRTC log when a source does not compile;
  ///         CaptureError when a graph capture is in progress; UsageError when two files define one kernel, two
  ///         sets have a file of one name, a set's header has a core header's name, or a set is named "core" but
  ///         is not core_kernels().
  explicit KernelLibrary(const Device& device, KernelLibraryOptions options = {});

  /// The kernel `name`, typed as `Signature`, such as `void(float, const float*, float*, int)`.
  /// \throws UsageError when no module has `name` (listing those that exist); when its source holds no
  ///         declaration of it that can be read (saying how kernels must be declared); when `Signature`'s
  ///         parameters differ from the declared ones in count or type (naming the first that differs, with
  ///         both types), or from the compiled kernel's in size.
  template <class Signature>
  [[nodiscard]] Kernel<Signature> get(std::string_view name) const {
    Signature* const signature = nullptr;
    return Kernel<Signature>(lookup(name, detail::kernel_parameter_types(signature), parameter_sizes(signature),
                                    detail::type_name<Signature>()));
  }

  /// The tile function `name` (kernels/include/lazygraph/tile.cuh), typed as `Signature` without its leading
  /// lg::Tile, e.g. `void(const half*, half*, int)`: what PersistentProgram runs (persistent_program.hpp).
  /// \throws UsageError when no kernel file declares a tile function `name` (listing those that exist), or when
  ///         `Signature`'s parameters differ from the declared ones in count or type (naming the first).
  template <class Signature>
  [[nodiscard]] TileFunction<Signature> tile(std::string_view name) const {
    Signature* const signature = nullptr;
    return TileFunction<Signature>(
        lookup_tile(name, detail::kernel_parameter_types(signature), detail::type_name<Signature>()));
  }
  /// The names of every loaded kernel, sorted.
  [[nodiscard]] std::vector<std::string> kernel_names() const;
  /// The names of every tile function of the library's kernel files, sorted.
  [[nodiscard]] std::vector<std::string> tile_names() const;
  /// How the constructor went: modules compiled and loaded from cache, time, architecture.
  [[nodiscard]] const KernelLibraryStats& stats() const noexcept { return stats_; }
  /// The device the kernels are loaded on.
  [[nodiscard]] const Device& device() const noexcept { return device_; }

 private:
  template <class... P>
  static std::vector<std::size_t> parameter_sizes(void (*)(P...)) {
    return {sizeof(P)...};  // NOLINT(bugprone-sizeof-expression): the parameters' sizes are what is checked
  }
  std::shared_ptr<detail::KernelInfo> lookup(std::string_view name, const std::vector<std::string>& types,
                                             const std::vector<std::size_t>& sizes, std::string_view signature) const;
  std::shared_ptr<const detail::TileInfo> lookup_tile(std::string_view name, const std::vector<std::string>& types,
                                                      std::string_view signature) const;

  Device device_;
  /// One KernelInfo per kernel, shared by every handle (it holds the module and the function).
  std::map<std::string, std::shared_ptr<detail::KernelInfo>, std::less<>> kernels_;
  /// One TileInfo per tile function, shared by every handle.
  std::map<std::string, std::shared_ptr<const detail::TileInfo>, std::less<>> tiles_;
  KernelDeclarations declarations_;
  KernelLibraryStats stats_;
};

}  // namespace lazygraph
