#include "lazygraph/nn/tensor_parallel_decoder.hpp"

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace lazygraph::nn {

namespace detail {

struct RankThreads::State {
  std::mutex calls;  // one run at a time: a second caller waits until the first has its results
  std::mutex mutex;
  std::condition_variable start;
  std::condition_variable done;
  const std::function<void(int)>* job = nullptr;
  std::uint64_t generation = 0;  // one more per run: a thread runs each generation's job once
  int pending = 0;
  bool stop = false;
  std::vector<std::exception_ptr> errors;
  std::vector<std::thread> threads;
};

RankThreads::RankThreads(int ranks) : state_(std::make_unique<State>()) {
  State* s = state_.get();
  s->errors.resize(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    s->threads.emplace_back([s, r] {
      std::uint64_t seen = 0;
      std::unique_lock lock(s->mutex);
      for (;;) {
        s->start.wait(lock, [&] { return s->stop || s->generation != seen; });
        if (s->stop) return;
        seen = s->generation;
        const std::function<void(int)>* job = s->job;
        lock.unlock();
        try {
          (*job)(r);
        } catch (...) {
          s->errors[static_cast<std::size_t>(r)] = std::current_exception();
        }
        lock.lock();
        if (--s->pending == 0) s->done.notify_all();
      }
    });
  }
}

RankThreads::~RankThreads() {
  {
    const std::lock_guard lock(state_->mutex);
    state_->stop = true;
  }
  state_->start.notify_all();
  for (std::thread& t : state_->threads) t.join();
}

void RankThreads::run(const std::function<void(int)>& f) {
  State& s = *state_;
  const std::lock_guard call(s.calls);
  std::unique_lock lock(s.mutex);
  for (std::exception_ptr& e : s.errors) e = nullptr;
  s.job = &f;
  s.pending = static_cast<int>(s.threads.size());
  ++s.generation;
  s.start.notify_all();
  s.done.wait(lock, [&] { return s.pending == 0; });
  for (const std::exception_ptr& e : s.errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace detail

namespace {
/// Checks what every rank's constructor would refuse alike, before any rank starts (a rank that throws while the
/// others capture their collectives would leave them waiting for it).
void check_ranks(std::span<const Communicator> comms, std::span<const KernelLibrary* const> libraries,
                 const DecoderConfig& config) {
  check_tensor_split(config, static_cast<int>(comms.size()));
  detail::check_libraries("TensorParallelDecoder", libraries.size(), comms.size());
  lazygraph::detail::check_ranks_in_order(comms, "TensorParallelDecoder", "its ranks capture their graphs together");
}

/// One PeerExchange per rank where options.peer_all_reduce asks for it and the GPUs allow it, else none.
std::vector<PeerExchange> peer_exchanges(std::span<const Communicator> comms, const TensorParallelOptions& options) {
  if (!options.peer_all_reduce || !PeerExchange::supported(comms)) return {};
  return PeerExchange::create_all(comms);
}
}  // namespace

template <Element T>
BasicTensorParallelDecoder<T>::BasicTensorParallelDecoder(std::span<const Communicator> comms,
                                                          std::span<const KernelLibrary* const> libraries,
                                                          const DecoderConfig& config,
                                                          const TensorParallelOptions& options)
    : config_(config) {
  check_ranks(comms, libraries, config_);
  const int n = static_cast<int>(comms.size());
  const std::vector<PeerExchange> peers = peer_exchanges(comms, options);
  ranks_.resize(comms.size());
  threads_ = std::make_unique<detail::RankThreads>(n);
  threads_->run([&](int r) {
    const auto i = static_cast<std::size_t>(r);
    const Stream stream(comms[i].device());
    BasicDecoderWeights<T> shard = [&] {  // the whole seeded model on this rank's GPU, cut into its share, then freed
      const BasicDecoderWeights<T> full =
          BasicDecoderWeights<T>::generate(stream, BasicKernels<T>(*libraries[i], config_.early_launch), config_);
      return shard_decoder_weights(stream, full, config_, r, n);
    }();
    ranks_[i] = std::make_unique<BasicDecoder<T>>(stream, *libraries[i], config_, std::move(shard), comms[i], options,
                                                  peers.empty() ? nullptr : &peers[i]);
  });
}

template <Element T>
BasicTensorParallelDecoder<T>::BasicTensorParallelDecoder(std::span<const Communicator> comms,
                                                          std::span<const KernelLibrary* const> libraries,
                                                          const DecoderConfig& config,
                                                          std::vector<BasicDecoderWeights<T>> weights,
                                                          const TensorParallelOptions& options)
    : config_(config) {
  check_ranks(comms, libraries, config_);
  if (weights.size() != comms.size()) {
    throw UsageError("TensorParallelDecoder: " + std::to_string(weights.size()) + " ranks' weights for " +
                     std::to_string(comms.size()) + " ranks");
  }
  const std::vector<PeerExchange> peers = peer_exchanges(comms, options);
  ranks_.resize(comms.size());
  threads_ = std::make_unique<detail::RankThreads>(static_cast<int>(comms.size()));
  threads_->run([&](int r) {
    const auto i = static_cast<std::size_t>(r);
    const Stream stream(comms[i].device());
    ranks_[i] = std::make_unique<BasicDecoder<T>>(stream, *libraries[i], config_, std::move(weights[i]), comms[i],
                                                  options, peers.empty() ? nullptr : &peers[i]);
  });
}

template <Element T>
int BasicTensorParallelDecoder<T>::forward(TokenAt in) {
  check_step(config_, in);  // before any rank runs: a rank that refused would leave the others waiting
  std::vector<int> next(ranks_.size());
  threads_->run([&](int r) { next[static_cast<std::size_t>(r)] = ranks_[static_cast<std::size_t>(r)]->forward(in); });
  return next[0];
}

template <Element T>
std::vector<int> BasicTensorParallelDecoder<T>::forward_batch(std::span<const TokenAt> steps) {
  check_batch(config_, steps);
  std::vector<std::vector<int>> next(ranks_.size());
  threads_->run(
      [&](int r) { next[static_cast<std::size_t>(r)] = ranks_[static_cast<std::size_t>(r)]->forward_batch(steps); });
  return next[0];
}

template <Element T>
int BasicTensorParallelDecoder<T>::prefill(std::span<const int> prompt, int start, int slot) {
  check_prompt(config_, prompt, start, slot);
  std::vector<int> next(ranks_.size());
  threads_->run([&](int r) {
    next[static_cast<std::size_t>(r)] = ranks_[static_cast<std::size_t>(r)]->prefill(prompt, start, slot);
  });
  return next[0];
}

template <Element T>
std::vector<int> BasicTensorParallelDecoder<T>::generate(int token, int n, int stop_token, int start) {
  check_generate(config_, token, n, stop_token, start);
  std::vector<std::vector<int>> out(ranks_.size());
  threads_->run([&](int r) {
    out[static_cast<std::size_t>(r)] = ranks_[static_cast<std::size_t>(r)]->generate(token, n, stop_token, start);
  });
  return out[0];
}

template <Element T>
void BasicTensorParallelDecoder<T>::set_sampling(const Sampling& sampling) {
  sampling.validate();
  // On the ranks' threads, as one call: no step of another thread's call can run on some ranks before and on others
  // after the change (no GPU work: the graphs are captured again on next use).
  threads_->run([&](int r) { ranks_[static_cast<std::size_t>(r)]->set_sampling(sampling); });
}

template <Element T>
void BasicTensorParallelDecoder<T>::reset() {
  threads_->run([&](int r) { ranks_[static_cast<std::size_t>(r)]->reset(); });  // each rank's own cache, as one call
}

template <Element T>
std::vector<T> BasicTensorParallelDecoder<T>::logits(int row) const {
  return ranks_[0]->logits(row);
}

template <Element T>
void BasicTensorParallelDecoder<T>::replay(int rows) {
  threads_->run([&](int r) { ranks_[static_cast<std::size_t>(r)]->graph(rows).launch(); });
}

template class BasicTensorParallelDecoder<half>;
template class BasicTensorParallelDecoder<bfloat16>;

}  // namespace lazygraph::nn
