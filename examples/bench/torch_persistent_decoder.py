#!/usr/bin/env python3
"""PyTorch's torch.cuda.graph decode step beside lazygraph's two backends (bench_persistent_decoder).

Reads RESULTS_DIR/persistent_decoder.json, which bench_persistent_decoder writes, builds each decoder shape in PyTorch
(torch_models.TorchBatchDecoder: the same seeded fp16 weights, one row at the same position), times its step as a CUDA
graph replay and prints the table of all three with their fractions of the ceilings the C++ run measured:

    python3 examples/bench/torch_persistent_decoder.py RESULTS_DIR
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import WARMUP, TorchBatchDecoder, capture, median_us  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results_dir", help="folder holding persistent_decoder.json")
    with open(os.path.join(parser.parse_args().results_dir, "persistent_decoder.json")) as f:
        data = json.load(f)
    copy, read = data["copy_ceiling"], data["read_ceiling"]
    print(f"{data['gpu']}, torch {torch.__version__}: copy ceiling {copy * 1e-12:.2f} TB/s, read-only stream "
          f"{read * 1e-12:.2f} TB/s, one row at position {data['position']}\n")
    print("| decoder | graph step us | persistent step us | torch.cuda.graph step us | graph / torch | persistent / "
          "torch | graph of copy / read | persistent of copy / read | torch of copy / read |")
    print("|---|---|---|---|---|---|---|---|---|")
    with torch.inference_mode():
        for entry in data["decoders"]:
            model = TorchBatchDecoder(entry["config"], entry["config"]["seed"], 1)
            model.tok.fill_(7)
            model.pos.fill_(data["position"])
            graph, _ = capture(model.step)
            for _ in range(WARMUP):
                graph.replay()
            torch_us = median_us(graph.replay, 200)
            del model, graph
            torch.cuda.empty_cache()
            g, p, b = entry["graph_us"], entry["persistent_us"], entry["weight_bytes"]

            def of(us):
                rate = b / (us * 1e-6)
                return f"{rate / copy:.2f} / {rate / read:.2f}"

            print(f"| {entry['name']} | {g:.1f} | {p:.1f} | {torch_us:.1f} | {g / torch_us:.2f} | {p / torch_us:.2f} | "
                  f"{of(g)} | {of(p)} | {of(torch_us)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
