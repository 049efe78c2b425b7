// Tensor-parallel decode (issues 16, 39): the SwiGLU MLP stack (4096, 11008, 8: 2.2 GB of fp16 weights) and decoders (d
// 4096 x 8 layers, vocab 32000: 3.1 GB; the TinyLlama and Llama-3.2-1B shapes; a 7B-class shape, d 4096 x 32 layers,
// ffn 11008, vocab 32000: 13 GB) split over 1 GPU, over 2, and over every GPU of a machine with more, one rank each.
// Each row: the step's graph replay time (every rank's graph launched on its stream, timed with CUDA events on rank
// 0's; median of 31 samples of 10 replays), the weight bytes each rank reads, the fraction of rank 0's copy ceiling
// that reading them reached, and tokens/s. Beside each step, a graph of the step's collectives alone (the same
// all-reduces and all-gather on the same sizes, nothing between them): its replay time and its share of the step, the
// latency that NCCL adds. With more than one rank, the MLP twice: x in plain device memory, and x in NCCL symmetric
// memory (TensorParallelOptions::symmetric_memory; NCCL 2.27+ runs its low-latency symmetric kernels there); the
// decoders four times: NCCL in plain memory (the first decoder only), NCCL in symmetric memory (the logits too), the
// all-reduces through peer memory (TensorParallelOptions::peer_all_reduce) in kernels of their own, and the default,
// the peer all-reduces after the projections inside the projections' kernels (fused_peer_all_reduce); the logits in
// symmetric memory. The Llama-3.2-1B shape also with int8 and int4 weights (the peer all-reduce after the quantized
// projections, or inside them). With one GPU only the TP = 1 rows run.
//
// --moe: mixtures of experts, each expert's width split over the ranks: the first 12 of Qwen3-30B-A3B's 48 layers and
// the first 8 of Mixtral-8x7B's 32, over 1 GPU and 2 (the default all-reduces), one token at position 255; the bytes
// are those a one-row step reads (attention, routers, the chosen experts, the LM head), per rank.
//
// --processes: the Llama-3.2-1B and 7B-class shapes split over 2 GPUs (and 4 where there are) as deployments run them,
// one process per GPU (this program started again for each rank: --rank R RANKS DIR, joined through a CommunicatorId
// file in DIR), each rank's seeded share loaded as a rank Decoder with its all-reduces through NCCL symmetric memory,
// then through peer memory mapped across the processes (PeerExchange::create, inside the projections); rank 0 times
// its step graph while every rank replays its own (the same count). Then, in this process for comparison in the same
// run, the same split over the same GPUs from threads (TensorParallelDecoder, its default: peer memory inside the
// projections) and one GPU (TP 1).
#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn.hpp>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ceiling.hpp"
#include "cli.hpp"
#include "model_shapes.hpp"

namespace lg = lazygraph;

namespace {

/// Median seconds per replay of every rank's graph (each launched on its own stream; events on rank 0's).
double replay_seconds(lg::MultiDeviceGraph& graph) {
  return bench::median_seconds(
      graph.graph(0).stream(), 10,
      [&](int) {
        for (int r = 0; r < static_cast<int>(graph.size()); ++r) graph.graph(r).launch_on(graph.graph(r).stream());
      },
      [&] { graph.synchronize(); });
}

/// Median seconds per step of every rank of `model` (each rank's one-row step graph launched on its stream).
double decoder_seconds(lg::nn::TensorParallelDecoder& model) {
  model.replay(1);  // captures every rank's step graph at once (a rank's capture meets the others' in NCCL)
  std::vector<lg::CudaGraph<>*> graphs;
  graphs.reserve(static_cast<std::size_t>(model.ranks()));
  for (int r = 0; r < model.ranks(); ++r) graphs.push_back(&model.rank(r).graph(1));
  return bench::median_seconds(
      graphs[0]->stream(), 10,
      [&](int) {
        for (lg::CudaGraph<>* g : graphs) g->launch_on(g->stream());
      },
      [&] {
        for (lg::CudaGraph<>* g : graphs) g->synchronize();
      });
}

struct Ranks {
  std::vector<lg::Device> devices;
  std::vector<lg::Communicator> comms;
  std::vector<std::unique_ptr<lg::KernelLibrary>> owned;
  std::vector<const lg::KernelLibrary*> libraries;
};

Ranks make_ranks(int n) {
  Ranks r;
  for (int d = 0; d < n; ++d) r.devices.push_back(lg::Device::get(d));
  r.comms = lg::Communicator::create_all(r.devices);
  for (const lg::Device& d : r.devices) {
    r.owned.push_back(std::make_unique<lg::KernelLibrary>(lg::nn::kernel_library(d)));
    r.libraries.push_back(r.owned.back().get());
  }
  return r;
}

/// A graph of a step's collectives alone: per rank `reduces` all-reduces of `d` elements (held as the module holds
/// x: in symmetric memory or not), then, when `gathered` is not 0, an all-gather of `gathered / ranks` elements
/// each; the replay's median seconds.
double collectives_seconds(const Ranks& r, int reduces, std::size_t d, std::size_t gathered, bool symmetric,
                           bool peer = false) {
  const std::size_t n = r.comms.size();
  bool is_symmetric = false;
  std::vector<lg::DeviceSpan<lg::half>> x =
      lg::nn::detail::reduction_buffers<lg::half>(r.comms, d, symmetric, &is_symmetric);
  std::vector<lg::PeerExchange> exchanges;
  std::vector<lg::nn::Kernels> kernels;
  if (peer) {
    exchanges = lg::PeerExchange::create_all(r.comms);
    for (const lg::KernelLibrary* l : r.libraries) kernels.emplace_back(*l);
  }
  std::vector<lg::DeviceBuffer<lg::half>> part;
  std::vector<lg::DeviceBuffer<lg::half>> all;
  for (const lg::Device& dev : r.devices) {
    part.emplace_back(dev, std::max<std::size_t>(gathered / n, 1));
    all.emplace_back(dev, std::max<std::size_t>(gathered, 1));
  }
  lg::MultiDeviceGraph graph = lg::MultiDeviceGraph::capture(r.comms, [&](int rank, lg::Scope& s) {
    const auto i = static_cast<std::size_t>(rank);
    for (int k = 0; k < reduces; ++k) {
      if (peer) {
        s.record(lg::nn::peer_all_reduce(kernels[i], exchanges[i], x[i]));
      } else {
        s.record(lg::all_reduce(r.comms[i], x[i]));
      }
    }
    if (gathered != 0) {
      s.record(lg::all_gather<lg::half>(r.comms[i], part[i].cview(), all[i].view()));
    }
  });
  return replay_seconds(graph);
}

void row(const std::string& model, int n, double seconds, double bytes_per_rank, double ceiling, double tp1,
         double collectives) {
  const std::string alone = collectives > 0 ? std::to_string(collectives * 1e6).substr(0, 6) : "-";
  const std::string share = collectives > 0 ? std::to_string(collectives / seconds).substr(0, 4) : "-";
  std::printf("| %s | %d | %.1f | %.0f | %.2f | %.0f | %s | %s | %s |\n", model.c_str(), n, seconds * 1e6,
              bytes_per_rank * 1e-6, bytes_per_rank / seconds / ceiling, 1.0 / seconds,
              tp1 > 0 ? (std::to_string(seconds / tp1).substr(0, 5) + "x").c_str() : "-", alone.c_str(), share.c_str());
}

/// The decoder `dec` with weight-only quantized weights (int8; int4 in groups of 128 with an int8 LM head, as issue
/// 36 times on one GPU) over each rank count of `sizes`: each rank's share of the seeded weights quantized whole on
/// its GPU (shard_decoder_weights), the all-reduces through peer memory in kernels of their own and inside the
/// quantized projections' kernels (qgemv_all_reduce), the logits in symmetric memory. Bytes read: the weights less the
/// embedding table.
void quantized_rows(const std::string& name, const lg::nn::DecoderConfig& dec, const std::vector<int>& sizes,
                    double ceiling) {
  const lg::nn::QuantizedFormat int8{.kind = lg::nn::WeightFormat::int8_channel};
  const lg::nn::QuantizedFormat int4{.kind = lg::nn::WeightFormat::int4_group, .group = 128};
  struct Variant {
    const char* label = "";
    lg::nn::DecoderQuantization q;
  };
  for (const Variant& v :
       {Variant{"int8", {int8, int8, int8, {}}}, Variant{"int4 g128, LM head int8", {int4, int4, int8, {}}}}) {
    const double bytes =
        static_cast<double>(lg::nn::decoder_device_bytes(dec, v.q)) - 2.0 * dec.vocab * static_cast<double>(dec.d);
    double tp1 = 0;
    for (const int n : sizes) {
      for (const bool fused : {false, true}) {
        if (n == 1 && !fused) continue;  // one rank: no peers
        Ranks r = make_ranks(n);
        std::vector<lg::nn::DecoderWeights> shares;
        for (int i = 0; i < n; ++i) {
          const lg::Stream s(r.devices[static_cast<std::size_t>(i)]);
          const lg::KernelLibrary& library = *r.libraries[static_cast<std::size_t>(i)];
          const lg::nn::DeviceQuantizer quantizer(library);
          shares.push_back(lg::nn::shard_decoder_weights(
              s,
              lg::nn::quantize_decoder_weights(
                  s, quantizer, lg::nn::DecoderWeights::generate(s, lg::nn::Kernels(library), dec), dec, v.q),
              dec, i, n));
        }
        lg::nn::TensorParallelDecoder model(
            r.comms, r.libraries, dec, std::move(shares),
            lg::nn::TensorParallelOptions{.symmetric_memory = true, .fused_peer_all_reduce = fused});
        for (int p = 0; p < 256; ++p) (void)model.forward({(p * 37) % dec.vocab, p});
        const double t = decoder_seconds(model);
        const std::string how = n == 1  ? ""
                                : fused ? ", peer all-reduce in the projections"
                                        : ", peer all-reduce kernel";
        std::string label = name;
        label += ", ";
        label += v.label;
        label += how;
        row(label, n, t, bytes / n, ceiling, n == 1 ? 0 : tp1, 0);
        if (n == 1) tp1 = t;
      }
    }
  }
}

/// Median seconds per step of a rank's one-row step graph, replayed on its stream (every rank the same count).
double rank_seconds(lg::nn::Decoder& rank) {
  lg::CudaGraph<>& g = rank.graph(1);
  return bench::median_seconds(g.stream(), 10, [&](int) { g.launch_on(g.stream()); });
}

const std::vector<bench::ModelShape>& process_shapes() {
  static const std::vector<bench::ModelShape> shapes{
      {"Llama-3.2-1B shape", bench::llama32_1b().config},
      {"7B class (4096x32, 11008, 32k vocab)", bench::seven_b_class().config}};
  return shapes;
}

lg::nn::DecoderConfig process_config(const bench::ModelShape& shape) {
  lg::nn::DecoderConfig dec = shape.config;
  dec.context = 1024;
  return dec;
}

/// Bytes a one-row step of `c` reads on each of `n` ranks: the attention's and the chosen experts' shares, the LM
/// head's rows, and the router and the norms whole (the embedding's one row and the KV cache left out).
double moe_step_bytes(const lg::nn::DecoderConfig& c, int n) {
  const double d = c.d;
  const double attention = (2.0 * c.q_dim() + 2.0 * c.kv_dim()) * d;
  const double experts = 3.0 * c.moe.experts_per_token * c.moe.expert_width * d;
  const double whole = c.moe.experts * d + 2.0 * d + (c.qk_norm ? 2.0 * c.head_dim() : 0.0);
  return 2.0 * (c.layers * ((attention + experts) / n + whole) + (c.vocab * d) / n + d);
}

/// The --moe rows (see the file comment).
void moe_rows(const std::vector<int>& sizes, double ceiling) {
  lg::nn::DecoderConfig qwen = bench::qwen3_30b_a3b().config;
  qwen.layers = 12;
  lg::nn::DecoderConfig mixtral = bench::mixtral_8x7b().config;
  mixtral.layers = 8;
  const std::vector<bench::ModelShape> shapes{{"Qwen3-30B-A3B shape, 12 of 48 layers", qwen},
                                              {"Mixtral-8x7B shape, 8 of 32 layers", mixtral}};
  for (const bench::ModelShape& shape : shapes) {
    lg::nn::DecoderConfig dec = shape.config;
    dec.context = 1024;
    double tp1 = 0;
    for (const int n : sizes) {
      Ranks r = make_ranks(n);
      lg::nn::TensorParallelDecoder model(r.comms, r.libraries, dec);
      for (int p = 0; p < 256; ++p) (void)model.forward({(p * 37) % dec.vocab, p});
      const double t = decoder_seconds(model);
      row(shape.name + (model.peer_all_reduce() ? ", peer all-reduce" : ""), n, t, moe_step_bytes(dec, n), ceiling,
          n == 1 ? 0 : tp1, 0);
      if (n == 1) tp1 = t;
    }
  }
}

/// One rank of --processes (see the file comment): rank 0 prints a row per shape and path.
int run_rank(int rank, int ranks, const std::filesystem::path& dir, double ceiling) {
  const lg::Device device = lg::Device::get(rank);
  if (rank == 0) lg::CommunicatorId::create().write_file(dir / "id");
  const lg::CommunicatorId id = lg::CommunicatorId::read_file(dir / "id", std::chrono::seconds(60));
  const lg::Communicator comm(device, rank, ranks, id);
  const lg::Stream s(device);
  const lg::KernelLibrary library = lg::nn::kernel_library(device);
  for (const bench::ModelShape& shape : process_shapes()) {
    const lg::nn::DecoderConfig dec = process_config(shape);
    for (const bool peer : {false, true}) {
      std::string why;
      std::optional<lg::PeerExchange> exchange;
      if (peer) exchange = lg::PeerExchange::create(comm, &why);
      lg::nn::Decoder d(s, library, dec,
                        lg::nn::shard_decoder_weights(
                            s, lg::nn::DecoderWeights::generate(s, lg::nn::Kernels(library), dec), dec, rank, ranks),
                        comm, lg::nn::TensorParallelOptions{.symmetric_memory = true, .peer_all_reduce = peer},
                        exchange ? &*exchange : nullptr);
      for (int p = 0; p < 256; ++p) (void)d.forward({(p * 37) % dec.vocab, p});
      const double t = rank_seconds(d);
      if (rank != 0) continue;
      const std::string how = d.peer_all_reduce()    ? ", processes, peer memory across them"
                              : peer                 ? ", processes, NCCL (no peer memory: " + why + ")"
                              : d.symmetric_memory() ? ", processes, NCCL symmetric"
                                                     : ", processes, NCCL";
      row(shape.name + how, ranks, t, static_cast<double>(dec.weight_bytes()) / ranks, ceiling, 0, 0);
    }
  }
  return 0;
}

/// --processes: starts this program once per rank, for 2 ranks and for 4 where there are, waits for them, then the
/// in-process comparison rows.
int run_processes(int gpus, double ceiling) {
  std::vector<int> sizes{2};
  if (gpus >= 4) sizes.push_back(4);
  for (const int ranks : sizes) {
    std::string dir_template = (std::filesystem::temp_directory_path() / "bench_tp.XXXXXX").string();
    if (mkdtemp(dir_template.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    const std::filesystem::path dir = dir_template;
    std::vector<pid_t> children;
    for (int r = 0; r < ranks; ++r) {
      std::vector<std::string> args{"bench_tensor_parallel", "--rank", std::to_string(r), std::to_string(ranks),
                                    dir.string()};
      std::vector<char*> argv;
      argv.reserve(args.size() + 1);
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      pid_t pid = 0;
      if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) {
        throw std::runtime_error("posix_spawn failed");
      }
      children.push_back(pid);
    }
    int failed = 0;
    for (const pid_t pid : children) {
      int status = 0;
      (void)waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
    }
    std::filesystem::remove_all(dir);
    if (failed != 0) throw std::runtime_error(std::to_string(failed) + " rank processes failed (their errors above)");
  }
  sizes.insert(sizes.begin(), 1);
  for (const bench::ModelShape& shape : process_shapes()) {
    const lg::nn::DecoderConfig dec = process_config(shape);
    double tp1 = 0;
    for (const int n : sizes) {
      Ranks r = make_ranks(n);
      lg::nn::TensorParallelDecoder model(r.comms, r.libraries, dec, lg::nn::TensorParallelOptions{});
      for (int p = 0; p < 256; ++p) (void)model.forward({(p * 37) % dec.vocab, p});
      const double t = decoder_seconds(model);
      row(shape.name + (n == 1 ? ", one process" : ", one process, threads, peer memory"), n, t,
          static_cast<double>(dec.weight_bytes()) / n, ceiling, n == 1 ? 0 : tp1, 0);
      if (n == 1) tp1 = t;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--rank") {  // one rank of --processes, started by it
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    try {
      const int rank = std::stoi(argv[2]);
      const double ceiling = rank == 0 ? bench::copy_ceiling(lg::Stream(lg::Device::get(0))) : 1.0;
      return run_rank(rank, std::stoi(argv[3]), argv[4], ceiling);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_tensor_parallel --rank %s: %s\n", argv[2], e.what());
      return 1;
    }
  }
  const bool processes = argc == 2 && std::string(argv[1]) == "--processes";
  const bool quantized_only = argc == 2 && std::string(argv[1]) == "--quantized";
  const bool moe_only = argc == 2 && std::string(argv[1]) == "--moe";
  if (processes || quantized_only || moe_only) argc = 1;
  constexpr const char* usage =
      "usage: bench_tensor_parallel [--processes | --quantized | --moe]\n"
      "The SwiGLU MLP (4096, 11008, 8) and decoders (d 4096 x 8 layers; TinyLlama and Llama-3.2-1B shapes; a\n"
      "7B-class shape) split over 1 GPU, 2, and every GPU of a machine with more: step time, weight bytes per rank,\n"
      "fraction of the copy ceiling, tokens/s. A benchmark, not a test.\n"
      "  --processes  the Llama-3.2-1B and 7B-class shapes over 2 GPUs (and 4 where there are), one process per\n"
      "               GPU, all-reducing through NCCL and through peer memory across the processes; then the same\n"
      "               split in one process and one GPU, for comparison.\n"
      "  --quantized  only the Llama-3.2-1B shape with int8 and int4 weights (the rows after its dense ones).\n"
      "  --moe        only mixtures of experts (12 layers of the Qwen3-30B-A3B shape, 8 of Mixtral-8x7B's), each\n"
      "               expert's width split over the ranks; MB per rank: the bytes a one-row step reads.\n"
      "Exit status: 0 done, 1 failed, 2 usage error, 77 skipped (no GPU or no NCCL; the reason is printed).\n";
  if (auto code = example::handle_arguments(argc, argv, usage)) return *code;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each row as it is measured, also into a file
  if (example::skip_without_gpu("bench_tensor_parallel")) return example::exit_skipped;
  std::string why;
  if (!lg::nccl_available(&why)) {
    std::printf("bench_tensor_parallel: skipped, no NCCL: %s\n", why.c_str());
    return example::exit_skipped;
  }
  try {
    const int gpus = lg::Device::count();
    const lg::Stream s0(lg::Device::get(0));
    const double ceiling = bench::copy_ceiling(s0);
    std::printf("bench_tensor_parallel: %d x %s, NCCL %s; copy ceiling (rank 0) %.2f TB/s\n\n", gpus,
                lg::Device::get(0).name().c_str(), lg::nccl_version().c_str(), ceiling * 1e-12);
    std::printf(
        "| model | TP | step us | MB per rank | of ceiling | tokens/s | vs TP 1 | collectives alone us | their share "
        "|\n|---|---|---|---|---|---|---|---|---|\n");
    if (processes) {
      if (gpus < 2) {
        std::printf("bench_tensor_parallel --processes: skipped, one process per GPU needs 2 GPUs\n");
        return example::exit_skipped;
      }
      return run_processes(gpus, ceiling);
    }
    std::vector<int> sizes{1};
    if (gpus > 1) sizes.push_back(2);
    if (gpus > 2) sizes.push_back(gpus);
    if (moe_only) {
      moe_rows(sizes, ceiling);
      return 0;
    }
    if (quantized_only) {
      lg::nn::DecoderConfig dec = bench::llama32_1b().config;
      dec.context = 1024;
      quantized_rows("Llama-3.2-1B shape", dec, sizes, ceiling);
      return 0;
    }

    lg::nn::MlpConfig mlp;
    mlp.d = 4096;
    mlp.ffn = 11008;
    mlp.layers = 8;
    double mlp_tp1 = 0;
    for (const int n : sizes) {
      for (const bool symmetric : {false, true}) {
        if (n == 1 && symmetric) continue;  // one rank: NCCL copies, whatever the memory
        Ranks r = make_ranks(n);
        lg::nn::TensorParallelMlp model(r.comms, r.libraries, mlp, {.symmetric_memory = symmetric});
        const double t = replay_seconds(model.graph());
        const double c = collectives_seconds(r, mlp.layers, static_cast<std::size_t>(mlp.d), 0, symmetric);
        row(std::string("MLP 4096/11008/8") + (model.symmetric_memory() ? ", x symmetric" : ""), n, t,
            static_cast<double>(mlp.weight_bytes()) / n, ceiling, n == 1 ? 0 : mlp_tp1, c);
        if (n == 1) mlp_tp1 = t;
      }
    }

    // Decoders: the seeded weights split over the ranks (nn/decoder_rank.hpp), one token at position 255.
    lg::nn::DecoderConfig d4096;
    d4096.d = 4096;
    d4096.heads = 32;
    d4096.kv_heads = 8;
    d4096.layers = 8;
    d4096.ffn = 11008;
    d4096.vocab = 32000;
    const std::vector<bench::ModelShape> shapes{
        {"decoder 4096x8, 32k vocab", d4096},
        {"TinyLlama shape", bench::tinyllama().config},
        {"Llama-3.2-1B shape", bench::llama32_1b().config},
        {"7B class (4096x32, 11008, 32k vocab)", bench::seven_b_class().config}};
    for (const bench::ModelShape& shape : shapes) {
      lg::nn::DecoderConfig dec = shape.config;
      dec.context = 1024;
      double dec_tp1 = 0;
      for (const int n : sizes) {
        // NCCL's all-reduces with x and the logits in plain memory (the first shape only) and in NCCL symmetric
        // memory, and (the default) the peer all-reduce with the logits in symmetric memory. One rank: one row.
        // The peer all-reduce twice: as a kernel of its own after each projection, and (the default) inside the
        // projections' kernels.
        struct Variant {
          bool symmetric, peer, in_projections;
        };
        for (const Variant v : {Variant{false, false, false}, Variant{true, false, false}, Variant{true, true, false},
                                Variant{true, true, true}}) {
          if (n == 1 && (!v.symmetric || v.peer)) continue;
          if (&shape != &shapes.front() && !v.symmetric) continue;
          Ranks r = make_ranks(n);
          lg::nn::TensorParallelDecoder model(r.comms, r.libraries, dec,
                                              lg::nn::TensorParallelOptions{.symmetric_memory = v.symmetric,
                                                                            .peer_all_reduce = v.peer,
                                                                            .fused_peer_all_reduce = v.in_projections});
          for (int p = 0; p < 256; ++p) (void)model.forward({(p * 37) % dec.vocab, p});  // a 256-token context
          const double t = decoder_seconds(model);
          // Per step: the embedding's all-reduce, two per layer, the logits' all-gather. Inside the projections the
          // all-reduces have no kernel of their own to time alone: no number.
          const bool inside = model.peer_all_reduce() && v.in_projections;
          const double c = inside ? 0.0
                                  : collectives_seconds(r, 2 * dec.layers + 1, static_cast<std::size_t>(dec.d),
                                                        static_cast<std::size_t>(dec.vocab), model.symmetric_memory(),
                                                        model.peer_all_reduce());
          const std::string how = inside                     ? ", peer all-reduce in the projections"
                                  : model.peer_all_reduce()  ? ", peer all-reduce kernel"
                                  : model.symmetric_memory() ? ", NCCL symmetric"
                                                             : "";
          row(shape.name + how, n, t, static_cast<double>(dec.weight_bytes()) / n, ceiling, n == 1 ? 0 : dec_tp1, c);
          if (n == 1) dec_tp1 = t;
        }
      }
      if (&shape == &shapes[2]) quantized_rows(shape.name, dec, sizes, ceiling);
    }
    if (gpus == 1) std::printf("\none GPU: the TP = %s rows need a machine with more.\n", "N");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tensor_parallel: %s\n", e.what());
    return 1;
  }
}
