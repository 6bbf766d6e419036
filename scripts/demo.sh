#!/usr/bin/env bash
# The main job on a fresh machine: install, build, and train the Fashion-MNIST example.
# Arguments go to the example (e.g. --epochs 2).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh fashion_mnist  # only the example and the library: the tests are not needed
cd build && ./examples/fashion_mnist "$@"
