#!/usr/bin/env bash
# Gathers, into .gpu_bundle/ (ignored by git), what a GPU machine without Debian's
# packages needs to build and check fastcpp with scripts/gpu_check.sh: doctest's single
# header, CLI11's headers, Gloo's headers (c10d's Gloo backend includes them; the torch wheel ships none),
# zlib's headers, the Fashion-MNIST files, and the fixtures of the fastai suite (made
# here with the venv's fastai, which the GPU machines lack). About 41 MB.
set -euo pipefail
source "$(dirname "$0")/command_line.sh"
positional_only "$@"
cd "$(dirname "$0")/.."
bundle=.gpu_bundle
rm -rf "$bundle"
mkdir -p "$bundle/include/doctest" "$bundle/data/fashion-mnist"
cp /usr/include/doctest/doctest.h "$bundle/include/doctest/"
cp -r /usr/include/gloo /usr/include/CLI "$bundle/include/"
cp /usr/include/zlib.h /usr/include/zconf.h "$bundle/include/"
cp /usr/share/datasets/fashion-mnist/*.gz "$bundle/data/fashion-mnist/"
.venv/bin/python tests/fixtures/fastai_reference.py "$bundle/fastai_fixtures"
# fastai's U-Net weights (165 MB) exceed what a device call carries; that case compares
# CPU forwards only, and CI runs it. The fastai suite skips a fixture listed here.
rm "$bundle/fastai_fixtures/unet_resnet34.pth"
echo "unet_resnet34.pth" > "$bundle/fastai_fixtures/left_out.txt"
du -sh "$bundle"
