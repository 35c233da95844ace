#!/usr/bin/env python3
"""Validates constrained-decoding outputs against their schemas with the jsonschema package (formats checked).
Input: a JSONL file of {"schema": ..., "output": "<generated text>"} lines (test_grammar writes it).
Exit status 0 when every output parses and validates; prints each failure on one line."""
import json
import sys

import jsonschema


def main():
    failures = 0
    total = 0
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            case = json.loads(line)
            total += 1
            try:
                value = json.loads(case["output"])
                cls = jsonschema.validators.validator_for(case["schema"])
                cls(case["schema"], format_checker=cls.FORMAT_CHECKER).validate(value)
            except Exception as e:  # noqa: BLE001 (report every kind of failure)
                failures += 1
                print(f"FAIL {json.dumps(case['schema'])[:200]} output={case['output'][:200]!r}: {str(e)[:200]}")
    print(f"{total - failures}/{total} outputs valid")
    sys.exit(1 if failures or total == 0 else 0)


if __name__ == "__main__":
    main()
