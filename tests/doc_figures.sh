#!/usr/bin/env bash
# The figures the documents repeat agree: each figure below is read from every place
# that states it (README.md, docs/, the scripts' messages), and all must say the same.
# Figures stated once (the README's dated set-up times, docs/gpu.md's and
# docs/benchmarks.md's tables) live in one place and are not repeated elsewhere.
#
#   tests/doc_figures.sh SOURCE_DIR
set -uo pipefail
cd "${1:?usage: tests/doc_figures.sh SOURCE_DIR}" || exit 2
documents=(README.md docs/*.md scripts/*.sh scripts/*.py bench/*.sh)
failures=0

# same NAME LINE_PATTERN VALUE_PATTERN: every line matching LINE_PATTERN gives one value.
same() {
  local values
  values=$(grep -h -i -E "$2" "${documents[@]}" | grep -o -E "$3" | sort -u)
  if [ "$(grep -c . <<<"$values")" -gt 1 ]; then
    echo "FAIL $1 differs between the documents: $(tr '\n' ' ' <<<"$values")"
    grep -n -i -E "$2" "${documents[@]}" | grep -E "$3" | sed 's/^/  /'
    failures=$((failures + 1))
  fi
}
# once NAME PATTERN: stated in one file only (PATTERN is Perl's and may span lines).
once() {
  local files
  files=$(grep -l -z -P "$2" "${documents[@]}")
  if [ "$(grep -c . <<<"$files")" -gt 1 ]; then
    echo "FAIL $1 is stated in several places: $(tr '\n' ' ' <<<"$files")"
    failures=$((failures + 1))
  fi
}

same "the wheels' download size" "wheel" "[0-9]+(\.[0-9]+)? GB"
once "the cold .ci/run time" "\.ci/run[^\n]*\n?[^\n]*\d+ min"
once "the demo's cold time" "scripts/demo\.sh[^\n]*\n?[^\n]*fresh machine: \d"
once "the latest GPU run's table" "The latest GPU run"
if grep -n -E "has not run on a GPU" "${documents[@]}"; then
  echo "FAIL a document says a GPU suite has not run; docs/gpu.md has the run's results"
  failures=$((failures + 1))
fi
[ "$failures" -eq 0 ] && echo "doc_figures: every repeated figure agrees"
exit $((failures > 0))
