#!/usr/bin/env bash
# Python packages the end-to-end tests use (the official `openai` client, jsonschema, and schemathesis for the
# conformance run against OpenAI's API description; from PyPI) in a venv inside the
# build folder: scripts/install_test_deps.sh [BUILD_DIR] makes BUILD_DIR/.venv-test (default build/) when
# missing. Tests that need it skip with a message when it is absent (e.g. no network).
set -euo pipefail

build_dir="${1:-build}"
venv="$build_dir/.venv-test"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import openai, jsonschema, schemathesis" 2>/dev/null; then
  exit 0
fi
mkdir -p "$build_dir"
echo "ferry: creating $venv (pip install openai jsonschema rfc3339-validator schemathesis)"
if ! python3 -m venv "$venv" || ! "$venv/bin/pip" install -q --disable-pip-version-check openai jsonschema rfc3339-validator \
    schemathesis==4.32.5; then
  echo "ferry: could not set up $venv; the openai client tests will be skipped" >&2
  rm -rf "$venv"
  exit 0
fi
