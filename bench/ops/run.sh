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
{ env = substr(FILENAME, length(FILENAME) - 2, 1) }
/^case / {
    name = $2; gf[env, name] = gf[env, name] " " $3
    if (!(name in seen)) { seen[name] = 1; order[++n] = name }
    s = $(NF); if (s + 0 != 0) {
        if (!(name in ref)) ref[name] = s
        d = (s - ref[name]) / ref[name]; if (d < 0) d = -d
        if (d > 1e-3) { bad = 1; printf("MISMATCH %s: checksum %s vs %s\n", name, s, ref[name]) }
    }
}
/^ratio / { ro[env, $2] = ro[env, $2] " " $3; rb[env, $2] = rb[env, $2] " " $4 }
END {
    printf("%-34s %9s %9s %8s %8s %8s %8s\n", "case (medians)", "A GF/s", "B GF/s", "A/oblas", "A/best", "B/oblas", "B/best")
    for (i = 1; i <= n; i++) {
        nm = order[i]
        if ((("A", nm) in ro))
            printf("%-34s %9.1f %9.1f %8.2f %8.2f %8.2f %8.2f\n", nm, median(gf["A", nm]), median(gf["B", nm]),
                   median(ro["A", nm]), median(rb["A", nm]), median(ro["B", nm]), median(rb["B", nm]))
        else
            printf("%-34s %9.1f %9.1f\n", nm, median(gf["A", nm]), median(gf["B", nm]))
    }
    print "(oblas: OpenBLAS sgemm; best: the faster of OpenBLAS and our GEMM; both 1024^3, timed between the case repetitions)"
    print (bad ? "checksums: MISMATCH" : "checksums: all cases agree across runs and environments")
    exit bad
}' "$tmp"/A.* "$tmp"/B.*
