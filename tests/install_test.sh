#!/usr/bin/env bash
# The installed package as a user's project sees it: installs fastcpp into a temporary
# prefix, checks that no installed header or CMake file points back into the source or
# build tree, builds a copy of templates/standalone against the prefix, and trains it for
# one epoch.
#   tests/install_test.sh BUILD_DIR SOURCE_DIR PYTHON
# The data: $FASTCPP_FASHION_MNIST, default Debian's /usr/share/datasets/fashion-mnist
# (vision::fashion_mnist_dir(), which the template's default --data is).
set -euo pipefail
build=$(realpath "$1")
source=$(realpath "$2")
python=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
# Text files only: the library's own strings (__FILE__ in messages) name where it was compiled.
if grep -rlI -e "$source" -e "$build" "$tmp/prefix"; then
  echo "install: the files above point back into $source or $build"
  exit 1
fi
cp -r "$source/templates/standalone" "$tmp/app"
torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S "$tmp/app" -B "$tmp/app/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$tmp/prefix;$torch_prefix" > "$tmp/configure.log" || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/app/build" > "$tmp/build.log" || { cat "$tmp/build.log"; exit 1; }
"$tmp/app/build/train" --epochs 1 | tee "$tmp/train.log"  # the data: vision::fashion_mnist_dir()
grep -qE "final accuracy: 0\.[7-9]" "$tmp/train.log"
