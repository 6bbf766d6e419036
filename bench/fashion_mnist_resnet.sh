#!/usr/bin/env bash
# The vision accuracy figure: ResNet-18 (CIFAR stem, width 32) trained from scratch on
# Fashion-MNIST exported as a PNG folder, pad-crop-flip augmentation, then test-time
# augmentation. About 45 min on 2 cores with bf16 (needs AVX512-BF16 to be fast).
#
#   bench/fashion_mnist_resnet.sh [--epochs 30] [--width 32] [--folder /tmp/fashion_mnist_folder]
#
# Prints the epoch table, the final test accuracy, the accuracy with TTA and the wall time;
# the model and the plots land in build/.
set -euo pipefail
source "$(dirname "$0")/../scripts/command_line.sh"
cd "$(dirname "$0")/.."
epochs=30
width=32
folder=/tmp/fashion_mnist_folder
while [ $# -gt 0 ]; do
  case "$1" in
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
    --epochs) need_count "$@"; epochs=$2; shift 2 ;;
    --width) need_count "$@"; width=$2; shift 2 ;;
    --folder) need_value "$@"; folder=$2; shift 2 ;;
    *) other_flag "$@" ;;
  esac
done
folder=$(realpath -m "$folder")
[ -x build/examples/image_folder ] || scripts/build.sh image_folder export_image_folder
[ -d "$folder/valid" ] || build/examples/export_image_folder fashion-mnist "$folder"

start=$(date +%s)
(cd build && examples/image_folder "$folder" --arch resnet18 --size 28 --aug pad-crop \
  --channels 1 --stem cifar --width "$width" --epochs "$epochs" --lr 1e-2 --bs 128 --threads "$(nproc)" \
  --precision bf16 --memory-format channels-last --tta 4)
echo "wall time: $(( $(date +%s) - start )) s"
