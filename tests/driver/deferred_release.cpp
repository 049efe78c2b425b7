// DeferredRelease (detail/driver/deferred_release.hpp): owners kept until the stream's work before them has
// completed, released oldest first without waiting, and everything released at once by release_all.
#include <doctest/doctest.h>

#include <lazygraph/detail/driver/deferred_release.hpp>

#include <chrono>
#include <memory>
#include <vector>

#include "common/gate.hpp"
#include "common/gpu.hpp"

using namespace lazygraph;
using detail::DeferredRelease;

namespace {

/// `count` fresh owners and weak references to them.
DeferredRelease::Owners make_owners(int count, std::vector<std::weak_ptr<const void>>& watch) {
  DeferredRelease::Owners owners;
  for (int i = 0; i < count; ++i) {
    auto owner = std::make_shared<const int>(i);
    watch.emplace_back(owner);
    owners.push_back(std::move(owner));
  }
  return owners;
}

std::size_t alive(const std::vector<std::weak_ptr<const void>>& watch) {
  std::size_t n = 0;
  for (const auto& w : watch) n += w.expired() ? 0 : 1;
  return n;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("DeferredRelease keeps owners until the work before them completed, and releases batches in order") {
    const Stream s(lgtest::device());
    DeferredRelease release;
    std::vector<std::weak_ptr<const void>> first;
    std::vector<std::weak_ptr<const void>> second;
    lgtest::Gate gate_a;
    lgtest::Gate gate_b;
    gate_a.close_on(s);
    release.hold(s, make_owners(3, first));
    gate_b.close_on(s);
    release.hold(s, make_owners(2, second));
    CHECK(release.held() == 2);

    release.collect();  // the stream is stuck at gate a: nothing may go
    CHECK(release.held() == 2);
    CHECK(alive(first) == 3);
    CHECK(alive(second) == 2);

    gate_a.open();  // the first batch's work completes; the second's waits at gate b
    CHECK(lgtest::becomes_true_within(
        [&] {
          release.collect();
          return release.held() == 1;
        },
        std::chrono::seconds(10)));
    CHECK(alive(first) == 0);
    CHECK(alive(second) == 2);

    gate_b.open();
    s.synchronize();
    release.collect();
    CHECK(release.held() == 0);
    CHECK(alive(second) == 0);
  }

  TEST_CASE("DeferredRelease records nothing for an empty list, and release_all lets everything go at once") {
    const Stream s(lgtest::device());
    DeferredRelease release;
    release.hold(s, {});
    CHECK(release.held() == 0);

    std::vector<std::weak_ptr<const void>> watch;
    lgtest::Gate gate;
    gate.close_on(s);
    release.hold(s, make_owners(4, watch));
    release.hold(s, make_owners(1, watch));
    CHECK(release.held() == 2);
    release.release_all();  // the caller's word that the work is done: nothing is asked of the stream
    CHECK(release.held() == 0);
    CHECK(alive(watch) == 0);
    gate.open();
    s.synchronize();
  }

  TEST_CASE("DeferredRelease reuses the events of released batches") {
    const Stream s(lgtest::device());
    DeferredRelease release;
    std::vector<std::weak_ptr<const void>> watch;
    release.hold(s, make_owners(1, watch));
    s.synchronize();
    release.collect();
    REQUIRE(release.held() == 0);
    const long long events = live_handles().events;  // one event, now spare
    for (int i = 0; i < 100; ++i) {
      release.hold(s, make_owners(1, watch));
      s.synchronize();
      release.collect();
    }
    CHECK(release.held() == 0);
    CHECK(alive(watch) == 0);
    CHECK(live_handles().events == events);
  }
}
