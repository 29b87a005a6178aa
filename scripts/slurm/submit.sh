#!/usr/bin/env bash
# submit.sh - submits one fleet sweep to SLURM: an array job of N shards
# (sweep-shards.sbatch) on one CPU type, and the merge job (merge.sbatch) that
# runs after every shard succeeded. Prints the two job ids. Run it once per
# CPU type, with the same --run-id: the types' merged files land side by side
# in RUN/merged/ and the last merge job's report covers them all.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

usage() {
    cat <<USAGE
usage: submit.sh [options] [-- SWEEP_ARGS...]
  --preset P        sweep preset (default quick; full for a fleet campaign)
  --shards N        number of shards = array tasks (default 4)
  --shared DIR      folder shared by every node (default \$MHA_FLEET_DIR,
                    else \$HOME/mhabench-fleet)
  --run-id ID       the run's folder under DIR (default <preset>-<UTC time>);
                    reuse it for each CPU type of one campaign
  --partition P     the partition of one CPU type
  --constraint C    or a node feature naming one CPU type (--constraint)
  --label L         the CPU type's subfolder (default: the partition, else the
                    constraint, else 'default')
  --mhabench PATH   the binary, at the same path on every node (default
                    $root/build/mhabench when built, else mhabench on PATH)
  --time T          time limit per shard and for the merge (sbatch --time)
  --max-parallel K  at most K shards at once (--array=1-N%K)
  --sbatch-opt OPT  an option for both sbatch calls (e.g. --account=A); repeatable
  --no-report       do not run scripts/fleet_report.py after the merge
  SWEEP_ARGS        more \`mhabench sweep\` options (they override the preset's axes)
Layout: DIR/ID/LABEL/shard-I.json, DIR/ID/LABEL/logs/, DIR/ID/merged/, DIR/ID/report/.
Prints 'array_job=ID' and 'merge_job=ID' lines. Exit 0 submitted, 2 bad input.
USAGE
}
die() { echo "submit.sh: $*" >&2; exit 2; }
need_arg() { [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value (see --help)"; }

preset=quick shards=4 shared=${MHA_FLEET_DIR:-${HOME:-}/mhabench-fleet} run_id="" partition="" constraint=""
label="" mhabench="" time_limit="" max_parallel="" report=1
sbatch_opts=() sweep_args=()
while [ $# -gt 0 ]; do
    case $1 in
    -h | --help) usage; exit 0 ;;
    --preset) need_arg "$@"; preset=$2; shift 2 ;;
    --shards) need_arg "$@"; shards=$2; shift 2 ;;
    --shared) need_arg "$@"; shared=$2; shift 2 ;;
    --run-id) need_arg "$@"; run_id=$2; shift 2 ;;
    --partition) need_arg "$@"; partition=$2; shift 2 ;;
    --constraint) need_arg "$@"; constraint=$2; shift 2 ;;
    --label) need_arg "$@"; label=$2; shift 2 ;;
    --mhabench) need_arg "$@"; mhabench=$2; shift 2 ;;
    --time) need_arg "$@"; time_limit=$2; shift 2 ;;
    --max-parallel) need_arg "$@"; max_parallel=$2; shift 2 ;;
    --sbatch-opt) need_arg "$@"; sbatch_opts+=("$2"); shift 2 ;;
    --no-report) report=0; shift ;;
    --) shift; sweep_args=("$@"); break ;;
    *) die "unknown option '$1' (see --help)" ;;
    esac
done

command -v sbatch >/dev/null || die "sbatch is not on PATH (is this a SLURM login node?)"
case $shards in '' | *[!0-9]* | 0*) die "--shards '$shards': expected a positive integer" ;; esac
[ "$shards" -le 100000 ] || die "--shards $shards: at most 100000 (mhabench's limit)"
case $max_parallel in *[!0-9]* | 0*) die "--max-parallel '$max_parallel': expected a positive integer" ;; esac

if [ -z "$mhabench" ]; then
    if [ -x "$root/build/mhabench" ]; then mhabench=$root/build/mhabench
    else mhabench=$(command -v mhabench) || die "no mhabench: build it (meson compile -C build) or pass --mhabench PATH"
    fi
fi
[ -f "$mhabench" ] && [ -x "$mhabench" ] || die "--mhabench '$mhabench' is not an executable file"
mhabench=$(cd "$(dirname "$mhabench")" && pwd)/$(basename "$mhabench") # nodes need an absolute path
# The sweep arguments fail here, on the login node, rather than in N jobs.
"$mhabench" sweep --help >/dev/null 2>&1 || die "'$mhabench sweep --help' failed: not an mhabench?"
# The presets are the binary's (mhabench sweep --list-presets), not a list kept here.
presets=$("$mhabench" sweep --list-presets 2>/dev/null) || die "'$mhabench sweep --list-presets' failed: an mhabench older than this script?"
# (a here-string, not a pipe: under pipefail, grep -q leaving at its first
# match can end printf with SIGPIPE and fail a listed preset; seen in CI)
grep -qxF -- "$preset" <<<"$presets" ||
    die "--preset '$preset': expected one of $(printf '%s\n' "$presets" | paste -sd, - | sed 's/,/, /g')"
[ -z "$run_id" ] && run_id="$preset-$(date -u +%Y%m%dT%H%M%SZ)"
[ -z "$label" ] && label=${partition:-${constraint:-default}}
for v in "$run_id" "$label"; do
    case $v in *[!A-Za-z0-9._-]* | .*) die "'$v': a run id or label takes letters, digits, '.', '_', '-' (not leading '.')" ;; esac
done

[ -n "$shared" ] || die "no shared folder: pass --shared DIR or set MHA_FLEET_DIR"
mkdir -p "$shared" || die "cannot create --shared '$shared'"
shared=$(cd "$shared" && pwd)
run=$shared/$run_id
dir=$run/$label
mkdir -p "$dir/logs" "$run/merged" || die "cannot create '$dir/logs' under the shared folder"
# Old shard files would join this run's merge (and be refused as foreign).
shopt -s nullglob
old=("$dir"/shard-*.json)
[ ${#old[@]} -eq 0 ] || die "'$dir' already holds ${#old[@]} shard files: choose another --run-id or --label, or remove them"

common=(--parsable --chdir="$run")
[ -n "$partition" ] && common+=(--partition="$partition")
[ -n "$constraint" ] && common+=(--constraint="$constraint")
[ -n "$time_limit" ] && common+=(--time="$time_limit")
common+=("${sbatch_opts[@]}")

array="1-$shards${max_parallel:+%$max_parallel}"
shard_job=(--job-name="mhabench-sweep-$run_id" --output="$dir/logs/shard-%a-job%A.out"
    "$here/sweep-shards.sbatch" "$mhabench" "$dir" "$shards" --preset "$preset" "${sweep_args[@]}")
out=$(sbatch "${common[@]}" --array="$array" "${shard_job[@]}") || {
    rmdir "$dir/logs" "$dir" "$run/merged" "$run" 2>/dev/null || true # only what is still empty
    die "sbatch of the shard array failed (no cluster reachable? SLURM_CONF?)"
}
array_job=${out%%;*}

report_args=()
if [ "$report" -eq 1 ] && [ -f "$root/scripts/fleet_report.py" ]; then
    report_args=("$root/scripts/fleet_report.py" "$run/report")
fi
# singleton: the merge jobs of one run (one per CPU type, same name) run one at
# a time, so two reports never write RUN/report/ at once. kill-on-invalid-dep:
# a failed shard cancels the merge instead of leaving it pending forever.
out=$(sbatch "${common[@]}" --dependency="afterok:$array_job,singleton" --kill-on-invalid-dep=yes \
    --job-name="mhabench-merge-$run_id" --output="$dir/logs/merge-job%j.out" \
    "$here/merge.sbatch" "$mhabench" "$dir" "$run/merged" "${report_args[@]}") || {
    echo "submit.sh: sbatch of the merge job failed; cancelling array job $array_job" >&2
    scancel "$array_job" || true
    exit 2
}
merge_job=${out%%;*}

echo "submitted run '$run_id', CPU type '$label': $shards shards -> $dir/shard-I.json"
echo "  array job $array_job (sweep-shards.sbatch, --array=$array), logs in $dir/logs/"
echo "  merge job $merge_job (after every shard succeeded) -> $run/merged/"
echo "  a failed shard cancels the merge; rerun shards I,J (then merge) with"
printf '    sbatch --array=I,J'
printf ' %q' "${common[@]:1}" "${shard_job[@]}"
printf '\n    %q merge %q/shard-*.json --out-dir %q\n' "$mhabench" "$dir" "$run/merged"
echo "array_job=$array_job"
echo "merge_job=$merge_job"
