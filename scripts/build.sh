#!/usr/bin/env bash
# Configures (Release, ninja, ccache, precompiled torch header) into build/ and builds the
# targets given (default: everything); other flags go to ninja (-j1, -v). Extra configure
# options: $FASTCPP_CMAKE_ARGS.
#   scripts/build.sh                  # every library, example, benchmark and test
#   scripts/build.sh fashion_mnist    # only what the demo needs
set -euo pipefail
source "$(dirname "$0")/command_line.sh"
help_or_version "$@"
cd "$(dirname "$0")/.."
# shellcheck disable=SC2086  # the options are words
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${FASTCPP_CMAKE_ARGS:-} > build.log 2>&1 || { cat build.log; exit 1; }
ninja -C build "$@"
