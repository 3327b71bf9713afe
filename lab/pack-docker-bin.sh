#!/usr/bin/env bash
# Packs Debian 12's Docker engine binaries (docker.io, containerd, runc) into
# .docker-bin/docker-bin.tar.xz, and the library dockerd needs beyond a base
# Ubuntu into .docker-bin/lib, for tests/gpu/run.sh on the GPU machine, which
# has neither Docker nor a network. The packages come from Debian's archive
# through this machine's apt; kept in $K8SGPU_CACHE/docker-bin, keyed by the
# candidate versions (apt-cache), so they are downloaded only when missing.
set -euo pipefail
# shellcheck source=lab/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
# libdevmapper1.02.1: dockerd links it and a base Ubuntu lacks it.
packages=(docker.io containerd runc tini libdevmapper1.02.1)
# The .deb file names' package_version, as apt-get download names them.
key=$(for p in "${packages[@]}"; do
        apt-cache show --no-all-versions "$p" | awk -v p="$p" '/^Version:/ {v = $2; gsub(":", "%3a", v); print p "_" v}'
      done | sort | tr '\n' '+' | sed 's/+$//')
cache=$K8SGPU_CACHE/docker-bin/$(echo "$key" | sha256sum | cut -c1-16)
if [ ! -f "$cache/docker-bin.tar.xz" ]; then
  work=$(mktemp -d); chmod 755 "$work"; trap 'rm -rf "$work"' EXIT
  (cd "$work" && apt-get download "${packages[@]}" >/dev/null)
  mkdir -p "$work/root" "$cache"
  for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
  bin=$work/bin; mkdir -p "$bin"
  cp "$work"/root/usr/sbin/{dockerd,runc} "$work"/root/usr/bin/{docker,containerd,containerd-shim-runc-v2} "$bin"/
  cp "$work/root/usr/bin/tini-static" "$bin/docker-init"
  tar -C "$bin" -cf - . | xz -T0 -9 >"$cache/docker-bin.tar.xz.tmp"
  mkdir -p "$cache/lib"
  cp "$work"/root/lib/x86_64-linux-gnu/libdevmapper.so.1.02.1 "$cache/lib/"
  echo "$key" >"$cache/packages"
  mv "$cache/docker-bin.tar.xz.tmp" "$cache/docker-bin.tar.xz"
fi
mkdir -p .docker-bin
cp -r "$cache/docker-bin.tar.xz" "$cache/packages" "$cache/lib" .docker-bin/
echo "$(du -h .docker-bin/docker-bin.tar.xz | cut -f1) .docker-bin/docker-bin.tar.xz: $key"
