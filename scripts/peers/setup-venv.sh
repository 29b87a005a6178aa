#!/bin/bash
# setup-venv.sh - makes the Python environment of the peers (torch,
# onnxruntime, openvino) that scripts/peers/mha_peer.py runs in, with the
# versions the peer rows were written against, from PyPI (about 5 GB: the
# CPU-only torch wheel would be smaller, but PyPI's default is what this
# pins). mhabench finds DIR/bin/python3 by itself when DIR is the default
# .venv-peers at the repository root; any other DIR: MHA_PEERS_PYTHON.
#
#   scripts/peers/setup-venv.sh [DIR]     (default: <repo>/.venv-peers)
#
# None of this is needed to build or test mhabench: without it the peers
# are skipped with a message saying so.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=venv-common.sh
. "$repo/scripts/peers/venv-common.sh"
venv_begin setup-venv.sh "$repo/.venv-peers" "${1:-}"

# The versions of the rows in results/ (a peer's version goes into every
# result file's context, so a rerun with other versions says so).
pins=(
    torch==2.15.0
    numpy==2.4.6
    onnxruntime==1.31.1
    openvino==2026.4.1
    onnx==1.23.2
)

echo "setup-venv.sh: creating $dir with ${pins[*]}"
"$python" -m venv "$dir"
"$dir/bin/python3" -m pip install --upgrade pip
"$dir/bin/python3" -m pip install "${pins[@]}"
# the same imports the helper makes at hello
"$dir/bin/python3" -c 'import torch, numpy, onnx, onnxruntime, openvino; print("peers:", "torch", torch.__version__, "onnxruntime", onnxruntime.__version__, "openvino", openvino.get_version())'

venv_done "$repo/.venv-peers" MHA_PEERS_PYTHON
echo "  check: MHA_PEERS_PYTHON=$dir/bin/python3 meson test -C build peer_py -v"
