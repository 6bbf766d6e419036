#!/usr/bin/env bash
# On a CUDA machine with PyTorch installed: configure against PyTorch's own libtorch
# (with CUDA), without OpenCV (image-file datasets are left out), build into
# build-cuda/ and run the tests.
#
# The tests need doctest's header: pass its folder as DOCTEST_DIR (the folder that
# holds doctest/doctest.h), or the build skips them.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
tests=OFF
[ -n "${DOCTEST_DIR:-}" ] && tests=ON
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DFASTCPP_WITH_OPENCV=OFF -DFASTCPP_BUILD_TESTS=$tests ${DOCTEST_DIR:+-DDOCTEST_INCLUDE_DIR="$DOCTEST_DIR"}
ninja -C build-cuda -j "$(nproc)"
if [ "$tests" = ON ]; then
  cd build-cuda && ctest --output-on-failure
fi
