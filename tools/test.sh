#!/bin/sh
# Run every test: installs what is missing, builds, runs CTest (unit, e2e, ui, model),
# then the unit tests again under AddressSanitizer + UBSan (STYLE.md "Tests").
#   tools/test.sh                   everything
#   tools/test.sh -L unit           extra arguments go to the main ctest run
#   LATENTD_ASAN=0 tools/test.sh    skip the sanitizer pass
# .ci/run calls exactly this.
set -eu
cd "$(dirname "$0")/.."
tools/install.sh
BUILD_DIR=${BUILD_DIR:-build}
# Two parallel tests at most: the machine class has 2 cores, and the e2e tests start
# servers of their own.
ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 "$@"

if [ "${LATENTD_ASAN:-1}" != 0 ]; then
    cmake --preset asan >/dev/null
    cmake --build build-asan -j"$(nproc)"
    # Any UBSan report fails its test; the full-size model test is too slow under ASan.
    # The hardening e2e tests (issue 11) run here too, against the sanitized server.
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        ctest --test-dir build-asan --output-on-failure -j2 -L 'unit|hardening' -E '_full$'
fi
