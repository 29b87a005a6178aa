#!/usr/bin/env bash
# fuzz.sh [SECONDS_PER_TARGET] - runs the libFuzzer targets of tests/fuzz (the
# .npy reader, compare's result-file reader, the tuning-table reader, merge's
# shard-file reader, a peer helper's reply lines) for SECONDS_PER_TARGET each
# (default 20: about two minutes in all, the CI smoke).
# Installs the missing Debian packages (clang and its libFuzzer/OpenMP
# runtimes, the build's libraries), builds ./build-fuzz (clang, ASan+UBSan,
# -Dfuzz=true), fuzzes each target on a temporary copy of its seed corpus
# (nothing is written into the repository), keeps crash inputs in
# build-fuzz/crashes/<target>/, and ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

secs=${1:-20}
case $secs in
'' | *[!0-9]* | 0)
    echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET] (a positive integer, got '$secs')" >&2
    exit 2
    ;;
esac
targets=(npy results table merge peer)
bail() { # setup failed: every target counts as failed
    echo "fuzz: $1" >&2
    echo "0 passed, ${#targets[@]} failed"
    exit 1
}

# clang-14 is Debian 12's clang; libFuzzer's runtime is in libclang-rt-14-dev,
# clang's OpenMP (omp.h, libomp) in libomp-14-dev. The rest is what
# bootstrap.sh installs for the build, less gcc and OpenBLAS (not built here).
packages=(meson ninja-build pkg-config clang libclang-rt-14-dev libomp-14-dev libhwloc-dev
    libcmocka-dev libbenchmark-dev libjson-c-dev)
./scripts/install-missing.sh "${packages[@]}" || bail "cannot install ${packages[*]}"

build="build-fuzz"
# -O0 (buildtype debug): the targets link the whole library, and at -O2 clang
# spent about 2.5 of the smoke's 3.3 minutes on kernels no target runs
# (kernels/gemm.c alone 156 s, the Intel VM, stop 51); -O0 builds them in 28 s.
# The readers then run 0.55x (npy) to 0.93x (merge, results) as many inputs a
# second. A build-fuzz set up before is kept as it is.
if [ ! -f $build/build.ninja ]; then
    CC=clang CXX=clang++ meson setup $build -Dfuzz=true -Dcblas=disabled \
        -Db_sanitize=address,undefined -Db_lundef=false --buildtype=debug \
        >/dev/null || bail "meson setup $build failed"
fi
# Only the fuzz executables and what they link, not the whole project.
log=$(mktemp)
if ! meson compile -C $build "${targets[@]/#/tests/fuzz/fuzz_}" >"$log" 2>&1; then
    cat "$log"
    rm -f "$log"
    bail "the build failed"
fi
rm -f "$log"

work=$(mktemp -d "${TMPDIR:-/tmp}/mha-fuzz.XXXXXX") || bail "cannot create a temporary directory"
trap 'rm -rf "$work"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
pass=0 fail=0
for t in "${targets[@]}"; do
    exe=$build/tests/fuzz/fuzz_$t
    crashes=$build/crashes/$t
    mkdir -p "$work/$t" "$crashes"
    cp "tests/fuzz/corpus/$t"/* "$work/$t/"
    # -close_fd_mask=2 silences the readers' messages (compare prints each
    # rejection); libFuzzer and the sanitizers still report on the real stderr.
    "$exe" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -dict="tests/fuzz/$t.dict" -close_fd_mask=2 -print_final_stats=1 \
        -artifact_prefix="$crashes/" "$work/$t" >"$work/$t.log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/$t.log")
    cov=$(grep -oE 'cov: [0-9]+' "$work/$t.log" | tail -n 1)
    if [ $rc -eq 0 ]; then
        pass=$((pass + 1))
        echo "fuzz $t: ok, ${runs:-?} inputs in ${secs}s (${rate:-?}/s), ${cov:-cov: ?}," \
            "corpus $(find "$work/$t" -type f | wc -l) files"
    else
        fail=$((fail + 1))
        tail -n 60 "$work/$t.log"
        echo "fuzz $t: FAILED (exit $rc); the input is in $crashes/, replay: $exe <file>"
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
