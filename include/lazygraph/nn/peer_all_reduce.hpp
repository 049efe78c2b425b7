#pragma once
/// \file
/// peer_all_reduce: a tensor-parallel rank's in-place all-reduce of the residual stream through a PeerExchange
/// (driver/peer_exchange.hpp), for ranks whose GPUs reach each other's memory (in one process, or in processes of one
/// machine that mapped each other's slots: PeerExchange::create): one kernel (kernels/nn/peer_all_reduce.cu) that
/// writes this rank's values straight into the peers' memory and sums theirs, in rank order, so every rank gets the
/// same bits. For a decode step's messages of a few KiB it costs a fraction
/// of NCCL's all-reduce inside a graph (2x H100: 0.5 to 3 us after a kernel that streams weights, against 5 to
/// 6 us; docs/multi_gpu.md). The ranks compare it like NCCL's collectives (CollectiveCheckOp). Every rank must
/// make the same calls; a rank whose peers never make theirs waits for ever, as in NCCL. A rank's calls must run one
/// after another (one stream at a time, as a decoder's graphs do): the rank's epochs count them.
///
///     auto ex = PeerExchange::create_all(comms);
///     sc.record(gemv_writing_x >> nn::peer_all_reduce(kernels, ex[rank], x));
///
/// gemv_all_reduce goes one step further for the all-reduce that follows a row-parallel projection (a rank's Wo and
/// W2): the projection's kernel pushes each output into every rank's memory as soon as its row is done, and the rank's
/// last block adds them, so there is no kernel between the projection and what reads x next.
///
///     sc.record(nn::gemv_all_reduce(kernels, ex[rank], wo_slice, attn, x, d, q_dim / ranks, rows));

#include <memory>
#include <string>

#include "lazygraph/driver/error.hpp"
#include "lazygraph/driver/peer_exchange.hpp"
#include "lazygraph/kernels/launch_config.hpp"
#include "lazygraph/kernels/optional_launch.hpp"
#include "lazygraph/nn/kernels.hpp"
#include "lazygraph/nn/quantized_kernels.hpp"
#include "lazygraph/ops/collective.hpp"

namespace lazygraph::nn {

/// Whether `x` fits one peer_all_reduce: a whole number of 4-byte words, at most PeerExchange::capacity_bytes.
template <Element T>
[[nodiscard]] constexpr bool fits_peer_all_reduce(std::size_t count) noexcept {
  const std::size_t bytes = count * sizeof(T);
  return bytes % 4 == 0 && bytes <= PeerExchange::capacity_bytes;
}

/// x = the sum over the ranks of `exchange` of their x, in place (see the file comment): the ranks' comparison, then
/// the kernel. \throws UsageError when x does not fit (fits_peer_all_reduce) or is empty; when executed, as
/// CollectiveCheckOp (a stream of another device than the exchange's rank, an aborted communicator).
template <Element T>
[[nodiscard]] auto peer_all_reduce(const BasicKernels<T>& k, const PeerExchange& exchange, DeviceSpan<T> x) {
  const std::size_t bytes = x.size() * sizeof(T);
  if (x.size() == 0 || !fits_peer_all_reduce<T>(x.size())) {
    throw UsageError("peer_all_reduce: " + std::to_string(bytes) + " bytes; it takes a whole number of 4-byte words, " +
                     "at most " + std::to_string(PeerExchange::capacity_bytes));
  }
  const int words = static_cast<int>(bytes / 4);
  const auto blocks =
      static_cast<unsigned>((words + PeerExchange::words_per_block - 1) / PeerExchange::words_per_block);
  const Communicator& comm = exchange.communicator();
  std::string signature = "peer all_reduce sum of " + std::to_string(x.size()) + " " +
                          std::string(lazygraph::detail::nccl_type_name(lazygraph::detail::NcclTypeOf<T>::value));
  return CollectiveCheckOp(comm, "peer_all_reduce", std::move(signature), exchange.owner()) >>
         k.peer_all_reduce(k.step_config({{blocks, 1, 1}, {128, 1, 1}, 0}), x, words, exchange.slot_table(),
                           exchange.counters(), comm.rank(), comm.size());
}

/// Whether a projection of `rows` outputs for `batch` vectors fits one gemv_all_reduce: at most
/// PeerExchange::sum_capacity outputs.
[[nodiscard]] constexpr bool fits_gemv_all_reduce(int rows, int batch) noexcept {
  return rows >= 1 && batch >= 1 && static_cast<long long>(rows) * batch <= PeerExchange::sum_capacity;
}

/// x[b] += the sum over the ranks of `exchange` of their w a[b], for b < batch: w is the rank's [rows x cols] slice of
/// a row-parallel projection, a its [batch][cols] input, x [batch][rows] and the same on every rank (the residual
/// stream). One kernel (gemv_all_reduce, see the file comment), launched as gemv_config_uncapped; the sum is taken in
/// fp32 in rank order and rounded once, so every rank gets the same bits, and with one rank gemv_add's. The ranks'
/// comparison as peer_all_reduce's. \throws UsageError when the spans are too short for the shape, cols is not a
/// multiple of 8, batch is outside 1..8, or rows x batch does not fit (fits_gemv_all_reduce); when executed, as
/// CollectiveCheckOp.
template <Element T>
[[nodiscard]] auto gemv_all_reduce(const BasicKernels<T>& k, const PeerExchange& exchange, DeviceSpan<const T> w,
                                   DeviceSpan<const T> a, DeviceSpan<T> x, int rows, int cols, int batch) {
  const auto need = [](std::size_t have, long long want, const char* what) {
    if (want < 0 || have < static_cast<std::size_t>(want)) {
      throw UsageError(std::string("gemv_all_reduce: ") + what + " holds " + std::to_string(have) + " elements, " +
                       std::to_string(want) + " needed");
    }
  };
  if (cols < 8 || cols % 8 != 0 || batch < 1 || batch > 8 || !fits_gemv_all_reduce(rows, batch)) {
    throw UsageError("gemv_all_reduce: " + std::to_string(rows) + " rows x " + std::to_string(cols) +
                     " columns for a batch of " + std::to_string(batch) +
                     "; it takes columns in multiples of 8, a batch of 1 to 8 and at most " +
                     std::to_string(PeerExchange::sum_capacity) + " outputs (rows x batch)");
  }
  need(w.size(), static_cast<long long>(rows) * cols, "the weight");
  need(a.size(), static_cast<long long>(batch) * cols, "the input");
  need(x.size(), static_cast<long long>(batch) * rows, "x");
  const Communicator& comm = exchange.communicator();
  std::string signature = "peer gemv_all_reduce sum of " + std::to_string(rows) + " x " + std::to_string(batch) + " " +
                          std::string(lazygraph::detail::nccl_type_name(lazygraph::detail::NcclTypeOf<T>::value));
  return CollectiveCheckOp(comm, "gemv_all_reduce", std::move(signature), exchange.owner()) >>
         k.gemv_all_reduce(k.gemv_config_uncapped(rows, cols, batch), w, a, x, exchange.sum_table(),
                           exchange.counters(), comm.rank(), comm.size(), rows, cols, batch);
}

/// gemv_all_reduce over the rank's share `w` of a quantized row-parallel projection ([rows x cols], its share of a
/// matrix quantized whole: shard_quantized): one kernel (qgemv_all_reduce, kernels/nn/peer_all_reduce.cu) on the
/// quantized kernels `qk`, launched as qgemv, which keeps `w` alive. The sum as gemv_all_reduce's: in fp32 in rank
/// order, rounded once. \throws UsageError as check_quantized (w not [rows x cols], batch outside 1..8), when the spans
/// are too short or rows x batch does not fit (fits_gemv_all_reduce); when executed, as CollectiveCheckOp.
template <Element T>
[[nodiscard]] auto qgemv_all_reduce(const BasicQuantizedKernels<T>& qk, const PeerExchange& exchange,
                                    const std::shared_ptr<const DeviceQuantizedWeight<T>>& w, DeviceSpan<const T> a,
                                    DeviceSpan<T> x, int rows, int cols, int batch) {
  if (w == nullptr) throw UsageError("qgemv_all_reduce: no weight given");
  check_quantized(*w, rows, cols, batch);
  if (!fits_gemv_all_reduce(rows, batch)) {
    throw UsageError("qgemv_all_reduce: " + std::to_string(rows) + " rows for a batch of " + std::to_string(batch) +
                     "; it takes at most " + std::to_string(PeerExchange::sum_capacity) + " outputs (rows x batch)");
  }
  const auto need = [](std::size_t have, long long want, const char* what) {
    if (have < static_cast<std::size_t>(want)) {
      throw UsageError(std::string("qgemv_all_reduce: ") + what + " holds " + std::to_string(have) + " elements, " +
                       std::to_string(want) + " needed");
    }
  };
  need(a.size(), static_cast<long long>(batch) * cols, "the input");
  need(x.size(), static_cast<long long>(batch) * rows, "x");
  const Communicator& comm = exchange.communicator();
  std::string signature = "peer qgemv_all_reduce sum of " + std::to_string(rows) + " x " + std::to_string(batch) + " " +
                          std::string(lazygraph::detail::nccl_type_name(lazygraph::detail::NcclTypeOf<T>::value));
  const QuantizedMatrix m = w->matrix();
  return CollectiveCheckOp(comm, "qgemv_all_reduce", std::move(signature), exchange.owner()) >>
         OptionalLaunch(qk.qgemv_all_reduce(qk.config(m, rows, cols), m, a, x, exchange.sum_table(),
                                            exchange.counters(), comm.rank(), comm.size(), rows, cols, batch),
                        w);
}

}  // namespace lazygraph::nn
