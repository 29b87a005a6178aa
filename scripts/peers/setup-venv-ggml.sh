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
dir=${1:-$repo/.venv-ggml}
if [ -L "$dir" ] && [ ! -e "$dir" ]; then # venv would say only "File exists"
    echo "setup-venv-ggml.sh: $dir is a link to $(readlink "$dir"), which does not exist: remove the link (rm '$dir') or make its target" >&2
    exit 2
fi
python=${PYTHON:-python3}

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
if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
    echo "setup-venv-ggml.sh: $python lacks venv/ensurepip (Debian: apt-get install python3-venv)" >&2
    exit 2
fi
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

if [ "$dir" = "$repo/.venv-ggml" ]; then
    echo "setup-venv-ggml.sh: done; mhabench finds $dir by itself"
else
    echo "setup-venv-ggml.sh: done; use it with: export MHA_PEERS_PYTHON_GGML=$dir/bin/python3"
fi
