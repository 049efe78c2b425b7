#include <lazygraph/nn/stop_strings.hpp>

#include <algorithm>
#include <stdexcept>

namespace lazygraph::nn {

StopStrings::StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& stop : stops_) {
    if (stop.empty()) throw std::invalid_argument("a stop string is empty: it would stop before any text");
  }
}

std::string StopStrings::push(std::string_view text) {
  if (stopped_) return {};
  held_ += text;
  // The stop string that ends first (it is complete first, whatever comes after); of those ending there, the one
  // that begins first.
  std::size_t first = std::string::npos;
  std::size_t first_end = std::string::npos;
  for (const std::string& stop : stops_) {
    const std::size_t at = held_.find(stop);
    if (at == std::string::npos) continue;
    const std::size_t end = at + stop.size();
    if (end < first_end || (end == first_end && at < first)) {
      first = at;
      first_end = end;
      which_ = stop;
    }
  }
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold back the longest end of the text that begins a stop string; every earlier byte is safe to print.
  std::size_t hold = 0;
  for (const std::string& stop : stops_) {
    for (std::size_t length = std::min(stop.size() - 1, held_.size()); length > hold; --length) {
      if (held_.compare(held_.size() - length, length, stop, 0, length) == 0) {
        hold = length;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopStrings::finish() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace lazygraph::nn
