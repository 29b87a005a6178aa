#!/bin/sh
# The layers stay below one another (issue 25): nothing under kernels/
# includes a header of variants/ or harness/ (kernels/ and include/ only),
# nothing under variants/ includes one of harness/, and among the variants
# only the selection layer's own files (classes, cpuinfo, cachemodel,
# tables, select) include select.h: a kernel that needs a cache fact asks
# cachemodel.h. Usage: check_layers.sh SOURCE_ROOT
set -eu
root=$1
fail=0
includes() { # file -> the "quoted" includes, one a line
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$1"
}
for f in "$root"/kernels/*.c "$root"/kernels/*.h; do
    for h in $(includes "$f"); do
        b=$(basename "$h")
        if [ -e "$root/kernels/$b" ] || [ -e "$root/include/$b" ]; then continue; fi
        if [ -e "$root/variants/$b" ] || [ -e "$root/harness/$h" ] || [ -e "$root/harness/$b" ]; then
            echo "FAIL ${f#$root/} includes $h, a header above kernels/"
            fail=1
        fi
    done
done
for f in "$root"/variants/*.c "$root"/variants/*.h; do
    for h in $(includes "$f"); do
        b=$(basename "$h")
        if [ ! -e "$root/variants/$b" ] && [ ! -e "$root/kernels/$b" ] && [ ! -e "$root/include/$b" ] &&
            { [ -e "$root/harness/$h" ] || [ -e "$root/harness/$b" ]; }; then
            echo "FAIL ${f#$root/} includes $h, a harness header"
            fail=1
        fi
        if [ "$b" = select.h ]; then
            case $(basename "$f") in
            classes.c | cpuinfo.c | cachemodel.c | tables.c | select.c | select.h) ;;
            *)
                echo "FAIL ${f#$root/} includes select.h: a kernel asks cachemodel.h for cache facts"
                fail=1
                ;;
            esac
        fi
    done
done
n=$(ls "$root"/kernels/*.[ch] "$root"/variants/*.[ch] | wc -l)
[ "$n" -gt 20 ] || { echo "FAIL: only $n files under kernels/ and variants/ (wrong root?)"; exit 1; }
[ $fail -eq 0 ] && echo "ok: $n files under kernels/ and variants/ keep to their layers"
exit $fail
