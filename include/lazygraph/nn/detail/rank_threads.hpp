#pragma once
/// \file
/// nn's private part: the threads that run a tensor-parallel decoder's ranks side by side
/// (tensor_parallel_decoder.hpp).

#include <functional>
#include <memory>

namespace lazygraph::nn::detail {

/// One thread per rank, kept for the decoder's life: run(f) calls f(rank) on every rank's thread at once and waits for
/// all of them.
class RankThreads {
 public:
  /// Starts `ranks` threads, each waiting for run().
  explicit RankThreads(int ranks);
  /// Stops and joins the threads (after the run in progress, if any).
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;
  /// Calls f(r) on thread r for every rank, waits for all, and rethrows the first rank's exception (by rank order)
  /// when any threw. Calls from several threads run one after another.
  void run(const std::function<void(int)>& f);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace lazygraph::nn::detail
