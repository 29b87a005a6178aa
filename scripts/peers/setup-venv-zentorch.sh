#!/bin/bash
# setup-venv-zentorch.sh - makes the Python environment of the zentorch peer
# (AMD's ZenDNN plugin for PyTorch): an environment of its own, since
# zentorch 2.14.0.1 imports only with PyTorch 2.14.x while the torch peer's
# environment (setup-venv.sh) pins another PyTorch. From PyPI (about 5 GB:
# PyPI's default torch wheel). mhabench finds DIR/bin/python3 by itself when
# DIR is the default .venv-zentorch at the repository root; any other DIR:
# MHA_PEERS_PYTHON_ZENTORCH.
#
#   scripts/peers/setup-venv-zentorch.sh [DIR]   (default: <repo>/.venv-zentorch)
#
# None of this is needed to build or test mhabench: without it the zentorch
# peer is skipped with a message saying so.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=venv-common.sh
. "$repo/scripts/peers/venv-common.sh"
venv_begin setup-venv-zentorch.sh "$repo/.venv-zentorch" "${1:-}"

# The versions of the rows in results/ (the peer's version, zentorch's and
# its torch's, goes into every result file's context). zentorch 2.14.0.1
# was built against torch 2.14.0 and refuses to import under another minor.
pins=(
    zentorch==2.14.0.1
    torch==2.14.1
    numpy==2.4.6
)

echo "setup-venv-zentorch.sh: creating $dir with ${pins[*]}"
"$python" -m venv "$dir"
"$dir/bin/python3" -m pip install --upgrade pip
"$dir/bin/python3" -m pip install "${pins[@]}"
# the same imports the helper makes at hello, and the ops it calls
"$dir/bin/python3" -c 'import torch, numpy, zentorch; torch.ops.zentorch.zentorch_sdpa_attn; torch.ops.zentorch.zentorch_sdpa; print("peers:", "zentorch", zentorch.__version__, "torch", torch.__version__)'

venv_done "$repo/.venv-zentorch" MHA_PEERS_PYTHON_ZENTORCH
