#!/usr/bin/env python3
"""Expected renders of the stored chat templates (tests/nn/data/chat_templates/*.jinja), for lazygraph's ChatTemplate.

Without arguments, renders every stored template for every conversation below with jinja2 configured exactly as
transformers' `_compile_jinja_template` (src/transformers/utils/chat_template_utils.py) configures it: an
ImmutableSandboxedEnvironment with trim_blocks=True, lstrip_blocks=True, the loopcontrols extension and a
`{% generation %}` tag (transformers' AssistantTracker, which renders its body in place), transformers' `tojson`
filter (json.dumps with ensure_ascii=False, indent, separators, sort_keys) and its globals raise_exception and
strftime_now; and renders as `render_jinja_template` does: messages, tools (None when not given), documents (None),
add_generation_prompt, the special tokens, and the conversation's extra variables. Writes
tests/nn/data/chat_templates/renders.json, which tests/nn/chat_template.cpp renders again in C++ and compares byte
for byte (a render that fails is stored as its error: "raised" when the template called raise_exception, whose
message the C++ render must give too; else any failure of the C++ render matches).

With --transformers (on the GPU machine, where transformers is installed), renders every case through
transformers itself instead: a PreTrainedTokenizerFast built offline over a one-word tokenizer, with the template's
special tokens and `chat_template` set, and `apply_chat_template(..., tokenize=False)`; compares each result with
the stored renders.json and exits 1 on any difference (printing it), 0 when all match, 77 when transformers is not
installed.

    python3 tests/nn/crosscheck/render_chat_templates.py                 # regenerate renders.json (jinja2 >= 3.1)
    python3 tests/nn/crosscheck/render_chat_templates.py --transformers  # check renders.json against transformers
"""

import argparse
import json
import pathlib
import sys
from datetime import datetime

DATA = pathlib.Path(__file__).resolve().parent.parent / "data" / "chat_templates"

# Each stored template with the special tokens of its model's tokenizer_config.json (None: the model has none).
TEMPLATES = {
    "llama3.1": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama3.2": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "qwen2.5": {"bos_token": None, "eos_token": "<|im_end|>"},
    "qwen3": {"bos_token": None, "eos_token": "<|im_end|>"},
    "mistral_nemo": {"bos_token": "<s>", "eos_token": "</s>"},
    "gemma3": {"bos_token": "<bos>", "eos_token": "<eos>"},
    "phi4": {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"},
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

TOOL_CALL = {
    "id": "call12345",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}},
}

DATE = {"date_string": "26 Jul 2024"}

# (name, messages, tools, extra variables); each is rendered with add_generation_prompt false and true.
CONVERSATIONS = [
    ("one user turn", [{"role": "user", "content": "Hello!"}], None, DATE),
    ("system and user", [{"role": "system", "content": "You are a helpful assistant."},
                         {"role": "user", "content": "What is 2 + 2?"}], None, DATE),
    ("multi-turn", [{"role": "system", "content": "Answer briefly."},
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello! How can I help?"},
                    {"role": "user", "content": "Name a prime number."},
                    {"role": "assistant", "content": "7"},
                    {"role": "user", "content": "Another one."}], None, DATE),
    ("unicode and whitespace", [{"role": "user", "content": "  Grüße aus Zürich 🌍 — 日本語\n\n"},
                                {"role": "assistant", "content": "\tBonjour ! «ça va» \"quoted\" \\ back\n"},
                                {"role": "user", "content": "emoji 👍🏽 and a tab\there"}], None, DATE),
    ("ends with the assistant", [{"role": "user", "content": "Say yes."},
                                 {"role": "assistant", "content": "Yes."}], None, DATE),
    ("two users in a row", [{"role": "user", "content": "First."},
                            {"role": "user", "content": "Second."}], None, DATE),
    ("tools offered", [{"role": "system", "content": "You can call tools."},
                       {"role": "user", "content": "What is the weather in Zürich?"}], [WEATHER_TOOL], DATE),
    ("tool call and result", [{"role": "user", "content": "What is the weather in Zürich?"},
                              {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
                              {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
                               "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"},
                              {"role": "assistant", "content": "It is 21.5 °C and clear."},
                              {"role": "user", "content": "Thanks!"}], [WEATHER_TOOL], DATE),
    ("thinking off", [{"role": "user", "content": "Quick: capital of France?"}], None,
     {"enable_thinking": False, **DATE}),
    ("thinking on", [{"role": "user", "content": "Quick: capital of France?"}], None,
     {"enable_thinking": True, **DATE}),
    ("reasoning in history", [{"role": "user", "content": "2 + 3?"},
                              {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n5"},
                              {"role": "user", "content": "And 4 + 4?"},
                              {"role": "assistant", "content": "8", "reasoning_content": "Add again."}], None,
     {"enable_thinking": True, **DATE}),
    ("content as parts", [{"role": "user", "content": [{"type": "text", "text": " Describe this. "},
                                                       {"type": "image"}]}], None, DATE),
]

# Small templates, each rendered with the variables beside it: the engine's subset feature by feature (printing,
# operators, filters, tests, methods, loops, macros, scoping, whitespace control, undefined values). Rendered with
# jinja2 only (they are no model's template).
SNIPPETS = [
    ("{{ 1.0 }} {{ 1e20 }} {{ 1.5e-5 }} {{ 0.1 + 0.2 }} {{ 10 / 4 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }}", {}),
    ("{{ 2 ** 10 }} {{ 3 * 'ab' }} {{ [1] * 3 }} {{ 1 + 2.5 }} {{ 5 - True }} {{ 7 % -3 }} {{ 1e16 }} {{ 123456.789 }}", {}),
    ("{{ True }} {{ none }} {{ [1, 'a', none, true, 2.0] }} {{ {'k': 'v\n', \"q'\": [1]} }} {{ x }}|", {"x": None}),
    ("{{ 'it\\'s' }} {{ ['it\\'s', \"a\\\"b\"] }} {{ ['tab\\there', 'nl\\n', '\u00e9\u00a0'] }}", {}),
    ("{{ u }}|{{ u is defined }}|{{ u is undefined }}|{{ u|length }}|{{ u|default('d') }}|{{ u == u }}", {}),
    ("{{ m.missing }}|{{ m.missing is defined }}|{{ m['role'] }}|{{ m.role }}|{{ s.x is defined }}",
     {"m": {"role": "user"}, "s": "str"}),
    ("{{ u.x }}", {}),
    ("{{ 'a' + u }}", {}),
    ("{{ u ~ 'a' ~ 1 ~ none }}", {}),
    ("{% for x in u %}no{% else %}empty{% endfor %}", {}),
    ("{{ l[0] }} {{ l[-1] }} {{ l[1:] }} {{ l[::-1] }} {{ l[:-1] }} {{ l[5] is defined }} {{ l[1:3] }} {{ l[::2] }}",
     {"l": [1, 2, 3, 4]}),
    ("{{ s[0] }} {{ s[-1] }} {{ s[1:] }} {{ s[::-1] }} {{ s|length }} {{ s[:-1] }}", {"s": "héllo🌍"}),
    ("{{ 'a' in 'cat' }} {{ 1 in [1, 2] }} {{ 'k' in d }} {{ 'z' not in d }} {{ 3 not in [1] }}", {"d": {"k": 1}}),
    ("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ 1 != 'x' }}", {}),
    ("{{ a and b }} {{ a or b }} {{ b or 'x' }} {{ not a }} {{ a if b else 'no' }} {{ 'yes' if a }}|{{ 'y' if b }}|",
     {"a": 1, "b": 0}),
    ("{{ '  x  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'Hello World'|upper }}|{{ 'ABC'|lower }}|{{ 'hello world'|title }}"
     "|{{ 'hELLO'|capitalize }}|{{ 'a-b c(d'|title }}", {}),
    ("{{ l|length }} {{ l|count }} {{ l|first }} {{ l|last }} {{ l|join(', ') }} {{ l|join }} {{ l|reverse|list }}"
     " {{ l|sort }} {{ l|sort(reverse=true) }} {{ l|unique|list }} {{ [-3, 2]|map('abs')|list }}", {"l": [3, 1, 2, 1]}),
    ("{{ 'a.b.c'|replace('.', '-') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 42|string ~ '!' }} {{ '12'|int + 1 }}"
     " {{ '3.7'|int }} {{ 'x'|int(5) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 2|float }} {{ -4|abs }} {{ 'x'|safe }}", {}),
    ("{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %} {% for k, v in d.items() %}{{ k }}{% endfor %}"
     " {{ d.keys()|list }} {{ d.values()|list }} {{ d.get('b') }} {{ d.get('z', 'no') }} {{ d.get('z') }}"
     " {{ d|dictsort }} {{ d|list }}", {"d": {"b": 2, "a": 1, "C": 3}}),
    ("{{ ms|selectattr('role', 'equalto', 'user')|list|length }} {{ ms|rejectattr('role', 'eq', 'user')|map(attribute="
     "'content')|join(',') }} {{ ms|map(attribute='content')|list }} {{ ms|selectattr('x')|list }}"
     " {{ [0, 1, '', 'a']|select|list }} {{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3]|reject('even')|list }}"
     " {{ ms|map(attribute='nope', default='-')|list }} {{ ms|join(',', attribute='role') }}",
     {"ms": [{"role": "user", "content": "a", "x": 1}, {"role": "assistant", "content": "b"},
             {"role": "user", "content": "c"}]}),
    ("{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}"
     "|{{ 'é\"\\\n\t\u0001'|tojson }}|{{ [1.0, 2.5e-7, none, true]|tojson }}|{{ []|tojson(indent=2) }}"
     "|{{ {}|tojson }}|{{ d|tojson(indent='\t') }}|{{ 'é'|tojson(true) }}",
     {"d": {"z": [1, {"y": "Zürich"}], "a": None}}),
    ("{{ '  a b  c '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ 'a b c'.split(none, 1) }}"
     " {{ 'a,b,c'.rsplit(',', 1) }} {{ '<x>'.startswith('<') }} {{ 'abc'.endswith('bc') }}"
     " {{ 'abc'.startswith(('x', 'a')) }}", {}),
    ("{{ '\n\nx\n'.strip('\n') }}|{{ '  x '.lstrip() }}|{{ '  x '.rstrip() }}|{{ 'xyx'.strip('x') }}|"
     "{{ 'Hello'.upper() }}|{{ 'Hello'.lower() }}|{{ 'a b'.title() }}|{{ 'aXb'.capitalize() }}|"
     "{{ 'a-b-c'.replace('-', '+') }}|{{ 'héllo'.find('l') }}|{{ 'hello'.rfind('l') }}|{{ 'x'.find('z') }}|"
     "{{ 'abcabc'.count('bc') }}|{{ '-'.join(['a', 'b']) }}|{{ '12'.isdigit() }}|{{ 'a1'.isalpha() }}", {}),
    ("{% for x in l %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.length }}"
     "/{{ loop.first }}/{{ loop.last }}/{{ loop.previtem }}/{{ loop.nextitem }};{% endfor %}", {"l": ["a", "b", "c"]}),
    ("{% for x in l if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}", {"l": [1, 2, 3, 0, 5]}),
    ("{% for x in l %}{% if x == 3 %}{% break %}{% endif %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}",
     {"l": [0, 1, 2, 3, 4]}),
    ("{% for x in l %}{% for y in l %}{{ loop.index }}{% endfor %}{{ loop.index }}|{% endfor %}", {"l": [1, 2]}),
    ("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 10 %}{{ x }},{% endfor %}{{ x }}", {}),
    ("{% set ns = namespace(n=0, found=false) %}{% for i in range(5) %}{% set ns.n = ns.n + i %}{% endfor %}"
     "{{ ns.n }} {{ ns.found }} {% set ns.found = true %}{{ ns.found }}", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t = (1, 2) %}{{ t|length }} {{ range(3)|list }} {{ range(1, 7, 2)|list }}"
     " {{ range(3, 0, -1)|list }} {{ dict(a=1, b='x') }}", {}),
    ("{% set block %}  inner {{ 1 + 1 }}\n{% endset %}[{{ block }}] {{ block|trim }}", {}),
    ("{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} "
     "{{ greet('Bob', '?') }} {{ greet(name='Cy', punct='.') }} {{ greet() }}", {}),
    ("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
    ("{% if x is string %}s{% elif x is mapping %}m{% elif x is iterable %}i{% else %}o{% endif %}"
     "{{ x is sequence }}{{ x is number }}{{ x is none }}{{ x is boolean }}", {"x": [1]}),
    ("{{ 1 is number }}{{ 1.5 is float }}{{ 1 is integer }}{{ true is number }}{{ true is boolean }}{{ true is true }}"
     "{{ false is false }}{{ none is none }}{{ 'a' is string }}{{ {} is mapping }}{{ 'a' is iterable }}"
     "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 'a' is in 'abc' }}{{ 2 is eq 2 }}{{ 'x' is equalto('x') }}"
     "{{ 'ab' is lower }}{{ 'AB' is upper }}{{ 1 is not string }}{{ u is not defined }}", {}),
    ("line one\n  {% if true %}\n    indented\n  {% endif %}\nline two\n{# a comment #}\nafter", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c {{- ' d ' -}} e\n  {%+ if true %}kept{% endif %}\n{{ 'x' }}\n", {}),
    ("{%- for m in ms %}\n  {{- m }}\n{%- endfor %}\n\n{# comment #}\n   {{ 'end' }}\n", {"ms": ["a", "b"]}),
    ("{{ 'adjacent' 'strings' }} {{ \"dq\" ~ 'sq' }} {{ 'esc\\x41\\u00e9\\\\' }} {{ 1_000 }}", {}),
    ("{{ raise_exception('Custom failure: ' ~ n) }}", {"n": 3}),
    ("{{ strftime_now is defined }} {{ raise_exception is defined }} {{ namespace is defined }} {{ tools }}",
     {"tools": None}),
    ("{% generation %}inside {{ 1 }}{% endgeneration %}", {}),
    ("{{ -x }} {{ +x }} {{ -(2.5) }} {{ (1, 2) }} {{ [] }} {{ {} }} {{ [[1, [2]], {'a': {'b': none}}] }}", {"x": 3}),
    ("{{ l|first }}|{{ []|first }}|{{ 'abc'|first }}|{{ 'abc'|last }}|{{ d|first }}", {"l": [1], "d": {"k": 1}}),
    ("{{ '%s'|length }} {{ 'a\nb'|indent(2) }}|{{ 'a\n\nb\n'|indent(2, true) }}|{{ 'a\n\nb'|indent(2, blank=true) }}",
     {}),
    ("{{ 3 / 0 }}", {}),
    ("{{ 'grüße émile ÇA'|upper }} {{ 'ÉCOLE Ωμέγα'|lower }} {{ 'élan vital'|title }} {{ 'émile'|capitalize }}"
     " {{ 'ça va'.upper() }} {{ 'ÇA'.lower() }} {{ 'éa-b'.title() }} {{ 'é' is lower }} {{ 'É'.isupper() }}", {}),
    ("{% if []|select %}iterators are true{% endif %} {% if [] %}lists are not{% endif %} {{ 2.5 is odd }}"
     " {{ 3.0 is odd }} {{ -4 is even }}", {}),
    ("{{ u|int }}", {}),
    ("{{ \"it's \"|safe + '<b> & \"q\"' + 'x'|safe }} {{ 'a' + '<'|e }} {{ ('<' ~ '>')|e }} {{ 'x'|safe ~ '<' }}"
     " {{ '<'|e|e }} {{ ('<'|safe + '>')|string + '&' }}", {}),
    ("{{ 5|indent }}", {}),
    ("{{ l.0 }} {{ l.1 }} {{ d.a.b }}", {"l": ["x", "y"], "d": {"a": {"b": "deep"}}}),
]


# Random templates (a fixed seed) over the subset: expressions of every operator, filter and test on values of every
# type, nested in if / for / set with whitespace control. Built only from what both engines hold the same way: the
# filters that Jinja returns as generators (select, map, items, unique, reverse) are followed by |list, and `%`
# (Python's string formatting) and printing a range or a dict view are left out.
FUZZ_SEED = 62
FUZZ_COUNT = 600
FUZZ_VARIABLES = {"s": "Héllo World ", "t": "a,b,,c", "n": 7, "m": -3, "f": 2.5, "z": 0, "b": True, "no": None,
                  "l": [3, 1, 2], "e": [], "d": {"k": "v", "a": 1, "z": [1, 2]}, "ed": {},
                  "ms": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": " yo "}]}


def fuzz_templates():
    import random

    rng = random.Random(FUZZ_SEED)
    atoms = ["s", "t", "n", "m", "f", "z", "b", "no", "l", "e", "d", "ms", "ed", "u", "1", "0", "-2", "2.0", "0.5",
             "'x'", "''", "'a b'", "none", "true", "false", "[1, 'a']", "{'q': 1}", "(1, 2)", "v", "d.k", "d['a']",
             "ms[0]", "ms[-1].content", "l[1:]", "s[::-1]", "l[0]", "d.zz", "s.strip()", "t.split(',')",
             "d.items()|list", "d.get('k')", "s.upper()", "s.startswith('H')", "ms|length", "l|join('-')",
             "range(3)|list", "t.rsplit(',', 1)", "s.find('o')", "s.replace('l', 'L')"]
    operators = ["+", "-", "*", "/", "//", "~", "==", "!=", "<", ">", "<=", ">=", "and", "or", "in", "not in"]
    filters = ["trim", "length", "tojson", "string", "upper", "lower", "title", "capitalize", "first", "last", "list",
               "int", "float", "abs", "reverse|list", "sort", "unique|list", "items|list", "default('D')",
               "join(',')", "replace('l', 'L')", "tojson(indent=2)", "selectattr('role', 'equalto', 'user')|list",
               "map(attribute='role')|list", "dictsort", "indent(2)", "count", "select|list", "reject|list",
               "tojson(sort_keys=true)", "d(none, true)"]
    tests = ["defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number", "integer",
             "float", "boolean", "true", "false", "odd", "even", "equalto 1", "in [1, 2]", "lower", "upper"]
    spaces = ["", " ", "\n", "  \n", "\n  ", "\t"]

    def expr(depth=0):
        k = rng.random()
        if depth > 2 or k < 0.3:
            return rng.choice(atoms)
        if k < 0.5:
            return f"({expr(depth + 1)} {rng.choice(operators)} {expr(depth + 1)})"
        if k < 0.7:
            return f"{expr(depth + 1)}|{rng.choice(filters)}"
        if k < 0.8:
            return f"({expr(depth + 1)} is {rng.choice(['', 'not '])}{rng.choice(tests)})"
        if k < 0.9:
            return f"({expr(depth + 1)} if {expr(depth + 1)} else {expr(depth + 1)})"
        return f"(not {expr(depth + 1)})"

    def control():
        return rng.choice(["", "-", "+"]) if rng.random() < 0.3 else ""

    def statement(depth=0):
        k = rng.random()
        before, after, space = control(), control(), rng.choice(spaces)
        if depth > 2 or k < 0.35:
            left, right = rng.choice(["", "-"]), rng.choice(["", "-"])
            return f"{space}{{{{{left} {expr()} {right}}}}}{rng.choice(spaces)}"
        if k < 0.45:
            return space + rng.choice(["text", " a ", "x\n", "  y  "]) + rng.choice(spaces)
        if k < 0.6:
            return (f"{space}{{%{before} if {expr()} {after}%}}{body(depth)}{rng.choice(spaces)}{{% else %}}"
                    f"{body(depth)}{{% endif %}}{rng.choice(spaces)}")
        if k < 0.75:
            sequence = rng.choice(["l", "ms", "s", "d", "e", "u", "range(4)", "l|reverse", "d|items"])
            return (f"{space}{{%{before} for x in {sequence} {after}%}}{body(depth)}{{{{ loop.index }}}}"
                    f"{{% if loop.last %}}L{{% endif %}}{{% endfor %}}{rng.choice(spaces)}")
        if k < 0.85:
            return f"{space}{{%{before} set v = {expr()} {after}%}}{rng.choice(spaces)}"
        if k < 0.92:
            return f"{space}{{#{before} c {after}#}}{rng.choice(spaces)}"
        return (f"{space}{{% set ns = namespace(v=0) %}}{{% for i in l %}}{{% set ns.v = ns.v + i %}}{{% endfor %}}"
                f"{{{{ ns.v }}}}")

    def body(depth):
        return "".join(statement(depth + 1) for _ in range(rng.randint(0, 3)))

    return ["".join(statement() for _ in range(rng.randint(1, 4))) for _ in range(FUZZ_COUNT)]


def generated_renders(env):
    """FUZZ_COUNT random templates rendered; of those that fail (a type error, an undefined value), only every
    fourth is kept, so that most of them test what a render writes."""
    rows, failures = [], 0
    for source in fuzz_templates():
        row = {"source": source, **render_snippet(env, source, FUZZ_VARIABLES)}
        if "error" in row:
            failures += 1
            if failures % 4 != 0:
                continue
        rows.append(row)
    return rows


def jinja_environment():
    """The environment of transformers' _compile_jinja_template, built with jinja2 alone."""
    import jinja2
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """transformers' AssistantTracker without the tracking: {% generation %} renders its body."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_generation"), [], [], body).set_lineno(lineno)

        def _generation(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def cases():
    for name, tokens in TEMPLATES.items():
        for conversation, messages, tools, variables in CONVERSATIONS:
            for add_generation_prompt in (False, True):
                yield {"template": name, "conversation": conversation, "add_generation_prompt": add_generation_prompt,
                       "messages": messages, "tools": tools, "variables": variables, **tokens}


def render_jinja(env, sources, case):
    import jinja2

    tokens = {k: case[k] for k in ("bos_token", "eos_token") if case[k] is not None}
    try:
        text = env.from_string(sources[case["template"]]).render(
            messages=case["messages"], tools=case["tools"], documents=None,
            add_generation_prompt=case["add_generation_prompt"], **tokens, **case["variables"])
        return {"output": text}
    except Exception as e:  # noqa: BLE001 - every failure is a result: the C++ render must fail too
        return {"error": f"{type(e).__name__}: {e}", "raised": type(e) is jinja2.exceptions.TemplateError}


def render_snippet(env, source, variables):
    import copy
    import jinja2

    try:  # a copy: jinja2's indent filter appends to a list given to it in place
        return {"output": env.from_string(source).render(**copy.deepcopy(variables))}
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}", "raised": type(e) is jinja2.exceptions.TemplateError}


def render_transformers(sources, case):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    import jinja2

    tokens = {k: case[k] for k in ("bos_token", "eos_token") if case[k] is not None}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")),
                                        unk_token="<unk>", **tokens)
    tokenizer.chat_template = sources[case["template"]]
    try:
        text = tokenizer.apply_chat_template(case["messages"], tools=case["tools"], tokenize=False,
                                             add_generation_prompt=case["add_generation_prompt"], **case["variables"])
        if not isinstance(text, str):
            return {"error": f"apply_chat_template returned a {type(text).__name__}, not the text", "raised": False}
        return {"output": text}
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}", "raised": type(e) is jinja2.exceptions.TemplateError}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transformers", action="store_true",
                        help="render through transformers' apply_chat_template and compare with renders.json")
    args = parser.parse_args()
    sources = {name: (DATA / f"{name}.jinja").read_text(encoding="utf-8") for name in TEMPLATES}
    if not args.transformers:
        env = jinja_environment()
        rows = [{**case, **render_jinja(env, sources, case)} for case in cases()]
        snippets = [{"source": source, "variables": variables, **render_snippet(env, source, variables)}
                    for source, variables in SNIPPETS]
        generated = generated_renders(env)
        (DATA / "renders.json").write_text(
            json.dumps({"templates": rows, "snippets": snippets, "generated_variables": FUZZ_VARIABLES,
                        "generated": generated}, ensure_ascii=False, indent=1) + "\n",
            encoding="utf-8")
        print(f"wrote {len(rows)} renders ({sum('error' in r for r in rows)} errors), {len(snippets)} snippets "
              f"({sum('error' in r for r in snippets)} errors) and {len(generated)} generated templates "
              f"({sum('error' in r for r in generated)} errors) to {DATA / 'renders.json'}")
        return 0
    try:
        import transformers
    except ImportError:
        print("skipped: transformers is not installed")
        return 77
    stored = json.loads((DATA / "renders.json").read_text(encoding="utf-8"))["templates"]
    failures = 0
    for row in stored:
        # A render that raised matches when both raised the template's own message; one that failed otherwise
        # (an undefined value, a type error) when both failed.
        keys = ("output",) if "output" in row else ("error", "raised") if row["raised"] else ("raised",)
        ours = {k: row[k] for k in keys}
        theirs = render_transformers(sources, row)
        theirs = {k: theirs.get(k) for k in keys}
        if ours != theirs:
            failures += 1
            print(f"DIFFERENT: {row['template']} / {row['conversation']} / "
                  f"add_generation_prompt={row['add_generation_prompt']}\n  stored:       {ours!r}\n"
                  f"  transformers: {theirs!r}")
    print(f"transformers {transformers.__version__}: {len(stored) - failures} of {len(stored)} renders identical")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
