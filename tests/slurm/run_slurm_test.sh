#!/usr/bin/env bash
# run_slurm_test.sh MHABENCH SUBMIT_SH - the fleet recipes on a real SLURM: a
# one-node cluster on localhost (munged, slurmctld, slurmd, all state in a
# scratch folder), a 2-shard sweep submitted through scripts/slurm/submit.sh,
# its merge job, and a check that the merged file holds exactly the unsharded
# sweep's benchmarks; then a run with a failing shard, whose merge must not run;
# then more shards than benchmarks, whose empty shards succeed and merge.
# Exit 0 pass, 1 fail, 77 skip (meson's protocol) where the daemons cannot run.
set -euo pipefail
PATH=$PATH:/usr/sbin:/sbin

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; dump_logs; exit 1; }
say() { echo "slurm-test: $*"; }

[ $# -eq 2 ] || { echo "usage: run_slurm_test.sh MHABENCH SUBMIT_SH" >&2; exit 2; }
mhabench=$1 submit=$2
[ -x "$mhabench" ] || { echo "run_slurm_test.sh: '$mhabench' is not executable" >&2; exit 2; }
[ -x "$submit" ] || { echo "run_slurm_test.sh: '$submit' is not executable" >&2; exit 2; }

for p in munged slurmctld slurmd sbatch squeue sinfo scontrol scancel; do
    command -v "$p" >/dev/null || skip "$p is not installed (Debian: slurmctld slurmd slurm-client munge)"
done
[ -x /usr/bin/python3 ] || skip "/usr/bin/python3 is absent (the JSON checks use it)"
# slurmd starts every job as its submitter and needs root for that; munged and
# slurmctld would run as a user, but a cluster without slurmd runs nothing.
[ "$(id -u)" -eq 0 ] || skip "slurmd must run as root to start jobs (this is uid $(id -u))"

# The sweep: seconds long, 4 benchmarks, so that 2 shards of it each hold some.
sweep=(--seq 64 --heads 2 --head-dim 32 --causal 0,1 --threads 1 --min-time 0.002
    --kernels naive,flash.scalar)

t0=$(date +%s)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/mha-slurm-test.XXXXXX")
# munged wants every directory above its socket searchable by all.
chmod 755 "$scratch"
pids=()
cleanup() {
    local rc=$? pid i
    set +e
    if [ -n "${SLURM_CONF:-}" ] && [ -f "$SLURM_CONF" ]; then
        scancel --quiet --full "${jobs_seen[@]}" 2>/dev/null
    fi
    # Stop slurmd first (it may still be finishing a job), then slurmctld, munged.
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        pid=${pids[i]}
        kill "$pid" 2>/dev/null || continue
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    if [ -f "$scratch/munge/munged.pid" ]; then
        pid=$(cat "$scratch/munge/munged.pid")
        kill "$pid" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null
    fi
    rm -rf "$scratch"
    exit "$rc"
}
jobs_seen=()
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

dump_logs() {
    local f
    for f in "$scratch"/log/*.log "$scratch"/munge/munged.log "$scratch"/shared/*/*/logs/*; do
        [ -f "$f" ] || continue
        echo "---- $f (last 30 lines)"
        tail -n 30 "$f"
    done
}

# ---- munge: a key and a daemon of our own, socket in the scratch folder ------
mkdir -p "$scratch/munge" "$scratch/state" "$scratch/spool" "$scratch/log" "$scratch/shared"
chmod 700 "$scratch/state" "$scratch/spool"
dd if=/dev/urandom of="$scratch/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$scratch/munge/munge.key"
sock=$scratch/munge/munge.socket
munged --socket="$sock" --key-file="$scratch/munge/munge.key" --pid-file="$scratch/munge/munged.pid" \
    --log-file="$scratch/munge/munged.log" --seed-file="$scratch/munge/munged.seed" ||
    skip "munged does not start here: $(tail -n 1 "$scratch/munge/munged.log" 2>/dev/null)"
munge -S "$sock" -n </dev/null | unmunge -S "$sock" >/dev/null ||
    skip "munged started but does not encode/decode a credential"

# ---- slurm.conf: one node (this host, as slurmd -C sees it), one partition ----
ports=$(/usr/bin/python3 -c '
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')
read -r ctld_port slurmd_port <<<"$ports"
host=$(hostname -s)
# slurmd -C prints this machine's NodeName line (sockets, cores, threads,
# memory); a node configured with more than it has would be drained.
node=$(slurmd -C | head -n 1) || skip "slurmd -C cannot read this machine's hardware"
case $node in "NodeName=$host "*) ;; *) skip "slurmd -C says '$node', not NodeName=$host" ;; esac
export SLURM_CONF=$scratch/slurm.conf
cat >"$SLURM_CONF" <<CONF
# written by tests/slurm/run_slurm_test.sh; everything lives in $scratch
ClusterName=mhatest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$(id -un)
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$scratch/state
SlurmdSpoolDir=$scratch/spool/slurmd-%n
SlurmctldPidFile=$scratch/slurmctld.pid
SlurmdPidFile=$scratch/slurmd.pid
SlurmctldLogFile=$scratch/log/slurmctld.log
SlurmdLogFile=$scratch/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$scratch/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
MinJobAge=600
MailProg=/bin/true
$node NodeAddr=127.0.0.1
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
: >"$scratch/plugstack.conf"

# ---- the daemons, in the foreground of background jobs (their pids are ours) --
slurmctld -D -c -f "$SLURM_CONF" >"$scratch/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N "$host" >"$scratch/log/slurmd.out" 2>&1 &
pids+=($!)
state=""
for _ in $(seq 60); do
    for pid in "${pids[@]}"; do
        kill -0 "$pid" 2>/dev/null || {
            cat "$scratch"/log/*.out
            dump_logs
            skip "a SLURM daemon exited at start (logs above)"
        }
    done
    state=$(sinfo -h -N -o '%T' 2>/dev/null | head -n 1) || true
    [ "$state" = idle ] && break
    sleep 0.5
done
[ "$state" = idle ] || { dump_logs; skip "the node did not become idle within 30 s (state '$state')"; }
say "one-node cluster up in $(($(date +%s) - t0)) s (node $host, ports $ctld_port/$slurmd_port)"

# ---- what the shards must add up to: the same sweep, unsharded, here ---------
"$mhabench" sweep "${sweep[@]}" --out "$scratch/unsharded.json" >"$scratch/log/unsharded.log" 2>&1 ||
    fail "the unsharded sweep failed: $(tail -n 3 "$scratch/log/unsharded.log")"

# Submits through submit.sh; sets array_job and merge_job.
submit_run() { # RUN_ID SHARDS SWEEP_ARGS...
    local run_id=$1 shards=$2 out
    shift 2
    out=$("$submit" --shards "$shards" --shared "$scratch/shared" --run-id "$run_id" --partition test \
        --mhabench "$mhabench" --time 5 -- "$@" 2>&1) || fail "submit.sh failed: $out"
    echo "$out"
    array_job=$(sed -n 's/^array_job=\([0-9][0-9]*\)$/\1/p' <<<"$out")
    merge_job=$(sed -n 's/^merge_job=\([0-9][0-9]*\)$/\1/p' <<<"$out")
    [ -n "$array_job" ] && [ -n "$merge_job" ] || fail "submit.sh printed no array_job=/merge_job= lines"
    jobs_seen+=("$array_job" "$merge_job")
}
# Waits (bounded) until neither job is in the queue; no sacct without accounting.
wait_gone() { # SECONDS
    local left
    for _ in $(seq $(($1 * 2))); do
        left=$(squeue -h -j "$array_job,$merge_job" -o '%i %T' 2>/dev/null) || true
        [ -z "$left" ] && return 0
        sleep 0.5
    done
    fail "jobs still queued after $1 s: $left"
}
# The states of a job (one line per array task) while slurmctld remembers it.
job_states() { scontrol show job "$1" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | sort | uniq -c | tr -s ' \n' ' '; }

# ---- 1. a good run: 2 shards, then the merge -------------------------------
t1=$(date +%s)
submit_run good 2 "${sweep[@]}"
wait_gone 180
run=$scratch/shared/good
say "run 'good' done in $(($(date +%s) - t1)) s: array $(job_states "$array_job"), merge $(job_states "$merge_job")"
[ "$(job_states "$array_job")" = " 2 COMPLETED " ] || fail "array job $array_job: $(job_states "$array_job")"
[ "$(job_states "$merge_job")" = " 1 COMPLETED " ] || fail "merge job $merge_job: $(job_states "$merge_job")"
shopt -s nullglob
merged=("$run"/merged/*.json)
[ ${#merged[@]} -eq 1 ] || fail "expected one merged file in $run/merged, found ${#merged[@]}"
/usr/bin/python3 - "$scratch/unsharded.json" "${merged[0]}" "$run/test/shard-1.json" "$run/test/shard-2.json" <<'PY' ||
import json, sys
def load(p):
    with open(p) as f:
        return json.load(f)
def names(d):
    return sorted({b["name"] for b in d["benchmarks"] if b.get("run_type", "iteration") == "iteration"})  # distinct: retakes repeat a name
whole, merged = load(sys.argv[1]), load(sys.argv[2])
shards = [load(p) for p in sys.argv[3:]]
ok = True
if names(merged) != names(whole):
    print("merged rows differ from the unsharded sweep's:\n  merged   %s\n  unsharded %s" % (names(merged), names(whole)))
    ok = False
for i, s in enumerate(shards, 1):
    if s["context"].get("mha_shard") != "%d/2" % i:
        print("shard-%d.json says mha_shard=%r" % (i, s["context"].get("mha_shard")))
        ok = False
    if not names(s):
        print("shard-%d.json holds no benchmark" % i)
        ok = False
# The shards partition the list: no row in two of them.
rows = [n for s in shards for n in names(s)]
if len(rows) != len(set(rows)):
    print("a benchmark is in both shards: %s" % rows)
    ok = False
# One list: both shards were cut from the same sweep (the unsharded file has no hash).
lists = [s["context"].get("mha_sweep_list") for s in shards]
if None in lists or len(set(lists)) != 1:
    print("mha_sweep_list of the shards: %s" % lists)
    ok = False
print("merged file: %d benchmarks = the unsharded list (shards %s)" %
      (len(names(merged)), " + ".join(str(len(names(s))) for s in shards)))
sys.exit(0 if ok else 1)
PY
    fail "the merged file does not match the unsharded sweep"
if [ -f "$(dirname "$submit")/../fleet_report.py" ]; then
    report=("$run"/report/*)
    [ ${#report[@]} -gt 0 ] || fail "scripts/fleet_report.py exists but $run/report/ is empty"
    say "report: ${report[*]##*/}"
fi

# ---- 2. a failing shard: the merge must be cancelled, not run or left pending -
t1=$(date +%s)
submit_run bad 2 "${sweep[@]}" --kernels no.such.kernel
wait_gone 60
say "run 'bad' done in $(($(date +%s) - t1)) s: array $(job_states "$array_job"), merge $(job_states "$merge_job")"
[ "$(job_states "$array_job")" = " 2 FAILED " ] || fail "array job $array_job of a bad sweep: $(job_states "$array_job")"
[ "$(job_states "$merge_job")" = " 1 CANCELLED " ] || fail "merge job $merge_job after failed shards: $(job_states "$merge_job")"
merged=("$scratch/shared/bad"/merged/*.json)
[ ${#merged[@]} -eq 0 ] || fail "a merged file exists after failed shards"

# ---- 3. more shards than benchmarks: empty shards are shards, the merge runs --
one=(--seq 64 --heads 2 --head-dim 32 --causal 0 --threads 1 --min-time 0.002 --kernels naive)
"$mhabench" sweep "${one[@]}" --out "$scratch/one.json" >"$scratch/log/one.log" 2>&1 ||
    fail "the one-benchmark sweep failed: $(tail -n 3 "$scratch/log/one.log")"
t1=$(date +%s)
submit_run empty 3 "${one[@]}"
wait_gone 180
run=$scratch/shared/empty
say "run 'empty' done in $(($(date +%s) - t1)) s: array $(job_states "$array_job"), merge $(job_states "$merge_job")"
[ "$(job_states "$array_job")" = " 3 COMPLETED " ] || fail "array job $array_job with empty shards: $(job_states "$array_job")"
[ "$(job_states "$merge_job")" = " 1 COMPLETED " ] || fail "merge job $merge_job after empty shards: $(job_states "$merge_job")"
merged=("$run"/merged/*.json)
[ ${#merged[@]} -eq 1 ] || fail "expected one merged file in $run/merged, found ${#merged[@]}"
/usr/bin/python3 - "$scratch/one.json" "${merged[0]}" "$run"/test/shard-{1,2,3}.json <<'PY' ||
import json, sys
def load(p):
    with open(p) as f:
        return json.load(f)
def names(d):
    return sorted({b["name"] for b in d["benchmarks"] if b.get("run_type", "iteration") == "iteration"})
whole, merged = load(sys.argv[1]), load(sys.argv[2])
shards = [load(p) for p in sys.argv[3:]]
ok = names(merged) == names(whole) and len(names(whole)) == 1
if not ok:
    print("merged %s, unsharded %s" % (names(merged), names(whole)))
sizes = [len(names(s)) for s in shards]
if sorted(sizes) != [0, 0, 1]:
    print("rows per shard %s, expected one shard of 1 and two empty" % sizes)
    ok = False
print("merged file: %s (shards %s)" % (names(merged), " + ".join(map(str, sizes))))
sys.exit(0 if ok else 1)
PY
    fail "the merge of a run with empty shards does not match the unsharded sweep"

say "PASS in $(($(date +%s) - t0)) s"
