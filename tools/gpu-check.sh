#!/bin/sh
# tools/gpu-check.sh — the CUDA checks for a session that is lent a GPU machine.
# UNTESTED on a GPU (written in a session without one); expect to fix small things
# the first time. Two steps:
#
#   1. here (a Debian 12 machine with apt and network):
#        tools/gpu-check.sh fetch
#      downloads the build's Debian packages (headers, .pc files and their runtime
#      libraries: see DEBS) into build-gpudeps/ (ignored by .gitignore's build*/),
#      ~25 MB. The GPU machine has cmake, ninja, gcc and nvcc but no registry.
#   2. on the GPU machine, with build-gpudeps carried, e.g. through the device tool:
#        run(command="sh tools/gpu-check.sh run", carry=["build-gpudeps"], timeout_s=580)
#      unpacks the packages under /tmp/gpudeps (never into /), configures
#      -DLATENTD_CUDA=ON (sm_90 only, to build fast) in build-gpu/, builds everything it
#      can (-k 0: a target whose libraries are missing there does not stop the rest),
#      runs the `cuda`-labelled tests and the unit tests (several have CUDA branches
#      that skip without a GPU), and the benchmarks with GPU modes: bench_ops --gpu,
#      bench_streaming --device cuda:0, bench_txt2img --device cuda:0 (full-size random
#      checkpoint, generated there). Logs and a summary go to $OUT (or build-gpu/out).
#      Each phase has its own time limit so the whole stays under ~9 minutes.
#
# Exit status: 0 when the cuda-labelled tests passed, 1 otherwise (benchmarks are
# reported, not judged).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
deps_dir=$here/build-gpudeps
DEBS="libcjson-dev libcjson1 libpng-dev libpng16-16 libjpeg62-turbo-dev libjpeg62-turbo
      libmicrohttpd-dev libmicrohttpd12 libwebsockets-dev libwebsockets17 libsqlite3-dev
      libsqlite3-0 libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0
      libgfortran5 libquadmath0 zlib1g-dev libcap-dev libcap2 pkgconf-bin libpkgconf3"

fetch() {
    mkdir -p "$deps_dir" && cd "$deps_dir" || exit 1
    rm -f ./*.deb
    # shellcheck disable=SC2086
    apt-get download $DEBS || exit 1
    du -sh "$deps_dir"
}

phase() { # phase NAME SECONDS CMD... : run with a limit, log to $out/NAME.log
    name=$1 limit=$2
    shift 2
    t0=$(date +%s)
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    rc=$?
    echo "$name: exit $rc in $(( $(date +%s) - t0 )) s" | tee -a "$out/summary.txt"
    return $rc
}

run() {
    out=${OUT:-$here/build-gpu/out}
    mkdir -p "$out"
    : > "$out/summary.txt"
    {
        date -u
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
        nvcc --version 2>&1 | tail -1
        cmake --version | head -1
        uname -m
    } >> "$out/summary.txt"

    # Unpack the carried packages under /tmp/gpudeps; point the .pc files there.
    root=/tmp/gpudeps
    rm -rf "$root" && mkdir -p "$root"
    for f in "$deps_dir"/*.deb; do dpkg -x "$f" "$root" || exit 1; done
    lib=$root/usr/lib/x86_64-linux-gnu
    pcdir=$root/pc
    mkdir -p "$pcdir"
    for pc in $(find "$root/usr" -name '*.pc'); do
        sed -E -e "s#(=\"?)/usr#\1$root/usr#" -e "s# /usr/# $root/usr/#g" -e "s#-I/usr/#-I$root/usr/#g" \
            -e "s#-L/usr/#-L$root/usr/#g" "$pc" > "$pcdir/$(basename "$pc")"
    done
    export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PATH="$root/usr/bin:$PATH"
    export PKG_CONFIG_PATH="$pcdir"
    export CPATH="$root/usr/include/x86_64-linux-gnu:$root/usr/include"
    export LIBRARY_PATH="$lib:$lib/openblas-pthread"
    pkgc=$root/usr/bin/pkgconf
    # libmicrohttpd.pc names gnutls as a private requirement; when the machine has no
    # gnutls.pc, an empty one lets pkg-config answer (latentd itself then fails to
    # link there and is skipped; nothing the GPU checks need links gnutls).
    for p in gnutls; do
        "$pkgc" --exists "$p" 2>/dev/null ||
            printf 'Name: %s\nDescription: stub\nVersion: 0\n' "$p" > "$pcdir/$p.pc"
    done

    b=$here/build-gpu
    rm -f "$b/CMakeCache.txt" # pkg-config results are cached: start clean
    phase configure 120 cmake -S "$here" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DLATENTD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DPKG_CONFIG_EXECUTABLE="$pkgc" -DCMAKE_PREFIX_PATH="$root/usr" || {
        tail -40 "$out/configure.log"
        return 1
    }
    [ "${GPU_CHECK_STOP:-}" = configure ] && return 0 # for testing this script without a GPU
    phase build 300 cmake --build "$b" -j16 -- -k 0
    ls "$b" >> "$out/build.log"

    cd "$b" || return 1
    phase test_cuda 120 ctest -L cuda --output-on-failure
    cuda_rc=$?
    ctest -N -L cuda | tail -1 >> "$out/summary.txt"
    phase test_unit 150 ctest -L unit -j8 --output-on-failure
    grep -E "tests passed|Failed|Not Run" "$out/test_unit.log" | head -20 >> "$out/summary.txt"

    [ -x ./bench_ops ] && phase bench_ops 60 ./bench_ops --gpu --only gpu_ --reps 3
    [ -x ./bench_streaming ] && phase bench_streaming 60 ./bench_streaming --device cuda:0
    if [ -x ./bench_txt2img ]; then
        export LATENTD_BENCH_DIR=/tmp
        phase bench_txt2img 150 ./bench_txt2img --device cuda:0 --threads 16
        grep -vE "^[0-9-]+ [0-9:.]+ (INFO|DEBUG)" "$out/bench_txt2img.log" | head -20 >> "$out/summary.txt"
    fi
    cat "$out/summary.txt"
    [ "$cuda_rc" -eq 0 ]
}

case "${1:-}" in
fetch) fetch ;;
run) run ;;
*)
    echo "usage: tools/gpu-check.sh fetch|run   (see the header)" >&2
    exit 2
    ;;
esac
