#!/usr/bin/env python3
"""Trains a small byte-level Llama with Hugging Face transformers, for measuring quantization on a trained model.

Random weights give logits whose top values are close together, so a quantized model's top-1 agreement with fp16 on
them says little about a real model. This trains a real one, offline, on what every Python installation holds: the
standard library's source files (bytes as tokens, vocabulary 256). The last 5 % of the text is held out; the token ids
of a stretch of it are written for bench_quantized_decoder --tokens.

  usage: train_tiny_llama.py OUT_DIR [--seconds S] [--seed N]
  writes OUT_DIR/model (config.json and model.safetensors, fp16, written by save_pretrained) and OUT_DIR/tokens.txt

Prints the held-out loss (nats per byte) before and after training. Needs torch with a GPU and transformers.
"""
import argparse
import math
import os
import sysconfig
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def corpus() -> bytes:
    root = sysconfig.get_paths()["stdlib"]
    parts = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "dist-packages", "__pycache__", "test", "tests"))
        for name in sorted(files):
            if name.endswith(".py"):
                with open(os.path.join(folder, name), "rb") as f:
                    parts.append(f.read())
    return b"\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--seconds", type=float, default=150.0, help="training time budget")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    text = corpus()
    data = torch.frombuffer(bytearray(text), dtype=torch.uint8).to("cuda").long()
    split = int(len(data) * 0.95)
    train, held_out = data[:split], data[split:]
    print(f"corpus: {len(text) / 1e6:.1f} MB of Python source, {len(held_out) / 1e6:.2f} MB held out")

    config = LlamaConfig(
        vocab_size=256,
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=512,
        rope_theta=10000.0,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to("cuda")
    sequence, batch = 256, 64
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.1)

    def held_out_loss() -> float:
        model.eval()
        losses = []
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            for i in range(0, min(len(held_out) - sequence - 1, 64 * sequence * 16), 64 * sequence):
                starts = torch.arange(i, i + 64 * sequence, sequence, device="cuda")
                starts = starts[starts + sequence + 1 <= len(held_out)]
                x = torch.stack([held_out[s : s + sequence] for s in starts.tolist()])
                losses.append(model(input_ids=x, labels=x).loss.item())
        model.train()
        return sum(losses) / len(losses)

    print(f"held-out loss before training: {held_out_loss():.3f} nats/byte")
    start = time.monotonic()
    step = 0
    warmup = 200
    while True:
        elapsed = time.monotonic() - start
        if elapsed >= args.seconds:
            break
        progress = elapsed / args.seconds
        lr = 2e-3 * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        for group in optimizer.param_groups:
            group["lr"] = lr
        starts = torch.randint(0, len(train) - sequence - 1, (batch,), device="cuda")
        x = torch.stack([train[s : s + sequence] for s in starts.tolist()])
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        if step % 500 == 0:
            print(f"step {step}: loss {loss.item():.3f}, {elapsed:.0f} s")
    print(f"trained {step} steps of {batch} x {sequence} bytes in {time.monotonic() - start:.0f} s")
    print(f"held-out loss after training: {held_out_loss():.3f} nats/byte")

    os.makedirs(args.out, exist_ok=True)
    model.to(torch.float16).save_pretrained(os.path.join(args.out, "model"))
    # A held-out stretch from a line start: what the benchmark teacher-forces.
    text_held_out = bytes(held_out[: 1 << 16].tolist())
    at = text_held_out.index(b"\n", 1000) + 1
    with open(os.path.join(args.out, "tokens.txt"), "w") as f:
        f.write(" ".join(str(b) for b in text_held_out[at : at + 300]) + "\n")
    print(f"wrote {args.out}/model and {args.out}/tokens.txt")


if __name__ == "__main__":
    main()
