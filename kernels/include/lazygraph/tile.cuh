// Tiles: the instruction interface of the persistent backend (include/lazygraph/kernels/persistent_program.hpp).
// Compiled by NVRTC only; include as "lazygraph/tile.cuh".
//
// A tile function is one block's share of an op, declared at namespace scope in a kernel file as
//
//     extern "C" __device__ void NAME(lg::Tile tile, PARAMETERS)
//
// (the host reads the declaration as it reads a kernel's; KernelLibrary::tile hands out typed handles). It runs
// on one block of the program's threads (Tile::threads(), 1-D: threadIdx.x), once per tile of its call, either
// inside the persistent kernel, which runs every call of a program in one launch, or as one kernel per call (a
// grid of its tiles), the program's graph form. The same source serves both:
//   - tile.index() / tile.count() (and tile.block() / tile.grid(), the index as x, y, z of the call's tile grid)
//     say which share this is, instead of blockIdx and gridDim;
//   - every thread calls tile.wait(), once, before touching memory that an earlier call of the program writes or
//     reads (its inputs, its outputs). Before it, only memory no earlier call writes (weights) may be read: the
//     tile's loads of it then overlap the wait, as a kernel's do before griddepcontrol.wait. In the persistent
//     kernel the wait is on counters of the calls this one depends on; in the graph form it is the early launch's
//     griddepcontrol.wait. A tile that returns without waiting stops the persistent kernel with an error;
//   - tile.shared() is the call's dynamic shared memory, tile.shared_bytes() bytes (TileConfig::shared_bytes).
// A tile function must not use blockIdx, gridDim, grid-wide synchronisation, or return early from some threads
// only (every thread reaches wait()); it may use __syncthreads and static __shared__ memory.
//
// A tile function NAME may have a companion `extern "C" __device__ void NAME_prefetch(lg::Tile tile, <the same
// parameters>)`: the persistent kernel calls it for a block's next tile just before the block runs its current one,
// so it may only ask for memory no call writes (weights) to be brought closer (prefetch.global.L2, lg::prefetch_l2),
// never wait, synchronise or write. Then the next tile's weights stream in while the current tile waits and works.
#pragma once

#include "lazygraph/kernel_common.cuh"

namespace lg {

/// One call of a program as the persistent kernel reads it (host: detail::PersistentCallEntry, same layout).
struct PersistentCall {
  unsigned function;      ///< which tile function: the generated dispatch's case
  unsigned tiles;         ///< how many tiles the call has
  unsigned grid_x;        ///< the tile grid's x extent (tile index = x + grid_x * (y + grid_y * z))
  unsigned grid_y;        ///< its y extent
  unsigned args;          ///< the byte offset of the call's arguments in the argument block
  unsigned tiles_begin;   ///< the program-wide index of its first tile
  unsigned shared_bytes;  ///< the call's dynamic shared memory per tile (TileConfig::shared_bytes)
  unsigned reserved1;
};

/// What the persistent kernel is given (host: detail::PersistentProgramView, same layout).
struct PersistentProgram {
  const PersistentCall* calls;
  const unsigned* tile_waits;     ///< per program-wide tile: the first of its waits, and how many
  const unsigned* waits;          ///< (call, first tile or kWholeCall, count) triples
  const unsigned char* args;      ///< the calls' arguments, packed as call_tile reads them
  const unsigned* queue_begin;    ///< per block, the first of its queue entries; one more at the end
  const unsigned* queue;          ///< pairs (call, tile) in the order each block runs them
  unsigned* counters;             ///< per call, its tiles done, kCounterStride words apart; zero at launch
  unsigned* tile_done;            ///< per program-wide tile, nonzero once done; zero at launch
  unsigned* status;               ///< kStatusWords: why the kernel stopped early (0: it did not)
  unsigned long long* timeline;   ///< null, or per program-wide tile 4 %globaltimer stamps (PersistentOptions::profile)
  unsigned long long timeout_ns;  ///< how long a block waits for one call before it gives up
  unsigned pause_ns;              ///< the pause between two polls (0: none)
  unsigned flags;                 ///< kPrefetchNext: prefetch each block's next tile (PersistentOptions::prefetch_next)
};

/// PersistentProgram::flags: call the next tile's prefetch companion before running the current tile.
constexpr unsigned kPrefetchNext = 1u;

/// A wait on a whole call (its count of tiles done) rather than on some of its tiles one by one.
constexpr unsigned kWholeCall = 0xffffffffu;

/// Words between two calls' counters: one 128-byte line each, so that the atomics of one call's tiles and the
/// polls of the blocks waiting for it do not share a line with another call's.
constexpr unsigned kCounterStride = 32;
/// status[0]: 0, or the first error; status[1..5]: the call that stopped, its tile, the call it waited for, the
/// tiles of that call done and expected.
constexpr unsigned kStatusWords = 8;
constexpr unsigned kStatusTimeout = 1;  ///< a wait outlasted timeout_ns
constexpr unsigned kStatusNoWait = 2;   ///< a tile function returned without calling wait()

/// The state a block of the persistent kernel keeps in shared memory for its current tile.
struct PersistentBlockState {
  unsigned waited;  ///< one more than the queue position of the last tile that waited (0: none yet)
  unsigned abort;   ///< nonzero once the block must stop (an error here or elsewhere)
};

namespace detail {

__device__ __forceinline__ unsigned load_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ unsigned long long global_time_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// Records the first error of a run; later ones are dropped.
__device__ __forceinline__ void report(unsigned* status, unsigned code, unsigned call, unsigned tile, unsigned dep,
                                       unsigned seen, unsigned expected) {
  if (atomicCAS(status, 0u, code) == 0u) {
    status[1] = call;
    status[2] = tile;
    status[3] = dep;
    status[4] = seen;
    status[5] = expected;
  }
}

}  // namespace detail

/// Which share of a call a tile function runs, and the wait for the calls before it (see the file comment).
class Tile {
 public:
  /// The tile of a kernel launched as one call's graph form: the block's place in its grid; its wait is the early
  /// launch's.
  __device__ static Tile of_grid(unsigned char* shared) {
    Tile t;
    t.index_ = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    t.count_ = gridDim.x * gridDim.y * gridDim.z;
    t.grid_x_ = gridDim.x;
    t.grid_y_ = gridDim.y;
    t.shared_ = shared;
    unsigned bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
    t.shared_bytes_ = bytes;
    return t;
  }
  /// Tile `index` of call `call` at queue position `position` of the persistent kernel.
  __device__ static Tile of_program(const PersistentProgram* program, const PersistentCall& c, unsigned call,
                                    unsigned index, unsigned position, PersistentBlockState* state,
                                    unsigned char* shared) {
    Tile t;
    t.index_ = index;
    t.count_ = c.tiles;
    t.grid_x_ = c.grid_x;
    t.grid_y_ = c.grid_y;
    t.shared_ = shared;
    t.shared_bytes_ = c.shared_bytes;
    t.program_ = program;
    t.call_ = &c;
    t.call_index_ = call;
    t.position_ = position;
    t.state_ = state;
    return t;
  }

  /// This tile's index, 0 to count() - 1.
  __device__ __forceinline__ unsigned index() const { return index_; }
  /// How many tiles the call has.
  __device__ __forceinline__ unsigned count() const { return count_; }
  /// The index as a place in the call's tile grid (TileConfig::tiles).
  __device__ __forceinline__ uint3 block() const {
    return make_uint3(index_ % grid_x_, index_ / grid_x_ % grid_y_, index_ / (grid_x_ * grid_y_));
  }
  /// The call's tile grid.
  __device__ __forceinline__ uint3 grid() const { return make_uint3(grid_x_, grid_y_, count_ / (grid_x_ * grid_y_)); }
  /// The threads that run the tile (blockDim.x; the program's block is 1-D).
  __device__ __forceinline__ unsigned threads() const { return blockDim.x; }
  /// The call's dynamic shared memory (TileConfig::shared_bytes of it; 16-byte aligned).
  __device__ __forceinline__ unsigned char* shared() const { return shared_; }
  /// How many bytes shared() holds: the call's TileConfig::shared_bytes (a tile function that can use more when it
  /// is given, as the gemv tiles' weight stream, asks here).
  __device__ __forceinline__ unsigned shared_bytes() const { return shared_bytes_; }

  /// Returns once everything this tile depends on has finished (the calls, or the tiles of them, its accesses
  /// conflict with) and its writes are visible to the block. Every thread of the block calls it, once per tile (it
  /// holds a __syncthreads). In the persistent kernel, a wait that outlasts the program's timeout (a stuck counter)
  /// records an error and returns; the tile's results are then garbage and the kernel stops after it.
  __device__ void wait() const {
    if (program_ == nullptr) {
      wait_for_prior_grids();
      return;
    }
    unsigned long long* stamps =
        program_->timeline == nullptr ? nullptr : program_->timeline + 4ull * (call_->tiles_begin + index_);
    if (threadIdx.x == 0 && stamps != nullptr) stamps[1] = detail::global_time_ns();
    bool stop = false;
    if (threadIdx.x < 32) stop = wait_for_dependencies();
    __syncthreads();
    // The block's state is written after the barrier: the block's other threads may still be reading the previous
    // tile's (run_persistent's checks after its barrier) until every thread has reached this one.
    if (threadIdx.x == 0) {
      state_->waited = position_ + 1;
      if (stop) state_->abort = 1;
      if (stamps != nullptr) stamps[2] = detail::global_time_ns();
    }
  }

 private:
  // Warp 0 waits: for a whole call, lane 0 polls its counter; for some of its tiles, the lanes poll their flags
  // together. Polls are device-scope acquire loads; the block barrier after the wait hands the ordering to every
  // thread (their ordinary loads then see the producers' stores, as in mlp_stack.cu). Returns, in every lane, whether
  // the block must stop (an error here or elsewhere).
  __device__ bool wait_for_dependencies() const {
    const unsigned lane = threadIdx.x;
    const unsigned t = call_->tiles_begin + index_;
    const unsigned begin = program_->tile_waits[2 * t];
    const unsigned count = program_->tile_waits[2 * t + 1];
    for (unsigned w = 0; w < count; ++w) {
      const unsigned* wait = program_->waits + 3 * (begin + w);
      const unsigned dep = wait[0];
      const unsigned first = wait[1];
      const unsigned n = wait[2];
      const unsigned* counter = program_->counters + dep * kCounterStride;
      const unsigned* flags =
          program_->tile_done + program_->calls[dep].tiles_begin + (first == kWholeCall ? 0 : first);
      unsigned long long start = 0;
      unsigned spins = 0;
      for (;;) {
        bool ready = true;
        if (first == kWholeCall) {
          if (lane == 0) ready = detail::load_acquire_gpu(counter) >= n;
          ready = __shfl_sync(0xffffffffu, ready, 0);
        } else {
          for (unsigned k = lane; k < n; k += 32) ready = ready && detail::load_acquire_gpu(flags + k) != 0u;
          ready = __all_sync(0xffffffffu, ready);
        }
        if (ready) break;
        int stop = 0;
        if (lane == 0) {
          if (*static_cast<volatile unsigned*>(program_->status) != 0u) {
            stop = 1;
          } else if ((++spins & 31u) == 0u) {
            const unsigned long long now = detail::global_time_ns();
            if (start == 0) {
              start = now;
            } else if (now - start > program_->timeout_ns) {
              detail::report(program_->status, kStatusTimeout, call_index_, index_, dep,
                             *static_cast<const volatile unsigned*>(counter), program_->calls[dep].tiles);
              stop = 1;
            }
          }
        }
        if (__shfl_sync(0xffffffffu, stop, 0) != 0) return true;
        if (program_->pause_ns != 0u) __nanosleep(program_->pause_ns);
      }
    }
    return false;
  }

  unsigned index_ = 0;
  unsigned count_ = 1;
  unsigned grid_x_ = 1;
  unsigned grid_y_ = 1;
  unsigned char* shared_ = nullptr;
  unsigned shared_bytes_ = 0;
  const PersistentProgram* program_ = nullptr;
  const PersistentCall* call_ = nullptr;
  unsigned call_index_ = 0;
  unsigned position_ = 0;
  PersistentBlockState* state_ = nullptr;
};

namespace detail {

template <unsigned... I>
struct IndexList {};
template <unsigned N, unsigned... I>
struct MakeIndexList : MakeIndexList<N - 1, N - 1, I...> {};
template <unsigned... I>
struct MakeIndexList<0, I...> {
  using type = IndexList<I...>;
};

/// The byte offset of parameter `index` of P... in a packed argument block: each value at the next multiple of its
/// alignment (the host packs them the same way: detail::pack_tile_arguments).
template <class... P>
__device__ constexpr unsigned argument_offset(unsigned index) {
  constexpr unsigned sizes[] = {0u, static_cast<unsigned>(sizeof(P))...};
  constexpr unsigned aligns[] = {1u, static_cast<unsigned>(alignof(P))...};
  unsigned offset = 0;
  for (unsigned i = 1; i <= sizeof...(P); ++i) {
    offset = (offset + aligns[i] - 1) / aligns[i] * aligns[i];
    if (i == index + 1) return offset;
    offset += sizes[i];
  }
  return offset;
}

/// The argument at `at`, which the packing aligned for P (the block itself is 16-byte aligned).
template <class P>
__device__ __forceinline__ P load_argument(const unsigned char* at) {
  return *reinterpret_cast<const P*>(at);
}

template <class... P, unsigned... I>
__device__ __forceinline__ void call_tile_with(void (*f)(Tile, P...), const Tile& tile, const unsigned char* args,
                                               IndexList<I...> /*unused*/) {
  f(tile, load_argument<P>(args + argument_offset<P...>(I))...);
}

template <unsigned A, unsigned B>
struct SameSize {
  static_assert(A == B,
                "a tile function's parameter has a different size on the host than in the kernel: make the host "
                "type's layout match the kernel's");
  static constexpr bool value = true;
};

}  // namespace detail

/// Runs tile function `f` on `tile` with the arguments packed at `args`.
template <class... P>
__device__ __forceinline__ void call_tile(void (*f)(Tile, P...), const Tile& tile, const unsigned char* args) {
  detail::call_tile_with(f, tile, args, typename detail::MakeIndexList<sizeof...(P)>::type{});
}

/// Fails to compile, naming the rule, when the host's parameter sizes (S...) differ from `f`'s.
template <unsigned... S, class... P>
__device__ constexpr bool check_tile_parameters(void (* /*f*/)(Tile, P...)) {
  static_assert(sizeof...(S) == sizeof...(P), "a tile function's parameter count differs from the host's");
  return (detail::SameSize<static_cast<unsigned>(sizeof(P)), S>::value && ... && true);
}

}  // namespace lg

namespace lg {

/// Where a kernel body runs, for bodies shared by a kernel and a tile function: its block's index among the blocks
/// that share the work, how many there are, and the wait for earlier work. GridPlace is a kernel's own grid
/// (blockIdx.x of gridDim.x, the early launch's wait); TilePlace a tile of a persistent program's call.
struct GridPlace {
  __device__ __forceinline__ int block() const { return static_cast<int>(blockIdx.x); }
  __device__ __forceinline__ int blocks() const { return static_cast<int>(gridDim.x); }
  /// Waits for the work before the kernel (every thread may call it; see wait_for_prior_grids).
  __device__ __forceinline__ void wait() const { wait_for_prior_grids(); }
  /// Lets the next kernel launch early.
  __device__ __forceinline__ void allow_next() const { allow_dependent_launch(); }
  /// A kernel's block has no shared memory to lend (see TilePlace::buffer).
  __device__ __forceinline__ unsigned char* buffer(unsigned /*bytes*/) const { return nullptr; }
};

/// A tile as a place: the tile's index of the call's tiles; wait() is Tile::wait, so every thread of the block must
/// call it exactly once per tile.
struct TilePlace {
  const Tile& tile;
  __device__ __forceinline__ int block() const { return static_cast<int>(tile.index()); }
  __device__ __forceinline__ int blocks() const { return static_cast<int>(tile.count()); }
  __device__ __forceinline__ void wait() const { tile.wait(); }
  __device__ __forceinline__ void allow_next() const {}
  /// The tile's shared memory when its call gave it at least `bytes`, else null.
  __device__ __forceinline__ unsigned char* buffer(unsigned bytes) const {
    return tile.shared_bytes() >= bytes ? tile.shared() : nullptr;
  }
};

/// True for GridPlace: a body that only a kernel may run (not a tile) checks it.
template <class P>
inline constexpr bool kIsGridPlace = false;
template <>
inline constexpr bool kIsGridPlace<GridPlace> = true;

}  // namespace lg
