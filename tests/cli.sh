#!/usr/bin/env bash
# Every program answers its command line alike (cli/command_line.h): --help and --version
# exit 0; an unknown flag, a flag without its value, a value of the wrong type or out of
# range, and a missing argument exit 2 with one line that names the flag; and none of it
# trains or writes anything (each runs in an empty folder, which must stay empty). The
# benchmark scripts too (scripts/command_line.sh): their --help is their opening comment.
# And one style: hyphenated values, --build DIR, comma-separated lists.
#
#   tests/cli.sh BUILD_DIR
set -uo pipefail
build=$(realpath "${1:?usage: tests/cli.sh BUILD_DIR}")
source=$(cd "$(dirname "$0")/.." && pwd)
# program, a flag that takes a number, then the arguments it requires (names that exist nowhere)
programs=(
  "examples/fashion_mnist --epochs" "examples/cifar --epochs" "examples/custom_callback --epochs"
  "examples/distributed_fashion_mnist --epochs" "examples/image_folder --epochs no_root"
  "examples/predict --top no_model no_image" "examples/segmentation --epochs" "examples/detection --epochs"
  "examples/export_image_folder - cifar10 no_dir no_out"
  "bench/bench_loader --workers no_folder" "bench/bench_learner_overhead --threads" "bench/bench_train_step --steps"
  "bench/bench_sync_batchnorm --rounds" "bench/bench_image_folder --steps no_folder" "fastcpp-launch --nproc-per-node"
  "bench/fashion_mnist_resnet.sh --epochs" "bench/fashion_mnist_vs_fastai.sh --epochs"
  "bench/fashion_mnist_vs_python.sh --epochs" "bench/scaling.sh --epochs" "bench/segmentation_vs_fastai.sh --items" "bench/edit_rebuild.sh -"
  "bench/detection_vs_torchvision.sh --epochs"
  "bench/history.sh --runs" "bench/gpu_ddp_overhead.sh -" "bench/gpu_parallel.sh -" "bench/gpu_train_step.sh -" "bench/gpu_image_folder.sh -"
  "scripts/test.sh -" "scripts/install_deps.sh -" "scripts/setup_python.sh -" "scripts/gpu_bundle.sh -"
  "scripts/gpu_check.sh -" "scripts/soak.sh -"
)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0 checked=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

# A built program, or a script of the source tree.
path_of() { case "$1" in *.sh) echo "$source/$1" ;; *) echo "$build/$1" ;; esac; }

# expect STATUS PATTERN PROGRAM ARGS...: the exit status, and PATTERN in the output's first line.
expect() {
  local status=$1 pattern=$2 program=$3
  shift 3
  local path out
  path=$(path_of "$program")
  [ -x "$path" ] || return 0  # built only with OpenCV, or with torch's CUDA
  out=$(cd "$work" && timeout 20 "$path" "$@" 2>&1 < /dev/null)
  local got=$?
  local what="$program $*"
  [ "$got" -eq "$status" ] || fail "$what: exit $got, expected $status: $(head -3 <<<"$out")"
  if [ "$status" -eq 2 ]; then
    [ "$(wc -l <<<"$out")" -eq 1 ] || fail "$what: the error is not one line: $out"
  fi
  grep -q -e "$pattern" <<<"$(head -1 <<<"$out")" || [ "$status" -eq 0 ] || fail "$what: '$pattern' not in: $out"
  [ -z "$(ls -A "$work")" ] || { fail "$what wrote $(ls -A "$work")"; rm -rf "${work:?}"/*; }
  checked=$((checked + 1))
}

for entry in "${programs[@]}"; do
  read -r program flag required <<<"$entry"
  read -r -a required <<<"${required:-}"
  path=$(path_of "$program")
  [ -x "$path" ] || continue
  expect 0 "" "$program" --help  # exit 0, nothing written
  help=$(cd "$work" && "$path" -h 2>&1) || fail "$program -h: exit status not 0"
  # One flag style: hyphenated values, --build DIR (no positional build folder), lists
  # separated by commas.
  ! grep -q -E "BUILD_DIR" <<<"$help" || fail "$program: a positional BUILD_DIR in its usage (take --build DIR)"
  ! grep -q -E '[|{,][a-z0-9]+_[a-z0-9_]*[|},]|[a-z0-9]+_[a-z0-9_]*[|}]' <<<"$help" ||
    fail "$program: a value with '_' in its usage (values are hyphenated): $(grep -E '[a-z0-9]+_[a-z0-9_]*[|},]' <<<"$help")"
  ! grep -q -E '"[0-9a-z]+ [0-9a-z]+"' <<<"$help" || fail "$program: a list separated by spaces (lists take commas)"
  case "$program" in
    *.sh) [ "$(wc -l <<<"$help")" -ge 2 ] || fail "$program --help says nothing: $help" ;;
    *) grep -q "Example" <<<"$help" || fail "$program --help: no example" ;;
  esac
  [ "$(cd "$work" && "$path" --version)" = "$(cd "$work" && "$build/fastcpp-launch" --version)" ] ||
    fail "$program --version differs from fastcpp-launch's"
  expect 0 "" "$program" --version
  expect 2 "--no-such-flag" "$program" "${required[@]}" --no-such-flag
  if [ "$flag" != - ]; then
    grep -q -e "$flag" <<<"$help" || fail "$program --help does not list $flag"
    expect 2 "$flag" "$program" "${required[@]}" "$flag"
    expect 2 "$flag" "$program" "${required[@]}" "$flag" abc
    expect 2 "$flag" "$program" "${required[@]}" "$flag=-5"
  fi
done
for script in scripts/build.sh scripts/demo.sh; do  # their other flags go to ninja, to the example
  expect 0 "" "$script" --help
  expect 0 "" "$script" --version
done
expect 2 "DATASET" examples/export_image_folder
expect 2 "DATASET" examples/export_image_folder mnist out
expect 2 "MODEL" examples/predict
expect 2 "ROOT" examples/image_folder --epochs 1
expect 2 "--precision" examples/fashion_mnist --precision fp8
expect 2 "--lr" examples/fashion_mnist --lr nan  # a range holds no nan
expect 2 "--epochs" examples/fashion_mnist --epochs 0x10  # whole numbers in decimal
expect 2 "--lr" examples/fashion_mnist --lr 0x1p-3
expect 2 "ROOT" examples/image_folder --epochs 010 --lr=1e-3 --bs +8  # these pass: ROOT is what is missing
expect 2 "--nprc" fastcpp-launch --nprc 2 ./x -- y  # a misspelt flag, also before a "--" for the worker
version=$("$build/fastcpp-launch" --version)
[[ "$version" =~ ^fastcpp\ [0-9]+\.[0-9]+\.[0-9]+\ \(libtorch\ [0-9.]+ ]] || fail "--version prints '$version'"
echo "cli: $checked command lines checked, $failures failed"
[ "$failures" -eq 0 ]
