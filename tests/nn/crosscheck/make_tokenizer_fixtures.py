"""Trains small tokenizers with the real `tokenizers` library and writes them with expected ids (GPU machine).

Usage, from the repository root: python3 tests/nn/crosscheck/make_tokenizer_fixtures.py OUT_DIR [CASES]
Writes OUT_DIR/<name>/tokenizer.json and cases.jsonl (CASES random strings, 400 by default, then 10 fixed ones) for
four tokenizers. tests/nn/data/tokenizers/ holds a run with 400 (tokenizers 0.23.2), each cases.jsonl trimmed to its
first 100 and last 10 lines to keep the data small; tests/nn/tokenizer.cpp checks every line.
"""
import glob
import json
import os
import random
import sys
import unicodedata

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

out_root = sys.argv[1]
n_cases = int(sys.argv[2]) if len(sys.argv) > 2 else 400

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
          r"\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
         r"\s+(?!\S)|\s+")

rng = random.Random(1234)
docs = []
for f in sorted(glob.glob("docs/*.md")) + ["README.md", "CHANGELOG.md"]:
    with open(f, encoding="utf-8") as fh:
        docs.append(fh.read())
extra = [
    "日本語の文章を書きます。東京は大きな都市です。", "中文文本，包括标点符号。我们今天去公园。",
    "한국어 문장입니다. 안녕하세요!", "Ελληνικά κείμενα με τόνους.", "Русский текст с цифрами 12345.",
    "العربية نص قصير", "emoji 😀👍🏽🎉 and flags 🇫🇷🇯🇵", "café naïve résumé coöperate", "e\u0301 a\u0300 o\u0308",
    "tabs\tand\nnewlines\r\n  spaces   ", "I'm, you're, he'll, we'd, they've, DON'T, It'S",
    "numbers 3.14159 2026-11-28 1,000,000 0x1F",
]
corpus = docs + extra * 20
words = " ".join(docs).split()


def sample_strings(specials, n):
    pieces = ["日本語", "中文", "한국어", "😀", "👍🏽", "🇫🇷", "e\u0301", "\u0301", "ß", "ﬁ", "Ⅻ", "１２３",
              "  ", "\n", "\n\n", "\t", " \n ", "\r\n", "   \t  ", "123", "4567890", "3.14", "'s", "'LL", "—", "…",
              "\u00a0", "\u200b", "\ufeff", "Ω", "ǅ", "ﷺ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "\U0001F9D1\u200d\U0001F4BB"] + list(specials)
    out = []
    for i in range(n):
        k = rng.randint(1, 12)
        parts = []
        for _ in range(k):
            r = rng.random()
            if r < 0.55:
                parts.append(rng.choice(words))
            elif r < 0.85:
                parts.append(rng.choice(pieces))
            else:
                parts.append(chr(rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x2FFF),
                                             rng.randint(0x3000, 0x9FFF), rng.randint(0x1F300, 0x1FAFF)])))
            parts.append(rng.choice([" ", "", " ", "  ", "\n", " "]))
        out.append("".join(parts))
    out += ["", " ", "  ", "\n", "a", " a", "hello world", "Hello World!", "<|begin_of_text|>x", "x<|eot_id|>y"]
    return out


def write(name, tok, specials, cases_n):
    d = os.path.join(out_root, name)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    again = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "cases.jsonl"), "w", encoding="utf-8") as f:
        for s in sample_strings(specials, cases_n):
            ids = again.encode(s).ids
            plain = again.encode(s, add_special_tokens=False).ids
            f.write(json.dumps({"text": s, "ids": ids, "ids_no_special": plain,
                                "decoded": again.decode(ids, skip_special_tokens=False),
                                "decoded_skip": again.decode(ids, skip_special_tokens=True)},
                               ensure_ascii=False) + "\n")
    print(name, "vocab", again.get_vocab_size(), "bytes", os.path.getsize(os.path.join(d, "tokenizer.json")))


# A: Llama 3 style byte-level BPE.
specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
tok = Tokenizer(models.BPE(ignore_merges=True))
tok.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
    pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=2500, special_tokens=specials,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tok.train_from_iterator(corpus, trainer)
bos = tok.token_to_id("<|begin_of_text|>")
tok.post_processor = processors.Sequence([
    processors.ByteLevel(trim_offsets=False),
    processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                  special_tokens=[("<|begin_of_text|>", bos)])])
write("byte_level_llama3", tok, specials, n_cases)

# B: Qwen2 style: NFC, its regex, no BOS, merges used for every word.
specials_q = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
tok = Tokenizer(models.BPE())
tok.normalizer = normalizers.NFC()
tok.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
    pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
tok.decoder = decoders.ByteLevel()
tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=specials_q,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tok.train_from_iterator(corpus, trainer)
write("byte_level_qwen2", tok, specials_q, n_cases)


def add_byte_tokens(tok):
    """The SentencePiece-style vocab's <0xXX> pieces, appended as plain vocab entries (not added tokens)."""
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    nxt = max(vocab.values()) + 1 + len(j["added_tokens"])
    for b in range(256):
        key = f"<0x{b:02X}>"
        if key not in vocab:
            vocab[key] = nxt
            nxt += 1
    return Tokenizer.from_str(json.dumps(j))


# A SentencePiece-style vocabulary (words split at spaces for training only), then two tokenizers over it.
specials_s = ["<unk>", "<s>", "</s>"]
base = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
base.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
trainer = trainers.BpeTrainer(vocab_size=1800, special_tokens=specials_s, limit_alphabet=150, show_progress=False)
base.train_from_iterator(corpus, trainer)
base = add_byte_tokens(base)
bos_s = base.token_to_id("<s>")
template = {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [bos_s], "tokens": ["<s>"]}}}

# C: Llama 2 / Mistral v0.1 / TinyLlama style: Prepend + Replace normalizer, no pre-tokenizer, SentencePiece decoders.
j = json.loads(base.to_str())
j["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                       {"type": "Replace", "pattern": {"String": " "},
                                                        "content": "\u2581"}]}
j["pre_tokenizer"] = None
j["decoder"] = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
    {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
j["post_processor"] = template
write("sentencepiece_bpe_legacy", Tokenizer.from_str(json.dumps(j)), specials_s, n_cases)

# D: Metaspace pre-tokenizer (prepend first, no split), Metaspace decoder (newer Mistral / Gemma style).
j = json.loads(base.to_str())
j["normalizer"] = None
j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
j["decoder"] = {"type": "Sequence", "decoders": [
    {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
    {"type": "ByteFallback"}, {"type": "Fuse"}]}
j["post_processor"] = template
write("sentencepiece_bpe_metaspace", Tokenizer.from_str(json.dumps(j)), specials_s, n_cases)
print("tokenizers", tokenizers.__version__)
