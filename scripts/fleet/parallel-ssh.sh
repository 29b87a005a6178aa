#!/usr/bin/env bash
# parallel-ssh.sh - the fleet sweep without a scheduler: GNU parallel runs the
# N shards of `mhabench sweep --shard I/N` over ssh on the hosts of a hosts
# file (one CPU type per file), one shard at a time per host, copies each
# result back here, then merges them (and runs scripts/fleet_report.py when it
# exists). Rerunning the same command runs only the shards still missing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

usage() {
    cat <<USAGE
usage: parallel-ssh.sh --hosts FILE [options] [-- SWEEP_ARGS...]
  --hosts FILE      one ssh destination (host or user@host) per line, '#'
                    comments; hosts of one CPU type (another type: its own
                    hosts file and --out, the same --merged)
  --preset P        sweep preset (default quick)
  --shards N        number of shards (default: the number of hosts)
  --out DIR         where shard-I.json, logs/ and merged/ go (default
                    ./fleet-<preset>-<UTC time>); reuse it to resume
  --mhabench PATH   the binary on the hosts (default: mhabench on their PATH)
  --local-mhabench PATH  the binary here, for the merge (default
                    $root/build/mhabench when built, else mhabench on PATH)
  --ssh CMD         the ssh command (default 'ssh -o BatchMode=yes'); it gets
                    the host and a shell command, as ssh does
  --merged DIR      where the merged file goes (default OUT/merged); one
                    file per CPU fingerprint, so CPU types can share it; the
                    report (in DIR/../report) covers every file there
  --no-report       do not run scripts/fleet_report.py
  SWEEP_ARGS        more \`mhabench sweep\` options (they override the preset's axes)
Shard I runs on the host of GNU parallel's job slot, so each host runs one
shard at a time (a benchmark never shares its host with another shard).
Exit 0 merged, 1 a shard or the merge failed (rerun to retry), 2 bad input.
USAGE
}
die() { echo "parallel-ssh.sh: $*" >&2; exit 2; }
need_arg() { [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value (see --help)"; }

hosts_file="" preset=quick shards="" out="" remote_bin=mhabench local_bin="" ssh_cmd="ssh -o BatchMode=yes"
report=1 merged="" sweep_args=()
while [ $# -gt 0 ]; do
    case $1 in
    -h | --help) usage; exit 0 ;;
    --hosts) need_arg "$@"; hosts_file=$2; shift 2 ;;
    --preset) need_arg "$@"; preset=$2; shift 2 ;;
    --shards) need_arg "$@"; shards=$2; shift 2 ;;
    --out) need_arg "$@"; out=$2; shift 2 ;;
    --mhabench) need_arg "$@"; remote_bin=$2; shift 2 ;;
    --local-mhabench) need_arg "$@"; local_bin=$2; shift 2 ;;
    --ssh) need_arg "$@"; ssh_cmd=$2; shift 2 ;;
    --merged) need_arg "$@"; merged=$2; shift 2 ;;
    --no-report) report=0; shift ;;
    --) shift; sweep_args=("$@"); break ;;
    *) die "unknown option '$1' (see --help)" ;;
    esac
done

command -v parallel >/dev/null || die "GNU parallel is not installed (Debian: apt-get install parallel)"
parallel --version 2>/dev/null | grep -q 'GNU parallel' || die "'parallel' is not GNU parallel (moreutils has one too)"
[ -n "$hosts_file" ] || die "--hosts FILE is required (see --help)"
[ -r "$hosts_file" ] || die "--hosts '$hosts_file' is not a readable file"
mapfile -t hosts < <(sed -e 's/#.*//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' "$hosts_file" | grep -v '^$' || true)
[ ${#hosts[@]} -gt 0 ] || die "--hosts '$hosts_file' names no host"
dup=$(printf '%s\n' "${hosts[@]}" | sort | uniq -d | head -n 1)
[ -z "$dup" ] || die "host '$dup' is twice in '$hosts_file': two shards would share it and measure each other"
for h in "${hosts[@]}"; do
    case $h in *[[:space:]]*) die "'$h' in '$hosts_file': one host per line, no options" ;; esac
done
shards=${shards:-${#hosts[@]}}
case $shards in '' | *[!0-9]* | 0*) die "--shards '$shards': expected a positive integer" ;; esac
[ "$shards" -le 100000 ] || die "--shards $shards: at most 100000 (mhabench's limit)"
read -r -a ssh_words <<<"$ssh_cmd"
command -v "${ssh_words[0]}" >/dev/null || die "--ssh '$ssh_cmd': '${ssh_words[0]}' is not a command"

if [ -z "$local_bin" ]; then
    if [ -x "$root/build/mhabench" ]; then local_bin=$root/build/mhabench
    else local_bin=$(command -v mhabench) || die "no mhabench here for the merge: pass --local-mhabench PATH"
    fi
fi
[ -f "$local_bin" ] && [ -x "$local_bin" ] || die "--local-mhabench '$local_bin' is not an executable file"
# The presets are the binary's (mhabench sweep --list-presets), not a list kept here.
presets=$("$local_bin" sweep --list-presets 2>/dev/null) || die "'$local_bin sweep --list-presets' failed: an mhabench older than this script?"
# (a here-string, not a pipe: under pipefail, grep -q leaving at its first
# match can end printf with SIGPIPE and fail a listed preset; seen in CI)
grep -qxF -- "$preset" <<<"$presets" ||
    die "--preset '$preset': expected one of $(printf '%s\n' "$presets" | paste -sd, - | sed 's/,/, /g')"

out=${out:-fleet-$preset-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out/logs" || die "cannot create '$out/logs'"
out=$(cd "$out" && pwd)
merged=${merged:-$out/merged}
mkdir -p "$merged" || die "cannot create --merged '$merged'"
merged=$(cd "$merged" && pwd)

# The command each host runs (a POSIX shell there): the sweep into a private
# temporary file, its log on stderr, the file on stdout. Arguments are quoted
# here once; the shard's own "--shard I/N" is appended per job.
remote_sweep=$(printf '%q ' "$remote_bin" sweep --preset "$preset" "${sweep_args[@]}")
export PSSH_OUT=$out PSSH_N=$shards PSSH_SWEEP=$remote_sweep PSSH_SSH=$ssh_cmd
PSSH_HOSTS=$(printf '%s\n' "${hosts[@]}")
export PSSH_HOSTS

# run_shard SLOT I: shard I on the host of job slot SLOT (1..hosts).
run_shard() {
    local slot=$1 i=$2 host part ssh_words
    host=$(sed -n "${slot}p" <<<"$PSSH_HOSTS")
    part="$PSSH_OUT/shard-$i.json.part"
    read -r -a ssh_words <<<"$PSSH_SSH"
    echo "shard $i/$PSSH_N on $host" >"$PSSH_OUT/logs/shard-$i.log"
    # shellcheck disable=SC2016 # $t is the remote shell's
    if "${ssh_words[@]}" "$host" 't=$(mktemp -d) || exit 1; '"$PSSH_SWEEP"' --shard '"$i/$PSSH_N"' --out "$t/shard.json" >&2; rc=$?; [ $rc -eq 0 ] && cat "$t/shard.json"; rm -rf "$t"; exit $rc' \
        >"$part" 2>>"$PSSH_OUT/logs/shard-$i.log" </dev/null && [ -s "$part" ]; then
        mv -f "$part" "$PSSH_OUT/shard-$i.json" # complete files only, under their final name
    else
        rm -f "$part"
        echo "shard $i/$PSSH_N on $host failed; its log: $PSSH_OUT/logs/shard-$i.log" >&2
        return 1
    fi
}
export -f run_shard

todo=()
for ((i = 1; i <= shards; i++)); do
    [ -s "$out/shard-$i.json" ] || todo+=("$i")
done
echo "parallel-ssh: ${#todo[@]} of $shards shards to run on ${#hosts[@]} hosts -> $out/"
if [ ${#todo[@]} -gt 0 ]; then
    # -j hosts: job slot s always maps to host s, so a host runs one shard at a time.
    SHELL=$(command -v bash) parallel --will-cite -j "${#hosts[@]}" --halt never \
        --joblog "$out/logs/joblog" run_shard '{%}' '{}' ::: "${todo[@]}" || true
fi

missing=()
for ((i = 1; i <= shards; i++)); do
    [ -s "$out/shard-$i.json" ] || missing+=("$i")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "parallel-ssh: shards ${missing[*]} of $shards failed (logs in $out/logs/); run the same command again to retry them" >&2
    exit 1
fi

"$local_bin" merge "$out"/shard-*.json --out-dir "$merged" || {
    echo "parallel-ssh: the merge refused the shards (see above)" >&2
    exit 1
}
if [ "$report" -eq 1 ] && [ -f "$root/scripts/fleet_report.py" ] && [ -x /usr/bin/python3 ]; then
    /usr/bin/python3 "$root/scripts/fleet_report.py" report "$merged"/*.json -o "$(dirname "$merged")/report" ||
        echo "parallel-ssh: the report failed (the merged files are complete)" >&2
fi
echo "parallel-ssh: merged -> $merged/"
