#!/usr/bin/env python3
"""End-to-end checks of `ferry serve` with the official `openai` Python client (run by serve_e2e_test.cpp).

usage: openai_client_test.py BASE_URL    (e.g. http://127.0.0.1:8080); exits 0 when every check passes.
"""
import re
import sys
import time
import urllib.request

import openai
from openai import OpenAI

BASE = sys.argv[1].rstrip("/")
client = OpenAI(base_url=BASE + "/v1", api_key="unused", max_retries=0, timeout=60)
MODEL = client.models.list().data[0].id
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def metric(name):
    text = urllib.request.urlopen(BASE + "/metrics", timeout=10).read().decode()
    m = re.search("^" + re.escape(name) + r" ([-+0-9.eE]+)$", text, re.M)
    return float(m.group(1)) if m else None


MESSAGES = [{"role": "user", "content": "Name three colors."}]

# Non-streaming chat: content, finish reason, usage.
r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16, temperature=0)
whole = r.choices[0].message.content
check(r.object == "chat.completion" and r.choices[0].message.role == "assistant", "chat: object and role")
check(len(whole) > 0, "chat: non-empty content")
check(r.choices[0].finish_reason in ("stop", "length"), "chat: finish_reason " + str(r.choices[0].finish_reason))
u = r.usage
check(u.prompt_tokens > 0 and 0 < u.completion_tokens <= 16 and u.total_tokens == u.prompt_tokens + u.completion_tokens,
      "chat: usage %s" % u)
check(u.prompt_tokens_details is not None and u.prompt_tokens_details.cached_tokens >= 0, "chat: cached_tokens present")

# Streaming chat, same greedy request: role delta first, the same text, a usage chunk at the end.
chunks = list(client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16, temperature=0, stream=True,
                                             stream_options={"include_usage": True}))
check(chunks[0].choices[0].delta.role == "assistant", "stream: role delta first")
streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
check(streamed == whole, "stream: same text as non-streaming (%r vs %r)" % (streamed, whole))
finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
check(len(finals) == 1 and finals[0].choices[0].finish_reason == r.choices[0].finish_reason, "stream: one finish_reason")
check(chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == u.completion_tokens,
      "stream: final usage chunk")
check(chunks[-1].usage.prompt_tokens_details.cached_tokens > 0, "stream: the repeated prompt hit the prefix cache")

# Stop strings: cut the greedy text at a word from its middle.
base = client.completions.create(model=MODEL, prompt="The history of the river", max_tokens=24, temperature=0,
                                 extra_body={"ignore_eos": True})
text = base.choices[0].text
check(base.choices[0].finish_reason == "length" and base.usage.completion_tokens == 24, "completions: ignore_eos gives max_tokens")
words = [w for w in text.split() if len(w) >= 3]
stop = words[len(words) // 2] if words else text[len(text) // 2:]
cut = client.completions.create(model=MODEL, prompt="The history of the river", max_tokens=24, temperature=0,
                                stop=[stop, "\x00never"], extra_body={"ignore_eos": True})
check(cut.choices[0].text == text[:text.find(stop)], "stop: text ends before %r (%r)" % (stop, cut.choices[0].text))
check(cut.choices[0].finish_reason == "stop", "stop: finish_reason stop")
cut_stream = client.completions.create(model=MODEL, prompt="The history of the river", max_tokens=24, temperature=0,
                                       stop=stop, stream=True, extra_body={"ignore_eos": True})
check("".join(c.choices[0].text for c in cut_stream if c.choices) == text[:text.find(stop)], "stop: streamed too")

# Logprobs: chat (bool + top_logprobs) and completions (int).
r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3)
content = r.choices[0].logprobs.content
check(len(content) == r.usage.completion_tokens, "chat logprobs: one entry per token")
check(all(len(t.top_logprobs) == 3 for t in content), "chat logprobs: 3 alternatives each")
check(all(t.logprob <= 0 and t.top_logprobs[0].logprob >= t.top_logprobs[-1].logprob for t in content),
      "chat logprobs: <= 0 and sorted")
check(all(t.token == t.top_logprobs[0].token and abs(t.logprob - t.top_logprobs[0].logprob) < 1e-5 for t in content),
      "chat logprobs: greedy picks the top alternative")
check(all(bytes(t.bytes) == t.token.encode() for t in content if "\ufffd" not in t.token), "chat logprobs: bytes")
r = client.completions.create(model=MODEL, prompt="One, two, three,", max_tokens=6, temperature=0, logprobs=2)
lp = r.choices[0].logprobs
check(len(lp.tokens) == 6 and len(lp.token_logprobs) == 6 and all(len(t) == 2 for t in lp.top_logprobs),
      "completion logprobs: shape")
check("".join(lp.tokens) == r.choices[0].text, "completion logprobs: tokens spell the text")

# Bad requests surface as the client's typed errors.
try:
    client.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=5)
    check(False, "bad temperature: 400")
except openai.BadRequestError as e:
    check(e.status_code == 400 and "temperature" in str(e), "bad temperature: 400 naming it")
try:
    client.chat.completions.create(model="no-such-model", messages=MESSAGES)
    check(False, "unknown model: 404")
except openai.NotFoundError:
    check(True, "unknown model: 404")

# A client that disconnects mid-stream cancels its request; its KV blocks come back.
time.sleep(0.2)
idle_blocks = metric("ferry_kv_blocks_used")
cancelled0 = metric('ferry_engine_requests_total{outcome="cancelled"}')
stream = client.completions.create(model=MODEL, prompt="Tell me a very long story.", max_tokens=3000, temperature=0.7,
                                   stream=True, extra_body={"ignore_eos": True})
got = 0
for c in stream:
    got += 1
    if got == 3:
        break
check(metric("ferry_running_sequences") >= 1 or metric("ferry_waiting_sequences") >= 1, "disconnect: request in flight")
stream.close()
deadline = time.time() + 15
while time.time() < deadline:
    if (metric('ferry_engine_requests_total{outcome="cancelled"}') > cancelled0 and metric("ferry_running_sequences") == 0
            and metric("ferry_kv_blocks_used") == idle_blocks):
        break
    time.sleep(0.1)
check(metric('ferry_engine_requests_total{outcome="cancelled"}') == cancelled0 + 1, "disconnect: request cancelled")
check(metric("ferry_kv_blocks_used") == idle_blocks, "disconnect: KV blocks back to idle (%s)" % idle_blocks)
check(metric("ferry_running_sequences") == 0 and metric("ferry_waiting_sequences") == 0, "disconnect: nothing running")

print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
