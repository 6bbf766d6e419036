#!/usr/bin/env bash
# The soak: repeated fit / checkpoint / cancel / resume / save / load / export / predict
# cycles from a fixed seed on the CPU for MINUTES (default 60), watching the process's
# memory (RSS), file descriptors and threads (tests/soak.cpp). Not part of the tests.
# Prints a line per minute and a summary; exits 1 on a leak or a cycle that differs.
#   scripts/soak.sh [MINUTES]
set -euo pipefail
source "$(dirname "$0")/command_line.sh"
positional_only "$@"
cd "$(dirname "$0")/.."
scripts/build.sh soak
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
build/tests/soak "${1:-60}" "$work"
