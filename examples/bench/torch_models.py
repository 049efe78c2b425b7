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
BF16_REL_TOL = 4e-2  # bf16 keeps 8 significant bits, fp16 11: eight times the rounding
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


def make_tensor(seed, tensor, shape, scale=1.0, offset=0.0, dtype=torch.float16):
    """CUDA tensor of dtype(offset + scale * u(i)): float32 product, float32 sum, one rounding to nearest even
    (dtype float16 or bfloat16)."""
    n = math.prod(shape)
    scale = to_f32(scale)  # exactly representable, so the float32 multiply below rounds once
    out = torch.empty(n, dtype=dtype, device="cuda")
    for start in range(0, n, CHUNK):
        count = min(CHUNK, n - start)
        v = uniform(seed, tensor, count, start) * scale
        if offset:
            v = v + offset
        out[start:start + count] = v.to(dtype)
    return out.view(*shape)


def matrix(seed, tensor, rows, cols, dtype=torch.float16):
    return make_tensor(seed, tensor, (rows, cols), 1.0 / math.sqrt(cols), dtype=dtype)


def gain(seed, tensor, n, dtype=torch.float16):
    return make_tensor(seed, tensor, (n,), 0.125, 1.0, dtype=dtype)


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
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * g


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


class TorchBatchDecoder:
    """The decoder with grouped-query attention stepping `batch` sequences at once (row b is sequence b, at its own
    position); prefill() runs a prompt through full causal attention into sequence 0, as PyTorch models do. Weights,
    activations and the KV cache are `dtype` (float16 or bfloat16)."""

    def __init__(self, cfg, seed, batch, dtype=torch.float16):
        d, self.heads, ffn, vocab, ctx = cfg["d"], cfg["heads"], cfg["ffn"], cfg["vocab"], cfg["context"]
        self.kv = cfg.get("kv_heads") or self.heads
        self.group = self.heads // self.kv
        self.d, self.hd, self.eps, self.batch, self.ctx = d, d // self.heads, float(cfg["eps"]), batch, ctx
        kv_dim = self.kv * self.hd
        self.dtype = dtype
        self.embedding = make_tensor(seed, EMBED_ID, (vocab, d), dtype=dtype)
        self.layers = []
        for i in range(cfg["layers"]):
            b = 16 * i
            self.layers.append({"g_attn": gain(seed, b + 1, d, dtype), "wq": matrix(seed, b + 2, d, d, dtype),
                                "wk": matrix(seed, b + 3, kv_dim, d, dtype),
                                "wv": matrix(seed, b + 4, kv_dim, d, dtype),
                                "wo": matrix(seed, b + 5, d, d, dtype), "g_mlp": gain(seed, b + 6, d, dtype),
                                "w1": matrix(seed, b + 7, ffn, d, dtype), "w3": matrix(seed, b + 8, ffn, d, dtype),
                                "w2": matrix(seed, b + 9, d, ffn, dtype)})
        self.g_final = gain(seed, FINAL_GAIN_ID, d, dtype)
        self.lm_head = matrix(seed, LM_HEAD_ID, vocab, d, dtype)
        cache_shape = (cfg["layers"], batch, self.kv, ctx, self.hd)
        self.k_cache = torch.zeros(cache_shape, dtype=dtype, device="cuda")
        self.v_cache = torch.zeros(cache_shape, dtype=dtype, device="cuda")
        exponent = torch.arange(0, self.hd, 2, dtype=torch.float32, device="cuda") / self.hd
        self.inv_freq = torch.pow(float(cfg["theta"]), -exponent)
        self.positions = torch.arange(ctx, dtype=torch.int64, device="cuda")
        self.rows = torch.arange(batch, dtype=torch.int64, device="cuda")
        self.scale = 1.0 / math.sqrt(self.hd)
        self.tok = torch.zeros(batch, dtype=torch.int64, device="cuda")
        self.pos = torch.zeros(batch, dtype=torch.int64, device="cuda")
        self.next_tok = torch.zeros(batch, dtype=torch.int64, device="cuda")
        self.logits = torch.zeros(batch, vocab, dtype=dtype, device="cuda")

    def reset(self):
        self.k_cache.zero_()
        self.v_cache.zero_()

    def rope(self, v, heads, cos, sin):
        """Rotate pairs (2i, 2i+1) of every head of every row in float32; v [rows, heads * hd], cos/sin [rows, hd/2]."""
        rows = v.shape[0]
        pairs = v.view(rows, heads, self.hd // 2, 2).float()
        a, b = pairs[..., 0], pairs[..., 1]
        cos, sin = cos[:, None, :], sin[:, None, :]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).view(rows, heads * self.hd).to(self.dtype)

    def block(self, layer, x, q_fn):
        """One layer around the attention function q_fn(layer, q, k, v) -> [rows, d]."""
        p = self.layers[layer]
        h = rms_norm(x, p["g_attn"], self.eps)
        x = x + F.linear(q_fn(layer, F.linear(h, p["wq"]), F.linear(h, p["wk"]), F.linear(h, p["wv"])), p["wo"])
        return x + swiglu(rms_norm(x, p["g_mlp"], self.eps), p["w1"], p["w3"], p["w2"])

    def step(self):
        angle = self.pos.float()[:, None] * self.inv_freq[None, :]
        cos, sin = torch.cos(angle), torch.sin(angle)
        bsz = self.batch

        def attend(layer, q, k, v):
            q, k = self.rope(q, self.heads, cos, sin), self.rope(k, self.kv, cos, sin)
            keys, values = self.k_cache[layer], self.v_cache[layer]  # [batch, kv, ctx, hd]
            keys[self.rows, :, self.pos, :] = k.view(bsz, self.kv, self.hd)
            values[self.rows, :, self.pos, :] = v.view(bsz, self.kv, self.hd)
            scores = torch.matmul(q.view(bsz, self.kv, self.group, self.hd), keys.transpose(-1, -2)).float()
            scores = scores * self.scale
            mask = self.positions[None, :] > self.pos[:, None]  # [batch, ctx]
            scores.masked_fill_(mask[:, None, None, :], float("-inf"))
            w = torch.softmax(scores, dim=-1).to(self.dtype)
            return torch.matmul(w, values).view(bsz, self.d)

        x = self.embedding.index_select(0, self.tok)
        for i in range(len(self.layers)):
            x = self.block(i, x, attend)
        logits = F.linear(rms_norm(x, self.g_final, self.eps), self.lm_head)
        self.logits.copy_(logits)
        self.next_tok.copy_(torch.argmax(logits, dim=-1))

    def prefill(self, prompt):
        """The prompt's tokens at positions 0.. of sequence 0 with causal attention; returns the last row's logits."""
        t = len(prompt)
        tok = torch.tensor(prompt, dtype=torch.int64, device="cuda")
        angle = torch.arange(t, dtype=torch.float32, device="cuda")[:, None] * self.inv_freq[None, :]
        cos, sin = torch.cos(angle), torch.sin(angle)
        causal = torch.ones(t, t, dtype=torch.bool, device="cuda").triu(1)

        def attend(layer, q, k, v):
            q, k = self.rope(q, self.heads, cos, sin), self.rope(k, self.kv, cos, sin)
            k3, v3 = k.view(t, self.kv, self.hd).transpose(0, 1), v.view(t, self.kv, self.hd).transpose(0, 1)
            self.k_cache[layer, 0, :, :t, :] = k3
            self.v_cache[layer, 0, :, :t, :] = v3
            q4 = q.view(t, self.kv, self.group, self.hd).permute(1, 2, 0, 3)  # [kv, group, t, hd]
            scores = torch.matmul(q4, k3[:, None].transpose(-1, -2)).float() * self.scale  # [kv, group, t, t]
            scores.masked_fill_(causal, float("-inf"))
            w = torch.softmax(scores, dim=-1).to(self.dtype)
            o = torch.matmul(w, v3[:, None])  # [kv, group, t, hd]
            return o.permute(2, 0, 1, 3).reshape(t, self.d)

        x = self.embedding.index_select(0, tok)
        for i in range(len(self.layers)):
            x = self.block(i, x, attend)
        return F.linear(rms_norm(x[-1:], self.g_final, self.eps), self.lm_head)


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


def load_f16(path, count, dtype=torch.float16):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) != 2 * count:
        raise RuntimeError(f"{path}: {len(raw)} bytes, expected {2 * count} ({dtype} x {count})")
    return torch.frombuffer(bytearray(raw), dtype=dtype).cuda()


def rel_err(a, b):
    """||a - b||_2 / ||b||_2 in float64."""
    a, b = a.reshape(-1).double(), b.reshape(-1).double().to(a.device)
    return (torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b)).item()


def bench_mlp(entry, results_dir, n, seed):
    d, ffn, layers, batch = entry["d"], entry["ffn"], entry["layers"], entry.get("batch", 1)
    print(f"torch: MLP ({d}, {ffn}, {layers}), batch {batch} ...", file=sys.stderr, flush=True)
    model = TorchMlp(d, ffn, layers, seed)
    x = make_tensor(seed, INPUT_ID, (batch, d))
    for _ in range(WARMUP):
        model(x)
    eager_us = median_us(lambda: model(x), n)
    graph, out = capture(lambda: model(x))
    for _ in range(WARMUP):
        graph.replay()
    graph_us = median_us(graph.replay, n)
    err = rel_err(out, load_f16(os.path.join(results_dir, entry["output"]), batch * d))
    ratio = entry["graph_us"] / graph_us
    target = MLP_TARGETS.get((d, ffn, layers)) if batch == 1 else None
    return {"d": d, "ffn": ffn, "layers": layers, "batch": batch, "seed": seed, "weight_bytes": entry["weight_bytes"],
            "lg_graph_us": entry["graph_us"], "lg_persistent_graph_us": entry.get("persistent_graph_us"),
            "lg_forward_us": entry.get("forward_us"),
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
    model = TorchBatchDecoder(cfg, cfg["seed"], 1)
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
            "weight_bytes": entry.get("weight_bytes", 0), "lg_step_graph_us": entry.get("step_graph_us"),
            "lg_generate_tokens_per_s": entry.get("generate_tokens_per_s"),
            "torch_graph_tokens_per_s": graph_tps, "torch_eager_tokens_per_s": eager_tps, "ratio": ratio,
            "target": DECODER_TARGET, "met": ratio >= DECODER_TARGET, "logits_rel_err": err,
            "matching_tokens": leading_matches(tokens, entry["tokens"]), "tokens": tokens,
            "eager_tokens_equal_graph": eager_tokens == tokens}


def bench_features(entry, results_dir, n):
    """GQA, batch and prefill of the C++ decoder checked against TorchBatchDecoder, and the step time per batch."""
    cfg = entry["config"]
    print(f"torch: GQA decoder {cfg} ...", file=sys.stderr, flush=True)
    vocab = cfg["vocab"]
    out = {"config": cfg}
    # Greedy, one sequence, through a CUDA graph.
    one = TorchBatchDecoder(cfg, cfg["seed"], 1)
    graph, _ = capture(one.step)
    one.reset()
    token, tokens = entry["gqa"]["start_token"], []
    for p in range(len(entry["gqa"]["tokens"])):
        one.tok.fill_(token)
        one.pos.fill_(p)
        graph.replay()
        if p == 0:
            out["gqa_logits_rel_err"] = rel_err(one.logits, load_f16(os.path.join(results_dir, entry["gqa"]["logits0"]),
                                                                     vocab))
        token = int(one.next_tok.item())
        tokens.append(token)
    out["gqa_matching_tokens"] = leading_matches(tokens, entry["gqa"]["tokens"])
    out["gqa_steps"] = len(tokens)
    # Prefill, eager (shapes vary with the prompt).
    prompt = entry["prefill"]["prompt"]
    one.reset()
    logits = one.prefill(prompt)
    out["prefill_logits_rel_err"] = rel_err(logits, load_f16(os.path.join(results_dir, entry["prefill"]["logits"]),
                                                             vocab))
    out["prefill_next_equal"] = int(torch.argmax(logits, dim=-1).item()) == entry["prefill"]["next"]
    out["torch_prefill_us"] = median_us(lambda: one.prefill(prompt), 21)
    out["lg_prefill_us"] = entry["prefill"]["prefill_us"]
    out["lg_token_by_token_us"] = entry["prefill"]["token_by_token_us"]
    del one, graph
    # Batch of four sequences, greedy, through a CUDA graph.
    starts = entry["batch"]["starts"]
    four = TorchBatchDecoder(cfg, cfg["seed"], len(starts))
    graph, _ = capture(four.step)
    four.reset()
    current, rows = torch.tensor(starts, dtype=torch.int64, device="cuda"), [[] for _ in starts]
    for p in range(entry["batch"]["steps"]):
        four.tok.copy_(current)
        four.pos.fill_(p)
        graph.replay()
        current = four.next_tok.clone()
        for r, t in enumerate(current.tolist()):
            rows[r].append(t)
    out["batch_logits_rel_err"] = rel_err(four.logits, load_f16(os.path.join(results_dir, entry["batch"]["logits"]),
                                                                len(starts) * vocab))
    out["batch_matching_tokens"] = [leading_matches(a, b) for a, b in zip(rows, entry["batch"]["tokens"])]
    out["batch_steps"] = entry["batch"]["steps"]
    del four, graph
    out["step_us"] = step_times(cfg, entry["batch"]["step_us"], n, torch.float16)
    return out


def step_times(cfg, lg_step_us, n, dtype):
    """{rows: {"lg": lazygraph's step us, "torch": the torch graph's}} for a step of every row count of
    lg_step_us, all rows at position 100."""
    out = {}
    for rows_n, lg_us in lg_step_us.items():
        model = TorchBatchDecoder(cfg, cfg["seed"], int(rows_n), dtype)
        model.tok.fill_(7)
        model.pos.fill_(100)
        graph, _ = capture(model.step)
        for _ in range(WARMUP):
            graph.replay()
        out[rows_n] = {"lg": lg_us, "torch": median_us(graph.replay, n)}
        del model, graph
        torch.cuda.empty_cache()
    return out


def bench_bf16(entry, cfg, n):
    """The bf16 decoder (the features config) against TorchBatchDecoder in bfloat16: first logits, greedy tokens
    and the step time per row count."""
    print(f"torch: bf16 GQA decoder {cfg} ...", file=sys.stderr, flush=True)
    one = TorchBatchDecoder(cfg, cfg["seed"], 1, torch.bfloat16)
    graph, _ = capture(one.step)
    one.reset()
    token, tokens, out = entry["start_token"], [], {"config": cfg}
    for p in range(len(entry["tokens"])):
        one.tok.fill_(token)
        one.pos.fill_(p)
        graph.replay()
        if p == 0:
            out["logits_rel_err"] = rel_err(one.logits, load_f16(entry["logits0_path"], cfg["vocab"], torch.bfloat16))
        token = int(one.next_tok.item())
        tokens.append(token)
    out["matching_tokens"] = leading_matches(tokens, entry["tokens"])
    out["steps"] = len(tokens)
    # Teacher-forced: torch steps on lazygraph's tokens, so one near tie does not end the comparison; count the
    # steps whose next token agrees.
    one.reset()
    agree = 0
    for p, want in enumerate(entry["tokens"]):
        one.tok.fill_(entry["start_token"] if p == 0 else entry["tokens"][p - 1])
        one.pos.fill_(p)
        graph.replay()
        agree += int(one.next_tok.item()) == want
    out["teacher_forced_agree"] = agree
    del one, graph
    out["step_us"] = step_times(cfg, entry["step_us"], n, torch.bfloat16)
    return out


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


def of_ceiling(weight_bytes, us, ceiling):
    """The fraction of the copy ceiling (bytes/s) that reading `weight_bytes` in `us` microseconds reaches."""
    return None if not ceiling or not us else weight_bytes / (us * 1e-6) / ceiling


def print_mlp(rows, ceiling):
    header = ["MLP (d, ffn, layers)", "batch", "weights MB", "lazygraph graph us", "lg of ceiling",
              "lg persistent graph us", "lg forward() us", "lg eager us", "torch eager us", "torch graph us",
              "torch of ceiling", "lg/torch graph", "target", "rel err"]
    print_table(header, [[f"({r['d']}, {r['ffn']}, {r['layers']})", str(r["batch"]), fmt(r["weight_bytes"] / 1e6),
                          fmt(r["lg_graph_us"]), fmt(of_ceiling(r["weight_bytes"], r["lg_graph_us"], ceiling), ".3f"),
                          fmt(r["lg_persistent_graph_us"]), fmt(r["lg_forward_us"] or None), fmt(r["lg_eager_us"]),
                          fmt(r["torch_eager_us"]), fmt(r["torch_graph_us"]),
                          fmt(of_ceiling(r["weight_bytes"], r["torch_graph_us"], ceiling), ".3f"),
                          fmt(r["ratio"], ".3f"), verdict(r["target"], r["met"], "<="), fmt(r["rel_err"], ".2e")]
                         for r in rows])


def print_decoders(rows, ceiling):
    header = ["decoder (d, heads, kv_heads, layers, ffn, vocab, context)", "weights MB", "lg step graph us",
              "lg of ceiling", "lazygraph tok/s", "lg generate() tok/s", "torch graph tok/s", "torch eager tok/s",
              "lg/torch graph", "generate/torch graph", "target", "logits rel err", "matching tokens"]
    table = []
    for r in rows:
        c = r["config"]
        gen = r.get("lg_generate_tokens_per_s")
        table.append([f"({c['d']}, {c['heads']}, {c.get('kv_heads') or c['heads']}, {c['layers']}, {c['ffn']}, "
                      f"{c['vocab']}, {c['context']})", fmt(r.get("weight_bytes", 0) / 1e6),
                      fmt(r.get("lg_step_graph_us")),
                      fmt(of_ceiling(r.get("weight_bytes", 0), r.get("lg_step_graph_us"), ceiling), ".3f"),
                      fmt(r["lg_tokens_per_s"], ".0f"), fmt(gen, ".0f"), fmt(r["torch_graph_tokens_per_s"], ".0f"),
                      fmt(r["torch_eager_tokens_per_s"], ".0f"), fmt(r["ratio"], ".2f"),
                      fmt(None if gen is None else gen / r["torch_graph_tokens_per_s"], ".2f"),
                      verdict(r["target"], r["met"], ">="), fmt(r["logits_rel_err"], ".2e"),
                      f"{r['matching_tokens']} / {r['steps']}"])
    print_table(header, table)


def print_features(r):
    c = r["config"]
    print(f"GQA decoder (d {c['d']}, heads {c['heads']}, kv heads {c['kv_heads']}, layers {c['layers']}): "
          "lazygraph vs PyTorch on the same seeded weights\n")
    print_table(["check", "rel err of logits", "tokens"], [
        ["greedy, 1 sequence", fmt(r["gqa_logits_rel_err"], ".2e"), f"{r['gqa_matching_tokens']} / {r['gqa_steps']} equal"],
        ["batch of 4, last step", fmt(r["batch_logits_rel_err"], ".2e"),
         " ".join(f"{m}/{r['batch_steps']}" for m in r["batch_matching_tokens"]) + " equal"],
        ["prefill 40 tokens (torch: causal attention)", fmt(r["prefill_logits_rel_err"], ".2e"),
         "next token " + ("equal" if r["prefill_next_equal"] else "DIFFERS")]])
    rows = []
    base = r["step_us"]["1"]["lg"]
    for b, v in r["step_us"].items():
        rows.append([b, fmt(v["lg"]), fmt(v["torch"]), fmt(v["lg"] / v["torch"], ".3f"), fmt(v["lg"] / base, ".2f"),
                     fmt(int(b) * 1e6 / v["lg"], ".0f"), fmt(int(b) * 1e6 / v["torch"], ".0f")])
    print_table(["rows", "lg step graph us", "torch step graph us", "lg/torch", "lg us vs 1 row", "lg tokens/s",
                 "torch tokens/s"], rows)
    print_table(["prefill 40 tokens", "lazygraph prefill us (wall, 5 steps of 8)", "lazygraph token by token us",
                 "torch prefill us (eager)"],
                [["", fmt(r["lg_prefill_us"], ".0f"), fmt(r["lg_token_by_token_us"], ".0f"),
                  fmt(r["torch_prefill_us"], ".0f")]])


def print_bf16(r, fp16_step_us):
    c = r["config"]
    print(f"bf16 GQA decoder (d {c['d']}, heads {c['heads']}, kv heads {c['kv_heads']}, layers {c['layers']}): "
          "lazygraph DecoderBf16 vs PyTorch bfloat16 on the same seeded weights\n")
    print_table(["check", "rel err of logits (step 0)", "tokens"],
                [["greedy, 1 sequence", fmt(r["logits_rel_err"], ".2e"), f"{r['matching_tokens']} / {r['steps']} equal"],
                 ["teacher-forced on lazygraph's tokens", "", f"{r['teacher_forced_agree']} / {r['steps']} agree"]])
    rows = []
    for b, v in r["step_us"].items():
        fp16 = fp16_step_us.get(b, {}).get("lg")
        rows.append([b, fmt(v["lg"]), fmt(fp16), fmt(v["torch"]), fmt(v["lg"] / v["torch"], ".3f"),
                     fmt(None if fp16 is None else v["lg"] / fp16, ".3f"), fmt(int(b) * 1e6 / v["lg"], ".0f"),
                     fmt(int(b) * 1e6 / v["torch"], ".0f")])
    print_table(["rows", "lg bf16 step us", "lg fp16 step us", "torch bf16 step us", "lg/torch", "bf16/fp16",
                 "lg tokens/s", "torch tokens/s"], rows)


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
        decoders = []
        for entry in data.get("decoders", [data["decoder"]] if "decoder" in data else []):
            decoders.append(bench_decoder(entry, results_dir))
            torch.cuda.empty_cache()
        features = bench_features(data["features"], results_dir, n) if "features" in data else None
        torch.cuda.empty_cache()
        bf16 = None
        if "bf16" in data and "features" in data:
            entry = dict(data["bf16"], logits0_path=os.path.join(results_dir, data["bf16"]["logits0"]))
            bf16 = bench_bf16(entry, data["features"]["config"], n)
    ceiling = data.get("copy_ceiling_bytes_per_s")
    if ceiling:
        print(f"fractions are of the copy ceiling the C++ side measured in the same run: {ceiling * 1e-12:.2f} TB/s\n")
    print_mlp(mlp, ceiling)
    if decoders:
        print_decoders(decoders, ceiling)
    if features is not None:
        print_features(features)
    if bf16 is not None:
        print_bf16(bf16, features["step_us"] if features else {})
    failures = [f"MLP ({r['d']}, {r['ffn']}, {r['layers']}): output rel err {r['rel_err']:.3e} > {REL_TOL}"
                for r in mlp if not r["rel_err"] <= REL_TOL]
    for decoder in decoders:
        if not decoder["logits_rel_err"] <= REL_TOL:
            failures.append(f"decoder {decoder['config']}: step-0 logits rel err {decoder['logits_rel_err']:.3e} > "
                            f"{REL_TOL}")
    if features is not None:
        for key in ("gqa_logits_rel_err", "batch_logits_rel_err", "prefill_logits_rel_err"):
            if not features[key] <= REL_TOL:
                failures.append(f"GQA decoder: {key} {features[key]:.3e} > {REL_TOL}")
    if bf16 is not None and not bf16["logits_rel_err"] <= BF16_REL_TOL:
        failures.append(f"bf16 decoder: step-0 logits rel err {bf16['logits_rel_err']:.3e} > {BF16_REL_TOL}")
    with open(os.path.join(results_dir, "torch.json"), "w") as f:
        json.dump({"gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda, "forwards": n, "mlp": mlp,
                   "decoders": decoders, "features": features, "bf16": bf16, "failures": failures}, f, indent=2)
    for failure in failures:
        print(f"!!! FAILED: {failure}")
        print(f"!!! FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
