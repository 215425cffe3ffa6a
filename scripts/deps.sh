#!/usr/bin/env bash
# Installs the pinned Debian packages flashback builds with (skips those already at the pinned
# version). Debian 12 (bookworm). Runs apt-get as root, or through sudo.
set -euo pipefail
PKGS=(
  cmake=3.25.1-1
  g++=4:12.2.0-3
  make=4.3-4.1
  pkg-config=1.8.1-1
  libgtest-dev=1.12.1-0.2
  libgmock-dev=1.12.1-0.2
  googletest=1.12.1-0.2
  libbenchmark-dev=1.7.1-1
  libhwy-dev=1.0.3-3+deb12u1
  libdlpack-dev=0.6-1+b1
  nlohmann-json3-dev=3.11.2-2
  python3-venv=3.11.2-1+b1
)
missing=()
for p in "${PKGS[@]}"; do
  name=${p%%=*} want=${p#*=}
  have=$(dpkg-query -W -f='${Version}' "$name" 2>/dev/null || true)
  [ "$have" = "$want" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "deps: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
