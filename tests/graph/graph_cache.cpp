// GraphCache and bucket_for (graph/graph_cache.hpp): LRU bookkeeping on the host with a plain value type (the
// cache only stores what its maker returns), then real CUDA graphs per bucket on the GPU.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <array>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {

/// A stand-in graph that remembers the key it was made for.
struct Made {
  int key;
};

}  // namespace

TEST_CASE("bucket_for rounds a size up to the smallest bucket that holds it, and names what does not fit") {
  const std::array<std::size_t, 4> buckets{1, 2, 4, 8};
  CHECK(bucket_for(1, buckets) == 1);
  CHECK(bucket_for(3, buckets) == 4);
  CHECK(bucket_for(8, buckets) == 8);
  CHECK(bucket_for(0, buckets) == 1);
  CHECK_THROWS_WITH_AS((void)bucket_for(9, buckets), doctest::Contains("size 9 is beyond the largest bucket (8)"),
                       UsageError);
  CHECK_THROWS_AS((void)bucket_for(1, std::vector<std::size_t>{}), UsageError);
  CHECK_THROWS_AS((void)bucket_for(1, std::vector<std::size_t>{4, 2}), UsageError);
}

TEST_CASE("GraphCache makes a graph once per key, replays it after, and drops the least recently used") {
  int calls = 0;
  GraphCache<int, Made> cache(3, [&](const int& k) {
    ++calls;
    return Made{k};
  });
  CHECK(cache.get(1).key == 1);
  CHECK(cache.get(2).key == 2);
  CHECK(cache.get(1).key == 1);  // a hit: no new graph
  CHECK(calls == 2);
  CHECK(cache.get(3).key == 3);
  CHECK(cache.keys() == std::vector<int>{3, 1, 2});
  CHECK(cache.get(4).key == 4);  // full: 2, the least recently used, goes
  CHECK_FALSE(cache.contains(2));
  CHECK(cache.keys() == std::vector<int>{4, 3, 1});
  CHECK(cache.size() == 3);
  for (int k = 10; k < 100; ++k) (void)cache.get(k);  // never grows past the bound
  CHECK(cache.size() == 3);
  const GraphCacheStats& s = cache.stats();
  CHECK(s.hits == 1);
  CHECK(s.misses == 94);
  CHECK(s.made == 94);
  CHECK(s.evictions == 91);
  cache.clear();
  CHECK(cache.size() == 0);
  CHECK(cache.stats().made == 94);
}

TEST_CASE("a maker that throws leaves the cache as it was") {
  GraphCache<std::string, Made> cache(2, [](const std::string& k) {
    if (k == "huge") throw std::runtime_error("out of memory while capturing");
    return Made{static_cast<int>(k.size())};
  });
  (void)cache.get("a");
  (void)cache.get("bb");
  CHECK_THROWS_WITH((void)cache.get("huge"), "out of memory while capturing");
  CHECK(cache.keys() == std::vector<std::string>{"bb", "a"});  // nothing evicted for the failed one
  CHECK(cache.stats().misses == 3);
  CHECK(cache.stats().made == 2);
  CHECK(cache.get("a").key == 1);
  CHECK_THROWS_AS((GraphCache<int, Made>(0, [](const int& k) { return Made{k}; })), UsageError);
}

TEST_CASE("a cache made without a maker makes each miss with the maker given to get, and survives a move") {
  GraphCache<int, Made> cache(2);
  CHECK_THROWS_WITH_AS((void)cache.get(1), doctest::Contains("call get(key, make)"), UsageError);
  int calls = 0;
  const auto make = [&](const int& k) {
    ++calls;
    return Made{k * 10};
  };
  CHECK(cache.get(1, make).key == 10);
  CHECK(cache.get(1, make).key == 10);  // a hit: the maker is not called
  CHECK(calls == 1);
  GraphCache<int, Made> moved = std::move(cache);  // an owner that moves takes its graphs along
  CHECK(moved.get(1, make).key == 10);
  CHECK(moved.get(2, make).key == 20);
  CHECK(calls == 2);
  CHECK(moved.keys() == std::vector<int>{2, 1});
  CHECK_THROWS_AS((GraphCache<int, Made>(0)), UsageError);
}

TEST_SUITE("gpu") {
  TEST_CASE("a GraphCache of captured graphs per bucket replays the right graph for each size") {
    Stream& s = lgtest::stream();
    const auto axpy = lgtest::kernels().get<void(float, const float*, float*, int)>("axpy");
    const std::array<std::size_t, 3> buckets{256, 1024, 4096};
    auto x = lgtest::to_device(s, std::vector<float>(4096, 1.0F));
    auto y = lgtest::to_device(s, std::vector<float>(4096, 0.0F));
    GraphCache<std::size_t> cache(2, [&](const std::size_t& n) {
      return CudaGraph<>::capture(s, axpy(grid_for(n, 256), 2.0F, x.cview(), y.view(), static_cast<int>(n)));
    });
    for (const std::size_t size : {100, 200, 1000, 3000, 256, 100}) {
      cache.get(bucket_for(size, buckets)).launch_on(s);
    }
    const std::vector<float> got = lgtest::to_host(s, y.cview());
    // 256-bucket graph ran 4 times (sizes 100, 200, 256, 100), 1024 once (1000), 4096 once (3000). The cache held
    // two graphs: the 256 one was evicted by 4096 and captured again.
    CHECK(got[0] == 2.0F * 6);
    CHECK(got[300] == 2.0F * 2);
    CHECK(got[2000] == 2.0F * 1);
    CHECK(cache.stats().made == 4);
    CHECK(cache.stats().evictions == 2);
    CHECK(cache.stats().hits == 2);
  }
}
