#!/usr/bin/env python3
"""lazygraph-run --chat end to end against transformers, on the GPU machine.

Writes a random Llama checkpoint with transformers (its vocabulary that of a trained byte-level tokenizer from
tests/nn/data/tokenizers/, the tokenizer.json next to it), a tokenizer_config.json whose chat_template is one of the
stored public templates (tests/nn/data/chat_templates/), then for each template and conversation:

  - transformers' apply_chat_template(messages, add_generation_prompt=True, tokenize=True) gives the prompt's ids;
  - `lazygraph-run DIR --messages FILE --json --max-tokens N` renders the same template with lazygraph's engine,
    tokenizes it with nn::Tokenizer and generates: its "prompt" must be transformers' ids, exactly;
  - its greedy tokens are compared with transformers' greedy generation in float32 on the same weights (rounded to
    fp16), position by position until the first difference where transformers' top-two margin is clear.

Prints a table and exits 1 on any difference, 77 (skipped) without torch, transformers or a GPU.
    usage: chat_end_to_end.py LAZYGRAPH_RUN [--keep DIR]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENIZER = os.path.join(ROOT, "tests", "nn", "data", "tokenizers", "byte_level_llama3", "tokenizer.json")
TEMPLATES = os.path.join(ROOT, "tests", "nn", "data", "chat_templates")
CONVERSATIONS = {
    "one user turn": [{"role": "user", "content": "What is a CUDA graph?"}],
    "system and two turns": [
        {"role": "system", "content": "You answer in one sentence."},
        {"role": "user", "content": "Name a prime number."},
        {"role": "assistant", "content": "Seven is prime."},
        {"role": "user", "content": "And an even one? 日本語 😀"},
    ],
}
MAX_TOKENS = 24


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("lazygraph_run")
    parser.add_argument("--keep")
    args = parser.parse_args()
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"chat-end-to-end: skipped: {e}")
        return 77
    if not torch.cuda.is_available():
        print("chat-end-to-end: skipped: no GPU")
        return 77
    transformers.logging.set_verbosity_error()
    work = args.keep or tempfile.mkdtemp(prefix="chat-")
    with open(TOKENIZER, encoding="utf-8") as f:
        vocab = len(json.load(f)["model"]["vocab"]) + 16  # the added tokens sit past the trained vocabulary
    torch.manual_seed(7)
    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                      tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)
    model = transformers.LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():  # std 1/sqrt(in): logits with clear margins (as the crosscheck)
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape) / p.shape[1] ** 0.5)
            p.copy_(p.half().float())
    rows = []
    failed = 0
    for template_file in sorted(os.listdir(TEMPLATES)):
        if not template_file.endswith(".jinja"):
            continue
        name = template_file.removesuffix(".jinja")
        directory = os.path.join(work, name)
        model.half().save_pretrained(directory)
        model.float()
        with open(os.path.join(TEMPLATES, template_file), encoding="utf-8") as f:
            template = f.read()
        with open(TOKENIZER, encoding="utf-8") as f:
            tokenizer_json = f.read()
        with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(tokenizer_json)
        with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
                       "eos_token": "<|eot_id|>", "chat_template": template}, f, ensure_ascii=False)
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
        for label, messages in CONVERSATIONS.items():
            try:
                want = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                     return_dict=False)
                if isinstance(want, dict) or hasattr(want, "input_ids"):
                    want = want["input_ids"]
            except Exception as e:  # the template refuses the conversation (e.g. a system turn)
                rows.append((name, label, "-", "-", f"transformers refused: {type(e).__name__}: {e}"[:90]))
                continue
            messages_file = os.path.join(directory, "messages.json")
            with open(messages_file, "w", encoding="utf-8") as f:
                json.dump(messages, f, ensure_ascii=False)
            p = subprocess.run([args.lazygraph_run, directory, "--messages", messages_file, "--json", "--max-tokens",
                                str(MAX_TOKENS)], capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                failed += 1
                rows.append((name, label, "FAIL", "-", p.stderr.strip().splitlines()[-1][:90] if p.stderr else ""))
                continue
            ours = json.loads(p.stdout)
            same_prompt = ours["prompt"] == list(want)
            # transformers' greedy tokens on the same weights, float32.
            with torch.no_grad():
                ids = torch.tensor([want])
                ref = []
                clear = []
                for _ in range(MAX_TOKENS):
                    logits = model(ids).logits[0, -1]
                    top = torch.topk(logits, 2)
                    ref.append(int(top.indices[0]))
                    clear.append(float(top.values[0] - top.values[1]) > 0.05 * float(logits.std()))
                    ids = torch.cat([ids, top.indices[:1].view(1, 1)], dim=1)
            agree = 0
            for a, b, c in zip(ours["tokens"], ref, clear):
                if a != b:
                    break
                agree += 1
            tokens_ok = agree == len(ref) or (agree < len(ref) and not clear[agree])
            ok = same_prompt and tokens_ok
            failed += 0 if ok else 1
            rows.append((name, label, "PASS" if ok else "FAIL", f"{len(want)} ids " + ("equal" if same_prompt else
                         "DIFFER"), f"greedy equal for {agree}/{len(ref)} tokens" + ("" if tokens_ok else
                         " (differs where the margin is clear)") + f"; text {ours['text'][:30]!r}"))
    print(f"chat-end-to-end: lazygraph-run --messages against transformers {transformers.__version__} "
          f"apply_chat_template + greedy generation (float32), tokenizer {os.path.relpath(TOKENIZER, ROOT)}")
    for r in rows:
        print("  " + "  ".join(f"{c:22}" if i < 4 else c for i, c in enumerate(r)))
    print(f"{sum(1 for r in rows if r[2] == 'PASS')} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
