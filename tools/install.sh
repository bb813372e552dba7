#!/bin/sh
# Install everything latentd needs on a fresh Debian 12 machine, then build it.
#   tools/install.sh            apt packages + npm packages + release build in build/
# Safe to run again: apt and npm skip what is already there, the build is incremental.
set -eu
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then
    SUDO=sudo
fi

# Build tools and the libraries latentd links (see README "Dependencies"); postgresql is
# the server e2e_cluster_pg starts privately (latentd itself only needs libpq); libpcre2-dev
# gives the regex string nodes Python re's syntax; python3-websocket is what ComfyUI's own
# script_examples import (e2e_script_examples runs them unchanged).
PACKAGES="build-essential cmake ninja-build pkg-config git
  libmicrohttpd-dev libwebsockets-dev libcjson-dev libsqlite3-dev libpng-dev
  libjpeg62-turbo-dev libopenblas-dev libdnnl-dev chromium wrk
  libpq-dev postgresql libpcre2-dev python3-websocket"

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $PACKAGES >/dev/null
# Node.js may come from another repository (with npm bundled): only add Debian's if absent.
if ! command -v npm >/dev/null 2>&1; then
    $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi

# JavaScript: the UI's litegraph.js, and the test tools (ws, playwright-core).
for dir in web tests; do
    if [ -f "$dir/package-lock.json" ]; then
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    elif [ -f "$dir/package.json" ]; then
        (cd "$dir" && npm install --no-audit --no-fund --loglevel=error)
    fi
done

BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} \
    ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j"$(nproc)"
