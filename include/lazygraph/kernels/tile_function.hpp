#pragma once
/// \file
/// Tile functions on the host: `TileFunction<void(Params...)>`, a typed handle to a tile function of a kernel file
/// (kernels/include/lazygraph/tile.cuh says how one is written), from KernelLibrary::tile; calling it with a
/// TileConfig and arguments makes a TileCall, one instruction of a persistent program (persistent_program.hpp).
///
/// Arguments follow a kernel launch's rules, checked at compile time (kernel_arguments.hpp): a `T*` parameter takes
/// a writable DeviceSpan<T>, a `const T*` one any span of T, a scalar its own type. The signature is checked against
/// the declaration when the handle is made, as Kernel's is; the parameters' sizes when a program compiles the
/// function. What a call reads and writes comes from its spans, as a launch's does (access.hpp): a program orders
/// its calls by it.
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "lazygraph/detail/kernels/kernel_info.hpp"
#include "lazygraph/detail/kernels/tile_info.hpp"
#include "lazygraph/kernels/kernel_arguments.hpp"
#include "lazygraph/kernels/launch_config.hpp"
#include "lazygraph/ops/access.hpp"

namespace lazygraph {

/// How many tiles a call runs, as a grid (x fastest: tile = x + grid.x * (y + grid.y * z)), and the dynamic shared
/// memory each tile gets.
struct TileConfig {
  /// The tile grid; its volume is the number of tiles (at least one).
  Dim3 tiles;
  unsigned shared_bytes = 0;  ///< dynamic shared memory per tile
};

/// One call of a tile function: its tiles, its arguments (packed as the persistent kernel reads them), what it
/// touches, and the buffers its spans view (kept alive by the call and by every program made of it). Cheap to copy
/// (the packed arguments are copied).
class TileCall {
 public:
  /// Made by TileFunction::operator().
  TileCall(std::shared_ptr<const detail::TileInfo> function, const TileConfig& config,
           std::vector<unsigned char> arguments, std::vector<unsigned> parameter_sizes,
           std::vector<std::shared_ptr<const void>> owners, std::vector<detail::ArgumentRange> ranges);

  /// The tile function's name.
  [[nodiscard]] const std::string& name() const noexcept { return function_->name; }
  /// The tile function.
  [[nodiscard]] const std::shared_ptr<const detail::TileInfo>& function() const noexcept { return function_; }
  /// Its tiles and shared memory.
  [[nodiscard]] const TileConfig& config() const noexcept { return config_; }
  /// The number of tiles.
  [[nodiscard]] unsigned tiles() const noexcept { return static_cast<unsigned>(config_.tiles.volume()); }
  /// The arguments, packed: each at the next multiple of its alignment.
  [[nodiscard]] std::span<const unsigned char> arguments() const noexcept { return arguments_; }
  /// sizeof of each host parameter type, for the program's check against the device's.
  [[nodiscard]] std::span<const unsigned> parameter_sizes() const noexcept { return parameter_sizes_; }
  /// The owners of the memory its span arguments view.
  [[nodiscard]] std::span<const std::shared_ptr<const void>> owners() const noexcept { return owners_; }
  /// What the call may touch: every span argument's range, a write for a `T*` parameter, a read for a `const T*`
  /// one (named by the function); opaque when a pointer parameter was given something other than a span.
  void accesses(AccessSet& out) const;

  /// What each tile touches: `per_tile(t, out)` adds tile t's reads and writes (AccessSet::read / write). Each must
  /// lie within the call's own accesses (its spans), or the program refuses it. A persistent program then lets a
  /// later call's tile that conflicts with only some of this call's tiles wait for those alone; declaring less
  /// than a tile touches makes the program race, and nothing can check that. Returns the call with it.
  [[nodiscard]] TileCall with_tile_accesses(std::function<void(unsigned tile, AccessSet& out)> per_tile) const {
    TileCall c = *this;
    c.per_tile_ = std::move(per_tile);
    return c;
  }
  /// The per-tile accesses given to with_tile_accesses, or an empty function.
  [[nodiscard]] const std::function<void(unsigned, AccessSet&)>& tile_accesses() const noexcept { return per_tile_; }

 private:
  std::shared_ptr<const detail::TileInfo> function_;
  TileConfig config_;
  std::vector<unsigned char> arguments_;
  std::vector<unsigned> parameter_sizes_;
  std::vector<std::shared_ptr<const void>> owners_;
  std::vector<detail::ArgumentRange> ranges_;
  std::function<void(unsigned, AccessSet&)> per_tile_;
};

namespace detail {

/// `values` packed as the persistent kernel reads them (lg::detail::argument_offset): each at the next multiple
/// of its alignment.
template <class... P>
std::vector<unsigned char> pack_tile_arguments(const std::tuple<P...>& values) {
  std::vector<unsigned char> out;
  std::apply(
      [&](const P&... v) {
        const auto put = [&](const auto& value) {
          using V = std::remove_cvref_t<decltype(value)>;
          const std::size_t at = (out.size() + alignof(V) - 1) / alignof(V) * alignof(V);
          out.resize(at + sizeof(V));
          std::memcpy(out.data() + at, &value, sizeof(V));
        };
        (put(v), ...);
      },
      values);
  return out;
}

/// \throws UsageError naming the function when `config` has no tiles or more than 2^31.
void check_tile_config(const std::string& function, const TileConfig& config);

}  // namespace detail

/// A typed handle to a tile function. Only `TileFunction<void(Params...)>` is defined; Params leave out the leading
/// `lg::Tile`.
template <class Signature>
class TileFunction;

/// A handle to a tile function whose parameters (after its `lg::Tile`) are Params..., from KernelLibrary::tile.
/// Cheap to copy; every copy shares the function's TileInfo.
template <class... Params>
class TileFunction<void(Params...)> {
 public:
  /// The function's signature after its `lg::Tile`.
  using Signature = void(Params...);

  /// Handles come from KernelLibrary::tile.
  explicit TileFunction(std::shared_ptr<const detail::TileInfo> info) : info_(std::move(info)) {}

  /// A call of `config.tiles` tiles with these arguments (see the file comment for the rules).
  /// \throws UsageError for a config without tiles.
  template <class... Args>
  [[nodiscard]] TileCall operator()(const TileConfig& config, const Args&... args) const {
    static_assert(sizeof...(Args) == sizeof...(Params),
                  "tile function call: the number of arguments must equal the function's parameter count (after its "
                  "lg::Tile); pass exactly one argument per parameter of the declared signature");
    detail::check_tile_config(info_->name, config);
    return TileCall(info_, config, detail::pack_tile_arguments(pack(std::index_sequence_for<Params...>{}, args...)),
                    {static_cast<unsigned>(sizeof(Params))...}, {detail::owner_of(args)...},
                    {detail::argument_range<Params>(args)...});
  }

  /// The function's name.
  [[nodiscard]] const std::string& name() const noexcept { return info_->name; }

 private:
  template <class... Args, std::size_t... I>
  static std::tuple<Params...> pack(std::index_sequence<I...> /*unused*/, const Args&... args) {
    return std::tuple<Params...>{detail::convert_argument<Params, static_cast<int>(I) + 1>(args)...};
  }

  std::shared_ptr<const detail::TileInfo> info_;
};

}  // namespace lazygraph
