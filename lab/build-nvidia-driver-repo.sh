#!/usr/bin/env bash
# Build a local, signed apt repository laid out like NVIDIA's CUDA network repository
# (https://developer.download.nvidia.com/compute/cuda/repos/<distro>/x86_64/), for the driver role's
# driver_source=nvidia (issue 45 items 3 and 4):
#
#   $K8SGPU_CACHE/mirror/nvidia-driver-<version>-<recipe>/debian12/x86_64/
#     Packages Packages.gz Release Release.gpg InRelease *.deb
#     3bf863cc.pub      the LAB's public key under NVIDIA's key file name (the role's default key URL)
#
# Its packages carry NVIDIA's names and dependency shape, built with dpkg-deb as equivs would:
#   nvidia-open <version>-1    metapackage: nvidia-open-kernel-dkms, nvidia-driver (>= <version>)   [Debian's real 535]
#   cuda-drivers <version>-1   metapackage: nvidia-kernel-dkms, nvidia-driver (>= <version>)        [Debian's real 535]
#                              (the DKMS package first: apt then takes it for nvidia-driver's first alternative,
#                              nvidia-kernel-dkms | nvidia-open-kernel-<version>, and builds one module, not both)
#   nvidia-open 580.95.05-1    another branch, whose dependencies no source has: installable only if the branch pin
#                              (apt preferences) failed, so a run that installs it fails
#   nvidia-fabricmanager <version>-1 and 535.274.02-1 (newer, of no driver here): a stand-in nv-fabricmanager
#                              (a shell loop) with NVIDIA's unit name, nvidia-fabricmanager.service
# Underneath, apt installs Debian 12's real driver (nvidia-driver, its DKMS package built by real DKMS) from the
# lab's apt proxy. NVIDIA's real packages are never installed here (no NVIDIA server is reachable): this proves the
# role's source, key pin, branch pin, package names and version handling against apt and dpkg, not NVIDIA's packages.
#
# The signing key is the lab's (lab/build-toolkit-repo.sh makes it once per cache). Prints the repository root
# (the directory above debian12/) on stdout; rebuilt only when missing.
source "$(dirname "$0")/lib.sh"

need_cmd dpkg-deb "apt-get install dpkg-dev."
need_cmd dpkg-scanpackages "apt-get install dpkg-dev."
need_cmd gpg "apt-get install gnupg."

VERSION="$NVIDIA_LAB_DRIVER_VERSION"
OTHER_BRANCH_VERSION=580.95.05
NEWER_FM_VERSION=535.274.02
REPO_ROOT="$(nvidia_driver_repo_dir)"
GNUPGHOME="$K8SGPU_CACHE/mirror/signing-key"
export GNUPGHOME

# deb ROOT NAME VERSION DEPENDS DESCRIPTION
deb() {
  local root="$1" name="$2" version="$3" depends="$4" desc="$5" out="$REPO_ROOT.tmp/debian12/x86_64"
  mkdir -p "$root/DEBIAN" "$out"
  {
    echo "Package: $name"
    echo "Version: $version"
    echo "Architecture: amd64"
    echo "Maintainer: k8sgpu.nvidia lab <lab@k8sgpu.invalid>"
    [ -z "$depends" ] || echo "Depends: $depends"
    echo "Section: non-free/libs"
    echo "Priority: optional"
    echo "Description: $desc"
    echo " A k8sgpu.nvidia lab stand-in with the name and dependency shape of NVIDIA's package."
  } >"$root/DEBIAN/control"
  dpkg-deb --root-owner-group -Zxz --build "$root" "$out/" >/dev/null
}

build_debs() {
  local work="$REPO_ROOT.tmp/pkgs" v r
  mkdir -p "$work"
  deb "$work/open" nvidia-open "$VERSION-1" \
    "nvidia-open-kernel-dkms (>= $VERSION), nvidia-driver (>= $VERSION)" "NVIDIA driver metapackage (open kernel modules)"
  deb "$work/cuda-drivers" cuda-drivers "$VERSION-1" \
    "nvidia-kernel-dkms (>= $VERSION), nvidia-driver (>= $VERSION)" "CUDA Driver meta-package (proprietary kernel modules)"
  deb "$work/open-other" nvidia-open "$OTHER_BRANCH_VERSION-1" \
    "nvidia-driver (>= $OTHER_BRANCH_VERSION), nvidia-kernel-open-dkms (>= $OTHER_BRANCH_VERSION)" \
    "NVIDIA driver metapackage (open kernel modules), another branch"
  for v in "$VERSION" "$NEWER_FM_VERSION"; do
    r="$work/fm-$v"
    install -d "$r/usr/bin" "$r/lib/systemd/system"
    # NVIDIA's daemon programs the NVSwitches; this one only runs, so that systemd's view of it can be checked.
    printf '#!/bin/sh\n# k8sgpu.nvidia lab stand-in for nv-fabricmanager %s\nexec sleep infinity\n' "$v" >"$r/usr/bin/nv-fabricmanager"
    chmod 0755 "$r/usr/bin/nv-fabricmanager"
    cat >"$r/lib/systemd/system/nvidia-fabricmanager.service" <<UNIT
[Unit]
Description=NVIDIA fabric manager service (k8sgpu.nvidia lab stand-in, $v)

[Service]
ExecStart=/usr/bin/nv-fabricmanager
Restart=on-failure

[Install]
WantedBy=multi-user.target
UNIT
    deb "$r" nvidia-fabricmanager "$v-1" "" "Fabric Manager for NVSwitch based systems"
  done
  rm -rf "$work"
}

index_repo() {
  local d="$REPO_ROOT.tmp/debian12/x86_64"
  index_flat_repo "$d" "NVIDIA CUDA (lab stand-in)" "$d/3bf863cc.pub"
}

main() {
  if [ -f "$REPO_ROOT/debian12/x86_64/InRelease" ]; then
    log "NVIDIA-like driver repository: cached in $REPO_ROOT"
    echo "$REPO_ROOT"; return
  fi
  gpg --batch --list-secret-keys lab@k8sgpu.invalid >/dev/null 2>&1 \
    || die "no lab signing key in $GNUPGHOME: run lab/build-toolkit-repo.sh (lab/lab.sh up) first"
  rm -rf "$REPO_ROOT.tmp"
  build_debs
  index_repo
  rm -rf "$REPO_ROOT"; mv "$REPO_ROOT.tmp" "$REPO_ROOT"
  log "NVIDIA-like driver repository: built in $REPO_ROOT"
  echo "$REPO_ROOT"
}
main "$@"
