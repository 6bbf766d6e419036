#!/usr/bin/env bash
# The tests on a fresh machine: install, build, and run every test suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
cd build && ctest --output-on-failure -j2
