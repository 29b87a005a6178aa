#!/bin/bash
# setup-all.sh - every peer one command away: installs the C peers' Debian
# packages (oneDNN, libxsmm), makes each Python peer's environment with its
# pinned versions (the setup scripts named in harness/peers/peers_py.inc:
# setup-venv.sh for torch, onnxruntime and openvino; setup-venv-zentorch.sh,
# setup-venv-ggml.sh and setup-venv-vllm.sh for zentorch, ggml and vllm,
# whose PyTorch or build differs), reconfigures and builds BUILD_DIR so
# the C peers are compiled, and prints which peers now run (a seconds-long
# functional sweep, not a measurement). Safe to run again: what is there is
# kept (pip finds its pins satisfied).
#
#   scripts/peers/setup-all.sh [BUILD_DIR]     (default: build)
#   scripts/peers/setup-all.sh --list          the environments' setup scripts, one a line
#
# Downloads about 16 GB from PyPI the first time (three PyTorch wheels).
# Exit status: 0 when every peer runs here, 1 when one does not (each
# "not available" line says why), 2 when a step failed.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
build=${1:-build}

# Each environment's setup script once, as peers_py.inc names them (several
# peers may share one); every PY line must name one.
npy=$(grep -c '^PY(' harness/peers/peers_py.inc || true)
nparsed=$(sed -n 's/^PY([^,]*,[^,]*,[^,]*, *"\([^"]*\)").*/\1/p' harness/peers/peers_py.inc | wc -l)
mapfile -t setups < <(sed -n 's/^PY([^,]*,[^,]*,[^,]*, *"\([^"]*\)").*/\1/p' \
    harness/peers/peers_py.inc | awk '!seen[$0]++')
if [ "$npy" -eq 0 ] || [ "$nparsed" -ne "$npy" ]; then
    echo "setup-all.sh: harness/peers/peers_py.inc: $npy PY lines, $nparsed with a setup script" >&2
    exit 2
fi
for s in "${setups[@]}"; do
    [ -x "$repo/$s" ] || {
        echo "setup-all.sh: $s (named in harness/peers/peers_py.inc) is not an executable file" >&2
        exit 2
    }
done
if [ "$build" = --list ]; then
    printf '%s\n' "${setups[@]}"
    exit 0
fi

step() { echo; echo "== setup-all.sh: $*"; }

step "Debian packages of the C peers (and python3-venv for the environments)"
# libdnnl-dev: oneDNN 2.6 (peer_onednn.c); libxsmm-dev: libxsmm 1.17 with its
# pkg-config file and libxsmmnoblas (peer_libxsmm.c); cmake, g++: the ggml
# peer's llama-cpp-python builds from source
./scripts/install-missing.sh libdnnl-dev libxsmm-dev python3-venv cmake g++ || {
    echo "setup-all.sh: apt-get failed (root or sudo needed)" >&2
    exit 2
}

for s in "${setups[@]}"; do
    step "$s"
    "$repo/$s" || {
        echo "setup-all.sh: $s failed" >&2
        exit 2
    }
done

step "meson: configure $build (the C peers are built where meson finds their library)"
if [ -f "$build/build.ninja" ]; then
    meson setup --wipe "$build" >/dev/null # --wipe: a configure before the packages cached "not found"
else
    meson setup "$build" --buildtype=release >/dev/null
fi
meson compile -C "$build"

step "which peers run here (a functional sweep of one tiny shape: no timing)"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$build/mhabench" sweep --peers all --kernels flash.scalar --seq 33 --heads 1 --head-dim 16 \
    --threads 1 --min-time 0.001 --passes 1 --out "$out/peers.json" >"$out/log" 2>&1 || {
    cat "$out/log" >&2
    echo "setup-all.sh: the sweep failed" >&2
    exit 2
}
grep -E '^(peer |check peer\.)' "$out/log" || true
runs=$(grep -E '^peer [a-z0-9_]+: ' "$out/log" | grep -vc ': not available here' || true)
missing=$(grep -c '^peer [a-z0-9_]*: not available here' "$out/log" || true)
echo
echo "setup-all.sh: $runs peers run here, $missing do not"
[ "$missing" -eq 0 ]
