#!/usr/bin/env bash
# Fuzzes one of fastcpp's readers of untrusted files with libFuzzer under ASan and UBSan
# for SECONDS, starting from the committed corpus (tests/fuzz/corpus/TARGET), on a copy.
# Exits non-zero on a finding (a crash, a hang over 10 s, an exception other than
# fastcpp::Error, then a leak over the whole corpus); the input is left in OUT_DIR.
#
#   tests/fuzz/run.sh TARGET SECONDS BUILD_DIR [OUT_DIR]
#
# TARGET: torch_file (torch.save archives), idx, cifar, image, decoders (the libjpeg and
# libpng decoders of vision/decoders.h), checkpoint. The reader's own sources are compiled here with clang and instrumentation; the rest of fastcpp is
# linked from BUILD_DIR's libfastcpp.a, with the libraries and definitions the build
# itself used (read from its ninja file).
# Needs clang with libFuzzer (Debian: clang, libclang-rt-14-dev); exits 77 without.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=$1
seconds=$2
build=$(cd "$3" && pwd)
out=${4:-$(mktemp -d)}
mkdir -p "$out/corpus" "$out/objects"
case "$target" in
  torch_file) sources=(formats/torch_file.cpp formats/zip_directory.cpp) ;;
  idx) sources=(vision/datasets/idx.cpp) ;;
  cifar) sources=(vision/datasets/cifar.cpp formats/file_io.cpp) ;;
  image) sources=(vision/image.cpp) ;;
  decoders) sources=(vision/libjpeg_decode.cpp vision/libpng_decode.cpp) ;;
  checkpoint) sources=(learner/checkpoint.cpp formats/torch_file.cpp formats/zip_directory.cpp formats/state_dict.cpp optim/optimizer.cpp
                       optim/grad_scaler.cpp) ;;
  *) echo "unknown fuzz target '$target': torch_file, idx, cifar, image, decoders or checkpoint" >&2; exit 2 ;;
esac
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
    clang++ -x c++ -fsanitize=fuzzer,address,undefined - -o "$out/probe" 2>/dev/null; then
  echo "skipped: clang++ with libFuzzer not found (Debian: clang, libclang-rt-14-dev)"
  exit 77
fi

# How the build compiles fastcpp (definitions, include paths) and links a program with it.
compile=$(cd "$build" && ninja -t commands CMakeFiles/fastcpp.dir/formats/torch_file.cpp.o | tail -1)
flags=$(grep -oE -- '(-D|-I)[^ ]+|-isystem [^ ]+' <<<"$compile" | tr '\n' ' ')
link=$(cd "$build" && ninja -t commands tests/dist_worker | tail -1 | sed -e 's/.* -o tests\/dist_worker //' -e 's/ *&& *:.*//')
link=${link//\"/}  # its quotes around paths, which word splitting would keep

cp "$here/corpus/$target"/* "$out/corpus/"
objects=()
for source in "${sources[@]}" "tests/fuzz/${target}_fuzz.cpp"; do
  object="$out/objects/$(basename "$source" .cpp).o"
  # shellcheck disable=SC2086
  clang++ -std=gnu++20 -g -O1 -fsanitize=fuzzer-no-link,address,undefined -w $flags -I"$root" \
    -c "$root/$source" -o "$object"
  objects+=("$object")
done
# Linked from the build folder: the link line names libfastcpp.a relative to it.
# shellcheck disable=SC2086
(cd "$build" && clang++ -fsanitize=fuzzer,address,undefined "${objects[@]}" -o "$out/${target}_fuzz" $link)

cd "$out"
status=0
# Leaks are looked for once at the end, over the whole corpus: checked after every input
# they would cost most of the throughput (each damaged archive leaks inside libtorch,
# tests/fuzz/lsan.supp, and so sets off a scan of the whole heap).
ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1 \
  "./${target}_fuzz" corpus -max_total_time="$seconds" -timeout=10 -error_exitcode=1 -timeout_exitcode=1 \
  -detect_leaks=0 -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 >fuzz.log 2>&1 || status=$?
runs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" fuzz.log | grep -oE "[0-9]+$" || echo 0)
echo "$target fuzzing: $runs inputs in $seconds s, corpus $(ls corpus | wc -l) files"
if [ $status -eq 0 ]; then
  # The fuzzing run's memory limit: an image the decoders accept may take 2 GB under ASan.
  ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$here/lsan.supp:print_suppressions=0 \
    "./${target}_fuzz" corpus -runs=0 -error_exitcode=1 -rss_limit_mb=4096 >leaks.log 2>&1 || status=$?
  [ $status -eq 0 ] && echo "$target: no leak over the corpus" || cat leaks.log | tail -40
fi
grep -E "ERROR|SUMMARY|runtime error" fuzz.log || true
if [ $status -ne 0 ]; then echo "$target fuzzing: a finding (exit $status); see $out"; tail -40 fuzz.log; fi
exit $status
