#!/usr/bin/env bash
# The GPU check, one command on a GPU machine (PyTorch 2.11 + CUDA 13 in its python3, no
# OpenCV's C++ libraries, no doctest package: scripts/gpu_bundle.sh carries them): builds with every core, runs the whole test suite with the
# GPU tests, runs the GPU benchmarks, and writes the logs and one results table to OUT.
#
#   scripts/gpu_bundle.sh                         # once, on a machine with Debian's packages
#   scripts/gpu_check.sh OUT [build] [test] [bench] [step]   # on the GPU machine (default: all)
#   scripts/gpu_check.sh OUT goals                # every goal figure in one call
#
# A device call is at most 10 minutes: build+test, bench and step (the Learner against
# eager, 16 cells x 3 alternating rounds) fit one call each. Where the device time is
# shorter than three such calls, `goals` does it in one: only the targets the GPU runs,
# only the GPU test entries (CI runs the rest), the benchmarks' goal figures (no
# profiles of to_parallel), then the step for what is left of the call; a second call,
# `step` with FASTCPP_STEP_ARGS, takes the cells it did not reach. The bench steps run
# in the order of what their figures decide, each with its own time limit, and add
# their lines to results.md as they end.
# Files in OUT: build.log, tests.log, bench.log, results.md and traces.tgz (a device call
# brings back 8 files at most: the rest lives in a scratch folder). Environment: FASTCPP_PYTHON
# (default python3), FASTCPP_BUNDLE (default .gpu_bundle), FASTCPP_GPU_BUILD (default
# build-gpu), FASTCPP_BENCH_STEPS (timed steps per benchmark cell, default 20),
# FASTCPP_CALL_SECONDS (default 530: the tests' and every bench step's limit shrinks to
# what is left of them, so that the call ends within 9 minutes), FASTCPP_STEP_ARGS
# (more options of the step's cells, e.g. "--arch resnet50": one architecture a call),
# FASTCPP_SKIP_STEPS (an extended regular expression: the bench steps whose titles match
# are skipped, e.g. the figures of code that has not changed since the last run).
#
# A device machine is handed back soon after a call: a later call may find a fresh one.
# Then bench and step build first (about 3 minutes of the call).
set -uo pipefail
source "$(dirname "$0")/command_line.sh"
positional_only "$@"
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu_check.sh OUT [build] [test] [bench] [step]}
shift
stages=${*:-build test bench step}
goals=0
if [ "$stages" = goals ]; then
  goals=1
  stages="build test bench step"
fi
call_start=$(date +%s.%N)
call_seconds=${FASTCPP_CALL_SECONDS:-530}
mkdir -p "$out"
out=$(realpath "$out")
python=${FASTCPP_PYTHON:-python3}
bundle=$(realpath "${FASTCPP_BUNDLE:-.gpu_bundle}")
build=$(realpath -m "${FASTCPP_GPU_BUILD:-build-gpu}")
steps=${FASTCPP_BENCH_STEPS:-20}
if [[ " $stages " != *" build "* && (" $stages " == *" bench "* || " $stages " == *" step "*) ]] &&
   [ ! -x "$build/bench/bench_train_step" ]; then
  echo "gpu_check: no $build on this machine (a fresh one): building first" >&2
  stages="build $stages"
  auto_build=1
fi
results=$out/results.md
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}  # torch's CMake asks; we compile no kernels
# OpenCV's core and imgproc, libjpeg, libpng and nvJPEG, for the image pipeline
# (gpu_bundle.sh): unpacked once, found by every CMake project here (the install test's
# too) through their <Package>_ROOT, and by the programs at run time.
libs=$bundle/image_libs
if [ -f "$bundle/image_libs.tar.xz" ] && [ ! -f "$libs/OpenCVConfig.cmake" ]; then
  tar xJf "$bundle/image_libs.tar.xz" -C "$bundle"
fi
if [ -f "$libs/OpenCVConfig.cmake" ]; then
  export OpenCV_ROOT=$libs JPEG_ROOT=$libs PNG_ROOT=$libs FASTCPP_NVJPEG_DIR=$libs
  export LD_LIBRARY_PATH="$libs/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" -v digits="${2:-0}" 'BEGIN{printf "%." digits "f", a - b}'; }  # seconds [decimals]
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
  for header in doctest/doctest.h CLI/CLI.hpp gloo/algorithm.h zlib.h; do  # a bundle older than a dependency
    [ -f "$bundle/include/$header" ] ||
      { echo "gpu_check: $bundle/include/$header missing: run scripts/gpu_bundle.sh again (and carry it)" >&2; exit 1; }
  done
  zlib=()
  if [ ! -f /usr/include/zlib.h ]; then  # headers from the bundle, the system's libz.so.1
    libz=$(ldconfig -p | awk '/libz\.so\.1 .*x86-64/ {print $NF; exit}')
    zlib=(-DZLIB_INCLUDE_DIR="$bundle/include" -DZLIB_LIBRARY="$libz")
  fi
  opencv=()
  [ -n "${OpenCV_ROOT:-}" ] || opencv=(-DFASTCPP_WITH_OPENCV=OFF)  # a bundle older than the image pipeline's
  targets=()  # every target; for the goals, the ones the GPU runs
  [ $goals -eq 1 ] && targets=(fastcpp_tests bench_train_step bench_sync_batchnorm bench_image_folder fashion_mnist segmentation detection)
  [ "${auto_build:-0}" -eq 1 ] && [[ " $stages " != *" bench "* ]] && targets=(bench_train_step)  # a later step call
  start=$(now)
  { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFASTCPP_PYTHON="$(command -v "$python")" \
      "${opencv[@]}" -DFASTCPP_DOCTEST_DIR="$bundle/include" -DFASTCPP_GLOO_DIR="$bundle/include" -DFASTCPP_CLI11_DIR="$bundle/include" -DFASTCPP_JSON_DIR="$bundle/include" \
      -DFASTCPP_FASTAI_FIXTURES="$bundle/fastai_fixtures" \
      "${zlib[@]}" && ninja -C "$build" -j "$(nproc)" "${targets[@]}"; } > "$out/build.log" 2>&1
  status=$?
  row "configure summary" "$(grep -o 'fastcpp: libtorch.*' "$out/build.log" | head -1)"
  row build "$([ $status -eq 0 ] && echo ok || echo FAILED) in $(since "$start") s on $(nproc) cores (log: build.log)"
  [ $status -eq 0 ] || { tail -40 "$out/build.log"; exit 1; }
fi

if [[ " $stages " == *" test "* ]]; then
  export FASTCPP_FASHION_MNIST="$bundle/data/fashion-mnist"  # the install test trains on it
  start=$(now)
  # Not the fuzzing and multi-host entries: CPU-only, checked by CI, minutes of device
  # time. For the goals, the GPU entries alone (side by side), and a hung one may not take
  # half the call.
  select=(-E '^(fuzz_|multinode$)' --timeout 250)
  [ $goals -eq 1 ] && select=(-R '^gpu' --timeout 200)
  left=$((call_seconds - $(since "$call_start")))
  (cd "$build" && timeout -k 10 "$((left > 60 ? left : 60))" ctest --output-on-failure -j 4 "${select[@]}") \
    > "$out/tests.log" 2>&1
  status=$?
  if [ $status -eq 124 ] || [ $status -eq 137 ]; then
    row tests "cut at the call's $call_seconds s: the entries that had not ended are in tests.log"
  fi
  row tests "$(grep -E 'tests passed|tests failed' "$out/tests.log" | tail -1) in $(since "$start") s (log: tests.log)"
  for entry in gpu gpu_loop gpu_graphs; do  # the gpu suite's entries (tests/CMakeLists.txt)
    row "gpu suite: $entry" "$(grep -E "^ *[0-9]+/[0-9]+ Test +#[0-9]+: $entry " "$out/tests.log" | head -1 | sed 's/  */ /g')"
  done
  grep -E '\(Failed\)|\(Skipped\)|\(Timeout\)|\(SEGFAULT\)' "$out/tests.log" | while read -r line; do row "not passed" "$line"; done
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  [ "$gpus" -lt 2 ] && row "NCCL rank whose peer stops answering" "not run: NCCL needs two GPUs for two ranks, this machine has $gpus"
fi

# One bench step: its own time limit (one hang cannot eat the call), its output appended
# to bench.log and its key lines to results.md as soon as it ends.
step() {
  local limit=$1 title=$2 left
  shift 2
  left=$((call_seconds - $(since "$call_start")))
  if [ -n "${FASTCPP_SKIP_STEPS:-}" ] && [[ "$title" =~ $FASTCPP_SKIP_STEPS ]]; then
    row "$title" "skipped (FASTCPP_SKIP_STEPS)"
    return
  fi
  if [ "$left" -lt 20 ]; then
    row "$title" "not run: the call's $call_seconds s are spent"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local log=$scratch/step.log started
  started=$(now)
  { echo; echo "## $title"; } >> "$out/bench.log"
  # bash -c: the step may be a function here. -k: a process stuck in the driver may ignore TERM.
  timeout -k 10 "$limit" bash -o pipefail -c '"$@"' step "$@" > "$log" 2>&1
  local status=$?
  cat "$log" >> "$out/bench.log"
  row "$title" "$([ $status -eq 0 ] && echo "done" || echo "FAILED (exit $status$([ $status -eq 124 ] && echo ", past ${limit} s"))") in $(since "$started") s"
  # Of a step that reprints its table after each round, the last one.
  awk '/^Medians of/ {kept = ""} {kept = kept $0 "\n"} END {printf "%s", kept}' "$log" > "$log.last"
  { grep -E '^\|' "$log.last"; grep -E '^Medians|goal|time ratio|time: data|GPU busy|^GPU time|race stress|equal|^profile|ms/step|per CPU core|per GPU' "$log.last"; } >> "$results"
}

# The example as docs/examples.md documents its fastest setting, whole process (CUDA start-up
# included), with the per-epoch time split (the host's side) and how busy the GPU was
# (nvidia-smi's utilization, sampled every 100 ms: low means the host holds it back).
example_fast() {
  local started elapsed sampler
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 -f "$scratch/example_busy.txt" 2>/dev/null &
  sampler=$!
  started=$(now)
  example --epochs 5 --precision bf16 --bs 512 --lr 2e-2 --resident on --time-split on | tee "$scratch/example_fast.txt"
  local status=$?
  elapsed=$(since "$started" 2)  # to the hundredth: 8.4 s is not under 8
  kill "$sampler" 2>/dev/null
  [ $status -eq 0 ] || { echo "example: failed (exit $status): no time"; return 1; }
  # From the first busy sample to the last: start-up and the pictures at the end are not training.
  awk '$1 ~ /^[0-9]+$/ {v[++n] = $1} END {for (i = 1; i <= n && v[i] == 0; ++i); for (j = n; j > i && v[j] == 0; --j);
       for (k = i; k <= j; ++k) sum += v[k]; if (j >= i) printf "example, GPU busy while it trains: %.0f%% of %d samples (nvidia-smi, every 100 ms)\n", sum / (j - i + 1), j - i + 1}' \
    "$scratch/example_busy.txt"
  echo "example, 5 epochs bf16 batch 512 data on the GPU: $elapsed s whole-process (goal: <= 8 s)"
  awk '/final test accuracy/ {printf "example, 5 epochs bf16 batch 512: accuracy %.2f%% (goal: >= 93%%)\n", $4 * 100}' "$scratch/example_fast.txt"
}

# The same with each training step replayed as a CUDA graph (learn.to_graphs()): the
# training loop's own time is the goal; its line says if it trained eagerly, and why.
example_graphs() {
  example --epochs 5 --precision bf16 --bs 512 --lr 2e-2 --resident on --graphs on --time-split on |
    tee "$scratch/example_graphs.txt" ||
    return 1
  awk '/training time/ {printf "example with to_graphs, 5 epochs bf16 batch 512 data on the GPU, training: %.2f s (goal: <= 2.0 s)\n", $3}
       /final test accuracy/ {printf "example with to_graphs, 5 epochs bf16 batch 512: accuracy %.2f%% (goal: >= 93%%)\n", $4 * 100}' \
    "$scratch/example_graphs.txt"
}

# Where a step of the example goes, eager and as a CUDA graph: PyTorch's profiler over
# training steps 20-29 of one epoch (the kernels a step launches and their GPU time,
# against the step's wall time in the time split).
example_profiles() {
  local mode
  for mode in off on; do
    echo "### --graphs $mode"
    example --epochs 1 --precision bf16 --bs 512 --lr 2e-2 --resident on --graphs "$mode" --profile on --time-split on \
      --out "profile_graphs_$mode" | grep -vE '^[0-9]+ ' || return 1
  done
}

# The PyTorch race below with the example's step as a CUDA graph (the peer stays eager).
peer_race_graphs() {
  bench/fashion_mnist_vs_python.sh --epochs 5 --data "$bundle/data/fashion-mnist" --build "$build" --python "$python" \
    --memory-format contiguous --resident on --graphs on | tee "$scratch/peer_race_graphs.txt" || return 1
  awk '/training-time ratio/ {printf "example with to_graphs / PyTorch loop, batch 128 fp32 contiguous, data on the GPU, training time: %sx (goal: <= 0.4x)\n", $4}' \
    "$scratch/peer_race_graphs.txt"
}

# The example against the PyTorch peer's loop (batch 128, fp32, data on the GPU): the
# goal is the training loops' time (each side times its own); the whole processes'
# ratio, start-ups included, is printed too.
peer_race() {
  bench/fashion_mnist_vs_python.sh --epochs 5 --data "$bundle/data/fashion-mnist" --build "$build" --python "$python" \
    --memory-format contiguous --resident on | tee "$scratch/peer_race.txt" || return 1
  awk '/training-time ratio/ {printf "example / PyTorch loop, batch 128 fp32 contiguous, data on the GPU, training time: %sx (goal: <= 0.6x)\n", $4}
       / time ratio/ {printf "example / PyTorch loop, the same, whole processes: %.2fx\n", $NF}' "$scratch/peer_race.txt"
}

# Two runs of the example (1 epoch, to_parallel on {cuda:0, cuda:0}, fp16) from the same
# seed, the second with every kernel launch blocking: a stream race shows as a difference
# (cuDNN's deterministic algorithms: a difference is not an algorithm's atomics).
stream_race() {
  local args=(--epochs 1 --precision fp16 --parallel cuda:0,cuda:0 --seed 7 --deterministic)  # example() adds --data
  example "${args[@]}" > "$scratch/race_async.txt" || { echo "stream race stress: the asynchronous run failed"; return 1; }
  CUDA_LAUNCH_BLOCKING=1 example "${args[@]}" > "$scratch/race_blocking.txt" ||
    { echo "stream race stress: the blocking run failed"; return 1; }
  # The epoch's row without its time, and the final accuracy.
  rows() { awk '/^0 / {NF--; print} /final test accuracy/ {print}' "$1"; }
  rows "$scratch/race_async.txt"
  if [ "$(rows "$scratch/race_async.txt" | wc -l)" -eq 2 ] &&
     diff <(rows "$scratch/race_async.txt") <(rows "$scratch/race_blocking.txt") > /dev/null; then
    echo "stream race stress: asynchronous and blocking launches equal"
  else
    echo "stream race stress: asynchronous and blocking launches DIFFER"; rows "$scratch/race_blocking.txt"; return 1
  fi
}

# The segmentation example's U-Net (torchvision's ResNet-18 encoder) from its PNG folders
# (masks through the loader's workers): one replica, then to_parallel on {cuda:0, cuda:0}
# with SyncBatchNorm; each times its own training loop.
# With fastai's wheels in the bundle, fastai's unet_learner does the same job on the same
# GPU (bench/segmentation_fastai.py: the same files, split, batch, lr and loader workers).
unet_gpu() {
  local args=(--data "$bundle/data/fashion-mnist" --set "$scratch/segmentation_data" --items 1200 --width 64 --bs 32
              --lr 3e-3 --workers 8 --top-losses 0 --export '')
  (cd "$scratch" && "$build/examples/segmentation" "${args[@]}" --epochs 0 > /dev/null) || return 1  # the folders, once
  ls "$scratch/segmentation_data/images" | sort | awk 'NR % 5 == 0' > "$scratch/valid.txt"
  # 4 epochs: at 2 (1.7 s on one replica, 2026-11-27) the first steps' kernel loading and
  # cuDNN's plan search made a third of the loop.
  local epochs=4
  args+=(--epochs "$epochs" --valid-list "$scratch/valid.txt")
  (cd "$scratch" && "$build/examples/segmentation" "${args[@]}") > "$scratch/unet_one.txt" || return 1
  (cd "$scratch" && "$build/examples/segmentation" "${args[@]}" --parallel cuda:0,cuda:0) > "$scratch/unet_two.txt" ||
    return 1
  local one two
  one=$(awk '/training loop/ {print $3}' "$scratch/unet_one.txt")
  two=$(awk '/training loop/ {print $3}' "$scratch/unet_two.txt")
  grep -h 'final valid' "$scratch/unet_one.txt" "$scratch/unet_two.txt"
  awk -v a="$one" -v b="$two" -v epochs="$epochs" 'BEGIN {printf "U-Net resnet18 %d epochs batch 32, training loop: one replica %.1f s, to_parallel %.1f s\n", epochs, a, b
    printf "to_parallel {cuda:0, cuda:0} U-Net resnet18 fp32 / one replica: %.2fx (goal: >= 0.85x)\n", a / b}'
  [ -d "$bundle/wheels" ] || { echo "U-Net against fastai: not run (no wheels in the bundle: scripts/gpu_bundle.sh)"; return 0; }
  "$python" -m pip install -q --no-index --no-deps --no-compile --target "$scratch/site" "$bundle"/wheels/*.whl || return 1
  local script=$PWD/bench/segmentation_fastai.py
  (cd "$scratch" && PYTHONPATH="$scratch/site" "$python" "$script" --epochs "$epochs" --bs 32 \
     --lr 3e-3 --workers 8 --device cuda --threads "$(nproc)" --valid-list valid.txt) | tee "$scratch/unet_fastai.txt" ||
    return 1
  awk -v a="$one" -v iou="$(grep -o 'mean IoU [0-9.]*' "$scratch/unet_one.txt" | awk '{print $3}')" -F'[ =]' \
    '/fastai: mean_iou/ {printf "U-Net resnet18 fastcpp / fastai on the same GPU, training loops: time ratio %.2fx (%.1f s vs %.1f s; mean IoU %.2f vs %.2f)\n", a / $5, a, $5, iou * 100, $3 * 100}' \
    "$scratch/unet_fastai.txt"
}

# The detection example's RetinaNet (ResNet-18 + FPN of 128, GroupNorm head) on the
# bundle's set, 2 epochs: one replica, then to_parallel on {cuda:0, cuda:0} (SyncBatchNorm),
# then torchvision's own loop on the same GPU and files (bench/detection_torchvision.py,
# pycocotools from the bundle's wheels); each times its training loop.
detection_gpu() {
  local args=(--set "$bundle/data/detection" --epochs 2 --lr 1e-3 --fpn 128 --bs 16 --workers 8)
  (cd "$scratch" && "$build/examples/detection" "${args[@]}" --out det_one) > "$scratch/det_one.txt" || return 1
  (cd "$scratch" && "$build/examples/detection" "${args[@]}" --out det_two --parallel cuda:0,cuda:0) > "$scratch/det_two.txt" ||
    return 1
  local one two
  one=$(awk '/training loop/ {print $3}' "$scratch/det_one.txt")
  two=$(awk '/training loop/ {print $3}' "$scratch/det_two.txt")
  grep -h 'final valid' "$scratch/det_one.txt" "$scratch/det_two.txt"
  awk -v a="$one" -v b="$two" 'BEGIN {printf "RetinaNet resnet18 2 epochs batch 16, training loop: one replica %.1f s, to_parallel %.1f s (%.2fx)\n", a, b, a / b}'
  [ -d "$bundle/wheels" ] || { echo "detection against torchvision: not run (no wheels in the bundle)"; return 0; }
  "$python" -m pip install -q --no-index --no-deps --no-compile --target "$scratch/detection_site" "$bundle"/wheels/pycocotools*.whl ||
    { echo "detection against torchvision: not run (no pycocotools wheel for this Python)"; return 0; }
  PYTHONPATH="$scratch/detection_site" "$python" bench/detection_torchvision.py "$bundle/data/detection" --epochs 2 \
    --lr 1e-3 --fpn 128 --bs 16 --threads "$(nproc)" --device cuda | tee "$scratch/det_torchvision.txt" || return 1
  awk -v a="$one" -F'[ =]' '/^loop_seconds/ {printf "RetinaNet resnet18 fastcpp / torchvision on the same GPU, training loops: %.2fx (%.1f s vs %.1f s)\n", a / $2, a, $2}' \
    "$scratch/det_torchvision.txt"
}

# In the scratch folder: the example writes its model and pictures where it runs.
example() { (cd "$scratch" && "$build/examples/fashion_mnist" --data "$bundle/data/fashion-mnist" "$@"); }
export out scratch bundle build python
export -f now since example example_fast example_graphs example_profiles peer_race peer_race_graphs stream_race unet_gpu detection_gpu
[[ " $stages " == *" bench "* || " $stages " == *" step "* ]] && : > "$out/bench.log"

if [[ " $stages " == *" bench "* ]]; then
  start=$(now)
  # Cheapest goal figures first: a call cut short keeps the most of them.
  step 60 "Fashion-MNIST example, time split (5 epochs, bf16, batch 512, data on the GPU)" example_fast
  # Contiguous only: its ratio is the goal's, and both layouts would outrun the call
  # (bench/fashion_mnist_vs_python.sh --memory-format channels-last runs the other).
  step 60 "Fashion-MNIST example with to_graphs (5 epochs, bf16, batch 512, data on the GPU)" example_graphs
  step 60 "Fashion-MNIST example's profiles, eager and with to_graphs (1 epoch, bf16, batch 512)" example_profiles
  step 120 "Fashion-MNIST example vs the PyTorch peer (5 epochs, both contiguous, data on the GPU)" peer_race
  step 120 "Fashion-MNIST example with to_graphs vs the PyTorch peer (the same)" peer_race_graphs
  # Its own 150 s: the step stage's cells get what is left of the call.
  step 150 "Image folder: the CPU pipeline, GPU decode and the resident ceiling, against PyTorch's loaders" \
    bench/gpu_image_folder.sh --build "$build" --python "$python" --folder "$scratch/image_folder"
  mkdir -p "$scratch/traces"
  step 60 "SyncBatchNorm's synced path vs BatchNorm (ResNet-50's layers, fp16 channels-last)" \
    "$build/bench/bench_sync_batchnorm" --profile "$scratch/traces"
  if [ $goals -eq 1 ]; then
    step 150 "to_parallel" bench/gpu_parallel.sh --build "$build"
  else
    step 150 "to_parallel (and its profile)" bench/gpu_parallel.sh --build "$build" --traces "$scratch/traces"
  fi
  tar -czf "$out/traces.tgz" -C "$scratch" traces
  step 90 "DDP at world size 1 on NCCL" bench/gpu_ddp_overhead.sh --build "$build"
  step 60 "Stream race stress" stream_race
  step 120 "U-Net from mask folders: one replica and to_parallel {cuda:0, cuda:0}" unet_gpu
  step 120 "RetinaNet from JPEGs: one replica, to_parallel {cuda:0, cuda:0}, torchvision's loop" detection_gpu
  row benchmarks "done in $(since "$start") s (log: bench.log)"
fi

if [[ " $stages " == *" step "* ]]; then
  # The step recorded as a CUDA graph, against the same eager peer: the cells of the goal
  # (ResNet-18 and -50, bf16 channels-last), first, as the full table may fill the call.
  step 150 "Training step with to_graphs, fastcpp Learner vs PyTorch eager (bf16 channels-last)" \
    env FASTCPP_BENCH_ROUNDS=1 bench/gpu_train_step.sh --build "$build" --python "$python" --graphs -- --steps "$steps" \
    --precision bf16 --memory-format channels-last
  # The table is printed again after each round: a step cut by its limit still leaves
  # the medians of the rounds it finished.
  step 540 "Training step, fastcpp Learner vs PyTorch eager (${steps} timed steps, alternating cell by cell)" \
    env FASTCPP_BENCH_ROUNDS="${FASTCPP_BENCH_ROUNDS:-3}" bench/gpu_train_step.sh --build "$build" --python "$python" -- --steps "$steps" ${FASTCPP_STEP_ARGS:-}
fi

if [ -s "$out/bench.log" ]; then
  # One line per goal the steps print ("...: 0.91x ... (goal >= 0.85x)"): met or not. A
  # goal printed again (the step table after each round) counts with its last figure.
  { echo; echo "| goal | figure | met |"; echo "|---|---|---|"
    grep -E 'goal[^<>]*(>=|<=) -?[0-9.]+' "$out/bench.log" |
      awk '{key = substr($0, 1, index($0, ": ")); if (!(key in last)) order[++n] = key; last[key] = $0}
           END {for (i = 1; i <= n; ++i) print last[order[i]]}' | awk '{
      rest = substr($0, index($0, ": ") + 2)
      rest = substr(rest, 1, index(rest, "goal") - 1)  # the figure, not the number in the goal
      match(rest, /-?[0-9]+(\.[0-9]+)?(x|%| s| img\/s)/); figure = substr(rest, RSTART, RLENGTH)
      match($0, /goal[^<>]*(>=|<=) -?[0-9.]+/); spec = substr($0, RSTART, RLENGTH)
      op = substr(spec, match(spec, /(>=|<=)/), 2); target = substr(spec, RSTART + 3) + 0
      met = (op == ">=") ? (figure + 0 >= target) : (figure + 0 <= target)
      if (figure == "" || $0 ~ /(^|[^a-z])(inf|nan)([^a-z]|x|$)/) met = 0  # no figure, or a broken one ("infx")
      if ($0 ~ /only [0-9]+ of [0-9]+ cells/) met = 0  # a goal over every cell, from part of them
      printf "| %s | %s | %s |\n", $0, figure, (met ? "met" : "NOT met")}'
    # Every goal of the stages that ran has a row: one whose step printed no figure (cut
    # by the call's limit, failed) says so. Each goal here is the start of its line.
    expected=()
    [[ " $stages " == *" bench "* ]] && expected+=(
      "example, 5 epochs bf16 batch 512 data on the GPU" "example, 5 epochs bf16 batch 512: accuracy"
      "example / PyTorch loop, batch 128 fp32 contiguous, data on the GPU, training time"
      "example with to_graphs, 5 epochs bf16 batch 512 data on the GPU, training"
      "example with to_graphs, 5 epochs bf16 batch 512: accuracy"
      "example with to_graphs / PyTorch loop, batch 128 fp32 contiguous"
      "SyncBatchNorm's synced path on" "SyncBatchNorm's synced path against PyTorch's"
      "SyncBatchNorm's synced path, GPU time against BatchNorm's"
      "SyncBatchNorm's synced path, wall time against its GPU time"
      "to_parallel {cuda:0, cuda:0} resnet18 fp32 contiguous"
      "to_parallel {cuda:0, cuda:0} resnet50 fp16 channels-last" "DDP overhead at world size 1 (NCCL)"
      "image folder resnet50 fp16 channels-last, fastcpp best / resident ceiling"
      "image folder resnet18 bf16 channels-last, fastcpp best / resident ceiling"
      "image folder resnet18 bf16 channels-last, fastcpp best / PyTorch best"
      "to_parallel {cuda:0, cuda:0} U-Net resnet18 fp32")
    [[ " $stages " == *" step "* ]] && expected+=("slowest cell, fastcpp / eager" "largest peak memory, fastcpp over eager"
      "with to_graphs, slowest cell, fastcpp / eager" "with to_graphs, largest peak memory, fastcpp over eager")
    for goal in "${expected[@]}"; do
      grep -F "$goal" "$out/bench.log" | grep -q goal || echo "| $goal ...: not measured (its step printed no figure: see bench.log) | | NOT met |"
    done
  } >> "$results"
fi

cat "$results"
