#include "lazygraph/driver/symmetric_buffer.hpp"

#include <cstdint>
#include <mutex>
#include <string>

#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/detail/driver/nccl_api.hpp"

namespace lazygraph::detail {

namespace {

void* as_pointer(CUdeviceptr p) noexcept { return reinterpret_cast<void*>(p); }  // NOLINT(performance-no-int-to-ptr)

}  // namespace

bool symmetric_supported(std::string* why) noexcept { return nccl::symmetric_supported(why); }

SymmetricAllocation::SymmetricAllocation(std::shared_ptr<CommunicatorState> comm_in, CUdeviceptr address_in,
                                         std::size_t bytes_in)
    : comm(std::move(comm_in)), address(address_in), bytes(bytes_in) {}

SymmetricAllocation::~SymmetricAllocation() {
  if (window != nullptr && !comm->aborted.load()) {
    const std::lock_guard lock(comm->mutex);
    nccl::window_deregister_no_throw(comm->comm, window);
  }
  nccl::mem_free_no_throw(comm->device.context(), as_pointer(address));
}

namespace {
/// Allocates and registers `bytes` for each of `comms` (every rank of one process, or one rank of several).
std::vector<std::shared_ptr<SymmetricAllocation>> allocate_and_register(std::span<const Communicator> comms,
                                                                        std::size_t bytes) {
  for (const Communicator& c : comms) (void)c.get();  // refuses an aborted communicator
  std::string why;
  if (!nccl::symmetric_supported(&why)) throw UsageError("SymmetricBuffer: " + why);
  const std::string object = "SymmetricBuffer of " + std::to_string(bytes) + " bytes per rank";
  std::vector<std::shared_ptr<SymmetricAllocation>> out;
  std::vector<nccl::Comm> handles;
  std::vector<void*> addresses;
  for (const Communicator& c : comms) {
    void* p = nccl::mem_alloc(c.device().context(), bytes, object);
    // Owned from here: a later failure frees what was allocated.
    out.push_back(std::make_shared<SymmetricAllocation>(c.state(), reinterpret_cast<std::uintptr_t>(p), bytes));
    handles.push_back(c.get());
    addresses.push_back(p);
    // Zeroed (the header promises it), also so that compute-sanitizer's initcheck, which does not
    // see the stores NCCL's kernels make through the window's own mappings, does not report every later read.
    driver::fill(c.device().context(), static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)), 0, 1, bytes,
                 nullptr);
  }
  for (const Communicator& c : comms) driver::context_synchronize(c.device().context());
  // NCCL calls on one communicator must not overlap: hold every rank's lock (in rank order, as no one else takes two).
  std::vector<std::unique_lock<std::mutex>> locks;
  for (const Communicator& c : comms) locks.emplace_back(c.state()->mutex);
  const std::vector<nccl::Window> windows = nccl::window_register_all(handles, addresses, bytes, object);
  for (std::size_t i = 0; i < out.size(); ++i) out[i]->window = windows[i];
  return out;
}
}  // namespace

std::vector<std::shared_ptr<SymmetricAllocation>> allocate_symmetric(std::span<const Communicator> comms,
                                                                     std::size_t bytes) {
  check_ranks_in_order(comms, "SymmetricBuffer::create_all", "its registration waits for all of them");
  return allocate_and_register(comms, bytes);
}

std::shared_ptr<SymmetricAllocation> allocate_symmetric_rank(const Communicator& comm, std::size_t bytes) {
  return allocate_and_register(std::span<const Communicator>(&comm, 1), bytes).front();
}

}  // namespace lazygraph::detail
