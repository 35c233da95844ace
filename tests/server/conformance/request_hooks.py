"""schemathesis hooks for run_schemathesis.py: keep generated prompts inside the served model's context, and
make the cross-field rules OpenAI's API enforces but its description cannot state hold (a named tool_choice
names one of the tools).

The served fixture model has a 4096-token context (run_schemathesis.py), and a prompt longer than that is a 400
(context_length_exceeded, as at OpenAI). OpenAI's description bounds no text length, so schemathesis builds
conversations of thousands of tokens; these hooks shorten what reaches the prompt (message texts, tool
descriptions and parameter schemas, completion prompts) before a request is sent. Everything else in the
body is left as generated.
"""
import json

import schemathesis

TEXT = 24          # characters of any text in a message or a tool (a character is up to 4 byte tokens)
MESSAGES = 4       # messages of a conversation
TOOLS = 2          # tools offered
PARAMETERS = 160   # bytes of a tool's parameter schema (JSON) before it is replaced by {"type": "object"}
PROMPT_TEXT = 64   # characters of a completions prompt
PROMPT_TOKENS = 200


def short(text, n):
    return text[:n] if isinstance(text, str) else text


def shortened(value, depth=0):
    """Every string inside value cut to TEXT characters and every list to 2 items (schema constraints in these
    subtrees are enums and small minimums, which both keep)."""
    if isinstance(value, str):
        return value[:TEXT]
    if isinstance(value, list):
        return [shortened(v, depth + 1) for v in value[:2]]
    if isinstance(value, dict):
        return {k: shortened(v, depth + 1) for k, v in value.items()}
    return value


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    """Every phase's requests (the coverage phase's too, which map hooks do not see)."""
    if isinstance(case.body, dict):
        case.body = shorter_body(case.body)


def shorter_body(body):
    messages = body.get("messages")
    if isinstance(messages, list):
        body["messages"] = [shortened(m) for m in messages[:MESSAGES]]
    tools = body.get("tools")
    if isinstance(tools, list):
        body["tools"] = [shortened(t) for t in tools[:TOOLS]]
        for t in body["tools"]:
            fn = t.get("function") if isinstance(t, dict) else None
            if isinstance(fn, dict) and "parameters" in fn and len(json.dumps(fn["parameters"])) > PARAMETERS:
                fn["parameters"] = {"type": "object"}
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function":
        names = [t["function"]["name"] for t in body.get("tools") or [] if isinstance(t, dict)
                 and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)]
        if names and isinstance(choice.get("function"), dict):
            choice["function"]["name"] = names[0]
        else:
            body.pop("tool_choice")
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        body["prompt"] = short(prompt, PROMPT_TEXT)
    elif isinstance(prompt, list):
        for i, p in enumerate(prompt):
            if isinstance(p, str):
                prompt[i] = short(p, PROMPT_TEXT)
            elif isinstance(p, list):
                del p[PROMPT_TOKENS:]
        if prompt and all(isinstance(t, (int, float)) for t in prompt):
            del prompt[PROMPT_TOKENS:]
    return body
