#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build, test and benchmark fastcpp: the
# build tools and C++ libraries from apt (skipped when all are there), then libtorch
# (PyTorch 2.11's CUDA wheel) and the Python peers into .venv (scripts/setup_python.sh).
# The CUDA 13 toolkit (nvcc) is expected under /usr/local/cuda or $CUDA_HOME: torch's
# CMake package configures CUDA through it, even on a machine without a GPU.
set -euo pipefail
source "$(dirname "$0")/command_line.sh"
positional_only "$@"
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build ccache zlib1g-dev
  libjpeg-dev libpng-dev  # the JPEG and PNG decoders of vision/decoders.h
  libgloo-dev            # only its headers: the wheel's libtorch has Gloo built in but ships none
  libopencv-dev
  doctest-dev
  libcli11-dev           # the programs' command line (header-only)
  clang libclang-rt-14-dev  # libFuzzer, for tests/fuzz
  iproute2 ethtool          # test hosts in network namespaces, for tests/multinode.sh
  dataset-fashion-mnist
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
scripts/setup_python.sh
