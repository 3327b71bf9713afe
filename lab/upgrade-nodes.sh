#!/usr/bin/env bash
# Node containers for the rolling driver upgrade on real packages (make
# upgrade-test, tests/lab/test_upgrade_packages.py): Debian 12 systemd
# containers of the lab's recipe that start with bookworm-backports' NVIDIA
# driver held at UPGRADE_FROM_VERSION, its kernel module built by DKMS for
# Debian's kernel headers.
#
#   lab/upgrade-nodes.sh image         build the starting image (once per machine: a
#                                      Docker image tag keyed by the versions below)
#   lab/upgrade-nodes.sh nodes NAME... start node containers from it (lab/lab.sh node;
#                                      the test removes them, lab.sh down too)
#   lab/upgrade-nodes.sh tag           print the starting image's tag
#
# The lab must be up (Docker, its network, the apt proxy, the node images).
source "$(dirname "$0")/lib.sh"

UPGRADE_SUITE=bookworm
# bookworm-backports' nvidia-driver; bookworm's own is 535.261.03 (the upgrade's target).
UPGRADE_FROM_VERSION="${K8SGPU_UPGRADE_FROM_VERSION:-535.216.03}"
UPGRADE_FROM_RELEASE="$UPGRADE_SUITE-backports"
# What the driver role installs on Debian (roles/driver/vars/main.yml), with
# the proprietary kernel module flavour; nvidia-persistenced is not in
# backports (bookworm's contrib has it).
UPGRADE_FROM_BACKPORTS=(nvidia-driver nvidia-kernel-dkms nvidia-smi)
UPGRADE_FROM_SUITE=(nvidia-persistenced)
# What the driver role holds.
UPGRADE_HELD=(nvidia-driver nvidia-kernel-dkms nvidia-smi nvidia-persistenced)
# Bump when the recipe below changes.
UPGRADE_RECIPE=1
BUILDER="$LAB_NAME-upg-build"

base_image() { echo "k8sgpu-lab/debian:$UPGRADE_SUITE"; }
start_tag() { echo "k8sgpu-lab/upgrade-start:$UPGRADE_SUITE-nvidia-$UPGRADE_FROM_VERSION"; }
start_key() {
  local base_key
  base_key=$(docker image inspect -f '{{index .Config.Labels "k8sgpu.image-key"}}' "$(base_image)")
  printf "%s|%s|%s|%s|%s|%s" "$base_key" "$UPGRADE_FROM_RELEASE" "$UPGRADE_FROM_VERSION" \
    "${UPGRADE_FROM_BACKPORTS[*]}" "${UPGRADE_FROM_SUITE[*]}" "$UPGRADE_RECIPE" | sha256sum | cut -c1-12
}

in_builder() { docker exec "$BUILDER" bash -euo pipefail -c "$1"; }

cmd_image() {
  local tag key proxy started packages
  docker image inspect "$(base_image)" >/dev/null 2>&1 || die "no image $(base_image): run lab/lab.sh up first"
  [ -f "$LAB_STATE/apt-proxy-url" ] || die "no $LAB_STATE/apt-proxy-url: run lab/lab.sh up first"
  tag=$(start_tag); key=$(start_key)
  if [ "$(docker image inspect -f '{{index .Config.Labels "k8sgpu.image-key"}}' "$tag" 2>/dev/null)" = "$key" ]; then
    log "image $tag: present"; return
  fi
  need_space /var/lib/docker 3000
  proxy=$(cat "$LAB_STATE/apt-proxy-url")
  started=$(date +%s)
  docker rm -f "$BUILDER" >/dev/null 2>&1 || true
  trap 'docker rm -f "$BUILDER" >/dev/null 2>&1 || true' EXIT
  "$LAB_ROOT/lab/lab.sh" node "$BUILDER" "$UPGRADE_SUITE"
  log "image $tag: installing ${UPGRADE_FROM_BACKPORTS[*]} from $UPGRADE_FROM_RELEASE (DKMS builds the module: minutes)"
  # The backports source stays, as on a host that installed its driver from
  # there; bookworm's contrib and non-free only for the build (the driver role
  # adds its own source for them).
  in_builder "cat >/etc/apt/sources.list.d/$UPGRADE_FROM_RELEASE.sources <<EOF
Types: deb
URIs: http://deb.debian.org/debian
Suites: $UPGRADE_FROM_RELEASE
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
cat >/etc/apt/sources.list.d/build-non-free.sources <<EOF
Types: deb
URIs: http://deb.debian.org/debian
Suites: $UPGRADE_SUITE $UPGRADE_SUITE-updates
Components: contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF"
  # -t: the driver's many exact-version dependencies from backports too, as
  # Debian's wiki installs it. The headers are bookworm's, not backports'
  # newer kernel (DKMS builds for Debian's kernel: the host's own kernel has
  # no headers in Debian).
  packages="-t $UPGRADE_FROM_RELEASE ${UPGRADE_FROM_BACKPORTS[*]} ${UPGRADE_FROM_SUITE[*]} gcc linux-headers-amd64/$UPGRADE_SUITE"
  if ! in_builder "apt-get -q -o Acquire::http::Proxy=$proxy update >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get -q -o Acquire::http::Proxy=$proxy install -y --no-install-recommends $packages" \
      >"$LAB_STATE/upgrade-image.log" 2>&1; then
    tail -n 30 "$LAB_STATE/upgrade-image.log" >&2
    die "installing the starting driver failed (log: $LAB_STATE/upgrade-image.log)"
  fi
  in_builder "dpkg-query -W -f='\${Version}' nvidia-driver | grep -q '^$UPGRADE_FROM_VERSION-'" \
    || die "$UPGRADE_FROM_RELEASE did not give nvidia-driver $UPGRADE_FROM_VERSION (log: $LAB_STATE/upgrade-image.log)"
  in_builder "dkms status | grep -q 'nvidia.*$UPGRADE_FROM_VERSION.*: installed'" \
    || die "DKMS did not build nvidia $UPGRADE_FROM_VERSION: $(in_builder 'dkms status' 2>&1)"
  in_builder "apt-mark hold ${UPGRADE_HELD[*]} >/dev/null; rm /etc/apt/sources.list.d/build-non-free.sources
    apt-get clean; rm -rf /var/lib/apt/lists/*"
  docker stop -t 5 "$BUILDER" >/dev/null
  docker commit --change "LABEL k8sgpu.image-key=$key" --change 'CMD ["/lib/systemd/systemd"]' \
    "$BUILDER" "$tag" >/dev/null
  log "image $tag: built in $(( $(date +%s) - started )) s"
}

cmd_nodes() {
  [ $# -ge 1 ] || { echo "usage: $0 nodes NAME..." >&2; exit 2; }
  local name
  cmd_image
  for name in "$@"; do "$LAB_ROOT/lab/lab.sh" node "$name" "$UPGRADE_SUITE" "$(start_tag)"; done
}

case "${1:-}" in
  image) cmd_image ;;
  nodes) shift; cmd_nodes "$@" ;;
  tag) start_tag ;;
  *) echo "usage: $0 image|nodes NAME...|tag" >&2; exit 2 ;;
esac
