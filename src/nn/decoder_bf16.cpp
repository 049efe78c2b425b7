// BasicDecoder and its weights and state for bf16: decoder_impl.hpp's templates instantiated beside decoder.cpp's
// fp16 ones, so that the two compile in parallel.
#include "decoder_impl.hpp"

namespace lazygraph::nn {

template struct BasicDecoderWeights<bfloat16>;
template struct BasicDecoderState<bfloat16>;
template class BasicDecoder<bfloat16>;

}  // namespace lazygraph::nn
