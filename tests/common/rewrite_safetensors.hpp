#pragma once
// Checkpoint tests that break a saved folder on purpose: its model.safetensors (or config.json) read back, edited,
// written again.

#include "common/files.hpp"

#include <lazygraph/nn/llama_config.hpp>
#include <lazygraph/nn/safetensors.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace lgtest {

/// A tensor read back from a file, owning its bytes.
struct OwnedTensor {
  std::string name;
  lazygraph::nn::DType dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;
};

/// Rewrites `dir`/model.safetensors through `edit`, which may change, add or remove tensors.
inline void rewrite(const std::filesystem::path& dir, const std::function<void(std::vector<OwnedTensor>&)>& edit) {
  using namespace lazygraph::nn;
  std::vector<OwnedTensor> tensors;
  {
    const SafetensorsFile file = SafetensorsFile::open(dir / "model.safetensors");
    for (const TensorInfo& t : file.tensors()) {
      const auto bytes = file.data(t);
      tensors.push_back({t.name, t.dtype, t.shape, {bytes.begin(), bytes.end()}});
    }
  }
  edit(tensors);
  std::vector<TensorToWrite> out;
  out.reserve(tensors.size());
  for (const OwnedTensor& t : tensors) out.push_back({t.name, t.dtype, t.shape, t.bytes});
  write_safetensors(dir / "model.safetensors", out);
}

/// Rewrites `dir`/config.json through `edit`.
inline void rewrite_config(const std::filesystem::path& dir,
                           const std::function<void(lazygraph::nn::LlamaConfig&)>& edit) {
  lazygraph::nn::LlamaConfig c = lazygraph::nn::LlamaConfig::load(dir);
  edit(c);
  write_file(dir / "config.json", c.to_json());
}

}  // namespace lgtest
