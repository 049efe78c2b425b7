// The fp16 kernels of a batch-1 LLM decode step (kernels/nn/: embedding.cu, rms_norm.cu, gemv.cu, rope.cu,
// attention.cu, qk_norm.cu, argmax.cu; and the core kernels/elementwise.cu) against float64 references computed from
// the same fp16-rounded inputs. Outputs are poisoned with a NaN pattern before each launch, so an element a kernel
// fails to write fails the comparison.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <future>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "common/gpu.hpp"
#include "common/nn.hpp"

#include <lazygraph/nn/kernels.hpp>

using namespace lazygraph;

namespace {

/// ||got - ref|| / ||ref|| (and max |got - ref| / max |ref|) must stay below this: fp16 rounds to 2^-11.
constexpr double fp16_tolerance = 5e-3;
constexpr std::uint16_t poison = 0x7e00;  // a quiet NaN

using lgtest::random_halves;

std::vector<double> widen(const std::vector<half>& h) {
  std::vector<double> out(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) out[i] = h[i].to_float();
  return out;
}

DeviceBuffer<half> poisoned(std::size_t n) {
  return lgtest::to_device(lgtest::stream(), std::vector<half>(n, half{poison}));
}

DeviceBuffer<half> on_device(const std::vector<half>& h) { return lgtest::to_device(lgtest::stream(), h); }

/// The RoPE table of the plain rule, theta^(-2i / head_dim) per pair, as the kernels read it (written here from the
/// formula, not from nn::rope_frequencies, so the kernels are checked against the rule itself).
std::vector<float> plain_rope_table(float theta, int head_dim) {
  std::vector<float> out(static_cast<std::size_t>(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) {
    out[static_cast<std::size_t>(i)] = static_cast<float>(std::pow(static_cast<double>(theta), -2.0 * i / head_dim));
  }
  return out;
}

std::vector<half> on_host(const DeviceBuffer<half>& b) { return lgtest::to_host(lgtest::stream(), b.cview()); }

/// The inputs of the two-matrix kernels: random rows x cols weights W1 and W3 and a random x, on the host (for
/// the reference) and on the device.
struct TwoWeights {
  TwoWeights(int rows, int cols)
      : w1(random_halves(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols))),
        w3(random_halves(w1.size())),
        x(random_halves(static_cast<std::size_t>(cols))),
        dw1(on_device(w1)),
        dw3(on_device(w3)),
        dx(on_device(x)) {}
  std::vector<half> w1;
  std::vector<half> w3;
  std::vector<half> x;
  DeviceBuffer<half> dw1;
  DeviceBuffer<half> dw3;
  DeviceBuffer<half> dx;
};

/// The L2 error of `got` relative to `ref`; infinite when `got` has a NaN or infinity.
double l2_relative_error(const std::vector<half>& got, const std::vector<double>& ref) {
  double diff = 0;
  double norm = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = got[i].to_float();
    if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
    diff += (g - ref[i]) * (g - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

/// max |got - ref| / max |ref|; infinite when `got` has a NaN or infinity.
double max_relative_error(const std::vector<half>& got, const std::vector<double>& ref) {
  std::vector<float> g(got.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    g[i] = got[i].to_float();
    if (!std::isfinite(g[i])) return std::numeric_limits<double>::infinity();
  }
  return lgtest::relative_error(g, ref);
}

/// Both relative errors within fp16 tolerance.
void check_close(const std::vector<half>& got, const std::vector<double>& ref) {
  REQUIRE(got.size() == ref.size());
  const double l2 = l2_relative_error(got, ref);
  const double max = max_relative_error(got, ref);
  CHECK(l2 < fp16_tolerance);
  CHECK(max < fp16_tolerance);
}

/// The elements whose error exceeds one fp16 rounding of the reference plus `allow[i]` (the fp32 arithmetic's
/// share); at most a few are reported.
int count_outside_rounding(const std::vector<half>& got, const std::vector<double>& ref,
                           const std::vector<double>& allow) {
  int bad = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = got[i].to_float();
    const double bound = std::abs(ref[i]) * 0x1.01p-11 + allow[i] + 0x1p-25;
    if (!(std::abs(g - ref[i]) <= bound)) {
      if (bad < 5) MESSAGE("element " << i << ": got " << g << ", reference " << ref[i]);
      ++bad;
    }
  }
  return bad;
}

using lgtest::silu;

/// Dot products of a row-major rows x cols fp16 matrix with x, and the sums of |terms| (for error bounds).
struct MatVec {
  std::vector<double> value;
  std::vector<double> magnitude;
};

MatVec matvec(const std::vector<half>& w, const std::vector<double>& x, int rows, int cols) {
  MatVec r{std::vector<double>(rows), std::vector<double>(rows)};
  for (int row = 0; row < rows; ++row) {
    double sum = 0;
    double mag = 0;
    const half* w_row = w.data() + static_cast<std::size_t>(row) * cols;
    for (int c = 0; c < cols; ++c) {
      const double t = static_cast<double>(w_row[c].to_float()) * x[c];
      sum += t;
      mag += std::abs(t);
    }
    r.value[row] = sum;
    r.magnitude[row] = mag;
  }
  return r;
}

/// Allowance for fp32 accumulation: a small multiple of the sum of |terms| (a missing 16-byte chunk of a row
/// costs about 8 / cols of it, well above this).
std::vector<double> accumulation_allowance(const std::vector<double>& magnitude) {
  std::vector<double> a(magnitude.size());
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = 2e-5 * magnitude[i];
  return a;
}

/// Block (32, K, R), one row per group (or `grid` blocks, grid-stride).
LaunchConfig gemv_config(int rows, unsigned warps_per_row, unsigned rows_per_block, unsigned grid = 0) {
  if (grid == 0) grid = (static_cast<unsigned>(rows) + rows_per_block - 1) / rows_per_block;
  return {{grid, 1, 1}, {32, warps_per_row, rows_per_block}, 0};
}

struct GemvShape {
  int rows;
  int cols;
  unsigned warps_per_row;
  unsigned rows_per_block;
  unsigned grid;  // 0: one row per group
};

void check_gemv(const GemvShape& shape) {
  CAPTURE(shape.rows);
  CAPTURE(shape.cols);
  CAPTURE(shape.warps_per_row);
  CAPTURE(shape.rows_per_block);
  CAPTURE(shape.grid);
  Stream& s = lgtest::stream();
  const auto gemv = lgtest::nn_kernels().get<void(const half*, const half*, half*, int, int, int)>("gemv");
  const auto w = random_halves(static_cast<std::size_t>(shape.rows) * shape.cols);
  const auto x = random_halves(shape.cols);
  const auto dw = on_device(w);
  const auto dx = on_device(x);
  auto out = poisoned(shape.rows);
  gemv.launch(s, gemv_config(shape.rows, shape.warps_per_row, shape.rows_per_block, shape.grid), dw.cview(), dx.cview(),
              out.view(), shape.rows, shape.cols, 1);
  const auto got = on_host(out);
  const MatVec ref = matvec(w, widen(x), shape.rows, shape.cols);
  check_close(got, ref.value);
  CHECK(count_outside_rounding(got, ref.value, accumulation_allowance(ref.magnitude)) == 0);
}

/// n fresh random values in [-1, 1) rounded to T.
template <class T>
std::vector<T> random_of(std::size_t n) {
  std::vector<T> v(n);
  const std::vector<float> f = lgtest::random_floats(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = T::from_float(f[i]);
  return v;
}

/// A device buffer's elements as their bits.
template <class T>
std::vector<std::uint16_t> bits_of(const DeviceBuffer<T>& b) {
  const std::vector<T> v = lgtest::to_host(lgtest::stream(), b.cview());
  std::vector<std::uint16_t> out(v.size());
  std::memcpy(out.data(), v.data(), out.size() * sizeof(std::uint16_t));
  return out;
}

/// rms_norm_store_gemv over elements of T for a rows x cols weight, on fresh random inputs: h and out against
/// rms_norm (256 threads) and then gemv, the launches it replaces, bit for bit, and out against float64 of the
/// kernel's own h within the fp32 accumulation's rounding; rms_norm's h itself has float64 tests above.
/// `grid` > 0: that many blocks instead of the config's, so that the blocks take the rows in several passes.
template <class T>
void check_rms_norm_store_gemv(int rows, int cols, unsigned grid = 0) {
  CAPTURE(rows);
  CAPTURE(cols);
  CAPTURE(grid);
  Stream& s = lgtest::stream();
  const nn::BasicKernels<T> k(lgtest::nn_kernels());
  const auto random = [](std::size_t n) { return random_of<T>(n); };
  const auto bits = [](const DeviceBuffer<T>& b) { return bits_of(b); };
  const float eps = 1e-6F;
  const std::vector<T> w = random(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
  const auto dw = lgtest::to_device(s, w);
  const auto dx = lgtest::to_device(s, random(static_cast<std::size_t>(cols)));
  const auto dg = lgtest::to_device(s, random(static_cast<std::size_t>(cols)));
  const std::vector<T> nan(static_cast<std::size_t>(std::max(rows, cols)), T::from_float(std::nanf("")));
  auto h = lgtest::to_device(s, std::vector<T>(nan.begin(), nan.begin() + cols));
  auto out = lgtest::to_device(s, std::vector<T>(nan.begin(), nan.begin() + rows));
  auto h_ref = lgtest::to_device(s, std::vector<T>(nan.begin(), nan.begin() + cols));
  auto out_ref = lgtest::to_device(s, std::vector<T>(nan.begin(), nan.begin() + rows));
  LaunchConfig config = k.rms_norm_store_gemv_config(rows, cols);
  if (grid > 0) config.grid.x = grid;
  k.rms_norm_store_gemv.launch(s, config, dw.cview(), dx.cview(), dg.cview(), h.view(), out.view(), rows, cols, eps);
  k.rms_norm.launch(s, {{1, 1, 1}, {256, 1, 1}, 0}, dx.cview(), dg.cview(), h_ref.view(), cols, eps);
  k.gemv.launch(s, k.gemv_config(rows, cols), dw.cview(), h_ref.cview(), out_ref.view(), rows, cols, 1);
  CHECK(bits(h) == bits(h_ref));
  CHECK(bits(out) == bits(out_ref));
  const std::vector<T> got_h = lgtest::to_host(s, h.cview());
  const std::vector<T> got = lgtest::to_host(s, out.cview());
  int outside = 0;
  for (int r = 0; r < rows; ++r) {
    double sum = 0;
    double magnitude = 0;
    for (int c = 0; c < cols; ++c) {
      const double t = static_cast<double>(w[static_cast<std::size_t>(r) * cols + c].to_float()) * got_h[c].to_float();
      sum += t;
      magnitude += std::abs(t);
    }
    // One rounding of T (fp16 2^-11, bf16 2^-8) of the sum, and the fp32 chain's share.
    const double unit = std::same_as<T, half> ? 0x1.01p-11 : 0x1.01p-8;
    if (!(std::abs(got[r].to_float() - sum) <= std::abs(sum) * unit + 2e-5 * magnitude + 0x1p-25)) ++outside;
  }
  CHECK(outside == 0);
}

/// argmax_cluster over rows of T against the argmax kernel (one block a row) and a host reference: Qwen3's and
/// Llama 3's vocabularies, rows whose length 8 does not divide (their blocks' ranges start off 16-byte boundaries),
/// rows shorter than the cluster's blocks; ties between blocks' ranges, NaNs, a -0/+0 tie and a row of NaNs.
template <class T>
void check_argmax_cluster() {
  Stream& s = lgtest::stream();
  const nn::BasicKernels<T> k(lgtest::nn_kernels());
  const auto as_t = [](float v) { return T::from_float(v); };
  for (const int n : {151936, 128256, 32003, 100, 5}) {
    for (const unsigned blocks : {2U, 5U, 8U}) {
      CAPTURE(n);
      CAPTURE(blocks);
      const int rows = 6;
      std::vector<T> logits = random_of<T>(static_cast<std::size_t>(rows) * n);
      const auto at = [&](int r, int i) -> T& { return logits[static_cast<std::size_t>(r) * n + i]; };
      // Row 1: a tie between the first and the last logit (different blocks); row 2: a NaN where the maximum was and a
      // tie further on; row 3: every logit NaN; row 4: -0 and +0 the largest (a tie: the lower index); row 5 random.
      at(1, 0) = as_t(4.0F);
      at(1, n - 1) = as_t(4.0F);
      at(2, n / 2) = T{static_cast<std::uint16_t>(std::same_as<T, half> ? 0x7e00 : 0x7fc0)};
      at(2, n - 1) = as_t(3.0F);
      if (n > 2) at(2, n - 2) = as_t(3.0F);
      for (int i = 0; i < n; ++i) at(3, i) = T{static_cast<std::uint16_t>(std::same_as<T, half> ? 0x7e00 : 0x7fc0)};
      for (int i = 0; i < n; ++i) at(4, i) = as_t(-1.0F);
      at(4, n - 1) = as_t(0.0F);
      at(4, n / 3) = T{static_cast<std::uint16_t>(0x8000)};  // -0
      const auto reference = [&](int r) {
        int best = -1;
        for (int i = 0; i < n; ++i) {
          const float v = at(r, i).to_float();
          if (v == v && (best < 0 || v > at(r, best).to_float())) best = i;
        }
        return best;
      };
      const auto d = lgtest::to_device(s, logits);
      auto got = lgtest::to_device(s, std::vector<int>(rows, -7));
      auto one_block = lgtest::to_device(s, std::vector<int>(rows, -7));
      LaunchConfig config = k.argmax_cluster_config(rows);
      config.grid.x = blocks;
      config.cluster = {blocks, 1, 1};
      k.argmax_cluster.launch(s, config, d.cview(), got.view(), n);
      k.argmax.launch(s, {{static_cast<unsigned>(rows), 1, 1}, {1024, 1, 1}, 0}, d.cview(), one_block.view(), n);
      const std::vector<int> tokens = lgtest::to_host(s, got.cview());
      CHECK(tokens == lgtest::to_host(s, one_block.cview()));
      for (int r = 0; r < rows; ++r) {
        CAPTURE(r);
        CHECK(tokens[static_cast<std::size_t>(r)] == reference(r));
      }
      CHECK(tokens[1] == 0);
      CHECK(tokens[3] == -1);
      CHECK(tokens[4] == (n / 3 < n - 1 ? n / 3 : n - 1));
    }
  }
  CHECK(k.argmax_cluster_config(3).cluster.x == nn::kArgmaxClusterBlocks);
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("embedding copies the row of the token that device memory holds") {
    Stream& s = lgtest::stream();
    const auto embedding = lgtest::nn_kernels().get<void(const half*, const int*, half*, int, int)>("embedding");
    const int vocab = 1000;
    const int d = 4096;
    const auto table = random_halves(static_cast<std::size_t>(vocab) * d);
    const auto dtable = on_device(table);
    for (const int token : {123, 0, vocab - 1}) {
      CAPTURE(token);
      const auto dtoken = lgtest::to_device(s, std::vector<int>{token});
      auto out = poisoned(d);
      embedding.launch(s, grid_for(d, 256), dtable.cview(), dtoken.cview(), out.view(), d, 1);
      const auto got = on_host(out);
      const auto first = table.begin() + static_cast<std::ptrdiff_t>(token) * d;
      CHECK(std::equal(got.begin(), got.end(), first, [](half a, half b) { return a.bits == b.bits; }));
    }
  }

  TEST_CASE("rms_norm matches a float64 reference, also in place and for sizes that are not a block multiple") {
    Stream& s = lgtest::stream();
    const auto rms_norm = lgtest::nn_kernels().get<void(const half*, const half*, half*, int, float)>("rms_norm");
    const float eps = 1e-5F;
    for (const int d : {4096, 1000, 8}) {
      CAPTURE(d);
      const auto x = random_halves(d);
      const auto weight = random_halves(d);
      double ss = 0;
      for (const half v : x) ss += double(v.to_float()) * v.to_float();
      const double inv_rms = 1.0 / std::sqrt(ss / d + eps);
      std::vector<double> ref(d);
      for (int i = 0; i < d; ++i) ref[i] = x[i].to_float() * inv_rms * weight[i].to_float();

      const auto dx = on_device(x);
      const auto dw = on_device(weight);
      auto out = poisoned(d);
      rms_norm.launch(s, {{1, 1, 1}, {256, 1, 1}, 0}, dx.cview(), dw.cview(), out.view(), d, eps);
      check_close(on_host(out), ref);

      auto inplace = on_device(x);
      rms_norm.launch(s, {{1, 1, 1}, {1024, 1, 1}, 0}, inplace.cview(), dw.cview(), inplace.view(), d, eps);
      check_close(on_host(inplace), ref);
    }
  }

  TEST_CASE("gemv matches a float64 reference for 512 x 1536 weights") {
    check_gemv({512, 1536, 4, 2, 0});
    check_gemv({512, 1536, 1, 8, 0});
    check_gemv({512, 1536, 8, 1, 0});
  }

  TEST_CASE("gemv matches a float64 reference for 4096 x 11008 and 11008 x 4096 weights") {
    check_gemv({4096, 11008, 4, 2, 0});
    check_gemv({4096, 11008, 1, 8, 0});
    check_gemv({11008, 4096, 2, 4, 0});
  }

  TEST_CASE("gemv writes every row when rows are not a multiple of the rows per block, or the grid is small") {
    check_gemv({1001, 1024, 4, 2, 0});
    check_gemv({1001, 1024, 1, 8, 0});
    check_gemv({1001, 1024, 2, 3, 0});
    check_gemv({1001, 1024, 1, 8, 7});  // grid-stride: 7 blocks for 126 row groups
    check_gemv({3, 8, 1, 8, 0});        // one chunk per row, most lanes idle
    check_gemv({37, 2056, 8, 1, 0});    // 257 chunks: one past a multiple of the warps' stride
  }

  TEST_CASE("the tensor-core gemv kernels as tile functions of a persistent program give their kernels' bits") {
    Stream& s = lgtest::stream();
    KernelLibrary& lib = lgtest::nn_kernels();
    // Their NAME_prefetch companions are not tile functions of their own.
    const std::vector<std::string> names = lib.tile_names();
    CHECK(std::find(names.begin(), names.end(), "gemv_add_mma_tile") != names.end());
    CHECK(std::none_of(names.begin(), names.end(), [](const std::string& n) { return n.ends_with("_prefetch"); }));
    using Plain = void(const half*, const half*, half*, int, int, int);
    using Normed = void(const half*, const half*, const half*, half*, int, int, float, int);
    using Swiglu = void(const half*, const half*, const half*, const half*, half*, int, int, float, int);
    for (const int batch : {1, 3}) {
      CAPTURE(batch);
      constexpr int rows = 1001;
      constexpr int cols = 2056;
      const auto b = static_cast<std::size_t>(batch);
      const auto w1 = on_device(random_halves(rows * std::size_t{cols}));
      const auto w3 = on_device(random_halves(rows * std::size_t{cols}));
      const auto x = on_device(random_halves(b * cols));
      const auto g = on_device(random_halves(cols));
      const std::vector<half> residual = random_halves(b * rows);
      const auto run = [&](bool tiles, bool prefetch_next = false) {
        std::vector<DeviceBuffer<half>> out;
        for (int i = 0; i < 3; ++i) out.push_back(poisoned(b * rows));
        out.push_back(on_device(residual));
        if (tiles) {
          PersistentOptions options;
          options.prefetch_next = prefetch_next;
          const Dim3 t{(rows + 7) / 8, 1, 1};
          const PersistentProgram program(
              s,
              {lib.tile<Plain>("gemv_mma_tile")({t}, w1.cview(), x.cview(), out[0].view(), rows, cols, batch),
               lib.tile<Normed>("rms_norm_gemv_mma_tile")({t}, w1.cview(), x.cview(), g.cview(), out[1].view(), rows,
                                                          cols, 1e-5F, batch),
               lib.tile<Swiglu>("rms_norm_gemv_swiglu_mma_tile")({t}, w1.cview(), w3.cview(), x.cview(), g.cview(),
                                                                 out[2].view(), rows, cols, 1e-5F, batch),
               lib.tile<Plain>("gemv_add_mma_tile")({t}, w3.cview(), x.cview(), out[3].view(), rows, cols, batch)},
              options);
          program.op().sync_on(s);
          program.check(s);
        } else {
          const LaunchConfig c{{(rows + 7) / 8, 1, 1}, {32, 8, 1}, 0};
          lib.get<Plain>("gemv_mma")(c, w1.cview(), x.cview(), out[0].view(), rows, cols, batch).sync_on(s);
          lib.get<Normed>("rms_norm_gemv_mma")(c, w1.cview(), x.cview(), g.cview(), out[1].view(), rows, cols, 1e-5F,
                                               batch)
              .sync_on(s);
          lib.get<Swiglu>("rms_norm_gemv_swiglu_mma")(c, w1.cview(), w3.cview(), x.cview(), g.cview(), out[2].view(),
                                                      rows, cols, 1e-5F, batch)
              .sync_on(s);
          lib.get<Plain>("gemv_add_mma")(c, w3.cview(), x.cview(), out[3].view(), rows, cols, batch).sync_on(s);
        }
        std::vector<std::vector<half>> host;
        for (const auto& o : out) host.push_back(on_host(o));
        return host;
      };
      const auto kernels = run(false);
      for (const bool prefetch_next : {false, true}) {  // the next tile's weights prefetched or not: the same bits
        CAPTURE(prefetch_next);
        const auto tiles = run(true, prefetch_next);
        for (std::size_t i = 0; i < kernels.size(); ++i) {
          CAPTURE(i);
          REQUIRE(kernels[i].size() == tiles[i].size());
          CHECK(std::equal(kernels[i].begin(), kernels[i].end(), tiles[i].begin(),
                           [](half a, half c) { return a.bits == c.bits; }));
          CHECK(std::none_of(tiles[i].begin(), tiles[i].end(), [](half h) { return h.bits == poison; }));
        }
      }
    }
  }

  TEST_CASE("gemv_add adds W x to the residual in place") {
    Stream& s = lgtest::stream();
    const auto gemv_add = lgtest::nn_kernels().get<void(const half*, const half*, half*, int, int, int)>("gemv_add");
    const int rows = 4096;
    const int cols = 11008;
    const auto w = random_halves(static_cast<std::size_t>(rows) * cols);
    const auto x = random_halves(cols);
    const auto residual = random_halves(rows);
    const auto dw = on_device(w);
    const auto dx = on_device(x);
    auto out = on_device(residual);
    gemv_add.launch(s, gemv_config(rows, 4, 2), dw.cview(), dx.cview(), out.view(), rows, cols, 1);
    const auto got = on_host(out);
    MatVec ref = matvec(w, widen(x), rows, cols);
    for (int r = 0; r < rows; ++r) {
      ref.value[r] += residual[r].to_float();
      ref.magnitude[r] += std::abs(residual[r].to_float());
    }
    check_close(got, ref.value);
    CHECK(count_outside_rounding(got, ref.value, accumulation_allowance(ref.magnitude)) == 0);
  }

  TEST_CASE("gemv_dual computes two products that share x") {
    Stream& s = lgtest::stream();
    const auto gemv_dual =
        lgtest::nn_kernels().get<void(const half*, const half*, const half*, half*, half*, int, int, int)>("gemv_dual");
    for (const auto& shape : {std::pair{1536, 512}, std::pair{11008, 4096}, std::pair{999, 1032}}) {
      const int rows = shape.first;
      const int cols = shape.second;
      CAPTURE(rows);
      CAPTURE(cols);
      const TwoWeights in(rows, cols);
      const auto& [w1, w3, x, dw1, dw3, dx] = in;
      auto out1 = poisoned(rows);
      auto out3 = poisoned(rows);
      gemv_dual.launch(s, gemv_config(rows, 4, 2), dw1.cview(), dw3.cview(), dx.cview(), out1.view(), out3.view(), rows,
                       cols, 1);
      const auto xd = widen(x);
      const MatVec ref1 = matvec(w1, xd, rows, cols);
      const MatVec ref3 = matvec(w3, xd, rows, cols);
      const auto got1 = on_host(out1);
      const auto got3 = on_host(out3);
      check_close(got1, ref1.value);
      check_close(got3, ref3.value);
      CHECK(count_outside_rounding(got1, ref1.value, accumulation_allowance(ref1.magnitude)) == 0);
      CHECK(count_outside_rounding(got3, ref3.value, accumulation_allowance(ref3.magnitude)) == 0);
    }
  }

  TEST_CASE("gemv_swiglu computes silu(W1 x) * (W3 x)") {
    Stream& s = lgtest::stream();
    const auto gemv_swiglu =
        lgtest::nn_kernels().get<void(const half*, const half*, const half*, half*, int, int, int)>("gemv_swiglu");
    for (const auto& shape : {std::pair{1536, 512}, std::pair{4096, 1024}, std::pair{1001, 1024}}) {
      const int rows = shape.first;
      const int cols = shape.second;
      CAPTURE(rows);
      CAPTURE(cols);
      const TwoWeights in(rows, cols);
      const auto& [w1, w3, x, dw1, dw3, dx] = in;
      auto out = poisoned(rows);
      gemv_swiglu.launch(s, gemv_config(rows, 1, 8), dw1.cview(), dw3.cview(), dx.cview(), out.view(), rows, cols, 1);
      const auto xd = widen(x);
      const MatVec a = matvec(w1, xd, rows, cols);
      const MatVec b = matvec(w3, xd, rows, cols);
      std::vector<double> ref(rows);
      for (int r = 0; r < rows; ++r) ref[r] = silu(a.value[r]) * b.value[r];
      check_close(on_host(out), ref);
    }
  }

  TEST_CASE("rms_norm_gemv equals a gemv of the normalised vector") {
    Stream& s = lgtest::stream();
    const auto rms_norm_gemv =
        lgtest::nn_kernels().get<void(const half*, const half*, const half*, half*, int, int, float, int)>(
            "rms_norm_gemv");
    const float eps = 1e-5F;
    for (const auto& shape : {std::pair{1536, 512}, std::pair{12288, 4096}, std::pair{1001, 1032}}) {
      const int rows = shape.first;
      const int cols = shape.second;
      CAPTURE(rows);
      CAPTURE(cols);
      const auto w = random_halves(static_cast<std::size_t>(rows) * cols);
      const auto x = random_halves(cols);
      const auto g = random_halves(cols);
      const auto dw = on_device(w);
      const auto dx = on_device(x);
      const auto dg = on_device(g);
      auto out = poisoned(rows);
      // 128 threads, as the one-vector kernel's bound allows (nn::kOneVectorNormGemvThreads): 4 warps a row.
      rms_norm_gemv.launch(s, gemv_config(rows, 4, 1), dw.cview(), dx.cview(), dg.cview(), out.view(), rows, cols, eps,
                           1);
      double ss = 0;
      for (const half v : x) ss += double(v.to_float()) * v.to_float();
      const double inv_rms = 1.0 / std::sqrt(ss / cols + eps);
      std::vector<double> h(cols);
      for (int c = 0; c < cols; ++c) h[c] = x[c].to_float() * inv_rms * g[c].to_float();
      const MatVec ref = matvec(w, h, rows, cols);
      const auto got = on_host(out);
      check_close(got, ref.value);
      CHECK(count_outside_rounding(got, ref.value, accumulation_allowance(ref.magnitude)) == 0);
    }
  }

  TEST_CASE("rms_norm_store_gemv gives rms_norm's h and gemv's product of it, bit for bit, in fp16 and bf16") {
    // The router's shapes (Qwen3-30B-A3B 128 x 2048, OLMoE 64 x 2048), rows that leave a block short, rows of
    // 4096, 8192 and 16384 columns (two, four and eight warps a row, as gemv takes them; the last 32 KiB of shared
    // memory), and a d rms_norm's threads do not divide. The first three take the row in registers before the wait.
    for (const auto& [rows, cols] : {std::pair{128, 2048}, std::pair{64, 2048}, std::pair{13, 1032}, std::pair{8, 4096},
                                     std::pair{24, 8192}, std::pair{8, 16384}, std::pair{100, 2056}}) {
      check_rms_norm_store_gemv<half>(rows, cols);
      check_rms_norm_store_gemv<bfloat16>(rows, cols);
    }
    // Fewer blocks than rows need (rms_norm_store_gemv_config caps the grid at kOneVectorGemvBlocks a
    // multiprocessor): the blocks take the rows past the grid in further passes.
    check_rms_norm_store_gemv<half>(100, 2048, 3);
    check_rms_norm_store_gemv<bfloat16>(100, 2048, 3);
  }

  TEST_CASE("rms_norm_gemv_config gives each vector of an fp32 batch the bits a batch of one gives it") {
    // The one-vector blocks hold 4 warps (kOneVectorNormGemvThreads), so a row of 16384 columns among at most 1024
    // rows, which gemv_config gives 8 warps, takes 4 in a batch too: each vector's sum is the same chain.
    Stream& s = lgtest::stream();
    const nn::Kernels k(lgtest::nn_kernels());
    const float eps = 1e-5F;
    for (const auto& [rows, cols] : {std::pair{1024, 16384}, std::pair{2048, 8192}, std::pair{520, 4608}}) {
      CAPTURE(rows);
      CAPTURE(cols);
      const LaunchConfig one = k.rms_norm_gemv_config(rows, cols, 1);
      CHECK(one.block.x * one.block.y * one.block.z <= nn::kOneVectorNormGemvThreads);
      const auto w = on_device(random_halves(static_cast<std::size_t>(rows) * cols));
      const auto g = on_device(random_halves(static_cast<std::size_t>(cols)));
      for (const int batch : {3, 8}) {
        CAPTURE(batch);
        const LaunchConfig many = k.rms_norm_gemv_config(rows, cols, batch);
        CHECK(many.block.y == one.block.y);
        const auto xs = random_halves(static_cast<std::size_t>(batch) * cols);
        const auto dx = on_device(xs);
        auto together = poisoned(static_cast<std::size_t>(batch) * rows);
        k.rms_norm_gemv.launch(s, many, w.cview(), dx.cview(), g.cview(), together.view(), rows, cols, eps, batch);
        const std::vector<half> all = on_host(together);
        int differ = 0;
        for (int b = 0; b < batch; ++b) {
          const auto one_x = on_device(std::vector<half>(xs.begin() + static_cast<std::ptrdiff_t>(b) * cols,
                                                         xs.begin() + static_cast<std::ptrdiff_t>(b + 1) * cols));
          auto alone = poisoned(static_cast<std::size_t>(rows));
          k.rms_norm_gemv.launch(s, one, w.cview(), one_x.cview(), g.cview(), alone.view(), rows, cols, eps, 1);
          const std::vector<half> got = on_host(alone);
          for (int r = 0; r < rows; ++r)
            differ += all[static_cast<std::size_t>(b) * rows + r].bits != got[r].bits ? 1 : 0;
        }
        CHECK(differ == 0);
      }
    }
  }

  TEST_CASE(
      "a multiprocessor holds kOneVectorGemvBlocks blocks of the one-vector projections (kOneVectorQkvBlocks of "
      "Q/K/V's, kOneVectorNormGemvBlocks of rms_norm_gemv's), as many as their grids get") {
    // fp32_gemv_config caps their grids at that many blocks a multiprocessor on the premise that no block of the
    // next projection fits beside them; a compiler that gave one of them 80 registers or fewer would break it (72 or
    // fewer, rms_norm_gemv's, which is bounded for 6).
    const auto check = [](const auto& kernel) {
      CAPTURE(kernel.name());
      CHECK(kernel.max_active_blocks_per_sm(256) == static_cast<int>(nn::kOneVectorGemvBlocks));
    };
    const auto check_all = [&](const auto& k) {
      check(k.gemv.variant(1));
      check(k.gemv_add.variant(1));
      check(k.rms_norm_gemv_swiglu.variant(1));
      check(k.rms_norm_gemv_geglu.variant(1));
      check(k.rms_norm_store_gemv);
      // qkv_rope_append's one-vector blocks are smaller, and more of them fit (kOneVectorQkvBlocks).
      const auto check_qkv = [](const auto& kernel) {
        CAPTURE(kernel.name());
        CHECK(kernel.max_active_blocks_per_sm(static_cast<int>(nn::kOneVectorQkvThreads)) ==
              static_cast<int>(nn::kOneVectorQkvBlocks));
      };
      check_qkv(k.qkv_rope_append.variant(1));
      check_qkv(k.qkv_rope_append_paged.variant(1));
      // rms_norm_gemv's too (kOneVectorNormGemvBlocks of kOneVectorNormGemvThreads).
      CAPTURE(k.rms_norm_gemv.variant(1).name());
      CHECK(k.rms_norm_gemv.variant(1).max_active_blocks_per_sm(static_cast<int>(nn::kOneVectorNormGemvThreads)) ==
            static_cast<int>(nn::kOneVectorNormGemvBlocks));
    };
    check_all(nn::BasicKernels<half>(lgtest::nn_kernels()));
    check_all(nn::BasicKernels<bfloat16>(lgtest::nn_kernels()));
  }

  TEST_CASE("rms_norm_gemv_swiglu equals silu(W1 h) * (W3 h) of the normalised vector h") {
    Stream& s = lgtest::stream();
    const auto fused =
        lgtest::nn_kernels().get<void(const half*, const half*, const half*, const half*, half*, int, int, float, int)>(
            "rms_norm_gemv_swiglu");
    const float eps = 1e-5F;
    for (const auto& shape : {std::pair{1536, 512}, std::pair{11008, 4096}}) {
      const int rows = shape.first;
      const int cols = shape.second;
      CAPTURE(rows);
      CAPTURE(cols);
      const TwoWeights in(rows, cols);
      const auto& [w1, w3, x, dw1, dw3, dx] = in;
      const auto g = random_halves(cols);
      const auto dg = on_device(g);
      auto out = poisoned(rows);
      fused.launch(s, gemv_config(rows, 4, 2), dw1.cview(), dw3.cview(), dx.cview(), dg.cview(), out.view(), rows, cols,
                   eps, 1);
      double ss = 0;
      for (const half v : x) ss += double(v.to_float()) * v.to_float();
      const double inv_rms = 1.0 / std::sqrt(ss / cols + eps);
      std::vector<double> h(cols);
      for (int c = 0; c < cols; ++c) h[c] = x[c].to_float() * inv_rms * g[c].to_float();
      const MatVec a = matvec(w1, h, rows, cols);
      const MatVec b = matvec(w3, h, rows, cols);
      std::vector<double> ref(rows);
      for (int r = 0; r < rows; ++r) ref[r] = silu(a.value[r]) * b.value[r];
      check_close(on_host(out), ref);
    }
  }

  TEST_CASE("silu_mul gates b with silu(a), also in place") {
    Stream& s = lgtest::stream();
    const auto silu_mul = lgtest::nn_kernels().get<void(const half*, const half*, half*, int)>("silu_mul");
    const int n = 11008 + 5;
    // Wider than [-1, 1), so that silu's tails are exercised.
    auto a = random_halves(n);
    for (half& v : a) v = half::from_float(8.0F * v.to_float());
    const auto b = random_halves(n);
    const auto da = on_device(a);
    const auto db = on_device(b);
    std::vector<double> ref(n);
    for (int i = 0; i < n; ++i) ref[i] = silu(a[i].to_float()) * b[i].to_float();

    auto out = poisoned(n);
    silu_mul.launch(s, grid_for(n, 256), da.cview(), db.cview(), out.view(), n);
    check_close(on_host(out), ref);

    auto inplace = on_device(a);
    silu_mul.launch(s, {{3, 1, 1}, {256, 1, 1}, 0}, inplace.cview(), db.cview(), inplace.view(), n);  // grid-stride
    check_close(on_host(inplace), ref);
  }

  TEST_CASE("add_inplace adds y to x element by element") {
    Stream& s = lgtest::stream();
    const auto add_inplace = lgtest::nn_kernels().get<void(half*, const half*, int)>("add_inplace");
    const int n = 4096 + 3;
    const auto x = random_halves(n);
    const auto y = random_halves(n);
    std::vector<double> ref(n);
    for (int i = 0; i < n; ++i) ref[i] = double(x[i].to_float()) + y[i].to_float();
    for (const LaunchConfig& config : {grid_for(n, 256), LaunchConfig{{5, 1, 1}, {128, 1, 1}, 0}}) {
      auto dx = on_device(x);
      const auto dy = on_device(y);
      add_inplace.launch(s, config, dx.view(), dy.cview(), n);
      check_close(on_host(dx), ref);
    }
  }

  TEST_CASE("rope rotates the pairs of every q and k head by position-dependent angles, k with fewer heads") {
    Stream& s = lgtest::stream();
    const nn::Kernels kernels(lgtest::nn_kernels());
    const float theta = 10000.0F;
    for (const auto& [n_heads, n_kv_heads, head_dim] :
         {std::tuple{32, 32, 64}, std::tuple{8, 8, 128}, std::tuple{32, 8, 64}, std::tuple{8, 1, 128},
          std::tuple{4, 2, 256}}) {
      for (const int position : {0, 1, 517, 1023}) {
        CAPTURE(n_heads);
        CAPTURE(n_kv_heads);
        CAPTURE(head_dim);
        CAPTURE(position);
        const auto q = random_halves(static_cast<std::size_t>(n_heads) * head_dim);
        const auto k = random_halves(static_cast<std::size_t>(n_kv_heads) * head_dim);
        auto dq = on_device(q);
        auto dk = on_device(k);
        const auto dpos = lgtest::to_device(s, std::vector<int>{position});
        const auto dfreq = lgtest::to_device(s, plain_rope_table(theta, head_dim));
        kernels.rope.launch(s, grid_for(static_cast<std::size_t>(n_heads) * head_dim, 256), dq.view(), dk.view(),
                            dpos.cview(), n_heads, n_kv_heads, head_dim, dfreq.cview(), 1);
        for (const auto& [input, device] : {std::pair{&q, &dq}, std::pair{&k, &dk}}) {
          std::vector<double> ref(input->size());
          for (std::size_t h = 0; h < input->size() / head_dim; ++h) {
            for (int i = 0; i < head_dim / 2; ++i) {
              const double angle = position * std::pow(double(theta), -2.0 * i / head_dim);
              const std::size_t at = h * head_dim + 2 * i;
              const double x0 = (*input)[at].to_float();
              const double x1 = (*input)[at + 1].to_float();
              ref[at] = x0 * std::cos(angle) - x1 * std::sin(angle);
              ref[at + 1] = x0 * std::sin(angle) + x1 * std::cos(angle);
            }
          }
          check_close(on_host(*device), ref);
        }
      }
    }
  }

  TEST_CASE("kv_append writes k and v at the position of the slot and nowhere else") {
    Stream& s = lgtest::stream();
    const auto kv_append = nn::Kernels(lgtest::nn_kernels()).kv_append;
    const int n_heads = 32;
    const int head_dim = 64;
    const int max_ctx = 1024;
    const int n_slots = 3;
    const int slot = 1;
    const std::size_t cache_size = static_cast<std::size_t>(n_slots) * n_heads * max_ctx * head_dim;
    const auto dslot = lgtest::to_device(s, std::vector<int>{slot});
    auto k_cache = poisoned(cache_size);
    auto v_cache = poisoned(cache_size);
    const auto k = random_halves(static_cast<std::size_t>(n_heads) * head_dim);
    const auto v = random_halves(static_cast<std::size_t>(n_heads) * head_dim);
    const auto dk = on_device(k);
    const auto dv = on_device(v);
    for (const int position : {0, 700, max_ctx - 1}) {
      const auto dpos = lgtest::to_device(s, std::vector<int>{position});
      kv_append.launch(s, grid_for(static_cast<std::size_t>(n_heads) * head_dim, 256), dk.cview(), dv.cview(),
                       k_cache.view(), v_cache.view(), dpos.cview(), dslot.cview(), n_heads, head_dim, max_ctx, n_slots,
                       1);
    }
    const auto kc = on_host(k_cache);
    const auto vc = on_host(v_cache);
    int wrong = 0;
    for (int c = 0; c < n_slots; ++c) {
      for (int h = 0; h < n_heads; ++h) {
        for (int p = 0; p < max_ctx; ++p) {
          const bool written = c == slot && (p == 0 || p == 700 || p == max_ctx - 1);
          for (int d = 0; d < head_dim; ++d) {
            const std::size_t at = ((static_cast<std::size_t>(c) * n_heads + h) * max_ctx + p) * head_dim + d;
            const std::uint16_t want_k = written ? k[h * head_dim + d].bits : poison;
            const std::uint16_t want_v = written ? v[h * head_dim + d].bits : poison;
            wrong += static_cast<int>(kc[at].bits != want_k) + static_cast<int>(vc[at].bits != want_v);
          }
        }
      }
    }
    CHECK(wrong == 0);
  }

  TEST_CASE(
      "attention (one block or split over positions) is the softmax-weighted sum of the cached values up to the "
      "position, also grouped-query, and over a sliding window of positions") {
    Stream& s = lgtest::stream();
    const auto attention = nn::Kernels(lgtest::nn_kernels()).attention;
    const auto attention_split = nn::Kernels(lgtest::nn_kernels()).attention_split;
    const int max_ctx = 1024;
    for (const auto& [n_heads, n_kv_heads, head_dim] :
         {std::tuple{32, 32, 64}, std::tuple{8, 8, 128}, std::tuple{4, 4, 96}, std::tuple{32, 8, 64},
          std::tuple{8, 1, 128}, std::tuple{4, 2, 256}, std::tuple{2, 2, 200}}) {
      const int group = n_heads / n_kv_heads;
      const std::size_t cache_size = static_cast<std::size_t>(n_kv_heads) * max_ctx * head_dim;
      // Keys scaled up so that the softmax is far from uniform; positions past p hold huge values, which would
      // dominate the result if the kernel read them.
      auto k_host = random_halves(cache_size);
      auto v_host = random_halves(cache_size);
      const auto q = random_halves(static_cast<std::size_t>(n_heads) * head_dim);
      for (half& h : k_host) h = half::from_float(4.0F * h.to_float());
      const float scale = 1.0F / std::sqrt(static_cast<float>(head_dim));
      // (position, window): the window (0 none) attends positions position - window + 1 .. position.
      for (const auto& [position, window] : {std::pair{0, 0}, std::pair{1, 0}, std::pair{37, 0}, std::pair{500, 0},
                                             std::pair{max_ctx - 1, 0}, std::pair{500, 50}}) {
        CAPTURE(n_heads);
        CAPTURE(n_kv_heads);
        CAPTURE(head_dim);
        CAPTURE(position);
        CAPTURE(window);
        const int first = window > 0 ? std::max(0, position - window + 1) : 0;
        auto k_poisoned = k_host;
        auto v_poisoned = v_host;
        for (int h = 0; h < n_kv_heads; ++h) {
          for (int p = 0; p < max_ctx; ++p) {
            if (p >= first && p <= position) continue;  // only what the row attends is left unpoisoned
            for (int d = 0; d < head_dim; ++d) {
              const std::size_t at = (static_cast<std::size_t>(h) * max_ctx + p) * head_dim + d;
              k_poisoned[at] = half::from_float(1000.0F);
              v_poisoned[at] = half::from_float(30000.0F);
            }
          }
        }
        const auto dk = on_device(k_poisoned);
        const auto dv = on_device(v_poisoned);
        const auto dq = on_device(q);
        const auto dpos = lgtest::to_device(s, std::vector<int>{position});
        const auto dslot = lgtest::to_device(s, std::vector<int>{0});

        std::vector<double> ref(static_cast<std::size_t>(n_heads) * head_dim, 0.0);
        for (int h = 0; h < n_heads; ++h) {
          const auto g = static_cast<std::size_t>(h / group);  // the kv head query head h reads
          std::vector<double> score(position + 1 - first);
          for (int j = first; j <= position; ++j) {
            double dot = 0;
            for (int d = 0; d < head_dim; ++d) {
              dot += double(q[h * head_dim + d].to_float()) * k_host[(g * max_ctx + j) * head_dim + d].to_float();
            }
            score[j - first] = scale * dot;
          }
          const double m = *std::max_element(score.begin(), score.end());
          double sum = 0;
          for (double& sc : score) sum += (sc = std::exp(sc - m));
          for (int j = first; j <= position; ++j) {
            for (int d = 0; d < head_dim; ++d) {
              ref[h * head_dim + d] += score[j - first] / sum * v_host[(g * max_ctx + j) * head_dim + d].to_float();
            }
          }
        }

        for (const unsigned block : {1024U, 512U, 384U, 256U, 96U}) {
          CAPTURE(block);
          auto out = poisoned(static_cast<std::size_t>(n_heads) * head_dim);
          attention.launch(s, {{static_cast<unsigned>(n_heads), 1, 1}, {block, 1, 1}, max_ctx * 4U}, dq.cview(),
                           dk.cview(), dv.cview(), out.view(), dpos.cview(), dslot.cview(), n_heads, n_kv_heads,
                           head_dim, max_ctx, 1, scale, window);
          const auto got = on_host(out);
          check_close(got, ref);
          // On multiprocessors split for the most L1 (the one-row dense step's launch): the same bits.
          auto out_l1 = poisoned(static_cast<std::size_t>(n_heads) * head_dim);
          attention.launch(
              s, with_shared_carveout({{static_cast<unsigned>(n_heads), 1, 1}, {block, 1, 1}, max_ctx * 4U}, 0),
              dq.cview(), dk.cview(), dv.cview(), out_l1.view(), dpos.cview(), dslot.cview(), n_heads, n_kv_heads,
              head_dim, max_ctx, 1, scale, window);
          const auto got_l1 = on_host(out_l1);
          CHECK(std::equal(got_l1.begin(), got_l1.end(), got.begin(), got.end(),
                           [](half a, half b) { return a.bits == b.bits; }));
        }
        // Split over positions: any number of blocks per head gives the same result, and the counts go back to 0.
        for (const unsigned splits : {1U, 3U, 16U, 64U}) {
          CAPTURE(splits);
          const unsigned len = std::max((max_ctx + splits - 1) / splits, splits * (head_dim + 2U));
          auto out = poisoned(static_cast<std::size_t>(n_heads) * head_dim);
          DeviceBuffer<float> partials(
              lgtest::device(), static_cast<std::size_t>(n_heads) * splits * static_cast<std::size_t>(head_dim + 2));
          auto counters = lgtest::to_device(s, std::vector<unsigned>(static_cast<std::size_t>(n_heads), 0U));
          for (int launch = 0; launch < 2; ++launch) {
            attention_split.launch(s, {{static_cast<unsigned>(n_heads), 1, splits}, {128, 1, 1}, len * 4U}, dq.cview(),
                                   dk.cview(), dv.cview(), out.view(), partials.view(), counters.view(), dpos.cview(),
                                   dslot.cview(), n_heads, n_kv_heads, head_dim, max_ctx, 1, scale, window);
            check_close(on_host(out), ref);
          }
          const auto left = lgtest::to_host(s, counters.cview());
          CHECK(std::count(left.begin(), left.end(), 0U) == n_heads);
        }
      }
    }
  }

  TEST_CASE(
      "qk_norm_rope_append and prefill_qk_norm_rope norm each head, or the whole q and the whole k of a row (OLMoE's), "
      "then rotate, and write q, k and v where they go") {
    Stream& s = lgtest::stream();
    const nn::Kernels kernels(lgtest::nn_kernels());
    const float theta = 10000.0F;
    const float eps = 1e-6F;
    const int batch = 3;
    const int max_ctx = 64;
    const int n_slots = 4;
    const std::vector<int> positions{0, 5, 63};
    const std::vector<int> slots{2, 0, 3};
    for (const auto& [n_heads, n_kv_heads, head_dim] :
         {std::tuple{4, 2, 64}, std::tuple{8, 8, 128}, std::tuple{2, 1, 256}}) {
      for (const int whole : {0, 1}) {
        for (const bool with_bias : {false, true}) {
          CAPTURE(n_heads);
          CAPTURE(n_kv_heads);
          CAPTURE(head_dim);
          CAPTURE(whole);
          CAPTURE(with_bias);
          const int q_dim = n_heads * head_dim;
          const int kv_dim = n_kv_heads * head_dim;
          const auto stride = static_cast<std::size_t>(q_dim + 2 * kv_dim);
          // Each row's q and k scaled apart (1, 4, 1/4 ...), so that a norm over the wrong span shows.
          std::vector<half> qkv = random_halves(batch * stride);
          for (std::size_t i = 0; i < qkv.size(); ++i) {
            const double scale =
                std::ldexp(1.0, 2 * static_cast<int>((i % stride) / static_cast<std::size_t>(head_dim) % 3) - 2);
            qkv[i] = half::from_float(static_cast<float>(qkv[i].to_float() * scale));
          }
          const std::vector<half> bias = with_bias ? random_halves(stride) : std::vector<half>{};
          // Gains in [0.5, 1.5): a head's [head_dim], or the whole q's [q_dim] and k's [kv_dim].
          const auto gains = [](int n) {
            std::vector<half> g = random_halves(static_cast<std::size_t>(n));
            for (half& h : g) h = half::from_float(1.0F + h.to_float() / 2);
            return g;
          };
          const std::vector<half> q_gain = gains(whole != 0 ? q_dim : head_dim);
          const std::vector<half> k_gain = gains(whole != 0 ? kv_dim : head_dim);
          // The float64 result of row r's part (0 q, 1 k, 2 v) at `position`, from the fp16-rounded biased inputs.
          const auto reference = [&](int r, int part, int position) {
            const int first = part == 0 ? 0 : (part == 1 ? q_dim : q_dim + kv_dim);
            const int width = part == 0 ? q_dim : kv_dim;
            std::vector<double> y(static_cast<std::size_t>(width));
            for (int j = 0; j < width; ++j) {
              const auto at = static_cast<std::size_t>(first + j);
              const float x = qkv[static_cast<std::size_t>(r) * stride + at].to_float();
              y[static_cast<std::size_t>(j)] =
                  with_bias ? half::from_float(x + bias[at].to_float()).to_float() : static_cast<double>(x);
            }
            if (part == 2) return y;
            const std::vector<half>& gain = part == 0 ? q_gain : k_gain;
            const int span = whole != 0 ? width : head_dim;  // the elements one mean is over
            for (int from = 0; from < width; from += span) {
              double squares = 0;
              for (int j = from; j < from + span; ++j) squares += y[j] * y[j];
              const double inv = 1.0 / std::sqrt(squares / span + eps);
              for (int j = from; j < from + span; ++j) {
                y[j] *= inv * gain[static_cast<std::size_t>(whole != 0 ? j : j % head_dim)].to_float();
              }
            }
            for (int h = 0; h < width / head_dim; ++h) {
              for (int i = 0; i < head_dim / 2; ++i) {
                const double angle = position * std::pow(double(theta), -2.0 * i / head_dim);
                const std::size_t at = static_cast<std::size_t>(h * head_dim + 2 * i);
                const double a = y[at];
                const double b = y[at + 1];
                y[at] = a * std::cos(angle) - b * std::sin(angle);
                y[at + 1] = a * std::sin(angle) + b * std::cos(angle);
              }
            }
            return y;
          };
          const auto dqkv = on_device(qkv);
          const auto dbias = on_device(bias);
          const auto dq_gain = on_device(q_gain);
          const auto dk_gain = on_device(k_gain);
          const auto dfreq = lgtest::to_device(s, plain_rope_table(theta, head_dim));
          const LaunchConfig config = kernels.qk_norm_config(n_heads, n_kv_heads, head_dim, batch);

          // The decode step's: q out, k and v into the caches at (slot, position).
          auto q = poisoned(static_cast<std::size_t>(batch) * q_dim);
          const std::size_t cache_size = static_cast<std::size_t>(n_slots) * n_kv_heads * max_ctx * head_dim;
          auto k_cache = poisoned(cache_size);
          auto v_cache = poisoned(cache_size);
          const auto dpos = lgtest::to_device(s, positions);
          const auto dslots = lgtest::to_device(s, slots);
          kernels.qk_norm_rope_append.launch(s, config, dqkv.cview(), dbias.cview(), dq_gain.cview(), dk_gain.cview(),
                                             q.view(), k_cache.view(), v_cache.view(), dpos.cview(), dslots.cview(),
                                             n_heads, n_kv_heads, head_dim, max_ctx, n_slots, dfreq.cview(), eps, whole,
                                             batch);
          const std::vector<half> got_q = on_host(q);
          const std::vector<half> got_k = on_host(k_cache);
          const std::vector<half> got_v = on_host(v_cache);
          // Row r's k or v as the cache holds it: each head at (slot, head, position).
          const auto cached = [&](const std::vector<half>& cache, int r) {
            std::vector<half> out;
            for (int h = 0; h < n_kv_heads; ++h) {
              const std::size_t at =
                  ((static_cast<std::size_t>(slots[r]) * n_kv_heads + h) * max_ctx + positions[r]) * head_dim;
              out.insert(out.end(), cache.begin() + static_cast<std::ptrdiff_t>(at),
                         cache.begin() + static_cast<std::ptrdiff_t>(at + head_dim));
            }
            return out;
          };
          for (int r = 0; r < batch; ++r) {
            CAPTURE(r);
            check_close(std::vector<half>(got_q.begin() + static_cast<std::ptrdiff_t>(r) * q_dim,
                                          got_q.begin() + static_cast<std::ptrdiff_t>(r + 1) * q_dim),
                        reference(r, 0, positions[r]));
            check_close(cached(got_k, r), reference(r, 1, positions[r]));
            check_close(cached(got_v, r), reference(r, 2, positions[r]));
          }
          const auto written = [&](const std::vector<half>& cache) {
            return static_cast<std::size_t>(
                std::count_if(cache.begin(), cache.end(), [](half h) { return h.bits != poison; }));
          };
          CHECK(written(got_k) == static_cast<std::size_t>(batch) * kv_dim);  // nowhere else
          CHECK(written(got_v) == static_cast<std::size_t>(batch) * kv_dim);

          // Prefill's: a chunk of 2 rows from position 5 of a launch of `batch` rows, into q, k and v; the rest
          // untouched.
          const std::vector<int> chunk{5, 2, 0};
          const auto dchunk = lgtest::to_device(s, chunk);
          auto pq = poisoned(static_cast<std::size_t>(batch) * q_dim);
          auto pk = poisoned(static_cast<std::size_t>(batch) * kv_dim);
          auto pv = poisoned(static_cast<std::size_t>(batch) * kv_dim);
          kernels.prefill_qk_norm_rope.launch(s, config, dqkv.cview(), dbias.cview(), dq_gain.cview(), dk_gain.cview(),
                                              pq.view(), pk.view(), pv.view(), dchunk.cview(), DeviceSpan<const int>{},
                                              n_heads, n_kv_heads, head_dim, dfreq.cview(), eps, whole, batch);
          const std::vector<half> prefill_q = on_host(pq);
          const std::vector<half> prefill_k = on_host(pk);
          const std::vector<half> prefill_v = on_host(pv);
          const auto part_of = [](const std::vector<half>& all, int r, int width) {
            return std::vector<half>(all.begin() + static_cast<std::ptrdiff_t>(r) * width,
                                     all.begin() + static_cast<std::ptrdiff_t>(r + 1) * width);
          };
          for (int r = 0; r < 2; ++r) {
            CAPTURE(r);  // at position 5 + r
            check_close(part_of(prefill_q, r, q_dim), reference(r, 0, 5 + r));
            check_close(part_of(prefill_k, r, kv_dim), reference(r, 1, 5 + r));
            check_close(part_of(prefill_v, r, kv_dim), reference(r, 2, 5 + r));
          }
          const std::vector<half> padding = part_of(prefill_q, 2, q_dim);
          CHECK(std::all_of(padding.begin(), padding.end(), [](half h) { return h.bits == poison; }));

          // A packed chunk's: the same 2 rows at their own positions (9 and 3), given per row.
          const auto dpositions = lgtest::to_device(s, std::vector<int>{9, 3});
          kernels.prefill_qk_norm_rope.launch(s, config, dqkv.cview(), dbias.cview(), dq_gain.cview(), dk_gain.cview(),
                                              pq.view(), pk.view(), pv.view(), dchunk.cview(), dpositions.cview(),
                                              n_heads, n_kv_heads, head_dim, dfreq.cview(), eps, whole, batch);
          const std::vector<half> packed_q = on_host(pq);
          const std::vector<half> packed_k = on_host(pk);
          for (int r = 0; r < 2; ++r) {
            CAPTURE(r);
            check_close(part_of(packed_q, r, q_dim), reference(r, 0, r == 0 ? 9 : 3));
            check_close(part_of(packed_k, r, kv_dim), reference(r, 1, r == 0 ? 9 : 3));
          }
        }
      }
    }
  }

  TEST_CASE("argmax_cluster gives argmax's token with each row read by a cluster of 2 to 8 blocks, fp16 and bf16") {
    if (lgtest::device().compute_capability().major < 9) {
      MESSAGE("skipped: thread block clusters need sm_90 or newer");
      return;
    }
    check_argmax_cluster<half>();
    check_argmax_cluster<bfloat16>();
  }

  TEST_CASE("argmax finds the largest logit and the lowest index among ties") {
    Stream& s = lgtest::stream();
    const auto argmax = lgtest::nn_kernels().get<void(const half*, int*, int)>("argmax");
    const int n = 32000;
    auto run = [&](const std::vector<half>& logits, unsigned block) {
      const auto d = on_device(logits);
      auto out = lgtest::to_device(s, std::vector<int>{-7});
      argmax.launch(s, {{1, 1, 1}, {block, 1, 1}, 0}, d.cview(), out.view(), static_cast<int>(logits.size()));
      return lgtest::to_host(s, out.cview())[0];
    };
    auto reference = [](const std::vector<half>& logits) {
      int best = 0;
      for (int i = 1; i < static_cast<int>(logits.size()); ++i) {
        if (logits[i].to_float() > logits[best].to_float()) best = i;
      }
      return best;
    };
    for (const unsigned block : {1024U, 256U, 32U}) {
      CAPTURE(block);
      auto logits = random_halves(n);  // random fp16 values in [-1, 1) tie often
      CHECK(run(logits, block) == reference(logits));

      for (const auto& ties : {std::pair{5, 31999}, std::pair{17000, 17001}, std::pair{0, 1024}}) {
        const int first = ties.first;
        const int second = ties.second;
        CAPTURE(first);
        CAPTURE(second);
        logits[first] = half::from_float(7.5F);
        logits[second] = half::from_float(7.5F);
        CHECK(run(logits, block) == first);
        logits[first] = half::from_float(0.5F);
        logits[second] = half::from_float(0.25F);
      }
      logits.back() = half::from_float(9.0F);
      CHECK(run(logits, block) == n - 1);
      logits[3] = half{0x7e00};  // a NaN does not win
      CHECK(run(logits, block) == n - 1);
      CHECK(run(std::vector<half>(100, half{0x7e00}), block) == -1);

      // n not a multiple of 8: the last logits take the single-element path.
      auto tail = random_halves(1003);
      tail[1001] = half::from_float(3.0F);
      tail[1002] = half::from_float(3.0F);
      CHECK(run(tail, block) == 1001);
      tail[6] = half::from_float(3.0F);
      CHECK(run(tail, block) == 6);

      // Logits that start off a 16-byte boundary take the single-element path throughout.
      const auto shifted = on_device(logits);
      const auto view = shifted.cview().subspan(1, n - 1);
      auto out = lgtest::to_device(s, std::vector<int>{-7});
      argmax.launch(s, {{1, 1, 1}, {block, 1, 1}, 0}, view, out.view(), n - 1);
      CHECK(lgtest::to_host(s, out.cview())[0] == n - 2);
    }
  }
}

namespace {
template <class Signature, class T>
void check_model_kernel(const KernelDeclarations& d, std::string_view name,
                        Kernel<Signature> nn::BasicKernels<T>::* /*member*/) {
  const std::string named = name == "fill_uniform" ? (std::same_as<T, half> ? "fill_uniform_f16" : "fill_uniform_bf16")
                            : name == "generate_advance" ? std::string(name)  // one kernel for every element type
                                                         : std::string(name) + std::string(nn::kernel_suffix<T>);
  CAPTURE(named);
  CHECK_NOTHROW(d.template check<Signature>(named));
}

/// A BatchedKernel: each of its four fp32 variants, and the tensor-core one of the gemv.cu kernels.
template <class Signature, class T>
void check_model_kernel(const KernelDeclarations& d, std::string_view name,
                        nn::BatchedKernel<Signature> nn::BasicKernels<T>::* /*member*/) {
  const bool tensor_core =  // not mlp_stack
      name.find("gemv") != std::string_view::npos || name.starts_with("qkv_rope_append") || name.starts_with("moe_");
  for (const char* suffix : {"", "_b2", "_b4", "_b8", "_mma"}) {
    if (std::string_view(suffix) == "_mma" && !tensor_core) continue;
    const std::string variant = std::string(name) + std::string(nn::kernel_suffix<T>) + suffix;
    CAPTURE(variant);
    CHECK_NOTHROW(d.template check<Signature>(variant));
  }
}
}  // namespace

TEST_CASE_TEMPLATE("every handle of nn::BasicKernels matches its kernel's declaration in kernels/nn/", T, half,
                   bfloat16) {
  using K = nn::BasicKernels<T>;
  const KernelDeclarations d(nn::kernel_set().sources);
  check_model_kernel(d, "embedding", &K::embedding);
  check_model_kernel(d, "gemv", &K::gemv);
  check_model_kernel(d, "gemv_add", &K::gemv_add);
  check_model_kernel(d, "rms_norm_gemv", &K::rms_norm_gemv);
  check_model_kernel(d, "rms_norm", &K::rms_norm);
  check_model_kernel(d, "rms_norm_gemv_swiglu", &K::rms_norm_gemv_swiglu);
  check_model_kernel(d, "moe_route", &K::moe_route);
  check_model_kernel(d, "moe_gate_up", &K::moe_gate_up);
  check_model_kernel(d, "moe_down", &K::moe_down);
  check_model_kernel(d, "mlp_stack", &K::mlp_stack);
  check_model_kernel(d, "qkv_rope_append", &K::qkv_rope_append);
  check_model_kernel(d, "qkv_rope_append_paged", &K::qkv_rope_append_paged);
  check_model_kernel(d, "rope", &K::rope);
  check_model_kernel(d, "kv_append", &K::kv_append);
  check_model_kernel(d, "attention", &K::attention);
  check_model_kernel(d, "attention_split", &K::attention_split);
  check_model_kernel(d, "flash_attention_d64", &K::flash_attention_d64);
  check_model_kernel(d, "flash_attention_d128", &K::flash_attention_d128);
  check_model_kernel(d, "flash_attention_rows64_d64", &K::flash_attention_rows64_d64);
  check_model_kernel(d, "flash_attention_paged_d64", &K::flash_attention_paged_d64);
  check_model_kernel(d, "flash_attention_paged_d128", &K::flash_attention_paged_d128);
  check_model_kernel(d, "flash_attention_paged_rows64_d64", &K::flash_attention_paged_rows64_d64);
  check_model_kernel(d, "prefill_rms_norm", &K::prefill_rms_norm);
  check_model_kernel(d, "prefill_qkv_rope", &K::prefill_qkv_rope);
  check_model_kernel(d, "prefill_silu_mul", &K::prefill_silu_mul);
  check_model_kernel(d, "prefill_last_row", &K::prefill_last_row);
  check_model_kernel(d, "argmax", &K::argmax);
  check_model_kernel(d, "argmax_cluster", &K::argmax_cluster);
  check_model_kernel(d, "sample", &K::sample);
  check_model_kernel(d, "fill_uniform", &K::fill_uniform);
  CHECK_NOTHROW(d.check<void(Condition, const int*, int*, int*, int*, int*)>("generate_advance"));
}

TEST_CASE("the variant tables of kernels/nn/ write out every variant, declared at its table line") {
  // src/kernel_variants.py writes the tables out when the set is embedded; a #line before each kernel names its
  // table line. A table line NAME[T][B] gives NAME, NAME_b2, ..., NAME_bf16_mma; NAME[T: lg::half_t] no bf16 twins.
  struct Table {
    std::string file;
    std::string entry;  // the table line's start
    std::vector<std::string> elements;
    std::vector<std::string> batches;
  };
  const std::vector<std::string> both{"", "_bf16"};
  const std::vector<std::string> fp16{""};
  const std::vector<std::string> tensor_cores{"", "_b2", "_b4", "_b8", "_mma"};
  const std::vector<std::string> fp32_only{"", "_b2", "_b4", "_b8"};
  // A kernel whose one-vector variant has launch bounds of its own takes two lines, NAME[T][B: 1] and the rest.
  const std::vector<std::string> one{""};
  const std::vector<std::string> more{"_b2", "_b4", "_b8", "_mma"};
  const std::vector<Table> tables{
      {"nn/gemv.cu", "gemv[T][B]", both, tensor_cores},
      {"nn/gemv.cu", "gemv_add[T][B]", both, tensor_cores},
      {"nn/gemv.cu", "gemv_dual[T: lg::half_t][B]", fp16, tensor_cores},
      {"nn/gemv.cu", "gemv_swiglu[T: lg::half_t][B]", fp16, tensor_cores},
      {"nn/gemv.cu", "rms_norm_gemv[T][B: 1]", both, one},
      {"nn/gemv.cu", "rms_norm_gemv[T][B: 2, 4, 8, kTensorCores]", both, more},
      {"nn/gemv.cu", "rms_norm_gemv_swiglu[T][B]", both, tensor_cores},
      {"nn/gemv.cu", "rms_norm_gemv_geglu[T][B]", both, tensor_cores},
      {"nn/qkv.cu", "qkv_rope_append[T][B: 1]", both, one},
      {"nn/qkv.cu", "qkv_rope_append[T][B: 2, 4, 8, kTensorCores]", both, more},
      {"nn/qkv.cu", "qkv_rope_append_paged[T][B: 1]", both, one},
      {"nn/qkv.cu", "qkv_rope_append_paged[T][B: 2, 4, 8, kTensorCores]", both, more},
      {"nn/mlp_stack.cu", "mlp_stack[T][B]", both, fp32_only},
      {"nn/moe.cu", "moe_gate_up[T][B]", both, tensor_cores},
      {"nn/moe.cu", "moe_down[T][B]", both, tensor_cores},
      {"nn/attention.cu", "kv_append[T]", both, {""}},
      {"nn/attention.cu", "attention[T]", both, {""}},
      {"nn/attention.cu", "attention_split[T]", both, {""}},
      // Axes D then T: flash_attention_d64, flash_attention_d64_bf16, ... (the element's suffix last).
      {"nn/flash_attention.cu", "flash_attention[D][T]", {"_d64", "_d128"}, both},
      {"nn/flash_attention.cu", "flash_attention_rows64[D: 64][T]", {"_d64"}, both},
      {"nn/flash_attention.cu", "flash_attention_paged[D][T]", {"_d64", "_d128"}, both},
      {"nn/flash_attention.cu", "flash_attention_paged_rows64[D: 64][T]", {"_d64"}, both},
      {"nn/prefill.cu", "prefill_rms_norm[T]", both, {""}},
      {"nn/prefill.cu", "prefill_qkv_rope[T]", both, {""}},
      {"nn/prefill.cu", "prefill_silu_mul[T]", both, {""}},
      {"nn/prefill.cu", "prefill_gelu_mul[T]", both, {""}},
      {"nn/prefill.cu", "prefill_rms_norm_add[T]", both, {""}},
      {"nn/prefill.cu", "prefill_last_row[T]", both, {""}},
  };
  const auto& sources = nn::kernel_set().sources;
  const KernelDeclarations d(sources);
  std::size_t written = 0;
  for (const Table& t : tables) {
    CAPTURE(t.entry);
    const auto source =
        std::find_if(sources.begin(), sources.end(), [&](const KernelSource& s) { return s.name == t.file; });
    REQUIRE(source != sources.end());
    const std::size_t at = source->text.find("\n" + t.entry + " ");
    REQUIRE(at != std::string::npos);
    const int line = static_cast<int>(std::count(source->text.begin(),
                                                 source->text.begin() + static_cast<std::ptrdiff_t>(at), '\n')) +
                     2;
    const std::string stem = t.entry.substr(0, t.entry.find('['));
    for (const std::string& element : t.elements) {
      for (const std::string& batch : t.batches) {
        const std::string name = stem + element + batch;
        CAPTURE(name);
        const KernelDeclaration* declared = d.find(name);
        REQUIRE(declared != nullptr);
        CHECK(declared->file == t.file);
        CHECK(declared->line == line);
        CHECK(declared->problem.empty());
        ++written;
      }
    }
  }
  CHECK(written == 138);  // the hand-written entry points these tables replaced: gemv.cu 50, qkv.cu 10, mlp_stack.cu
                          // 8, attention.cu 6; flash_attention.cu's 6, prefill.cu's 8; GeGLU's gemv.cu 10, prefill.cu
                          // 2; the post-norm's prefill.cu 2; the paged qkv.cu 10; moe.cu's expert kernels 20; the
                          // paged flash_attention.cu 6
  // The fp16-only kernels the tests look up as BatchedKernels.
  for (const char* suffix : {"", "_b2", "_b4", "_b8", "_mma"}) {
    CAPTURE(suffix);
    CHECK_NOTHROW(d.check<void(const half*, const half*, const half*, half*, half*, int, int, int)>(
        std::string("gemv_dual") + suffix));
    CHECK_NOTHROW(d.check<void(const half*, const half*, const half*, half*, int, int, int)>(
        std::string("gemv_swiglu") + suffix));
  }
  // Every kernel (and tile function) the embedded texts declare is one the reader finds, under a name of its own.
  const auto occurrences = [&](const std::string& what) {
    std::size_t n = 0;
    for (const KernelSource& s : sources) {
      for (auto at = s.text.find(what); at != std::string::npos; at = s.text.find(what, at + 1)) ++n;
    }
    return n;
  };
  const auto tiles = static_cast<std::size_t>(
      std::count_if(d.all().begin(), d.all().end(), [](const auto& entry) { return entry.second.tile; }));
  CHECK(d.size() - tiles == occurrences("extern \"C\" __global__"));
  CHECK(tiles == occurrences("extern \"C\" __device__ void"));
  CHECK(tiles >= 8);  // gemv.cu's tensor-core tiles and their prefetch companions
}

TEST_CASE("tensor cores are refused on a GPU before compute capability 8.0, naming it") {
  CHECK_THROWS_WITH_AS(nn::check_tensor_cores({7, 5}), doctest::Contains("this one is 7.5"), UsageError);
  CHECK_NOTHROW(nn::check_tensor_cores({8, 0}));
  CHECK_NOTHROW(nn::check_tensor_cores({9, 0}));
}

TEST_CASE("a tensor-core gemv block takes 4 warps where its waves times its block's cost are no more than 8 warps'") {
  // The choices of the measurements (H200, 132 multiprocessors, 8-row steps, docs/decode_performance.md): 4 warps for
  // q/k/v of the TinyLlama and Llama-3.2-1B shapes (320 and 384 tiles of 2048 columns), the latter's gate/up (1024
  // tiles of two matrices) and both LM heads (4000 and 16032 tiles); 8 for TinyLlama's gate/up (704 tiles: 3 waves of
  // 2 passes against 2 of 4), the down (256 tiles of 5632 and 8192 columns) and output (256 of 2048) projections.
  for (const unsigned tiles : {320U, 384U, 4000U, 16032U}) {
    CAPTURE(tiles);
    CHECK(nn::tensor_core_gemv_warps(tiles, 2048, 1, 132) == 4);
  }
  CHECK(nn::tensor_core_gemv_warps(1024, 2048, 2, 132) == 4);
  CHECK(nn::tensor_core_gemv_warps(704, 2048, 2, 132) == 8);
  CHECK(nn::tensor_core_gemv_warps(256, 5632, 1, 132) == 8);
  CHECK(nn::tensor_core_gemv_warps(256, 8192, 1, 132) == 8);
  CHECK(nn::tensor_core_gemv_warps(256, 2048, 1, 132) == 8);
  CHECK(nn::tensor_core_gemv_warps(320, 2048, 1, 0) == 8);  // no GPU known: the former shape
}

TEST_CASE("a tensor-core gemv grid of a wave and a half of tiles or more is one wave of blocks taking tiles in turn") {
  // 16 warps a multiprocessor: 264 blocks of 8 warps or 528 of 4 on 132 multiprocessors.
  CHECK(nn::tensor_core_gemv_blocks(704, 8, 132) == 264);    // TinyLlama's gate/up: 2 or 3 tiles a block
  CHECK(nn::tensor_core_gemv_blocks(4000, 4, 132) == 528);   // its LM head
  CHECK(nn::tensor_core_gemv_blocks(16032, 4, 132) == 528);  // Llama-3.2-1B's
  CHECK(nn::tensor_core_gemv_blocks(1024, 4, 132) == 528);   // its gate/up: 1.9 waves
  CHECK(nn::tensor_core_gemv_blocks(792, 4, 132) == 528);    // a wave and a half
  // Fewer tiles than a wave and a half: a block a tile.
  CHECK(nn::tensor_core_gemv_blocks(791, 4, 132) == 791);
  CHECK(nn::tensor_core_gemv_blocks(640, 4, 132) == 640);  // Qwen3-30B-A3B's q/k/v
  CHECK(nn::tensor_core_gemv_blocks(256, 8, 132) == 256);  // the down projection
  CHECK(nn::tensor_core_gemv_blocks(4000, 4, 0) == 4000);  // no GPU known
  CHECK(nn::tensor_core_gemv_blocks(40, 4, 1) == 4);       // a small GPU
}

TEST_CASE("attention's block size depends on the heads and the GPU, never on a batch's own row count") {
  // One row and the fp32 batch alike (the fp32 batch's rows keep their one-row bits): 512 threads for heads of 64 or
  // fewer (TinyLlama, Llama-3.2-1B), 1024 for wider ones (Qwen3-30B-A3B's 128, Gemma 3's 256).
  for (const int rows : {1, 2, 8}) {
    CAPTURE(rows);
    CHECK(nn::attention_block_threads(32, rows, 64, false, 132) == 512);
    CHECK(nn::attention_block_threads(8, rows, 16, false, 132) == 512);
    CHECK(nn::attention_block_threads(32, rows, 128, false, 132) == 1024);
    CHECK(nn::attention_block_threads(8, rows, 256, false, 132) == 1024);
  }
  CHECK(nn::attention_block_threads(32, 1, 64, true, 132) == 512);  // one row on tensor cores: as without
  // Batches on tensor cores: 256 where a full step's blocks outnumber the multiprocessors, in every batch of 2 or more.
  for (const int rows : {2, 5, 8}) {
    CAPTURE(rows);
    CHECK(nn::attention_block_threads(32, rows, 64, true, 132) == 256);
    CHECK(nn::attention_block_threads(32, rows, 128, true, 132) == 256);
    CHECK(nn::attention_block_threads(16, rows, 128, true, 132) == 1024);  // 128 blocks: one wave of 1024
    CHECK(nn::attention_block_threads(4, rows, 64, true, 132) == 1024);
  }
}

/// Every `parts`-th nn kernel source from `part` on (all: part 0 of 1) compiled by NVRTC for sm_`arch` with the core
/// and the nn headers, each in its own thread (NVRTC compiles separate programs concurrently), checked here, as
/// doctest's assertions are for one thread.
void check_kernel_set_compiles(int arch, std::size_t part = 0, std::size_t parts = 1) {
  const auto& sources = nn::kernel_set().sources;
  REQUIRE(sources.size() >= 8);
  std::vector<KernelSource> headers(core_kernel_headers().begin(), core_kernel_headers().end());
  headers.insert(headers.end(), nn::kernel_set().headers.begin(), nn::kernel_set().headers.end());
  // argmax.cuh, gemv_core.cuh, hash.cuh, moe_core.cuh, qgemv_core.cuh, rms_norm.cuh
  CHECK(nn::kernel_set().headers.size() == 6);
  std::vector<const KernelSource*> chosen;
  for (std::size_t i = part; i < sources.size(); i += parts) chosen.push_back(&sources[i]);
  std::vector<std::future<CompileResult>> results;
  results.reserve(chosen.size());
  for (const KernelSource* s : chosen) {
    results.push_back(std::async(std::launch::async, [s, &headers, arch] {
      return nvrtc_compile(*s, headers, nvrtc_options(arch, true), true);
    }));
  }
  for (std::size_t i = 0; i < results.size(); ++i) {
    CAPTURE(chosen[i]->name);
    CHECK(chosen[i]->name.starts_with("nn/"));
    const CompileResult r = results[i].get();
    CHECK_MESSAGE(r.succeeded(), r.log());
  }
}

// Three test cases, which tests/meson.build runs as tests of their own, beside the rest of this file: the whole set
// for sm_90 and sm_75 took 243 s of a 300 s timeout in one test on the 2-core CI machine, and sm_90's alone 212 s.
TEST_CASE("every nn kernel in kernels/nn/ compiles for sm_90 with the core and the nn headers: even files") {
  check_kernel_set_compiles(90, 0, 2);
}
TEST_CASE("every nn kernel in kernels/nn/ compiles for sm_90 with the core and the nn headers: odd files") {
  check_kernel_set_compiles(90, 1, 2);
}

// sm_75 (Turing) is the oldest the README supports: the library compiles the whole set there too, so its sm_80 paths
// are guarded (they trap) or have a fallback (half.cuh's pack_half2).
TEST_CASE("every nn kernel in kernels/nn/ compiles for sm_75 with the core and the nn headers") {
  check_kernel_set_compiles(75);
}

TEST_CASE("the host's copies of moe_core.cuh's sizes are the kernels' own") {
  // kMoePlanInts (the plan's ints) and kMoeStagedExperts (the experts the staged pair routes in registers) restate
  // kernels/nn/include/lazygraph/nn/moe_core.cuh's constants, which the host cannot include: a kernel given a plan
  // buffer of another size, or more experts than it routes, would trap on the device instead of being refused.
  const auto& headers = nn::kernel_set().headers;
  const auto core = std::find_if(headers.begin(), headers.end(),
                                 [](const KernelSource& h) { return h.name.ends_with("moe_core.cuh"); });
  REQUIRE(core != headers.end());
  const auto constant = [&](const std::string& name) {
    const std::string key = "constexpr int " + name + " = ";
    const std::size_t at = core->text.find(key);
    REQUIRE_MESSAGE(at != std::string::npos, name);
    return std::stoi(core->text.substr(at + key.size()));
  };
  const int max_pairs = constant("kMaxBatch") * constant("kMaxTopK");
  CHECK(static_cast<std::size_t>(constant("kPlanDistinct") + max_pairs + max_pairs * constant("kMaxBatch")) ==
        nn::kMoePlanInts);
  CHECK(constant("kRegisterExperts") == nn::kMoeStagedExperts);
}

TEST_CASE("the nn files with tile functions compile together, as a persistent program's source includes them") {
  // A program's generated source includes the file of every tile function it calls in one translation unit (with
  // LAZYGRAPH_TILES_ONLY, src/kernels/persistent_source.cpp): the files' own names must not collide.
  std::vector<KernelSource> headers(core_kernel_headers().begin(), core_kernel_headers().end());
  headers.insert(headers.end(), nn::kernel_set().headers.begin(), nn::kernel_set().headers.end());
  std::string text = "#include \"lazygraph/persistent.cuh\"\n#define LAZYGRAPH_TILES_ONLY\n";
  std::size_t files = 0;
  for (const KernelSource& s : nn::kernel_set().sources) {
    const std::vector<KernelDeclaration> found = parse_kernel_declarations(s.text, s.name);
    if (std::none_of(found.begin(), found.end(), [](const KernelDeclaration& d) { return d.tile; })) continue;
    headers.push_back(s);
    text += "#include \"" + s.name + "\"\n";
    ++files;
  }
  CHECK(files >= 7);  // embedding, qkv, attention, gemv, qgemv, sample, argmax
  const CompileResult r = nvrtc_compile({"all_tiles.cu", text}, headers, nvrtc_options(90, true), true);
  CHECK_MESSAGE(r.succeeded(), r.log());
}

TEST_SUITE("gpu") {
  TEST_CASE("a batched kernel refuses a batch outside 1..8, naming it") {
    const nn::Kernels k(lgtest::nn_kernels());
    CHECK_THROWS_WITH_AS((void)k.gemv.variant(9), doctest::Contains("batch 9 is outside 1..8"), UsageError);
    CHECK_THROWS_AS((void)k.gemv.variant(0), UsageError);
    CHECK(k.gemv.variant(3).name() == "gemv_b4");
    CHECK(k.gemv.variant(1).name() == "gemv");
    CHECK_FALSE(k.gemv.tensor_cores());
    const nn::Kernels tc(lgtest::nn_kernels(), nn::KernelOptions{.tensor_cores = true});
    CHECK(tc.gemv.variant(1).name() == "gemv");
    CHECK(tc.gemv.variant(3).name() == "gemv_mma");
    CHECK(tc.rms_norm_gemv_swiglu.variant(8).name() == "rms_norm_gemv_swiglu_mma");
    CHECK(tc.qkv_rope_append.variant(8).name() == "qkv_rope_append_mma");
    CHECK(tc.qkv_rope_append.variant(1).name() == "qkv_rope_append");
    CHECK_THROWS_AS((void)tc.gemv.variant(9), UsageError);
  }

  TEST_CASE("every gemv kernel gives each vector of a batch the bits a batch of one gives it") {
    Stream& s = lgtest::stream();
    const nn::Kernels k(lgtest::nn_kernels());
    const nn::BatchedKernel<void(const half*, const half*, const half*, half*, half*, int, int, int)> dual(
        lgtest::nn_kernels(), "gemv_dual");
    const nn::BatchedKernel<void(const half*, const half*, const half*, half*, int, int, int)> swiglu(
        lgtest::nn_kernels(), "gemv_swiglu");
    for (const auto& [rows, cols, warps, per_block] : {std::tuple{384, 512, 1U, 8U}, std::tuple{520, 4608, 2U, 4U}}) {
      const auto w1 = on_device(random_halves(static_cast<std::size_t>(rows) * cols));
      const auto w3 = on_device(random_halves(static_cast<std::size_t>(rows) * cols));
      const auto g = on_device(random_halves(static_cast<std::size_t>(cols)));
      const LaunchConfig cfg = gemv_config(rows, warps, per_block);
      // The one-vector rms_norm_gemv takes blocks of at most 128 threads (nn::kOneVectorNormGemvThreads); a vector's
      // bits depend on the warps a row only.
      const LaunchConfig norm_one = gemv_config(rows, warps, nn::kOneVectorNormGemvThreads / 32 / warps);
      for (const int batch : {2, 3, 5, 8}) {
        CAPTURE(rows);
        CAPTURE(cols);
        CAPTURE(batch);
        const auto xs = random_halves(static_cast<std::size_t>(batch) * cols);
        const auto dx = on_device(xs);
        const auto residual = random_halves(static_cast<std::size_t>(batch) * rows);
        const auto out_size = static_cast<std::size_t>(batch) * rows;
        // One launch per kernel for the whole batch: outputs [batch][rows] (two for gemv_dual).
        const auto run = [&](const DeviceBuffer<half>& x, int n, int variant) {
          auto a = poisoned(static_cast<std::size_t>(n) * rows);
          auto b = poisoned(static_cast<std::size_t>(n) * rows);
          switch (variant) {
            case 0:
              k.gemv.launch(s, cfg, w1.cview(), x.cview(), a.view(), rows, cols, n);
              break;
            case 1:
              a = on_device(
                  std::vector<half>(residual.begin(), residual.begin() + static_cast<std::ptrdiff_t>(a.size())));
              k.gemv_add.launch(s, cfg, w1.cview(), x.cview(), a.view(), rows, cols, n);
              break;
            case 2:
              k.rms_norm_gemv.launch(s, n == 1 ? norm_one : cfg, w1.cview(), x.cview(), g.cview(), a.view(), rows, cols,
                                     1e-5F, n);
              break;
            case 3:
              k.rms_norm_gemv_swiglu.launch(s, cfg, w1.cview(), w3.cview(), x.cview(), g.cview(), a.view(), rows, cols,
                                            1e-5F, n);
              break;
            case 4:
              dual.launch(s, cfg, w1.cview(), w3.cview(), x.cview(), a.view(), b.view(), rows, cols, n);
              break;
            default:
              swiglu.launch(s, cfg, w1.cview(), w3.cview(), x.cview(), a.view(), rows, cols, n);
              break;
          }
          std::vector<half> got = on_host(a);
          if (variant == 4) {
            const std::vector<half> second = on_host(b);
            got.insert(got.end(), second.begin(), second.end());
          }
          return got;
        };
        for (int variant = 0; variant < 6; ++variant) {
          CAPTURE(variant);
          const std::vector<half> together = run(dx, batch, variant);
          REQUIRE(together.size() == (variant == 4 ? 2 : 1) * out_size);
          int differ = 0;
          for (int b = 0; b < batch; ++b) {
            const auto one_x = on_device(std::vector<half>(xs.begin() + static_cast<std::ptrdiff_t>(b) * cols,
                                                           xs.begin() + static_cast<std::ptrdiff_t>(b + 1) * cols));
            // gemv_add's residual for this vector is row b of `residual`: run it with that as its only row.
            std::vector<half> alone;
            if (variant == 1) {
              auto a = on_device(std::vector<half>(residual.begin() + static_cast<std::ptrdiff_t>(b) * rows,
                                                   residual.begin() + static_cast<std::ptrdiff_t>(b + 1) * rows));
              k.gemv_add.launch(s, cfg, w1.cview(), one_x.cview(), a.view(), rows, cols, 1);
              alone = on_host(a);
            } else {
              alone = run(one_x, 1, variant);
            }
            for (int part = 0; part < (variant == 4 ? 2 : 1); ++part) {
              for (int r = 0; r < rows; ++r) {
                const half got = together[part * out_size + static_cast<std::size_t>(b) * rows + r];
                differ += got.bits != alone[static_cast<std::size_t>(part) * rows + r].bits ? 1 : 0;
              }
            }
          }
          CHECK(differ == 0);
        }
      }
    }
  }

  TEST_CASE(
      "the tensor-core gemv variants match float64 for batches of 1 to 8, for any shape, block and grid, and a "
      "vector's result does not depend on the rest of the batch") {
    Stream& s = lgtest::stream();
    const nn::Kernels k(lgtest::nn_kernels(), nn::KernelOptions{.tensor_cores = true});
    const nn::BatchedKernel<void(const half*, const half*, const half*, half*, half*, int, int, int)> dual(
        lgtest::nn_kernels(), "gemv_dual", true);
    const nn::BatchedKernel<void(const half*, const half*, const half*, half*, int, int, int)> swiglu(
        lgtest::nn_kernels(), "gemv_swiglu", true);
    REQUIRE(k.gemv.variant(2).name() == "gemv_mma");
    REQUIRE(k.gemv.variant(1).name() == "gemv");
    const float eps = 1e-5F;
    // 200 x 520: rows not a multiple of the 16-row tile, rows of 65 chunks (the last 32-column step is partial).
    for (const auto& [rows, cols] : {std::pair{200, 520}, std::pair{1030, 4104}}) {
      const auto w1 = random_halves(static_cast<std::size_t>(rows) * cols);
      const auto w3 = random_halves(w1.size());
      const auto g = random_halves(static_cast<std::size_t>(cols));
      const auto dw1 = on_device(w1);
      const auto dw3 = on_device(w3);
      const auto dg = on_device(g);
      // The kernels' own shape, blocks of 4 and 8 warps (nn::tensor_core_gemv_warps picks one per shape), one warp
      // in 3 blocks (grid-stride over tiles), and an fp32-path shape.
      const auto tiles = static_cast<unsigned>((rows + 7) / 8);
      for (const LaunchConfig& cfg :
           {k.tensor_core_gemv_config(rows, cols, 2), LaunchConfig{{tiles, 1, 1}, {32, 4, 1}, 0},
            LaunchConfig{{tiles, 1, 1}, {32, 8, 1}, 0}, LaunchConfig{{3, 1, 1}, {32, 1, 1}, 0},
            gemv_config(rows, 2, 4)}) {
        for (const int batch : {1, 2, 5, 8}) {
          CAPTURE(rows);
          CAPTURE(cols);
          CAPTURE(cfg.block.x * cfg.block.y * cfg.block.z);
          CAPTURE(cfg.grid.x);
          CAPTURE(batch);
          const auto xs = random_halves(static_cast<std::size_t>(batch) * cols);
          const auto residual = random_halves(static_cast<std::size_t>(batch) * rows);
          const auto out_size = static_cast<std::size_t>(batch) * rows;
          // Runs tensor-core kernel `variant` on the first n vectors: outputs [n][rows] (two for gemv_dual).
          const auto run = [&](int n, int variant) {
            const auto x = on_device(std::vector<half>(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(n) * cols));
            auto a = poisoned(static_cast<std::size_t>(n) * rows);
            auto b = poisoned(static_cast<std::size_t>(n) * rows);
            switch (variant) {
              case 0:
                k.gemv.variant(8).launch(s, cfg, dw1.cview(), x.cview(), a.view(), rows, cols, n);
                break;
              case 1:
                a = on_device(
                    std::vector<half>(residual.begin(), residual.begin() + static_cast<std::ptrdiff_t>(n) * rows));
                k.gemv_add.variant(8).launch(s, cfg, dw1.cview(), x.cview(), a.view(), rows, cols, n);
                break;
              case 2:
                k.rms_norm_gemv.variant(8).launch(s, cfg, dw1.cview(), x.cview(), dg.cview(), a.view(), rows, cols, eps,
                                                  n);
                break;
              case 3:
                k.rms_norm_gemv_swiglu.variant(8).launch(s, cfg, dw1.cview(), dw3.cview(), x.cview(), dg.cview(),
                                                         a.view(), rows, cols, eps, n);
                break;
              case 4:
                dual.variant(8).launch(s, cfg, dw1.cview(), dw3.cview(), x.cview(), a.view(), b.view(), rows, cols, n);
                break;
              default:
                swiglu.variant(8).launch(s, cfg, dw1.cview(), dw3.cview(), x.cview(), a.view(), rows, cols, n);
                break;
            }
            std::vector<half> got = on_host(a);
            if (variant == 4) {
              const std::vector<half> second = on_host(b);
              got.insert(got.end(), second.begin(), second.end());
            }
            return got;
          };
          // float64 references, vector by vector.
          std::vector<double> plain1;
          std::vector<double> plain3;
          std::vector<double> normed1;
          std::vector<double> normed3;
          for (int b = 0; b < batch; ++b) {
            const std::vector<half> xb(xs.begin() + static_cast<std::ptrdiff_t>(b) * cols,
                                       xs.begin() + static_cast<std::ptrdiff_t>(b + 1) * cols);
            const std::vector<double> x = widen(xb);
            double ss = 0;
            for (const double v : x) ss += v * v;
            const double inv_rms = 1.0 / std::sqrt(ss / cols + eps);
            std::vector<double> h(static_cast<std::size_t>(cols));
            for (int c = 0; c < cols; ++c) h[c] = x[c] * inv_rms * g[c].to_float();
            using Product = std::tuple<const std::vector<half>*, std::vector<double>*, const std::vector<double>*>;
            for (const auto& [w, into, by] : {Product{&w1, &plain1, &x}, Product{&w3, &plain3, &x},
                                              Product{&w1, &normed1, &h}, Product{&w3, &normed3, &h}}) {
              const MatVec m = matvec(*w, *by, rows, cols);
              into->insert(into->end(), m.value.begin(), m.value.end());
            }
          }
          for (int variant = 0; variant < 6; ++variant) {
            CAPTURE(variant);
            const std::vector<half> got = run(batch, variant);
            std::vector<double> want(out_size);
            for (std::size_t i = 0; i < out_size; ++i) {
              switch (variant) {
                case 0:
                  want[i] = plain1[i];
                  break;
                case 1:
                  want[i] = plain1[i] + residual[i].to_float();
                  break;
                case 2:
                  want[i] = normed1[i];
                  break;
                case 3:
                  want[i] = silu(normed1[i]) * normed3[i];
                  break;
                case 5:
                  want[i] = silu(plain1[i]) * plain3[i];
                  break;
                default:
                  want[i] = plain1[i];
                  break;
              }
            }
            if (variant == 4) want.insert(want.end(), plain3.begin(), plain3.end());
            check_close(got, want);
            if (batch > 1) {  // vector 0 alone through the same kernel: the same bits
              const std::vector<half> alone = run(1, variant);
              int differ = 0;
              for (int part = 0; part < (variant == 4 ? 2 : 1); ++part) {
                for (int r = 0; r < rows; ++r) {
                  differ += got[part * out_size + static_cast<std::size_t>(r)].bits !=
                                    alone[static_cast<std::size_t>(part) * rows + r].bits
                                ? 1
                                : 0;
                }
              }
              CHECK(differ == 0);
            }
          }
        }
      }
    }
  }

  TEST_CASE("embedding, rope, kv_append and attention on a batch equal each row run alone, also rows of one slot") {
    Stream& s = lgtest::stream();
    const nn::Kernels k(lgtest::nn_kernels());
    const int heads = 8;
    const int kv_heads = 2;
    const int hd = 64;
    const int ctx = 128;
    const int slots = 4;
    const int d = heads * hd;
    const int kv = kv_heads * hd;
    const int batch = 5;
    // Rows 0..2 are three sequences; rows 3 and 4 are the next two prompt tokens of sequence 3 (prefill).
    const std::vector<int> positions{17, 0, 99, 40, 41};
    const std::vector<int> row_slots{0, 1, 2, 3, 3};
    const std::vector<int> tokens{5, 300, 17, 42, 255};
    const auto table = on_device(random_halves(static_cast<std::size_t>(512) * d));
    const auto cache_init = random_halves(static_cast<std::size_t>(slots) * kv_heads * ctx * hd);
    const auto q_init = random_halves(static_cast<std::size_t>(batch) * d);
    const auto k_init = random_halves(static_cast<std::size_t>(batch) * kv);
    const auto v_init = random_halves(static_cast<std::size_t>(batch) * kv);
    const float scale = 0.125F;
    struct Result {
      std::vector<half> x, q, k, kc, vc, out;
    };
    // Runs rows [first, first + n) of the batch in one go.
    const auto run = [&](int first, int n, DeviceBuffer<half>& kc, DeviceBuffer<half>& vc) {
      const auto sub = [&](const std::vector<half>& v, int width) {
        return on_device(std::vector<half>(v.begin() + static_cast<std::ptrdiff_t>(first) * width,
                                           v.begin() + static_cast<std::ptrdiff_t>(first + n) * width));
      };
      const auto ints = [&](const std::vector<int>& v) {
        return lgtest::to_device(s, std::vector<int>(v.begin() + first, v.begin() + first + n));
      };
      const auto dtok = ints(tokens);
      const auto dpos = ints(positions);
      const auto dslot = ints(row_slots);
      auto x = poisoned(static_cast<std::size_t>(n) * d);
      auto q = sub(q_init, d);
      auto kk = sub(k_init, kv);
      const auto vv = sub(v_init, kv);
      auto out = poisoned(static_cast<std::size_t>(n) * d);
      const auto un = static_cast<std::size_t>(n);
      k.embedding.launch(s, grid_for(un * d, 256), table.cview(), dtok.cview(), x.view(), d, n);
      const auto freq = lgtest::to_device(s, plain_rope_table(10000.0F, hd));
      k.rope.launch(s, grid_for(un * d, 256), q.view(), kk.view(), dpos.cview(), heads, kv_heads, hd, freq.cview(), n);
      k.kv_append.launch(s, grid_for(un * kv, 256), kk.cview(), vv.cview(), kc.view(), vc.view(), dpos.cview(),
                         dslot.cview(), kv_heads, hd, ctx, slots, n);
      k.attention.launch(s, {{heads, static_cast<unsigned>(n), 1}, {256, 1, 1}, ctx * 4U}, q.cview(), kc.cview(),
                         vc.cview(), out.view(), dpos.cview(), dslot.cview(), heads, kv_heads, hd, ctx, slots, scale,
                         0);
      return Result{on_host(x), on_host(q), on_host(kk), {}, {}, on_host(out)};
    };
    auto kc_all = on_device(cache_init);
    auto vc_all = on_device(cache_init);
    const Result together = run(0, batch, kc_all, vc_all);
    auto kc_one = on_device(cache_init);
    auto vc_one = on_device(cache_init);
    int differ = 0;
    for (int r = 0; r < batch; ++r) {
      const Result alone = run(r, 1, kc_one, vc_one);  // in row order: row 4 sees row 3's append, as in the batch
      const auto same = [&](const std::vector<half>& all, const std::vector<half>& one) {
        for (std::size_t i = 0; i < one.size(); ++i) differ += all[r * one.size() + i].bits != one[i].bits ? 1 : 0;
      };
      same(together.x, alone.x);
      same(together.q, alone.q);
      same(together.k, alone.k);
      same(together.out, alone.out);
    }
    CHECK(differ == 0);
    const auto a = on_host(kc_all);
    const auto b = on_host(kc_one);
    for (std::size_t i = 0; i < a.size(); ++i) differ += a[i].bits != b[i].bits ? 1 : 0;
    CHECK(differ == 0);
    // The embedding is the table row, exactly.
    const auto host_table = on_host(table);
    CHECK(together.x[static_cast<std::size_t>(2) * d + 7].bits ==
          host_table[static_cast<std::size_t>(17) * d + 7].bits);
  }
  TEST_CASE("qkv_rope_append equals the norm, three projections, RoPE and the cache append in float64") {
    // At d 256 a whole model's Wq (q_rows = d) and a tensor-parallel shard's (half the heads' rows, q_rows = d / 2), at
    // d 8192 four of its 128 heads' (q_rows = d / 32); the fp32
    // variant and the tensor-core one (3 vectors); without and with q, k and v biases (Qwen2's).
    // `one`: one vector (qkv_rope_append itself) on 2 blocks, so that they take the rows in several passes (its
    // config caps the grid at kOneVectorQkvBlocks a multiprocessor), each pass holding both rows of its RoPE pairs;
    // at d 8192 its config gives 2 warps a row and 2 rows a block of 128 threads (at 256, 1 warp and 4 rows). The
    // tensor-core variant on 2 blocks too, each taking several tiles of 8 rows (nn::tensor_core_gemv_blocks).
    for (const auto& [q_heads, tensor_cores, biased, one, d] :
         {std::tuple{4, false, false, false, 256}, std::tuple{2, false, false, false, 256},
          std::tuple{4, true, false, false, 256}, std::tuple{4, false, true, false, 256},
          std::tuple{2, true, true, false, 256}, std::tuple{4, false, true, true, 256},
          std::tuple{4, false, false, true, 8192}}) {
      CAPTURE(q_heads);
      CAPTURE(tensor_cores);
      CAPTURE(biased);
      CAPTURE(one);
      CAPTURE(d);
      Stream& s = lgtest::stream();
      const nn::Kernels k(lgtest::nn_kernels(), nn::KernelOptions{.tensor_cores = tensor_cores});
      const int hd = 64;
      const int heads = d / hd;  // q_heads of them are this launch's
      REQUIRE(q_heads <= heads);
      const int kv_heads = 2;
      const int kv = kv_heads * hd;
      const int ctx = 16;
      const int slots = 4;
      const float eps = 1e-5F;
      const float theta = 10000.0F;
      const std::vector<int> positions = one ? std::vector<int>{5} : std::vector<int>{5, 0, 15};
      const std::vector<int> row_slots = one ? std::vector<int>{2} : std::vector<int>{2, 0, 3};
      const int batch = static_cast<int>(positions.size());
      const auto scaled = [](std::size_t n, double scale) {
        std::vector<half> out;
        for (const float f : lgtest::random_floats(n)) out.push_back(half::from_float(static_cast<float>(f * scale)));
        return out;
      };
      const double w_scale = 1.0 / std::sqrt(static_cast<double>(d));
      const int q_rows = q_heads * hd;
      const auto wq = scaled(static_cast<std::size_t>(q_rows) * d, w_scale);
      const auto wk = scaled(static_cast<std::size_t>(kv) * d, w_scale);
      const auto wv = scaled(static_cast<std::size_t>(kv) * d, w_scale);
      const auto x = random_halves(static_cast<std::size_t>(batch) * d);
      const auto g = random_halves(static_cast<std::size_t>(d));
      const std::size_t cache_size = static_cast<std::size_t>(slots) * kv_heads * ctx * hd;
      auto q = poisoned(static_cast<std::size_t>(batch) * q_rows);
      auto kc = poisoned(cache_size);
      auto vc = poisoned(cache_size);
      const auto dq = on_device(wq);
      const auto dk = on_device(wk);
      const auto dv = on_device(wv);
      const auto dx = on_device(x);
      const auto dg = on_device(g);
      const auto dpos = lgtest::to_device(s, positions);
      const auto dslot = lgtest::to_device(s, row_slots);
      const auto dfreq = lgtest::to_device(s, plain_rope_table(theta, hd));
      REQUIRE(k.qkv_rope_append.variant(batch).name() == (one            ? "qkv_rope_append"
                                                          : tensor_cores ? "qkv_rope_append_mma"
                                                                         : "qkv_rope_append_b4"));
      const auto bias = [&](int n) { return biased ? scaled(static_cast<std::size_t>(n), 0.5) : std::vector<half>{}; };
      const std::vector<half> bq = bias(q_rows);
      const std::vector<half> bk = bias(kv);
      const std::vector<half> bv = bias(kv);
      const auto dbq = on_device(bq);
      const auto dbk = on_device(bk);
      const auto dbv = on_device(bv);
      LaunchConfig config = k.qkv_config(q_rows, kv, d, batch);
      if (one) {
        CHECK(config.block.x * config.block.y * config.block.z == nn::kOneVectorQkvThreads);
        CHECK(config.block.y == (d > 4096 ? 2U : 1U));
      }
      // Blocks that take several passes (one vector) or tiles (tensor cores) each, as a capped grid's do.
      if (one || tensor_cores) config.grid.x = 2;
      k.qkv_rope_append.launch(s, config, dq.cview(), dk.cview(), dv.cview(), dbq.cview(), dbk.cview(), dbv.cview(),
                               dx.cview(), dg.cview(), q.view(), kc.view(), vc.view(), dpos.cview(), dslot.cview(), d,
                               q_rows, kv_heads, hd, ctx, slots, dfreq.cview(), eps, batch);
      const auto got_q = on_host(q);
      const auto got_k = on_host(kc);
      const auto got_v = on_host(vc);
      std::vector<half> q_got;
      std::vector<double> q_want;
      std::vector<half> kv_got;
      std::vector<double> kv_want;
      std::vector<bool> written(cache_size, false);
      const auto rotate = [&](std::vector<double> v, int position) {
        for (std::size_t e = 0; e + 1 < v.size(); e += 2) {
          const int i = static_cast<int>(e % static_cast<std::size_t>(hd)) / 2;
          const double angle = position * std::pow(static_cast<double>(theta), -2.0 * i / hd);
          const double x0 = v[e];
          const double x1 = v[e + 1];
          v[e] = x0 * std::cos(angle) - x1 * std::sin(angle);
          v[e + 1] = x0 * std::sin(angle) + x1 * std::cos(angle);
        }
        return v;
      };
      for (int b = 0; b < batch; ++b) {
        double ss = 0;
        for (int c = 0; c < d; ++c) ss += double(x[b * d + c].to_float()) * x[b * d + c].to_float();
        const double inv = 1.0 / std::sqrt(ss / d + eps);
        std::vector<double> h(d);
        for (int c = 0; c < d; ++c) h[c] = x[b * d + c].to_float() * inv * g[c].to_float();
        const auto biased_by = [](std::vector<double> v, const std::vector<half>& b) {
          for (std::size_t i = 0; i < b.size(); ++i) v[i] += b[i].to_float();
          return v;
        };
        const auto qr = rotate(biased_by(matvec(wq, h, q_rows, d).value, bq), positions[b]);
        const auto kr = rotate(biased_by(matvec(wk, h, kv, d).value, bk), positions[b]);
        const auto vr = biased_by(matvec(wv, h, kv, d).value, bv);
        for (int i = 0; i < q_rows; ++i) {
          q_got.push_back(got_q[b * q_rows + i]);
          q_want.push_back(qr[i]);
        }
        for (int i = 0; i < kv; ++i) {
          const std::size_t at =
              ((static_cast<std::size_t>(row_slots[b]) * kv_heads + i / hd) * ctx + positions[b]) * hd + i % hd;
          written[at] = true;
          kv_got.push_back(got_k[at]);
          kv_want.push_back(kr[i]);
          kv_got.push_back(got_v[at]);
          kv_want.push_back(vr[i]);
        }
      }
      check_close(q_got, q_want);
      check_close(kv_got, kv_want);
      int touched = 0;
      for (std::size_t i = 0; i < cache_size; ++i) {
        if (!written[i])
          touched += static_cast<int>(got_k[i].bits != poison) + static_cast<int>(got_v[i].bits != poison);
      }
      CHECK(touched == 0);  // nothing but the rows' positions was written
    }
  }
}
