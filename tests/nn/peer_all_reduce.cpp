// peer_all_reduce (nn/peer_all_reduce.hpp): the sizes it takes (host); over two GPUs (four where the machine has
// them), every rank's x becomes the rank-order float sum of the ranks' x rounded once, bit for bit, in fp16 and bf16,
// from one word to the whole capacity, eagerly (a thread per rank) and in graphs replayed with new data; ranks that
// record different sizes are refused before anything runs, as over NCCL.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn.hpp>
#include <lazygraph/nn/peer_all_reduce.hpp>

#include <string>
#include <vector>

#include "common/gpu.hpp"
#include "common/nccl.hpp"

namespace lg = lazygraph;
using lg::bfloat16;
using lg::half;

static_assert(lg::nn::fits_peer_all_reduce<half>(2) && !lg::nn::fits_peer_all_reduce<half>(3));
static_assert(lg::nn::fits_peer_all_reduce<bfloat16>(65536) && !lg::nn::fits_peer_all_reduce<bfloat16>(65538));

namespace {

/// The ranks of GPUs 0 .. n-1 (4 where there are 4, else 2) with a PeerExchange and the nn kernels each, or none
/// (with a message saying why).
struct PeerRanks {
  std::vector<lg::Communicator> comms;
  std::vector<lg::PeerExchange> exchanges;
  std::vector<lg::KernelLibrary> libraries;
  std::vector<lg::Stream> streams;
};

bool peer_ranks(PeerRanks& out) {
  if (!lgtest::have_two_ranks()) return false;
  const int n = lg::Device::count() >= 4 ? 4 : 2;
  std::vector<lg::Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back(lg::Device::get(i));
  out.comms = lg::Communicator::create_all(devices);
  std::string why;
  if (!lg::PeerExchange::supported(out.comms, &why)) {
    MESSAGE("skipped: " << why);
    return false;
  }
  out.exchanges = lg::PeerExchange::create_all(out.comms);
  for (const lg::Device& d : devices) {
    out.libraries.push_back(lg::nn::kernel_library(d));
    out.streams.emplace_back(d);
  }
  return true;
}

template <class T>
std::vector<T> random_values(std::size_t n) {
  std::vector<T> out;
  for (const float f : lgtest::random_floats(n)) out.push_back(T::from_float(f * 8.0F));
  return out;
}

/// What every rank must hold: per element, 0 + x_0 + x_1 + ... in float, rounded to T once.
template <class T>
std::vector<T> rank_order_sum(const std::vector<std::vector<T>>& x) {
  std::vector<T> out(x[0].size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    float acc = 0.0F;
    for (const std::vector<T>& rank : x) acc += rank[i].to_float();
    out[i] = T::from_float(acc);
  }
  return out;
}

template <class T>
std::size_t differing(const std::vector<T>& a, const std::vector<T>& b) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < a.size(); ++i) wrong += a[i].bits != b[i].bits ? 1 : 0;
  return wrong;
}

template <class T>
void sums_over_the_ranks(PeerRanks& p) {
  const std::size_t ranks = p.comms.size();
  std::vector<lg::nn::BasicKernels<T>> kernels;
  for (const lg::KernelLibrary& l : p.libraries) kernels.emplace_back(l);
  for (const std::size_t n : {std::size_t{2}, std::size_t{4096 + 2}, lg::PeerExchange::capacity_bytes / sizeof(T)}) {
    CAPTURE(n);
    std::vector<lg::DeviceBuffer<T>> x;
    for (const lg::Communicator& c : p.comms) x.emplace_back(c.device(), n);
    // Eagerly, a thread per rank (each waits in its kernel for the others').
    std::vector<std::vector<T>> in(ranks);
    for (auto& v : in) v = random_values<T>(n);
    std::vector<std::vector<T>> got(ranks);
    lgtest::on_rank_threads(ranks, [&](std::size_t r) {
      lg::copy(x[r].view(), std::span<const T>(in[r])).sync_on(p.streams[r]);
      lg::nn::peer_all_reduce(kernels[r], p.exchanges[r], x[r].view()).sync_on(p.streams[r]);
      got[r] = lgtest::to_host(p.streams[r], x[r].cview());
    });
    const std::vector<T> expect = rank_order_sum(in);
    for (std::size_t r = 0; r < ranks; ++r) {
      CAPTURE(r);
      CHECK(differing(got[r], expect) == 0);
    }
    // In graphs, replayed with new data.
    lg::MultiDeviceGraph graph = lg::MultiDeviceGraph::capture(p.comms, [&](int rank, lg::Scope& sc) {
      const auto r = static_cast<std::size_t>(rank);
      sc.record(lg::nn::peer_all_reduce(kernels[r], p.exchanges[r], x[r].view()));
    });
    for (int replay = 0; replay < 3; ++replay) {
      CAPTURE(replay);
      for (auto& v : in) v = random_values<T>(n);
      for (std::size_t r = 0; r < ranks; ++r) lg::copy(x[r].view(), std::span<const T>(in[r])).sync_on(p.streams[r]);
      graph.launch();
      const std::vector<T> sum = rank_order_sum(in);
      for (std::size_t r = 0; r < ranks; ++r) {
        CAPTURE(r);
        CHECK(differing(lgtest::to_host(p.streams[r], x[r].cview()), sum) == 0);
      }
    }
  }
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("peer_all_reduce refuses an odd number of bytes and more than the exchange holds, naming the size") {
    PeerRanks p;
    if (!peer_ranks(p)) return;
    const lg::nn::Kernels k(p.libraries[0]);
    lg::DeviceBuffer<half> x(p.comms[0].device(), lg::PeerExchange::capacity_bytes / 2 + 2);
    CHECK_THROWS_WITH_AS((void)lg::nn::peer_all_reduce(k, p.exchanges[0], x.view().subspan(0, 3)),
                         doctest::Contains("6 bytes"), lg::UsageError);
    CHECK_THROWS_WITH_AS((void)lg::nn::peer_all_reduce(k, p.exchanges[0], x.view()), doctest::Contains("131076 bytes"),
                         lg::UsageError);
  }

  TEST_CASE("over two GPUs (four where there are): peer_all_reduce sums every rank's x, bit for bit, fp16 and bf16") {
    PeerRanks p;
    if (!peer_ranks(p)) return;
    MESSAGE("ranks: " << p.comms.size());
    sums_over_the_ranks<half>(p);
    sums_over_the_ranks<bfloat16>(p);
  }

  TEST_CASE("over two GPUs: ranks that record peer_all_reduces of different sizes are refused before launch") {
    PeerRanks p;
    if (!peer_ranks(p)) return;
    std::vector<lg::nn::Kernels> kernels;
    for (const lg::KernelLibrary& l : p.libraries) kernels.emplace_back(l);
    std::vector<lg::DeviceBuffer<half>> x;
    for (const lg::Communicator& c : p.comms) x.emplace_back(c.device(), 64);
    CHECK_THROWS_WITH_AS(
        lg::MultiDeviceGraph::capture(p.comms,
                                      [&](int rank, lg::Scope& sc) {
                                        const auto r = static_cast<std::size_t>(rank);
                                        sc.record(lg::nn::peer_all_reduce(kernels[r], p.exchanges[r],
                                                                          x[r].view().subspan(0, rank == 1 ? 32 : 64)));
                                      }),
        doctest::Contains("peer all_reduce sum of 64 float16"), lg::UsageError);
  }
}
