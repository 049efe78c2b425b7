// tp_rank: one process of a tensor-parallel decoder, as a deployment runs one per GPU; tp_processes.py starts one per
// GPU and checks what they wrote. Not a test by itself.
//
//   tp_rank --probe                          exit 0 when this machine has 2+ GPUs and NCCL, printing how many and
//                                            whether the first RANKS (4 where there are, else 2) all reach each
//                                            other's memory ("4 peer" or "2 no-peer"); else 77 saying why
//   tp_rank DIR RANK RANKS MODE [JOIN_MS]
//
// Rank 0 saves a seeded checkpoint in DIR/model, then writes a new CommunicatorId to DIR/id; the other ranks wait for
// it (60 s). Every rank joins (Communicator from the id, within JOIN_MS, default 60000), loads its share of the
// checkpoint (load_decoder_rank) and, by MODE:
//   run       steps 8 tokens, a batch of 3 sequences, a 12-token prompt and generate(10), greedy then sampled; writes
//             every token it got to DIR/tokens-RANK.txt. Rank 0 also loads the whole model on its GPU (load_decoder)
//             and checks each step's logits against it (relative error below 1e-2) and the prompt's and generate's
//             tokens against forward's, printing "rank 0 agrees with the one-GPU decoder". Every rank prints which
//             all-reduce it runs: "through peer memory" (the default where the GPUs allow: PeerExchange::create) or
//             "through NCCL".
//   run-nccl  run with TensorParallelOptions::peer_all_reduce off: NCCL's all-reduces.
//   mismatch  like run's batch, but rank 1 steps 2 sequences where the others step 3: each rank must throw the
//             UsageError of check_same_collectives (exit 3, its message on stderr) instead of hanging in NCCL.
//   join      the rank joins and stops (the test runs rank 0 of 2 alone: it must fail within JOIN_MS, exit 4).
//   peer-layout  no model: the ranks make a PeerExchange (PeerExchange::create's path), rank 1 as a rank of another
//             build whose sum slots are an eighth of this build's; every rank must refuse with the same reason,
//             printing "rank R refused: REASON" (exit 0; exit 1 when it made an exchange).
//   peer-short  the same, rank 1 describing itself as this build but allocating sum slots of 16 outputs: the others
//             must find the mapping too small, and every rank refuse with the same reason.
// Exit: 0 done; 1 failed (message on stderr); 2 bad arguments; 3 a UsageError; 4 a TimeoutError; 77 skipped.
#include <lazygraph/detail/driver/peer_descriptor.hpp>
#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn.hpp>

#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace lg = lazygraph;
namespace nn = lazygraph::nn;

namespace {

nn::DecoderConfig model() {
  nn::DecoderConfig c;  // small, with GQA, split 2 or 4 ways
  c.d = 256;
  c.heads = 8;
  c.kv_heads = 4;
  c.layers = 3;
  c.ffn = 512;
  c.vocab = 1024;
  c.context = 128;
  c.seed = 77;
  return c;
}

/// Every rank makes these calls in this order (their collectives meet); only rank 0 has `whole` to compare with.
std::vector<int> run(nn::Decoder& rank, nn::Decoder* whole) {
  std::vector<int> got;
  const std::vector<int> tokens{5, 77, 300, 12, 9, 401, 33, 250};
  for (int p = 0; p < 8; ++p) {
    got.push_back(rank.forward({tokens[static_cast<std::size_t>(p)], p}));
    if (whole != nullptr) {
      (void)whole->forward({tokens[static_cast<std::size_t>(p)], p});
      const double e = nn::relative_error(nn::widen(rank.logits()), nn::widen(whole->logits()));
      if (!(e < 1e-2)) throw std::runtime_error("step " + std::to_string(p) + ": relative error " + std::to_string(e));
    }
  }
  const std::vector<nn::TokenAt> rows{{3, 8}, {40, 0}, {500, 0}};
  for (const int t : rank.forward_batch(rows)) got.push_back(t);
  std::vector<int> prompt;
  for (int i = 0; i < 12; ++i) prompt.push_back((i * 37 + 11) % 1024);
  const int first = rank.prefill(prompt, 0, 1);  // sequence 1, through the step graphs
  got.push_back(first);
  int t = -1;
  for (int p = 0; p < 12; ++p) t = rank.forward({prompt[static_cast<std::size_t>(p)], p});  // sequence 0, stepped
  if (t != first) throw std::runtime_error("prefill's token differs from forward's");
  const std::vector<int> generated = rank.generate(first, 10, -1, 12);
  got.insert(got.end(), generated.begin(), generated.end());
  t = first;
  for (int i = 0; i < 10; ++i) {
    t = rank.forward({t, 12 + i});
    if (t != generated[static_cast<std::size_t>(i)]) throw std::runtime_error("generate differs from forward");
  }
  rank.set_sampling({.temperature = 0.8F, .top_k = 64, .seed = 5U});
  const std::vector<int> drawn = rank.generate(7, 8, -1, 40);
  got.insert(got.end(), drawn.begin(), drawn.end());
  return got;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string why;
    if (argc == 2 && std::string(argv[1]) == "--probe") {
      if (!lg::gpu_available(&why) || !lg::nccl_available(&why)) {
        std::printf("skipped: %s\n", why.c_str());
        return 77;
      }
      if (lg::Device::count() < 2) {
        std::printf("skipped: one process per GPU needs 2 GPUs; this machine has %d\n", lg::Device::count());
        return 77;
      }
      const int count = lg::Device::count();
      const int ranks = count >= 4 ? 4 : 2;
      bool peer = true;
      for (int a = 0; a < ranks; ++a) {
        for (int b = 0; b < ranks; ++b) peer &= a == b || lg::Device::get(a).can_access_peer(lg::Device::get(b));
      }
      std::printf("%d %s\n", count, peer ? "peer" : "no-peer");
      return 0;
    }
    if (argc < 5) {
      std::fprintf(stderr,
                   "usage: tp_rank --probe | tp_rank DIR RANK RANKS run|run-nccl|mismatch|join|peer-layout|peer-short "
                   "[JOIN_MS]\n");
      return 2;
    }
    const std::filesystem::path dir = argv[1];
    const int rank = std::stoi(argv[2]);
    const int ranks = std::stoi(argv[3]);
    const std::string mode = argv[4];
    const std::chrono::milliseconds join(argc > 5 ? std::stoi(argv[5]) : 60000);
    const nn::DecoderConfig config = model();
    const bool peer_mode = mode == "peer-layout" || mode == "peer-short";
    if (rank == 0) {
      if (!peer_mode) nn::save_seeded_checkpoint(dir / "model", config);
      lg::CommunicatorId::create().write_file(dir / "id");
    }
    const lg::CommunicatorId id = lg::CommunicatorId::read_file(dir / "id", std::chrono::seconds(60));
    const lg::Device device = lg::Device::get(rank);
    const lg::Communicator comm(device, rank, ranks, id, join);
    if (mode == "join") return 0;
    if (peer_mode) {
      lg::detail::PeerLayout advertised;
      lg::detail::PeerLayout allocated;
      if (rank == 1 && mode == "peer-layout") {
        advertised.sum_capacity /= 8;
        allocated = advertised;
      }
      if (rank == 1 && mode == "peer-short") allocated.sum_capacity = 16;
      std::string reason;
      const std::optional<lg::PeerExchange> exchange =
          lg::detail::PeerExchangeMaker::create(comm, advertised, allocated, &reason, std::chrono::seconds(60));
      if (exchange) {
        std::fprintf(stderr, "tp_rank %d: made an exchange with a rank of another layout\n", rank);
        return 1;
      }
      std::printf("rank %d refused: %s\n", rank, reason.c_str());
      return 0;
    }
    const lg::Stream stream(device);
    const lg::KernelLibrary library = nn::kernel_library(device);
    nn::LoadOptions options;
    options.max_batch = 3;
    options.progress = false;
    const nn::TensorParallelOptions parallel{.peer_all_reduce = mode != "run-nccl"};
    nn::Decoder decoder = nn::load_decoder_rank<lg::half>(stream, library, dir / "model", comm, options, parallel);
    std::printf("rank %d all-reduces through %s\n", rank, decoder.peer_all_reduce() ? "peer memory" : "NCCL");
    if (mode == "mismatch") {
      std::vector<nn::TokenAt> rows{{3, 0}, {40, 0}, {500, 0}};
      if (rank == 1) rows.pop_back();
      (void)decoder.forward_batch(rows);
      std::fprintf(stderr, "tp_rank %d: the mismatched batch ran\n", rank);
      return 1;
    }
    std::optional<nn::Decoder> whole;
    if (rank == 0) whole.emplace(nn::load_decoder<lg::half>(stream, library, dir / "model", options));
    const std::vector<int> got = run(decoder, whole ? &*whole : nullptr);
    std::ofstream out(dir / ("tokens-" + std::to_string(rank) + ".txt"));
    for (const int t : got) out << t << "\n";
    if (rank == 0) std::printf("rank 0 agrees with the one-GPU decoder\n");
    return 0;
  } catch (const lg::UsageError& e) {
    std::fprintf(stderr, "tp_rank: UsageError: %s\n", e.what());
    return 3;
  } catch (const lg::TimeoutError& e) {
    std::fprintf(stderr, "tp_rank: TimeoutError: %s\n", e.what());
    return 4;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tp_rank: %s\n", e.what());
    return 1;
  }
}
