// The persistent kernel's loop: every block runs its queue of tiles in order, each after the calls it depends on,
// and counts it done. The host generates the kernel around it (src/kernels/persistent_source.cpp): a dispatch from
// a call's function index to its tile function, and one kernel per tile function for the program's graph form.
// Compiled by NVRTC only; include as "lazygraph/persistent.cuh".
//
// Why it cannot deadlock: every block's queue holds tiles in program order, and a call depends only on earlier
// calls. Take the earliest tile not yet done: the calls it waits for are earlier, so done; the tiles before it in
// its block's queue are earlier, so done; so its block is running it. This needs every block resident at once,
// which the host ensures by launching no more blocks than the occupancy query says fit (other work on the GPU
// only delays blocks: it does not wait for this kernel).
//
// Counters: call c's counter counts its tiles done, and each tile has a flag set once it is done (a tile that
// depends on some tiles of a call polls their flags, one that depends on all of it the counter). A block's tile is
// signalled after a block barrier, which orders every thread's stores before thread 0's fence and writes. Waiting is
// Tile::wait's.
#pragma once

#include "lazygraph/tile.cuh"

namespace lg {

/// Runs block blockIdx.x's queue of `program`: dispatch(function, tile, args) runs one tile (see above);
/// prefetch(function, tile, args) asks for the memory a tile will read first, without waiting: called for the
/// block's next tile just before the current one runs, so that the next tile's weights stream into L2 while the
/// current tile waits and works (a tile function's optional NAME_prefetch companion; nothing for one without).
template <class Dispatch, class Prefetch>
__device__ __forceinline__ void run_persistent(const PersistentProgram& program, unsigned char* shared,
                                               Dispatch dispatch, Prefetch prefetch) {
  __shared__ PersistentBlockState state;
  if (threadIdx.x == 0) {
    state.waited = 0;
    state.abort = 0;
  }
  // An error of an earlier run that the host has not collected yet: run nothing, so that it is not lost.
  if (*static_cast<volatile unsigned*>(program.status) != 0u) return;
  __syncthreads();
  const unsigned begin = program.queue_begin[blockIdx.x];
  const unsigned end = program.queue_begin[blockIdx.x + 1];
  for (unsigned position = begin; position < end; ++position) {
    const unsigned call = program.queue[2 * position];
    const unsigned tile = program.queue[2 * position + 1];
    const PersistentCall& c = program.calls[call];
    // Profiling: when the block took the tile, began and ended its wait (Tile::wait), and counted it done.
    unsigned long long* stamps =
        program.timeline == nullptr ? nullptr : program.timeline + 4ull * (c.tiles_begin + tile);
    if (threadIdx.x == 0 && stamps != nullptr) stamps[0] = detail::global_time_ns();
    if ((program.flags & kPrefetchNext) != 0u && position + 1 < end) {
      const unsigned next_call = program.queue[2 * position + 2];
      const PersistentCall& n = program.calls[next_call];
      prefetch(n.function,
               Tile::of_program(&program, n, next_call, program.queue[2 * position + 3], position + 1, &state, shared),
               program.args + n.args);
    }
    dispatch(c.function, Tile::of_program(&program, c, call, tile, position, &state, shared), program.args + c.args);
    __syncthreads();  // every thread's stores of the tile, and the state, before the count
    if (state.abort != 0u) return;
    // The state was written in this tile's wait, after its barrier (the next tile's wait writes it only after every
    // thread has passed that wait's barrier, so after these reads): a tile that did not wait left waited behind.
    if (state.waited < position + 1) {
      if (threadIdx.x == 0) detail::report(program.status, kStatusNoWait, call, tile, call, 0, 0);
      return;
    }
    if (threadIdx.x == 0) {
      // One fence, then two relaxed writes: each is a release of the tile's stores (the barrier above ordered
      // every thread's before the fence).
      asm volatile("fence.acq_rel.gpu;" ::: "memory");
      asm volatile("st.relaxed.gpu.global.u32 [%0], 1;" ::"l"(program.tile_done + c.tiles_begin + tile) : "memory");
      asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(program.counters + call * kCounterStride)
                   : "memory");
      if (stamps != nullptr) stamps[3] = detail::global_time_ns();
    }
  }
}

}  // namespace lg
