#include "lazygraph/driver/peer_exchange.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <type_traits>
#include <vector>

#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/detail/driver/nccl_api.hpp"
#include "lazygraph/driver/error.hpp"
#include "lazygraph/driver/stream.hpp"

namespace lazygraph {

detail::IpcMapping::~IpcMapping() { detail::driver::ipc_close_no_throw(device.context(), address); }

namespace {
/// Why `comms` cannot share an exchange, or empty.
std::string refusal(std::span<const Communicator> comms) {
  const auto n = static_cast<int>(comms.size());
  if (n < 2 || n > PeerExchange::max_ranks) {
    return std::to_string(n) + " ranks (an exchange serves 2 to " + std::to_string(PeerExchange::max_ranks) + ")";
  }
  std::set<int> devices;
  for (int i = 0; i < n; ++i) {
    const Communicator& c = comms[static_cast<std::size_t>(i)];
    if (c.rank() != i || c.size() != n) {
      return "communicator " + c.describe() + " given as rank " + std::to_string(i) + " of " + std::to_string(n) +
             " (give every rank of one communicator, in rank order)";
    }
    if (!devices.insert(c.device().ordinal()).second) {
      return "device " + std::to_string(c.device().ordinal()) + " holds two ranks";
    }
  }
  for (const Communicator& a : comms) {
    for (const Communicator& b : comms) {
      if (&a == &b) continue;
      if (!a.device().can_access_peer(b.device())) {
        return "device " + std::to_string(a.device().ordinal()) + " cannot access device " +
               std::to_string(b.device().ordinal()) + "'s memory (no peer access)";
      }
    }
  }
  return {};
}
}  // namespace

bool PeerExchange::supported(std::span<const Communicator> comms, std::string* why) {
  std::string reason = refusal(comms);
  if (reason.empty()) return true;
  if (why != nullptr) *why = std::move(reason);
  return false;
}

std::vector<PeerExchange> PeerExchange::create_all(std::span<const Communicator> comms) {
  if (std::string reason = refusal(comms); !reason.empty()) {
    throw UsageError("PeerExchange::create_all: " + reason);
  }
  const std::size_t n = comms.size();
  for (const Communicator& a : comms) {
    for (const Communicator& b : comms) {
      if (&a != &b) detail::driver::context_enable_peer_access(a.device().context(), b.device().context());
    }
  }
  auto group = std::make_shared<detail::PeerExchangeGroup>();
  group->comms.assign(comms.begin(), comms.end());
  const std::size_t slot_words = 2 * n * static_cast<std::size_t>(max_blocks) * words_per_block;
  const std::size_t sum_words = 2 * n * static_cast<std::size_t>(sum_capacity);
  std::vector<unsigned long long> slot_addresses;
  std::vector<unsigned long long> sum_addresses;
  for (const Communicator& c : comms) {
    const Device& d = c.device();
    group->slots.emplace_back(d, slot_words);
    group->sums.emplace_back(d, sum_words);
    group->counters.emplace_back(d, static_cast<std::size_t>(counter_words));
    slot_addresses.push_back(group->slots.back().view().address());
    sum_addresses.push_back(group->sums.back().view().address());
  }
  const auto upload_table = [&](const Device& d, std::vector<DeviceBuffer<unsigned long long>>& tables,
                                const std::vector<unsigned long long>& addresses) {
    tables.emplace_back(d, n);
    detail::driver::copy_host_to_device(d.context(), tables.back().view().address(), addresses.data(),
                                        n * sizeof(unsigned long long), nullptr);
  };
  for (std::size_t r = 0; r < n; ++r) {
    const Device& d = comms[r].device();
    const CUcontext ctx = d.context();
    detail::driver::fill(ctx, group->slots[r].view().address(), 0, 4, 2 * slot_words, nullptr);
    detail::driver::fill(ctx, group->sums[r].view().address(), 0, 4, 2 * sum_words, nullptr);
    detail::driver::fill(ctx, group->counters[r].view().address(), 0, 4, static_cast<std::size_t>(counter_words),
                         nullptr);
    upload_table(d, group->tables, slot_addresses);
    upload_table(d, group->sum_tables, sum_addresses);
    detail::driver::context_synchronize(ctx);
  }
  std::vector<PeerExchange> out;
  out.reserve(n);
  for (std::size_t r = 0; r < n; ++r) out.push_back(PeerExchange(group, static_cast<int>(r)));
  return out;
}

namespace {

/// What one rank of PeerExchange::create tells the others: where it runs, and the handles of its slots and sums.
struct Card {
  std::uint64_t machine;  ///< a digest of the host's name and boot id
  std::int64_t process;   ///< its process id
  CUipcMemHandle slots;
  CUipcMemHandle sums;
};
static_assert(std::is_trivially_copyable_v<Card>);

/// A digest (FNV-1a) of this machine's name and boot id: equal for the processes of one machine (and container).
std::uint64_t machine_digest() {
  std::array<char, 256> host{};
  (void)gethostname(host.data(), host.size() - 1);
  std::string text(host.data());
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  text += '/';
  text.append(std::istreambuf_iterator<char>(boot), std::istreambuf_iterator<char>());
  std::uint64_t h = 14695981039346656037ULL;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}

/// Every rank's `mine`, in rank order, through one eager all-gather of bytes on `stream`, waited for at most `timeout`.
template <class T>
std::vector<T> gather_from_every_rank(const Communicator& comm, const Stream& stream, const T& mine,
                                      std::chrono::milliseconds timeout) {
  static_assert(std::is_trivially_copyable_v<T>);
  const auto ranks = static_cast<std::size_t>(comm.size());
  const CUcontext ctx = comm.device().context();
  DeviceBuffer<unsigned char> send(comm.device(), sizeof(T));
  DeviceBuffer<unsigned char> all(comm.device(), sizeof(T) * ranks);
  detail::driver::copy_host_to_device(ctx, send.view().address(), &mine, sizeof(T), stream.get());
  // NCCL takes device addresses as pointers.
  const auto* src = reinterpret_cast<const void*>(send.view().address());  // NOLINT(performance-no-int-to-ptr)
  auto* dst = reinterpret_cast<void*>(all.view().address());               // NOLINT(performance-no-int-to-ptr)
  {
    const std::lock_guard lock(comm.state()->mutex);
    detail::nccl::all_gather(ctx, src, dst, sizeof(T), detail::nccl::DataType::uint8, comm.get(), stream.get(),
                             "PeerExchange::create's exchange of handles");
  }
  comm.wait(stream, timeout);
  std::vector<T> out(ranks);
  detail::driver::copy_device_to_host(ctx, out.data(), all.view().address(), sizeof(T) * ranks, stream.get());
  stream.synchronize();
  return out;
}

}  // namespace

std::optional<PeerExchange> PeerExchange::create(const Communicator& comm, std::string* why,
                                                 std::chrono::milliseconds timeout) {
  const int n = comm.size();
  const auto refuse = [&](std::string reason) -> std::optional<PeerExchange> {
    if (why != nullptr) *why = std::move(reason);
    return std::nullopt;
  };
  if (n < 2 || n > max_ranks) {  // the same on every rank: no one exchanges anything
    return refuse(std::to_string(n) + " ranks (an exchange serves 2 to " + std::to_string(max_ranks) + ")");
  }
  (void)comm.get();  // refuses an aborted communicator
  const Device& device = comm.device();
  const CUcontext ctx = device.context();
  auto group = std::make_shared<detail::PeerExchangeGroup>();
  group->comms.push_back(comm);
  const auto ranks = static_cast<std::size_t>(n);
  const std::size_t slot_words = 2 * ranks * static_cast<std::size_t>(max_blocks) * words_per_block;
  const std::size_t sum_words = 2 * ranks * static_cast<std::size_t>(sum_capacity);
  group->slots.emplace_back(device, slot_words);
  group->sums.emplace_back(device, sum_words);
  group->counters.emplace_back(device, static_cast<std::size_t>(counter_words));
  const Stream stream(device);
  // Zeroed before the handles go round: no peer writes into them before it has every rank's handles.
  detail::driver::fill(ctx, group->slots[0].view().address(), 0, 4, 2 * slot_words, stream.get());
  detail::driver::fill(ctx, group->sums[0].view().address(), 0, 4, 2 * sum_words, stream.get());
  detail::driver::fill(ctx, group->counters[0].view().address(), 0, 4, static_cast<std::size_t>(counter_words),
                       stream.get());
  stream.synchronize();

  Card mine{};
  mine.machine = machine_digest();
  mine.process = static_cast<std::int64_t>(getpid());
  mine.slots = detail::driver::ipc_handle(ctx, group->slots[0].view().address(), "PeerExchange's receive slots");
  mine.sums = detail::driver::ipc_handle(ctx, group->sums[0].view().address(), "PeerExchange's sum slots");
  const std::vector<Card> cards = gather_from_every_rank(comm, stream, mine, timeout);

  // Map every peer's slots and sums; the first failure is this rank's reason.
  const int me = comm.rank();
  std::string reason;
  std::vector<unsigned long long> slot_addresses(ranks);
  std::vector<unsigned long long> sum_addresses(ranks);
  slot_addresses[static_cast<std::size_t>(me)] = group->slots[0].view().address();
  sum_addresses[static_cast<std::size_t>(me)] = group->sums[0].view().address();
  for (int r = 0; r < n && reason.empty(); ++r) {
    const Card& c = cards[static_cast<std::size_t>(r)];
    if (r == me) continue;
    if (c.machine != mine.machine) {
      reason = "rank " + std::to_string(r) + " runs on another machine";
    } else if (c.process == mine.process) {
      reason = "rank " + std::to_string(r) + " is in this rank's process (ranks of one process: create_all)";
    } else {
      try {
        const std::string peer = "rank " + std::to_string(r) + "'s ";
        group->mappings.push_back(std::make_unique<detail::IpcMapping>(
            device, detail::driver::ipc_open(ctx, c.slots, peer + "PeerExchange receive slots")));
        slot_addresses[static_cast<std::size_t>(r)] = group->mappings.back()->address;
        group->mappings.push_back(std::make_unique<detail::IpcMapping>(
            device, detail::driver::ipc_open(ctx, c.sums, peer + "PeerExchange sum slots")));
        sum_addresses[static_cast<std::size_t>(r)] = group->mappings.back()->address;
      } catch (const CudaError& e) {
        reason = std::string("device ") + std::to_string(device.ordinal()) + " cannot map " + e.what();
      }
    }
  }

  // Every rank learns whether every other could map its peers: all of them get an exchange, or none does.
  std::array<char, 480> said{};
  std::copy_n(reason.begin(), std::min(reason.size(), said.size() - 1), said.begin());
  const std::vector<std::array<char, 480>> verdicts = gather_from_every_rank(comm, stream, said, timeout);
  for (int r = 0; r < n; ++r) {
    const std::string v(verdicts[static_cast<std::size_t>(r)].data());
    if (!v.empty()) return refuse("rank " + std::to_string(r) + ": " + v);  // the mappings are closed with the group
  }
  const auto upload_table = [&](std::vector<DeviceBuffer<unsigned long long>>& tables,
                                const std::vector<unsigned long long>& addresses) {
    tables.emplace_back(device, ranks);
    detail::driver::copy_host_to_device(ctx, tables.back().view().address(), addresses.data(),
                                        ranks * sizeof(unsigned long long), stream.get());
  };
  upload_table(group->tables, slot_addresses);
  upload_table(group->sum_tables, sum_addresses);
  stream.synchronize();
  return PeerExchange(std::move(group), 0);
}

}  // namespace lazygraph
