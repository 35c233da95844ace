#!/usr/bin/env python3
"""Writes tests/grammar/data/schema_corpus.jsonl: JSON schemas (one a line) for the constrained-decoding tests,
from a seeded generator (stdlib only; run again to regenerate the same file): nested objects and arrays,
optional and required properties, enums/consts, patterns, formats, numeric bounds, anyOf/oneOf, $ref/$defs
and recursive definitions, plus a few hand-written agent-style schemas."""
import json
import os
import random

PATTERNS = ["^[a-z]{2,8}$", "^[A-Z][a-z]+( [A-Z][a-z]+)?$", "^\\d{3}-\\d{4}$", "^(foo|bar|baz)+$",
            "^[0-9a-f]{6}$", "^v\\d+\\.\\d+(\\.\\d+)?$", "^[^\\s\"]{1,5}$", "^\\w+@\\w+\\.com$"]
FORMATS = ["date-time", "date", "time", "uuid", "email"]
WORDS = ["id", "name", "tags", "score", "items", "child", "value", "kind", "meta", "when", "owner", "count",
         "flag", "notes", "price", "unicode é", "quote\"d", "a/b"]


def leaf(rng):
    k = rng.randrange(12)
    if k == 0:
        return {"type": "string"}
    if k == 1:
        return {"type": "string", "pattern": rng.choice(PATTERNS)}
    if k == 2:
        return {"type": "string", "format": rng.choice(FORMATS)}
    if k == 3:
        return {"type": "string", "minLength": rng.randrange(3), "maxLength": rng.randrange(3, 8)}
    if k == 4:
        lo = rng.randrange(-50, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.choice([0, 1, 9, 99, 12345])}
    if k == 5:
        return {"type": "integer", "exclusiveMinimum": rng.randrange(-5, 5)}
    if k == 6:
        return {"type": "number", "minimum": rng.randrange(-10, 1), "maximum": rng.randrange(1, 100)}
    if k == 7:
        return {"type": "number"}
    if k == 8:
        return {"type": "boolean"}
    if k == 9:
        return {"enum": rng.sample(["red", "green", "blue", 1, 2.5, None, True, "a\"b"], rng.randrange(1, 4))}
    if k == 10:
        return {"const": rng.choice(["fixed", 42, False, None])}
    return {"type": ["string", "null"]}


def schema(rng, depth):
    if depth <= 0 or rng.random() < 0.3:
        return leaf(rng)
    k = rng.randrange(4)
    if k == 0 or k == 1:
        names = rng.sample(WORDS, rng.randrange(1, 5))
        props = {n: schema(rng, depth - 1) for n in names}
        out = {"type": "object", "properties": props,
               "required": [n for n in names if rng.random() < 0.6], "additionalProperties": False}
        return out
    if k == 2:
        out = {"type": "array", "items": schema(rng, depth - 1)}
        lo = rng.randrange(3)
        out["minItems"] = lo
        out["maxItems"] = lo + rng.randrange(4)
        return out
    inner = schema(rng, depth - 1)
    if "null" in json.dumps(inner) or "anyOf" in inner or "oneOf" in inner or "const" in inner:
        return {"anyOf": [inner, {"type": "null"}]}  # may overlap with null: anyOf
    return {rng.choice(["anyOf", "oneOf"]): [inner, {"type": "null"}]}


def recursive(rng):
    node = {"type": "object", "properties": {"value": leaf(rng),
            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
            "required": ["value"], "additionalProperties": False}
    return {"$defs": {"node": node}, "$ref": "#/$defs/node"}


HAND = [
    {"type": "object", "properties": {"location": {"type": "string"},
     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["location", "unit"],
     "additionalProperties": False},
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0,
     "maximum": 150}, "email": {"type": "string", "format": "email"}}, "required": ["name", "age"]},
    {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"},
     "at": {"type": "string", "format": "date-time"}}, "required": ["id", "at"]}, "minItems": 1, "maxItems": 3},
    {"definitions": {"expr": {"anyOf": [{"type": "integer"}, {"type": "object", "properties": {
     "op": {"enum": ["+", "-", "*"]}, "args": {"type": "array", "items": {"$ref": "#/definitions/expr"},
     "minItems": 2, "maxItems": 2}}, "required": ["op", "args"], "additionalProperties": False}]}},
     "$ref": "#/definitions/expr"},
    {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]},
     "n": {"type": "integer"}}, "required": ["n", "next"], "additionalProperties": False},
    {"type": "object", "additionalProperties": {"type": "number"}},
    {"type": "object"},
    {},
    {"type": "string", "pattern": "^[A-Z]{3}-\\d{2,4}$"},
    {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
]


def main():
    rng = random.Random(29)
    out = list(HAND)
    while len(out) < 90:
        out.append(schema(rng, rng.randrange(1, 5)))
    while len(out) < 120:
        out.append(recursive(rng))
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "grammar", "data", "schema_corpus.jsonl")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for s in out:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
    print(f"wrote {len(out)} schemas to {os.path.normpath(path)}")


if __name__ == "__main__":
    main()
