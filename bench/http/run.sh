#!/bin/sh
# bench/http/run.sh [BUILD_DIR]: wrk on GET /system_stats and GET /queue against latentd and
# against the minimal libmicrohttpd handler (bench_http_mhd) in the same run; prints the
# throughput ratio (goal >= 0.8), time from exec to the first 200 (goal <= 100 ms) and
# idle RSS (goal <= 30 MB); then GET /queue with and without 2000 slow clients connected:
# throughput ratio (goal >= 0.8) and p99 (goal < 50 ms). Needs wrk and node. BENCH_SECONDS
# (default 3) per wrk run; SLOW_CLIENTS (default 2000); BENCH_ONLY=slow for the last part;
# BENCH_ONLY=start for start-up alone (first 200 and idle RSS, medians of BENCH_ROUNDS
# rounds alternating with the minimal MHD handler, so a loaded machine can be told apart).
set -e
# 2000 slow clients need descriptors on both ends: raise the soft limit to the hard one.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
exec node "$here/run.js" "$build/latentd" "$build/bench_http_mhd"
