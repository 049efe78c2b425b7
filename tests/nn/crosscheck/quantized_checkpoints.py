#!/usr/bin/env python3
"""Cross-check of AWQ, GPTQ and FP8 checkpoints loaded as they are (issue 64, item 5) against transformers.

For each row (a small Llama, Qwen2 or Qwen3 of crosscheck_transformers.py's matrix, fp16) and each packing (AWQ GEMM,
GPTQ asymmetric, GPTQ symmetric; groups of 32, 64 or 128), this script builds the random model with transformers as
crosscheck_transformers.py does, quantizes every q/k/v/o/gate/up/down projection to 4 bits with a zero point per
group of inputs (round to nearest over the group's range with 0; symmetric: zero 8, scale absmax / 7), puts the
dequantized weights, (q - zero) * scale (exact in float32), back into the model, and writes the checkpoint: the
model's other tensors as save_pretrained writes them, each projection packed by a packer written here from the
formats' public descriptions (not from lazygraph's loader):

- AWQ (AutoAWQ's GEMM): `qweight` int32 [K, N / 8], output 8c + order[i] of word c in bits 4i..4i+3, order
  0, 2, 4, 6, 1, 3, 5, 7; `qzeros` int32 [K / g, N / 8] the zero points alike; `scales` fp16 [K / g, N];
  quantization_config {"quant_method": "awq", "bits": 4, "group_size": g, "zero_point": true, "version": "gemm"}.
- GPTQ (AutoGPTQ, checkpoint_format "gptq"): `qweight` int32 [K / 8, N], input 8r + i of word r in bits 4i..4i+3;
  `qzeros` int32 [K / g, N / 8], output 8c + i's zero point minus 1 in bits 4i..4i+3; `scales` fp16 [K / g, N];
  `g_idx` int32 [K] = k // g; quantization_config {"quant_method": "gptq", "bits": 4, "group_size": g, "sym": ...,
  "desc_act": false}. With desc_act true (GPTQ's act-order), each matrix's inputs are quantized in groups of a
  random order instead (the same order for q, k and v, and for gate and up, which read one input, as GPTQ's shared
  Hessian makes them): group j holds inputs perm[j g .. j g + g - 1], `g_idx`[k] is k's place in perm // g, and
  `qweight` still holds input k in row k / 8.
- FP8 (transformers' FineGrainedFP8): each projection's `weight` F8_E4M3 [N, K], w / scale rounded to the nearest
  e4m3 value (1 sign, 4 exponent bits of bias 7, 3 mantissa bits, ties to even, |x| <= 448), scale = the block's
  largest magnitude / 448 per block of 128 outputs x 128 inputs, stored as `weight_scale_inv` float32
  [ceil(N / 128), ceil(K / 128)]; quantization_config {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme":
  "dynamic", "weight_block_size": [128, 128]}.
- compressed-tensors FP8 per channel: the same rounding with one scale per output, `weight_scale` float16 [N, 1];
  quantization_config {"quant_method": "compressed-tensors", "format": "float-quantized", one config group of
  8-bit float weights, strategy "channel", dynamic input activations, ignore ["lm_head"]}.
  Where torch has float8_e4m3fn, the packer's bytes are also checked against torch's own rounding. The fp8 packing
  also has a Qwen3-MoE row (Qwen3-30B-A3B-FP8's form at a small shape): every expert's gate/up/down projection FP8 in
  blocks (transformers 4's per-expert Linear modules, or transformers 5's stacked [experts, out, in] parameters, each
  expert quantized alone; the per-expert tensors save_pretrained writes are then packed from their stored values, and
  must dequantize back to them), the router `mlp.gate` and the LM head dense, named in modules_to_not_convert as
  that checkpoint names them. The fp8 rows
  also compare lazygraph's step logits with transformers loading the FP8 checkpoint itself (FineGrainedFP8, which
  rounds activations to e4m3 too: within 0.1 relative), skipped where this transformers or GPU cannot.

The reference is transformers' float32 forward over the dequantized weights; `decoder_logits` loads the packed folder
(lazygraph repacks it into int4 with zero points) and the comparison, bounds and paths are crosscheck_transformers.py's
(its Harness): fp16 relative error within 1e-2, argmax equal wherever the margin is clear; step, prefill (also on
tensor cores), batch, generate, the persistent backend's step (the first row of each packing), and two
tensor-parallel ranks where the machine has two GPUs (not the desc_act rows, which lazygraph refuses to split: a
rank's share of the inputs is no share of the stored columns).

Exit status: 0 every row passed, 1 a row failed, 2 bad arguments, 77 skipped (torch, transformers or safetensors not
installed, or no GPU). By hand on the GPU machine:

    python3 tests/nn/crosscheck/quantized_checkpoints.py build-gpu/tests/decoder_logits [--only awq] [--keep DIR]

Meson runs it as the test `crosscheck-quantized-checkpoints` (suite gpu).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crosscheck_transformers as ct  # noqa: E402  (the harness this script reuses)

# transformers' own FP8 path (FineGrainedFP8) rounds each token's activations to e4m3 per group of 128 too, which
# lazygraph does not: the comparison against it allows the error of that rounding (e4m3 keeps 4 significant bits).
HF_FP8_BOUND = 0.1
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # AutoAWQ's: nibble i of a word holds output 8c + AWQ_ORDER[i]
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
EXPERT_TENSOR = re.compile(r"\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight$")  # one expert's, as saved


def packings():
    """(name, method, group, symmetric, desc_act)."""
    return [("awq-g128", "awq", 128, False, False), ("awq-g32", "awq", 32, False, False),
            ("gptq-g64", "gptq", 64, False, False), ("gptq-sym-g128", "gptq", 128, True, False),
            ("gptq-act-g64", "gptq", 64, False, True), ("gptq-act-sym-g32", "gptq", 32, True, True),
            ("fp8-block", "fp8", 128, True, False), ("fp8-channel", "compressed-tensors", 128, True, False)]


def moe_rows():
    """Mixtures of experts, for the FP8 packing only (lazygraph reads quantized experts from FP8 checkpoints only)."""
    return [
        ct.Row("qwen3-moe", "qwen3_moe", "f16",
               ct.moe_config(8, 2, 256, num_key_value_heads=2, norm_topk_prob=True, rope_parameters=ct.rope(1e6),
                             rms_norm_eps=1e-6),
               paths=ct.ALL_PATHS + ct.TP_PATHS),
    ]


def rows():
    paths = ct.ALL_PATHS + ("persistent",) + ct.TP_PATHS
    return [
        ct.Row("llama-gqa8-kv2", "llama", "f16", ct.model_config(num_key_value_heads=2), paths=paths),
        ct.Row("llama-tied", "llama", "f16", ct.model_config(tie_word_embeddings=True, vocab_size=2048)),
        ct.Row("qwen2", "qwen2", "f16", ct.model_config(num_key_value_heads=2, attention_bias=True)),
        ct.Row("qwen3", "qwen3", "f16", ct.model_config(head_dim=64, num_key_value_heads=2)),
    ]


class PackedHarness(ct.Harness):
    """crosscheck_transformers' harness whose checkpoints hold the projections packed as AWQ or GPTQ."""

    def __init__(self, *args, method, group, symmetric, desc_act, **kwargs):
        super().__init__(*args, **kwargs)
        self.method = method
        self.group = group
        self.symmetric = symmetric
        self.desc_act = desc_act
        self.packed = {}

    def input_order(self, name, k):
        """desc_act: the order of module `name`'s k inputs in which its groups are taken, one per input it reads (q, k
        and v share one, gate and up another); else None."""
        if not self.desc_act:
            return None
        reads = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "gate_up", "up_proj": "gate_up"}
        prefix, module = name.rsplit(".", 1)
        key = f"{prefix.rsplit('.', 1)[0]}.{reads.get(module, module)}"
        generator = self.torch.Generator().manual_seed(zlib.crc32(key.encode()))
        return self.torch.randperm(k, generator=generator)

    def e4m3_values(self):
        """The 127 non-negative finite e4m3 values, byte 0 to 0x7E, increasing (float64)."""
        values = []
        for b in range(0x7F):
            e, m = b >> 3, b & 7
            values.append(m / 8 * 2.0**-6 if e == 0 else (1 + m / 8) * 2.0**(e - 7))
        return self.torch.tensor(values, dtype=self.torch.float64)

    def to_e4m3(self, x):
        """x (float64) -> e4m3 bytes (uint8): the nearest value, ties to the even byte, |x| saturating at 448."""
        torch = self.torch
        values = self.e4m3_values()
        a = x.abs().clamp(max=448.0)
        above = torch.bucketize(a, values).clamp(max=0x7E)  # the first value >= a
        below = (above - 1).clamp(min=0)
        up = values[above] - a
        down = a - values[below]
        take_below = (above > 0) & ((down < up) | ((down == up) & (below % 2 == 0)))
        byte = torch.where(take_below, below, above)
        return (byte | torch.where(torch.signbit(x), 0x80, 0)).to(torch.uint8)

    def from_e4m3(self, byte):
        """e4m3 bytes (uint8) -> their values (float64)."""
        b = byte.long()
        magnitude = self.e4m3_values()[b & 0x7F]
        return self.torch.where((b & 0x80) != 0, -magnitude, magnitude)

    def quantize_fp8(self, w):
        """w [N, K] float32 -> e4m3 bytes [N, K], scales as stored, and each weight's scale [N, K] (float64)."""
        torch = self.torch
        n, k = w.shape
        w64 = w.double()
        if self.method == "fp8":
            rows, cols = -(-n // 128), -(-k // 128)
            padded = torch.zeros(rows * 128, cols * 128, dtype=torch.float64)
            padded[:n, :k] = w64.abs()
            amax = padded.reshape(rows, 128, cols, 128).amax(dim=(1, 3))
            scale = (amax / 448).clamp(min=1e-12).float()  # weight_scale_inv, float32
            full = scale.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]
        else:
            scale = (w64.abs().amax(dim=1, keepdim=True) / 448).clamp(min=1e-6).half()  # weight_scale, float16
            full = scale.double().expand(n, k)
        ratio = (w64 / full).float()  # what both roundings below round: float32 values
        byte = self.to_e4m3(ratio.double())
        if hasattr(torch, "float8_e4m3fn"):  # an independent rounding of the same values
            theirs = ratio.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
            mismatch = (theirs != byte) & ~((theirs & 0x7F == 0) & (byte & 0x7F == 0))  # +0 and -0 alike
            if bool(mismatch.any()):
                raise AssertionError(f"the packer's e4m3 rounding differs from torch's at {int(mismatch.sum())} values")
        return byte, scale, full

    def quantize(self, w):
        """w [N, K] float32 -> q [N, K], zero [N, G], scale [N, G] fp16, each group over its inputs."""
        torch = self.torch
        n, k = w.shape
        groups = w.reshape(n, k // self.group, self.group)
        if self.symmetric:
            scale = (groups.abs().amax(dim=2) / 7).clamp(min=1e-4).half()
            zero = torch.full(scale.shape, 8, dtype=torch.int64)
        else:
            lo = groups.amin(dim=2).clamp(max=0)
            hi = groups.amax(dim=2).clamp(min=0)
            scale = ((hi - lo) / 15).clamp(min=1e-4).half()
            lowest = 0 if self.method == "awq" else 1  # GPTQ stores zero - 1 in 4 bits
            zero = torch.round(-lo / scale.float()).long().clamp(lowest, 15)
        q = (torch.round(groups / scale.float()[..., None]).long() + zero[..., None]).clamp(0, 15).reshape(n, k)
        return q, zero, scale

    def dequantized(self, q, zero, scale):
        n, k = q.shape
        groups = (q.reshape(n, k // self.group, self.group) - zero[..., None]).float() * scale.float()[..., None]
        return groups.reshape(n, k)

    def build(self, row, seed):
        model, storage = super().build(row, seed)
        self.packed = {}
        with self.torch.no_grad():
            for name, module in model.named_modules():
                if name.split(".")[-1] not in PROJECTIONS:
                    continue
                if self.method in ("fp8", "compressed-tensors"):
                    byte, scale, full = self.quantize_fp8(module.weight.detach().float())
                    module.weight.copy_((self.from_e4m3(byte) * full).to(module.weight.dtype))
                    self.packed[name] = (byte, scale)
                    continue
                w = module.weight.detach().float()
                perm = self.input_order(name, w.shape[1])
                if perm is None:
                    q, zero, scale = self.quantize(w)
                    module.weight.copy_(self.dequantized(q, zero, scale))
                    self.packed[name] = (q, zero, scale, None)
                    continue
                # groups over the inputs in perm's order, then every column back in its input's place
                q, zero, scale = self.quantize(w[:, perm])
                place = self.torch.argsort(perm)  # input k is column place[k] of w[:, perm]
                module.weight.copy_(self.dequantized(q, zero, scale)[:, place])
                self.packed[name] = (q[:, place], zero, scale, (place // self.group).to(self.torch.int32))
            if self.method in ("fp8", "compressed-tensors"):
                # transformers 5 stacks a mixture's experts, [experts, out, in] (gate_up_proj: gate's rows, then up's):
                # each expert's matrix FP8 alone, its blocks of 128 rows inside gate's or up's when the width is a
                # multiple of 128. save() packs the per-expert tensors save_pretrained writes from their values.
                for name, p in model.named_parameters():
                    if p.dim() != 3:
                        continue
                    for e in range(p.shape[0]):
                        byte, _, full = self.quantize_fp8(p[e].detach().float())
                        p[e].copy_((self.from_e4m3(byte) * full).to(p.dtype))
        return model, storage

    def pack_saved_experts(self, tensors):
        """The per-expert tensors of `tensors` still dense (transformers 5's, stacked in the model), packed as FP8 from
        their stored values: build() made each a matrix of e4m3 values times its blocks' scales, which quantize_fp8
        finds again, so the packed bytes must dequantize back to the stored values (within their rounding to the
        storage type); anything else means the experts were not quantized as stored, and is an error."""
        torch = self.torch
        for name in [n for n, t in tensors.items() if EXPERT_TENSOR.search(n) and t.dtype != torch.float8_e4m3fn]:
            stored = tensors.pop(name).double()
            byte, scale, full = self.quantize_fp8(stored.float())
            back = self.from_e4m3(byte) * full
            error = float((back - stored).abs().max() / stored.abs().max().clamp(min=1e-30))
            if error > 2.0**-8:
                raise AssertionError(f"{name}: its FP8 packing dequantizes to within {error:.2e} of the stored values, "
                                     "not their rounding: the experts were not quantized as save_pretrained wrote them")
            for part, t in self.pack(byte, scale).items():
                tensors[f"{name[:-len('.weight')]}.{part}"] = t

    def words(self, nibbles):
        """[..., 8] values 0..15 -> [...] int32, nibble i in bits 4i..4i+3."""
        torch = self.torch
        packed = torch.zeros(nibbles.shape[:-1], dtype=torch.int64)
        for i in range(8):
            packed |= (nibbles[..., i] & 0xF) << (4 * i)
        return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)

    def pack(self, *parts):
        if self.method in ("fp8", "compressed-tensors"):
            byte, scale = parts
            suffix = "weight_scale_inv" if self.method == "fp8" else "weight_scale"
            return {"weight": byte.view(self.torch.float8_e4m3fn), suffix: scale}
        q, zero, scale, g_idx = parts
        torch = self.torch
        n, k = q.shape
        out = {"scales": scale.t().contiguous()}  # [G, N]
        if self.method == "awq":
            order = torch.tensor(AWQ_ORDER)
            out["qweight"] = self.words(q.t().reshape(k, n // 8, 8)[..., order])
            out["qzeros"] = self.words(zero.t().reshape(-1, n // 8, 8)[..., order])
        else:
            out["qweight"] = self.words(q.t().reshape(k // 8, 8, n).transpose(1, 2))
            out["qzeros"] = self.words((zero - 1).t().reshape(-1, n // 8, 8))
            out["g_idx"] = (torch.arange(k) // self.group).to(torch.int32) if g_idx is None else g_idx
        return out

    def run_row(self, row):
        """The harness's paths; for FP8 blocks, then lazygraph's step logits against transformers' own FP8 path (not
        for a mixture of experts: FP8 activations move the router's logits by more than many routes' margins, and that
        comparison judges every position, clear route or not)."""
        if self.method != "fp8" or "step" not in row.paths or "num_experts" in row.config:
            return super().run_row(row)
        keep = self.keep
        self.keep = True  # the folder and the step path's logits stay for the comparison below
        try:
            results = super().run_row(row)
        finally:
            self.keep = keep
        directory = os.path.join(self.work_dir, ct.row_id(row).replace("/", "-"))
        results.append(self.transformers_fp8(row, directory))
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)
        return results

    def transformers_fp8(self, row, directory):
        """Optional: the step path's logits against transformers loading the FP8 checkpoint itself (FineGrainedFP8,
        on a GPU of compute capability 8.9 or newer), within HF_FP8_BOUND; skipped where it cannot load it."""
        torch = self.torch
        r = ct.Result(row.name, row.arch, row.dtype, "hf-fp8")

        def skipped(why):
            r.status, r.passed, r.skipped, r.detail = "SKIPPED", True, True, why
            return r

        ours_path = os.path.join(directory, "ours-step.bin")
        if not os.path.exists(ours_path):
            return skipped("the step path wrote no logits")
        if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9):
            return skipped("transformers' FP8 kernels need a GPU of compute capability 8.9 or newer")
        dtype = torch.float16 if row.dtype == "f16" else torch.bfloat16
        try:
            model = self.transformers.AutoModelForCausalLM.from_pretrained(directory, torch_dtype=dtype,
                                                                           device_map="cuda")
        except Exception as e:  # no accelerate, no FP8 support in this transformers, ...
            return skipped(f"transformers cannot load it: {type(e).__name__}: {str(e)[:160]}")
        try:
            vocab = model.config.vocab_size
            # run_row's first sequence: the same generator, seeded the same, its first draw
            generator = torch.Generator().manual_seed(zlib.crc32(ct.row_id(row).encode()) + 1)
            ids = torch.randint(0, vocab, (self.positions,), generator=generator).tolist()
            with torch.no_grad():
                out = model(input_ids=torch.tensor([ids], dtype=torch.long, device="cuda"), use_cache=False)
            theirs = out.logits[0].float().cpu()
            ours = self.read_floats(ours_path, self.positions, vocab)
            problems = self.compare_logits(r, ours, theirs, HF_FP8_BOUND, lambda i: f"position {i}")
        except ImportError as e:  # transformers loads its FP8 kernels (the `kernels` package) only when it runs them
            return skipped(f"transformers cannot run its FP8 path here: {str(e)[:160]}")
        except Exception as e:
            r.status, r.detail = "ERROR", f"transformers' FP8 forward: {type(e).__name__}: {str(e)[:160]}"
            return r
        finally:
            del model
            torch.cuda.empty_cache()
        if problems:
            r.status, r.detail = "FAIL", "; ".join(problems)
        else:
            r.status, r.passed = "PASS", True
            r.detail = "against transformers' own FP8 path (FP8 activations)"
        return r

    def save(self, row, model, storage, directory):
        from safetensors.torch import load_file, save_file
        files = super().save(row, model, storage, directory)
        for file in files:
            path = os.path.join(directory, file)
            tensors = load_file(path)
            for name, parts in self.packed.items():
                if tensors.pop(name + ".weight", None) is None:
                    continue
                for part, t in self.pack(*parts).items():
                    tensors[f"{name}.{part}"] = t
            if self.method in ("fp8", "compressed-tensors"):
                self.pack_saved_experts(tensors)
            save_file(tensors, path, metadata={"format": "pt"})
        config_path = os.path.join(directory, "config.json")
        with open(config_path) as f:
            config = json.load(f)
        if self.method == "fp8":
            config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                             "weight_block_size": [128, 128]}
            if "num_experts" in row.config:  # as Qwen3-30B-A3B-FP8 names them: the routers and the LM head dense
                layers = config["num_hidden_layers"]
                config["quantization_config"]["modules_to_not_convert"] = (
                    ["lm_head"] + [f"model.layers.{layer}.mlp.gate" for layer in range(layers)])
        elif self.method == "compressed-tensors":
            weights = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False, "strategy": "channel",
                       "group_size": None, "observer": "minmax", "actorder": None}
            inputs = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": True, "strategy": "token"}
            config["quantization_config"] = {
                "quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": inputs,
                                              "output_activations": None}},
                "ignore": ["lm_head"], "kv_cache_scheme": None, "sparsity_config": {}}
        elif self.method == "awq":
            config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": self.group,
                                             "zero_point": True, "version": "gemm", "modules_to_not_convert": None}
        else:
            config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": self.group,
                                             "sym": self.symmetric, "desc_act": self.desc_act, "damp_percent": 0.01,
                                             "true_sequential": True, "checkpoint_format": "gptq"}
        with open(config_path, "w") as f:
            json.dump(config, f, indent=2)
        return files


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("decoder_logits", help="the decoder_logits program")
    parser.add_argument("--only", action="append", default=[], help="run only rows whose name contains this")
    parser.add_argument("--keep", metavar="DIR", help="write the checkpoints and outputs into DIR and keep them")
    parser.add_argument("--verbose", action="store_true", help="show what decoder_logits prints")
    args = parser.parse_args()
    program = os.path.abspath(args.decoder_logits)
    if not os.access(program, os.X_OK):
        parser.error(f"{args.decoder_logits} is not an executable program")
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    try:
        import torch
        import transformers
        import safetensors  # noqa: F401
    except ImportError as e:
        print(f"crosscheck-quantized-checkpoints: skipped: {e}")
        return ct.SKIPPED
    probe = subprocess.run([program, "--probe"], capture_output=True, text=True)
    if probe.returncode == ct.SKIPPED:
        print(f"crosscheck-quantized-checkpoints: skipped: {probe.stdout.strip()}")
        return ct.SKIPPED
    if probe.returncode != 0:
        print(f"crosscheck-quantized-checkpoints: decoder_logits --probe failed: {probe.stderr.strip()}",
              file=sys.stderr)
        return 1
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    results = []
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="crosscheck-packed-") as tmp:
        work_dir = os.path.abspath(args.keep) if args.keep else tmp
        os.makedirs(work_dir, exist_ok=True)
        for packing, method, group, symmetric, desc_act in packings():
            if method in ("fp8", "compressed-tensors") and not hasattr(torch, "float8_e4m3fn"):
                print(f"  {packing}: skipped: this torch has no float8_e4m3fn to write F8_E4M3 tensors with")
                continue
            harness = PackedHarness(torch, transformers, program, os.path.join(work_dir, packing), ct.POSITIONS,
                                    bool(args.keep), args.verbose, method=method, group=group, symmetric=symmetric,
                                    desc_act=desc_act)
            os.makedirs(harness.work_dir, exist_ok=True)
            for row in rows() + (moe_rows() if method == "fp8" else []):
                # desc_act's stored columns are no range of inputs: lazygraph refuses to split them over ranks
                paths = [p for p in row.paths if not (desc_act and p in ct.TP_PATHS)]
                row = ct.Row(f"{row.name}-{packing}", row.arch, row.dtype, row.config, paths=paths)
                if args.only and not any(o in row.name for o in args.only):
                    continue
                t0 = time.monotonic()
                row_results = harness.run_row(row)
                results += row_results
                for r in row_results:
                    print(f"  {row.name:34} {r.path:14} {r.status:8} err {r.error:9} argmax {r.argmax:16} {r.detail}",
                          flush=True)
                print(f"    ({time.monotonic() - t0:.1f} s)", flush=True)
    lines = ct.table(results)
    failed = [r for r in results if not r.passed]
    skipped = [r for r in results if r.skipped]
    lines.append("")
    lines.append(f"{len(results) - len(failed) - len(skipped)} passed, {len(failed)} failed, {len(skipped)} skipped "
                 f"({time.monotonic() - start:.0f} s)")
    print("\n".join(lines))
    out_dir = os.environ.get("OUT")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "crosscheck-quantized.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
