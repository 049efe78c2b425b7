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
#include "lazygraph/detail/driver/peer_descriptor.hpp"
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

namespace detail {

std::uint64_t PeerLayout::slot_bytes(int ranks) const noexcept {
  return 2ULL * static_cast<std::uint64_t>(ranks) * static_cast<std::uint64_t>(max_blocks) *
         static_cast<std::uint64_t>(words_per_block) * 8ULL;
}

std::uint64_t PeerLayout::sum_bytes(int ranks) const noexcept {
  return 2ULL * static_cast<std::uint64_t>(ranks) * static_cast<std::uint64_t>(sum_capacity) * 8ULL;
}

std::uint64_t PeerLayout::counter_bytes() const noexcept { return static_cast<std::uint64_t>(counter_words) * 4ULL; }

PeerDescriptor describe_peer(const PeerLayout& layout, int rank, int ranks, std::uint64_t slot_bytes,
                             std::uint64_t sum_bytes, std::uint64_t counter_bytes, std::uint64_t machine,
                             std::int64_t process) noexcept {
  PeerDescriptor d;
  d.magic = peer_descriptor_magic;
  d.version = layout.version;
  d.rank = rank;
  d.ranks = ranks;
  d.max_blocks = layout.max_blocks;
  d.words_per_block = layout.words_per_block;
  d.sum_capacity = layout.sum_capacity;
  d.counter_words = layout.counter_words;
  d.slot_bytes = slot_bytes;
  d.sum_bytes = sum_bytes;
  d.counter_bytes = counter_bytes;
  d.machine = machine;
  d.process = process;
  return d;
}

std::string peer_verdict(std::span<const PeerDescriptor> all) {
  const auto n = static_cast<int>(all.size());
  if (n == 0) return "no ranks";
  const auto name = [](std::size_t r) { return "rank " + std::to_string(r); };
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r].magic != peer_descriptor_magic) {
      return name(r) +
             " sent no PeerExchange descriptor (a rank of another program, or of a lazygraph older than "
             "layout version 1)";
    }
  }
  const PeerDescriptor& first = all[0];
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r].version != first.version) {
      return name(r) + "'s PeerExchange layout is version " + std::to_string(all[r].version) + ", rank 0's " +
             std::to_string(first.version) + " (every rank must run the same lazygraph)";
    }
  }
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r].rank != static_cast<int>(r) || all[r].ranks != n) {
      return name(r) + "'s descriptor says rank " + std::to_string(all[r].rank) + " of " +
             std::to_string(all[r].ranks) + ", not " + std::to_string(r) + " of " + std::to_string(n);
    }
  }
  struct Field {
    const char* name;
    std::int32_t PeerDescriptor::*member;
  };
  constexpr std::array<Field, 4> fields{{{"max_blocks", &PeerDescriptor::max_blocks},
                                         {"words_per_block", &PeerDescriptor::words_per_block},
                                         {"sum_capacity", &PeerDescriptor::sum_capacity},
                                         {"counter_words", &PeerDescriptor::counter_words}}};
  for (std::size_t r = 1; r < all.size(); ++r) {
    for (const Field& f : fields) {
      if (all[r].*f.member != first.*f.member) {
        return name(r) + "'s PeerExchange " + f.name + " is " + std::to_string(all[r].*f.member) + ", rank 0's " +
               std::to_string(first.*f.member) + " (every rank must run the same lazygraph)";
      }
    }
  }
  const PeerLayout layout{first.version, first.max_blocks, first.words_per_block, first.sum_capacity,
                          first.counter_words};
  for (std::size_t r = 0; r < all.size(); ++r) {
    const auto check = [&](const char* what, std::uint64_t has, std::uint64_t needs) {
      return has == needs ? std::string()
                          : name(r) + "'s " + what + " hold " + std::to_string(has) + " bytes, the layout needs " +
                                std::to_string(needs) + " for " + std::to_string(n) + " ranks";
    };
    for (const std::string& why : {check("receive slots", all[r].slot_bytes, layout.slot_bytes(n)),
                                   check("sum slots", all[r].sum_bytes, layout.sum_bytes(n)),
                                   check("counters", all[r].counter_bytes, layout.counter_bytes())}) {
      if (!why.empty()) return why;
    }
  }
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r].machine != first.machine) return name(r) + " runs on another machine than rank 0";
  }
  for (std::size_t a = 0; a < all.size(); ++a) {
    for (std::size_t b = a + 1; b < all.size(); ++b) {
      if (all[a].process == all[b].process) {
        return "ranks " + std::to_string(a) + " and " + std::to_string(b) +
               " are in one process (ranks of one process: create_all)";
      }
    }
  }
  return {};
}

std::string bounded_text(std::span<const char> bytes) {
  const auto end = std::find(bytes.begin(), bytes.end(), '\0');
  return {bytes.begin(), end};
}

}  // namespace detail

namespace {

/// What one rank of PeerExchange::create sends once the ranks agree: the handles of its slots and sums.
struct Handles {
  CUipcMemHandle slots;
  CUipcMemHandle sums;
};
static_assert(std::is_trivially_copyable_v<Handles>);

/// A rank's verdict on its mappings, as it goes through the communicator: text, NUL-terminated when shorter.
using Verdict = std::array<char, 480>;

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
                             "PeerExchange::create's exchange of descriptors, handles and verdicts");
  }
  comm.wait(stream, timeout);
  std::vector<T> out(ranks);
  detail::driver::copy_device_to_host(ctx, out.data(), all.view().address(), sizeof(T) * ranks, stream.get());
  stream.synchronize();
  return out;
}

/// Maps `handle`, a peer's allocation named `what`, and checks that the mapping holds `bytes`. The mapping goes into
/// `mappings` (closed with them) before the check, so a refused one is closed too. \returns its address, or 0 with the
/// reason in `reason`.
unsigned long long map_peer(const Device& device, const CUipcMemHandle& handle, std::uint64_t bytes,
                            const std::string& what, std::vector<std::unique_ptr<detail::IpcMapping>>& mappings,
                            std::string& reason) {
  const CUcontext ctx = device.context();
  try {
    mappings.push_back(std::make_unique<detail::IpcMapping>(device, detail::driver::ipc_open(ctx, handle, what)));
    const unsigned long long at = mappings.back()->address;
    const std::size_t mapped = detail::driver::bytes_to_allocation_end(ctx, at, what);
    if (mapped < bytes) {
      reason = what + " map " + std::to_string(mapped) + " bytes, the layout needs " + std::to_string(bytes);
      return 0;
    }
    return at;
  } catch (const CudaError& e) {
    reason = std::string("device ") + std::to_string(device.ordinal()) + " cannot map " + e.what();
    return 0;
  }
}

}  // namespace

std::optional<PeerExchange> PeerExchange::create(const Communicator& comm, std::string* why,
                                                 std::chrono::milliseconds timeout) {
  const detail::PeerLayout this_build;
  return detail::PeerExchangeMaker::create(comm, this_build, this_build, why, timeout);
}

std::optional<PeerExchange> detail::PeerExchangeMaker::create(const Communicator& comm, const PeerLayout& advertised,
                                                              const PeerLayout& allocated, std::string* why,
                                                              std::chrono::milliseconds timeout) {
  const int n = comm.size();
  const auto refuse = [&](std::string reason) -> std::optional<PeerExchange> {
    if (why != nullptr) *why = std::move(reason);
    return std::nullopt;
  };
  if (n < 2 || n > PeerExchange::max_ranks) {  // the same on every rank: no one exchanges anything
    return refuse(std::to_string(n) + " ranks (an exchange serves 2 to " + std::to_string(PeerExchange::max_ranks) +
                  ")");
  }
  (void)comm.get();  // refuses an aborted communicator
  const Device& device = comm.device();
  const CUcontext ctx = device.context();
  auto group = std::make_shared<PeerExchangeGroup>();
  group->comms.push_back(comm);
  const auto ranks = static_cast<std::size_t>(n);
  group->slots.emplace_back(device, static_cast<std::size_t>(allocated.slot_bytes(n) / 8));
  group->sums.emplace_back(device, static_cast<std::size_t>(allocated.sum_bytes(n) / 8));
  group->counters.emplace_back(device, static_cast<std::size_t>(allocated.counter_words));
  const Stream stream(device);
  // Zeroed before the handles go round: no peer writes into them before it has every rank's handles.
  detail::driver::fill(ctx, group->slots[0].view().address(), 0, 4, group->slots[0].size() * 2, stream.get());
  detail::driver::fill(ctx, group->sums[0].view().address(), 0, 4, group->sums[0].size() * 2, stream.get());
  detail::driver::fill(ctx, group->counters[0].view().address(), 0, 4, group->counters[0].size(), stream.get());
  stream.synchronize();

  // Round 1: every rank's descriptor, and one verdict from all of them, the same on every rank, before any handle.
  const PeerDescriptor mine =
      describe_peer(advertised, comm.rank(), n, advertised.slot_bytes(n), advertised.sum_bytes(n),
                    advertised.counter_bytes(), machine_digest(), static_cast<std::int64_t>(getpid()));
  const std::vector<PeerDescriptor> descriptors = gather_from_every_rank(comm, stream, mine, timeout);
  if (std::string verdict = peer_verdict(descriptors); !verdict.empty()) return refuse(std::move(verdict));

  // Round 2: the handles; each rank maps every peer's slots and sums, and checks what it mapped. The first failure is
  // this rank's reason (a rank whose driver cannot make handles still takes part, with zeroed ones, and says so).
  std::string reason;
  Handles handles{};
  try {
    handles.slots = detail::driver::ipc_handle(ctx, group->slots[0].view().address(), "PeerExchange's receive slots");
    handles.sums = detail::driver::ipc_handle(ctx, group->sums[0].view().address(), "PeerExchange's sum slots");
  } catch (const CudaError& e) {
    handles = Handles{};
    reason = std::string("device ") + std::to_string(device.ordinal()) + " cannot share its memory: " + e.what();
  }
  const std::vector<Handles> all_handles = gather_from_every_rank(comm, stream, handles, timeout);
  const int me = comm.rank();
  std::vector<unsigned long long> slot_addresses(ranks);
  std::vector<unsigned long long> sum_addresses(ranks);
  slot_addresses[static_cast<std::size_t>(me)] = group->slots[0].view().address();
  sum_addresses[static_cast<std::size_t>(me)] = group->sums[0].view().address();
  for (std::size_t r = 0; r < ranks && reason.empty(); ++r) {
    if (static_cast<int>(r) == me) continue;
    const std::string peer = "rank " + std::to_string(r) + "'s PeerExchange ";
    slot_addresses[r] = map_peer(device, all_handles[r].slots, advertised.slot_bytes(n), peer + "receive slots",
                                 group->mappings, reason);
    if (reason.empty()) {
      sum_addresses[r] =
          map_peer(device, all_handles[r].sums, advertised.sum_bytes(n), peer + "sum slots", group->mappings, reason);
    }
  }

  // Round 3: every rank learns whether every other could map its peers: all of them get an exchange, or none does.
  Verdict said{};
  std::copy_n(reason.begin(), std::min(reason.size(), said.size() - 1), said.begin());
  const std::vector<Verdict> verdicts = gather_from_every_rank(comm, stream, said, timeout);
  for (std::size_t r = 0; r < ranks; ++r) {
    const std::string v = bounded_text(verdicts[r]);
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
