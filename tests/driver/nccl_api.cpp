// NCCL loaded at run time (detail/driver/nccl_api.hpp): result names, version text, and the path of a machine
// without NCCL (suite no-nccl: LAZYGRAPH_NCCL_LIBRARY names a missing file).
#include <doctest/doctest.h>

#include <lazygraph/detail/driver/nccl_api.hpp>
#include <lazygraph/lazygraph.hpp>

#include <string>

using namespace lazygraph;
namespace nccl = lazygraph::detail::nccl;

TEST_CASE("NCCL results are named as nccl.h names them, unknown ones by number") {
  CHECK(nccl::result_name(0) == "ncclSuccess");
  CHECK(nccl::result_name(5) == "ncclInvalidUsage");
  CHECK(nccl::result_name(6) == "ncclRemoteError");
  CHECK(nccl::result_name(42) == "ncclResult_t 42");
}

TEST_CASE("NCCL version codes read as major.minor.patch in both of NCCL's encodings") {
  CHECK(nccl::version_text(22803) == "2.28.3");
  CHECK(nccl::version_text(21805) == "2.18.5");
  CHECK(nccl::version_text(2708) == "2.7.8");
}

TEST_CASE("nccl_available either loads NCCL or says where it looked and how to point at one") {
  std::string why;
  if (nccl_available(&why)) {
    CHECK_FALSE(nccl_version().empty());
    CHECK(nccl_library().find("nccl") != std::string::npos);
  } else {
    CHECK(why.find("cannot load NCCL") != std::string::npos);
    CHECK(why.find("LAZYGRAPH_NCCL_LIBRARY") != std::string::npos);
  }
}

TEST_CASE("NcclError carries the API, the result and the object in its message") {
  const NcclError e("ncclAllReduce", 5, "ncclInvalidUsage", "invalid usage", "all_reduce sum of 4 float32");
  CHECK(e.api() == "ncclAllReduce");
  CHECK(e.code() == 5);
  CHECK(e.code_name() == "ncclInvalidUsage");
  CHECK(std::string(e.what()) ==
        "ncclAllReduce failed: ncclInvalidUsage (invalid usage) [all_reduce sum of 4 float32]");
}

TEST_SUITE("no-nccl") {
  TEST_CASE("without NCCL, nccl_available is false and names the path it was told to use") {
    std::string why;
    CHECK_FALSE(nccl_available(&why));
    CHECK(why.find("/nonexistent/libnccl.so.2") != std::string::npos);
    CHECK(why.find("LAZYGRAPH_NCCL_LIBRARY") != std::string::npos);
  }

  TEST_CASE("without NCCL, every entry point throws NcclUnavailable, and the rest of lazygraph still works") {
    CHECK_THROWS_WITH_AS(nccl_version(), doctest::Contains("cannot load NCCL"), NcclUnavailable);
    CHECK_THROWS_AS(CommunicatorId::create(), NcclUnavailable);
    CHECK_THROWS_AS((void)nccl_library(), NcclUnavailable);
    CHECK_FALSE(nccl_bounded_join());
    // Ids travel without NCCL: a rank that only relays one needs no library.
    const std::vector<std::byte> bytes(128, std::byte{7});
    CHECK(CommunicatorId::from_bytes(bytes).bytes().size() == 128);
  }

  TEST_CASE("set_nccl_library replaces a path that failed, and its failure names set_nccl_library") {
    set_nccl_library("/nonexistent/other/libnccl.so.2");
    std::string why;
    CHECK_FALSE(nccl_available(&why));
    CHECK(why.find("/nonexistent/other/libnccl.so.2") != std::string::npos);
    CHECK(why.find("set_nccl_library") != std::string::npos);
  }
}
