#!/usr/bin/env python3
"""Hugging Face transformers side of the mixture-of-experts benchmark (issue 65, item 6): decode step time.

usage: torch_moe.py --shape qwen3-30b-a3b|olmoe-1b-7b [--layers N] [--dtype bf16|f16] [--position P]
                    [--batch 1,8] [--reps N] [--out FILE]

Builds transformers' Qwen3MoeForCausalLM (qwen3-30b-a3b: d 2048, 48 layers, 32/4 heads of 128, q/k norms, 128
experts of width 768, top 8 renormalized, vocab 151936) or OlmoeForCausalLM (olmoe-1b-7b: d 2048, 16 layers, 16
heads, 64 experts of width 1024, top 8, vocab 50304) from a config of that shape (the first N layers with --layers),
its random weights made directly on the GPU in the element type (no host copy of the 61 GB), and times one decode
step with a KV cache of P positions (a prompt of P tokens first; position P, as bench_moe's step) at each batch:

  eager  the model's forward on one new token per row with the DynamicCache the prompt filled, cropped back to P
         positions after each step; as transformers comes (its default experts implementation); CUDA events around
         each call, so that the host's launches and waits count; median of N (default 20) after 3 warm-ups.
  graph  the same step with a StaticCache, captured with torch.cuda.graph and replayed (median of 5N replays);
         where the default experts implementation does not capture (a data-dependent expert loop), again with
         transformers' "batched_mm" experts (set_experts_implementation), and where that fails too, the step
         compiled with torch.compile(mode="reduce-overhead"); 'did not capture' with the reason otherwise.

The weights are transformers' own random init, not bench_moe's seeded ones: a step's time does not depend on the
values (both sides route each token to 8 experts), only the distinct experts a batch reads do. Prints a table and,
with --out, writes one line per batch that bench_moe reads:
  batch B eager_us X graph_us Y|- NOTE...
Exit status: 0 done, 1 failed, 2 usage error, 77 skipped (no torch, no transformers or no CUDA GPU; the reason is
printed).
"""
import argparse
import statistics
import sys
import traceback

SKIPPED = 77

try:
    import torch
    import transformers
except ImportError as e:
    print(f"torch_moe: skipped: {e}")
    sys.exit(SKIPPED)

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def model_class_and_config(shape, layers):
    """transformers' model class and a config of `shape`, with `layers` layers (0: all)."""
    if shape == "qwen3-30b-a3b":
        config = transformers.Qwen3MoeConfig(
            vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
            num_hidden_layers=layers or 48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
            num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
            rms_norm_eps=1e-6, max_position_embeddings=4096, tie_word_embeddings=False)
        return transformers.Qwen3MoeForCausalLM, config
    if shape == "olmoe-1b-7b":
        config = transformers.OlmoeConfig(
            vocab_size=50304, hidden_size=2048, intermediate_size=1024, num_hidden_layers=layers or 16,
            num_attention_heads=16, num_key_value_heads=16, num_experts=64, num_experts_per_tok=8,
            norm_topk_prob=False, rms_norm_eps=1e-5, max_position_embeddings=4096, tie_word_embeddings=False,
            pad_token_id=1, eos_token_id=50279)
        return transformers.OlmoeForCausalLM, config
    raise SystemExit(f"torch_moe: --shape {shape}: not one of qwen3-30b-a3b, olmoe-1b-7b")


def build(shape, layers, dtype):
    """The model with random weights made on the GPU in `dtype`, in eval mode."""
    cls, config = model_class_and_config(shape, layers)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("cuda"):
            model = cls(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def experts_implementation(model):
    """The model's experts implementation as get_experts_implementation gives it, or None where it has none."""
    try:
        return model.get_experts_implementation()
    except Exception:  # no experts interface in this transformers, or another signature
        return None


def event_median_us(fn, n):
    """Median time of fn() in microseconds, each call between its own pair of CUDA events."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for start, end in zip(starts, ends):
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1000.0


def prompt_ids(batch, position, vocab):
    """Row r's prompt: token (7 i + 3 + 101 r) mod vocab at position i (bench_moe's)."""
    i = torch.arange(position, device="cuda")
    return torch.stack([(7 * i + 3 + 101 * r) % vocab for r in range(batch)])


def step_ids(batch, vocab):
    """Row r's step token: (13 r + 1) mod vocab (bench_moe's)."""
    return torch.tensor([[(13 * r + 1) % vocab] for r in range(batch)], device="cuda")


def eager_step_us(model, batch, position, reps):
    """The eager decode step at `position` with a DynamicCache, cropped back after each step."""
    vocab = model.config.vocab_size
    out = model(input_ids=prompt_ids(batch, position, vocab), use_cache=True)
    cache = out.past_key_values
    ids = step_ids(batch, vocab)
    crop = getattr(cache, "crop", None)

    def step():
        model(input_ids=ids, past_key_values=cache, use_cache=True)
        if crop is not None:
            crop(position)

    for _ in range(3):
        step()
    note = "" if crop is not None else "cache grows by one position a step (no DynamicCache.crop)"
    return event_median_us(step, reps), note


def set_experts(model, implementation):
    """model.set_experts_implementation(implementation), where `implementation` is a name or what
    get_experts_implementation returned (a dict by sub-config; its one entry's name where the dict is refused)."""
    try:
        model.set_experts_implementation(implementation)
    except (TypeError, ValueError, KeyError):
        if not (isinstance(implementation, dict) and len(implementation) == 1):
            raise
        model.set_experts_implementation(next(iter(implementation.values())))


def static_cache(model, batch, length):
    """A StaticCache for `batch` rows of `length` positions (transformers 5's signature, else 4's)."""
    try:
        return transformers.StaticCache(config=model.config, max_cache_len=length)
    except TypeError:
        return transformers.StaticCache(config=model.config, max_batch_size=batch, max_cache_len=length,
                                        device="cuda", dtype=model.dtype)


def static_step(model, batch, position, experts=None):
    """The decode step at `position` on a StaticCache filled with the prompt: a function of no arguments whose every
    call recomputes the same step (it writes the same cache entries). The prompt runs with the model's experts
    implementation as it is; the step with `experts` where given (batched_mm, which copies each chosen expert's
    weights per token, would need tens of GB for a prompt of a batch)."""
    vocab = model.config.vocab_size
    cache = static_cache(model, batch, position + 16)
    model(input_ids=prompt_ids(batch, position, vocab), past_key_values=cache,
          cache_position=torch.arange(position, device="cuda"), use_cache=True)
    if experts is not None:
        set_experts(model, experts)
    ids = step_ids(batch, vocab)
    where = torch.tensor([position], device="cuda")
    return lambda: model(input_ids=ids, past_key_values=cache, cache_position=where, use_cache=True).logits


def captured_us(step, reps):
    """torch.cuda.graph of step() (after warm-ups on a side stream), replayed: median us per replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.replay()
    torch.cuda.synchronize()
    return event_median_us(graph.replay, reps)


def first_line(e):
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return text[0][:160] if text else type(e).__name__


def settle():
    """Waits for the GPU after a failed capture; False when the failure left the CUDA context unusable."""
    try:
        torch.cuda.synchronize()
        return True
    except Exception:
        return False


def graph_step_us(model, batch, position, reps):
    """The step as a CUDA graph: (us or None, note). Leaves the model's experts implementation as it found it."""
    tried = []
    default = experts_implementation(model)
    try:
        return captured_us(static_step(model, batch, position), reps), f"torch.cuda.graph, experts {default}"
    except Exception as e:
        tried.append(f"default experts ({default}): {first_line(e)}")
    if not settle():
        return None, "did not capture: " + "; ".join(tried) + " (and the CUDA context did not recover)"
    if default is not None:
        try:
            return (captured_us(static_step(model, batch, position, "batched_mm"), reps),
                    "torch.cuda.graph, experts batched_mm")
        except Exception as e:
            tried.append(f"batched_mm: {first_line(e)}")
        finally:
            set_experts(model, default)
        if not settle():
            return None, "did not capture: " + "; ".join(tried) + " (and the CUDA context did not recover)"
    try:
        from torch._dynamo.utils import counters
        counters.clear()
        compiled = torch.compile(static_step(model, batch, position), mode="reduce-overhead")
        for _ in range(3):
            compiled()
        torch.cuda.synchronize()
        skips = sum(v for k, v in counters["inductor"].items() if "cudagraph_skip" in k)
        if skips:
            tried.append(f"torch.compile reduce-overhead: cudagraphs skipped ({skips})")
        else:
            return event_median_us(compiled, reps), "torch.compile reduce-overhead"
    except Exception as e:
        tried.append(f"torch.compile reduce-overhead: {first_line(e)}")
    return None, "did not capture: " + "; ".join(tried)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", required=True, choices=["qwen3-30b-a3b", "olmoe-1b-7b"])
    parser.add_argument("--layers", type=int, default=0)
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    parser.add_argument("--position", type=int, default=128)
    parser.add_argument("--batch", default="1,8")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out")
    args = parser.parse_args()
    try:
        batches = [int(b) for b in args.batch.split(",")]
    except ValueError:
        parser.error(f"--batch {args.batch}: not a list of integers")
    if not torch.cuda.is_available():
        print("torch_moe: skipped: no CUDA GPU")
        return SKIPPED
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name()}; "
          f"{args.shape} {args.dtype}, {args.layers or 'all'} layers, position {args.position}")
    with torch.inference_mode():
        model = build(args.shape, args.layers, DTYPES[args.dtype])
        print(f"  {sum(p.numel() for p in model.parameters()) * 2 / 1e9:.1f} GB of weights, "
              f"{torch.cuda.memory_allocated() / 2**30:.1f} GiB allocated")
        default = experts_implementation(model)
        print(f"  experts implementation: {default}")
        # Every batch eager first: a capture that fails on the device (a device-side assert) can leave the CUDA
        # context unusable for anything after it.
        eager = {}
        for batch in batches:
            eager[batch] = eager_step_us(model, batch, args.position, args.reps)
            print(f"  batch {batch}: eager {eager[batch][0]:.0f} us", flush=True)
        rows = []
        dead = None
        for batch in batches:
            eager_us, note = eager[batch]
            if dead is None:
                graph_us, graph_note = graph_step_us(model, batch, args.position, 5 * args.reps)
                if "did not recover" in graph_note:
                    dead = f"not tried: the capture at batch {batch} left the CUDA context unusable"
            else:
                graph_us, graph_note = None, dead
            notes = "; ".join(n for n in (note, graph_note) if n)
            rows.append((batch, eager_us, graph_us, notes))
            print(f"  batch {batch}: graph {'-' if graph_us is None else f'{graph_us:.0f} us'} ({notes})", flush=True)
    print("\n| shape | layers | dtype | batch | eager us | graph us | note |\n|---|---|---|---|---|---|---|")
    for batch, eager_us, graph_us, notes in rows:
        print(f"| {args.shape} | {model.config.num_hidden_layers} | {args.dtype} | {batch} | {eager_us:.0f} | "
              f"{'-' if graph_us is None else f'{graph_us:.0f}'} | {notes} |")
    if args.out:
        with open(args.out, "w") as f:
            for batch, eager_us, graph_us, notes in rows:
                graph = "-" if graph_us is None else f"{graph_us:.1f}"
                f.write(f"batch {batch} eager_us {eager_us:.1f} graph_us {graph} {notes}\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except Exception:
        traceback.print_exc()
        sys.exit(1)
