#!/usr/bin/env bash
# Build a local, signed apt repository that looks like NVIDIA's
# libnvidia-container repository, from NVIDIA's own nvidia-container-toolkit
# sources fetched through the Go module proxy:
#
#   $K8SGPU_CACHE/mirror/toolkit-<version>-<recipe>/
#     libnvidia-container/gpgkey                     (ASCII-armoured public key)
#     libnvidia-container/stable/deb/amd64/          (flat repository, "Suites: /")
#       Packages Packages.gz Release Release.gpg InRelease *.deb
#
# Packages: nvidia-container-toolkit-base (nvidia-ctk, nvidia-container-runtime,
# nvidia-cdi-hook), nvidia-container-toolkit (nvidia-container-runtime-hook)
# and the transitional nvidia-docker2. NVIDIA's libnvidia-container-tools
# (nvidia-container-cli, C code from GitHub) cannot be built from the Go proxy:
# these lab packages leave that dependency out, which only matters where a GPU
# is handed to a container.
#
# The signing key is made once per cache and never leaves it. Prints the
# repository root on stdout; everything is rebuilt only when missing.
source "$(dirname "$0")/lib.sh"

need_cmd go "install Go 1.26 or newer."
need_cmd gcc "the toolkit needs cgo (apt-get install gcc)."
need_cmd dpkg-deb "apt-get install dpkg-dev."
need_cmd dpkg-scanpackages "apt-get install dpkg-dev."
need_cmd gpg "apt-get install gnupg."

PKG_VERSION="${NVIDIA_CTK_VERSION#v}-1"
NVIDIA_DOCKER2_VERSION="2.14.0-1"
BIN_DIR="$K8SGPU_CACHE/bin/nvidia-container-toolkit-$NVIDIA_CTK_VERSION"
REPO_ROOT="$(toolkit_repo_dir)"
GNUPGHOME="$K8SGPU_CACHE/mirror/signing-key"
export GNUPGHOME
MODULE=github.com/NVIDIA/nvidia-container-toolkit
COMMANDS=(nvidia-ctk nvidia-container-runtime nvidia-container-runtime-hook nvidia-cdi-hook)

build_binaries() {
  local c ok=1
  for c in "${COMMANDS[@]}"; do [ -x "$BIN_DIR/$c" ] || ok=0; done
  if [ "$ok" = 1 ]; then log "nvidia-container-toolkit $NVIDIA_CTK_VERSION: cached in $BIN_DIR"; return; fi
  log "nvidia-container-toolkit $NVIDIA_CTK_VERSION: building from the Go module proxy"
  local src="$K8SGPU_CACHE/src/nvidia-container-toolkit-$NVIDIA_CTK_VERSION" dir
  rm -rf "$src" "$BIN_DIR.tmp"; mkdir -p "$src" "$BIN_DIR.tmp"
  dir=$(GOFLAGS="" go mod download -json "$MODULE@$NVIDIA_CTK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -d "$dir" ] || die "could not fetch $MODULE@$NVIDIA_CTK_VERSION from the Go module proxy"
  # Build inside a writable copy: the module cache is read-only.
  cp -r "$dir/." "$src/"; chmod -R u+w "$src"
  # The same flags as NVIDIA's Makefile: go-nvml and dxcore resolve their C
  # symbols at run time (dlopen), so cgo links with unresolved symbols allowed.
  local ext='-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files -Wl,-z,lazy'
  local ldflags="-s -w '-extldflags=$ext' -X $MODULE/internal/info.version=${NVIDIA_CTK_VERSION#v} -X $MODULE/internal/info.gitCommit=go-module-proxy"
  for c in "${COMMANDS[@]}"; do
    run_build "$c $NVIDIA_CTK_VERSION" "$src/build-$c.log" \
      env CGO_ENABLED=1 GOFLAGS=-mod=mod bash -c "cd '$src' && go build -trimpath -ldflags \"$ldflags\" -o '$BIN_DIR.tmp/$c' ./cmd/$c"
  done
  mkdir -p "$BIN_DIR.tmp/deployments"
  cp "$src"/deployments/systemd/nvidia-cdi-refresh.{service,path,env} \
     "$src"/deployments/systemd/10-container-engines.conf "$BIN_DIR.tmp/deployments/"
  rm -rf "$BIN_DIR"; mv "$BIN_DIR.tmp" "$BIN_DIR"
  log "nvidia-container-toolkit $NVIDIA_CTK_VERSION: built into $BIN_DIR"
}

# deb PACKAGE VERSION OUTDIR DESCRIPTION DEPENDS; files are placed in $pkgroot
# by the caller before this runs.
write_control() {
  local root="$1" name="$2" version="$3" depends="$4" desc="$5" size
  size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
  mkdir -p "$root/DEBIAN"
  {
    echo "Package: $name"
    echo "Version: $version"
    echo "Architecture: amd64"
    echo "Maintainer: k8sgpu.nvidia lab <lab@k8sgpu.invalid>"
    echo "Installed-Size: $size"
    [ -z "$depends" ] || echo "Depends: $depends"
    echo "Section: utils"
    echo "Priority: optional"
    echo "Homepage: https://github.com/NVIDIA/nvidia-container-toolkit"
    echo "Description: $desc"
    echo " Built by the k8sgpu.nvidia lab from NVIDIA's sources ($NVIDIA_CTK_VERSION, Go module proxy)."
    echo " libnvidia-container-tools is not part of this build."
  } >"$root/DEBIAN/control"
}

build_debs() {
  local work="$REPO_ROOT.tmp/pkgs" r
  mkdir -p "$work" "$REPO_ROOT.tmp/libnvidia-container/stable/deb/amd64"

  r="$work/nvidia-container-toolkit-base"
  install -D -m 0755 "$BIN_DIR/nvidia-ctk" "$r/usr/bin/nvidia-ctk"
  install -D -m 0755 "$BIN_DIR/nvidia-container-runtime" "$r/usr/bin/nvidia-container-runtime"
  install -D -m 0755 "$BIN_DIR/nvidia-cdi-hook" "$r/usr/bin/nvidia-cdi-hook"
  install -D -m 0644 "$BIN_DIR/deployments/nvidia-cdi-refresh.service" "$r/lib/systemd/system/nvidia-cdi-refresh.service"
  install -D -m 0644 "$BIN_DIR/deployments/nvidia-cdi-refresh.path" "$r/lib/systemd/system/nvidia-cdi-refresh.path"
  install -D -m 0644 "$BIN_DIR/deployments/10-container-engines.conf" "$r/lib/systemd/system/nvidia-cdi-refresh.service.d/10-container-engines.conf"
  install -D -m 0644 "$BIN_DIR/deployments/nvidia-cdi-refresh.env" "$r/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"
  write_control "$r" nvidia-container-toolkit-base "$PKG_VERSION" "" "NVIDIA Container Toolkit Base"
  echo "/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env" >"$r/DEBIAN/conffiles"
  # NVIDIA's postinst: write the runtime's config.toml with its defaults.
  cat >"$r/DEBIAN/postinst" <<'SH'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
  /usr/bin/nvidia-ctk --quiet config --config-file=/etc/nvidia-container-runtime/config.toml --in-place
fi
exit 0
SH
  chmod 0755 "$r/DEBIAN/postinst"

  r="$work/nvidia-container-toolkit"
  install -D -m 0755 "$BIN_DIR/nvidia-container-runtime-hook" "$r/usr/bin/nvidia-container-runtime-hook"
  ln -s nvidia-container-runtime-hook "$r/usr/bin/nvidia-container-toolkit"
  write_control "$r" nvidia-container-toolkit "$PKG_VERSION" \
    "nvidia-container-toolkit-base (= $PKG_VERSION)" "NVIDIA Container toolkit"

  r="$work/nvidia-docker2"
  mkdir -p "$r/usr/share/doc/nvidia-docker2"
  echo "Transitional package: install nvidia-container-toolkit instead." >"$r/usr/share/doc/nvidia-docker2/README"
  write_control "$r" nvidia-docker2 "$NVIDIA_DOCKER2_VERSION" \
    "nvidia-container-toolkit (>= 1.13.5)" "NVIDIA Container Toolkit meta-package (transitional)"

  local p
  for p in nvidia-container-toolkit-base nvidia-container-toolkit nvidia-docker2; do
    dpkg-deb --root-owner-group -Zxz --build "$work/$p" "$REPO_ROOT.tmp/libnvidia-container/stable/deb/amd64/" >/dev/null
  done
  rm -rf "$work"
}

ensure_key() {
  if gpg --batch --list-secret-keys lab@k8sgpu.invalid >/dev/null 2>&1; then return; fi
  log "signing key: creating the lab repository key in $GNUPGHOME"
  mkdir -p "$GNUPGHOME"; chmod 0700 "$GNUPGHOME"
  gpg --batch --quiet --passphrase '' --quick-generate-key \
    "k8sgpu.nvidia lab repository <lab@k8sgpu.invalid>" ed25519 sign never
}

index_repo() {
  local d="$REPO_ROOT.tmp/libnvidia-container/stable/deb/amd64"
  index_flat_repo "$d" "libnvidia-container (lab build)" "$REPO_ROOT.tmp/libnvidia-container/gpgkey"
}

main() {
  if [ -f "$REPO_ROOT/libnvidia-container/stable/deb/amd64/InRelease" ]; then
    log "toolkit repository: cached in $REPO_ROOT"
    echo "$REPO_ROOT"; return
  fi
  need_space "$K8SGPU_CACHE" 1500
  build_binaries
  ensure_key
  rm -rf "$REPO_ROOT.tmp"
  build_debs
  index_repo
  rm -rf "$REPO_ROOT"; mv "$REPO_ROOT.tmp" "$REPO_ROOT"
  log "toolkit repository: built in $REPO_ROOT"
  echo "$REPO_ROOT"
}
main "$@"
