#pragma once
/// \file
/// nn's private part of the tensor-parallel rank's ops (decoder_rank.hpp): the op types its forms are made of.

#include <utility>

#include "lazygraph/driver/peer_exchange.hpp"
#include "lazygraph/nn/kernels.hpp"
#include "lazygraph/nn/peer_all_reduce.hpp"

namespace lazygraph::nn::detail {

/// The op type of peer_all_reduce over T: RankAllReduceOp's peer form.
template <Element T>
using PeerAllReduceOp = decltype(peer_all_reduce(std::declval<const BasicKernels<T>&>(),
                                                 std::declval<const PeerExchange&>(), std::declval<DeviceSpan<T>>()));

/// The op type of `a >> b` (RankProjectionOp's separate form: the projection, then the all-reduce).
template <class A, class B>
using SequenceOp = decltype(std::declval<A>() >> std::declval<B>());

}  // namespace lazygraph::nn::detail
