#!/usr/bin/env python3
"""Cross-check of lazygraph::nn::Tokenizer against the Hugging Face `tokenizers` library (issue 62, item 4).

Usage: crosscheck_tokenizers.py TOKENIZE [BENCH_TOKENIZER]

TOKENIZE is the program tests/nn/crosscheck/tokenize.cpp (built next to the tests). The script
1. trains four tokenizers with `tokenizers` (make_tokenizer_fixtures.py beside this file: a byte-level BPE with
   Llama 3's split regex, special tokens and a BOS template; one with Qwen2's regex and NFC; SentencePiece-style BPEs
   with byte fallback, one through Prepend/Replace normalizers, one through the Metaspace pre-tokenizer);
2. makes, for each, at least 10,000 strings (seeded): words of the training text; Unicode of many scripts, emoji with
   joiners, skin tones, flags and keycaps; CJK; combining marks, composed and decomposed; whitespace runs of every
   kind; digit runs (ASCII, fullwidth, Arabic-Indic); contractions in both cases; the special tokens inside text;
   long words; random code points of every plane; and texts that are not UTF-8 (bytes cut, stray continuation
   bytes, surrogates, overlong forms), which `tokenizers` cannot take: ours must refuse each, naming the offset of
   the first bad byte, as Python's decoder finds it; plus 2,000 random id sequences to decode;
3. runs TOKENIZE over them and compares, for each string, the ids with and without special tokens, with
   split_special_tokens (tokenizers' encode_special_tokens), and the decoding of those ids with and without special
   tokens; for each id sequence its decoding both ways.

It prints a table (strings, refusals, id sequences, and mismatches per field for each tokenizer) and the first
mismatches, and exits 1 on any mismatch. With BENCH_TOKENIZER (examples/bench/bench_tokenizer), it also prints the
encoding speed of both on the same English text, one core. Exit status: 0 all identical, 1 a difference, 2 bad
arguments, 77 skipped (the tokenizers package is not installed). Needs no GPU. By hand, on the GPU machine:
  ninja -C build-gpu tests/tokenize examples/bench_tokenizer
  python3 tests/nn/crosscheck/crosscheck_tokenizers.py build-gpu/tests/tokenize build-gpu/examples/bench_tokenizer
"""
import base64
import json
import os
import random
import subprocess
import sys
import tempfile
import time

# One core for the tokenizers library, for the speed measured below (set for it, not read here).
os.environ.update(TOKENIZERS_PARALLELISM="false")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
NAMES = ["byte_level_llama3", "byte_level_qwen2", "sentencepiece_bpe_legacy", "sentencepiece_bpe_metaspace"]
STRINGS = 10500  # per tokenizer, valid UTF-8
INVALID = 600  # per tokenizer, not UTF-8
ID_LISTS = 2000  # per tokenizer


def skip(reason):
    print(f"crosscheck-tokenizers: skipped: {reason}")
    sys.exit(77)


def corpus_words():
    words = []
    for name in sorted(os.listdir(os.path.join(ROOT, "docs"))):
        if name.endswith(".md"):
            with open(os.path.join(ROOT, "docs", name), encoding="utf-8") as f:
                words += f.read().split()
    return words or ["hello", "world"]


def strings(rng, words, specials):
    """STRINGS varied texts, each of several parts."""
    marks = [chr(c) for c in range(0x300, 0x370)] + ["\u0951", "\u05b0", "\u20dd", "\ufe0f"]
    emoji = ["😀", "👍", "👍🏽", "🇫🇷", "🇯🇵", "1️⃣", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🧑🏿‍🚀", "❤️", "🫠"]
    spaces = [" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028", "\u2029", "\u200b", "\u0085",
              "\u2003", "\x0b", "\x0c", "\ufeff"]
    scripts = [(0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0x3040, 0x30FF), (0x0600, 0x06FF), (0x0900, 0x097F),
               (0x0E00, 0x0E7F), (0x0400, 0x04FF), (0x0370, 0x03FF), (0x0590, 0x05FF), (0x1F300, 0x1FAFF),
               (0x20000, 0x2A6DF), (0x00A0, 0x024F), (0x2000, 0x2BFF), (0xE000, 0xF8FF), (0xFB00, 0xFFFD)]

    def code_point():
        while True:
            c = rng.randint(0x20, 0x10FFFF)
            if not 0xD800 <= c <= 0xDFFF:
                return chr(c)

    def part():
        r = rng.random()
        if r < 0.30:
            w = rng.choice(words)
            return w.upper() if rng.random() < 0.1 else w
        if r < 0.38:
            lo, hi = rng.choice(scripts)
            return "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 6)))
        if r < 0.45:
            base = rng.choice("aeiouAEOnNcszZ") if rng.random() < 0.8 else rng.choice(marks)
            return base + "".join(rng.choice(marks) for _ in range(rng.randint(1, 3)))
        if r < 0.52:
            return "".join(rng.choice(emoji) for _ in range(rng.randint(1, 3)))
        if r < 0.60:
            return "".join(rng.choice(spaces) for _ in range(rng.randint(1, 6)))
        if r < 0.67:
            digits = rng.choice(["0123456789", "０１２３４５６７８９", "٠١٢٣٤٥٦٧٨٩", "0123456789.,-"])
            return "".join(rng.choice(digits) for _ in range(rng.randint(1, 12)))
        if r < 0.72:
            return rng.choice(["'s", "'S", "'t", "'re", "'VE", "'m", "'ll", "'LL", "'d", "’s", "'x", "n't"])
        if r < 0.80:
            return rng.choice(specials) if specials else "<s>"
        if r < 0.85:
            return "".join(rng.choice("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") for _ in range(rng.randint(1, 5)))
        if r < 0.87:
            return rng.choice(words) * rng.randint(20, 60)  # long words: past the BPE cache's 256 bytes
        if r < 0.90:
            import unicodedata
            w = rng.choice(["café", "naïve", "Ångström", "ﬁancé", "Ⅻ", "ǅemal", "ﬀ", "㎒", "résumé"])
            return unicodedata.normalize(rng.choice(["NFC", "NFD", "NFKC", "NFKD"]), w)
        return "".join(code_point() for _ in range(rng.randint(1, 4)))

    out = ["", " ", "  ", "\n", "a", " a", "hello world", "Hello World!"]
    for s in specials:
        out += [s, " " + s, s + " ", "x" + s + "y", s + s, s[:-1], s[1:]]
    while len(out) < STRINGS:
        texts = []
        for _ in range(rng.randint(1, 14)):
            texts.append(part())
            texts.append(rng.choice(["", " ", " ", "", "\n", "  "]))
        out.append("".join(texts))
    return out


def invalid(rng, valid):
    """INVALID byte strings that are not UTF-8, each with the offset of its first bad byte."""
    bad = [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xed\xbf\xbf",
           b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff", b"\xfe", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98",
           b"\xc3\x28", b"\xe2\x28\xa1", b"\xf8\x88\x80\x80\x80"]
    out = []
    while len(out) < INVALID:
        data = rng.choice(valid).encode("utf-8")
        at = rng.randint(0, len(data))
        blob = data[:at] + rng.choice(bad) + data[at:]
        try:
            blob.decode("utf-8")
            continue  # a valid sequence after all (a truncated one completed by what followed): not a case
        except UnicodeDecodeError as e:
            out.append((blob, e.start))
    return out


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    tokenize = os.path.abspath(sys.argv[1])
    bench = os.path.abspath(sys.argv[2]) if len(sys.argv) == 3 else None
    try:
        import tokenizers
        from tokenizers import Tokenizer
    except ImportError as e:
        skip(f"the tokenizers package is not installed ({e})")

    rng = random.Random(62)
    words = corpus_words()
    rows = []
    shown = 0
    failed = False
    with tempfile.TemporaryDirectory(prefix="crosscheck-tokenizers-") as tmp:
        subprocess.run([sys.executable, os.path.join(HERE, "make_tokenizer_fixtures.py"), tmp, "0"], cwd=ROOT,
                       check=True, stdout=subprocess.DEVNULL)
        for name in NAMES:
            path = os.path.join(tmp, name, "tokenizer.json")
            tok = Tokenizer.from_file(path)
            split_tok = Tokenizer.from_file(path)
            split_tok.encode_special_tokens = True
            specials = [t.content for t in tok.get_added_tokens_decoder().values() if t.special]
            texts = strings(rng, words, specials)
            bad = invalid(rng, texts[8:])
            size = tok.get_vocab_size(with_added_tokens=True)
            id_lists = [[rng.randint(0, size + 3) for _ in range(rng.randint(1, 20))] for _ in range(ID_LISTS)]

            inputs = [{"text": t} for t in texts]
            inputs += [{"bytes_b64": base64.b64encode(b).decode("ascii")} for b, _ in bad]
            inputs += [{"ids": ids} for ids in id_lists]
            in_path, out_path = os.path.join(tmp, name + ".in.jsonl"), os.path.join(tmp, name + ".out.jsonl")
            with open(in_path, "w", encoding="utf-8") as f:
                for x in inputs:
                    f.write(json.dumps(x) + "\n")
            subprocess.run([tokenize, os.path.dirname(path), in_path, out_path], check=True)
            with open(out_path, encoding="utf-8") as f:
                results = [json.loads(line) for line in f]
            if len(results) != len(inputs):
                print(f"{name}: tokenize wrote {len(results)} lines for {len(inputs)} inputs")
                sys.exit(1)

            counts = {k: 0 for k in ("ids", "ids_no_special", "ids_split_special", "decoded", "decoded_skip",
                                     "refusal", "id_decoded", "id_decoded_skip")}

            def differ(field, what, ours, theirs):
                nonlocal shown, failed
                counts[field] += 1
                failed = True
                if shown < 20:
                    shown += 1
                    print(f"{name}: {field} differs for {what!r}:\n  ours   {ours!r}\n  theirs {theirs!r}")

            for text, ours in zip(texts, results):
                if "error" in ours:
                    differ("ids", text, ours["error"], "(encoded)")
                    continue
                ids = tok.encode(text).ids
                expected = {
                    "ids": ids,
                    "ids_no_special": tok.encode(text, add_special_tokens=False).ids,
                    "ids_split_special": split_tok.encode(text, add_special_tokens=False).ids,
                    "decoded": tok.decode(ids, skip_special_tokens=False),
                    "decoded_skip": tok.decode(ids, skip_special_tokens=True),
                }
                for field, value in expected.items():
                    if ours[field] != value:
                        differ(field, text, ours[field], value)
            for (blob, start), ours in zip(bad, results[len(texts):]):
                want = f"is not UTF-8: byte {start} "
                if want not in ours.get("error", ""):
                    differ("refusal", blob, ours, want)
            for ids, ours in zip(id_lists, results[len(texts) + len(bad):]):
                for field, skip_special in (("id_decoded", False), ("id_decoded_skip", True)):
                    theirs = tok.decode(ids, skip_special_tokens=skip_special)
                    key = "decoded_skip" if skip_special else "decoded"
                    if ours[key] != theirs:
                        differ(field, ids, ours[key], theirs)
            rows.append((name, len(texts), len(bad), len(id_lists), counts))

        print(f"\ncrosscheck-tokenizers: nn::Tokenizer against tokenizers {tokenizers.__version__}")
        head = ["tokenizer", "strings", "not UTF-8", "id lists", "ids", "no special", "split special", "decoded",
                "decoded skip", "refusals", "ids decoded", "ids decoded skip"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for name, n_text, n_bad, n_ids, c in rows:
            cells = [name, str(n_text), str(n_bad), str(n_ids)] + [
                "0" if c[k] == 0 else f"**{c[k]}**" for k in
                ("ids", "ids_no_special", "ids_split_special", "decoded", "decoded_skip", "refusal", "id_decoded",
                 "id_decoded_skip")]
            print("| " + " | ".join(cells) + " |")
        print("(cells after the counts: mismatches; 0 everywhere means identical)")

        if bench is not None:
            english = " ".join(words) + "\n"
            text_path = os.path.join(tmp, "english.txt")
            with open(text_path, "w", encoding="utf-8") as f:
                f.write(english * max(1, (8 << 20) // len(english)))
            with open(text_path, encoding="utf-8") as f:
                lines = f.read().splitlines(keepends=True)
            total = sum(len(line.encode("utf-8")) for line in lines)
            print("\nencoding English text, one core (MB/s):")
            for name in NAMES[:2]:
                path = os.path.join(tmp, name, "tokenizer.json")
                tok = Tokenizer.from_file(path)
                start = time.perf_counter()
                tok.encode_batch(lines, add_special_tokens=False)
                theirs = total / (time.perf_counter() - start) / 1e6
                ours = subprocess.run([bench, path, text_path], check=True, capture_output=True, text=True).stdout
                print(f"  {name}: tokenizers {theirs:.1f}; lazygraph: {ours.strip()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
