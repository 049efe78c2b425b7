#!/usr/bin/env python3
"""Test 'ascii-strings': no string or character literal in the C++ sources holds a non-ASCII character.

usage: check_ascii_strings.py DIR...
String literals are what users read: static_assert messages and exception texts. Compilers print non-ASCII in a
diagnostic as escapes (clang writes an em dash as <U+2014> or octal), and a terminal or log without UTF-8 mangles
it, so messages say "--" or ":" instead. Comments may hold any character. Scans every .hpp/.h/.cpp/.cc/.cuh below
each DIR with a small lexer (comments, raw strings, prefixes, digit separators) and fails naming file:line and
the literal for each one that is not ASCII.
"""
import os
import re
import sys

EXTENSIONS = (".hpp", ".h", ".cpp", ".cc", ".cuh")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
NUMBER = re.compile(r"\.?[0-9](?:[0-9A-Za-z_.]|'(?=[0-9A-Za-z])|[eEpP][+-])*")
STRING_PREFIXES = ("", "u8", "u", "U", "L")
RAW_STRING = re.compile(r'"([^()\\\s]{0,16})\(')


def literals(text: str):
    """Yields (line, literal) for every string and character literal of a C++ source."""
    i, line, n = 0, 1, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            line += text.count("\n", i, end)
            i = end
        elif c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            i = NUMBER.match(text, i).end()
        elif c.isalpha() or c == "_":
            word = IDENTIFIER.match(text, i)
            i = word.end()
            prefix = word.group()
            if prefix.endswith("R") and prefix[:-1] in STRING_PREFIXES and i < n and text[i] == '"':
                delimiter = RAW_STRING.match(text, i)
                if delimiter:
                    close = ")" + delimiter.group(1) + '"'
                    end = text.find(close, delimiter.end())
                    end = n if end < 0 else end + len(close)
                    yield line, text[i:end]
                    line += text.count("\n", i, end)
                    i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            yield line, text[i:j + 1]
            i = j + 1
        else:
            i += 1


def main() -> int:
    bad = 0
    scanned = 0
    for root in sys.argv[1:]:
        for dirpath, _, names in os.walk(root):
            for name in sorted(names):
                if not name.endswith(EXTENSIONS):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                scanned += 1
                for line, literal in literals(text):
                    if not literal.isascii():
                        shown = "".join(ch if ch.isascii() else f"<U+{ord(ch):04X}>" for ch in literal)
                        print(f"{os.path.relpath(path)}:{line}: a literal holds non-ASCII characters; write them "
                              f"in ASCII (an em dash as '--' or ':'): {shown}")
                        bad += 1
    if bad:
        return 1
    print(f"every string and character literal of {scanned} files is ASCII")
    return 0


if __name__ == "__main__":
    sys.exit(main())
