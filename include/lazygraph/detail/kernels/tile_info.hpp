#pragma once
/// \file
/// What every handle to one tile function shares: its declaration and the source it is compiled from (a tile
/// function is compiled into each persistent program that calls it, not into a module of its own), and how the
/// library that found it compiles (the same options and cache for the program).
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "lazygraph/driver/device.hpp"
#include "lazygraph/kernels/kernel_declaration.hpp"
#include "lazygraph/kernels/nvrtc.hpp"

namespace lazygraph::detail {

/// How a KernelLibrary compiles, kept for the persistent programs made from its tile functions.
struct KernelBuild {
  explicit KernelBuild(const Device& d) : device(d) {}
  Device device;
  std::vector<std::string> options;       ///< NVRTC's
  bool cubin = false;                     ///< machine code, or PTX for the driver
  std::string nvrtc;                      ///< NVRTC's version, part of the cache key
  std::filesystem::path cache_directory;  ///< empty: no disk cache
};

/// One tile function (kernels/include/lazygraph/tile.cuh): its declaration without the leading `lg::Tile`, the
/// kernel file that defines it and the headers that file compiles with.
struct TileInfo {
  std::string name;
  KernelDeclaration declaration;
  std::shared_ptr<const KernelSource> file;
  std::shared_ptr<const std::vector<KernelSource>> headers;
  std::shared_ptr<const KernelBuild> build;
  /// The name of its prefetch companion (`NAME_prefetch`, declared in the same file with the same parameters), which
  /// a persistent program calls for a block's next tile before the current one runs; empty when there is none.
  std::string prefetch;
};

}  // namespace lazygraph::detail
