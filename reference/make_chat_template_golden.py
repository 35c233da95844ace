#!/usr/bin/env python3
"""Golden outputs for ferry's chat templates, rendered by transformers itself.

For every template in ../shared/testdata/chat-templates/ (plus SmolLM2's, read from the GGUF, and ferry's
built-in ChatML / Llama 3 / Mistral templates), renders a set of conversations with
tokenizer.apply_chat_template(..., chat_template=src, tokenize=False) and records, per case, the exact context
the template saw (messages after transformers' normalization, tools, documents, add_generation_prompt,
special tokens, extra kwargs) and the expected text or the expected error.

strftime_now() is pinned to 2024-07-26 09:30 (ferry's test clock uses the same instant).

Run: /opt/refvenv/bin/python reference/make_chat_template_golden.py
Writes tests/golden/chat_templates.json.
"""
import copy
import datetime as real_datetime
import json
import os
import sys

import jinja2
import transformers.utils.chat_template_utils as ctu
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE_DIR = os.path.join(ROOT, "..", "shared", "testdata", "chat-templates")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
OUT = os.path.join(ROOT, "tests", "golden", "chat_templates.json")
BOS, EOS = "<s>", "</s>"

# The built-in templates of src/tokenizer/chat_template.cpp (kept identical by the C++ test that renders them).
BUILTIN = {
    "builtin:chatml": "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "builtin:llama3": "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
    "builtin:mistral": "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
}


class FixedDatetime(real_datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return real_datetime.datetime(2024, 7, 26, 9, 30, 0)


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
                },
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_documents",
            "description": "Search the knowledge base.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for"},
                    "top_k": {"type": "integer", "description": "How many results", "default": 3, "maximum": 10},
                    "tags": {"type": "array", "items": {"type": "string"}, "description": "Filter tags"},
                    "threshold": {"type": ["number", "null"], "description": "Minimum score 0.5 — «ok»"},
                },
                "required": ["query"],
            },
        },
    },
]

# Without the ["number", "null"] union type, which sends the Hermes / Command-R type macros into infinite
# recursion (a RecursionError in transformers, a depth-limit error in ferry).
SIMPLE_TOOLS = [TOOLS[0], {
    "type": "function",
    "function": {
        "name": "search_documents",
        "description": "Search the knowledge base.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for"},
                "top_k": {"type": "integer", "description": "How many results"},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Filter tags"},
                "options": {"type": "object", "additionalProperties": {"type": "boolean"}, "description": "Flags"},
            },
            "required": ["query", "tags"],
        },
    },
}]

CALL_ARGS = {"location": "Paris, France", "unit": "celsius"}


def tool_conversation(args_as_string):
    args = json.dumps(CALL_ARGS) if args_as_string else dict(CALL_ARGS)
    return [
        {"role": "system", "content": "You are a helpful assistant with tools."},
        {"role": "user", "content": "What's the weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call12345", "type": "function", "function": {"name": "get_current_weather", "arguments": args}}
            ],
        },
        {"role": "tool", "tool_call_id": "call12345", "name": "get_current_weather", "content": "{\"temperature\": 22}"},
        {"role": "assistant", "content": "It is 22 °C in Paris."},
        {"role": "user", "content": "Thanks!"},
    ]


CONVERSATIONS = {
    "single_user": dict(messages=[{"role": "user", "content": "Hello! How are you?"}]),
    "system_user": dict(
        messages=[
            {"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": "  Name three colors.\n"},
        ]
    ),
    "multi_turn": dict(
        messages=[
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Tell me a joke about \"quotes\" & <tags>."},
        ]
    ),
    "system_multi_turn": dict(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "<think>easy</think>4"},
            {"role": "user", "content": "Et en français ? 日本語も"},
        ]
    ),
    "not_alternating": dict(
        messages=[{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]
    ),
    "tools_dict_args": dict(messages=tool_conversation(False), tools=TOOLS),
    "tools_string_args": dict(messages=tool_conversation(True), tools=TOOLS),
    "simple_tools_dict_args": dict(messages=tool_conversation(False), tools=SIMPLE_TOOLS),
    "simple_tools_string_args": dict(messages=tool_conversation(True), tools=SIMPLE_TOOLS),
    "tools_no_calls": dict(messages=[{"role": "user", "content": "Weather in Oslo?"}], tools=TOOLS),
    "documents": dict(
        messages=[{"role": "user", "content": "Summarize the documents."}],
        documents=[{"title": "Tall penguins", "text": "Emperor penguins are the tallest."},
                   {"title": "Penguin habitats", "text": "Emperor penguins only live in Antarctica."}],
    ),
    "firefunction_kwargs": dict(
        messages=[{"role": "user", "content": "Call something."}],
        extra={"functions": json.dumps([t["function"] for t in TOOLS]), "datetime": "2024-07-26"},
    ),
    "date_string_kwarg": dict(
        messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": "What day is it?"}],
        extra={"date_string": "01 Jan 2025", "tools_in_user_message": False},
    ),
}


# Small templates that pin down engine semantics (rendered with transformers' own jinja environment).
ENGINE_CASES = [
    ("{{ 1 + 2 * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}|{{ 7 / 2 }}|{{ 4 / 2 }}", {}),
    ("{{ 0.1 + 0.2 }}|{{ 1e20 }}|{{ 1.5e-7 }}|{{ 3.0 }}|{{ 1/3 }}|{{ 123456789.125 }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ true }}|{{ 'ab' * 3 }}|{{ [1] + [2, 3] }}|{{ (1, 'x') }}|{{ (1,) }}", {}),
    ("{{ x }}|{{ x is defined }}|{{ x is undefined }}|{{ x | default('d') }}|{{ '' | default('e', true) }}|{{ x|length }}", {}),
    ("{{ d }}|{{ d.a }}|{{ d['b'] }}|{{ d.missing is defined }}|{{ d.get('zz', 5) }}|{{ d.items() | list }}", {"d": {"a": 1, "b": [1, 2]}}),
    ("{{ s[1:] }}|{{ s[::-1] }}|{{ s[-2] }}|{{ s[1:4:2] }}|{{ l[:2] }}|{{ l[-1] }}|{{ l[5] is defined }}", {"s": "héllo", "l": [1, 2, 3]}),
    ("{{ '  a b  ' | trim }}|{{ 'Hello World' | upper }}|{{ 'Hello' | lower }}|{{ 'hello wORLD' | capitalize }}|{{ \"they're bill's-x\" | title }}", {}),
    ("{{ [3, 1, 2] | sort }}|{{ ['b', 'A', 'c'] | sort }}|{{ [3, 1, 2] | sort(reverse=true) | join(',') }}|{{ [1, 2, 2, 'a', 'A'] | unique | list }}", {}),
    ("{{ users | selectattr('active') | map(attribute='name') | join(', ') }}|{{ users | rejectattr('name', 'equalto', 'bo') | list | length }}|{{ users | map(attribute='age', default=0) | list }}", {"users": [{"name": "al", "active": True, "age": 3}, {"name": "bo", "active": False}]}),
    ("{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3, 4] | reject('divisibleby', 2) | list }}|{{ ['a', 'b'] | map('upper') | list }}", {}),
    ("{{ v | tojson }}|{{ v | tojson(indent=2) }}|{{ v | tojson(sort_keys=true) }}|{{ v | tojson(separators=(',', ':')) }}", {"v": {"z": [1, 2.5, None, True], "a": "é\"\n<>", "e": {}, "f": []}}),
    ("{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, first=true) }}|{{ 'x' | center(7) }}|{{ 'one two  three' | wordcount }}", {}),
    ("{{ 3.14159 | round(2) }}|{{ 2.5 | round }}|{{ 3.7 | round(0, 'floor') }}|{{ -3 | abs }}|{{ '42' | int }}|{{ 'x' | int }}|{{ '3.5' | float }}|{{ 3.9 | int }}", {}),
    ("{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'xyx'.strip('x') }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'a-b'.replace('-', '+') }}|{{ 'hello'.find('l') }}", {}),
    ("{{ 'Hi {}!'.format('you') }}|{{ 'abc'.upper() }}|{{ 'ABC'.lower() }}|{{ 'hello world'.title() }}|{{ '  x '.lstrip() }}.|{{ '  x '.rstrip() }}.", {}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }}{% if not loop.last %},{% endif %}{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }};{% endfor %}", {"xs": ["a", "b", "c"]}),
    ("{% for x in xs if x > 1 %}{{ x }}{{ loop.index }}{% else %}none{% endfor %}|{% for x in [] %}{{ x }}{% else %}empty{% endfor %}", {"xs": [1, 2, 3]}),
    ("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}|{{ range(2, 9, 3) | list }}|{{ range(3) | list }}", {}),
    ("{% set ns = namespace(n=0, items=[]) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.n }}|{{ ns.items }}", {}),
    ("{% set x = 1 %}{% for i in range(3) %}{% set x = i %}{% endfor %}{{ x }}|{% if true %}{% set y = 2 %}{% endif %}{{ y }}", {}),
    ("{% macro greet(name, greeting='Hello') -%}{{ greeting }}, {{ name }}!{%- endmacro %}{{ greet('Ann') }}|{{ greet('Bob', greeting='Hi') }}|{{ greet('C', 'Yo') }}", {}),
    ("{% macro wrap() %}[{{ caller() }}]{% endmacro %}{% call wrap() %}inner{% endcall %}|{% set b %}  block {{ 1 }} {% endset %}{{ b }}|{% filter upper %}abc{% endfilter %}", {}),
    ("{{ 1 if true else 2 }}|{{ 1 if false else 2 }}|{{ 'x' if false }}|{{ not true }}|{{ 1 and 'a' }}|{{ 0 or 'b' }}|{{ 1 < 2 < 3 }}|{{ 'a' in 'abc' }}|{{ 3 not in [1, 2] }}", {}),
    ("{{ none is none }}|{{ 1 is number }}|{{ true is number }}|{{ 'a' is string }}|{{ {} is mapping }}|{{ [] is iterable }}|{{ 'x' is sequence }}|{{ true is boolean }}|{{ 1 is integer }}|{{ 1.0 is float }}|{{ 4 is even }}|{{ x is none }}", {}),
    ("{{ dict(a=1, b='x') }}|{{ {'k': [1, {'n': none}]} }}|{{ [1, 'it\\'s', \"q\"] }}|{{ {'a': 1}['a'] }}|{{ 'ab'|list }}|{{ {'x': 1, 'y': 2}|list }}", {}),
    ("{{ items | first }}|{{ items | last }}|{{ items | reverse | list }}|{{ 'abc' | reverse }}|{{ items | length }}|{{ items | sum }}|{{ items | max }}|{{ items | min }}|{{ items | batch(2) | list }}", {"items": [4, 1, 3]}),
    ("  {% if true %}\n    x\n  {% endif %}\n{{- ' y ' -}}\n  z {# c #}\n  {%- if true +%}  w{% endif %}\n", {}),
    ("a {%- if true %} b {% endif -%} c\n{% for i in [1,2] %}\n{{ i }}\n{% endfor %}\nend\n", {}),
    ("{% raw %}{{ not rendered }}{% endraw %}|{{ 'a' 'b' }}|{{ \"\\u00e9\\x41\\t|\" }}|{{ '%s-%d' | format('a', 3) }}|{{ '<b>' | e }}|{{ '<b>' | safe }}", {}),
    ("{{ 'Hi' | safe + '<x>' }}|{{ '<x>' ~ ('y' | safe) }}|{{ strftime_now('%Y-%m-%d %H:%M %b %A') }}", {}),
]


def render_engine_cases():
    out = []
    for src, ctx in ENGINE_CASES:
        case = {"source": src, "context": ctx}
        try:
            case["expected"] = ctu._compile_jinja_template(src).render(**ctx)
        except Exception as e:
            case["expected_error"] = f"{type(e).__name__}: {e}"
        out.append(case)
    return out


def make_tokenizer():
    tok = Tokenizer(WordLevel({"<unk>": 0, BOS: 1, EOS: 2}, unk_token="<unk>"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS)


def read_smollm_template():
    try:
        import gguf
    except ImportError:
        return None
    if not os.path.exists(MODEL):
        return None
    reader = gguf.GGUFReader(MODEL)
    field = reader.fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def render_case(tokenizer, source, conv, add_generation_prompt):
    conv = copy.deepcopy(conv)
    messages = conv["messages"]
    tools = conv.get("tools")
    documents = conv.get("documents")
    extra = conv.get("extra", {})
    # The context the template sees (what render_jinja_template passes): messages with None values dropped,
    # tools/documents (None when absent), add_generation_prompt, special tokens, extra kwargs.
    seen_messages = ctu._normalize_chat_messages(copy.deepcopy(messages))
    context = {"messages": seen_messages, "tools": tools, "documents": documents,
               "add_generation_prompt": add_generation_prompt, "bos_token": BOS, "eos_token": EOS}
    context.update(extra)
    case = {"context": context}
    try:
        out = tokenizer.apply_chat_template(messages, tools=tools, documents=documents, chat_template=source,
                                            add_generation_prompt=add_generation_prompt, tokenize=False, **extra)
        case["expected"] = out
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:  # raise_exception()
            case["expected_raise"] = str(e)
        else:
            case["expected_error"] = f"{type(e).__name__}: {e}"
    except Exception as e:  # TypeError etc. from inside the template
        case["expected_error"] = f"{type(e).__name__}: {e}"
    return case


def main():
    ctu.datetime = FixedDatetime
    templates = {}
    if os.path.isdir(TEMPLATE_DIR):
        for name in sorted(os.listdir(TEMPLATE_DIR)):
            if name.endswith(".jinja"):
                with open(os.path.join(TEMPLATE_DIR, name), encoding="utf-8") as f:
                    templates[name] = f.read()
    smollm = read_smollm_template()
    if smollm is not None:
        templates["gguf:SmolLM2-135M-Instruct"] = smollm
    templates.update(BUILTIN)

    tokenizer = make_tokenizer()
    cases = []
    for name, source in templates.items():
        for conv_name, conv in CONVERSATIONS.items():
            if conv_name == "firefunction_kwargs" and "firefunction" not in name:
                continue
            if conv_name == "documents" and "command-r" not in name.lower() and "builtin" not in name:
                continue
            for agp in (False, True):
                case = render_case(tokenizer, source, conv, agp)
                case["template"] = name
                case["conversation"] = conv_name
                cases.append(case)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"date": "2024-07-26T09:30:00", "note": "generated by reference/make_chat_template_golden.py",
                   "builtin_templates": BUILTIN, "engine_cases": render_engine_cases(), "cases": cases}, f, ensure_ascii=False, indent=1)
    n_ok = sum("expected" in c for c in cases)
    print(f"{len(cases)} cases ({n_ok} rendered, {len(cases) - n_ok} errors) -> {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
