#!/bin/sh
# Every peer one command away (issue 27): scripts/peers/setup-all.sh reads
# the environments to make from harness/peers/peers_py.inc; --list must name
# one executable setup script per distinct environment of the list (so a
# change of the list's format, or a peer whose script is missing, fails here,
# not on a user's machine after an 11 GB download). Usage: test_peer_setup.sh SRC
set -eu
src=$1
out=$("$src/scripts/peers/setup-all.sh" --list)
echo "$out"
n=$(printf '%s\n' "$out" | grep -c .)
want=$(sed -n 's/^PY([^,]*,[^,]*, *"\([^"]*\)".*/\1/p' "$src/harness/peers/peers_py.inc" | sort -u | wc -l)
[ "$n" -eq "$want" ] || { echo "setup-all.sh --list: $n scripts for $want environments" >&2; exit 1; }
[ "$n" -ge 4 ] || { echo "fewer than 4 environments (torch's, zentorch's, ggml's, vllm's)" >&2; exit 1; }
printf '%s\n' "$out" | while read -r s; do
    [ -x "$src/$s" ] || { echo "$s: not executable" >&2; exit 1; }
    bash -n "$src/$s"
done
# a PY line without a setup script is refused, with the count
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/scripts/peers" "$tmp/harness/peers"
cp "$src/scripts/peers/"*.sh "$tmp/scripts/peers/"
cp "$src/harness/peers/peers_py.inc" "$tmp/harness/peers/"
echo 'PY(broken, "MHA_X", ".venv-x")' >>"$tmp/harness/peers/peers_py.inc"
if "$tmp/scripts/peers/setup-all.sh" --list >"$tmp/log" 2>&1; then
    echo "setup-all.sh --list took a PY line without a setup script" >&2
    exit 1
fi
grep -q "PY lines, .* with a setup script" "$tmp/log"
echo "setup-all.sh --list: ok"
# an environment path that is a dangling link (as three committed links once
# were) is refused by name before anything is installed
# (every setup script setup-all.sh lists: the messages come from venv-common.sh)
for path in $out; do
    s=$(basename "$path")
    ln -sfn "$tmp/nowhere" "$tmp/link"
    if "$src/$path" "$tmp/link" >"$tmp/log" 2>&1; then
        echo "$s took a dangling link" >&2
        exit 1
    fi
    grep -q "$s: $tmp/link is a link to $tmp/nowhere, which does not exist" "$tmp/log" ||
        { cat "$tmp/log" >&2; exit 1; }
done
echo "dangling links: ok"
