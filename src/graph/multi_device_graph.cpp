#include "lazygraph/graph/multi_device_graph.hpp"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "lazygraph/driver/error.hpp"

namespace lazygraph {

namespace detail {

void record_ranks(std::span<const Communicator> comms, const std::function<void(int)>& record,
                  std::chrono::milliseconds grace) {
  check_ranks_in_order(comms, "MultiDeviceGraph", "each rank's collectives wait for the others'");
  const std::shared_ptr<Clique>& clique = comms[0].state()->clique;
  if (clique) clique->begin_compare();

  std::mutex mutex;
  std::condition_variable changed;
  std::size_t finished = 0;
  std::vector<std::exception_ptr> errors(comms.size());
  std::vector<std::thread> threads;
  threads.reserve(comms.size());
  for (std::size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] {
      std::exception_ptr error;
      try {
        record(static_cast<int>(r));
      } catch (...) {
        error = std::current_exception();
      }
      const std::lock_guard lock(mutex);
      errors[r] = error;
      ++finished;
      changed.notify_all();
    });
  }
  {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] {
      if (finished == comms.size()) return true;
      for (const auto& e : errors) {
        if (e) return true;
      }
      return false;
    });
    if (finished < comms.size() && !changed.wait_for(lock, grace, [&] { return finished == comms.size(); })) {
      // A rank failed and another still records, most likely waiting in NCCL for the failed one: abort.
      for (const Communicator& c : comms) c.abort();
    }
  }
  for (std::thread& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) {
      if (clique) clique->cancel_compare();
      std::rethrow_exception(e);
    }
  }
  if (clique) clique->end_compare();
}

}  // namespace detail

void MultiDeviceGraph::launch_async() {
  for (CudaGraph<>& g : graphs_) g.launch_on(g.stream());
}

void MultiDeviceGraph::synchronize() {
  for (CudaGraph<>& g : graphs_) g.synchronize();
}

void MultiDeviceGraph::launch() {
  launch_async();
  synchronize();
}

void MultiDeviceGraph::synchronize_for(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (std::size_t r = 0; r < graphs_.size(); ++r) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    try {
      comms_[r].wait(graphs_[r].stream(), std::max(left, std::chrono::milliseconds(0)));
    } catch (...) {
      for (const Communicator& c : comms_) c.abort();  // the other ranks wait for this one: stop them too
      throw;
    }
  }
  synchronize();  // host-call errors, replay bookkeeping
}

}  // namespace lazygraph
