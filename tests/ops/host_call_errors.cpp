// HostCallErrors (ops/host_call_errors.hpp): the first exception a host call reported, kept until it is thrown
// once as HostCallError naming the call; a watched channel (a child graph's) reports through its parent's.
#include <doctest/doctest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "common/gpu.hpp"
#include "common/host_call_error.hpp"

using namespace lazygraph;

using lgtest::contains;
using lgtest::host_call_error_of;

TEST_CASE("HostCallErrors keeps the first error and throws it once as HostCallError naming the call") {
  HostCallErrors errors;
  CHECK_NOTHROW(errors.rethrow_pending());  // nothing pending
  errors.report("first call", std::make_exception_ptr(std::runtime_error("disk full")));
  errors.report("second call", std::make_exception_ptr(std::runtime_error("network down")));
  const std::string what = host_call_error_of([&] { errors.rethrow_pending(); });
  CHECK(contains(what, "first call"));
  CHECK(contains(what, "disk full"));
  CHECK_FALSE(contains(what, "second call"));
  CHECK_FALSE(contains(what, "network down"));
  CHECK_NOTHROW(errors.rethrow_pending());  // thrown once; the later error was dropped with it

  // After the pending one was thrown, the next report is kept again.
  errors.report("third call", std::make_exception_ptr(std::logic_error("bad state")));
  const std::string third = host_call_error_of([&] { errors.rethrow_pending(); });
  CHECK(contains(third, "third call"));
  CHECK(contains(third, "bad state"));
}

TEST_CASE("HostCallErrors describes an exception that is not a std::exception") {
  HostCallErrors errors;
  errors.report("odd", std::make_exception_ptr(42));
  const std::string what = host_call_error_of([&] { errors.rethrow_pending(); });
  CHECK(contains(what, "odd"));
  CHECK(contains(what, "not a std::exception"));
}

TEST_CASE("HostCallErrors rethrows what a watched channel keeps, once, and watches a channel only once") {
  HostCallErrors parent;
  auto child = std::make_shared<HostCallErrors>();
  parent.watch(child);
  parent.watch(child);  // once
  CHECK_NOTHROW(parent.rethrow_pending());
  child->report("in the child", std::make_exception_ptr(std::runtime_error("child failed")));
  const std::string what = host_call_error_of([&] { parent.rethrow_pending(); });
  CHECK(contains(what, "in the child"));
  CHECK(contains(what, "child failed"));
  CHECK_NOTHROW(parent.rethrow_pending());  // thrown once, through the parent
  CHECK_NOTHROW(child->rethrow_pending());  // and taken from the child
}
