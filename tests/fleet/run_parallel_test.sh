#!/usr/bin/env bash
# run_parallel_test.sh MHABENCH PARALLEL_SSH_SH - scripts/fleet/parallel-ssh.sh
# with GNU parallel and a fake ssh (tests/fleet/fake_ssh.sh, a local POSIX
# shell) on two "hosts": 3 shards, one failing on its first try (resume must
# rerun only it), merged rows = the unsharded sweep's, each host one shard at
# a time. Exit 0 pass, 1 fail, 77 skip when GNU parallel is absent.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: run_parallel_test.sh MHABENCH PARALLEL_SSH_SH" >&2; exit 2; }
mhabench=$1 pssh=$2
fake=$(cd "$(dirname "$0")" && pwd)/fake_ssh.sh
parallel --version 2>/dev/null | grep -q 'GNU parallel' || { echo "SKIP: GNU parallel is not installed"; exit 77; }
[ -x /usr/bin/python3 ] || { echo "SKIP: /usr/bin/python3 is absent"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

scratch=$(mktemp -d "${TMPDIR:-/tmp}/mha-parallel-test.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
sweep=(--seq 64 --heads 2 --head-dim 32 --causal 0,1 --threads 1 --min-time 0.002 --kernels naive,flash.scalar)
printf '# two names for this machine\nhost-a\nhost-b   # trailing comment\n\n' >"$scratch/hosts"
export FAKE_SSH_LOG=$scratch/ssh.log

# An unknown preset is refused before any host is asked, with the names the
# binary's own list gives (sweep --list-presets), the new ones included.
rc=0
"$pssh" --hosts "$scratch/hosts" --preset quik --out "$scratch/bad" --ssh "$fake" \
    --local-mhabench "$mhabench" >"$scratch/bad.log" 2>&1 || rc=$?
[ $rc -eq 2 ] || fail "--preset quik: exit $rc, expected 2"
for p in $("$mhabench" sweep --list-presets); do
    grep -q -- "$p" "$scratch/bad.log" || fail "--preset quik's message does not name preset $p: $(cat "$scratch/bad.log")"
done
[ ! -e "$scratch/bad" ] || fail "--preset quik created its --out folder"
[ ! -s "$FAKE_SSH_LOG" ] || fail "--preset quik reached a host"

# First try: a remote binary that fails for shard 2 only, as a host might.
cat >"$scratch/flaky" <<FLAKY
#!/bin/sh
case "\$*" in *"--shard 2/3"*) echo "flaky: shard 2 fails this time" >&2; exit 1 ;; esac
exec "$mhabench" "\$@"
FLAKY
chmod +x "$scratch/flaky"
rc=0
"$pssh" --hosts "$scratch/hosts" --shards 3 --out "$scratch/run" --ssh "$fake" --mhabench "$scratch/flaky" \
    --local-mhabench "$mhabench" --no-report -- "${sweep[@]}" >"$scratch/try1.log" 2>&1 || rc=$?
cat "$scratch/try1.log"
[ $rc -eq 1 ] || fail "a failed shard: exit $rc, expected 1"
[ -f "$scratch/run/shard-1.json" ] && [ -f "$scratch/run/shard-3.json" ] || fail "shards 1 and 3 are missing"
[ ! -e "$scratch/run/shard-2.json" ] && [ ! -e "$scratch/run/shard-2.json.part" ] || fail "failed shard 2 left a file"

# Both hosts worked, each one shard at a time.
/usr/bin/python3 - "$FAKE_SSH_LOG" <<'PY' || fail "the hosts' shard times above overlap or a host was idle"
import collections, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    host, what, t = line.split()
    if what == "start":
        runs[host].append([float(t), None])
    else:
        next(r for r in runs[host] if r[1] is None)[1] = float(t)
print("shards per host: %s" % {h: len(r) for h, r in sorted(runs.items())})
ok = sorted(runs) == ["host-a", "host-b"]
for h, r in runs.items():
    r.sort()
    ok = ok and all(a[1] <= b[0] for a, b in zip(r, r[1:]))
sys.exit(0 if ok else 1)
PY

# Second try: the same command with a working binary runs shard 2 only, then merges.
: >"$FAKE_SSH_LOG"
"$pssh" --hosts "$scratch/hosts" --shards 3 --out "$scratch/run" --ssh "$fake" --mhabench "$mhabench" \
    --local-mhabench "$mhabench" --no-report -- "${sweep[@]}" || fail "the resumed run failed"
[ "$(grep -c ' start ' "$FAKE_SSH_LOG")" -eq 1 ] || fail "the resumed run ran $(grep -c ' start ' "$FAKE_SSH_LOG") shards, expected 1"

"$mhabench" sweep "${sweep[@]}" --out "$scratch/unsharded.json" >/dev/null 2>&1 || fail "the unsharded sweep failed"
/usr/bin/python3 - "$scratch/unsharded.json" "$scratch"/run/merged/*.json <<'PY' || fail "merged rows differ from the unsharded sweep's"
import json, sys
def names(p):
    with open(p) as f:
        return sorted({b["name"] for b in json.load(f)["benchmarks"] if b.get("run_type", "iteration") == "iteration"})  # distinct: retakes repeat a name
if len(sys.argv) != 3:
    sys.exit("expected one merged file, got %d" % (len(sys.argv) - 2))
whole, merged = names(sys.argv[1]), names(sys.argv[2])
print("merged %d rows, unsharded %d" % (len(merged), len(whole)))
sys.exit(0 if merged == whole else 1)
PY
echo "PASS"
