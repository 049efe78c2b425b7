// A program of another project using an installed (or subproject) lazygraph, built by each consumer test. It needs
// no GPU: it exits 0 after its checks pass and prints what it found.
//   - The core library: it includes the umbrella header, builds an op (which never touches the GPU), calls into the
//     library, and asks whether there is a GPU.
//   - With LAZYGRAPH_CONSUMER_NN=1 (the consumer links liblazygraph_nn: lazygraph_nn.pc, lazygraph::nn or
//     dependency('lazygraph_nn')), the models library too: it writes a small seeded checkpoint (config.json and
//     model.safetensors) in a temporary folder and opens it with nn::DecoderCheckpoint::open, which checks every
//     tensor on the host, then checks that a folder without config.json is refused with nn::CheckpointError (an
//     exception thrown in the library and caught by its type here).
#include <lazygraph/lazygraph.hpp>

#include <cstdio>
#include <string>

#if LAZYGRAPH_CONSUMER_NN
#include <lazygraph/nn/checkpoint.hpp>
#include <lazygraph/nn/kernels.hpp>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include <unistd.h>
#endif

namespace lg = lazygraph;

namespace {

#if LAZYGRAPH_CONSUMER_NN
/// Removes the folder when it goes out of scope, quietly (a destructor never throws).
class ScratchFolder {
 public:
  explicit ScratchFolder(std::filesystem::path path) : path_(std::move(path)) {}
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  ~ScratchFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

/// Writes and opens a checkpoint; prints what it checked, or what failed. Returns whether every check passed.
bool use_models_library() {
  namespace nn = lg::nn;
  nn::DecoderConfig config;
  config.d = 128;
  config.heads = 4;
  config.layers = 2;
  config.ffn = 256;
  config.vocab = 512;
  config.context = 64;
  const ScratchFolder folder(std::filesystem::temp_directory_path() /
                             ("lazygraph-consumer-" + std::to_string(::getpid())));
  nn::save_seeded_checkpoint(folder.path(), config);
  const nn::DecoderCheckpoint checkpoint = nn::DecoderCheckpoint::open(folder.path());
  const nn::DecoderConfig& got = checkpoint.config();
  const auto& sources = checkpoint.sources();
  const bool same = got.d == config.d && got.heads == config.heads && got.layers == config.layers &&
                    got.ffn == config.ffn && got.vocab == config.vocab &&
                    sources.size() == nn::decoder_tensors(config).size() &&
                    std::ranges::none_of(sources, [](const nn::TensorInfo* t) { return t == nullptr; });
  if (!same) {
    std::printf("consumer: the checkpoint read back differs from the one written in %s\n", folder.path().c_str());
    return false;
  }
  bool refused = false;
  const std::filesystem::path empty = folder.path() / "empty";
  std::filesystem::create_directory(empty);
  try {
    (void)nn::DecoderCheckpoint::open(empty);
  } catch (const nn::CheckpointError& e) {
    refused = std::string(e.what()).find("config.json") != std::string::npos;
    if (!refused) std::printf("consumer: the CheckpointError does not name config.json: %s\n", e.what());
  }
  if (!refused) return false;
  std::printf(
      "consumer: lazygraph_nn linked, %zu embedded kernel modules; opened a seeded checkpoint: %zu tensors of "
      "%d layers checked, a folder without config.json refused\n",
      nn::kernel_set().sources.size(), sources.size(), got.layers);
  return !nn::kernel_set().sources.empty();
}
#endif

}  // namespace

int main() {
  auto op = lg::zeros<float>(1024);  // lazy: describes an allocation, allocates nothing
  static_assert(lg::DeviceOp<decltype(op)>);
  static_assert(!lg::GraphNode<decltype(op)>, "an allocation is never recordable into a graph");
  const std::size_t kernels = lg::core_kernels().sources.size();
  std::string why;
  const bool gpu = lg::gpu_available(&why);
  std::printf("consumer: lazygraph linked, %zu embedded kernel modules; GPU: %s\n", kernels,
              gpu ? "available" : why.c_str());
  bool ok = kernels > 0;
#if LAZYGRAPH_CONSUMER_NN
  try {
    ok = use_models_library() && ok;
  } catch (const lg::Error& e) {
    std::printf("consumer: %s\n", e.what());
    ok = false;
  }
#endif
  return ok ? 0 : 1;
}
