#!/usr/bin/env bash
# Installs the OpenAI Codex CLI that the tier-3 tests run, into a cache folder outside the
# repository (one folder per version), and prints the path of its NATIVE binary (the value for
# BOTVISOR_TEST_CODEX_BIN): botvisor starts that binary directly, never the Node wrapper
# (codex-facts.md, "Install and binary"). The version: $BOTVISOR_TEST_CODEX_VERSION, default the
# pinned one (docs/cli-versions.md).
#
#   export BOTVISOR_TEST_CODEX_BIN="$(scripts/install-test-codex.sh)"
#
# Cache folder: $BOTVISOR_TEST_CACHE, default ~/.cache/botvisor-test. Needs Node.js and npm.
set -euo pipefail
version="${BOTVISOR_TEST_CODEX_VERSION:-0.171.0}"
cache="${BOTVISOR_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/botvisor-test}"
prefix="$cache/codex-$version"
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) platform="linux-x64" triple="x86_64-unknown-linux-musl" ;;
  Linux-aarch64) platform="linux-arm64" triple="aarch64-unknown-linux-musl" ;;
  Darwin-arm64) platform="darwin-arm64" triple="aarch64-apple-darwin" ;;
  Darwin-x86_64) platform="darwin-x64" triple="x86_64-apple-darwin" ;;
  *) echo "error: no Codex build for $(uname -s)-$(uname -m)" >&2; exit 1 ;;
esac
bin="$prefix/node_modules/@openai/codex-$platform/vendor/$triple/bin/codex"
if [ ! -x "$bin" ]; then
  mkdir -p "$prefix"
  echo "installing @openai/codex@$version into $prefix" >&2
  npm install --no-audit --no-fund --prefix "$prefix" "@openai/codex@$version" >&2
fi
if [ ! -x "$bin" ]; then
  echo "error: $bin was not installed (npm left out the optional @openai/codex-$platform?)" >&2
  exit 1
fi
"$bin" --version >&2
echo "$bin"
