#!/bin/sh
# One answer per result file (issue 26): the sweep's summary (`mhabench
# report`, what the sweep prints from the file it wrote), scripts/summarize.py
# and scripts/plot_results.py's fastest-kernel map decide the same fastest
# kernel and the same tied set for every (shape, threads) group.
# tests/data/one_answer.json holds the cases the rule turns on (a disturbed
# repetition that would make a tie, an auto row and a peer faster than every
# kernel of ours, equal medians, every repetition disturbed, an aggregate row,
# a failed row, a layer row and a bf16 group); one_answer.decisions is the
# answer worked out by hand. Then every committed sweep file under results/
# (read only). Usage: test_one_answer.sh MHABENCH SOURCE_ROOT
set -eu
mhabench=$1
src=$2
py=/usr/bin/python3
[ -x "$py" ] || py=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # file [expected]
    "$mhabench" report --decisions "$1" >"$tmp/c"
    "$py" "$src/scripts/summarize.py" --decisions "$1" >"$tmp/s"
    "$py" "$src/scripts/plot_results.py" --decisions "$1" >"$tmp/p"
    if [ ! -s "$tmp/c" ]; then
        echo "FAIL $1: mhabench report --decisions printed nothing"
        fail=1
        return
    fi
    if ! cmp -s "$tmp/c" "$tmp/s"; then
        echo "FAIL $1: summarize.py disagrees with mhabench report:"
        diff "$tmp/c" "$tmp/s" || true
        fail=1
    fi
    if ! cmp -s "$tmp/c" "$tmp/p"; then
        echo "FAIL $1: plot_results.py disagrees with mhabench report:"
        diff "$tmp/c" "$tmp/p" || true
        fail=1
    fi
    if [ $# -gt 1 ] && ! cmp -s "$tmp/c" "$2"; then
        echo "FAIL $1: the decisions are not the ones worked out by hand ($2):"
        diff "$2" "$tmp/c" || true
        fail=1
    fi
    echo "ok $1: $(wc -l <"$tmp/c") groups agree"
}
check "$src/tests/data/one_answer.json" "$src/tests/data/one_answer.decisions"
n=0
for f in "$src"/results/*.json "$src"/results/runs/*.json "$src"/results/baselines/*.json; do
    [ -f "$f" ] || continue
    case "$f" in *.noise.json) continue ;; esac
    grep -q '"benchmarks"' "$f" || continue
    check "$f"
    n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "FAIL: no committed result file found under $src/results"; exit 1; }
exit $fail
