#include "lazygraph/ops/profile.hpp"

#include <algorithm>
#include <memory>
#include <utility>

#include "lazygraph/driver/error.hpp"

namespace lazygraph::detail {

namespace {

/// Records an event pair around every launch of one run, on the stream the launch went to.
class EventObserver final : public LaunchObserver {
 public:
  struct Launch {
    std::string name;
    std::string label;
    std::size_t span_bytes = 0;
    std::unique_ptr<Event> begin;
    std::unique_ptr<Event> end;
  };

  void before(const KernelSubmission& kernel, const Stream& stream, std::span<const std::string_view> labels) override {
    Launch l{std::string(kernel.name), labels.empty() ? std::string() : std::string(labels.back()), kernel.span_bytes,
             std::make_unique<Event>(stream.device()), std::make_unique<Event>(stream.device())};
    l.begin->record(stream);
    launches.push_back(std::move(l));
  }
  void after(const KernelSubmission& /*kernel*/, const Stream& stream) override { launches.back().end->record(stream); }

  std::vector<Launch> launches;
};

double median(std::vector<double> v) {
  const auto middle = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), middle, v.end());
  return *middle;
}

}  // namespace

std::vector<KernelTiming> profile_runs(const Stream& stream, int repeats,
                                       const std::function<void(ExecContext&)>& run) {
  if (repeats < 1) throw UsageError("profile_kernels: repeats must be at least 1, got " + std::to_string(repeats));
  {
    ExecContext warm(stream, false);  // module loads, first-touch costs
    run(warm);
    stream.synchronize();
  }
  std::vector<std::vector<double>> times;
  std::vector<KernelTiming> out;
  for (int r = 0; r < repeats; ++r) {
    EventObserver observer;
    {
      ExecContext ctx(stream, false);
      ctx.observe(&observer);
      run(ctx);
    }
    stream.device().synchronize();  // every branch's stream, not only `stream`
    if (r == 0) {
      times.resize(observer.launches.size());
      for (const auto& l : observer.launches) out.push_back({l.name, l.label, l.span_bytes, 0.0});
    } else if (observer.launches.size() != out.size()) {
      throw UsageError("profile_kernels: run " + std::to_string(r) + " launched " +
                       std::to_string(observer.launches.size()) + " kernels, the first " + std::to_string(out.size()));
    }
    for (std::size_t i = 0; i < observer.launches.size(); ++i) {
      if (observer.launches[i].name != out[i].name) {
        throw UsageError("profile_kernels: launch " + std::to_string(i) + " of run " + std::to_string(r) + " is " +
                         observer.launches[i].name + ", in the first run " + out[i].name);
      }
      times[i].push_back(Event::elapsed_ms(*observer.launches[i].begin, *observer.launches[i].end) * 1e3);
    }
  }
  for (std::size_t i = 0; i < out.size(); ++i) out[i].microseconds = median(times[i]);
  return out;
}

}  // namespace lazygraph::detail
