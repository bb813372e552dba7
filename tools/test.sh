#!/bin/sh
# Run every test: installs what is missing, builds, runs CTest (unit, e2e, ui, model).
#   tools/test.sh                   everything
#   tools/test.sh -L unit           any extra arguments go to ctest
# .ci/run calls exactly this.
set -eu
cd "$(dirname "$0")/.."
tools/install.sh
BUILD_DIR=${BUILD_DIR:-build}
# Two parallel tests at most: the machine class has 2 cores, and the e2e tests start
# servers of their own.
ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 "$@"
