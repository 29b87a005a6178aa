#!/usr/bin/env bash
# test.sh [--heavy] - sets up and runs every test: the unit tests natively
# (the full verify grid, the fleet tests), the ISA-dependent ones under each
# MHA_ISA cap (tests for an ISA this CPU lacks skip; kernel grids one case in
# six, verify --quick at 1 thread), then an AddressSanitizer + UBSan build
# (everything but the full grid and the fleet, kernel grids one in six), then
# a bounded libFuzzer run of each reader (scripts/fuzz.sh, about a minute). --heavy:
# the kernel grids whole under the caps and the sanitizers too
# (MHA_TEST_STRIDE=1; much longer: under ASan test_kernels alone took 198 s
# at a third of its cases, stop 50). The suites and setups are
# in tests/meson.build. Ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
'') ;;
--heavy) export MHA_TEST_STRIDE=1 ;;
*)
    echo "usage: scripts/test.sh [--heavy] (got '$1')" >&2
    exit 2
    ;;
esac
./scripts/bootstrap.sh || { echo "0 passed, 1 failed"; exit 1; }

pass=0 fail=0 skip=0
tally() { # adds meson test's summary counts from log $1
    local ok f s t
    ok=$(awk '/^Ok:/ {print $2}' "$1"); f=$(awk '/^Fail:/ {print $2}' "$1")
    s=$(awk '/^Skipped:/ {print $2}' "$1"); t=$(awk '/^Timeout:/ {print $2}' "$1")
    pass=$((pass + ${ok:-0})); fail=$((fail + ${f:-0} + ${t:-0})); skip=$((skip + ${s:-0}))
    if [ -z "$ok" ]; then fail=$((fail + 1)); fi # meson itself failed
}
log=$(mktemp)
# The caps: every ISA level below the one this CPU runs natively (the native
# setup covers that one), from the binary's own table (`mhabench --help`'s
# MHA_ISA= list and `info --json`'s isa_detected), never a list kept here.
levels=$(./build/mhabench --help 2>/dev/null | sed -n 's/^environment: MHA_ISA=\([^ ]*\) .*/\1/p' | tr '|' ' ')
native=$(./build/mhabench info --json 2>/dev/null | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["isa_detected"])' 2>/dev/null)
caps=""
for l in $levels; do
    [ "$l" = "$native" ] && break
    caps="$caps $l"
done
if [ -z "$levels" ] || [ -z "$native" ]; then
    echo "test.sh: could not read the ISA levels from ./build/mhabench (--help, info --json)"
    fail=$((fail + 1))
fi
for setup in native $caps; do
    echo "== meson test --setup $setup"
    meson test -C build --setup "$setup" --print-errorlogs 2>&1 | tee "$log"
    tally "$log"
done

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build"
if [ ! -f build-asan/build.ninja ]; then
    meson setup build-asan --buildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
if meson compile -C build-asan >"$log" 2>&1; then
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        meson test -C build-asan --setup sanitize --print-errorlogs 2>&1 | tee "$log"
    tally "$log"
else
    cat "$log"
    fail=$((fail + 1))
fi

echo "== fuzz smoke: each libFuzzer target of tests/fuzz for 10 s (scripts/fuzz.sh)"
if ./scripts/fuzz.sh 10 2>&1 | tee "$log"; then :; fi
f_line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
if [ -n "$f_line" ]; then
    pass=$((pass + $(echo "$f_line" | awk '{print $1}')))
    fail=$((fail + $(echo "$f_line" | awk '{print $3}')))
else
    fail=$((fail + 1))
fi
rm -f "$log"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
