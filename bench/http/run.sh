#!/bin/sh
# bench/http/run.sh [BUILD_DIR]: wrk on GET /system_stats and GET /queue against latentd and
# against the minimal libmicrohttpd handler (bench_http_mhd) in the same run; prints the
# throughput ratio (goal >= 0.8), time from exec to the first 200 (goal <= 100 ms) and
# idle RSS (goal <= 30 MB). Needs wrk and node. BENCH_SECONDS (default 3) per wrk run.
set -e
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
exec node "$here/run.js" "$build/latentd" "$build/bench_http_mhd"
