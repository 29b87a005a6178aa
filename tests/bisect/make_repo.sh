#!/bin/sh
# make_repo.sh DIR - a throw-away git repository for tests/test_bisect.c: ten
# commits after c0, each "build" (build.sh) installing fake_mhabench.sh as
# build/mhabench; c5 does not build, c7 plants a 10% slowdown (factor 1.1) in
# the first of the fake sweep's two benchmarks. Tags c0..c10 name them.
set -eu
dir=$1
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir"
cd "$dir"
git init -q .
g() { git -c user.name=bisect-test -c user.email=bisect@test -c commit.gpgsign=false "$@"; }
cp "$here/fake_mhabench.sh" fake.sh
printf '#!/bin/sh\nset -e\nmkdir -p build\ncp fake.sh build/mhabench\nchmod +x build/mhabench\n' >build.sh
echo 1.0 >factor
g add -A
g commit -q -m c0
g tag c0
for i in 1 2 3 4 5 6 7 8 9 10; do
    case $i in
    5) printf '#!/bin/sh\necho "this revision does not build" >&2\nexit 1\n' >build.sh ;;
    6) printf '#!/bin/sh\nset -e\nmkdir -p build\ncp fake.sh build/mhabench\nchmod +x build/mhabench\n' >build.sh ;;
    7) echo 1.1 >factor ;;
    *) echo "note $i" >>notes ;;
    esac
    g add -A
    g commit -q -m "c$i"
    g tag "c$i"
done
