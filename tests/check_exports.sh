#!/usr/bin/env bash
# check_exports.sh LIB HEADER - the library boundary: the shared library LIB
# exports exactly the functions HEADER (include/mha.h) declares MHA_API, no
# internal symbol and no public one missing. Run by `meson test` (exports).
set -euo pipefail
lib=$1 header=$2
command -v nm >/dev/null || { echo "nm not found: cannot check $lib"; exit 77; }
want=$(tr '\n' ' ' <"$header" | grep -oE 'MHA_API [A-Za-z_][A-Za-z0-9_ *]*\(' |
    sed -E 's/ *\($//; s/.*[^A-Za-z0-9_]//' | grep '^mha_' | sort -u)
# a function declared without MHA_API would silently be internal
bare=$(grep -nE '^(const |unsigned |void|int|double|float|size_t|mha_)[^;=]*[ *]mha_[A-Za-z0-9_]+\(' "$header" || true)
if [ -n "$bare" ]; then
    echo "declared in $header without MHA_API:"
    echo "$bare" | sed 's/^/  /'
    exit 1
fi
got=$(nm -D --defined-only "$lib" | awk 'NF == 3 {print $3}' | sort -u)
if [ "$want" != "$got" ]; then
    echo "exported but not declared MHA_API in $header:"
    comm -13 <(echo "$want") <(echo "$got") | sed 's/^/  /'
    echo "declared MHA_API but not exported by $lib:"
    comm -23 <(echo "$want") <(echo "$got") | sed 's/^/  /'
    exit 1
fi
echo "$lib exports exactly the $(echo "$want" | wc -l) functions mha.h declares MHA_API"
