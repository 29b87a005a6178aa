#!/usr/bin/env bash
# run_install_test.sh SOURCE_ROOT - the installed program and library use one
# fresh table (issue 26): a build of SOURCE_ROOT configured with --prefix in a
# scratch folder is installed there; its `mhabench tune` (one cheap class)
# must write beside the installed tables (and `tune --out` onto one is refused
# without --force), its `recommend` and a C program
# built against the installed mha.pc (mha_select) must name that same file,
# the installed copy of the committed table must stay as it was, and the
# source tree's results/ must be untouched. About 30-60 s (most of it the build).
set -euo pipefail
src=$(cd "$1" && pwd)
for tool in meson ninja cc pkg-config; do
    command -v "$tool" >/dev/null || { echo "$tool not found: cannot build and install"; exit 77; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mha-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unset MHA_TUNING MHA_TUNING_DIR MHA_KERNEL MHA_ISA
fail() { echo "FAIL: $*"; exit 1; }

# what the source tree holds before (ignored files too: a stray log counts)
state() {
    if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git -C "$src" status --porcelain --ignored -- results/
    fi
    (cd "$src" && find results -type f -print0 | sort -z | xargs -0 sha256sum)
}
before=$(state)

prefix=$tmp/prefix
echo "== build and install into $prefix"
meson setup "$tmp/build" "$src" --prefix="$prefix" --buildtype=release >"$tmp/setup.log" 2>&1 ||
    { cat "$tmp/setup.log"; fail "meson setup"; }
nice -n 5 meson compile -C "$tmp/build" -j 2 mhabench mha >"$tmp/compile.log" 2>&1 ||
    { tail -40 "$tmp/compile.log"; fail "meson compile"; }
meson install -C "$tmp/build" --no-rebuild >"$tmp/install.log" 2>&1 ||
    { tail -40 "$tmp/install.log"; fail "meson install"; }
bench=$prefix/bin/mhabench
tables=$prefix/share/mhabench/tuning
[ -x "$bench" ] || fail "no installed $bench"
[ -d "$tables" ] || fail "no installed $tables"
pc=$(find "$prefix" -name mha.pc | head -1)
[ -n "$pc" ] || fail "no installed mha.pc"
libdir=$(dirname "$(dirname "$pc")")
# the installed tables before tune: each must keep its bytes
(cd "$tables" && find . -maxdepth 1 -name '*.json' -print0 | sort -z | xargs -0 -r sha256sum) \
    >"$tmp/installed.sum"

echo "== installed tune --out onto an installed table, without --force: refused"
shipped=$(awk 'NR == 1 {print $2}' "$tmp/installed.sum")
[ -n "$shipped" ] || fail "no table installed in $tables"
set +e
"$bench" tune --budget 1 --threads 1 --dtype fp32 --shard 3/16 --out "$tables/${shipped#./}" \
    >"$tmp/refused.out" 2>&1
rc=$?
set -e
cat "$tmp/refused.out"
[ "$rc" = 2 ] || fail "tune --out onto the installed $shipped: exit $rc, not 2"
grep -q "is an installed table: --force replaces it" "$tmp/refused.out" ||
    fail "tune --out onto an installed table: no message saying why"

echo "== installed tune (one cheap class, d64-kv1024-t1)"
"$bench" tune --budget 1 --threads 1 --dtype fp32 --shard 3/16 >"$tmp/tune.out" 2>&1 ||
    { cat "$tmp/tune.out"; fail "installed tune"; }
cat "$tmp/tune.out"
fresh=$(sed -n 's/^tune: .* measurements, .*; table //p' "$tmp/tune.out")
[ -f "$fresh" ] || fail "tune did not name a table it wrote: '$fresh'"
case $fresh in
"$tables"/*) ;;
*) fail "tune wrote $fresh, not into the installed tables $tables" ;;
esac
grep -q "^tune: written where mha_select reads first ($tables: this installation's tables" \
    "$tmp/tune.out" || fail "tune does not say it wrote into this installation's tables"
grep -q "^tune: note: mha_select reads" "$tmp/tune.out" && fail "tune: the library reads another file"
if [ -s "$tmp/installed.sum" ]; then
    (cd "$tables" && sha256sum --quiet -c "$tmp/installed.sum") ||
        fail "tune changed an installed table"
fi
grep -q "$(basename "$fresh")" "$tmp/installed.sum" && fail "tune wrote over an installed table"

echo "== installed recommend"
"$bench" recommend --seq 1024 --heads 8 --head-dim 64 >"$tmp/rec.out" 2>&1 ||
    { cat "$tmp/rec.out"; fail "installed recommend"; }
cat "$tmp/rec.out"
grep -qxF "table     $fresh" "$tmp/rec.out" || fail "recommend does not name $fresh"
grep -qxF "source    table" "$tmp/rec.out" || fail "recommend did not decide from the table"

echo "== a program built against the installed library"
cat >"$tmp/demo.c" <<'C'
#include <mha.h>
#include <stdio.h>
int main(void) {
    const mha_problem p = {.batch = 1, .heads = 8, .kv_heads = 8, .seq_q = 1024,
                           .seq_kv = 1024, .head_dim = 64};
    mha_selection sel;
    if (mha_select(&p, &(mha_options){.threads = 1}, &sel) != MHA_OK) return 1;
    printf("%s %d %s\n", mha_kernel_name(sel.kernel), (int)sel.source, sel.reason);
    return 0;
}
C
# shellcheck disable=SC2046 # pkg-config's flags are words
PKG_CONFIG_PATH=$libdir/pkgconfig cc "$tmp/demo.c" -o "$tmp/demo" \
    $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs mha) ||
    fail "cannot build against the installed mha.pc"
LD_LIBRARY_PATH=$libdir "$tmp/demo" >"$tmp/demo.out" || fail "the demo's mha_select failed"
cat "$tmp/demo.out"
grep -qF "tuning table $fresh, class d64-kv1024-t1" "$tmp/demo.out" ||
    fail "the library does not read $fresh"
# ldd to a file first: under pipefail, grep -q leaving early could kill ldd
# with SIGPIPE and fail the check though the line was there (CI, stop 50)
LD_LIBRARY_PATH=$libdir ldd "$tmp/demo" >"$tmp/ldd.out" || fail "ldd cannot read the demo"
grep -qF "$libdir/libmha.so" "$tmp/ldd.out" || fail "the demo did not load the installed libmha.so"

after=$(state)
[ "$before" = "$after" ] || { diff <(echo "$before") <(echo "$after") || true; fail "the source tree's results/ changed"; }
echo "installed tune, recommend and mha_select all use $fresh; results/ unchanged"
