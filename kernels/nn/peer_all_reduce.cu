// The all-reduce of a tensor-parallel step's residual stream among GPUs of one process, in place and without NCCL:
// x = the sum over the ranks of each rank's x, through a PeerExchange (driver/peer_exchange.hpp). One kernel, one
// pass: every thread sends its 4-byte words of x, each tagged with its block's epoch in one 8-byte store, into
// every peer's receive slots, then waits for each peer's words at the same places (the tag says they are this
// call's) and adds the ranks' values in rank order, so that every rank computes the same bits. No flag, no fence:
// an 8-byte store arrives whole (NCCL's LL protocol works the same way).
//
// peer_all_reduce(x, words, slot_table, counters, rank, ranks): `words` 4-byte words of x (two fp16 or bf16
// elements each); slot_table: every rank's receive slots; counters: this rank's epoch per block. Block b always
// moves words [b * 512, (b + 1) * 512), so its epoch tags them alone; the parity of the epoch picks one of two
// slot sets, so that a rank a call ahead never overwrites words a peer has not read yet (it cannot get two calls
// ahead: each call waits for every peer's words).
//
// Every rank must run the same sequence of calls, with the same sizes: a rank whose peers never make the call
// waits for ever, as in NCCL. The layout constants are PeerExchange's.
//
// Launch: grid (words + 511) / 512 blocks (64 at most), 128 threads; may be launched early (it waits for the work
// before it before it reads x).
#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"

namespace {

constexpr int kMaxBlocks = 64;
constexpr int kWordsPerBlock = 512;
constexpr int kWordsPerThread = 4;  // of a block of 128 threads

__device__ __forceinline__ void store_tagged(unsigned long long address, unsigned value, unsigned tag) {
  asm volatile("st.volatile.global.v2.u32 [%0], {%1, %2};" ::"l"(address), "r"(value), "r"(tag) : "memory");
}

__device__ __forceinline__ uint2 load_tagged(unsigned long long address) {
  uint2 v;
  asm volatile("ld.volatile.global.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(address) : "memory");
  return v;
}

template <class T>
__device__ __forceinline__ void peer_all_reduce_body(T* x, int words, const unsigned long long* slot_table,
                                                     unsigned* counters, int rank, int ranks) {
  lg::early_launch_prologue();
  const int b = blockIdx.x;
  // Epochs count the block's calls; 0 is skipped (a slot never written holds tag 0), to 2, which keeps the parities
  // alternating.
  unsigned epoch = counters[b] + 1;  // every thread reads the old value ...
  if (epoch == 0) epoch = 2;
  __syncthreads();
  if (threadIdx.x == 0) counters[b] = epoch;  // ... before one writes the new one
  const unsigned long long senders = static_cast<unsigned long long>(kMaxBlocks) * kWordsPerBlock;
  const unsigned long long set = static_cast<unsigned long long>(epoch & 1U) * ranks;  // the parity's slots
  auto* w = reinterpret_cast<unsigned*>(x);
  unsigned mine[kWordsPerThread];
  int index[kWordsPerThread];
  int count = 0;
  for (int k = 0; k < kWordsPerThread; ++k) {
    const int j = b * kWordsPerBlock + k * blockDim.x + threadIdx.x;
    if (j < words) {
      index[count] = j;
      mine[count] = w[j];
      ++count;
    }
  }
  // Rank r's words land in each peer's slots [parity][r][word].
  for (int q = 0; q < ranks; ++q) {
    if (q == rank) continue;
    const unsigned long long to = slot_table[q] + ((set + rank) * senders) * sizeof(uint2);
    for (int k = 0; k < count; ++k) store_tagged(to + index[k] * sizeof(uint2), mine[k], epoch);
  }
  const unsigned long long from = slot_table[rank] + (set * senders) * sizeof(uint2);
  for (int k = 0; k < count; ++k) {
    float lo = 0.0F;
    float hi = 0.0F;
    for (int q = 0; q < ranks; ++q) {
      unsigned v = mine[k];
      if (q != rank) {
        const unsigned long long at = from + (q * senders + index[k]) * sizeof(uint2);
        uint2 tagged = load_tagged(at);
        while (tagged.y != epoch) tagged = load_tagged(at);
        v = tagged.x;
      }
      const float2 f = lg::unpack2(T{}, v);
      lo += f.x;
      hi += f.y;
    }
    w[index[k]] = lg::pack2(T{}, lo, hi);
  }
}

}  // namespace

extern "C" __global__ void peer_all_reduce(lg::half_t* x, int words, const unsigned long long* slot_table,
                                           unsigned* counters, int rank, int ranks) {
  peer_all_reduce_body(x, words, slot_table, counters, rank, ranks);
}

extern "C" __global__ void peer_all_reduce_bf16(lg::bf16_t* x, int words, const unsigned long long* slot_table,
                                                unsigned* counters, int rank, int ranks) {
  peer_all_reduce_body(x, words, slot_table, counters, rank, ranks);
}
