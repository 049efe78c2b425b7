// 04 graph DOT: write a graph with parallel branches as Graphviz DOT, and render it to PNG when `dot` is
// installed. Usage: 04_graph_dot [output.dot]
#include <lazygraph/lazygraph.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>

namespace lg = lazygraph;

namespace {

int run(int argc, char** argv) {
  std::string why;
  if (!lg::gpu_available(&why)) {
    std::printf("04_graph_dot: no GPU to run on (%s)\n", why.c_str());
    return 0;
  }
  const std::string path = argc > 1 ? argv[1] : "lazygraph_graph.dot";
  lg::Device gpu = lg::Device::first();
  lg::Stream stream = gpu.create_stream();
  lg::KernelLibrary kernels(gpu);
  auto axpy = kernels.get<void(float, const float*, float*, int)>("axpy");
  const int n = 1024;
  auto x = lg::ones<float>(n).sync_on(stream);
  auto a = lg::zeros<float>(n).sync_on(stream);
  auto b = lg::zeros<float>(n).sync_on(stream);
  const auto cfg = lg::grid_for(n, 256);
  auto graph = lg::CudaGraph<>::capture(
      stream, lg::fill(a.view(), 1.0F) >>
                  lg::all(axpy(cfg, 2.0F, x.cview(), a.view(), n), axpy(cfg, 3.0F, x.cview(), b.view(), n)) >>
                  lg::copy(b.view(), a.cview()));
  graph.write_dot(path);
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const bool ok = text.find("digraph") != std::string::npos && text.find("axpy") != std::string::npos;
  std::printf("wrote %s (%zu nodes, %zu bytes)\n", path.c_str(), graph.node_count(), text.size());
  if (std::system("command -v dot >/dev/null 2>&1") == 0) {
    const std::string png = path + ".png";
    if (std::system(("dot -Tpng '" + path + "' -o '" + png + "'").c_str()) == 0)
      std::printf("rendered %s\n", png.c_str());
  } else {
    std::printf("graphviz is not installed: no PNG\n");
  }
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "04_graph_dot: %s\n", e.what());
    return 1;
  }
}
