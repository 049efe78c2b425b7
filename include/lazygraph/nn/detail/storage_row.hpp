#pragma once
/// \file
/// nn's private part of quantized.hpp: the name of a quantized format's row of the storage table, which a
/// QuantizedLayout looks up once. Its definition is the library's own (src/nn/formats/storage_format.hpp).

namespace lazygraph::nn::detail {

/// One quantized format's row of the storage table (src/nn/formats/).
struct StorageFormat;

}  // namespace lazygraph::nn::detail
