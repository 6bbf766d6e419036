#!/usr/bin/env bash
# The tests on a fresh machine: install, build, and run every test suite with ctest.
# The last line is ctest's summary. One suite alone: cd build && ctest -R NAME.
#   scripts/test.sh
set -euo pipefail
source "$(dirname "$0")/command_line.sh"
positional_only "$@"
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
cd build
set +e
ctest --output-on-failure -j2 | tee ctest.log
status=${PIPESTATUS[0]}
set -e
# ctest says only "Skipped": the suites' own reasons (the gpu suite without a CUDA device),
# then ctest's summary once more, as the last line.
grep -h "skipped:" Testing/Temporary/LastTest.log | sort -u
grep -E "tests passed|tests failed" ctest.log | tail -1
exit "$status"
