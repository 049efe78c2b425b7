// 04 graph DOT: write a graph with parallel branches as Graphviz DOT, and render it to PNG when `dot` is
// installed. Usage: 04_graph_dot [OUTPUT.dot]
#include <lazygraph/lazygraph.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>

#include "cli.hpp"

namespace lg = lazygraph;

namespace {

int run(int argc, char** argv) {
  if (example::skip_without_gpu("04_graph_dot")) return example::exit_skipped;
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

constexpr const char* usage =
    "usage: 04_graph_dot [OUTPUT.dot]\n"
    "Writes a graph with parallel branches as Graphviz DOT (default lazygraph_graph.dot) and renders it to\n"
    "PNG when `dot` is installed.\n"
    "Exit status: 0 written, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

}  // namespace

int main(int argc, char** argv) {
  return example::main_of(argc, argv, "04_graph_dot", usage, 1, [&] { return run(argc, argv); });
}
