#!/bin/bash
# setup-venv-ggml.sh - makes the Python environment of the ggml peer
# (llama.cpp's ggml_flash_attn_ext): llama-cpp-python from PyPI, which has
# no Linux wheel, only an sdist that builds llama.cpp's ggml with CMake and
# a C++ compiler (Debian: cmake g++) and bundles its shared libraries
# (site-packages/llama_cpp/lib/libggml-base.so, libggml-cpu.so, ...; no
# headers), which scripts/peers/mha_peer.py loads with ctypes. The build
# takes about 10 minutes of both cores of a 2-core machine; ggml is built
# for this CPU (GGML_NATIVE, llama.cpp's default), as its users build it.
# mhabench finds DIR/bin/python3 by itself when DIR is the default
# .venv-ggml at the repository root; any other DIR: MHA_PEERS_PYTHON_GGML.
#
#   scripts/peers/setup-venv-ggml.sh [DIR]     (default: <repo>/.venv-ggml)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=venv-common.sh
. "$repo/scripts/peers/venv-common.sh"
venv_begin setup-venv-ggml.sh "$repo/.venv-ggml" "${1:-}"

# llama-cpp-python 0.3.36 vendors ggml 0.25.3 (the version in the context)
pins=(
    llama-cpp-python==0.3.36
    numpy==2.4.6
)

for tool in cmake g++; do
    command -v "$tool" >/dev/null || {
        echo "setup-venv-ggml.sh: $tool not found (Debian: apt-get install cmake g++)" >&2
        exit 2
    }
done
"$python" -m venv "$dir"
echo "setup-venv-ggml.sh: $dir with ${pins[*]} (builds ggml from source unless pip finds it installed)"
"$dir/bin/python3" -m pip install --upgrade pip
# only the libraries the peer loads: no llava/mtmd, examples or tests
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
    CMAKE_ARGS="${CMAKE_ARGS:-} -DLLAVA_BUILD=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF" \
    "$dir/bin/python3" -m pip install "${pins[@]}"
# what the helper loads at hello
"$dir/bin/python3" - <<'PY'
import ctypes, importlib.util, os
lib = os.path.join(list(importlib.util.find_spec("llama_cpp").submodule_search_locations)[0], "lib")
ctypes.CDLL(os.path.join(lib, "libggml-base.so")).ggml_flash_attn_ext
ctypes.CDLL(os.path.join(lib, "libggml-cpu.so")).ggml_backend_cpu_init
print("peers: ggml from", lib)
PY

venv_done "$repo/.venv-ggml" MHA_PEERS_PYTHON_GGML
