// peer_all_reduce (nn/peer_all_reduce.hpp): the sizes it takes (host); over two GPUs (four where the machine has
// them), every rank's x becomes the rank-order float sum of the ranks' x rounded once, bit for bit, in fp16 and bf16,
// from one word to the whole capacity, eagerly (a thread per rank) and in graphs replayed with new data; ranks that
// record different sizes are refused before anything runs, as over NCCL. gemv_all_reduce: with one rank, gemv_add's
// bits in every variant (one GPU); over the ranks, x plus every rank's projection within rounding of a float64
// reference and the same bits on every rank, eagerly and in graphs of several calls replayed with new data; its
// refusals of shapes it does not take. qgemv_all_reduce, its quantized form: with one rank qgemv_add's bits in every
// format; over the ranks within rounding of float64 of the dequantized weights, the same bits on every rank.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn.hpp>
#include <lazygraph/nn/peer_all_reduce.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/gpu.hpp"
#include "common/nccl.hpp"
#include "common/nn.hpp"

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

/// Random values of T, `scale` times lgtest::random_floats'.
template <class T>
std::vector<T> random_values(std::size_t n, float scale = 8.0F) {
  std::vector<T> out;
  for (const float f : lgtest::random_floats(n)) out.push_back(T::from_float(f * scale));
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

/// The kernels of `library` over T, with or without tensor cores for batches of 2 to 8.
template <class T>
lg::nn::BasicKernels<T> kernels_of(const lg::KernelLibrary& library, bool tensor_cores) {
  return lg::nn::BasicKernels<T>(library, lg::nn::KernelOptions{.tensor_cores = tensor_cores});
}

/// One shape of a row-parallel projection.
struct Projection {
  int rows, cols, batch;
};

/// A weight as the float64 reference reads it: a float (a dequantized weight) as it is, an element of T widened.
inline double value_of(float v) { return v; }
template <class T>
double value_of(T v) {
  return v.to_float();
}

/// The ranks' projections summed in float64: sum over the ranks r of W_r a_r[b], [batch][rows].
template <class T, class W>
std::vector<double> projection_sums(const Projection& s, const std::vector<std::vector<W>>& w,
                                    const std::vector<std::vector<T>>& a) {
  std::vector<double> out(static_cast<std::size_t>(s.rows) * static_cast<std::size_t>(s.batch));
  for (int b = 0; b < s.batch; ++b) {
    for (int row = 0; row < s.rows; ++row) {
      double sum = 0.0;
      for (std::size_t r = 0; r < w.size(); ++r) {
        const W* w_row = w[r].data() + static_cast<std::size_t>(row) * static_cast<std::size_t>(s.cols);
        const T* a_row = a[r].data() + static_cast<std::size_t>(b) * static_cast<std::size_t>(s.cols);
        for (int c = 0; c < s.cols; ++c) sum += value_of(w_row[c]) * a_row[c].to_float();
      }
      out[static_cast<std::size_t>(b) * static_cast<std::size_t>(s.rows) + static_cast<std::size_t>(row)] = sum;
    }
  }
  return out;
}

/// What x must hold after gemv_all_reduce, in float64: x plus the ranks' projections (projection_sums), each call's
/// result rounded to T before the next (`calls` calls in a row with the same weights and inputs).
template <class T>
std::vector<double> projected(const std::vector<T>& x, const std::vector<double>& sums, int calls) {
  std::vector<double> out(x.size());
  std::vector<T> now = x;
  for (int call = 0; call < calls; ++call) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = now[i].to_float() + sums[i];
    for (std::size_t i = 0; i < out.size(); ++i) now[i] = T::from_float(static_cast<float>(out[i]));
  }
  return out;
}

/// The largest error of `got` against `want`, relative to 1 + |want|.
template <class T>
double worst_scaled_error(const std::vector<T>& got, const std::vector<double>& want) {
  double worst = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(got[i].to_float() - want[i]) / (1.0 + std::abs(want[i])));
  }
  return worst;
}

/// Small random values of T (products of them sum to a few units over a row).
template <class T>
std::vector<T> small_values(std::size_t n) {
  return random_values<T>(n, 0.25F);
}

/// Runs `project(r)` (x[r] += the ranks' projection of `s`, weights `w` as float64 sees them, inputs `a`) on every rank
/// of `p`: two calls eagerly (the two slot sets; a thread per rank), then a graph of three calls replayed `replays`
/// times with new x; each time x within `bound` of float64 (projected) and the same bits on every rank.
template <class T, class W, class Project>
void check_over_the_ranks(PeerRanks& p, const Projection& s, const std::vector<std::vector<W>>& w,
                          const std::vector<std::vector<T>>& a, std::vector<lg::DeviceBuffer<T>>& dx, double bound,
                          int replays, const Project& project) {
  const std::size_t ranks = p.comms.size();
  const auto out_size = static_cast<std::size_t>(s.rows) * static_cast<std::size_t>(s.batch);
  const std::vector<double> sums = projection_sums(s, w, a);
  std::vector<T> x = random_values<T>(out_size);
  std::vector<std::vector<T>> got(ranks);
  lgtest::on_rank_threads(ranks, [&](std::size_t r) {
    lg::copy(dx[r].view(), std::span<const T>(x)).sync_on(p.streams[r]);
    project(r).sync_on(p.streams[r]);
    project(r).sync_on(p.streams[r]);
    got[r] = lgtest::to_host(p.streams[r], dx[r].cview());
  });
  CHECK(worst_scaled_error(got[0], projected(x, sums, 2)) < bound);
  for (std::size_t r = 1; r < ranks; ++r) CHECK(differing(got[r], got[0]) == 0);
  lg::MultiDeviceGraph graph = lg::MultiDeviceGraph::capture(p.comms, [&](int rank, lg::Scope& sc) {
    const auto r = static_cast<std::size_t>(rank);
    sc.record(project(r) >> project(r) >> project(r));
  });
  for (int replay = 0; replay < replays; ++replay) {
    CAPTURE(replay);
    x = random_values<T>(out_size);
    for (std::size_t r = 0; r < ranks; ++r) lg::copy(dx[r].view(), std::span<const T>(x)).sync_on(p.streams[r]);
    graph.launch();
    graph.synchronize();
    for (std::size_t r = 0; r < ranks; ++r) got[r] = lgtest::to_host(p.streams[r], dx[r].cview());
    CHECK(worst_scaled_error(got[0], projected(x, sums, 3)) < bound);
    for (std::size_t r = 1; r < ranks; ++r) CHECK(differing(got[r], got[0]) == 0);
  }
}

template <class T>
void projects_over_the_ranks(PeerRanks& p, bool tensor_cores) {
  const std::size_t ranks = p.comms.size();
  std::vector<lg::nn::BasicKernels<T>> kernels;
  for (const lg::KernelLibrary& l : p.libraries) kernels.push_back(kernels_of<T>(l, tensor_cores));
  const double bound = std::same_as<T, half> ? 4e-3 : 3e-2;  // a few roundings of the sum to T
  for (const Projection s : {Projection{256, 512, 1}, Projection{1032, 1024, 3}, Projection{4096, 256, 8}}) {
    CAPTURE(s.rows);
    CAPTURE(s.batch);
    const auto out_size = static_cast<std::size_t>(s.rows) * static_cast<std::size_t>(s.batch);
    std::vector<std::vector<T>> w(ranks);
    std::vector<std::vector<T>> a(ranks);
    std::vector<lg::DeviceBuffer<T>> dw;
    std::vector<lg::DeviceBuffer<T>> da;
    std::vector<lg::DeviceBuffer<T>> dx;
    for (std::size_t r = 0; r < ranks; ++r) {
      w[r] = small_values<T>(static_cast<std::size_t>(s.rows) * static_cast<std::size_t>(s.cols));
      a[r] = small_values<T>(static_cast<std::size_t>(s.batch) * static_cast<std::size_t>(s.cols));
      dw.push_back(lgtest::to_device(p.streams[r], w[r]));
      da.push_back(lgtest::to_device(p.streams[r], a[r]));
      dx.emplace_back(p.comms[r].device(), out_size);
    }
    const auto project = [&](std::size_t r) {
      return lg::nn::gemv_all_reduce(kernels[r], p.exchanges[r], dw[r].cview(), da[r].cview(), dx[r].view(), s.rows,
                                     s.cols, s.batch);
    };
    check_over_the_ranks(p, s, w, a, dx, bound, 3, project);
  }
}

/// What gemv_all_reduce and qgemv_all_reduce read of a rank of one, launched by hand (a PeerExchange takes 2 ranks or
/// more): its sums, [2 parities][1 sender][sum_capacity] of 8 bytes, their table and its counters, zeroed.
struct OneRankSums {
  explicit OneRankSums(const lg::Stream& stream)
      : sums(stream.device(), 4 * static_cast<std::size_t>(lg::PeerExchange::sum_capacity)),
        counters(stream.device(), lg::PeerExchange::counter_words),
        table(lgtest::to_device(stream, std::vector<unsigned long long>{sums.view().address()})) {
    lg::fill(sums.view(), 0U).sync_on(stream);
    lg::fill(counters.view(), 0U).sync_on(stream);
  }
  lg::DeviceBuffer<unsigned> sums;             ///< the slots
  lg::DeviceBuffer<unsigned> counters;         ///< the epochs and the arrival counts
  lg::DeviceBuffer<unsigned long long> table;  ///< the slots' address, as a PeerExchange's sum table
};

/// gemv_all_reduce launched by hand for a rank of one (a PeerExchange takes 2 ranks or more) against gemv_add, bit
/// for bit, each call of every variant.
template <class T>
void one_rank_adds_as_gemv_add(bool tensor_cores) {
  const lg::Stream& stream = lgtest::stream();
  const lg::nn::BasicKernels<T> k = kernels_of<T>(lgtest::nn_kernels(), tensor_cores);
  OneRankSums one(stream);
  const lg::DeviceBuffer<unsigned long long>& table = one.table;
  lg::DeviceBuffer<unsigned>& counters = one.counters;
  for (const Projection s :
       {Projection{200, 512, 1}, Projection{1032, 1024, 2}, Projection{512, 2048, 5}, Projection{4096, 256, 8}}) {
    CAPTURE(s.rows);
    CAPTURE(s.batch);
    const auto out_size = static_cast<std::size_t>(s.rows) * static_cast<std::size_t>(s.batch);
    const lg::DeviceBuffer<T> w =
        lgtest::to_device(stream, small_values<T>(static_cast<std::size_t>(s.rows) * static_cast<std::size_t>(s.cols)));
    const lg::DeviceBuffer<T> a = lgtest::to_device(
        stream, small_values<T>(static_cast<std::size_t>(s.batch) * static_cast<std::size_t>(s.cols)));
    const std::vector<T> x = random_values<T>(out_size);
    lg::DeviceBuffer<T> fused = lgtest::to_device(stream, x);
    lg::DeviceBuffer<T> plain = lgtest::to_device(stream, x);
    const lg::LaunchConfig config = k.gemv_config_uncapped(s.rows, s.cols, s.batch);
    for (int call = 0; call < 3; ++call) {
      CAPTURE(call);
      k.gemv_all_reduce(config, w.cview(), a.cview(), fused.view(), table.cview(), counters.view(), 0, 1, s.rows,
                        s.cols, s.batch)
          .sync_on(stream);
      k.gemv_add(config, w.cview(), a.cview(), plain.view(), s.rows, s.cols, s.batch).sync_on(stream);
      CHECK(differing(lgtest::to_host(stream, fused.cview()), lgtest::to_host(stream, plain.cview())) == 0);
    }
  }
}

/// The quantized formats the kernels take, with T's scales.
template <class T>
std::vector<lg::nn::QuantizedFormat> formats() {
  const lg::nn::ScaleType st = lg::nn::scale_type_of<T>;
  return {{lg::nn::WeightFormat::int8_channel, 0, false, st},
          {lg::nn::WeightFormat::int4_group, 32, false, st},
          {lg::nn::WeightFormat::int4_group, 128, true, st}};
}

/// A rows x cols matrix of small random values, quantized in `f`.
lg::nn::QuantizedWeight quantized_matrix(const lg::nn::QuantizedFormat& f, int rows, int cols) {
  const std::vector<float> w = lgtest::random_floats(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
  std::vector<float> small;
  for (const float v : w) small.push_back(0.25F * v);
  return lg::nn::quantize(f, "w", rows, cols, small);
}

/// qgemv_all_reduce launched by hand for a rank of one against qgemv_add, bit for bit, each call of every format.
template <class T>
void one_rank_adds_as_qgemv_add() {
  const lg::Stream& stream = lgtest::stream();
  const lg::nn::BasicQuantizedKernels<T> qk(lgtest::nn_kernels());
  OneRankSums one(stream);
  const lg::DeviceBuffer<unsigned long long>& table = one.table;
  lg::DeviceBuffer<unsigned>& counters = one.counters;
  for (const lg::nn::QuantizedFormat& f : formats<T>()) {
    CAPTURE(lg::nn::format_name(f));
    for (const Projection s : {Projection{200, 512, 1}, Projection{2048, 1024, 3}, Projection{4096, 256, 8}}) {
      CAPTURE(s.rows);
      CAPTURE(s.batch);
      const lg::nn::DeviceQuantizedWeight<T> w(stream, quantized_matrix(f, s.rows, s.cols));
      const lg::nn::QuantizedMatrix m = w.matrix();
      const lg::DeviceBuffer<T> a = lgtest::to_device(
          stream, small_values<T>(static_cast<std::size_t>(s.batch) * static_cast<std::size_t>(s.cols)));
      const std::vector<T> x = random_values<T>(static_cast<std::size_t>(s.rows) * static_cast<std::size_t>(s.batch));
      lg::DeviceBuffer<T> fused = lgtest::to_device(stream, x);
      lg::DeviceBuffer<T> plain = lgtest::to_device(stream, x);
      const lg::LaunchConfig config = qk.config(m, s.rows, s.cols);
      for (int call = 0; call < 3; ++call) {
        CAPTURE(call);
        qk.qgemv_all_reduce(config, m, a.cview(), fused.view(), table.cview(), counters.view(), 0, 1, s.rows, s.cols,
                            s.batch)
            .sync_on(stream);
        qk.qgemv_add(config, m, a.cview(), plain.view(), s.rows, s.cols, s.batch).sync_on(stream);
        CHECK(differing(lgtest::to_host(stream, fused.cview()), lgtest::to_host(stream, plain.cview())) == 0);
      }
    }
  }
}

/// Over the ranks: x plus every rank's quantized projection, within rounding of float64 of the dequantized weights,
/// the same bits on every rank, eagerly (two calls) and in a graph of three calls replayed with new x.
template <class T>
void quantized_projects_over_the_ranks(PeerRanks& p) {
  const std::size_t ranks = p.comms.size();
  std::vector<lg::nn::BasicQuantizedKernels<T>> kernels;
  for (const lg::KernelLibrary& l : p.libraries) kernels.emplace_back(l);
  const double bound = std::same_as<T, half> ? 4e-3 : 3e-2;
  for (const lg::nn::QuantizedFormat& f : formats<T>()) {
    CAPTURE(lg::nn::format_name(f));
    const Projection s{2048, 512, 3};
    const auto out_size = static_cast<std::size_t>(s.rows) * static_cast<std::size_t>(s.batch);
    std::vector<std::vector<float>> w(ranks);
    std::vector<std::vector<T>> a(ranks);
    std::vector<std::shared_ptr<const lg::nn::DeviceQuantizedWeight<T>>> dw;
    std::vector<lg::DeviceBuffer<T>> da;
    std::vector<lg::DeviceBuffer<T>> dx;
    for (std::size_t r = 0; r < ranks; ++r) {
      const lg::nn::QuantizedWeight q = quantized_matrix(f, s.rows, s.cols);
      w[r] = q.dequantize();
      a[r] = small_values<T>(static_cast<std::size_t>(s.batch) * static_cast<std::size_t>(s.cols));
      dw.push_back(std::make_shared<const lg::nn::DeviceQuantizedWeight<T>>(p.streams[r], q));
      da.push_back(lgtest::to_device(p.streams[r], a[r]));
      dx.emplace_back(p.comms[r].device(), out_size);
    }
    const auto project = [&](std::size_t r) {
      return lg::nn::qgemv_all_reduce(kernels[r], p.exchanges[r], dw[r], da[r].cview(), dx[r].view(), s.rows, s.cols,
                                      s.batch);
    };
    check_over_the_ranks(p, s, w, a, dx, bound, 1, project);
  }
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("qgemv_all_reduce with one rank adds what qgemv_add adds, bit for bit, in every format") {
    one_rank_adds_as_qgemv_add<half>();
    one_rank_adds_as_qgemv_add<bfloat16>();
  }

  TEST_CASE(
      "over two GPUs (four where there are): qgemv_all_reduce adds every rank's quantized projection to x, the same "
      "bits on every rank, fp16 and bf16") {
    PeerRanks p;
    if (!peer_ranks(p)) return;
    MESSAGE("ranks: " << p.comms.size());
    quantized_projects_over_the_ranks<half>(p);
    quantized_projects_over_the_ranks<bfloat16>(p);
  }

  TEST_CASE("gemv_all_reduce with one rank adds what gemv_add adds, bit for bit, in every variant") {
    one_rank_adds_as_gemv_add<half>(false);
    one_rank_adds_as_gemv_add<half>(true);
    one_rank_adds_as_gemv_add<bfloat16>(false);
    one_rank_adds_as_gemv_add<bfloat16>(true);
  }

  TEST_CASE("gemv_all_reduce refuses shapes it does not take, naming them") {
    PeerRanks p;
    if (!peer_ranks(p)) return;
    const lg::nn::Kernels k(p.libraries[0]);
    lg::DeviceBuffer<half> big(p.comms[0].device(), 8 * 4104);
    const auto call = [&](int rows, int cols, int batch) {
      (void)lg::nn::gemv_all_reduce(k, p.exchanges[0], big.cview(), big.cview(), big.view(), rows, cols, batch);
    };
    CHECK_THROWS_WITH_AS(call(4104, 8, 8), doctest::Contains("at most 32768 outputs"), lg::UsageError);
    CHECK_THROWS_WITH_AS(call(16, 12, 1), doctest::Contains("16 rows x 12 columns"), lg::UsageError);
    CHECK_THROWS_WITH_AS(call(16, 8, 9), doctest::Contains("batch of 9"), lg::UsageError);
    CHECK_THROWS_WITH_AS(call(4096, 16, 1), doctest::Contains("the weight holds 32832 elements, 65536 needed"),
                         lg::UsageError);
  }

  TEST_CASE(
      "over two GPUs (four where there are): gemv_all_reduce adds every rank's projection to x, the same bits on "
      "every rank, fp16 and bf16, fp32 and tensor-core variants") {
    PeerRanks p;
    if (!peer_ranks(p)) return;
    MESSAGE("ranks: " << p.comms.size());
    projects_over_the_ranks<half>(p, false);
    projects_over_the_ranks<half>(p, true);
    projects_over_the_ranks<bfloat16>(p, false);
  }

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
