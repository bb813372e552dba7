#!/bin/sh
# bench/ops/run.sh [path/to/bench_ops] [rounds] — the one command for bench/ops.
#
# Runs bench_ops `rounds` times (default 3) in each of two environments, interleaved
# (A B A B ...): A = the environment as given, B = with OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE unset (for that command only; nothing else is changed). Prints the
# median GFLOP/s and ratios per case and environment, and fails if the output checksums
# of a case disagree between runs by more than 1e-3 relative (different BLAS kernels
# sum in different orders, so bit equality is not expected).
# The machine is shared: expect noise of 10-20 %; compare ratios, not absolute numbers.
set -eu
bin=${1:-build/bench/bench_ops}
rounds=${2:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
i=0
while [ "$i" -lt "$rounds" ]; do
    "$bin" --reps 3 > "$tmp/A.$i"
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$bin" --reps 3 > "$tmp/B.$i"
    i=$((i + 1))
done
head -n1 "$tmp/A.0" | sed 's/^#/# A (as given):/'
head -n1 "$tmp/B.0" | sed 's/^#/# B (unset):   /'
awk '
function median(s,   n, a, i, j, t) {
    n = split(s, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return a[int((n + 1) / 2)]
}
/^case / {
    env = substr(FILENAME, length(FILENAME) - 2, 1)
    name = $2; gf[env, name] = gf[env, name] " " $3
    if (!(name in seen)) { seen[name] = 1; order[++n] = name }
    s = $(NF); if (s + 0 != 0) {
        if (!(name in ref)) ref[name] = s
        d = (s - ref[name]) / ref[name]; if (d < 0) d = -d
        if (d > 1e-3) { bad = 1; printf("MISMATCH %s: checksum %s vs %s\n", name, s, ref[name]) }
    }
}
END {
    printf("%-34s %10s %10s %8s %8s %8s %8s\n", "case (median GFLOP/s)", "A", "B", "A/obA", "A/best", "B/obB", "B/best")
    obA = median(gf["A", "sgemm_openblas_2048"]); obB = median(gf["B", "sgemm_openblas_2048"])
    ouA = median(gf["A", "sgemm_ours_2048"]); ouB = median(gf["B", "sgemm_ours_2048"])
    bA = obA > ouA ? obA : ouA; bB = obB > ouB ? obB : ouB
    for (i = 1; i <= n; i++) {
        nm = order[i]; a = median(gf["A", nm]); b = median(gf["B", nm])
        printf("%-34s %10.1f %10.1f %8.2f %8.2f %8.2f %8.2f\n", nm, a, b, a / obA, a / bA, b / obB, b / bB)
    }
    print (bad ? "checksums: MISMATCH" : "checksums: all cases agree across runs and environments")
    exit bad
}' "$tmp"/A.* "$tmp"/B.*
