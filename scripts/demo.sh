#!/usr/bin/env bash
# The main job on a fresh machine: install, build, and train the Fashion-MNIST example.
# Arguments go to the example (e.g. --epochs 2).
set -euo pipefail
source "$(dirname "$0")/command_line.sh"
for arg in "$@"; do  # the rest goes to the example, which answers --help once it is built
  case "$arg" in
    -h | --help) script_usage; echo "build/examples/fashion_mnist --help lists the example's flags."; exit 0 ;;
    --version) fastcpp_version; exit 0 ;;
  esac
done
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh fashion_mnist fastcpp-launch  # the example, the library and the launcher (all that cmake --install takes): no tests
cd build && ./examples/fashion_mnist "$@"
