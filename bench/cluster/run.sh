#!/bin/sh
# bench/cluster/run.sh [BUILD_DIR]: several latentd processes on one PostgreSQL store vs one
# on SQLite, same run (see run.js): throughput with 1/2/3 workers, submit->execution_start
# latency in and across processes, and the queue's own intake rate. Starts a private
# PostgreSQL (tests/e2e/lib/postgres.js). PROMPTS, CONCURRENCY tune it.
set -e
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
LATENTD_BIN=$(cd "$build" && pwd)/latentd exec node "$here/run.js"
