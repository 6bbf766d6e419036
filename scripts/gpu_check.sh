#!/usr/bin/env bash
# The GPU check, one command on a GPU machine (PyTorch 2.11 + CUDA 13 in its python3, no
# OpenCV, no doctest package): builds with every core, runs the whole test suite with the
# GPU tests, runs the GPU benchmarks, and writes the logs and one results table to OUT.
#
#   scripts/gpu_bundle.sh                         # once, on a machine with Debian's packages
#   scripts/gpu_check.sh OUT [build] [test] [bench]   # on the GPU machine (default: all three)
#
# Files in OUT: build.log, tests.log, bench.log, results.md. Environment: FASTCPP_PYTHON
# (default python3), FASTCPP_BUNDLE (default .gpu_bundle), FASTCPP_GPU_BUILD (default
# build-gpu), FASTCPP_BENCH_STEPS (timed steps per benchmark cell, default 20).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu_check.sh OUT [build] [test] [bench]}
shift
stages=${*:-build test bench}
mkdir -p "$out"
out=$(realpath "$out")
python=${FASTCPP_PYTHON:-python3}
bundle=$(realpath "${FASTCPP_BUNDLE:-.gpu_bundle}")
build=${FASTCPP_GPU_BUILD:-build-gpu}
steps=${FASTCPP_BENCH_STEPS:-20}
results=$out/results.md
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}  # torch's CMake asks; we compile no kernels

now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN{printf "%.0f", a - b}'; }
row() { echo "| $1 | $2 |" >> "$results"; }

{
  echo "# fastcpp GPU check, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "| what | result |"
  echo "|---|---|"
} > "$results"
row device "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
row torch "$("$python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version(), "NCCL", ".".join(map(str, torch.cuda.nccl.version())))' 2>&1 | tail -1)"
row cores "$(nproc)"

if [[ " $stages " == *" build "* ]]; then
  [ -d "$bundle/include" ] || { echo "gpu_check: no $bundle: run scripts/gpu_bundle.sh first (and carry it)" >&2; exit 1; }
  zlib=()
  if [ ! -f /usr/include/zlib.h ]; then  # headers from the bundle, the system's libz.so.1
    libz=$(ldconfig -p | awk '/libz\.so\.1 .*x86-64/ {print $NF; exit}')
    zlib=(-DZLIB_INCLUDE_DIR="$bundle/include" -DZLIB_LIBRARY="$libz")
  fi
  start=$(now)
  { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFASTCPP_PYTHON="$(command -v "$python")" \
      -DFASTCPP_WITH_OPENCV=OFF -DFASTCPP_DOCTEST_DIR="$bundle/include" -DFASTCPP_GLOO_DIR="$bundle/include" \
      -DFASTCPP_FASTAI_FIXTURES="$bundle/fastai_fixtures" \
      "${zlib[@]}" && ninja -C "$build" -j "$(nproc)"; } > "$out/build.log" 2>&1
  status=$?
  row "configure summary" "$(grep -o 'fastcpp: libtorch.*' "$out/build.log" | head -1)"
  row build "$([ $status -eq 0 ] && echo ok || echo FAILED) in $(since "$start") s on $(nproc) cores (log: build.log)"
  [ $status -eq 0 ] || { tail -40 "$out/build.log"; exit 1; }
fi

if [[ " $stages " == *" test "* ]]; then
  export FASTCPP_FASHION_MNIST="$bundle/data/fashion-mnist"  # the install test trains on it
  start=$(now)
  # Not the fuzzing and multi-host entries: CPU-only, checked by CI, minutes of device time.
  (cd "$build" && ctest --output-on-failure -j 4 --timeout 400 -E '^(fuzz_|multinode$)') > "$out/tests.log" 2>&1
  row tests "$(grep -E 'tests passed|tests failed' "$out/tests.log" | tail -1) in $(since "$start") s (log: tests.log)"
  row "gpu suite" "$(grep -A3 -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: gpu ' "$out/tests.log" | head -1 | sed 's/  */ /g')"
  grep -E '\(Failed\)|\(Skipped\)|\(Timeout\)|\(SEGFAULT\)' "$out/tests.log" | while read -r line; do row "not passed" "$line"; done
fi

if [[ " $stages " == *" bench "* ]]; then
  start=$(now)
  {
    echo "## Training step, fastcpp Learner vs PyTorch eager ($steps timed steps per cell)"
    bench/gpu_train_step.sh "$build" "$python" -- --steps "$steps"
    echo
    echo "## DDP at world size 1 on NCCL"
    bench/gpu_ddp_overhead.sh "$build"
    echo
    echo "## to_parallel"
    bench/gpu_parallel.sh "$build"
    echo
    echo "## Fashion-MNIST example vs the PyTorch peer (5 epochs, both channels-last, then both contiguous)"
    for layout in channels-last contiguous; do
      bench/fashion_mnist_vs_python.sh --epochs 5 --data "$bundle/data/fashion-mnist" --build "$build" --python "$python" \
        --memory-format "$layout"
    done
  } > "$out/bench.log" 2>&1
  row benchmarks "done in $(since "$start") s (log: bench.log)"
  { echo; grep -E '^\|' "$out/bench.log"; grep -E 'overhead|to_parallel .*x the|fp16 / fp32|channels-last:|slowest cell|time ratio|accuracy' "$out/bench.log"; } >> "$results"
fi

cat "$results"
