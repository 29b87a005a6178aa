#!/usr/bin/env bash
# bootstrap.sh - installs the Debian 12 packages mhabench builds with (only
# those missing; apt-get update only when something is), then configures and
# builds the release build in ./build. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

# Build: meson, ninja, gcc/g++ (the Google Benchmark shim is C++), pkg-config.
# Libraries: hwloc (topology, pinning), cmocka (unit tests), Google Benchmark
# (sweeps), json-c (result files, tuning tables), OpenBLAS (the blas.cblas
# baseline); libgomp comes with gcc. python3-numpy/torch are only needed to
# regenerate tests/data, python3-matplotlib to plot; neither is installed here.
packages=(meson ninja-build pkg-config gcc g++ libhwloc-dev libcmocka-dev libbenchmark-dev
    libjson-c-dev libopenblas-dev)
./scripts/install-missing.sh "${packages[@]}"

if [ -f build/build.ninja ]; then
    meson setup --reconfigure build >/dev/null
else
    meson setup build --buildtype=release
fi
meson compile -C build
