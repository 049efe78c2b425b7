#!/usr/bin/env python3
"""Writes random checkpoints of real model shapes with Hugging Face transformers itself, for bench_checkpoint.

usage: hf_checkpoints.py OUT_DIR

Writes OUT_DIR/llama-3.2-1b (hidden 2048, 32/8 heads of 64, 16 layers, ffn 8192, vocab 128256, RoPE llama3 with
theta 500000, tied embeddings: Llama 3.2 1B's config) and OUT_DIR/tinyllama (hidden 2048, 32/4 heads, 22 layers,
ffn 5632, vocab 32000) in fp16, as LlamaForCausalLM.save_pretrained writes them. Needs torch and transformers (no
network: the models are built from configs, never downloaded); exits 77 without them or without a CUDA GPU.
"""
import os
import sys

try:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:
    print(f"hf_checkpoints: skipped: {e}")
    sys.exit(77)

SHAPES = {
    "llama-3.2-1b": dict(hidden_size=2048, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                         num_hidden_layers=16, intermediate_size=8192, vocab_size=128256,
                         max_position_embeddings=131072, tie_word_embeddings=True, rms_norm_eps=1e-5,
                         rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 8192}),
    "tinyllama": dict(hidden_size=2048, num_attention_heads=32, num_key_value_heads=4, num_hidden_layers=22,
                      intermediate_size=5632, vocab_size=32000, max_position_embeddings=2048,
                      tie_word_embeddings=False, rms_norm_eps=1e-5,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
}


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("hf_checkpoints: skipped: no CUDA GPU")
        return 77
    torch.manual_seed(0)
    for name, shape in SHAPES.items():
        out = os.path.join(sys.argv[1], name)
        with torch.device("cuda"):
            model = LlamaForCausalLM(LlamaConfig(**shape)).half()
        model.save_pretrained(out)
        print(f"wrote {out}")
        del model
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
