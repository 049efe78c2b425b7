// The tensor-parallel decoder over the GPUs of one process (nn/tensor_parallel_decoder.hpp): its rank threads (host);
// its refusals; on a machine with two or more GPUs, two ranks against the single-GPU Decoder on every path (skipped,
// saying so, with one GPU). A rank of one, bit for bit against the Decoder, is tests/nn/decoder_rank.cpp's.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn.hpp>
#include <lazygraph/nn/prefill.hpp>
#include <lazygraph/nn/reference.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/gpu.hpp"
#include "common/nccl.hpp"
#include "common/nn.hpp"
#include "common/small_decoder.hpp"

namespace lg = lazygraph;
using lg::half;

namespace {
/// Ranks on GPUs 0 .. n-1, with a kernel library each.
struct TwoGpus {
  std::vector<lg::Communicator> comms;
  std::vector<lg::KernelLibrary> libraries;
  std::vector<const lg::KernelLibrary*> pointers;
};

/// Two ranks on GPUs 0 and 1 (`most` 4: four on a machine with four GPUs or more), or none (with a message saying
/// why).
bool two_gpus(TwoGpus& out, int most = 2) {
  if (!lgtest::have_two_ranks()) return false;
  const int n = most >= 4 && lg::Device::count() >= 4 ? 4 : 2;
  std::vector<lg::Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back(lg::Device::get(i));
  out.libraries.reserve(devices.size());  // pointers to them follow
  out.comms = lg::Communicator::create_all(devices);
  for (const lg::Device& d : devices) out.libraries.push_back(lg::nn::kernel_library(d));
  for (const lg::KernelLibrary& l : out.libraries) out.pointers.push_back(&l);
  return true;
}

/// The largest relative difference of two logit rows.
template <class T>
double differ(const std::vector<T>& a, const std::vector<T>& b) {
  return lg::nn::relative_error(lg::nn::widen(a), lg::nn::widen(b));
}
/// Steps `tokens` (positions 0, 1, ...) through both decoders, then a batch of three sequences: the logits within fp16
/// rounding of each other every time. The tensor-parallel decoder's greedy tokens.
std::vector<int> check_steps_and_batch(lg::nn::TensorParallelDecoder& tp, lg::nn::Decoder& one,
                                       const std::vector<int>& tokens) {
  std::vector<int> greedy;
  for (int position = 0; position < static_cast<int>(tokens.size()); ++position) {
    CAPTURE(position);
    greedy.push_back(tp.forward({tokens[static_cast<std::size_t>(position)], position}));
    (void)one.forward({tokens[static_cast<std::size_t>(position)], position});
    CHECK(differ(tp.logits(), one.logits()) < 1e-2);
  }
  const std::vector<lg::nn::TokenAt> rows{{3, 0}, {40, 1}, {500, 2}};
  (void)tp.forward_batch(rows);
  (void)one.forward_batch(rows);
  for (int r = 0; r < 3; ++r) CHECK(differ(tp.logits(r), one.logits(r)) < 1e-2);
  return greedy;
}
}  // namespace

TEST_CASE("rank threads run a call on every rank at once, one call at a time, and rethrow the lowest rank's error") {
  lg::nn::detail::RankThreads threads(3);
  // At once: each rank waits for all three to have arrived (a rank run after another would wait for ever; a bound
  // turns that into a failure).
  std::atomic<int> arrived{0};
  std::vector<std::thread::id> ids(3);
  std::vector<int> calls(3, 0);
  threads.run([&](int r) {
    ids[static_cast<std::size_t>(r)] = std::this_thread::get_id();
    ++calls[static_cast<std::size_t>(r)];
    ++arrived;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (arrived.load() < 3 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  });
  CHECK(arrived.load() == 3);
  CHECK(calls == std::vector<int>{1, 1, 1});
  CHECK((ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2] && ids[0] != std::this_thread::get_id()));
  // Errors: the lowest rank's, after every rank has finished.
  std::atomic<int> finished{0};
  CHECK_THROWS_WITH_AS(threads.run([&](int r) {
    ++finished;
    if (r > 0) throw lg::UsageError("rank " + std::to_string(r));
  }),
                       "rank 1", lg::UsageError);
  CHECK(finished.load() == 3);
  // Two callers: their calls do not interleave (each sees every rank of its own call before the other's starts).
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  const auto call = [&] {
    for (int k = 0; k < 50; ++k) {
      threads.run([&](int) {
        if (++inside > 3) overlapped = true;
        std::this_thread::yield();
        --inside;
      });
    }
  };
  std::thread other(call);
  call();
  other.join();
  CHECK_FALSE(overlapped.load());
  CHECK_NOTHROW(threads.run([](int) {}));  // still usable after an error
}

TEST_SUITE("gpu") {
  TEST_CASE(
      "a tensor-parallel decoder refuses, before any GPU work, a config that does not split and a library "
      "per rank missing") {
    if (!lgtest::have_nccl()) return;
    const std::vector<lg::Communicator> comms = lg::Communicator::create_all(std::vector<lg::Device>{lgtest::device()});
    lg::nn::DecoderConfig c = lgtest::small_decoder();
    c.backend = lg::nn::DecoderBackend::persistent;
    const std::vector<const lg::KernelLibrary*> libraries{&lgtest::nn_kernels()};
    CHECK_THROWS_WITH_AS(lg::nn::TensorParallelDecoder(comms, libraries, c), doctest::Contains("graph backend"),
                         lg::UsageError);
    CHECK_THROWS_AS(
        lg::nn::TensorParallelDecoder(comms, std::vector<const lg::KernelLibrary*>{}, lgtest::small_decoder()),
        lg::UsageError);
  }

  TEST_CASE(
      "a tensor-parallel decoder over two GPUs (four where the machine has them) follows the Decoder within rounding "
      "on every path") {
    TwoGpus gpus;
    if (!two_gpus(gpus, 4)) return;
    const auto ranks = static_cast<int>(gpus.comms.size());
    MESSAGE("ranks: " << ranks);
    // (fused, symmetric memory, peer all-reduce, in the projections' kernels): the default, unfused, the peer
    // all-reduce as a kernel of its own, plain memory over NCCL, NCCL's symmetric kernels.
    struct Variant {
      bool fused, symmetric, peer, in_projections;
    };
    for (const Variant v :
         {Variant{true, true, true, true}, Variant{false, true, true, true}, Variant{true, true, true, false},
          Variant{true, false, false, false}, Variant{true, true, false, false}}) {
      const bool fused = v.fused;
      CAPTURE(fused);
      CAPTURE(v.symmetric);
      CAPTURE(v.peer);
      CAPTURE(v.in_projections);
      lg::nn::DecoderConfig c = lgtest::small_decoder(ranks, 3);  // a kv head per rank
      c.fused = fused;
      c.prefill_chunk = 0;
      lg::nn::TensorParallelDecoder tp(
          gpus.comms, gpus.pointers, c,
          lg::nn::TensorParallelOptions{
              .symmetric_memory = v.symmetric, .peer_all_reduce = v.peer, .fused_peer_all_reduce = v.in_projections});
      std::string why;
      CHECK(tp.peer_all_reduce() == (v.peer && lg::PeerExchange::supported(gpus.comms, &why)));
      lg::nn::Decoder one(lgtest::stream(), lgtest::nn_kernels(), c);
      // Steps and a batch: the same inputs for both, the logits within fp16 rounding of the partial sums.
      const std::vector<int> tokens{5, 77, 300, 12, 9, 401, 33, 250};
      const std::vector<int> greedy = check_steps_and_batch(tp, one, tokens);
      // A prompt through the step graphs equals the same tokens stepped one at a time, bit for bit with two ranks
      // (their sums are one addition, in either order the same) and through peer memory (which adds in rank order);
      // NCCL may add more ranks in another order.
      tp.reset();
      const int after_prompt = tp.prefill(tokens);
      const std::vector<half> prompt_logits = tp.logits();
      CHECK(after_prompt == greedy.back());
      one.reset();
      (void)one.prefill(tokens);
      CHECK(differ(prompt_logits, one.logits()) < 1e-2);
      tp.reset();
      int last = -1;
      for (int position = 0; position < static_cast<int>(tokens.size()); ++position) {
        last = tp.forward({tokens[static_cast<std::size_t>(position)], position});
      }
      CHECK(last == after_prompt);
      const std::vector<half> stepped = tp.logits();
      if (ranks == 2 || tp.peer_all_reduce()) {
        for (std::size_t i = 0; i < stepped.size(); ++i) REQUIRE(stepped[i].bits == prompt_logits[i].bits);
      } else {
        CHECK(differ(stepped, prompt_logits) < 1e-2);
      }
      // generate equals forward's steps.
      const std::vector<int> generated = tp.generate(last, 10, -1, 8);
      REQUIRE(generated.size() == 10);
      tp.reset();
      for (int position = 0; position < 8; ++position)
        (void)tp.forward({tokens[static_cast<std::size_t>(position)], position});
      int token = last;
      for (int i = 0; i < 10; ++i) {
        token = tp.forward({token, 8 + i});
        CHECK(token == generated[static_cast<std::size_t>(i)]);
      }
      // The loop stops on every rank at the stop token (its first appearance), which it returns last.
      const int stop = generated[3];
      const auto first_stop = std::find(generated.begin(), generated.end(), stop);
      CHECK(tp.generate(last, 10, stop, 8) == std::vector<int>(generated.begin(), std::next(first_stop)));
      // Sampling: every rank draws the same token, and generate draws what forward draws.
      tp.set_sampling({.temperature = 0.9F, .top_k = 50, .seed = 7U});
      const std::vector<int> drawn = tp.generate(9, 6, -1, 20);
      int t = 9;
      for (int i = 0; i < 6; ++i) {
        t = tp.forward({t, 20 + i});
        CHECK(t == drawn[static_cast<std::size_t>(i)]);
      }
      tp.replay();  // every rank's step graph, alone
    }
  }

  TEST_CASE(
      "a tensor-parallel decoder over two GPUs (four where the machine has them) runs quantized weights within "
      "rounding "
      "of the quantized Decoder") {
    TwoGpus gpus;
    if (!two_gpus(gpus, 4)) return;
    const auto ranks = static_cast<int>(gpus.comms.size());
    MESSAGE("ranks: " << ranks);
    lg::nn::DecoderConfig c = lgtest::small_decoder(ranks, 3);
    c.prefill_chunk = 0;
    // Four ranks hold 32 columns of Wo each: a step of int8, not of int4 (64 columns).
    lg::nn::DecoderQuantization q;
    q.attention = lg::nn::QuantizedFormat{.kind = lg::nn::WeightFormat::int8_channel};
    q.mlp = lg::nn::QuantizedFormat{.kind = lg::nn::WeightFormat::int4_group, .group = 32, .asymmetric = true};
    q.lm_head = lg::nn::QuantizedFormat{.kind = lg::nn::WeightFormat::int4_group, .group = 64};
    // Each rank's share of the seeded weights quantized whole on its own GPU, and the whole on GPU 0.
    const auto quantized = [&](const lg::Stream& s, const lg::KernelLibrary& library) {
      const lg::nn::DeviceQuantizer quantizer(library);
      return lg::nn::quantize_decoder_weights(s, quantizer,
                                              lg::nn::DecoderWeights::generate(s, lg::nn::Kernels(library), c), c, q);
    };
    for (const bool peer : {true, false}) {
      CAPTURE(peer);
      std::vector<lg::nn::DecoderWeights> shares;
      for (int r = 0; r < ranks; ++r) {
        const lg::Stream s(gpus.comms[static_cast<std::size_t>(r)].device());
        shares.push_back(
            lg::nn::shard_decoder_weights(s, quantized(s, *gpus.pointers[static_cast<std::size_t>(r)]), c, r, ranks));
      }
      lg::nn::TensorParallelDecoder tp(gpus.comms, gpus.pointers, c, std::move(shares),
                                       lg::nn::TensorParallelOptions{.peer_all_reduce = peer});
      lg::nn::Decoder one(lgtest::stream(), lgtest::nn_kernels(), c, quantized(lgtest::stream(), lgtest::nn_kernels()));
      const std::vector<int> tokens{5, 77, 300, 12, 9, 401, 33, 250};
      (void)check_steps_and_batch(tp, one, tokens);
      // A prompt, then generate: its tokens are forward's, step by step.
      tp.reset();
      one.reset();
      const int last = tp.prefill(tokens);
      (void)one.prefill(tokens);
      CHECK(differ(tp.logits(), one.logits()) < 1e-2);
      const std::vector<int> generated = tp.generate(last, 6, -1, 8);
      REQUIRE(generated.size() == 6);
      tp.reset();
      (void)tp.prefill(tokens);
      int token = last;
      for (int i = 0; i < 6; ++i) {
        token = tp.forward({token, 8 + i});
        CHECK(token == generated[static_cast<std::size_t>(i)]);
      }
    }
  }

  TEST_CASE("a tensor-parallel decoder over two GPUs runs prompts on tensor cores within rounding of the Decoder") {
    TwoGpus gpus;
    if (!two_gpus(gpus)) return;
    lg::nn::DecoderConfig c = lgtest::small_decoder(2);
    c.heads = 2;  // head_dim 64, which the flash-attention kernels take; one head and one kv head per rank
    c.prefill_chunk = 32;
    std::string why;
    if (!lg::nn::prefill_on_tensor_cores(c, gpus.comms[0].device().compute_capability(), &why)) {
      MESSAGE("skipped: " << why);
      return;
    }
    lg::nn::TensorParallelDecoder tp(gpus.comms, gpus.pointers, c);
    lg::nn::Decoder one(lgtest::stream(), lgtest::nn_kernels(), c);
    CHECK(tp.rank(1).prefill_fallback_reason().empty());
    // 37 tokens: a chunk of 32 rows on tensor cores, then 5 through the step graphs; then 20 more from position 37,
    // one chunk padded to its bucket's 32 rows.
    std::vector<int> prompt;
    for (int i = 0; i < 37; ++i) prompt.push_back((i * 53 + 5) % c.vocab);
    CHECK(tp.prefill(prompt) == one.prefill(prompt));
    CHECK(differ(tp.logits(), one.logits()) < 1e-2);
    const std::vector<int> more(prompt.begin(), prompt.begin() + 20);
    CHECK(tp.prefill(more, 37) == one.prefill(more, 37));
    CHECK(differ(tp.logits(), one.logits()) < 1e-2);
    // The keys and values the chunks wrote serve the steps after them.
    int token = 3;
    for (int position = 57; position < 62; ++position) {
      CAPTURE(position);
      const int got = tp.forward({token, position});
      CHECK(got == one.forward({token, position}));
      CHECK(differ(tp.logits(), one.logits()) < 1e-2);
      token = got;
    }
  }

  TEST_CASE_TEMPLATE(
      "a tensor-parallel mixture of experts over two GPUs, each expert's width split, follows float64 and the Decoder "
      "on every path",
      T, half, lg::bfloat16) {
    TwoGpus gpus;
    if (!two_gpus(gpus)) return;
    const double bound = std::same_as<T, half> ? 1e-2 : 4e-2;
    // Qwen3-MoE's routing from token 7 with seed 41: routes clear of ties in float64 by 0.07
    // (tests/nn/moe_decoder.cpp), far more than the ranks' partial sums move a logit, so both decoders route as float64
    // does.
    lg::nn::DecoderConfig routed = lgtest::small_decoder(2, 1, 41);
    routed.moe = {8, 2, 64, true};
    routed.qk_norm = true;
    {
      lg::nn::BasicTensorParallelDecoder<T> tp(gpus.comms, gpus.pointers, routed);
      lg::nn::BasicDecoder<T> one(lgtest::stream(), lgtest::nn_kernels(), routed);
      lg::nn::DecoderReference reference(routed, std::same_as<T, half> ? lg::nn::DType::f16 : lg::nn::DType::bf16);
      int token = 7;
      for (int p = 0; p < 10; ++p) {
        CAPTURE(p);
        const int next = tp.forward({token, p});
        CHECK(next == one.forward({token, p}));
        const std::vector<double> want = reference.step(token, p);
        CHECK(lg::nn::relative_error(lg::nn::widen(tp.logits()), want) < bound);
        CHECK(differ(tp.logits(), one.logits()) < bound);
        token = next;
      }
      CHECK(reference.route_margin() > 0.02);
    }
    // Every expert chosen (top 8 of 8), so that no near tie routes a row otherwise on the two decoders whatever the
    // tokens: batches, prompts on tensor cores (head_dim 64) where the GPU has them, and generate.
    lg::nn::DecoderConfig c = lgtest::small_decoder(2, 3);
    c.moe = {8, 8, 64, true};
    c.heads = 2;  // one head and one kv head per rank
    c.prefill_chunk = 32;
    lg::nn::BasicTensorParallelDecoder<T> tp(gpus.comms, gpus.pointers, c);
    lg::nn::BasicDecoder<T> one(lgtest::stream(), lgtest::nn_kernels(), c);
    CHECK(tp.rank(1).prefill_fallback_reason() == one.prefill_fallback_reason());
    const std::vector<int> tokens{5, 77, 300, 12, 9, 401, 33, 250};
    for (int position = 0; position < static_cast<int>(tokens.size()); ++position) {
      CAPTURE(position);
      (void)tp.forward({tokens[static_cast<std::size_t>(position)], position});
      (void)one.forward({tokens[static_cast<std::size_t>(position)], position});
      CHECK(differ(tp.logits(), one.logits()) < bound);
    }
    const std::vector<lg::nn::TokenAt> rows{{3, 0}, {40, 1}, {500, 2}};
    (void)tp.forward_batch(rows);
    (void)one.forward_batch(rows);
    for (int r = 0; r < 3; ++r) CHECK(differ(tp.logits(r), one.logits(r)) < bound);
    // 37 tokens: a chunk of 32 rows (on tensor cores where the GPU has them), then 5 more.
    std::vector<int> prompt;
    for (int i = 0; i < 37; ++i) prompt.push_back((i * 53 + 5) % c.vocab);
    tp.reset();
    one.reset();
    const int last = tp.prefill(prompt);
    (void)one.prefill(prompt);
    CHECK(differ(tp.logits(), one.logits()) < bound);
    // generate's tokens are forward's, step by step.
    const std::vector<int> generated = tp.generate(last, 6, -1, 37);
    REQUIRE(generated.size() == 6);
    tp.reset();
    (void)tp.prefill(prompt);
    int token = last;
    for (int i = 0; i < 6; ++i) {
      token = tp.forward({token, 37 + i});
      CHECK(token == generated[static_cast<std::size_t>(i)]);
    }
    // int8 experts, each rank's share (32 rows of every expert's W1 and W3, 32 columns of its W2) cut out of the stacks
    // quantized whole on its GPU: steps, a batch and a prompt within rounding of the one-GPU decoder's int8 experts.
    lg::nn::DecoderQuantization q;
    q.mlp = lg::nn::QuantizedFormat{.kind = lg::nn::WeightFormat::int8_channel, .scale_type = lg::nn::scale_type_of<T>};
    const auto quantized = [&](const lg::Stream& s, const lg::KernelLibrary& library) {
      return lg::nn::quantize_decoder_weights(
          s, lg::nn::DeviceQuantizer(library),
          lg::nn::BasicDecoderWeights<T>::generate(s, lg::nn::BasicKernels<T>(library), c), c, q);
    };
    std::vector<lg::nn::BasicDecoderWeights<T>> shares;
    for (int r = 0; r < 2; ++r) {
      const lg::Stream s(gpus.comms[static_cast<std::size_t>(r)].device());
      shares.push_back(
          lg::nn::shard_decoder_weights(s, quantized(s, *gpus.pointers[static_cast<std::size_t>(r)]), c, r, 2));
    }
    lg::nn::BasicTensorParallelDecoder<T> tq(gpus.comms, gpus.pointers, c, std::move(shares));
    lg::nn::BasicDecoder<T> oq(lgtest::stream(), lgtest::nn_kernels(), c,
                               quantized(lgtest::stream(), lgtest::nn_kernels()));
    for (int position = 0; position < 4; ++position) {
      CAPTURE(position);
      (void)tq.forward({tokens[static_cast<std::size_t>(position)], position});
      (void)oq.forward({tokens[static_cast<std::size_t>(position)], position});
      CHECK(differ(tq.logits(), oq.logits()) < bound);
    }
    (void)tq.forward_batch(rows);
    (void)oq.forward_batch(rows);
    for (int r = 0; r < 3; ++r) CHECK(differ(tq.logits(r), oq.logits(r)) < bound);
    tq.reset();
    oq.reset();
    CHECK(tq.prefill(prompt) == oq.prefill(prompt));
    CHECK(differ(tq.logits(), oq.logits()) < bound);
  }
}
