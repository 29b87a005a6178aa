#!/bin/bash
# amx-check.sh [BUILD_DIR] - the report to take on the first machine where
# AMX runs (issue 28: everything about flash.amx that only real tiles can
# say), in about two minutes on 2 cores:
#   1. the facts: the CPU, its AMX flags, each detection step and the
#      self-check (`mhabench info`), with the FMA, vdpbf16ps and tile peaks;
#   2. 10,000 seeded random tile products on the instructions against the
#      emulation, bit for bit (`mhabench info --tiles`); a difference is named
#      (case, shape, element, both values), so the emulator can be corrected
#      or kept as a tolerance model;
#   3. `verify` on flash.amx (the whole grid) and flash.amxemu (--quick);
#   4. flash.amx against flash.amxemu bit for bit and both against the
#      oracle's bound on the bf16/fp16 grid (tests/test_bf16's amx groups);
#   5. the kernel rates, flash.amx beside flash.avx512bf16: d 64 and 128, N
#      1024 and 4096, causal and not, 1 thread, bf16 (a sweep file in OUT).
# Where AMX does not run, steps 2, 4 (its real half) and 5 say why and the
# emulated parts still run. Output: the report on stdout and in
# OUT/amx-check.txt (OUT = $AMX_CHECK_OUT, default a new folder under /tmp).
# Exit: 0 all passed on real tiles, 1 a check failed, 2 AMX does not run here
# (or usage), after the rest ran.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build}
bench=$build/mhabench
if [ ! -x "$bench" ]; then
    echo "amx-check.sh: $bench is not built (run ./scripts/bootstrap.sh, or name the build folder)" >&2
    exit 2
fi
out=${AMX_CHECK_OUT:-$(mktemp -d /tmp/amx-check.XXXXXX)}
mkdir -p "$out" || exit 2
exec > >(tee "$out/amx-check.txt") 2>&1

failed=0
last_rc=0
step() { echo; echo "== $*"; }
run() { # run CMD...: print it, run it, count a failure (exit 1) as failed
    echo "\$ $*"
    "$@"
    local rc=$?
    [ "$rc" -eq 1 ] && failed=1
    return "$rc"
}
run_tail() { # run_tail N CMD...: as run, printing only the last N lines (all in OUT/log)
    local n=$1
    shift
    echo "\$ $*"
    "$@" >"$out/log" 2>&1
    local rc=$?
    last_rc=$rc
    tail -n "$n" "$out/log"
    [ "$rc" -eq 1 ] && failed=1
    return "$rc"
}

step "1. the CPU and its AMX facts ($(date -u +%FT%TZ), $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown))"
lscpu | grep -E '^(Model name|CPU family|Model|Stepping|CPU\(s\)|Hypervisor vendor):' | sed 's/  */ /g'
echo "cpuinfo flags: $(grep -o 'amx_[a-z0-9]*\|avx512_bf16\|avx512_fp16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
run "$bench" info
amx_runs=0
# read the whole answer first: under pipefail, grep -q leaving early gives info
# a SIGPIPE and the pipeline "fails" on exactly the machine where AMX runs
info_json=$("$bench" info --json --quick 2>/dev/null)
case $info_json in *'"amx": {"runs": true'*) amx_runs=1 ;; esac

step "2. tile products, the instructions against the emulation"
if [ "$amx_runs" = 1 ]; then
    run "$bench" info --tiles 10000 --seed 1
else
    "$bench" info --tiles 1 2>&1 | sed 's/^/not run: /'
fi

step "3. verify: flash.amx on the whole grid, flash.amxemu on the quick one"
if [ "$amx_runs" = 1 ]; then
    run_tail 12 "$bench" verify --kernels flash.amx --seed 28
else
    echo "not run: flash.amx does not run here"
fi
run_tail 6 "$bench" verify --kernels flash.amxemu --quick --seed 28

step "4. flash.amx against flash.amxemu bit for bit, both against the bf16 bound (tests/test_bf16)"
if [ -x "$build/tests/test_bf16" ]; then
    run_tail 40 "$build/tests/test_bf16"
    [ "$last_rc" -ne 0 ] && failed=1 # cmocka: the number of failed tests
else
    echo "not run: $build/tests/test_bf16 is not built"
fi

step "5. the kernel rates (1 thread, bf16, H8, one pass)"
if [ "$amx_runs" = 1 ]; then
    run "$bench" sweep --kernels flash.amx,flash.avx512bf16 --dtype bf16 --seq 1024,4096 \
        --heads 8 --head-dim 64,128 --causal 0,1 --threads 1 --repetitions 3 --min-time 0.05 \
        --passes 1 --quiet --out "$out/amx-rates.json"
    echo "file: $out/amx-rates.json (mhabench report prints its table again)"
else
    echo "not run: flash.amx does not run here"
fi

step "result"
if [ "$failed" = 1 ]; then
    echo "a check FAILED (above); the report: $out/amx-check.txt"
    exit 1
fi
if [ "$amx_runs" != 1 ]; then
    echo "AMX does not run here: the real-tile steps were not taken; the emulated ones passed"
    echo "the report: $out/amx-check.txt"
    exit 2
fi
echo "every check passed on real tiles; the report: $out/amx-check.txt"
exit 0
