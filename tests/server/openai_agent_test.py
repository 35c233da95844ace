#!/usr/bin/env python3
"""End-to-end checks of the agent features of `ferry serve` with the official `openai` client (run by
serve_e2e_test.cpp): tool calls (forced, named, parallel or not, streamed and whole, tool results in the
history), structured output validated with `jsonschema`, n > 1, the common parameters, and reasoning_content.

usage: openai_agent_test.py tools|reasoning BASE_URL
  tools:     a server whose template does or does not render tools (both must give parsed, valid calls)
  reasoning: a server whose chat template opens a <think> block (DeepSeek-R1 distills)
"""
import json
import sys

import jsonschema
import openai
from openai import OpenAI

KIND, BASE = sys.argv[1], sys.argv[2].rstrip("/")
client = OpenAI(base_url=BASE + "/v1", api_key="unused", max_retries=0, timeout=120)
MODEL = client.models.list().data[0].id
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 12},
                                         "hours": {"type": "integer", "minimum": 0, "maximum": 23}},
        "required": ["zone", "hours"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Time in a zone", "parameters": TIME}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]


def valid_call(name, arguments, what):
    check(name in SCHEMAS, what + ": a known function (%r)" % name)
    try:
        jsonschema.validate(json.loads(arguments), SCHEMAS.get(name, {}))
        check(True, what + ": arguments match the schema (%s)" % arguments)
    except Exception as e:  # noqa: BLE001 (bad JSON or a schema violation)
        check(False, what + ": arguments %r: %s" % (arguments, e))


def streamed_calls(stream):
    """The tool calls a stream's deltas add up to, its content, and its finish reasons."""
    calls, content, finishes = {}, "", []
    for chunk in stream:
        if not chunk.choices:
            continue
        c = chunk.choices[0]
        content += c.delta.content or ""
        for d in c.delta.tool_calls or []:
            if d.index not in calls:
                check(d.id is not None and d.function.name is not None, "stream: a call's first delta has id and name")
                calls[d.index] = {"id": d.id, "name": d.function.name, "arguments": d.function.arguments or ""}
            else:
                check(d.id is None, "stream: later deltas carry arguments only")
                calls[d.index]["arguments"] += d.function.arguments or ""
        if c.finish_reason:
            finishes.append(c.finish_reason)
    return [calls[i] for i in sorted(calls)], content, finishes


def tools_checks():
    # tool_choice required: a call of one of the tools, whatever the small model would have said.
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",
                                       parallel_tool_calls=False, max_tokens=96, temperature=0)
    m = r.choices[0].message
    check(r.choices[0].finish_reason == "tool_calls", "required: finish_reason tool_calls (%s)" % r.choices[0].finish_reason)
    check(m.tool_calls is not None and len(m.tool_calls) == 1, "required + parallel_tool_calls false: one call")
    check(m.content is None, "required: no content (%r)" % m.content)
    for c in m.tool_calls or []:
        check(c.type == "function" and c.id.startswith("call_"), "required: id and type")
        valid_call(c.function.name, c.function.arguments, "required")

    # The same request streamed: the deltas add up to the same calls, no markup leaks as content.
    calls, content, finishes = streamed_calls(client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, max_tokens=96,
        temperature=0, stream=True))
    check(finishes == ["tool_calls"], "required stream: one finish_reason tool_calls (%s)" % finishes)
    check(content == "", "required stream: no content (%r)" % content)
    whole = [(c.function.name, c.function.arguments) for c in m.tool_calls or []]
    check([(c["name"], c["arguments"]) for c in calls] == whole, "required stream: same calls as whole (%s)" % calls)

    # A named function at temperature 1: still that function, arguments valid; several seeds.
    for seed in range(3):
        r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=96, temperature=1,
                                           seed=seed, tool_choice={"type": "function", "function": {"name": "get_time"}})
        calls = r.choices[0].message.tool_calls or []
        check(len(calls) == 1 and calls[0].function.name == "get_time", "named (seed %d): get_time is called" % seed)
        for c in calls:
            valid_call(c.function.name, c.function.arguments, "named (seed %d)" % seed)
    calls, content, finishes = streamed_calls(client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, max_tokens=96, temperature=1, seed=7, stream=True,
        tool_choice={"type": "function", "function": {"name": "get_weather"}}))
    check(len(calls) == 1 and calls[0]["name"] == "get_weather" and finishes == ["tool_calls"], "named stream: one call")
    for c in calls:
        valid_call(c["name"], c["arguments"], "named stream")

    # A conversation that already called a tool and got its result: the template renders it, the model answers.
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_abc123", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "unit": "celsius"})}}]},
        {"role": "tool", "tool_call_id": "call_abc123", "content": "18 degrees, sunny"}]
    r = client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, tool_choice="none", max_tokens=24,
                                       temperature=0)
    check(r.choices[0].message.tool_calls is None and isinstance(r.choices[0].message.content, str),
          "history + tool_choice none: a text answer")
    check(r.choices[0].finish_reason in ("stop", "length"), "tool_choice none: finish_reason stop/length")
    r = client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, max_tokens=48, temperature=0)
    m = r.choices[0].message
    if m.tool_calls:  # auto: the model may call again; a call must then be valid and be the finish reason
        check(r.choices[0].finish_reason == "tool_calls", "auto: finish_reason tool_calls with calls")
    else:
        check("<tool_call>" not in (m.content or ""), "auto: no raw markup in the content")

    # Structured output: nested json_schema, whole and streamed, temperature 0 and 1.
    schema = {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 20},
        "days": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "object", "properties": {
            "day": {"type": "string", "enum": ["mon", "tue", "wed"]}, "celsius": {"type": "integer", "minimum": -30, "maximum": 45}},
            "required": ["day", "celsius"], "additionalProperties": False}}},
        "required": ["city", "days"], "additionalProperties": False}
    rf = {"type": "json_schema", "json_schema": {"name": "forecast", "strict": True, "schema": schema}}
    for temp in (0, 1):
        r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Forecast for Rome"}],
                                           response_format=rf, max_tokens=160, temperature=temp, seed=3)
        text = r.choices[0].message.content
        try:
            jsonschema.validate(json.loads(text), schema)
            check(r.choices[0].finish_reason == "stop", "json_schema (T=%d): valid, finish stop" % temp)
        except Exception as e:  # noqa: BLE001
            check(False, "json_schema (T=%d): %r: %s" % (temp, text, e))
        chunks = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Forecast for Rome"}],
                                                response_format=rf, max_tokens=160, temperature=temp, seed=3, stream=True)
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        check(streamed == text, "json_schema (T=%d): streamed equals whole" % temp)

    # n > 1: indexed choices, different samples, seeds per choice reproducible, the prompt shared.
    prompt = [{"role": "user", "content": "Write one word about the sea, a fresh prompt for n."}]
    fresh = {"ignore_eos": True, "cache_salt": "n3-usage"}  # a cache partition of its own: nothing cached yet
    r = client.chat.completions.create(model=MODEL, messages=prompt, n=3, max_tokens=12, temperature=1, seed=11,
                                       extra_body=fresh)
    check([c.index for c in r.choices] == [0, 1, 2], "n=3: three indexed choices")
    check(r.usage.completion_tokens == 36, "n=3: usage counts every choice (%d)" % r.usage.completion_tokens)
    # The prompt is new: 0 cached tokens for the request (choices 1 and 2 reuse choice 0's K/V, which is not a
    # cache hit of the request's prompt); the same request again finds it cached.
    check(r.usage.prompt_tokens_details.cached_tokens == 0,
          "n=3: a new prompt has no cached tokens (%d)" % r.usage.prompt_tokens_details.cached_tokens)
    texts = [c.message.content for c in r.choices]
    check(len(set(texts)) > 1, "n=3: the choices differ (%s)" % texts)
    again = client.chat.completions.create(model=MODEL, messages=prompt, n=3, max_tokens=12, temperature=1, seed=11,
                                           extra_body=fresh)
    check([c.message.content for c in again.choices] == texts, "n=3: the same seed gives the same choices")
    check(again.usage.prompt_tokens_details.cached_tokens > 0, "n=3 again: the prompt is cached")
    chunks = list(client.chat.completions.create(model=MODEL, messages=prompt, n=3, max_tokens=12, temperature=1, seed=11,
                                                 stream=True, stream_options={"include_usage": True},
                                                 extra_body={"ignore_eos": True}))
    per = {}
    fin = {}
    for c in chunks:
        for ch in c.choices:
            per[ch.index] = per.get(ch.index, "") + (ch.delta.content or "")
            if ch.finish_reason:
                fin[ch.index] = ch.finish_reason
    check([per.get(i) for i in range(3)] == texts, "n=3 stream: each index streams its choice")
    check(sorted(fin) == [0, 1, 2], "n=3 stream: a finish_reason per choice")
    check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == r.usage.completion_tokens,
          "n=3 stream: one usage chunk for all choices")
    # required with parallel calls: one or more valid calls (the last may be cut at max_tokens: "length")
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=96,
                                       temperature=0)
    calls = r.choices[0].message.tool_calls or []
    check(len(calls) >= 1 and r.choices[0].finish_reason in ("tool_calls", "length"), "required parallel: calls")
    for c in calls:
        valid_call(c.function.name, c.function.arguments, "required parallel")
    # tools with n: every choice a valid call
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required", n=2,
                                       parallel_tool_calls=False, max_tokens=96, temperature=1, seed=5)
    for c in r.choices:
        for call in c.message.tool_calls or []:
            valid_call(call.function.name, call.function.arguments, "n=2 required choice %d" % c.index)
        check(c.finish_reason == "tool_calls", "n=2 required choice %d: tool_calls" % c.index)

    # Parameters clients commonly send are accepted; absurd ones are a 400 naming them.
    r = client.chat.completions.create(model=MODEL, messages=ASK, stop=["\n\n", "###"], seed=1, presence_penalty=0.5,
                                       frequency_penalty=0.5, logprobs=True, top_logprobs=2, max_completion_tokens=8,
                                       user="u-1", metadata={"k": "v"}, store=False, parallel_tool_calls=True,
                                       temperature=0.7, top_p=0.9)
    check(r.choices[0].finish_reason in ("stop", "length") and r.usage.completion_tokens <= 8, "common parameters: 200")
    for bad, param in (({"n": 1000}, "n"), ({"tool_choice": "required"}, "tool_choice"),
                       ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools[0].function.name")):
        try:
            client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, **bad)
            check(False, "%s: 400" % bad)
        except openai.BadRequestError as e:
            check(param in str(e), "%s: 400 naming %s" % (bad, param))


def reasoning_checks():
    q = [{"role": "user", "content": "Is 7 a prime number?"}]
    r = client.chat.completions.create(model=MODEL, messages=q, max_tokens=24, temperature=0)
    m = r.choices[0].message
    reasoning = (m.model_extra or {}).get("reasoning_content")
    check(isinstance(reasoning, str) and len(reasoning) > 0, "reasoning: reasoning_content (%r)" % reasoning)
    check("<think>" not in (m.content or "") and "</think>" not in (m.content or ""), "reasoning: no tags in content")
    chunks = list(client.chat.completions.create(model=MODEL, messages=q, max_tokens=24, temperature=0, stream=True))
    streamed_r = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks if c.choices)
    streamed_c = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    check(streamed_r == reasoning and streamed_c == (m.content or ""), "reasoning stream: the same split")
    # Off per request: the same greedy text, all of it in the content.
    off = client.chat.completions.create(model=MODEL, messages=q, max_tokens=24, temperature=0,
                                         extra_body={"reasoning_format": "none"})
    text = off.choices[0].message.content or ""
    check("reasoning_content" not in (off.choices[0].message.model_extra or {}), "reasoning_format none: no reasoning_content")
    check(text.startswith(reasoning) and text.endswith(m.content or ""), "reasoning_format none: the same text in content")
    dropped = client.chat.completions.create(model=MODEL, messages=q, max_tokens=24, temperature=0,
                                             extra_body={"include_reasoning": False})
    check("reasoning_content" not in (dropped.choices[0].message.model_extra or {}) and
          (dropped.choices[0].message.content or "") == (m.content or ""), "include_reasoning false: dropped")


if KIND == "tools":
    tools_checks()
else:
    reasoning_checks()
print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
