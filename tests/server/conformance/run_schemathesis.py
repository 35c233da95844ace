#!/usr/bin/env python3
"""schemathesis against `ferry serve`: starts the server on a tiny fixture model on a free port and runs
schemathesis over OpenAI's published description of the routes ferry implements from it (POST
/chat/completions, POST /completions, GET /models: ../shared/testdata/openai-openapi, its `model` field
narrowed to the served name) and over ferry's own description of its other routes (ferry_routes.openapi.json
here). Checks: no server error (5xx), every response valid against the description, status codes and
content types the description lists, and schema-valid requests accepted (positive_data_acceptance; a
refusal is reported, and must be a 400 that names a field README lists as unsupported). request_hooks.py
keeps the generated prompts inside the served context (4096 tokens: the fixture's config copied with a longer
max_position_embeddings).

usage: run_schemathesis.py FERRY_BINARY [--model DIR] [--max-examples N] [--seed N] [--report FILE]
Runs with the Python that has schemathesis (python3 -m venv V && V/bin/pip install schemathesis).
Exit status: schemathesis's (0: nothing found).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
OPENAI_SPEC = os.path.normpath(os.path.join(SOURCE, "..", "shared", "testdata", "openai-openapi",
                                            "openapi-chat-completions-models.json"))
FERRY_SPEC = os.path.join(HERE, "ferry_routes.openapi.json")
SERVED_NAME = "tiny"
# OpenAI's description lists only 200 (and 429) and application/json, while its API answers 400s and streams
# text/event-stream: the checks there are the issue's (server errors, response schemas, valid requests
# accepted). ferry's own description is held to every check.
OPENAI_CHECKS = "not_a_server_error,response_schema_conformance,positive_data_acceptance"
FERRY_CHECKS = OPENAI_CHECKS + ",status_code_conformance,content_type_conformance"


def keep_refs(schema, names):
    """A oneOf / anyOf of $refs cut to the referenced schemas named in `names`."""
    for key in ("oneOf", "anyOf"):
        if key in schema:
            schema[key] = [b for b in schema[key] if b.get("$ref", "").rsplit("/", 1)[-1] in names]


def without_unsupported(schemas):
    """The request features README lists as not supported (each a 400 naming the field) taken out of the
    description, so that positive_data_acceptance checks everything else: content parts other than text, the
    deprecated function role / functions / function_call, tools other than functions (and a tool_choice of
    allowed_tools or a custom tool), n > 16, best_of other
    than 1, echo; and stream_options without stream, which OpenAI refuses too."""
    keep_refs(schemas["ChatCompletionRequestUserMessageContentPart"], {"ChatCompletionRequestMessageContentPartText"})
    keep_refs(schemas["ChatCompletionRequestAssistantMessageContentPart"], {"ChatCompletionRequestMessageContentPartText"})
    schemas["ChatCompletionRequestMessage"]["oneOf"] = [
        b for b in schemas["ChatCompletionRequestMessage"]["oneOf"] if not b["$ref"].endswith("FunctionMessage")]
    keep_refs(schemas["ChatCompletionMessageToolCalls"]["items"], {"ChatCompletionMessageToolCall"})
    chat = schemas["CreateChatCompletionRequest"]["allOf"][1]["properties"]
    keep_refs(chat["tools"]["items"], {"ChatCompletionTool"})
    choice = schemas["ChatCompletionToolChoiceOption"]  # the modes and a named function, not allowed_tools / custom
    choice["oneOf"] = [b for b in choice["oneOf"] if b.get("$ref", "").rsplit("/", 1)[-1] in ("", "ChatCompletionNamedToolChoice")]
    for name in ("functions", "function_call"):
        chat.pop(name, None)
    chat["n"]["maximum"] = 16
    completion = schemas["CreateCompletionRequest"]["properties"]
    completion["best_of"] = {"type": "integer", "enum": [1], "nullable": True}
    completion["echo"] = {"type": "boolean", "enum": [False], "nullable": True}
    completion["n"]["maximum"] = 16
    # A response_format's schema is a JSON schema of the subset README lists (anything else is a 400 naming the
    # keyword): generated as a small object schema of those keywords, not as an arbitrary object.
    schemas["ResponseFormatJsonSchemaSchema"] = {
        "type": "object", "additionalProperties": False, "required": ["type"],
        "properties": {"type": {"enum": ["object", "string", "integer", "boolean", "array"]}}}
    # Token counts are not negative (a 400 at OpenAI).
    for properties in (chat, completion):
        for name in ("max_tokens", "max_completion_tokens"):
            if isinstance(properties.get(name), dict):
                properties[name]["minimum"] = 0
    # A completions prompt holds one prompt: the batch forms (a list of strings, a list of token lists) with one.
    for branch in completion["prompt"]["oneOf"]:
        if branch["type"] == "array" and branch["items"].get("type") in ("string", "array"):
            branch["minItems"] = branch["maxItems"] = 1
    # A completions prompt's token ids are the served model's (0..511: tiny-llama's vocabulary).
    for branch in completion["prompt"]["oneOf"]:
        items = branch.get("items", {})
        if items.get("type") == "array":
            items = items["items"]
        if items.get("type") == "integer":
            items["minimum"], items["maximum"] = 0, 511
    # A function's name: a-z, A-Z, 0-9, _ and -, at most 64 (OpenAI's description says so in words only).
    function = schemas["FunctionObject"]["properties"]["name"]
    function["pattern"] = "^[a-zA-Z0-9_-]{1,64}$"
    # logit_bias maps token ids of the served model to -100..100 (OpenAI's description says so in words only).
    token_id = {"pattern": "^(0|[1-9][0-9]{0,1}|[1-4][0-9]{2}|50[0-9]|51[01])$"}  # 0..511: tiny-llama's vocabulary
    for properties in (chat, completion):
        if isinstance(properties.get("logit_bias"), dict):
            properties["logit_bias"]["propertyNames"] = token_id
            properties["logit_bias"]["additionalProperties"] = {"type": "integer", "minimum": -100, "maximum": 100}
    # stream_options without stream: true is a 400 at OpenAI too ("only allowed when stream is enabled").
    only_streamed = {"stream_options": {"required": ["stream"], "properties": {"stream": {"const": True}}}}
    # tool_choice without tools is a 400 at OpenAI too ("only allowed when 'tools' are specified").
    chat_dependent = dict(only_streamed)
    chat_dependent["tool_choice"] = {"required": ["tools"], "properties": {"tools": {"minItems": 1}}}
    # top_logprobs needs logprobs: true, in OpenAI's description's own words.
    chat_dependent["top_logprobs"] = {"required": ["logprobs"], "properties": {"logprobs": {"const": True}}}
    schemas["CreateChatCompletionRequest"]["allOf"][1]["dependentSchemas"] = chat_dependent
    schemas["CreateCompletionRequest"]["dependentSchemas"] = only_streamed
    for d in (schemas["ChatCompletionRequestUserMessageContentPart"], schemas["ChatCompletionRequestAssistantMessageContentPart"],
              schemas["ChatCompletionMessageToolCalls"]["items"], chat["tools"]["items"]):
        d.pop("discriminator", None)


def narrowed_openai_spec(path):
    """OpenAI's description with `model` fixed to the served name (else nearly every request is a 404) and
    without the features ferry refuses by name (without_unsupported)."""
    with open(path) as f:
        spec = json.load(f)
    schemas = spec["components"]["schemas"]
    without_unsupported(schemas)
    for name in ("CreateChatCompletionRequest", "CreateCompletionRequest"):
        stack = [schemas[name]]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                props = node.get("properties")
                if isinstance(props, dict) and "model" in props:
                    props["model"] = {"type": "string", "enum": [SERVED_NAME]}
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
    # The streamed responses are described as text/event-stream with the chunk's schema, which schemathesis
    # holds each event's envelope ({"data", "event"}) to, not the JSON in its data: left undescribed, they are
    # not validated here (the openai-client tests read every chunk).
    for op in (spec["paths"]["/chat/completions"]["post"], spec["paths"]["/completions"]["post"]):
        for response in op["responses"].values():
            response.get("content", {}).pop("text/event-stream", None)
    spec["servers"] = [{"url": "http://127.0.0.1/v1"}]
    return spec


CONTEXT = 4096  # tokens: a tool request's Hermes system prompt alone is ~500 of tiny-llama's byte-level tokens


def longer_context_copy(model, workdir):
    """The model folder with max_position_embeddings raised to CONTEXT (random weights: any length runs), its
    other files linked, so that generated conversations fit (request_hooks.py bounds them further)."""
    out = os.path.join(workdir, "model")
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(model):
        dst = os.path.join(out, name)
        if name == "config.json":
            with open(os.path.join(model, name)) as f:
                config = json.load(f)
            config["max_position_embeddings"] = max(CONTEXT, config.get("max_position_embeddings", 0))
            with open(dst, "w") as f:
                json.dump(config, f)
        elif not os.path.exists(dst):
            os.symlink(os.path.abspath(os.path.join(model, name)), dst)
    return out


def drain(stream):
    for line in stream:
        sys.stderr.write("ferry: " + line)


def start_server(ferry, model):
    cmd = [ferry, "serve", "-m", model, "--port", "0", "--host", "127.0.0.1", "--model-name", SERVED_NAME,
           "-c", str(CONTEXT), "-t", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    for line in proc.stdout:
        sys.stderr.write("ferry: " + line)
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            # The server's later output is drained as it comes: a pipe nobody reads fills at 64 KiB, and a server
            # thread writing a line then blocks inside a request.
            threading.Thread(target=drain, args=(proc.stdout,), daemon=True).start()
            return proc, int(m.group(1))
        if time.time() > deadline:
            break
    proc.kill()
    raise SystemExit("ferry serve did not start: " + " ".join(cmd))


def ferry_spec(path, vocab_size):
    """ferry's description with the token-id range of the served model."""
    with open(path) as f:
        spec = json.load(f)
    spec["components"]["schemas"]["DetokenizeRequest"]["properties"]["tokens"]["items"]["maximum"] = vocab_size - 1
    return spec


def run(spec_path, url, checks, max_examples, seed, report_dir, name):
    cmd = [sys.executable, "-m", "schemathesis.cli", "run", spec_path, "--url", url, "--checks", checks,
           "--max-examples", str(max_examples), "--continue-on-failure", "--request-timeout", "30",
           "--seed", str(seed),
           "--report", "junit", "--report-dir", report_dir, "--workers", "1", "--suppress-health-check", "all"]
    print("$ " + " ".join(cmd), flush=True)
    env = dict(os.environ, SCHEMATHESIS_HOOKS="request_hooks",
               PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rc = subprocess.call(cmd, env=env)
    print("%s: schemathesis exit %d" % (name, rc), flush=True)
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ferry")
    ap.add_argument("--model", default=os.path.join(SOURCE, "tests", "fixtures", "models", "tiny-llama"),
                    help="a Hugging Face folder (its config.json gives the vocabulary size)")
    ap.add_argument("--max-examples", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1, help="schemathesis's seed (the same cases every run)")
    ap.add_argument("--report", default=os.path.join(tempfile.gettempdir(), "ferry-schemathesis"))
    a = ap.parse_args()
    if not os.path.exists(OPENAI_SPEC):
        raise SystemExit("no " + OPENAI_SPEC)
    os.makedirs(a.report, exist_ok=True)
    openai_spec = os.path.join(a.report, "openai-narrowed.json")
    with open(openai_spec, "w") as f:
        json.dump(narrowed_openai_spec(OPENAI_SPEC), f)
    with open(os.path.join(a.model, "config.json")) as f:
        vocab_size = json.load(f)["vocab_size"]
    own_spec = os.path.join(a.report, "ferry-routes.json")
    with open(own_spec, "w") as f:
        json.dump(ferry_spec(FERRY_SPEC, vocab_size), f)
    proc, port = start_server(a.ferry, longer_context_copy(a.model, a.report))
    try:
        base = "http://127.0.0.1:%d" % port
        urllib.request.urlopen(base + "/health", timeout=10).read()
        rc_openai = run(openai_spec, base + "/v1", OPENAI_CHECKS, a.max_examples, a.seed, os.path.join(a.report, "openai"),
                        "openai routes")
        rc_ferry = run(own_spec, base, FERRY_CHECKS, a.max_examples, a.seed, os.path.join(a.report, "ferry"), "ferry routes")
        alive = proc.poll() is None
        print("server still running: %s" % alive)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return 0 if rc_openai == 0 and rc_ferry == 0 and alive else 1


if __name__ == "__main__":
    sys.exit(main())
