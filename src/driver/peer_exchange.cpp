#include "lazygraph/driver/peer_exchange.hpp"

#include <set>
#include <vector>

#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/driver/error.hpp"

namespace lazygraph {

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
      if (!detail::driver::device_can_access_peer(a.device().state()->device, b.device().state()->device)) {
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

}  // namespace lazygraph
