#pragma once
/// \file
/// The physical ceiling every bandwidth number of the benchmarks is a fraction of: the device-to-device copy
/// bandwidth (bytes read plus bytes written per second) of a 1 GiB copy, measured in the same run.

#include <lazygraph/lazygraph.hpp>

#include <utility>
#include <vector>

#include "median.hpp"

namespace bench {

/// Median seconds per call of `submit(i)`, whose work may span several streams: 31 samples of `reps` calls each
/// between two events on `s`, after 4 untimed calls; `wait()` waits for all of the work after each sample.
template <class F, class W>
double median_seconds(const lazygraph::Stream& s, int reps, F&& submit, W&& wait) {
  lazygraph::Event a(s.device());
  lazygraph::Event b(s.device());
  for (int i = 0; i < 4; ++i) submit(i);
  wait();
  std::vector<double> t;
  for (int k = 0; k < 31; ++k) {
    a.record(s);
    for (int i = 0; i < reps; ++i) submit(i);
    b.record(s);
    wait();
    t.push_back(lazygraph::Event::elapsed_ms(a, b) * 1e-3 / reps);
  }
  return median(t);
}

/// Median seconds per call of `submit(i)` (work queued on `s`).
template <class F>
double median_seconds(const lazygraph::Stream& s, int reps, F&& submit) {
  return median_seconds(s, reps, std::forward<F>(submit), [&] { s.synchronize(); });
}

/// The copy ceiling in bytes per second: a 1 GiB device-to-device copy, bytes read plus bytes written.
inline double copy_ceiling(const lazygraph::Stream& s) {
  const std::size_t n = 512ULL << 20U;  // halves
  auto src = lazygraph::ones<lazygraph::half>(n).sync_on(s);
  auto dst = lazygraph::empty<lazygraph::half>(n).sync_on(s);
  const double seconds = median_seconds(s, 5, [&](int) { lazygraph::copy_async(s, dst.view(), src.cview()); });
  return 2.0 * static_cast<double>(n) * sizeof(lazygraph::half) / seconds;
}

}  // namespace bench
