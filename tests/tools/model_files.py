"""Checkpoint folders the tools' host tests write: a small Llama's config.json and zero weights, and a byte-level
tokenizer.json (tests/tools/lazygraph_run.py, tests/tools/lazygraph_serve.py)."""

import json
import os
import struct

# A small Llama: d 64, 4 heads of 16 (2 kv heads), 2 layers, ffn 128, vocab 300.
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 300,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def tensor_shapes(config):
    d, ffn, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    head_dim = d // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * head_dim
    shapes = {"model.embed_tokens.weight": [vocab, d], "model.norm.weight": [d], "lm_head.weight": [vocab, d]}
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        shapes.update({
            p + "input_layernorm.weight": [d],
            p + "self_attn.q_proj.weight": [d, d],
            p + "self_attn.k_proj.weight": [kv, d],
            p + "self_attn.v_proj.weight": [kv, d],
            p + "self_attn.o_proj.weight": [d, d],
            p + "post_attention_layernorm.weight": [d],
            p + "mlp.gate_proj.weight": [ffn, d],
            p + "mlp.up_proj.weight": [ffn, d],
            p + "mlp.down_proj.weight": [d, ffn],
        })
        if config.get("model_type") == "qwen3":  # q/k norms: a gain of head_dim each
            shapes.update({p + "self_attn.q_norm.weight": [head_dim], p + "self_attn.k_norm.weight": [head_dim]})
    return shapes


def write_checkpoint(directory, config=None, dtype="F16", leave_out=()):
    """config.json and model.safetensors of zero weights (the loader checks names, dtypes and shapes)."""
    config = dict(CONFIG if config is None else config)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensor_shapes(config).items():
        if name in leave_out:
            continue
        size = 2
        for n in shape:
            size *= n
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(directory, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(offset))


def byte_level_tokenizer(vocab_size=256, bos=True):
    """A tokenizer.json (as text) of GPT-2's byte-level alphabet: one token per byte, ids 0-255 in byte order, then
    <|begin_of_text|>, which its template puts in front when `bos`; `vocab_size` - 257 more tokens pad it."""
    kept = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    extra = iter(range(256, 512))
    chars = {b: chr(b) if b in kept else chr(next(extra)) for b in range(256)}
    vocab = {chars[b]: b for b in range(256)}
    for i in range(vocab_size - 257):
        vocab[f"pad{i}"] = 257 + i
    bos_id = vocab_size - 1
    post = None
    if bos:
        post = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}}], "pair": [],
                "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos_id],
                                                         "tokens": ["<|begin_of_text|>"]}}}
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": bos_id, "content": "<|begin_of_text|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []}})
