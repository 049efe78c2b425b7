#!/usr/bin/env python3
"""Hugging Face transformers side of the serving benchmark (issue 66): continuous batching's throughput.

usage: torch_serving.py [--shape llama32-1b|tinyllama] [--dtype f16|bf16] [--concurrency N,N,...] [--prompt P]
                        [--new N] [--out FILE]

Builds transformers' LlamaForCausalLM of bench_serving's shape (llama32-1b: d 2048, 16 layers, 32/8 heads, ffn 8192,
vocab 128256, RoPE llama3; tinyllama: d 2048, 22 layers, 32/4 heads, ffn 5632, vocab 32000) with its own random
weights made on the GPU in the element type, and for each count N serves N requests at once through
`generate_batch` (transformers' continuous batching: a paged KV cache, requests scheduled step by step): each a
prompt of P tokens (the same tokens bench_serving submits) and N new tokens, greedy, no stop token. Prints the wall
time of the call (after one warm-up call of the same count), the tokens made and tokens/s; with --out, one line per
count that bench_serving --torch reads:
  requests N tokens_per_s X|- wall_s Y|- NOTE...
The attention implementations tried, in order: "paged|flash_attention_2", "paged|sdpa", "paged|eager"; the first
that loads and generates is used and named in the note (the GPU machine's transformers 5.17 has no flash-attn
package: "paged|sdpa").
Exit status: 0 done, 1 failed, 2 usage error, 77 skipped (no torch, no transformers or no CUDA GPU; the reason is
printed).
"""
import argparse
import sys
import time
import traceback

SKIPPED = 77

try:
    import torch
    import transformers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
except ImportError as e:
    print(f"torch_serving: skipped: {e}")
    sys.exit(SKIPPED)

SHAPES = {
    "llama32-1b": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                       intermediate_size=8192, vocab_size=128256,
                       rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 8192}),
    "tinyllama": dict(hidden_size=2048, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
                      intermediate_size=5632, vocab_size=32000,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
}
IMPLEMENTATIONS = ["paged|flash_attention_2", "paged|sdpa", "paged|eager"]


def prompt_of(request, length, vocab):
    """bench_serving's prompt for request `request`: the same formula, so both sides serve the same tokens."""
    return [(request * 7919 + t * 104729 + 13) % vocab for t in range(length)]


def build(shape, dtype, implementation, positions):
    # Above llama3 RoPE's original_max_position_embeddings (8192), as the real model's 131072 is.
    config = LlamaConfig(**SHAPES[shape], max_position_embeddings=max(positions, 131072), tie_word_embeddings=False,
                         rms_norm_eps=1e-5, attn_implementation=implementation)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(dtype)
    model.eval()
    return model


def serve(model, requests, prompt, fresh, vocab):
    inputs = [prompt_of(i, prompt, vocab) for i in range(requests)]
    config = GenerationConfig(max_new_tokens=fresh, min_new_tokens=fresh, do_sample=False, eos_token_id=None,
                              pad_token_id=0)
    # Not inference_mode: generate_batch's own thread updates tensors made here in place, which that mode forbids.
    with torch.no_grad():
        model.generate_batch(inputs=inputs, generation_config=config, progress_bar=False)  # warm-up
        torch.cuda.synchronize()
        start = time.perf_counter()
        outputs = model.generate_batch(inputs=inputs, generation_config=config, progress_bar=False)
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
    made = sum(len(o.generated_tokens) for o in outputs.values())
    if len(outputs) != requests:
        raise RuntimeError(f"generate_batch answered {len(outputs)} of {requests} requests")
    return wall, made


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama32-1b")
    parser.add_argument("--dtype", choices=["f16", "bf16"], default="f16")
    parser.add_argument("--concurrency", default="1,8,32,64,256")
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new", type=int, default=256)
    parser.add_argument("--out")
    a = parser.parse_args()
    try:
        counts = [int(n) for n in a.concurrency.split(",")]
    except ValueError:
        parser.error(f"--concurrency {a.concurrency}: a list of integers")
    if any(n < 1 for n in counts) or a.prompt < 1 or a.new < 1:
        parser.error("--concurrency, --prompt and --new must be at least 1")
    if not torch.cuda.is_available():
        print("torch_serving: skipped: no CUDA GPU")
        return SKIPPED
    dtype = torch.float16 if a.dtype == "f16" else torch.bfloat16
    vocab = SHAPES[a.shape]["vocab_size"]
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name()}")
    results = {}
    model = None
    used = None
    notes = []
    for implementation in IMPLEMENTATIONS:
        try:
            model = build(a.shape, dtype, implementation, a.prompt + a.new)
            serve(model, 1, 16, 2, vocab)  # does it generate at all?
            used = implementation
            break
        except Exception as e:  # an implementation this install lacks: try the next
            notes.append(f"{implementation}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            model = None
            torch.cuda.empty_cache()
    if used is None:
        print("torch_serving: no attention implementation generated:\n  " + "\n  ".join(notes))
        for n in counts:
            results[n] = (None, None, "generate_batch failed with every implementation: " + "; ".join(notes))
    else:
        print(f"attention implementation: {used}")
        for n in counts:
            try:
                wall, made = serve(model, n, a.prompt, a.new, vocab)
                results[n] = (made / wall, wall, f"generate_batch, {used}, {made} tokens")
                print(f"  {n} requests: {wall:.2f} s, {made / wall:.0f} tokens/s")
            except Exception as e:
                traceback.print_exc()
                results[n] = (None, None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            sys.stdout.flush()
    print("\n| requests | tokens/s | wall s | note |\n|---|---|---|---|")
    for n in counts:
        rate, wall, note = results[n]
        print(f"| {n} | {'-' if rate is None else f'{rate:.0f}'} | {'-' if wall is None else f'{wall:.2f}'} | {note} |")
    if a.out:
        with open(a.out, "w") as f:
            for n in counts:
                rate, wall, note = results[n]
                f.write(f"requests {n} tokens_per_s {'-' if rate is None else f'{rate:.1f}'} "
                        f"wall_s {'-' if wall is None else f'{wall:.3f}'} {note}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
