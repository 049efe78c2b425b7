#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <vector>

using namespace lazygraph;

namespace {
using Launch = LaunchOp<float, const float*, float*, int>;
using Fill = FillOp<float>;
using DeviceCopy = DeviceCopyOp<float>;
using Zeros = decltype(zeros<float>(4));
using Upload = UploadOp<float>;
}  // namespace

// Primitive ops: launches, device copies, fills and values opt in; allocations and host copies never do.
static_assert(GraphNode<Launch>);
static_assert(GraphNode<Fill>);
static_assert(GraphNode<DeviceCopy>);
static_assert(GraphNode<ValueOp<int>>);
static_assert(DeviceOp<Zeros> && !GraphNode<Zeros> && is_allocation_v<Zeros>);
static_assert(!GraphNode<decltype(ones<int>(4))>);
static_assert(!GraphNode<decltype(empty<double>(4))>);
static_assert(!GraphNode<decltype(dup(DeviceSpan<const float>{}))>);
static_assert(!GraphNode<decltype(from_host(std::vector<float>{}))>);
static_assert(DeviceOp<Upload> && !GraphNode<Upload> && is_host_transfer_v<Upload>);
static_assert(!GraphNode<DownloadOp<float>>);
static_assert(!DeviceOp<int> && !DeviceOp<std::vector<float>>);

// A composite is a GraphNode exactly when all of its parts are.
static_assert(GraphNode<SequenceOp<Launch, Fill>>);
static_assert(GraphNode<AllOp<Launch, Fill, DeviceCopy>>);
static_assert(!GraphNode<SequenceOp<Launch, Zeros>> && contains_allocation_v<SequenceOp<Launch, Zeros>>);
static_assert(!GraphNode<AllOp<Fill, SequenceOp<Fill, Zeros>>>);
static_assert(contains_allocation_v<AllOp<Fill, SequenceOp<Fill, Zeros>>>);
static_assert(!GraphNode<SequenceOp<Upload, Launch>> && contains_host_transfer_v<SequenceOp<Upload, Launch>>);
static_assert(GraphNode<MapOp<ValueOp<int>, int (*)(int)>>);

// Outputs: `>>` gives the right-hand op's, `all` a tuple (void as Unit) or void, map its function's.
static_assert(std::is_same_v<SequenceOp<Fill, ValueOp<int>>::Output, int>);
static_assert(std::is_same_v<AllOp<Fill, ValueOp<int>>::Output, std::tuple<Unit, int>>);
static_assert(std::is_void_v<AllOp<Fill, Launch>::Output>);
static_assert(std::is_same_v<Zeros::Output, DeviceBuffer<float>>);
