#!/usr/bin/env bash
# Configures (Release, ninja, ccache, precompiled torch header) and builds everything
# into build/. Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" > build.log 2>&1 || { cat build.log; exit 1; }
ninja -C build
