// Host tests of lazygraph::nn::StopStrings: text is printed as soon as it cannot begin a stop string, and nothing
// of a stop string is, wherever the pieces of text cut it.
#include <doctest/doctest.h>

#include <lazygraph/nn/stop_strings.hpp>

#include <stdexcept>
#include <string>
#include <vector>

using lazygraph::nn::StopStrings;

namespace {

/// What push() returns for each piece, joined by "|", then "#" and finish().
std::string pushed(StopStrings& stops, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& piece : pieces) out += stops.push(piece) + "|";
  return out + "#" + stops.finish();
}

}  // namespace

TEST_CASE("stop strings hold back only text that may begin one, and end the text before the first that appears") {
  StopStrings stops({"</s>", "\n\nUser:"});
  CHECK(pushed(stops, {"Hello", " wor", "ld<", "/", "s", ">", "never"}) == "Hello| wor|ld|||||#");
  CHECK(stops.stopped());
  CHECK(stops.which() == "</s>");

  StopStrings other({"</s>", "\n\nUser:"});
  CHECK(pushed(other, {"a\n", "\nUse", "d to"}) == "a||\n\nUsed to|#");
  CHECK_FALSE(other.stopped());
  CHECK(other.which().empty());

  StopStrings at_end({"STOP"});
  CHECK(pushed(at_end, {"abc", "ST"}) == "abc||#ST");
}

TEST_CASE("the stop string complete first is the one that stops, and of those complete at once the one begun first") {
  StopStrings stops({"abc", "ab", "zz"});
  CHECK(stops.push("xxabcd zz") == "xx");
  CHECK(stops.which() == "ab");
  StopStrings same_end({"b", "ab"});
  CHECK(same_end.push("xab") == "x");
  CHECK(same_end.which() == "ab");
  CHECK_THROWS_AS(StopStrings({"ok", ""}), std::invalid_argument);
}
