#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build, test and benchmark fastcpp.
# Skips apt entirely when everything is already there.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache
  libtorch-dev libgloo-dev zlib1g-dev
  libopencv-dev
  doctest-dev
  dataset-fashion-mnist
  python3-torch          # the Python peers of the benchmarks and the test-fixture generator
  python3-torchvision python3-skimage python3-pil   # the image-loader benchmark's peer and photos
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
