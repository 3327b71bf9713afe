#!/usr/bin/env bash
# Build the lab's Kubernetes control plane, etcd and kwok from the Go module
# proxy. No prebuilt binary is downloaded. Results are cached by version under
# $K8SGPU_CACHE/bin and rebuilt only when missing.
source "$(dirname "$0")/lib.sh"

need_cmd go "install Go 1.26 or newer (Debian: golang from bookworm-backports, or go.dev)."

# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces the staging
# modules with ./staging/src paths that module zips lack. A wrapper module
# requires it and maps each staging module to its published v0.Y.Z release.
build_kubernetes() {
  local out; out="$(k8s_bin_dir)"
  if [ -x "$out/kube-apiserver" ] && [ -x "$out/kube-controller-manager" ] \
     && [ -x "$out/kube-scheduler" ] && [ -x "$out/kubectl" ]; then
    log "kubernetes $K8S_VERSION: cached in $out"; return
  fi
  need_space "$K8SGPU_CACHE" 6000
  local src="$K8SGPU_CACHE/src/kubernetes-$K8S_VERSION" staging_ver="v0.${K8S_VERSION#v1.}"
  log "kubernetes $K8S_VERSION: building from the Go module proxy (first time: 15-30 min on 2 cores)"
  rm -rf "$src"; mkdir -p "$src"
  local modfile
  modfile=$(GOFLAGS="" go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$modfile" ] || die "could not fetch k8s.io/kubernetes@$K8S_VERSION's go.mod from the Go module proxy"
  {
    echo "module k8sgpu.local/lab/kubernetes"
    echo
    grep -m1 '^go ' "$modfile"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging_ver"'#p' "$modfile"
    echo ")"
  } >"$src/go.mod"
  cat >"$src/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  local pkg="k8s.io/component-base/version"
  local minor ldflags
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  ldflags="-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
  run_build "kubernetes $K8S_VERSION (go mod tidy)" "$src/tidy.log" \
    bash -c "cd '$src' && go mod tidy"
  mkdir -p "$out.tmp"
  run_build "kubernetes $K8S_VERSION (go build)" "$src/build.log" \
    bash -c "cd '$src' && go build -trimpath -ldflags '$ldflags' -o '$out.tmp/' \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl"
  rm -rf "$out"; mv "$out.tmp" "$out"
  log "kubernetes $K8S_VERSION: built into $out"
}

# etcd's root module (the etcd binary) also replaces its sub-modules with
# local paths; go.etcd.io/etcd/server/v3 does not, and its etcdmain package is
# the whole server. A three-line main is the etcd binary.
build_etcd() {
  local out; out="$(etcd_bin_dir)"
  if [ -x "$out/etcd" ]; then log "etcd $ETCD_VERSION: cached in $out"; return; fi
  local src="$K8SGPU_CACHE/src/etcd-$ETCD_VERSION"
  log "etcd $ETCD_VERSION: building from the Go module proxy"
  rm -rf "$src"; mkdir -p "$src" "$out.tmp"
  cat >"$src/go.mod" <<GO
module k8sgpu.local/lab/etcd

go 1.24

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
GO
  cat >"$src/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  run_build "etcd $ETCD_VERSION (go mod tidy)" "$src/tidy.log" bash -c "cd '$src' && go mod tidy"
  run_build "etcd $ETCD_VERSION (go build)" "$src/build.log" \
    bash -c "cd '$src' && go build -trimpath -ldflags '-s -w' -o '$out.tmp/etcd' ."
  rm -rf "$out"; mv "$out.tmp" "$out"
  log "etcd $ETCD_VERSION: built into $out"
}

build_kwok() {
  local out; out="$(kwok_bin_dir)"
  if [ -x "$out/kwok" ] && [ -x "$out/kwokctl" ]; then log "kwok $KWOK_VERSION: cached in $out"; return; fi
  log "kwok $KWOK_VERSION: building from the Go module proxy"
  mkdir -p "$out.tmp"
  run_build "kwok $KWOK_VERSION" "$K8SGPU_CACHE/src/kwok-$KWOK_VERSION.log" \
    env GOBIN="$out.tmp" GOFLAGS= go install -trimpath -ldflags '-s -w' \
      "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION"
  rm -rf "$out"; mv "$out.tmp" "$out"
  log "kwok $KWOK_VERSION: built into $out"
}

# CRI-O's own configuration loader (github.com/cri-o/cri-o/pkg/config) as a
# small program (tests/lab/crio_config), so tests read the configuration CRI-O
# would load from a main file and its drop-in directory. Debian has no CRI-O.
crio_config_version() { sed -n 's/^require github.com\/cri-o\/cri-o \(v[^ ]*\)$/\1/p' "$LAB_ROOT/tests/lab/crio_config/go.mod"; }
build_crio_config() {
  local version out; version=$(crio_config_version); out="$K8SGPU_CACHE/bin/crio-config-$version"
  [ -n "$version" ] || die "no 'require github.com/cri-o/cri-o vX' line in tests/lab/crio_config/go.mod"
  if [ -x "$out" ]; then log "crio-config $version: cached in $out"; return; fi
  log "crio-config $version: building CRI-O's config loader from the Go module proxy"
  mkdir -p "$(dirname "$out")"
  # cri-o pins a containerd/nri pseudo-version that the proxy serves but the
  # checksum database does not list.
  run_build "crio-config $version" "$K8SGPU_CACHE/src/crio-config-$version.log" \
    env -C "$LAB_ROOT/tests/lab/crio_config" GONOSUMDB=github.com/containerd/nri \
      go build -trimpath -tags 'containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper' \
      -ldflags '-s -w' -o "$out.tmp" .
  mv "$out.tmp" "$out"
  log "crio-config $version: built into $out"
}

# Prometheus and promtool (one module; without the builtinassets tag the web UI
# is absent, the HTTP API is whole). Of the service discoveries only
# Kubernetes' (the dcgm exporter's scrape job) and the always-built static,
# file and HTTP ones: Prometheus's own build tags leave out the cloud SDKs
# (AWS, Azure, GCE...), the bulk of a cold build. A full build in the cache
# (made before this) serves the tests as well.
build_prometheus() {
  local out; out="$(prometheus_bin_dir)"
  if [ -x "$out/prometheus" ] && [ -x "$out/promtool" ]; then log "prometheus $PROMETHEUS_VERSION: cached in $out"; return; fi
  log "prometheus $PROMETHEUS_VERSION: building prometheus and promtool from the Go module proxy"
  mkdir -p "$out.tmp"
  run_build "prometheus $PROMETHEUS_VERSION" "$K8SGPU_CACHE/src/prometheus-$PROMETHEUS_VERSION.log" \
    env GOBIN="$out.tmp" GOFLAGS= go install -trimpath -ldflags '-s -w' -tags 'remove_all_sd enable_kubernetes_sd' \
      "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION" \
      "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"
  rm -rf "$out"; mv "$out.tmp" "$out"
  log "prometheus $PROMETHEUS_VERSION: built into $out"
}

# prometheus-adapter: `go install ...@v0.12.0` looks up the module's version
# list, which the proxy refuses; a wrapper module that requires the exact
# version builds it.
build_adapter() {
  local out; out="$(adapter_bin_dir)"
  if [ -x "$out/adapter" ]; then log "prometheus-adapter $PROMETHEUS_ADAPTER_VERSION: cached in $out"; return; fi
  local src="$K8SGPU_CACHE/src/prometheus-adapter-$PROMETHEUS_ADAPTER_VERSION"
  log "prometheus-adapter $PROMETHEUS_ADAPTER_VERSION: building from the Go module proxy"
  rm -rf "$src"; mkdir -p "$src" "$out.tmp"
  cat >"$src/go.mod" <<GO
module k8sgpu.local/lab/prometheus-adapter

go 1.24

require sigs.k8s.io/prometheus-adapter $PROMETHEUS_ADAPTER_VERSION
GO
  cat >"$src/tools.go" <<'GO'
//go:build tools

package tools

import _ "sigs.k8s.io/prometheus-adapter/cmd/adapter"
GO
  run_build "prometheus-adapter (go mod tidy)" "$src/tidy.log" bash -c "cd '$src' && go mod tidy"
  run_build "prometheus-adapter (go build)" "$src/build.log" \
    bash -c "cd '$src' && go build -trimpath -ldflags '-s -w' -o '$out.tmp/adapter' sigs.k8s.io/prometheus-adapter/cmd/adapter"
  rm -rf "$out"; mv "$out.tmp" "$out"
  log "prometheus-adapter $PROMETHEUS_ADAPTER_VERSION: built into $out"
}

# Karpenter's core with its kwok cloud provider (made for tests: instance
# types from a file, nodes created as kwok nodes).
build_karpenter() {
  local out; out="$(karpenter_bin_dir)"
  if [ -x "$out/kwok" ]; then log "karpenter $KARPENTER_VERSION (kwok provider): cached in $out"; return; fi
  log "karpenter $KARPENTER_VERSION: building its kwok provider from the Go module proxy"
  mkdir -p "$out.tmp"
  run_build "karpenter $KARPENTER_VERSION" "$K8SGPU_CACHE/src/karpenter-$KARPENTER_VERSION.log" \
    env GOBIN="$out.tmp" GOFLAGS= go install -trimpath -ldflags '-s -w' "sigs.k8s.io/karpenter/kwok@$KARPENTER_VERSION"
  rm -rf "$out"; mv "$out.tmp" "$out"
  log "karpenter $KARPENTER_VERSION (kwok provider): built into $out"
}

# Helm, for the lab tests of the roles that install charts through kubernetes.core.helm (prometheus_stack). Built
# with the release's version flags, as Helm's own Makefile links it: a plain `go install` gives a Helm that says
# v3.22 without a patch level and believes every cluster is Kubernetes v1.20 (chartutil's default capabilities,
# which `helm template` and `helm lint` use), and refuses charts with a later kubeVersion. The Kubernetes version
# linked in is that of the client-go Helm is built with (its go.mod), as Helm's Makefile does.
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
helm_bin_dir() { echo "$K8SGPU_CACHE/bin/helm-$HELM_VERSION"; }
build_helm() {
  local out; out="$(helm_bin_dir)"
  if [ -x "$out/helm" ]; then log "helm $HELM_VERSION: cached in $out"; return; fi
  log "helm $HELM_VERSION: building from the Go module proxy"
  local modfile minor pkg="helm.sh/helm/v3" ldflags
  modfile=$(GOFLAGS="" go mod download -json "$pkg@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$modfile" ] || die "could not fetch $pkg@$HELM_VERSION's go.mod from the Go module proxy"
  minor=$(sed -n 's#^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$modfile" | head -n1)
  [ -n "$minor" ] || die "no k8s.io/client-go requirement in $pkg@$HELM_VERSION's go.mod"
  ldflags="-s -w -X $pkg/internal/version.version=$HELM_VERSION -X $pkg/internal/version.gitTreeState=clean"
  ldflags="$ldflags -X $pkg/pkg/lint/rules.k8sVersionMajor=1 -X $pkg/pkg/lint/rules.k8sVersionMinor=$minor"
  ldflags="$ldflags -X $pkg/pkg/chartutil.k8sVersionMajor=1 -X $pkg/pkg/chartutil.k8sVersionMinor=$minor"
  mkdir -p "$out.tmp"
  run_build "helm $HELM_VERSION" "$K8SGPU_CACHE/src/helm-$HELM_VERSION.log" \
    env GOBIN="$out.tmp" GOFLAGS= go install -trimpath -ldflags "$ldflags" "$pkg/cmd/helm@$HELM_VERSION"
  rm -rf "$out"; mv "$out.tmp" "$out"
  log "helm $HELM_VERSION: built into $out"
}

# Alertmanager, for the lab test that sends the GPU alerts through the configuration kube-prometheus-stack renders
# (tests/lab/test_prometheus_stack.py). v0.31.1: the last release whose module carries its web UI's assets (later
# ones embed ui/app/dist, which is built outside Go and absent from the module zip).
ALERTMANAGER_VERSION="${ALERTMANAGER_VERSION:-v0.31.1}"
alertmanager_bin_dir() { echo "$K8SGPU_CACHE/bin/alertmanager-$ALERTMANAGER_VERSION"; }
build_alertmanager() {
  local out; out="$(alertmanager_bin_dir)"
  if [ -x "$out/alertmanager" ]; then log "alertmanager $ALERTMANAGER_VERSION: cached in $out"; return; fi
  log "alertmanager $ALERTMANAGER_VERSION: building from the Go module proxy"
  mkdir -p "$out.tmp"
  run_build "alertmanager $ALERTMANAGER_VERSION" "$K8SGPU_CACHE/src/alertmanager-$ALERTMANAGER_VERSION.log" \
    env GOBIN="$out.tmp" GOFLAGS= go install -trimpath -ldflags '-s -w' \
      "github.com/prometheus/alertmanager/cmd/alertmanager@$ALERTMANAGER_VERSION"
  rm -rf "$out"; mv "$out.tmp" "$out"
  log "alertmanager $ALERTMANAGER_VERSION: built into $out"
}

# What `lab.sh up` (and so `make site`) needs: the container toolkit's apt
# repository (first: molecule needs it, not the cluster), kwok and the control
# plane. The rest only tests use; they build it when they run
# (tests/lab/conftest.py), and `make test`'s prebuild builds it in the
# background meanwhile.
LAB_TARGETS=(toolkit kwok etcd kubernetes)
# helm and alertmanager first: test_prometheus_stack.py and test_device_plugin_helm.py are not LATE_BUILDS files (they
# run in the lab tests' alphabetical order), the others' tests run last.
EXTRA_TARGETS=(helm alertmanager crio-config prometheus adapter karpenter)
USAGE="usage: $0 [all|lab|extras|TARGET...]; lab: ${LAB_TARGETS[*]}; extras: ${EXTRA_TARGETS[*]}"

# One builder per target and cache: a second one (`lab.sh up` while `make
# test`'s prebuild builds, or a test) waits for the first, then finds the
# result cached. Builds of different targets run side by side; the Go module
# and build caches lock their own files.
build_target() {
  local target="$1" lock="$K8SGPU_CACHE/.build-$1.lock" fd
  exec {fd}>"$lock"
  if ! flock -n "$fd"; then
    log "$target: another build of it is running (lock $lock); waiting for it"
    flock "$fd"
  fi
  # Without the lock's descriptor: a daemon the build starts (gpg-agent) would
  # otherwise hold the lock for as long as it runs.
  build_one "$target" {fd}>&-
  exec {fd}>&-
}

build_one() {
  case "$1" in
    kubernetes) build_kubernetes ;;
    etcd) build_etcd ;;
    kwok) build_kwok ;;
    toolkit) "$LAB_ROOT/lab/build-toolkit-repo.sh" >/dev/null ;;
    crio-config) build_crio_config ;;
    prometheus) build_prometheus ;;
    adapter) build_adapter ;;
    karpenter) build_karpenter ;;
    helm) build_helm ;;
    alertmanager) build_alertmanager ;;
  esac
}

main() {
  local targets=() arg t
  [ "$#" -gt 0 ] || set -- all
  for arg in "$@"; do
    case "$arg" in
      all) targets+=("${LAB_TARGETS[@]}" "${EXTRA_TARGETS[@]}") ;;
      lab) targets+=("${LAB_TARGETS[@]}") ;;
      extras) targets+=("${EXTRA_TARGETS[@]}") ;;
      *)
        case " ${LAB_TARGETS[*]} ${EXTRA_TARGETS[*]} " in
          *" $arg "*) targets+=("$arg") ;;
          *) die "unknown target '$arg'; $USAGE" ;;
        esac ;;
    esac
  done
  mkdir -p "$K8SGPU_CACHE"
  for t in "${targets[@]}"; do build_target "$t"; done
}
main "$@"
