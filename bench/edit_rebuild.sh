#!/usr/bin/env bash
# The edit-compile loop of a program of one's own: templates/standalone built against the
# installed package, then its main.cpp touched and rebuilt. As the template ships
# (fastcpp_precompile_headers; Clang where installed) against the plain build it replaced
# (GCC, no precompiled header), on the same machine in the same run; each edit rebuild is
# the best of two.
#
#   bench/edit_rebuild.sh [--build build] [--python .venv/bin/python]
#
# Last line: "edit rebuild: template A s, plain GCC B s, ratio R (goal <= 0.40)".
set -euo pipefail
source "$(dirname "$0")/../scripts/command_line.sh"
cd "$(dirname "$0")/.."
build=build
python=${FASTCPP_PYTHON:-$PWD/.venv/bin/python}
while [ $# -gt 0 ]; do
  case "$1" in
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
    --build) need_value "$@"; build=$2; shift 2 ;;
    --python) need_value "$@"; python=$2; shift 2 ;;
    *) other_flag "$@" ;;
  esac
done
[ -f "$build/libfastcpp.a" ] || scripts/build.sh fastcpp fastcpp-launch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > /dev/null
prefixes="$work/prefix;$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
cp -r templates/standalone "$work/template"
cp -r templates/standalone "$work/plain"
sed -i '/fastcpp_precompile_headers/d' "$work/plain/CMakeLists.txt"

# configure DIR [CMAKE ARGS...], then a first build (not timed)
prepare() {
  local dir=$1
  shift
  cmake -S "$dir" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefixes" "$@" > /dev/null 2>&1
  cmake --build "$dir/build" > /dev/null
}
# The best of two edit rebuilds of DIR, in seconds.
edit_rebuild() {
  local best=""
  for _ in 1 2; do
    touch "$1/main.cpp"
    local start end
    start=$(date +%s.%N)
    cmake --build "$1/build" > /dev/null
    end=$(date +%s.%N)
    best=$(awk -v a="$start" -v b="$end" -v m="$best" 'BEGIN {t = b - a; print (m == "" || t < m) ? t : m}')
  done
  echo "$best"
}
prepare "$work/template"
prepare "$work/plain" -DCMAKE_CXX_COMPILER=g++
compiler=$(sed -n 's/^set(CMAKE_CXX_COMPILER_ID "\(.*\)")/\1/p' "$work/template/build/CMakeFiles/"*/CMakeCXXCompiler.cmake)
template=$(edit_rebuild "$work/template")
plain=$(edit_rebuild "$work/plain")
echo "template compiler: $compiler"
awk -v a="$template" -v b="$plain" \
  'BEGIN {printf "edit rebuild: template %.1f s, plain GCC %.1f s, ratio %.2f (goal <= 0.40)\n", a, b, a / b}'
