#!/usr/bin/env bash
# install-missing.sh PKG... - installs those of the Debian packages PKG that
# are not installed yet (apt-get update only when one is missing; sudo when
# not root). Shared by bootstrap.sh and fuzz.sh. Exit status: apt-get's.
set -euo pipefail
missing=()
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
