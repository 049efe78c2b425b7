#pragma once
/// \file
/// The statistic every benchmark here reports: the median of its samples (robust to the odd slow sample).

#include <algorithm>
#include <vector>

namespace bench {

/// The median of `samples` (the upper one of the middle two for an even count). `samples` must not be empty.
inline double median(std::vector<double> samples) {
  const auto middle = samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 2);
  std::nth_element(samples.begin(), middle, samples.end());
  return *middle;
}

}  // namespace bench
