#!/usr/bin/env bash
# Fuzzes the torch.save reader (learner/torch_file.cpp) with libFuzzer under ASan and
# UBSan for SECONDS (default 30), starting from the committed corpus, on a copy of it.
# Exits non-zero on a finding; the input that caused it is left in OUT_DIR.
#
#   tests/fuzz/run.sh [SECONDS] [OUT_DIR]
#
# Needs clang with libFuzzer (Debian: clang, libclang-rt-14-dev) and the venv's torch.
# Leak detection is off: libtorch's PyTorchStreamReader leaks a few hundred bytes of its
# zip reader when it rejects a damaged archive (its constructor throws), which is not
# ours to fix.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
seconds=${1:-30}
out=${2:-$(mktemp -d)}
python=${FASTCPP_PYTHON:-$root/.venv/bin/python}
torch=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
mkdir -p "$out/corpus"
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
    clang++ -x c++ -fsanitize=fuzzer,address,undefined - -o "$out/probe" 2>/dev/null; then
  echo "skipped: clang++ with libFuzzer not found (Debian: clang, libclang-rt-14-dev)"
  exit 77
fi
cp "$here"/corpus/torch_file/* "$out/corpus/"
clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -D_GLIBCXX_USE_CXX11_ABI=1 \
  -I"$root" -I"$torch/include" -I"$torch/include/torch/csrc/api/include" \
  "$root/learner/torch_file.cpp" "$here/torch_file_fuzz.cpp" -o "$out/torch_file_fuzz" \
  -L"$torch/lib" -Wl,-rpath,"$torch/lib" -ltorch -ltorch_cpu -lc10
cd "$out"
status=0
ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1 ./torch_file_fuzz corpus -max_total_time="$seconds" \
  -detect_leaks=0 -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 > fuzz.log 2>&1 || status=$?
grep -E "stat::number_of_executed_units|ERROR|SUMMARY|runtime error" fuzz.log || true
if [ $status -ne 0 ]; then echo "torch_file fuzzing: a finding (exit $status); see $out"; tail -40 fuzz.log; fi
exit $status
