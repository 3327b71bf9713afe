#!/usr/bin/env bash
# Packs what tests/gpu/k8s-node.sh needs to run a real one-node Kubernetes
# cluster on a GPU machine that has no network, no systemd, no container
# runtime and no Kubernetes (issue 15). Everything is built or fetched here and
# cached under $K8SGPU_CACHE, keyed by version, so only what is missing is built:
#
#   k8s-node   kube-apiserver, kube-controller-manager, kube-scheduler, kubelet
#              and kubectl v$K8S_VERSION linked into one multi-call binary
#              (lab/k8s-node/main.go; dispatch on the program name), stripped
#   etcd       the lab's etcd (lab/build-binaries.sh etcd)
#   Debian 12  containerd (with ctr and the runc v2 shim), runc, the CNI
#              plugins bridge/host-local/loopback (containernetworking-plugins),
#              and the C library files the images below need (their programs
#              are linked here, against Debian's glibc)
#   images     the binaries the images are assembled from ON the GPU machine
#              (tests/gpu/k8s-node/mkimage.py): Kubernetes' own pause.c compiled
#              statically, NVIDIA's k8s-device-plugin at the version the
#              device_plugin role pins (cgo, as NVIDIA builds it: it dlopens
#              libnvidia-ml.so.1, which the toolkit mounts from the host) and
#              tests/gpu/cuda-vector-add (dlopens libcuda.so.1)
#   python     ansible-core and the kubernetes client as Python 3.12 wheels,
#              kubernetes.core from the venv's ansible package, and the lab's
#              NVIDIA container toolkit repository (file:// mirror)
#
# The GPU machine takes at most 64 MiB per call, so the bundle is two
# directories, each carried by one call (tests/gpu/k8s-node.sh's header says
# how): .cache/k8s-node/1 (Kubernetes, etcd) and .cache/k8s-node/2 (the rest).
# Usage: lab/pack-k8s-node.sh [all|k8s-node|device-plugin|...]
set -euo pipefail
# shellcheck source=lab/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$LAB_ROOT"

DEVICE_PLUGIN_VERSION=$(sed -n 's/^device_plugin_version: *//p' roles/device_plugin/defaults/main.yml)
BUNDLE=${K8S_NODE_BUNDLE:-$LAB_ROOT/.cache/k8s-node}
# Kubernetes' pause image version (kubeadm's PauseVersion for v1.37) and the
# image names the roles reference, so IfNotPresent never pulls.
PAUSE_VERSION=3.10.2
# xz's preset for the bundle: 9 (the smallest, about 2.5 min of CPU on 2 cores)
# keeps each carry under the GPU machine's 64 MiB. A bundle only unpacked here
# (the rehearsal in `make test`; .ci/run sets 1: a fifth of the CPU, about 15 %
# larger) may take a faster one. The preset is part of the bundle's stamp, so
# running this script with the default packs again at 9 before a carry.
XZ_LEVEL=${K8SGPU_PACK_XZ_LEVEL:-9}
case "$XZ_LEVEL" in [0-9]) ;; *) die "K8SGPU_PACK_XZ_LEVEL=$XZ_LEVEL: give an xz preset, 0 to 9" ;; esac

k8s_node_bin_dir() { echo "$K8SGPU_CACHE/bin/k8s-node-$K8S_VERSION-$(sha256sum lab/k8s-node/main.go | cut -c1-12)"; }
device_plugin_bin_dir() { echo "$K8SGPU_CACHE/bin/k8s-device-plugin-$DEVICE_PLUGIN_VERSION"; }

# The four Kubernetes programs and kubectl share most of their packages: one
# binary is about the size of kube-apiserver alone. The wrapper module is the
# lab's (lab/build-binaries.sh: k8s.io/kubernetes with its staging modules at
# their published versions), so its Go module and build caches are reused and
# only the kubelet's own packages compile anew.
build_k8s_node() {
  local out; out=$(k8s_node_bin_dir)
  if [ -x "$out/k8s-node" ]; then log "k8s-node $K8S_VERSION: cached in $out"; return; fi
  "$LAB_ROOT/lab/build-binaries.sh" kubernetes
  local lab_src="$K8SGPU_CACHE/src/kubernetes-$K8S_VERSION" src="$K8SGPU_CACHE/src/k8s-node-$K8S_VERSION"
  [ -f "$lab_src/go.mod" ] || die "$lab_src/go.mod is missing: remove $(k8s_bin_dir) and run lab/build-binaries.sh kubernetes"
  log "k8s-node $K8S_VERSION: building the multi-call binary (first time: about 10 min on 2 cores)"
  rm -rf "$src"; mkdir -p "$src" "$out.tmp"
  sed 's#^module .*#module k8sgpu.local/lab/k8s-node#' "$lab_src/go.mod" >"$src/go.mod"
  cp "$lab_src/go.sum" "$src/go.sum"
  cp lab/k8s-node/main.go "$src/main.go"
  local pkg="k8s.io/component-base/version" minor ldflags
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  ldflags="-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
  run_build "k8s-node (go mod tidy)" "$src/tidy.log" bash -c "cd '$src' && go mod tidy"
  run_build "k8s-node (go build)" "$src/build.log" \
    bash -c "cd '$src' && go build -trimpath -ldflags '$ldflags' -o '$out.tmp/k8s-node' ."
  rm -rf "$out"; mv "$out.tmp" "$out"
  log "k8s-node $K8S_VERSION: built into $out ($(du -h "$out/k8s-node" | cut -f1))"
}

# NVIDIA's k8s-device-plugin as its Makefile builds it: cgo (go-nvml dlopens
# libnvidia-ml.so.1 at run time, so its symbols stay unresolved at link time)
# and the version stamped in. The module has no replace directives.
build_device_plugin() {
  local out; out=$(device_plugin_bin_dir)
  if [ -x "$out/nvidia-device-plugin" ]; then log "k8s-device-plugin $DEVICE_PLUGIN_VERSION: cached in $out"; return; fi
  need_cmd gcc "install Debian's gcc (the device plugin is built with cgo)."
  log "k8s-device-plugin $DEVICE_PLUGIN_VERSION: building nvidia-device-plugin from the Go module proxy (cgo)"
  mkdir -p "$out.tmp"
  # `go install ...@version` asks for the module's version list, which the
  # proxy refuses: a wrapper module that requires the exact version builds it.
  local src="$K8SGPU_CACHE/src/k8s-device-plugin-$DEVICE_PLUGIN_VERSION"
  rm -rf "$src"; mkdir -p "$src"
  printf 'module k8sgpu.local/lab/k8s-device-plugin\n\ngo 1.25.0\n\nrequire github.com/NVIDIA/k8s-device-plugin %s\n' \
    "$DEVICE_PLUGIN_VERSION" >"$src/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/NVIDIA/k8s-device-plugin/cmd/nvidia-device-plugin"\n' >"$src/tools.go"
  local ldflags="-s -w '-extldflags=-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files'"
  ldflags="$ldflags -X github.com/NVIDIA/k8s-device-plugin/internal/info.version=$DEVICE_PLUGIN_VERSION"
  run_build "k8s-device-plugin (go mod tidy)" "$src/tidy.log" bash -c "cd '$src' && go mod tidy"
  run_build "k8s-device-plugin $DEVICE_PLUGIN_VERSION (go build, cgo)" "$src/build.log" \
    bash -c "cd '$src' && CGO_ENABLED=1 go build -trimpath -ldflags \"$ldflags\" -o '$out.tmp/nvidia-device-plugin' \
      github.com/NVIDIA/k8s-device-plugin/cmd/nvidia-device-plugin"
  rm -rf "$out"; mv "$out.tmp" "$out"
  log "k8s-device-plugin $DEVICE_PLUGIN_VERSION: built into $out"
}

# Debian 12's containerd (1.6: kubelet v1.37 still accepts a runtime without
# the RuntimeConfig call and takes the cgroup driver from its own config),
# runc, the CNI plugins, and glibc/ldconfig for the images' root file systems.
DEBIAN_PACKAGES=(containerd runc containernetworking-plugins libc6 libc-bin)
DEBIAN_RECIPE=2  # bump when fetch_debian takes other files
debian_dir() {
  local key
  key=$(for p in "${DEBIAN_PACKAGES[@]}"; do
          apt-cache show --no-all-versions "$p" | awk -v p="$p" '/^Version:/ {print p "_" $2}'
        done | sort | tr '\n' '+' | sed 's/+$//')
  [ -n "$key" ] || die "apt-cache knows none of ${DEBIAN_PACKAGES[*]}: run apt-get update (Debian 12 sources)"
  echo "$K8SGPU_CACHE/k8s-node/debian-$(echo "$key+$DEBIAN_RECIPE" | sha256sum | cut -c1-16)"
}
fetch_debian() {
  local out; out=$(debian_dir)
  if [ -f "$out/packages" ]; then log "Debian packages: cached in $out"; return; fi
  log "Debian packages: downloading ${DEBIAN_PACKAGES[*]}"
  local work; work=$(mktemp -d); chmod 755 "$work"
  (cd "$work" && apt-get download "${DEBIAN_PACKAGES[@]}" >/dev/null 2>&1) || { rm -rf "$work"; die "apt-get download ${DEBIAN_PACKAGES[*]} failed"; }
  mkdir -p "$work/root" "$out.tmp/runtime" "$out.tmp/cni" "$out.tmp/libc"
  for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
  local r=$work/root
  cp "$r"/usr/bin/{containerd,containerd-shim-runc-v2,ctr} "$r/usr/sbin/runc" "$out.tmp/runtime/"
  cp "$r"/usr/lib/cni/{bridge,host-local,loopback} "$out.tmp/cni/"
  # An image root file system's C library part (paths as in Debian).
  mkdir -p "$out.tmp/libc/lib/x86_64-linux-gnu" "$out.tmp/libc/lib64" "$out.tmp/libc/sbin" "$out.tmp/libc/etc/ld.so.conf.d"
  # All of libc6's libraries: the driver's libcuda.so.1 and libnvidia-ml.so.1,
  # mounted in by the toolkit, also need libdl.so.2, libpthread.so.0 and librt.so.1.
  cp "$r"/lib/x86_64-linux-gnu/*.so* "$out.tmp/libc/lib/x86_64-linux-gnu/"
  ln -s /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$out.tmp/libc/lib64/ld-linux-x86-64.so.2"
  cp "$r/sbin/ldconfig" "$out.tmp/libc/sbin/"
  cp "$r/etc/ld.so.conf" "$out.tmp/libc/etc/"; cp "$r"/etc/ld.so.conf.d/* "$out.tmp/libc/etc/ld.so.conf.d/"
  (cd "$work" && printf '%s\n' ./*.deb | sed 's|^\./||') >"$out.tmp/packages"
  rm -rf "$work" "$out"; mv "$out.tmp" "$out"
  log "Debian packages: unpacked into $out"
}

# Kubernetes' own pause container (build/pause/linux/pause.c in the module),
# static, as its Makefile builds it.
build_pause() {
  local out="$K8SGPU_CACHE/bin/pause-$PAUSE_VERSION"
  if [ -x "$out/pause" ]; then log "pause $PAUSE_VERSION: cached in $out"; return; fi
  local src="$GOMODCACHE/k8s.io/kubernetes@$K8S_VERSION/build/pause/linux/pause.c"
  [ -f "$src" ] || "$LAB_ROOT/lab/build-binaries.sh" kubernetes
  need_cmd gcc "install Debian's gcc and libc6-dev (pause is C, linked statically)."
  mkdir -p "$out.tmp"
  gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION-k8sgpu" -o "$out.tmp/pause" "$src"
  strip "$out.tmp/pause"
  rm -rf "$out"; mv "$out.tmp" "$out"
  log "pause $PAUSE_VERSION: built into $out"
}

# ansible-core and the kubernetes client (the versions of requirements-dev.txt)
# with their dependencies as wheels for the GPU machine's Python 3.12, and
# kubernetes.core from the venv's ansible package (Galaxy is not reachable).
PY_VERSION=3.12
# Their dependencies at the venv's versions (pip freeze as constraints), so the
# GPU machine runs what the tests here ran.
wheel_pins() { grep -hE '^(ansible-core|kubernetes)==' requirements-dev.txt | sort; }
wheel_constraints() { "$LAB_ROOT/.venv/bin/pip" freeze 2>/dev/null | grep -E '^[A-Za-z0-9_.-]+==' | sort; }
wheels_dir() { echo "$K8SGPU_CACHE/k8s-node/wheels-py$PY_VERSION-$({ wheel_pins; wheel_constraints; } | sha256sum | cut -c1-16)"; }
fetch_wheels() {
  local out; out=$(wheels_dir)
  if [ -f "$out/pins" ]; then log "wheels: cached in $out"; return; fi
  local pip=("$LAB_ROOT/.venv/bin/pip"); [ -x "${pip[0]}" ] || pip=(python3 -m pip)
  mapfile -t pins < <(wheel_pins)
  [ "${#pins[@]}" -eq 2 ] || die "requirements-dev.txt must pin ansible-core and kubernetes (found: ${pins[*]})"
  log "wheels: downloading ${pins[*]} and their dependencies for Python $PY_VERSION"
  rm -rf "$out.tmp"; mkdir -p "$out.tmp"
  wheel_constraints >"$out.tmp/constraints.txt"
  local platforms=() n
  for n in 17 27 28; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
  run_build "wheels" "$K8SGPU_CACHE/k8s-node/wheels.log" \
    "${pip[@]}" download -q --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
      "${platforms[@]}" --platform manylinux2014_x86_64 -c "$out.tmp/constraints.txt" -d "$out.tmp" "${pins[@]}"
  printf '%s\n' "${pins[@]}" >"$out.tmp/pins"
  rm -rf "$out"; mv "$out.tmp" "$out"
  log "wheels: $(find "$out" -maxdepth 1 -name '*.whl' | wc -l) in $out"
}

# The two carries. xz -9 (XZ_LEVEL): decompressing on the GPU machine takes seconds.
pack() {
  local debian; debian=$(debian_dir)
  local one=$BUNDLE/1 two=$BUNDLE/2
  local stamp
  stamp="$(basename "$debian") k8s $K8S_VERSION ($(basename "$(k8s_node_bin_dir)")), etcd $ETCD_VERSION, device plugin $DEVICE_PLUGIN_VERSION, pause $PAUSE_VERSION, cuda-vector-add $(cat tests/gpu/cuda-vector-add/* plugins/module_utils/_cuda_driver.py | sha256sum | cut -c1-12), $(tr '\n' ' ' <"$debian/packages"), $(tr '\n' ' ' <"$(wheels_dir)/pins")$([ "$XZ_LEVEL" = 9 ] || echo ", xz -$XZ_LEVEL")"
  if [ -f "$BUNDLE/stamp" ] && [ "$(cat "$BUNDLE/stamp")" = "$stamp" ] && [ -f "$two/images.tar.xz" ]; then
    log "bundle: up to date in $BUNDLE"
  else
    rm -rf "$BUNDLE"; mkdir -p "$one" "$two/images/bin" "$two/images/libc"
    log "bundle: compressing into $BUNDLE with xz -$XZ_LEVEL (at 9 about 2.5 min)"
    xz -T0 "-$XZ_LEVEL" -c "$(k8s_node_bin_dir)/k8s-node" >"$one/k8s-node.xz"
    xz -T0 "-$XZ_LEVEL" -c "$(etcd_bin_dir)/etcd" >"$one/etcd.xz"
    tar -C "$debian/runtime" -cf - containerd containerd-shim-runc-v2 runc | xz -T0 "-$XZ_LEVEL" >"$one/containerd.tar.xz"
    tar -C "$debian/runtime" -cf - ctr | xz -T0 "-$XZ_LEVEL" >"$two/ctr.tar.xz"
    tar -C "$debian/cni" -cf - . | xz -T0 "-$XZ_LEVEL" >"$two/cni.tar.xz"
    # The images' contents; tests/gpu/k8s-node/mkimage.py assembles them there.
    local work; work=$(mktemp -d)
    mkdir -p "$work/bin"
    cp "$K8SGPU_CACHE/bin/pause-$PAUSE_VERSION/pause" "$(device_plugin_bin_dir)/nvidia-device-plugin" "$work/bin/"
    "$LAB_ROOT/tests/gpu/cuda-vector-add/build.sh" "$work/bin"
    cp -a "$debian/libc" "$work/libc"
    tar -C "$work" -cf - bin libc | xz -T0 "-$XZ_LEVEL" >"$two/images.tar.xz"
    rm -rf "$work" "$two/images"
    cp -r "$(wheels_dir)" "$two/whl"
    local venv_site; venv_site=$("$LAB_ROOT/.venv/bin/python" -c 'import ansible_collections, os; print(os.path.dirname(ansible_collections.__path__[0]))')
    tar -C "$venv_site" --exclude=tests --exclude='*.pyc' -cf - ansible_collections/kubernetes/core | xz -T0 "-$XZ_LEVEL" >"$two/collections.tar.xz"
    cp -r "$(toolkit_repo_dir)" "$two/toolkit-repo"
    echo "$stamp" >"$BUNDLE/stamp"
  fi
  du -sh "$one" "$two" | sed 's/^/[bundle] /' >&2
}

main() {
  case "${1:-all}" in
    k8s-node) build_k8s_node ;;
    device-plugin) build_device_plugin ;;
    debian) fetch_debian ;;
    pause) build_pause ;;
    wheels) fetch_wheels ;;
    all) build_k8s_node; "$LAB_ROOT/lab/build-binaries.sh" etcd toolkit
         build_device_plugin; fetch_debian; build_pause; fetch_wheels; pack ;;
    *) die "usage: $0 [all|k8s-node|device-plugin|debian|pause|wheels]" ;;
  esac
}
# One packer at a time: `make test` starts one in the background (prebuild)
# and the rehearsal test runs its own, which then waits and finds it packed.
mkdir -p "$K8SGPU_CACHE"
exec 8>"$K8SGPU_CACHE/.pack-k8s-node.lock"
flock 8
main "$@"
