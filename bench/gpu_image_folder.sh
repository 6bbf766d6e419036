#!/usr/bin/env bash
# Does training from an image folder keep the GPU fed? On a JPEG folder made here
# (bench/make_image_folders.py: ~500x375 photographs, quality 90), ResNet-50 fp16 and
# ResNet-18 bf16, channels-last, batch 256, RandomResizedCrop 224 + flip, the same run:
#   fastcpp, the CPU pipeline (a loader thread per core)     bench_image_folder --source cpu
#   fastcpp, JPEGs decoded and cropped on the GPU            --source device
#   fastcpp, batches resident on the GPU (the ceiling)       --source resident
#   PyTorch's DataLoader (a worker per core, pinned memory)  image_folder_peer.py --source dataloader
#   PyTorch, torchvision's batched GPU decode                --source gpu-decode
# and the decode + crop rates alone, per CPU core and per GPU. Then the goal lines.
#
#   bench/gpu_image_folder.sh [--build build] [--python python3] [--folder /tmp/fastcpp_image_folder]
# Environment: FASTCPP_IMAGES (JPEGs to make, default 20000), FASTCPP_IMAGE_STEPS (timed
# steps a cell, default 30, after 5 warm-up steps).
set -uo pipefail
source "$(dirname "$0")/../scripts/command_line.sh"
here=$(cd "$(dirname "$0")" && pwd)
build=build python=python3 folder=/tmp/fastcpp_image_folder
while [ $# -gt 0 ]; do
  case "$1" in
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
    --build) need_value "$@"; build=$2; shift 2 ;;
    --python) need_value "$@"; python=$2; shift 2 ;;
    --folder) need_value "$@"; folder=$2; shift 2 ;;
    *) other_flag "$@" ;;
  esac
done
steps=${FASTCPP_IMAGE_STEPS:-30}
cores=$(nproc)
if [ ! -d "$folder/photos" ]; then
  started=$(date +%s)
  "$python" "$here/make_image_folders.py" "$folder" --photos "${FASTCPP_IMAGES:-20000}" --small 0 --workers "$cores" ||
    { echo "gpu_image_folder: could not make the folder"; exit 1; }
  echo "made $(find "$folder/photos" -name '*.jpg' | wc -l) JPEGs in $(( $(date +%s) - started )) s"
fi
results=$(mktemp)
trap 'rm -f "$results"' EXIT
common=(--bs 256 --warmup 5 --steps "$steps" --memory-format channels-last)
for cell in "resnet50 fp16" "resnet18 bf16"; do
  read -r arch precision <<< "$cell"
  for source in cpu device resident; do
    extra=()
    [ "$source" = device ] && extra=(--decode-rate)
    "$build/bench/bench_image_folder" "$folder/photos" --source "$source" --arch "$arch" --precision "$precision" \
      --workers "$cores" "${common[@]}" "${extra[@]}" | tee -a "$results"
  done
  for source in dataloader gpu-decode; do
    "$python" "$here/image_folder_peer.py" "$folder/photos" --source "$source" --arch "$arch" --precision "$precision" \
      --workers "$cores" "${common[@]}" | tee -a "$results"
  done
done
# The goals: fastcpp's best against the ceiling and against PyTorch's best, per cell.
awk '
  $2 ~ /^(cpu|device|resident|dataloader|gpu-decode)$/ && $7 == "img/s" {
    key = $3 " " $4; rate[$1 " " $2 " " key] = $6; keys[key] = 1 }
  END {
    for (key in keys) {
      best = rate["fastcpp cpu " key] > rate["fastcpp device " key] ? rate["fastcpp cpu " key] : rate["fastcpp device " key]
      peer = rate["pytorch dataloader " key] > rate["pytorch gpu-decode " key] ? rate["pytorch dataloader " key] : rate["pytorch gpu-decode " key]
      split(key, k, " ")
      printf "| %s %s channels-last | %s | %s | %s | %s | %s |\n", k[1], k[2], rate["fastcpp cpu " key], rate["fastcpp device " key],
             rate["fastcpp resident " key], rate["pytorch dataloader " key], rate["pytorch gpu-decode " key]
      goal = k[1] == "resnet50" ? 0.9 : 0.75
      if (rate["fastcpp resident " key] > 0)
        printf "image folder %s %s channels-last, fastcpp best / resident ceiling: %.3fx (goal: >= %.2fx)\n", k[1], k[2], best / rate["fastcpp resident " key], goal
      if (k[1] == "resnet18" && peer > 0)
        printf "image folder %s %s channels-last, fastcpp best / PyTorch best: %.3fx (goal: >= 1.5x)\n", k[1], k[2], best / peer
    }
  }' "$results" | sort -r | { echo "| cell | fastcpp CPU pipeline | fastcpp GPU decode | resident ceiling | PyTorch DataLoader | PyTorch GPU decode |"
                           echo "|---|---|---|---|---|---|"; cat; }
grep -E "per CPU core|per GPU" "$results" | sort -u
