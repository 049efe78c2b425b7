#!/usr/bin/env python3
"""Hugging Face transformers side of the prompt benchmark (issue 37, item 5): time to first token.

usage: torch_prefill.py RESULTS_DIR [--reps N] [--warmup N]

Run on the GPU machine right after bench_prefill has written RESULTS_DIR/prefill.json (examples/bench/run_gpu.sh
prefill runs both). For every shape, element type and prompt length of that file, builds transformers'
LlamaForCausalLM (eager PyTorch, attn_implementation "sdpa") with the SAME seeded weights as the C++ decoder
(docs/nn.md's generator, as torch_models.py computes it; q_proj and k_proj rows permuted within each head for
transformers' rotate-half RoPE, so that both compute the same function) and times its time to first token: a
forward over the prompt (logits of the last position only, as generate() asks for), the argmax, and one decode
step with the KV cache it returned, under torch.inference_mode(); torch.cuda.Event timing (the stream idle before
each repetition, so host launch gaps count), median of N after warm-ups (the C++ side's counts by default).

Checks, untimed: transformers' next token after the prompt against lazygraph's, and the logits of the decode step
fed lazygraph's token against lazygraph's step logits (relative error within 1e-2 for fp16, 4e-2 for bf16, whose
rounding is eight times fp16's, on both sides). Prints transformers' table, then the comparison with the floor that
bench_prefill measured in the same run: shape, dtype, tokens, ours ms, transformers ms, floor ms, ours/floor,
ours/transformers. Writes RESULTS_DIR/torch_prefill.json.

Exit status: 0 done (a missed target is only reported), 1 failed (an error, or logits outside the bound),
2 usage error, 77 skipped (no torch, no transformers or no CUDA GPU; the reason is printed).
"""
import argparse
import json
import os
import statistics
import sys

SKIPPED = 77

try:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers import __version__ as transformers_version

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_models import (BF16_REL_TOL, EMBED_ID, FINAL_GAIN_ID, LM_HEAD_ID, REL_TOL, gain, load_f16, make_tensor,
                              matrix, mix_host, print_table, rel_err)
except ImportError as e:
    print(f"torch_prefill: skipped: {e}")
    sys.exit(SKIPPED)

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
BOUNDS = {"fp16": REL_TOL, "bf16": BF16_REL_TOL}


def prompt_of(n, vocab):
    """Token i = mix(1000 + i) mod vocab: bench_prefill's prompt."""
    return [mix_host(1000 + i) % vocab for i in range(n)]


def rotate_half_rows(w, heads, head_dim):
    """The rows of a q or k projection for transformers' RoPE, which turns pairs (i, i + head_dim/2) where the C++
    decoder turns (2i, 2i+1): row 2i + j of a head moves to row j * head_dim/2 + i."""
    cols = w.shape[1]
    return w.view(heads, head_dim // 2, 2, cols).transpose(1, 2).reshape(heads * head_dim, cols).contiguous()


def hf_model(cfg, dtype):
    """LlamaForCausalLM of the shape `cfg` (prefill.json's config) on the GPU in `dtype`, with the seeded weights."""
    rope = {"rope_type": cfg["rope_type"], "rope_theta": float(cfg["theta"])}
    if cfg["rope_type"] == "llama3":
        rope.update(factor=float(cfg["rope_factor"]), low_freq_factor=float(cfg["low_freq_factor"]),
                    high_freq_factor=float(cfg["high_freq_factor"]),
                    original_max_position_embeddings=int(cfg["original_max_position_embeddings"]))
    elif cfg["rope_type"] == "linear":
        rope.update(factor=float(cfg["rope_factor"]))
    config = LlamaConfig(hidden_size=cfg["d"], num_attention_heads=cfg["heads"], num_key_value_heads=cfg["kv_heads"],
                         head_dim=cfg["head_dim"], num_hidden_layers=cfg["layers"], intermediate_size=cfg["ffn"],
                         vocab_size=cfg["vocab"],
                         max_position_embeddings=max(cfg["context"], 131072 if cfg["rope_type"] == "llama3" else 0),
                         rms_norm_eps=float(cfg["eps"]), tie_word_embeddings=False, rope_parameters=rope,
                         attn_implementation="sdpa")
    with torch.device("cuda"):
        model = LlamaForCausalLM(config)
    if getattr(model.config, "_attn_implementation", None) != "sdpa" and hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("sdpa")
    # RoPE's inverse frequencies stay float32, as from_pretrained(dtype=...) leaves them.
    frequencies = {name: b.clone() for name, b in model.named_buffers() if name.endswith("inv_freq")}
    model = model.to(dtype).eval()
    for name, b in frequencies.items():
        owner, _, attr = name.rpartition(".")
        setattr(model.get_submodule(owner), attr, b)
    seed, d, heads, kv, hd = cfg["seed"], cfg["d"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    q_dim, kv_dim, ffn = heads * hd, kv * hd, cfg["ffn"]
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(make_tensor(seed, EMBED_ID, (cfg["vocab"], d), dtype=dtype))
        for i, layer in enumerate(model.model.layers):
            b = 16 * i
            layer.input_layernorm.weight.copy_(gain(seed, b + 1, d, dtype))
            layer.self_attn.q_proj.weight.copy_(rotate_half_rows(matrix(seed, b + 2, q_dim, d, dtype), heads, hd))
            layer.self_attn.k_proj.weight.copy_(rotate_half_rows(matrix(seed, b + 3, kv_dim, d, dtype), kv, hd))
            layer.self_attn.v_proj.weight.copy_(matrix(seed, b + 4, kv_dim, d, dtype))
            layer.self_attn.o_proj.weight.copy_(matrix(seed, b + 5, d, q_dim, dtype))
            layer.post_attention_layernorm.weight.copy_(gain(seed, b + 6, d, dtype))
            layer.mlp.gate_proj.weight.copy_(matrix(seed, b + 7, ffn, d, dtype))
            layer.mlp.up_proj.weight.copy_(matrix(seed, b + 8, ffn, d, dtype))
            layer.mlp.down_proj.weight.copy_(matrix(seed, b + 9, d, ffn, dtype))
        model.model.norm.weight.copy_(gain(seed, FINAL_GAIN_ID, d, dtype))
        model.lm_head.weight.copy_(matrix(seed, LM_HEAD_ID, cfg["vocab"], d, dtype))
    # The prompt's forward computes the last position's logits only, as generate() asks, where this version can.
    model.prompt_kwargs = {"logits_to_keep": 1}
    try:
        with torch.inference_mode():
            model(input_ids=torch.zeros(1, 2, dtype=torch.long, device="cuda"), use_cache=True, **model.prompt_kwargs)
    except TypeError:
        model.prompt_kwargs = {}
    return model


def prompt_forward(model, ids):
    """The forward over the prompt, filling a new KV cache."""
    return model(input_ids=ids, use_cache=True, **model.prompt_kwargs)


def first_two_tokens(model, ids):
    """The prompt's forward (last position's logits only), its argmax, and one decode step on it: what time to first
    token covers. Returns the step's next token (a device tensor) and the prompt's."""
    out = prompt_forward(model, ids)
    first = out.logits[:, -1:].argmax(-1)
    step = model(input_ids=first, past_key_values=out.past_key_values, use_cache=True)
    return first, step.logits[:, -1].argmax(-1)


def time_to_first_token(model, ids, reps, warmup):
    """Median ms of the prompt's forward + argmax, of the decode step, and of both (per repetition), by events."""
    for _ in range(warmup):
        first_two_tokens(model, ids)
    prefill, step, both = [], [], []
    for _ in range(reps):
        start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        torch.cuda.synchronize()
        start.record()
        out = prompt_forward(model, ids)
        first = out.logits[:, -1:].argmax(-1)
        mid.record()
        model(input_ids=first, past_key_values=out.past_key_values, use_cache=True).logits[:, -1].argmax(-1)
        end.record()
        torch.cuda.synchronize()
        prefill.append(start.elapsed_time(mid))
        step.append(mid.elapsed_time(end))
        both.append(start.elapsed_time(end))
        del out, first
    return statistics.median(prefill), statistics.median(step), statistics.median(both)


def check(model, ids, row, results_dir):
    """transformers' next token after the prompt, and the step's logits on lazygraph's token (teacher-forced)
    against lazygraph's step logits."""
    out = prompt_forward(model, ids)
    hf_next = int(out.logits[0, -1].argmax().item())
    step_in = torch.tensor([[row["next"]]], dtype=torch.long, device="cuda")
    logits = model(input_ids=step_in, past_key_values=out.past_key_values, use_cache=True).logits[0, -1]
    ours = load_f16(os.path.join(results_dir, row["step_logits"]), row["config"]["vocab"], DTYPES[row["dtype"]])
    return {"hf_next": hf_next, "next_equal": hf_next == row["next"], "step_logits_rel_err": rel_err(logits, ours),
            "second_equal": int(logits.argmax().item()) == row["second"]}


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def main():
    parser = argparse.ArgumentParser(
        description="transformers' time to first token on bench_prefill's shapes, and the comparison.",
        epilog="Exit status: 0 done, 1 failed, 2 usage error, 77 skipped (no torch, transformers or CUDA GPU).")
    parser.add_argument("results_dir", help="folder holding prefill.json and the step logits bench_prefill wrote")
    parser.add_argument("--reps", type=int, help="timed repetitions per row (default: prefill.json's)")
    parser.add_argument("--warmup", type=int, help="untimed ones before them (default: prefill.json's, at least 2)")
    args = parser.parse_args()
    with open(os.path.join(args.results_dir, "prefill.json")) as f:
        data = json.load(f)
    if not torch.cuda.is_available():
        print("torch_prefill: skipped: no CUDA GPU")
        return SKIPPED
    reps = args.reps or int(data.get("reps", 10))
    warmup = args.warmup if args.warmup is not None else max(2, int(data.get("warmup", 2)))
    gpu = torch.cuda.get_device_name()
    failures = []
    groups = {}
    for row in data["rows"]:
        groups.setdefault((row["shape"], row["dtype"]), []).append(row)
    attention = None
    by_row = {}
    for (shape, dtype), rows in groups.items():
        model = None
        try:
            print(f"torch_prefill: {shape} {dtype}: building LlamaForCausalLM with the seeded weights",
                  file=sys.stderr, flush=True)
            model = hf_model(rows[0]["config"], DTYPES[dtype])  # outside inference_mode: parameters stay ordinary
            attention = getattr(model.config, "_attn_implementation", None)
            for row in rows:
                print(f"torch_prefill: {shape} {dtype}, {row['tokens']} tokens", file=sys.stderr, flush=True)
                with torch.inference_mode():
                    ids = torch.tensor([prompt_of(row["tokens"], row["config"]["vocab"])], dtype=torch.long,
                                       device="cuda")
                    result = {"shape": shape, "dtype": dtype, "tokens": row["tokens"], "reps": reps}
                    result.update(check(model, ids, row, args.results_dir))
                    result["prefill_ms"], result["step_ms"], result["ttft_ms"] = time_to_first_token(
                        model, ids, reps, warmup)
                if not result["step_logits_rel_err"] <= BOUNDS[dtype]:
                    failures.append(f"{shape} {dtype}, {row['tokens']} tokens: the step's logits differ from "
                                    f"lazygraph's by {result['step_logits_rel_err']:.3e} > {BOUNDS[dtype]}")
                by_row[id(row)] = result
        except Exception as e:  # report it, and go on: the other shapes and the tables still come
            failures.append(f"{shape} {dtype}: {type(e).__name__}: {e}")
            print(f"torch_prefill: {shape} {dtype}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        del model
        torch.cuda.empty_cache()

    results = [(row, by_row[id(row)]) for row in data["rows"] if id(row) in by_row]
    print(f"transformers {transformers_version} LlamaForCausalLM on {gpu}, torch {torch.__version__} (CUDA "
          f"{torch.version.cuda}): eager, attention {attention}, the seeded weights of bench_prefill; time to first "
          f"token = forward over the prompt (last position's logits) + argmax + one decode step with the KV cache, "
          f"CUDA events, median of {reps} after {warmup} warm-ups\n")
    print_table(["shape", "dtype", "tokens", "prefill ms", "step ms", "TTFT ms", "next token = lazygraph's",
                 "step logits rel err (lazygraph's token in)", "second token = lazygraph's"],
                [[r["shape"], r["dtype"], str(r["tokens"]), fmt(r["prefill_ms"]), fmt(r["step_ms"]),
                  fmt(r["ttft_ms"]), "yes" if r["next_equal"] else "no (near tie?)",
                  fmt(r["step_logits_rel_err"], ".2e"), "yes" if r["second_equal"] else "no"] for _, r in results])
    with open(os.path.join(args.results_dir, "torch_prefill.json"), "w") as f:
        json.dump({"gpu": gpu, "torch": torch.__version__, "transformers": transformers_version,
                   "attention": attention, "reps": reps, "warmup": warmup,
                   "rows": [r for _, r in results], "failures": failures}, f, indent=2)
    for failure in failures:
        print(f"!!! FAILED: {failure}")
        print(f"!!! FAILED: {failure}", file=sys.stderr)
    if failures:
        print()

    # The comparison, every row of prefill.json ("-" where transformers did not run), the short table last.
    def hf(row, key):
        r = by_row.get(id(row))
        return None if r is None else r[key]

    def ratio(a, b):
        return None if a is None or b is None else a / b

    print(f"Prefill on {data.get('device', '?')}: lazygraph (bench_prefill: wall time of Decoder::prefill) against "
          "transformers (this script), and the floor bench_prefill measured in the same run (the prompt's GEMMs + "
          "attention)\n")
    print_table(["shape", "dtype", "tokens", "ours prefill ms", "transformers prefill ms", "floor prefill ms",
                 "ours/floor", "ours/transformers"],
                [[row["shape"], row["dtype"], str(row["tokens"]), fmt(row["prefill_ms"]), fmt(hf(row, "prefill_ms")),
                  fmt(row["floor_prefill_ms"]), fmt(ratio(row["prefill_ms"], row["floor_prefill_ms"]), ".1f"),
                  fmt(ratio(row["prefill_ms"], hf(row, "prefill_ms")))] for row in data["rows"]])
    print("Time to first token (prefill + the first decoded token's step; floor: + one step's weight read at the copy "
          "ceiling)\n")
    summary = []
    for row in data["rows"]:
        floor = row["floor_prefill_ms"] + row["floor_step_ms"]
        summary.append([row["shape"], row["dtype"], str(row["tokens"]), fmt(row["ttft_ms"]), fmt(hf(row, "ttft_ms")),
                        fmt(floor), fmt(ratio(row["ttft_ms"], floor), ".1f"),
                        fmt(ratio(row["ttft_ms"], hf(row, "ttft_ms")))])
    print_table(["shape", "dtype", "tokens", "ours ms", "transformers ms", "floor ms", "ours/floor",
                 "ours/transformers"], summary)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
