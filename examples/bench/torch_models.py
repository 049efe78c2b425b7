#!/usr/bin/env python3
"""PyTorch baseline for the lazygraph model benchmarks.

Builds the SwiGLU MLP stacks and the Llama-style decoder of docs/nn.md in PyTorch (fp16, CUDA),
with weights equal bit for bit to the C++ ones, times them eagerly and as CUDA graph replays, checks their
outputs against the C++ results and prints the comparison tables (the headline of the benchmark run).

Run on the GPU machine right after the C++ benchmark has written RESULTS_DIR/lazygraph.json and its raw
little-endian fp16 output files:

    python3 examples/bench/torch_models.py RESULTS_DIR

Also writes RESULTS_DIR/torch.json. Exit status 1 on an error or when an output differs from the C++ one by more
than REL_TOL; a missed speed target is only reported in the table.
"""
import argparse
import json
import math
import os
import statistics
import struct
import sys
import time

import torch
import torch.nn.functional as F

MASK32 = 0xFFFFFFFF
MUL1, MUL2 = 0x7FEB352D, 0x846CA68B
CHUNK = 1 << 24  # elements generated per pass
REL_TOL = 1e-2
WARMUP = 20
MLP_EPS = 1e-5
MLP_TARGETS = {(512, 1536, 16): 0.25, (1024, 4096, 8): 0.4, (4096, 11008, 4): 0.8}  # lg graph / torch graph <=
DECODER_TARGET = 2.0  # lg tokens/s / torch graph tokens/s >=
EMBED_ID, FINAL_GAIN_ID, LM_HEAD_ID, INPUT_ID = 1000000, 1000001, 1000002, 2000000


# ----------------------------------------------------------------------------- deterministic weights

def mix_host(x):
    """The README's mix on a Python int, wrapping modulo 2^32."""
    x &= MASK32
    x ^= x >> 16
    x = (x * MUL1) & MASK32
    x ^= x >> 15
    x = (x * MUL2) & MASK32
    return x ^ (x >> 16)


def mul32(x, c):
    """(x * c) mod 2^32 for an int64 tensor x in [0, 2^32): both partial products stay below 2^48."""
    high = ((x * (c >> 16)) & 0xFFFF) << 16
    return (x * (c & 0xFFFF) + high) & MASK32


def mix_device(x):
    """The README's mix on an int64 tensor holding uint32 values (right shifts of non-negative values)."""
    x = x ^ (x >> 16)
    x = mul32(x, MUL1)
    x = x ^ (x >> 15)
    x = mul32(x, MUL2)
    return x ^ (x >> 16)


def hash_range(seed, tensor, start, n):
    """h(start .. start+n-1) as an int64 CUDA tensor of uint32 values; key computed on the host."""
    key = mix_host(seed ^ mix_host(tensor))
    idx = torch.arange(start, start + n, dtype=torch.int64, device="cuda")
    return mix_device((idx + key) & MASK32)


def uniform(seed, tensor, n, start=0):
    """u(start .. start+n-1) as a float32 CUDA tensor; exact (a 24-bit integer times 2^-23, minus 1)."""
    return (hash_range(seed, tensor, start, n) >> 8).to(torch.float32) * 2.0 ** -23 - 1.0


def to_f32(x):
    """x rounded once to float32, returned as the (exactly equal) Python float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def make_tensor(seed, tensor, shape, scale=1.0, offset=0.0):
    """fp16 CUDA tensor of fp16(offset + scale * u(i)): float32 product, float32 sum, round to nearest even."""
    n = math.prod(shape)
    scale = to_f32(scale)  # exactly representable, so the float32 multiply below rounds once
    out = torch.empty(n, dtype=torch.float16, device="cuda")
    for start in range(0, n, CHUNK):
        count = min(CHUNK, n - start)
        v = uniform(seed, tensor, count, start) * scale
        if offset:
            v = v + offset
        out[start:start + count] = v.half()
    return out.view(*shape)


def matrix(seed, tensor, rows, cols):
    return make_tensor(seed, tensor, (rows, cols), 1.0 / math.sqrt(cols))


def gain(seed, tensor, n):
    return make_tensor(seed, tensor, (n,), 0.125, 1.0)


def check_test_vector():
    """The README's test vector, on the host and on the GPU, plus host/GPU agreement where key + i wraps."""
    expected = [0x5EA64753, 0x70D69901, 0x1743E551]
    key = mix_host(1234 ^ mix_host(7))
    host = [mix_host(key + i) for i in range(3)]
    device = hash_range(1234, 7, 0, 3).tolist()
    if host != expected or device != expected:
        raise RuntimeError(f"hash test vector failed: host {host}, device {device}, expected {expected}")
    for got, want in zip(uniform(1234, 7, 3).tolist(), [-0.26055062, -0.11845100, -0.81824052]):
        if abs(got - want) > 1e-7:
            raise RuntimeError(f"uniform test vector failed: {got} != {want}")
    key = mix_host(99 ^ mix_host(LM_HEAD_ID))
    start = (MASK32 + 1 - key - 2) % (MASK32 + 1)  # key + i crosses 2^32 inside the range
    host = [mix_host(key + start + i) for i in range(4)]
    if hash_range(99, LM_HEAD_ID, start, 4).tolist() != host:
        raise RuntimeError("hash: device and host disagree where key + i wraps")


# ----------------------------------------------------------------------------- models

def rms_norm(x, g, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).half() * g


def swiglu(h, w1, w3, w2):
    return F.linear(F.silu(F.linear(h, w1)) * F.linear(h, w3), w2)


class TorchMlp:
    """The SwiGLU MLP stack (d, ffn, layers); forward of a [1, d] fp16 residual stream."""

    def __init__(self, d, ffn, layers, seed):
        self.layers = [(gain(seed, 16 * i + 6, d), matrix(seed, 16 * i + 7, ffn, d),
                        matrix(seed, 16 * i + 8, ffn, d), matrix(seed, 16 * i + 9, d, ffn)) for i in range(layers)]

    def __call__(self, x):
        for g, w1, w3, w2 in self.layers:
            x = x + swiglu(rms_norm(x, g, MLP_EPS), w1, w3, w2)
        return x


class TorchDecoder:
    """The Llama-style decoder; step() reads the static tok/pos tensors and writes next_tok/logits (graph-safe)."""

    def __init__(self, cfg, seed):
        d, self.heads, ffn, vocab, ctx = cfg["d"], cfg["heads"], cfg["ffn"], cfg["vocab"], cfg["context"]
        self.d, self.hd, self.eps = d, d // self.heads, float(cfg["eps"])
        self.embedding = make_tensor(seed, EMBED_ID, (vocab, d))
        self.layers = []
        for i in range(cfg["layers"]):
            b = 16 * i
            self.layers.append({"g_attn": gain(seed, b + 1, d), "wq": matrix(seed, b + 2, d, d),
                                "wk": matrix(seed, b + 3, d, d), "wv": matrix(seed, b + 4, d, d),
                                "wo": matrix(seed, b + 5, d, d), "g_mlp": gain(seed, b + 6, d),
                                "w1": matrix(seed, b + 7, ffn, d), "w3": matrix(seed, b + 8, ffn, d),
                                "w2": matrix(seed, b + 9, d, ffn)})
        self.g_final = gain(seed, FINAL_GAIN_ID, d)
        self.lm_head = matrix(seed, LM_HEAD_ID, vocab, d)
        cache_shape = (cfg["layers"], self.heads, ctx, self.hd)
        self.k_cache = torch.zeros(cache_shape, dtype=torch.float16, device="cuda")
        self.v_cache = torch.zeros(cache_shape, dtype=torch.float16, device="cuda")
        exponent = torch.arange(0, self.hd, 2, dtype=torch.float32, device="cuda") / self.hd  # 2i / head_dim
        self.inv_freq = torch.pow(float(cfg["theta"]), -exponent)
        self.positions = torch.arange(ctx, dtype=torch.int64, device="cuda")
        self.scale = 1.0 / math.sqrt(self.hd)
        self.tok = torch.zeros(1, dtype=torch.int64, device="cuda")
        self.pos = torch.zeros(1, dtype=torch.int64, device="cuda")
        self.next_tok = torch.zeros(1, dtype=torch.int64, device="cuda")
        self.logits = torch.zeros(1, vocab, dtype=torch.float16, device="cuda")

    def reset(self):
        self.k_cache.zero_()
        self.v_cache.zero_()

    def rope(self, v, cos, sin):
        """Rotate pairs (2i, 2i+1) of every head in float32."""
        pairs = v.view(self.heads, self.hd // 2, 2).float()
        a, b = pairs[..., 0], pairs[..., 1]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).view(self.heads, self.hd).half()

    def attention(self, layer, q, k, v):
        keys, values = self.k_cache[layer], self.v_cache[layer]  # [heads, context, head_dim]
        keys.index_copy_(1, self.pos, k.view(self.heads, 1, self.hd))
        values.index_copy_(1, self.pos, v.view(self.heads, 1, self.hd))
        scores = torch.matmul(keys, q.view(self.heads, self.hd, 1)).squeeze(-1).float() * self.scale
        scores.masked_fill_(self.positions > self.pos, float("-inf"))  # static shape: mask j > pos
        w = torch.softmax(scores, dim=-1).half()
        return torch.matmul(w.unsqueeze(1), values).view(1, self.d)

    def step(self):
        x = self.embedding.index_select(0, self.tok)
        angle = self.pos.float() * self.inv_freq
        cos, sin = torch.cos(angle), torch.sin(angle)
        for i, p in enumerate(self.layers):
            h = rms_norm(x, p["g_attn"], self.eps)
            q = self.rope(F.linear(h, p["wq"]), cos, sin)
            k = self.rope(F.linear(h, p["wk"]), cos, sin)
            x = x + F.linear(self.attention(i, q, k, F.linear(h, p["wv"])), p["wo"])
            x = x + swiglu(rms_norm(x, p["g_mlp"], self.eps), p["w1"], p["w3"], p["w2"])
        logits = F.linear(rms_norm(x, self.g_final, self.eps), self.lm_head)
        self.logits.copy_(logits)
        self.next_tok.copy_(torch.argmax(logits, dim=-1))  # first maximal index


# ----------------------------------------------------------------------------- timing and checks

def median_us(fn, n):
    """Median GPU time of fn() in microseconds, each call between its own pair of events."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for start, end in zip(starts, ends):
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median([s.elapsed_time(e) for s, e in zip(starts, ends)]) * 1000.0


def capture(fn, warmup=3):
    """CUDA graph of fn(), captured after a warm-up on a side stream; returns (graph, fn's output)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def load_f16(path, count):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) != 2 * count:
        raise RuntimeError(f"{path}: {len(raw)} bytes, expected {2 * count} (fp16 x {count})")
    return torch.frombuffer(bytearray(raw), dtype=torch.float16).cuda()


def rel_err(a, b):
    """||a - b||_2 / ||b||_2 in float64."""
    a, b = a.reshape(-1).double(), b.reshape(-1).double().to(a.device)
    return (torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b)).item()


def bench_mlp(entry, results_dir, n, seed):
    d, ffn, layers = entry["d"], entry["ffn"], entry["layers"]
    print(f"torch: MLP ({d}, {ffn}, {layers}) ...", file=sys.stderr, flush=True)
    model = TorchMlp(d, ffn, layers, seed)
    x = make_tensor(seed, INPUT_ID, (1, d))
    for _ in range(WARMUP):
        model(x)
    eager_us = median_us(lambda: model(x), n)
    graph, out = capture(lambda: model(x))
    for _ in range(WARMUP):
        graph.replay()
    graph_us = median_us(graph.replay, n)
    err = rel_err(out, load_f16(os.path.join(results_dir, entry["output"]), d))
    ratio = entry["graph_us"] / graph_us
    target = MLP_TARGETS.get((d, ffn, layers))
    return {"d": d, "ffn": ffn, "layers": layers, "seed": seed, "weight_bytes": entry["weight_bytes"],
            "lg_graph_us": entry["graph_us"], "lg_forward_us": entry.get("forward_us"),
            "lg_eager_us": entry.get("eager_us"), "torch_eager_us": eager_us, "torch_graph_us": graph_us,
            "ratio": ratio, "target": target, "met": None if target is None else ratio <= target, "rel_err": err}


def generate(model, start_token, steps, run_step):
    """Greedy decode from position 0 with a host sync per token; returns (tokens, tokens/s)."""
    model.reset()
    token, tokens = start_token, []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for p in range(steps):
        model.tok.fill_(token)
        model.pos.fill_(p)
        run_step()
        token = int(model.next_tok.item())
        tokens.append(token)
    return tokens, steps / (time.perf_counter() - t0)


def best_of_two(model, start_token, steps, run_step):
    return max((generate(model, start_token, steps, run_step) for _ in range(2)), key=lambda r: r[1])


def leading_matches(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def bench_decoder(entry, results_dir):
    cfg, start, steps = entry["config"], entry["start_token"], entry["steps"]
    print(f"torch: decoder {cfg} ...", file=sys.stderr, flush=True)
    if steps > cfg["context"]:
        raise RuntimeError(f"decoder: {steps} steps exceed the context {cfg['context']}")
    model = TorchDecoder(cfg, cfg["seed"])
    graph, _ = capture(model.step)
    model.reset()
    model.tok.fill_(start)
    model.pos.fill_(0)
    graph.replay()
    err = rel_err(model.logits, load_f16(os.path.join(results_dir, entry["logits0"]), cfg["vocab"]))
    tokens, graph_tps = best_of_two(model, start, steps, graph.replay)
    eager_tokens, eager_tps = best_of_two(model, start, steps, model.step)
    ratio = entry["tokens_per_s"] / graph_tps
    return {"config": cfg, "steps": steps, "lg_tokens_per_s": entry["tokens_per_s"],
            "torch_graph_tokens_per_s": graph_tps, "torch_eager_tokens_per_s": eager_tps, "ratio": ratio,
            "target": DECODER_TARGET, "met": ratio >= DECODER_TARGET, "logits_rel_err": err,
            "matching_tokens": leading_matches(tokens, entry["tokens"]), "tokens": tokens,
            "eager_tokens_equal_graph": eager_tokens == tokens}


# ----------------------------------------------------------------------------- report

def fmt(v, spec=".1f"):
    return "-" if v is None else format(v, spec)


def print_table(header, rows):
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()


def verdict(target, met, sign):
    return "-" if target is None else f"{sign} {target:g} {'met' if met else 'MISSED'}"


def print_mlp(rows):
    header = ["MLP (d, ffn, layers)", "weights MB", "lazygraph graph us", "lg forward() us", "lg eager us",
              "torch eager us", "torch graph us", "lg/torch graph", "target", "TB/s lg", "TB/s torch graph",
              "rel err"]
    print_table(header, [[f"({r['d']}, {r['ffn']}, {r['layers']})", fmt(r["weight_bytes"] / 1e6),
                          fmt(r["lg_graph_us"]), fmt(r["lg_forward_us"]), fmt(r["lg_eager_us"]),
                          fmt(r["torch_eager_us"]), fmt(r["torch_graph_us"]), fmt(r["ratio"], ".3f"),
                          verdict(r["target"], r["met"], "<="), fmt(r["weight_bytes"] / r["lg_graph_us"] / 1e6, ".2f"),
                          fmt(r["weight_bytes"] / r["torch_graph_us"] / 1e6, ".2f"), fmt(r["rel_err"], ".2e")]
                         for r in rows])


def print_decoder(r):
    c = r["config"]
    header = ["decoder (d, heads, layers, ffn, vocab, context)", "lazygraph tok/s", "torch graph tok/s",
              "torch eager tok/s", "lg/torch graph", "target", "logits rel err", "matching tokens"]
    print_table(header, [[f"({c['d']}, {c['heads']}, {c['layers']}, {c['ffn']}, {c['vocab']}, {c['context']})",
                          fmt(r["lg_tokens_per_s"], ".0f"), fmt(r["torch_graph_tokens_per_s"], ".0f"),
                          fmt(r["torch_eager_tokens_per_s"], ".0f"), fmt(r["ratio"], ".2f"),
                          verdict(r["target"], r["met"], ">="), fmt(r["logits_rel_err"], ".2e"),
                          f"{r['matching_tokens']} / {r['steps']}"]])


def main():
    parser = argparse.ArgumentParser(description="PyTorch baseline for the lazygraph model benchmarks.")
    parser.add_argument("results_dir", help="folder holding lazygraph.json and the C++ fp16 outputs")
    results_dir = parser.parse_args().results_dir
    with open(os.path.join(results_dir, "lazygraph.json")) as f:
        data = json.load(f)
    if not torch.cuda.is_available():
        raise RuntimeError("CUDA is not available")
    gpu = torch.cuda.get_device_name()
    print(f"GPU: {gpu}, torch {torch.__version__} (CUDA {torch.version.cuda})\n")
    n = max(int(data.get("forwards", 200)), 200)
    with torch.inference_mode():
        check_test_vector()
        mlp = []
        for entry in data["mlp"]:
            mlp.append(bench_mlp(entry, results_dir, n, entry.get("seed", data.get("seed", 1234))))
            torch.cuda.empty_cache()
        decoder = bench_decoder(data["decoder"], results_dir) if "decoder" in data else None
    print_mlp(mlp)
    if decoder is not None:
        print_decoder(decoder)
    failures = [f"MLP ({r['d']}, {r['ffn']}, {r['layers']}): output rel err {r['rel_err']:.3e} > {REL_TOL}"
                for r in mlp if not r["rel_err"] <= REL_TOL]
    if decoder is not None and not decoder["logits_rel_err"] <= REL_TOL:
        failures.append(f"decoder: step-0 logits rel err {decoder['logits_rel_err']:.3e} > {REL_TOL}")
    with open(os.path.join(results_dir, "torch.json"), "w") as f:
        json.dump({"gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda, "forwards": n, "mlp": mlp,
                   "decoder": decoder, "failures": failures}, f, indent=2)
    for failure in failures:
        print(f"!!! FAILED: {failure}")
        print(f"!!! FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
