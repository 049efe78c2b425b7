#!/usr/bin/env python3
"""Cross-check of lazygraph's decoder against Hugging Face transformers (issue 38, item 3).

For each row of a matrix of small model configurations (Llama, Mistral, Qwen2, Qwen3, Gemma 3, Qwen3-MoE, Mixtral,
OLMoE; fp16 and bf16; tied and untied embeddings; grouped-query ratios; head_dim 64 and 128, also set apart from
hidden / heads; rope_theta 1e4, 5e5, 1e6; RoPE scaling llama3 and linear; sharded weights; the older top-level rope_theta / rope_scaling layout), this script
builds a random model with transformers itself, casts its weights to the row's dtype and writes the checkpoint with
`save_pretrained`. The reference is transformers' own forward pass in float32 on the CPU over the SAME rounded
weights, teacher-forced over a random token sequence. The program `decoder_logits` (built next to the tests) loads
the folder with `lazygraph::nn::load_decoder` and writes what the decoder computes; the two are compared:

- relative error: for each position, ||ours - ref||_2 / ||ref||_2 over the vocabulary; a row passes when the
  largest over all positions is within 1e-2 (fp16) or 3e-2 (bf16) and every value is finite;
- greedy token: at every position whose reference top-two margin is CLEAR, our argmax must equal the
  reference's. A margin is clear when  top1 - top2 > 5 * bound * rms(ref logits at that position),  `bound` being
  the row's relative-error bound: an error within the bound, spread over the vocabulary, moves a logit by about
  bound * rms, so a clear margin is five such errors wide. Positions with a smaller margin are counted, not judged.

Mixtures of experts (Qwen3-MoE, Mixtral, OLMoE): the router's choice is a discontinuity, so a position is judged
only where every layer's routing is clear in the reference. transformers' routers are hooked (the modules named
`...gate` of the sparse blocks) to read each position's router logits; a layer's routing is clear when the logit of
its last chosen expert exceeds the best unchosen one's by more than CLEAR_FACTOR * bound * rms of the position's
centered router logits (an error within the bound moves a logit by about bound * rms). Positions whose routing is
not clear are counted ("routes clear" in the detail) and left out of the error bound and the argmax judgement. A
route that flips at such a position changes what it writes to the KV cache, which every later position of the
sequence reads, so a later position, clear itself, may then differ by more than the bound: such a position is
counted as explained (in the detail) instead of failing when an earlier position of its sequence had an unclear
route, in one sequence of a path at most (a replay of a prompt counts as a sequence, and replays that part together
count as one: their logits agree within the bound wherever both have them, as when two prompts' shared rows are
computed alike and flip the same route, and another replay stays within the bound where they first part; on the H200
the bf16 Mixtral and OLMoE rows' replays of prompts of 16 and 17 tokens on tensor cores part so, within 1e-2 of each
other); generated tokens so, for at most EXPLAINED_SHARE of them. On the H200 the Qwen3-MoE row's batch path (whose
rows are bit for bit those of stepping each sequence alone: a GPU test) parted so from transformers in its second
sequence from position 42 on, by up to 6.3e-2, and stayed within 2.7e-3 on tensor cores. The step path also compares
lazygraph's own routes with the reference's (`decoder_logits --routes`, which records them:
DecoderConfig::record_routes): at every position and layer whose routing is clear in the reference, with every
earlier layer of the position and every earlier position of the sequence clear too (else our input to that router
may rightly differ), the set of experts the decoder chose must be transformers' top k ("routes equal" in the detail
counts them). Expert matrices (3-D in transformers 5: [experts, out, in]) get the same init as the others, std
1/sqrt(in).

Some rows must be refused by the loader with a message naming the key (or the tensor) it does not implement
(attention_bias, mlp_bias, rope_type yarn): such a row passes when `decoder_logits` fails to load with a
CheckpointError or UsageError whose message names it, and fails when the model loads. Sliding windows shorter than
the sequence (Mistral, Qwen2, Gemma 3) are computed.

Besides teacher-forced single steps (`forward`), some rows also run the other paths: `prefill` for prompt lengths
crossing the 8-row chunks followed by single steps, `forward_batch` of three sequences, both also on tensor cores,
and `generate` after a prefill, whose tokens are checked against transformers' argmax over the same sequence. The
`tp2-` paths run those modes split over two GPUs (`decoder_logits --ranks 2`: a TensorParallelDecoder whose ranks
each read their share of the files); on a machine with one GPU they are skipped, and the last line counts them.

Weights. transformers' default init (normal, std 0.02, norm gains 1, biases 0) gives near-uniform attention and
logits whose top-two margins are mostly tiny, so most positions would not be judged, and zero biases or unit gains
would hide a loader that drops them. Here every matrix of shape [out, in] (the embedding too, as [vocab, hidden])
is normal with std 1/sqrt(in), so each projection keeps its input's scale: attention scores have a standard
deviation near 1 (RoPE errors move them visibly) and the logits about 1 (margins well above the bounds). Norm
gains are uniform in [0.5, 1.5] (Gemma 3's stored weights in [-0.5, 0.5], which it reads as 1 + w) and biases normal
with std 0.5.

Exit status: 0 every row passed, 1 a row failed, 2 bad arguments, 77 skipped (torch or transformers not
installed, or no GPU; the reason is printed). The table also goes to $OUT/crosscheck.txt when OUT is set.

By hand, on the GPU machine (after building `decoder_logits`, e.g. `ninja -C build-gpu tests/decoder_logits`):

    python3 tests/nn/crosscheck/crosscheck_transformers.py build-gpu/tests/decoder_logits
    python3 tests/nn/crosscheck/crosscheck_transformers.py build-gpu/tests/decoder_logits --only llama3 --keep /tmp/cc
    python3 tests/nn/crosscheck/crosscheck_transformers.py --list

Meson runs it as the test `crosscheck-transformers` (suite gpu). Nothing is downloaded: transformers runs offline.
"""

import argparse
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field

SKIPPED = 77
BOUNDS = {"f16": 1e-2, "bf16": 3e-2}
CLEAR_FACTOR = 5.0
# A mixture of experts' generate: at most this share of the judged tokens may differ, each only where an earlier
# position had a route that is not clear (the module's docstring).
EXPLAINED_SHARE = 0.05
POSITIONS = 96  # teacher-forced positions per sequence (issue 38 asks for at least 64)
CONTEXT = 128  # KV cache positions the decoder is loaded with (LoadOptions::context)
MAX_POSITIONS = 256  # max_position_embeddings of every model
PREFILL_LENGTHS = [1, 7, 8, 9, 16, 17, 40]  # and the whole sequence: prompts across the 8-row chunks
BATCH_SEQUENCES = 3
GENERATE_PROMPT = 9
GENERATE_TOKENS = 48
RUN_TIMEOUT_S = 300

# The paths a row may run: name -> (mode of decoder_logits, extra arguments).
MODES = {
    "step": ("step", []),
    "prefill": ("prefill", []),
    "prefill-tc": ("prefill", ["--tensor-cores"]),
    "batch": ("batch", []),
    "batch-tc": ("batch", ["--tensor-cores"]),
    "generate": ("generate", []),
    "persistent": ("step", ["--persistent"]),
    # Tensor parallelism: the model split over GPUs 0 and 1 (skipped on a machine with one GPU).
    "tp2-step": ("step", ["--ranks", "2"]),
    "tp2-prefill": ("prefill", ["--ranks", "2"]),
    "tp2-prefill-tc": ("prefill", ["--ranks", "2", "--tensor-cores"]),
    "tp2-batch": ("batch", ["--ranks", "2"]),
    "tp2-generate": ("generate", ["--ranks", "2"]),
}
ALL_PATHS = ("step", "prefill", "prefill-tc", "batch", "batch-tc", "generate")
TP_PATHS = ("tp2-step", "tp2-prefill", "tp2-prefill-tc", "tp2-batch", "tp2-generate")


@dataclass
class Row:
    """One configuration of the matrix."""

    name: str
    arch: str  # "llama", "mistral", "qwen2", "qwen3", "gemma3", "qwen3_moe", "mixtral" or "olmoe"
    dtype: str  # "f16" or "bf16"
    config: dict  # keyword arguments of the transformers config class
    expect: str = "match"  # "match", "refuse" or "refuse-or-match"
    names: tuple = ()  # what a refusal must name (any one of them)
    shard_size: str | None = None  # save_pretrained's max_shard_size: several files
    legacy_rope_layout: bool = False  # rewrite config.json with top-level rope_theta / rope_scaling
    paths: tuple = ("step",)
    note: str = ""


def rope(theta, rope_type="default", **scaling):
    """transformers 5's `rope_parameters`."""
    return {"rope_type": rope_type, "rope_theta": float(theta), **scaling}


def model_config(**overrides):
    """A small Llama-family config: 2 layers, hidden 512, 8 heads of 64, vocabulary 1024."""
    c = dict(
        vocab_size=1024,
        hidden_size=512,
        intermediate_size=1024,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=8,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters=rope(10000),
    )
    c.update(overrides)
    return c


def gemma3_config(**overrides):
    """A small Gemma 3 text config: 6 layers, the first 5 sliding (window 16) with RoPE base 1e4, the last full with
    1e6; hidden 512, 8 heads of 64 over 2 kv heads, tied embeddings (Gemma's default)."""
    c = dict(
        vocab_size=1024,
        hidden_size=512,
        intermediate_size=1024,
        num_hidden_layers=6,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        sliding_window=16,
        layer_types=["sliding_attention"] * 5 + ["full_attention"],
        rope_parameters={"full_attention": rope(1e6), "sliding_attention": rope(1e4)},
        query_pre_attn_scalar=64,
    )
    c.update(overrides)
    return c


def moe_config(experts, top_k, width, **overrides):
    """model_config with a mixture of `experts` experts of width `width`, the top `top_k` chosen, in every layer
    (Qwen3-MoE's and OLMoE's keys; Mixtral's rows rename them)."""
    return model_config(num_experts=experts, num_experts_per_tok=top_k, moe_intermediate_size=width, **overrides)


def mixtral_config(experts, top_k, width, **overrides):
    """model_config with Mixtral's mixture of experts: its expert width is intermediate_size."""
    return model_config(num_local_experts=experts, num_experts_per_tok=top_k, intermediate_size=width, **overrides)


LLAMA3 = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=32)


def matrix():
    """The rows, in the order they run."""
    rows = [
        Row("llama-mha", "llama", "f16", model_config(), paths=ALL_PATHS + ("persistent",) + TP_PATHS),
        Row("llama-mha", "llama", "bf16", model_config(rms_norm_eps=1e-6)),
        Row("llama-tied", "llama", "f16", model_config(tie_word_embeddings=True, vocab_size=2048)),
        Row("llama-tied", "llama", "bf16", model_config(tie_word_embeddings=True, vocab_size=512)),
        Row("llama-gqa8-kv2", "llama", "f16", model_config(num_key_value_heads=2)),
        Row("llama-gqa8-kv2", "llama", "bf16", model_config(num_key_value_heads=2)),
        Row("llama-mqa8-kv1", "llama", "f16", model_config(num_key_value_heads=1)),
        Row("llama-hd128", "llama", "f16", model_config(num_attention_heads=4, num_key_value_heads=2),
            note="hidden 512 / 4 heads"),
        Row("llama-hd128-explicit", "llama", "f16", model_config(head_dim=128, num_key_value_heads=2),
            note="hidden 512, 8 heads of 128", paths=("step", "prefill", "batch", "generate")),
        Row("llama-hd128-explicit", "llama", "bf16", model_config(head_dim=128, num_key_value_heads=8)),
        Row("llama-hd256-explicit", "llama", "f16",
            model_config(hidden_size=256, intermediate_size=768, num_attention_heads=4, head_dim=256,
                         num_key_value_heads=2),
            note="hidden 256, 4 heads of 256", paths=("step", "prefill", "batch")),
        Row("llama-hd256-explicit", "llama", "bf16",
            model_config(hidden_size=256, intermediate_size=768, num_attention_heads=4, head_dim=256,
                         num_key_value_heads=4)),
        Row("llama-hd64-explicit", "llama", "f16",
            model_config(hidden_size=256, intermediate_size=768, head_dim=64, num_key_value_heads=4),
            note="hidden 256, 8 heads of 64"),
        Row("llama-theta5e5", "llama", "f16", model_config(rope_parameters=rope(500000))),
        Row("llama-theta5e5", "llama", "bf16", model_config(rope_parameters=rope(500000), num_key_value_heads=2)),
        Row("llama-theta5e5-legacy", "llama", "f16", model_config(rope_parameters=rope(500000)),
            legacy_rope_layout=True, note="top-level rope_theta"),
        Row("llama-theta1e6", "llama", "bf16", model_config(rope_parameters=rope(1e6))),
        Row("llama3-scaling", "llama", "f16",
            model_config(rope_parameters=rope(500000, "llama3", **LLAMA3), num_key_value_heads=2),
            note="original_max_position_embeddings 32", paths=ALL_PATHS),
        Row("llama3-scaling", "llama", "bf16",
            model_config(rope_parameters=rope(500000, "llama3", **LLAMA3), tie_word_embeddings=True)),
        Row("llama3-scaling-legacy", "llama", "f16",
            model_config(rope_parameters=rope(500000, "llama3", **LLAMA3), num_key_value_heads=2),
            legacy_rope_layout=True, note="top-level rope_scaling"),
        Row("llama-linear-scaling", "llama", "f16", model_config(rope_parameters=rope(10000, "linear", factor=4.0))),
        Row("llama-linear-scaling", "llama", "bf16",
            model_config(rope_parameters=rope(500000, "linear", factor=2.0), num_key_value_heads=2)),
        Row("llama-sharded", "llama", "f16", model_config(num_key_value_heads=2), shard_size="1MB"),
        Row("llama-sharded", "llama", "bf16", model_config(tie_word_embeddings=True), shard_size="1MB"),
        Row("mistral-no-window", "mistral", "f16", model_config(num_key_value_heads=2, sliding_window=None)),
        Row("mistral-window-4096", "mistral", "bf16", model_config(num_key_value_heads=2, sliding_window=4096),
            note="window >= context"),
        Row("mistral-window-16", "mistral", "f16", model_config(num_key_value_heads=2, sliding_window=16),
            note="window < sequence", paths=ALL_PATHS + TP_PATHS),
        Row("qwen2-window-24", "qwen2", "bf16",
            model_config(num_key_value_heads=2, use_sliding_window=True, sliding_window=24, max_window_layers=1),
            note="window on layer 1", paths=("step", "prefill", "prefill-tc")),
        Row("qwen2", "qwen2", "f16",
            model_config(num_key_value_heads=2, tie_word_embeddings=True, rope_parameters=rope(1e6),
                         rms_norm_eps=1e-6), note="q/k/v biases"),
        Row("qwen2", "qwen2", "bf16",
            model_config(num_key_value_heads=2, tie_word_embeddings=True, rope_parameters=rope(1e6),
                         rms_norm_eps=1e-6), note="q/k/v biases", paths=ALL_PATHS + TP_PATHS),
        Row("qwen3", "qwen3", "f16",
            model_config(head_dim=128, num_key_value_heads=2, rope_parameters=rope(1e6), rms_norm_eps=1e-6),
            note="q/k norms, 8 heads of 128", paths=ALL_PATHS + TP_PATHS),
        Row("qwen3-tied", "qwen3", "bf16",
            model_config(head_dim=64, num_key_value_heads=4, tie_word_embeddings=True, rope_parameters=rope(1e6),
                         rms_norm_eps=1e-6),
            note="q/k norms, tied", paths=ALL_PATHS + TP_PATHS),
        Row("qwen3-persistent", "qwen3", "f16", model_config(head_dim=64, num_key_value_heads=2), expect="refuse",
            names=("q/k norms",), paths=("persistent",), note="no persistent tiles for q/k norms"),
        Row("qwen3-attention-bias", "qwen3", "f16", model_config(attention_bias=True), expect="refuse",
            names=("attention_bias", "proj.bias")),
        Row("gemma3", "gemma3", "f16", gemma3_config(), note="5 of 6 layers a window of 16", paths=ALL_PATHS + TP_PATHS),
        Row("gemma3-softcap", "gemma3", "bf16",
            gemma3_config(head_dim=128, sliding_window=32, final_logit_softcapping=30.0, query_pre_attn_scalar=100),
            note="head_dim 128, window 32, soft cap 30", paths=ALL_PATHS + TP_PATHS),
        Row("gemma3-persistent", "gemma3", "f16", gemma3_config(), expect="refuse", names=("persistent backend",),
            paths=("persistent",), note="no persistent tiles for its block"),
        Row("gemma3-attn-softcap", "gemma3", "f16", gemma3_config(attn_logit_softcapping=50.0), expect="refuse",
            names=("attn_logit_softcapping",)),
        Row("qwen3-moe", "qwen3_moe", "f16",
            moe_config(8, 2, 256, num_key_value_heads=2, norm_topk_prob=True, rope_parameters=rope(1e6),
                       rms_norm_eps=1e-6),
            note="8 experts of 256, top 2 renormalized, q/k norms", paths=ALL_PATHS + TP_PATHS),
        Row("qwen3-moe-top4", "qwen3_moe", "f16",
            moe_config(16, 4, 128, num_key_value_heads=4, norm_topk_prob=False, tie_word_embeddings=True,
                       rope_parameters=rope(1e6), rms_norm_eps=1e-6),
            note="16 experts of 128, top 4 as the softmax gives them, tied", paths=ALL_PATHS),
        Row("qwen3-moe-persistent", "qwen3_moe", "f16", moe_config(8, 2, 256, num_key_value_heads=2),
            expect="refuse", names=("mixture of experts",), paths=("persistent",),
            note="no persistent tiles for a mixture of experts"),
        Row("qwen3-moe-tp2-width", "qwen3_moe", "f16", moe_config(8, 2, 72, num_key_value_heads=2), expect="refuse",
            names=("moe.expert_width",), paths=("tp2-step",), note="experts of 72 do not split into multiples of 8"),
        Row("mixtral", "mixtral", "f16", mixtral_config(8, 2, 256, num_key_value_heads=2, sliding_window=None),
            note="8 experts of 256, top 2", paths=ALL_PATHS + TP_PATHS),
        Row("mixtral-window-16", "mixtral", "bf16",
            mixtral_config(8, 2, 256, num_key_value_heads=2, sliding_window=16, rope_parameters=rope(1e6)),
            note="window < sequence", paths=("step", "prefill", "batch")),
        # OlmoeConfig's default eos (50279) is past the small vocabulary: eos_token_id=2.
        Row("olmoe", "olmoe", "f16",
            model_config(num_experts=8, num_experts_per_tok=2, intermediate_size=256, norm_topk_prob=False,
                         eos_token_id=2),
            note="8 experts of 256, top 2 as the softmax gives them, q/k norms over the whole projection",
            paths=ALL_PATHS),
        # Top 4 of 16 in fp16: in bf16 only a third of the routes were clear enough to judge (H200 run).
        Row("olmoe-gqa-top4", "olmoe", "f16",
            model_config(num_experts=16, num_experts_per_tok=4, intermediate_size=128, norm_topk_prob=True,
                         num_key_value_heads=2, rope_parameters=rope(1e6), rms_norm_eps=1e-6, eos_token_id=2),
            note="16 experts of 128, top 4 renormalized, k_norm over 2 kv heads", paths=ALL_PATHS),
        Row("olmoe-bf16", "olmoe", "bf16",
            model_config(num_experts=8, num_experts_per_tok=2, intermediate_size=256, norm_topk_prob=False,
                         eos_token_id=2),
            note="8 experts of 256, top 2, bf16", paths=("step", "prefill", "batch", "generate")),
        Row("olmoe-tp2", "olmoe", "f16",
            model_config(num_experts=8, num_experts_per_tok=2, intermediate_size=256, eos_token_id=2),
            expect="refuse", names=("q/k norms over the whole projection",), paths=("tp2-step",),
            note="no whole-projection q/k norms over ranks"),
        Row("llama-attention-bias", "llama", "f16", model_config(attention_bias=True), expect="refuse",
            names=("attention_bias", "proj.bias")),
        Row("llama-mlp-bias", "llama", "f16", model_config(mlp_bias=True), expect="refuse",
            names=("mlp_bias", "proj.bias")),
        Row("llama-rope-yarn", "llama", "f16",
            model_config(rope_parameters=rope(10000, "yarn", factor=4.0, original_max_position_embeddings=64)),
            expect="refuse", names=("yarn", "rope_type")),
    ]
    return rows


def row_id(row):
    return f"{row.name}/{row.dtype}"


def skip(reason):
    """Exits 77 (Meson's skip) after saying why: "crosscheck-transformers: skipped: REASON"."""
    print(f"crosscheck-transformers: skipped: {reason}")
    sys.exit(SKIPPED)


@dataclass
class Result:
    """One line of the table."""

    row: str
    arch: str
    dtype: str
    path: str
    error: str = "-"  # max relative error, formatted
    argmax: str = "-"  # "equal/clear (total equal of rows)"
    status: str = "FAIL"
    detail: str = ""
    passed: bool = False
    skipped: bool = False  # counted apart from the passed in the last line
    extra: list = field(default_factory=list)


class Harness:
    """Builds the checkpoints, computes the references, runs decoder_logits and compares."""

    def __init__(self, torch, transformers, program, work_dir, positions, keep=False, verbose=False):
        self.torch = torch
        self.transformers = transformers
        self.program = program
        self.work_dir = work_dir
        self.positions = positions
        self.keep = keep
        self.verbose = verbose
        self.prefill_lengths = sorted({n for n in PREFILL_LENGTHS if n < positions} | {positions})
        self.classes = {
            "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
            "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
            "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
            "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
            "gemma3": (transformers.Gemma3TextConfig, transformers.Gemma3ForCausalLM),
            "qwen3_moe": (transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM),
            "mixtral": (transformers.MixtralConfig, transformers.MixtralForCausalLM),
            "olmoe": (transformers.OlmoeConfig, transformers.OlmoeForCausalLM),
        }
        self.routes = {}  # per reference sequence: whether every layer's routing is clear at each position
        # per reference sequence: each layer's top k experts at each position, sorted [layers, positions, top_k], and
        # whether that layer's routing is clear there [layers, positions]
        self.choices = {}

    # ---- the model and its checkpoint ----

    def build(self, row, seed):
        """The row's model in float32 with weights already rounded to the row's dtype."""
        torch = self.torch
        config_class, model_class = self.classes[row.arch]
        config = config_class(**row.config)
        torch.manual_seed(seed)
        model = model_class(config).float().eval()
        storage = torch.float16 if row.dtype == "f16" else torch.bfloat16
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    # Gains uniform in [0.5, 1.5]: Gemma 3 stores a norm's gain as w meaning 1 + w.
                    values = torch.rand(p.shape, generator=generator) + (-0.5 if row.arch == "gemma3" else 0.5)
                elif name.endswith(".bias"):
                    values = torch.randn(p.shape, generator=generator) * 0.5
                elif p.dim() in (2, 3):  # [out, in], or a mixture's stacked experts [experts, out, in]
                    values = torch.randn(p.shape, generator=generator) / math.sqrt(p.shape[-1])
                else:
                    raise RuntimeError(f"no init rule for parameter {name} of shape {tuple(p.shape)}")
                p.copy_(values.to(storage).float())
        tie = bool(row.config.get("tie_word_embeddings", False))
        if tie and model.get_output_embeddings().weight is not model.get_input_embeddings().weight:
            model.tie_weights()
        tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
        if tied != tie:
            raise RuntimeError(f"transformers {'tied' if tied else 'did not tie'} the embeddings, against the config")
        return model, storage

    def save(self, row, model, storage, directory):
        """Writes the checkpoint as transformers does; returns the safetensors files written."""
        stored = copy.deepcopy(model).to(storage)  # the float32 model keeps its float32 RoPE buffers
        kwargs = {"max_shard_size": row.shard_size} if row.shard_size else {}
        stored.save_pretrained(directory, **kwargs)
        files = sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))
        if row.shard_size and len(files) < 2:
            raise RuntimeError(f"save_pretrained(max_shard_size={row.shard_size}) wrote {len(files)} file")
        if row.legacy_rope_layout:
            path = os.path.join(directory, "config.json")
            with open(path) as f:
                config = json.load(f)
            parameters = dict(config.pop("rope_parameters"))
            config["rope_theta"] = parameters.pop("rope_theta")
            if parameters.get("rope_type", "default") != "default":
                config["rope_scaling"] = parameters
            with open(path, "w") as f:
                json.dump(config, f, indent=2)
        return files

    def reference(self, model, ids, bound=None):
        """transformers' float32 logits for the sequence `ids`, teacher-forced: [len(ids), vocab]. With a mixture of
        experts and a `bound`, also whether each position's routing is clear in every layer (route_clear)."""
        torch = self.torch
        logits = []  # each sparse block's router logits (or probabilities), [len(ids), experts]
        hooks = []
        top_k = getattr(model.config, "num_experts_per_tok", 0)
        if bound is not None and top_k:
            for name, module in model.named_modules():
                if name.endswith(".gate") and ("mlp" in name or "block_sparse_moe" in name):
                    hooks.append(module.register_forward_hook(
                        lambda _m, _i, out: logits.append((out[0] if isinstance(out, tuple) else out).detach())))
            if not hooks:
                raise RuntimeError("no router found to hook (modules named ...mlp.gate or ...block_sparse_moe.gate)")
        try:
            with torch.no_grad():
                out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
        finally:
            for h in hooks:
                h.remove()
        if hooks:
            self.routes[tuple(ids)] = self.route_clear(logits, len(ids), top_k, bound)
            self.choices[tuple(ids)] = self.route_choices(logits, len(ids), top_k, bound)
        return out.logits[0].float()

    def route_choices(self, routers, positions, top_k, bound):
        """Each router's top k experts per position, sorted ([layers, positions, top_k]), whether each layer's
        routing is clear at each position ([layers, positions]; route_clear's rule, layer by layer), and the count of
        experts."""
        torch = self.torch
        chosen, clear = [], []
        for r in routers:
            r = r.float().reshape(positions, -1)
            chosen.append(torch.topk(r, top_k, dim=1).indices.sort(dim=1).values)
            clear.append(self.route_clear([r], positions, top_k, bound))
        return torch.stack(chosen), torch.stack(clear), routers[0].reshape(positions, -1).shape[1]

    def route_clear(self, routers, positions, top_k, bound):
        """Whether, at each of `positions`, every router's routing is clear (the module's docstring)."""
        torch = self.torch
        clear = torch.ones(positions, dtype=torch.bool)
        for r in routers:
            r = r.float().reshape(positions, -1)
            if top_k >= r.shape[1]:
                continue  # every expert chosen: nothing to flip
            # Logits, or probabilities (a router that returns its softmax): their logs differ from the logits by a
            # constant per position, which neither the gaps nor the centered rms see.
            is_probability = bool((r >= 0).all()) and bool(torch.allclose(r.sum(dim=1), torch.ones(positions)))
            lp = torch.log(r.clamp_min(1e-30)) if is_probability else r
            top = torch.topk(lp, top_k + 1, dim=1).values
            centered = lp - lp.mean(dim=1, keepdim=True)
            rms = centered.norm(dim=1) / math.sqrt(lp.shape[1])
            clear &= (top[:, top_k - 1] - top[:, top_k]) > CLEAR_FACTOR * bound * rms
        return clear

    # ---- running decoder_logits ----

    def run_program(self, directory, dtype, mode, extra, sequences, out):
        args = [self.program, directory, "--dtype", dtype, "--mode", mode, "--context", str(CONTEXT), "--out", out]
        for s in sequences:
            args += ["--ids", ",".join(str(t) for t in s)]
        if mode == "prefill":
            args += ["--lengths", ",".join(str(n) for n in self.prefill_lengths)]
        if mode == "generate":
            args += ["--prompt", str(GENERATE_PROMPT), "--tokens", str(GENERATE_TOKENS)]
        args += extra
        try:
            p = subprocess.run(args, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None, f"decoder_logits ran past {RUN_TIMEOUT_S} s"
        if p.returncode == 0:
            return p, ""
        lines = [line for line in p.stderr.splitlines() if line.strip()]
        if p.returncode < 0:
            return p, f"decoder_logits ended by signal {-p.returncode}" + "".join(f" | {line}" for line in lines[-3:])
        return p, lines[-1] if lines else f"decoder_logits exited {p.returncode} saying nothing on stderr"

    def read_floats(self, path, rows, vocab):
        torch = self.torch
        with open(path, "rb") as f:
            data = bytearray(f.read())
        want = rows * vocab * 4
        if len(data) != want:
            raise RuntimeError(f"{path} has {len(data)} bytes, not {want} ({rows} rows of {vocab} float32)")
        return torch.frombuffer(data, dtype=torch.float32).reshape(rows, vocab).clone()

    def read_ints(self, path, count):
        torch = self.torch
        with open(path, "rb") as f:
            data = bytearray(f.read())
        if len(data) != count * 4:
            raise RuntimeError(f"{path} has {len(data)} bytes, not {count} int32")
        return torch.frombuffer(data, dtype=torch.int32).tolist()

    # ---- comparing ----

    def clear_margins(self, ref, bound):
        """Which rows of `ref` have a clear top-two margin (see the module's docstring)."""
        torch = self.torch
        top = torch.topk(ref, 2, dim=1).values
        rms = ref.norm(dim=1) / math.sqrt(ref.shape[1])
        return (top[:, 0] - top[:, 1]) > CLEAR_FACTOR * bound * rms

    def parted_together(self, parted, ours, ref, bound, sequence_of, position_of):
        """The sequences of `parted` in groups that parted from the reference together: without position_of, each
        alone; with it (replays of the same tokens), a sequence joins a group when its logits agree within `bound`
        (relative, as the error) with every member's at every position both have, and at least one."""
        torch = self.torch
        if position_of is None or sequence_of is None:
            return [[q] for q in parted]
        rows = {}
        for i in range(ours.shape[0]):
            rows.setdefault(sequence_of(i), {})[position_of(i)] = i
        def agree(a, b):
            shared = [p for p in rows[a] if p in rows[b]]
            if not shared:
                return False
            ia = torch.tensor([rows[a][p] for p in shared])
            ib = torch.tensor([rows[b][p] for p in shared])
            return float(((ours[ia] - ours[ib]).norm(dim=1) / ref[ia].norm(dim=1)).max()) <= bound
        groups = []
        for q in parted:
            for g in groups:
                if all(agree(q, member) for member in g):
                    g.append(q)
                    break
            else:
                groups.append([q])
        return groups

    def compare_logits(self, result, ours, ref, bound, where, judged=None, upstream=None, sequence_of=None,
                       position_of=None):
        """Fills in `result`'s error and argmax columns; returns the problems found. where(i) names row i. `judged`
        (a mixture of experts' clear routes): the rows whose error and argmax are judged; all when None. `upstream`
        (with judged): the rows after an unclear route of their sequence, whose excess is explained in one sequence at
        most (the module's docstring); sequence_of(i) names row i's sequence (all one when None). position_of(i), for
        sequences that are replays of the same tokens: row i's position, by which parted replays whose logits agree
        within `bound` wherever both have them are found to have parted together (one divergence), when another
        replay stays within the bound at the position where they first parted."""
        torch = self.torch
        finite = bool(torch.isfinite(ours).all())
        if judged is None:
            judged = torch.ones(ref.shape[0], dtype=torch.bool)
        else:
            result.extra.append(f"routes clear at {int(judged.sum())}/{len(judged)}")
            if int(judged.sum()) * 2 < len(judged):
                return [f"routes clear at only {int(judged.sum())} of {len(judged)} rows: too few to judge"]
        errors = torch.where(judged, (ours - ref).norm(dim=1) / ref.norm(dim=1), torch.zeros(ref.shape[0]))
        problems = []
        if upstream is not None and finite:
            explained = (errors > bound) & upstream
            parted = sorted({sequence_of(int(i)) if sequence_of else 0 for i in torch.nonzero(explained).flatten()})
            groups = self.parted_together(parted, ours, ref, bound, sequence_of, position_of)
            if len(groups) > 1:
                first = {}
                for i in torch.nonzero(explained).flatten().tolist():
                    first.setdefault(sequence_of(i) if sequence_of else 0, where(i))
                problems.append(f"{len(groups)} divergences from the reference after an unclear route ("
                                + "; ".join(", ".join(f"{q} from {first[q]}" for q in g) for g in groups)
                                + "): more than one")
            elif len(parted) > 1:
                # A shared flip, not an error common to every replay: another replay must hold the position where the
                # group first parted, within the bound there.
                rows = torch.nonzero(explained).flatten().tolist()
                start = min(position_of(i) for i in rows)
                witness = [i for i in range(ours.shape[0]) if sequence_of(i) not in parted and position_of(i) == start
                           and float((ours[i] - ref[i]).norm() / ref[i].norm()) <= bound]
                together = ", ".join(str(q) for q in parted)
                if witness:
                    result.extra.append(f"replays {together} parted together from position {start} (their logits "
                                        f"agree within {bound:g} wherever both have them; replay "
                                        f"{sequence_of(witness[0])} stays within it there)")
                else:
                    problems.append(f"replays {together} part from the reference together from position {start}, "
                                    "and no other replay stays within the bound there")
            if int(explained.sum()):
                worst_explained = float(errors[explained].max())
                result.extra.append(f"{int(explained.sum())} explained by an earlier unclear route (up to "
                                    f"{worst_explained:.1e}, from {where(int(torch.nonzero(explained)[0]))})")
            judged = judged & ~explained
            errors = torch.where(explained, torch.zeros(ref.shape[0]), errors)
        worst = float(errors.max()) if finite else math.inf
        same = ours.argmax(dim=1) == ref.argmax(dim=1)
        clear = self.clear_margins(ref, bound) & judged
        clear_equal = int((same & clear).sum())
        result.error = f"{worst:.2e}" if finite else "non-finite"
        result.argmax = f"{clear_equal}/{int(clear.sum())} ({int(same.sum())}/{len(same)})"
        if not finite:
            problems.append("non-finite logits")
        elif worst > bound:
            problems.append(f"error {worst:.2e} > {bound:.0e} (worst at {where(int(errors.argmax()))})")
        if clear_equal != int(clear.sum()):
            wrong = [where(int(i)) for i in torch.nonzero(clear & ~same).flatten()[:4]]
            problems.append(f"argmax differs where the margin is clear: {', '.join(wrong)}")
        return problems

    def compare_generate(self, result, tokens, model, ids, bound):
        """`tokens` = prefill's token, then generate's; checked against transformers' argmax over the same
        sequence (the prompt, then our tokens), wherever the reference margin is clear."""
        torch = self.torch
        sequence = ids[:GENERATE_PROMPT] + tokens[:-1]
        ref = self.reference(model, sequence, bound)[GENERATE_PROMPT - 1:]
        vocab = ref.shape[1]
        if any(t < 0 or t >= vocab for t in tokens):
            return [f"a generated token is outside the vocabulary: {tokens}"]
        same = torch.tensor(tokens) == ref.argmax(dim=1)
        clear = self.clear_margins(ref, bound)
        routes = self.routes.get(tuple(sequence))
        problems = []
        if routes is not None:  # a mixture of experts: judged where the route is clear, explained after an unclear one
            judged = routes[GENERATE_PROMPT - 1:]
            upstream = torch.cat([torch.zeros(1, dtype=torch.bool), torch.cumsum((~routes).int(), 0)[:-1] > 0])
            explained = clear & judged & ~same & upstream[GENERATE_PROMPT - 1:]
            result.extra.append(f"routes clear at {int(judged.sum())}/{len(judged)}")
            if int(explained.sum()):
                result.extra.append(f"{int(explained.sum())} explained by an earlier unclear route")
            if int(explained.sum()) > EXPLAINED_SHARE * int(judged.sum()):
                problems.append(f"{int(explained.sum())} tokens differ after an unclear route: more than "
                                f"{EXPLAINED_SHARE:g} of the {int(judged.sum())} judged")
            clear &= judged & ~explained
        clear_equal = int((same & clear).sum())
        result.argmax = f"{clear_equal}/{int(clear.sum())} ({int(same.sum())}/{len(tokens)})"
        if clear_equal != int(clear.sum()):
            wrong = [f"position {GENERATE_PROMPT - 1 + int(i)}" for i in torch.nonzero(clear & ~same).flatten()[:4]]
            problems.append(f"a generated token is not transformers' argmax where the margin is clear: "
                            f"{', '.join(wrong)}")
        return problems

    def compare_routes(self, result, path, ids):
        """The experts lazygraph's step chose (decoder_logits --routes: [positions, layers, top_k] int32 at `path`)
        against transformers' top k, wherever the reference routing is clear and nothing before it was unclear (the
        module's docstring); returns the problems found."""
        torch = self.torch
        chosen, clear, experts = self.choices[tuple(ids)]
        layers, positions, top_k = chosen.shape
        ours = torch.tensor(self.read_ints(path, positions * layers * top_k)).reshape(positions, layers, top_k)
        ours = ours.sort(dim=2).values.permute(1, 0, 2)  # [layers, positions, top_k], as chosen
        if bool(((ours < 0) | (ours >= experts)).any()):
            return [f"a recorded route names no expert of the {experts}: {ours.unique().tolist()[:8]}"]
        earlier_layer = torch.cat([torch.zeros(1, positions, dtype=torch.bool),
                                   torch.cumsum((~clear).int(), dim=0)[:-1] > 0])
        everywhere = clear.all(dim=0)
        earlier_position = torch.cat([torch.zeros(1, dtype=torch.bool),
                                      torch.cumsum((~everywhere).int(), dim=0)[:-1] > 0])
        judged = clear & ~earlier_layer & ~earlier_position.unsqueeze(0)
        same = (ours == chosen.long()).all(dim=2)
        result.extra.append(f"routes equal at {int((same & judged).sum())}/{int(judged.sum())} clear "
                            f"(position, layer) ({int(same.sum())}/{same.numel()} in all)")
        differ = torch.nonzero(judged & ~same)
        if len(differ) == 0:
            return []
        shown = [f"position {int(p)} layer {int(l)}: ours {ours[l, p].tolist()}, transformers' {chosen[l, p].tolist()}"
                 for l, p in differ[:3].tolist()]
        return [f"routes differ where clear at {len(differ)} (position, layer): {'; '.join(shown)}"]

    # ---- one row ----

    def run_row(self, row):
        """The results of one row: one per path it runs."""
        torch = self.torch
        bound = BOUNDS[row.dtype]
        seed = zlib.crc32(row_id(row).encode())
        directory = os.path.join(self.work_dir, row_id(row).replace("/", "-"))
        os.makedirs(directory, exist_ok=True)

        def result(path, **kw):
            return Result(row.name, row.arch, row.dtype, path, **kw)

        try:
            model, storage = self.build(row, seed)
            files = self.save(row, model, storage, directory)
        except Exception as e:  # transformers refused the config, or writing failed: the harness cannot judge
            return [result("step", status="ERROR", detail=f"building the checkpoint: {type(e).__name__}: {e}")]
        vocab = model.config.vocab_size
        generator = torch.Generator().manual_seed(seed + 1)
        sequences = [torch.randint(0, vocab, (self.positions,), generator=generator).tolist()
                     for _ in range(BATCH_SEQUENCES)]
        refs = {}

        def ref_of(s):
            if s not in refs:
                refs[s] = self.reference(model, sequences[s], bound)
            return refs[s]

        def after_unclear(routes):
            """Per position: whether an earlier position of the sequence had a route that is not clear."""
            seen = torch.cumsum((~routes).int(), dim=0)
            return torch.cat([torch.zeros(1, dtype=torch.bool), seen[:-1] > 0])

        def routes_of(s):
            """Sequence s's clear routes (ref_of(s) first), or None without a mixture of experts."""
            ref_of(s)
            return self.routes.get(tuple(sequences[s]))

        results = []
        for path in row.paths:
            mode, extra = MODES[path]
            r = result(path)
            if len(files) > 1:
                r.extra.append(f"{len(files)} files")
            out = os.path.join(directory, f"ours-{path}.bin")
            used = sequences[:BATCH_SEQUENCES] if mode == "batch" else sequences[:1]
            routes_out = None
            if path == "step" and getattr(model.config, "num_experts_per_tok", 0) and row.expect == "match":
                routes_out = os.path.join(directory, f"ours-{path}-routes.bin")
                extra = extra + ["--routes", routes_out]
            process, failure = self.run_program(directory, row.dtype, mode, extra, used, out)
            results.append(r)
            if self.verbose and process is not None:
                print("\n".join(f"    | {line}" for line in (process.stdout + process.stderr).splitlines()))
            if process is not None and process.returncode == SKIPPED:
                # decoder_logits says "decoder_logits: skipped, WHY" (--ranks on a machine with fewer GPUs).
                r.status, r.passed, r.skipped = "SKIPPED", True, True
                r.detail = process.stdout.strip().removeprefix("decoder_logits: skipped, ")
                continue
            if failure:
                refused = failure.startswith("decoder_logits: load failed: CheckpointError:") or failure.startswith(
                    "decoder_logits: load failed: UsageError:")
                message = failure.removeprefix("decoder_logits: ").replace(self.work_dir + os.sep, "")
                if row.expect == "match":
                    r.status, r.detail = "FAIL", ("refused: " if refused else "") + message
                elif refused and any(n in failure for n in row.names):
                    r.status, r.detail, r.passed = "REFUSED-as-expected", message, True
                elif refused:
                    r.status = "FAIL"
                    r.detail = f"refused without naming {' or '.join(row.names)}: {message}"
                else:
                    r.status, r.detail = "FAIL", message
                if refused:
                    break  # every other path would be refused the same way
                continue
            try:
                if mode == "step":
                    ours = self.read_floats(out, self.positions, vocab)
                    routes = routes_of(0)
                    problems = self.compare_logits(r, ours, ref_of(0), bound, lambda i: f"position {i}", routes,
                                                   None if routes is None else after_unclear(routes))
                    if routes_out is not None:
                        problems += self.compare_routes(r, routes_out, sequences[0])
                elif mode == "prefill":
                    lengths = self.prefill_lengths
                    labels = [f"position {p} after a prompt of {n}"
                              for n in lengths for p in range(n - 1, self.positions)]
                    ref = torch.cat([ref_of(0)[n - 1:] for n in lengths])
                    routes = routes_of(0)
                    judged = None if routes is None else torch.cat([routes[n - 1:] for n in lengths])
                    upstream = None if routes is None else torch.cat([after_unclear(routes)[n - 1:] for n in lengths])
                    ours = self.read_floats(out, len(labels), vocab)
                    runs = [n for n in lengths for _ in range(n - 1, self.positions)]
                    at = [p for n in lengths for p in range(n - 1, self.positions)]
                    problems = self.compare_logits(r, ours, ref, bound, lambda i: labels[i], judged, upstream,
                                                   lambda i: runs[i], lambda i: at[i])
                elif mode == "batch":
                    ours = self.read_floats(out, self.positions * BATCH_SEQUENCES, vocab)
                    ref = torch.stack([ref_of(s) for s in range(BATCH_SEQUENCES)], dim=1).reshape(-1, vocab)
                    routes = [routes_of(s) for s in range(BATCH_SEQUENCES)]
                    judged = None if routes[0] is None else torch.stack(routes, dim=1).reshape(-1)
                    upstream = None if routes[0] is None else torch.stack(
                        [after_unclear(x) for x in routes], dim=1).reshape(-1)
                    problems = self.compare_logits(
                        r, ours, ref, bound,
                        lambda i: f"position {i // BATCH_SEQUENCES} of sequence {i % BATCH_SEQUENCES}", judged,
                        upstream, lambda i: i % BATCH_SEQUENCES)
                else:
                    tokens = self.read_ints(out, GENERATE_TOKENS + 1)
                    problems = self.compare_generate(r, tokens, model, sequences[0], bound)
            except Exception as e:
                r.status, r.detail = "ERROR", f"comparing: {type(e).__name__}: {e}"
                continue
            if row.expect == "refuse":
                r.status = "FAIL"
                r.detail = f"loaded, but must be refused naming {' or '.join(row.names)}" + (
                    f"; and computes wrong: {'; '.join(problems)}" if problems else "")
            elif problems:
                r.status, r.detail = "FAIL", "; ".join(problems)
            else:
                r.status, r.passed = "PASS", True
                if row.expect == "refuse-or-match":
                    r.detail = f"loaded (not refused naming {' or '.join(row.names)}) and computed right"
        if not self.keep:
            shutil.rmtree(directory, ignore_errors=True)
        return results


def table(results):
    headers = ["row", "arch", "dtype", "path", "max rel err", "argmax equal/clear (all)", "status", "detail"]
    cells = [[r.row, r.arch, r.dtype, r.path, r.error, r.argmax, r.status,
              "; ".join(r.extra + ([r.detail] if r.detail else []))] for r in results]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(headers)]
    widths[-1] = len(headers[-1])
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for c in cells:
        lines.append("  ".join(v.ljust(w) for v, w in zip(c, widths)).rstrip())
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("decoder_logits", nargs="?", help="the decoder_logits program")
    parser.add_argument("--only", action="append", default=[],
                        help="run only rows whose name/dtype contains this (repeatable)")
    parser.add_argument("--keep", metavar="DIR", help="write the checkpoints and outputs into DIR and keep them")
    parser.add_argument("--positions", type=int, default=POSITIONS,
                        help=f"teacher-forced positions (default {POSITIONS}, at least 64, at most {CONTEXT})")
    parser.add_argument("--list", action="store_true", help="print the matrix and exit")
    parser.add_argument("--verbose", action="store_true", help="show what decoder_logits prints")
    args = parser.parse_args()

    rows = [r for r in matrix() if not args.only or any(o in row_id(r) for o in args.only)]
    if args.list:
        for r in rows:
            print(f"{row_id(r):28} {r.arch:8} expect {r.expect:16} paths {','.join(r.paths)}"
                  + (f"  [{r.note}]" if r.note else ""))
        return 0
    if not args.decoder_logits:
        parser.error("the decoder_logits program is required")
    if not rows:
        parser.error("--only matches no row")
    if not 64 <= args.positions <= CONTEXT:
        parser.error(f"--positions must be 64 to {CONTEXT}")
    program = os.path.abspath(args.decoder_logits)
    if not os.access(program, os.X_OK):
        parser.error(f"{args.decoder_logits} is not an executable program")

    # Set for transformers, which must not try the network (nothing here reads them back).
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    try:
        import torch
    except ImportError as e:
        skip(f"torch is not installed ({e})")
    try:
        import transformers
    except ImportError as e:
        skip(f"transformers is not installed ({e})")
    probe = subprocess.run([program, "--probe"], capture_output=True, text=True)
    if probe.returncode == SKIPPED:
        # decoder_logits says "decoder_logits: skipped, no GPU to run on: WHY".
        skip(probe.stdout.strip().removeprefix("decoder_logits: skipped, ") or "decoder_logits found no GPU")
    if probe.returncode != 0:
        print(f"crosscheck-transformers: decoder_logits --probe failed: {probe.stderr.strip()}", file=sys.stderr)
        return 1
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))

    with tempfile.TemporaryDirectory(prefix="crosscheck-") as tmp:
        work_dir = os.path.abspath(args.keep) if args.keep else tmp
        os.makedirs(work_dir, exist_ok=True)
        harness = Harness(torch, transformers, program, work_dir, args.positions, bool(args.keep), args.verbose)
        header = [
            f"crosscheck-transformers: lazygraph's decoder against transformers {transformers.__version__} "
            f"(torch {torch.__version__}, float32 reference on the CPU)",
            probe.stdout.strip(),
            f"{args.positions} teacher-forced positions, context {CONTEXT}; bounds: max over positions of "
            f"||ours - ref|| / ||ref|| <= {BOUNDS['f16']:.0e} (fp16), {BOUNDS['bf16']:.0e} (bf16)",
            f"argmax judged where the reference's top1 - top2 > {CLEAR_FACTOR:g} * bound * rms(ref logits); "
            f"column: equal/clear (equal/all rows)",
            f"paths: step = forward per position; prefill = prefill of lengths "
            f"{harness.prefill_lengths} then steps; batch = forward_batch of "
            f"{BATCH_SEQUENCES} sequences; -tc = tensor cores; generate = prefill of {GENERATE_PROMPT} then "
            f"generate({GENERATE_TOKENS})",
            "",
        ]
        for line in header:
            print(line)
        results = []
        start = time.monotonic()
        for row in rows:
            t0 = time.monotonic()
            row_results = harness.run_row(row)
            results += row_results
            for r in row_results:
                print(f"  {row_id(row):28} {r.path:10} {r.status:20} err {r.error:9} argmax {r.argmax:16} "
                      f"{r.detail}", flush=True)
            print(f"    ({time.monotonic() - t0:.1f} s)", flush=True)
        lines = header + table(results)
        failed = [r for r in results if not r.passed]
        lines.append("")
        skipped = [r for r in results if r.skipped]
        lines.append(f"{len(results) - len(failed) - len(skipped)} passed, {len(failed)} failed, "
                     f"{len(skipped)} skipped "
                     f"({len(rows)} rows, {time.monotonic() - start:.0f} s)")
    print()
    print("\n".join(lines[len(header):]))
    out_dir = os.environ.get("OUT")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "crosscheck.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
