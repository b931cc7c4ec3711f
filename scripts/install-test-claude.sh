#!/usr/bin/env bash
# Installs the Claude Code CLI that the tier-3 tests run, into a cache folder outside the
# repository (one folder per version), and prints the native binary's path (the value for
# BOTVISOR_TEST_CLAUDE_BIN). The version: $BOTVISOR_TEST_CLAUDE_VERSION, default the main pinned
# one (docs/cli-versions.md).
#
#   export BOTVISOR_TEST_CLAUDE_BIN="$(scripts/install-test-claude.sh)"
#   export BOTVISOR_TEST_CLAUDE_BIN="$(BOTVISOR_TEST_CLAUDE_VERSION=2.1.332 scripts/install-test-claude.sh)"
#
# Cache folder: $BOTVISOR_TEST_CACHE, default ~/.cache/botvisor-test. Needs Node.js and npm.
set -euo pipefail
version="${BOTVISOR_TEST_CLAUDE_VERSION:-2.1.328}"
cache="${BOTVISOR_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/botvisor-test}"
prefix="$cache/claude-$version"
bin="$prefix/node_modules/@anthropic-ai/claude-code-linux-x64/claude"
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  Linux-aarch64) bin="$prefix/node_modules/@anthropic-ai/claude-code-linux-arm64/claude" ;;
  Darwin-arm64) bin="$prefix/node_modules/@anthropic-ai/claude-code-darwin-arm64/claude" ;;
  Darwin-x86_64) bin="$prefix/node_modules/@anthropic-ai/claude-code-darwin-x64/claude" ;;
esac
if [ ! -x "$bin" ]; then
  mkdir -p "$prefix"
  echo "installing @anthropic-ai/claude-code@$version into $prefix" >&2
  npm install --no-audit --no-fund --prefix "$prefix" "@anthropic-ai/claude-code@$version" >&2
fi
if [ ! -x "$bin" ]; then
  echo "error: $bin was not installed" >&2
  exit 1
fi
"$bin" --version >&2
echo "$bin"
