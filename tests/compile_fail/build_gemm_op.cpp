// expect-error: CudaGraph::build: this op \(or a part of it\) submits work to the stream itself
#include <lazygraph/lazygraph.hpp>

namespace lg = lazygraph;

// cuBLASLt enqueues its kernels on a stream itself: a gemm can be captured (CudaGraph::capture, scope), not built.
void misuse(const lg::Device& d, const lg::Gemm<lg::half>& gemm, lg::DeviceSpan<lg::half> y,
            lg::DeviceSpan<const lg::half> x, lg::DeviceSpan<const lg::half> w) {
  auto g = lg::CudaGraph<>::build(d, gemm(y, x, w));
}
