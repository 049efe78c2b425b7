#include <doctest/doctest.h>

#include <lazygraph/kernels.hpp>

using namespace lazygraph;

TEST_CASE("grid_for covers n elements with whole blocks, and at least one block") {
  static_assert(grid_for(1000, 256).grid.x == 4);
  static_assert(grid_for(1024, 256).grid.x == 4);
  static_assert(grid_for(1025, 256).grid.x == 5);
  CHECK(grid_for(0, 128).grid.x == 1);
  CHECK(grid_for(10, 128, 512).shared_bytes == 512);
  CHECK(grid_for(10, 128).block.volume() == 128);
}

TEST_CASE("grid_for refuses a grid of more than 2^32 - 1 blocks instead of truncating it") {
  CHECK(grid_for((std::size_t{1} << 32U) - 1, 1).grid.x == 0xffffffffU);
  CHECK_THROWS_WITH_AS((void)grid_for(std::size_t{1} << 32U, 1), doctest::Contains("grid-stride loop"), UsageError);
  CHECK_THROWS_AS((void)grid_for(std::size_t{1} << 45U, 256), UsageError);  // 2^37 blocks
  CHECK_THROWS_AS((void)grid_for(~std::size_t{0}, 1024), UsageError);       // n + block - 1 would wrap
}

TEST_CASE("early() switches on programmatic dependent launch and changes nothing else") {
  constexpr LaunchConfig plain = grid_for(1000, 128, 64);
  static_assert(!plain.early_launch);
  constexpr LaunchConfig e = early(plain);
  static_assert(e.early_launch);
  static_assert(e.grid.x == plain.grid.x && e.block.x == plain.block.x && e.shared_bytes == plain.shared_bytes);
}
