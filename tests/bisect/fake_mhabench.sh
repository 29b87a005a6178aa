#!/bin/sh
# A stand-in for mhabench's `sweep --preset ci --out F`, for tests/test_bisect.c:
# writes two benchmarks of 9 repetitions with +-2% random noise; the first
# takes ../factor (the checkout's) times as long. Anything else is an error.
set -eu
[ "${1:-}" = sweep ] || { echo "fake mhabench: only 'sweep'" >&2; exit 2; }
out=
while [ $# -gt 0 ]; do
    [ "$1" = --out ] && out=$2
    shift
done
[ -n "$out" ] || { echo "fake mhabench: no --out" >&2; exit 2; }
factor=$(cat "$(dirname "$0")/../factor")
seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
awk -v f="$factor" -v seed="$seed" 'BEGIN {
    srand(seed % 2147483647) # mawk saturates larger seeds: every run would repeat one stream
    printf "{\"context\": {\"mha_cpu_key\": \"fake-f1m1-avx2\", \"mha_isa_active\": \"avx2\", \"mha_cores\": \"2\"},\n \"benchmarks\": ["
    n = 0
    for (b = 0; b < 2; b++)
        for (r = 0; r < 9; r++) {
            t = 1000 * (b + 1) * (b == 0 ? f : 1) * (1 + 0.04 * (rand() - 0.5))
            printf "%s\n  {\"name\": \"flash.avx2/B:1/H:1/KV:1/Nq:%d/Nkv:%d/d:64/causal:0/threads:1\", \"run_type\": \"iteration\", \"repetitions\": 9, \"repetition_index\": %d, \"threads\": 1, \"iterations\": 10, \"real_time\": %.6f, \"cpu_time\": %.6f, \"time_unit\": \"ns\"}", (n++ ? "," : ""), 128 * (b + 1), 128 * (b + 1), r, t, t
        }
    print "\n]}"
}' >"$out"
